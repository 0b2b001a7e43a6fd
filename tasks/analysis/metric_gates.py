"""Gates on a figure each process of a paired gate measures once per version (issue 38, item 1). Pure functions.

A paired gate of K fresh processes measures both versions in each process (ABBA inside). Some figures exist once
per version and process, not per step: the **cold step** (the first step: tracing, and with XLA the compilation,
and one step; ms, our timer) and the **model's resident memory** (what the version's load, build and cold step
added to the process's resident set; bytes, ``/proc/self/statm``). The process is the unit: each process gives the
log ratio ``d_k = ln(B_k / A_k)`` of its two versions' figures.

The two versions of a process are set up one after the other, in an order drawn per process (``first_built``), and
the version set up first pays the process's one-time costs (TensorFlow's first graph, thread pools, oneDNN's first
primitives). So the model is a paired design with the order as a covariate (ordinary least squares): ``d_k = mu +
beta * s_k + e_k`` with ``s_k = +1`` when B was set up first and ``-1`` when A was; ``exp(mu)`` is the ratio of the
two versions' figures with the order's effect taken out, ``exp(beta)`` what being first costs, and the interval is
Student's t on ``mu`` with K - 2 degrees of freedom (``scipy.stats.linregress``). The gate looks after every process
round as the step-time gate does (``tasks.analysis.processes``), so the interval is a repeated confidence interval:
its z boundary is the O'Brien-Fleming-type boundary of the looks so far (Jennison & Turnbull 1999, ch. 9;
``sequential.boundaries``), carried to t with K - 2 degrees of freedom; a gate that goes on until each gated figure
has decided keeps its level over all looks. With every process in one order,
the order's effect cannot be told from the versions' (the verdict is ``inconclusive`` and says so); with two
processes or fewer there is no interval. The verdict on the interval is the step-time rule
(``stats.verdict_from_ci``): a ratio whose interval lies above 1 and reaches past ``1 + tolerance`` is a regression.

The model's resident memory does not fit that model: what the version set up second adds shares what the first
left behind, so it is not its own (measured: :func:`first_built_gate`). It is compared where each version was set
up first, between processes (:func:`first_built_gate`), as a process serving that version alone would hold it.

A cross-environment gate (``--baseline-env``, ``--baseline-runner``) runs each side in processes of its own, one of
each per process pair: there is no set-up order inside a process, the unit is the pair, and its figure is
``ln(B / A)`` of its two processes' cold steps and peak resident memory (the whole process: what a runtime upgrade
moves; :data:`ENVIRONMENT_METRICS`); the interval is the paired t interval over the pairs (K - 1 degrees of
freedom), repeated over the looks in the same way."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel

from tasks.analysis import processes, sequential
from tasks.analysis.stats import verdict_from_ci
from tasks.records import COLD_STEP_DEFAULT_TOLERANCE, MEMORY_DEFAULT_TOLERANCE, Verdict


class ProcessMetric(NamedTuple):
    """One figure each process of a paired gate measures once per version.

    Attributes:
        a_field, b_field: the baseline's and the candidate's field on a process's samples (``a_cold_step_ms``).
        metric, unit: the figure's name and unit in records and reasons (``cold_step_ms``, ``ms``).
        tolerance_field: the ``Case`` field of its tolerance; None there: judged at ``default_tolerance``
            (:func:`undecided_gated` says when the gate goes on for it).
        words: the figure in a verdict's reason.
        wall: whether it is wall time (then not judged on a busy host).
        first_only: each process gives the figure of the version it set up first only, and the gate compares
            the processes that set up B first with those that set up A first (:func:`first_built_gate`).
        default_tolerance: the tolerance it is judged at when the case sets none (:data:`DEFAULT_TOLERANCES`).
    """

    a_field: str
    b_field: str
    metric: str
    unit: str
    tolerance_field: str
    words: str
    wall: bool
    first_only: bool = False
    default_tolerance: float = 0.5


#: The figures gated beside step time, by evidence key.
PROCESS_METRICS: dict[str, ProcessMetric] = {
    "cold_step": ProcessMetric(
        "a_cold_step_ms",
        "b_cold_step_ms",
        "cold_step_ms",
        "ms",
        "cold_step_tolerance",
        "the cold step (tracing, compilation, one step)",
        True,
        default_tolerance=COLD_STEP_DEFAULT_TOLERANCE,
    ),
    "model_memory": ProcessMetric(
        "a_model_rss_bytes",
        "b_model_rss_bytes",
        "model_rss_bytes",
        "bytes",
        "memory_tolerance",
        "the model's resident memory (load, build, cold step)",
        False,
        True,
        default_tolerance=MEMORY_DEFAULT_TOLERANCE,
    ),
}
#: The figures each process of a cross-environment gate measures (one version in one environment per process), by
#: evidence key: a_field and b_field are the field on side A's and side B's ``ProfileResult``. The process is
#: the whole runtime here, so its peak resident memory is the figure (what a TensorFlow, CUDA or allocator upgrade
#: moves), not the model's share of it.
ENVIRONMENT_METRICS: dict[str, ProcessMetric] = {
    "cold_step": ProcessMetric(
        "cold_step_ms",
        "cold_step_ms",
        "cold_step_ms",
        "ms",
        "cold_step_tolerance",
        "the cold step (tracing, compilation, one step)",
        True,
        default_tolerance=COLD_STEP_DEFAULT_TOLERANCE,
    ),
    "process_memory": ProcessMetric(
        "peak_rss_bytes",
        "peak_rss_bytes",
        "peak_rss_bytes",
        "bytes",
        "memory_tolerance",
        "the process's peak resident memory (the runtime, the model and its steps)",
        False,
        default_tolerance=MEMORY_DEFAULT_TOLERANCE,
    ),
}
#: every figure by evidence key (a key means the same figure in both tables: the cold step)
METRICS: dict[str, ProcessMetric] = {**PROCESS_METRICS, **ENVIRONMENT_METRICS}
#: each figure's tolerance where its case sets none, by ``Case`` field (waited for only while it looks past it)
DEFAULT_TOLERANCES: dict[str, float] = {m.tolerance_field: m.default_tolerance for m in METRICS.values()}


class ProcessFigures(Protocol):
    """What a process of a paired gate gives these gates: ``PairedResult`` (the runner's) or ``PairedSamples``
    (the stored view) both do; the figures are read by :class:`ProcessMetric` field name."""

    @property
    def first_built(self) -> Literal["A", "B"] | None: ...


class ProcessMetricGate(BaseModel):
    """The gate of one per-process figure of both versions.

    Attributes:
        metric: the figure (``cold_step_ms``); unit: its unit (``ms``).
        processes: K, the processes that measured both versions.
        baseline_median, candidate_median: the medians of the K figures of A and of B (``unit``).
        ratio, ci_low, ci_high: B/A with the order's effect taken out, and its ``confidence`` interval (None
            without one: fewer than 3 processes, or every process in one order).
        order_ratio: what the version set up first paid, ``exp(beta)`` (None without both orders).
        verdict: the step-time rule on the interval (``inconclusive`` without one); tolerance, confidence: as
            judged.
        reason: the verdict in words.
    """

    metric: str
    unit: str
    processes: int
    baseline_median: float
    candidate_median: float
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    order_ratio: float | None
    verdict: Verdict
    tolerance: float
    confidence: float
    reason: str

    def figure_text(self) -> str:
        """The figure for a headline: ``model_rss_bytes ratio 1.311 [1.251, 1.374] at 99%, tolerance 20%`` (without
        an interval: ``model_rss_bytes: no interval``)."""
        if self.ratio is None or self.ci_low is None or self.ci_high is None:
            return f"{self.metric}: no interval"
        return (
            f"{self.metric} ratio {self.ratio:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}] at {self.confidence:.0%}, "
            f"tolerance {self.tolerance:.0%}"
        )


def process_metric_gate(
    a: Sequence[float],
    b: Sequence[float],
    b_first: Sequence[bool] | None,
    *,
    metric: str,
    unit: str,
    tolerance: float,
    confidence: float,
    looks: Sequence[int] | None = None,
    max_processes: int | None = None,
    unit_name: str = "processes",
    gated: bool = True,
) -> ProcessMetricGate:
    """The gate of a figure measured once per version in each of K processes (module docstring).

    Args:
        a, b: the baseline's (A) and the candidate's (B) figure in each process (``unit``, > 0).
        b_first: per process, whether B was set up first (``PairedResult.first_built == "B"``); None where each
            version (environment) has processes of its own (a cross-environment gate's process pairs): no order to
            take out, so the interval is the paired t interval of the mean log ratio, K - 1 degrees of freedom.
        unit_name: what the K units are called in the reason (``processes``, ``process pairs``).
        gated: the case gives the figure its tolerance and the gate waits for it; False: ``tolerance`` is the
            figure's default (:data:`DEFAULT_TOLERANCES`; :func:`undecided_gated`), and its reason says so.
        metric, unit: names for the record and the reason (``cold_step_ms``, ``ms``).
        tolerance: the relative change that counts (0.25 = 25%); confidence: of all the looks' intervals together.
        looks, max_processes: the processes at each look of the gate so far and its budget: the interval is the
            repeated one of the last look; without them, one look at the end (the fixed t interval).

    Raises:
        ValueError: lengths differ, no process, a figure not finite and > 0 (names the side and process), a
            tolerance or confidence out of range, looks not increasing within ``(0, max_processes]``.
    """
    import numpy as np
    from scipy import stats as sps

    k = len(a)
    if not (len(b) == (k if b_first is None else len(b_first)) == k) or k == 0:
        n_order = "no" if b_first is None else len(b_first)
        raise ValueError(
            f"{len(a)} baseline, {len(b)} candidate and {n_order} order values: expected one each per process"
        )
    _check(a, b, metric=metric, unit=unit, tolerance=tolerance, confidence=confidence)
    d = np.log(np.asarray(b, dtype=float)) - np.log(np.asarray(a, dtype=float))
    med_a, med_b = float(np.median(a)), float(np.median(b))
    medians = _medians(med_a, med_b, unit)

    out = _outcome(metric, unit, k, (med_a, med_b), tolerance, confidence)

    z, look = _look_boundary(confidence, looks, max_processes)  # the repeated interval's (module docstring)
    if b_first is None:  # process pairs, one version (environment) per process: the paired t interval
        if k < 2 or float(np.std(d, ddof=1)) == 0.0:
            return out(Verdict.INCONCLUSIVE, f"{metric}: {k} {unit_name} give no interval ({medians})")
        mean, se = float(np.mean(d)), float(np.std(d, ddof=1)) / math.sqrt(k)
        ratio, low, high = _ratio_interval(mean, se, z, k - 1)
        verdict = verdict_from_ci(low, high, tolerance)
        reason = (
            f"{metric} ratio {ratio:.3f} [{low:.3f}, {high:.3f}] at {confidence:.0%} ({k} {unit_name}{look}; "
            f"{medians}), {_tolerance_text(tolerance, gated)}: {verdict}"
        )
        return out(verdict, reason, ratio=ratio, ci_low=low, ci_high=high)
    s = np.where(np.asarray(b_first, dtype=bool), 1.0, -1.0)
    both = bool((s > 0).any() and (s < 0).any())
    if not both:
        first = "B (the candidate)" if s[0] > 0 else "A (the baseline)"
        return out(
            Verdict.INCONCLUSIVE,
            f"{metric}: every one of the {k} process(es) set up {first} first, so what being first costs cannot be "
            f"told from the versions' difference ({medians})",
        )
    if k < 3:
        return out(
            Verdict.INCONCLUSIVE,
            f"{metric}: {k} processes give no interval with the order taken out (needs 3; {medians})",
        )
    fit = sps.linregress(s, d)  # d = mu + beta * s: intercept mu, slope beta, with the intercept's standard error
    mu, beta = float(fit.intercept), float(fit.slope)
    ratio, low, high = _ratio_interval(mu, float(fit.intercept_stderr), z, k - 2)
    verdict = verdict_from_ci(low, high, tolerance)
    reason = (
        f"{metric} ratio {ratio:.3f} [{low:.3f}, {high:.3f}] at {confidence:.0%} ({k} processes{look}; {medians}; "
        f"the version built first in a process paid x{math.exp(beta):.2f} for its one-time costs, taken out of the "
        "ratio), "
        f"{_tolerance_text(tolerance, gated)}: {verdict}"
    )
    return out(verdict, reason, ratio=ratio, ci_low=low, ci_high=high, order_ratio=math.exp(beta))


def first_built_gate(
    a: Sequence[float],
    b: Sequence[float],
    *,
    metric: str,
    unit: str,
    tolerance: float,
    confidence: float,
    looks: Sequence[int] | None = None,
    max_processes: int | None = None,
    gated: bool = True,
) -> ProcessMetricGate:
    """The gate of a figure taken only where its version was set up first in a process (the model's memory).

    Why: a version set up second in a process shares what the first left behind (TensorFlow's one-time state, the
    allocator's freed pages, oneDNN's primitive caches), so its resident-memory growth is not its own. Measured on
    ``demo_mobilenet`` v2 beside v1 (2026-12-07, load 3-6): set up second, v1 added -9, 18 and 35 MiB and v2 133-183
    MiB; set up first, v1 added 223-232 MiB and v2 306-326 MiB. The log ratio with the order as a covariate read
    x2.95 [0.83, 10.49] there. Set up first, each figure is what a process serving that version alone holds for it
    (its load, build and cold step with the runtime's one-time state), as a serving process does.

    The unit is the process, unpaired: ``ln`` of the figures of the processes that set up B first against those
    that set up A first, Welch's t interval on the difference of the means (Welch-Satterthwaite degrees of
    freedom), repeated over the looks as :func:`process_metric_gate`'s.

    Args:
        a, b: the figure of A in each process that set A up first, and of B in each that set B up first (> 0).
        metric, unit, tolerance, confidence, looks, max_processes, gated: as :func:`process_metric_gate`.

    Raises:
        ValueError: a figure not finite and > 0, a tolerance or confidence out of range, bad looks.
    """
    import numpy as np

    _check(a, b, metric=metric, unit=unit, tolerance=tolerance, confidence=confidence)
    k = len(a) + len(b)
    med_a = float(np.median(a)) if a else math.nan
    med_b = float(np.median(b)) if b else math.nan
    what = f"where set up first: {len(a)} process(es) of A, {len(b)} of B; {_medians(med_a, med_b, unit)}"

    out = _outcome(metric, unit, k, (med_a, med_b), tolerance, confidence)

    if len(a) < 2 or len(b) < 2:
        return out(Verdict.INCONCLUSIVE, f"{metric}: no interval, each version needs 2 processes ({what})")
    la, lb = np.log(np.asarray(a, dtype=float)), np.log(np.asarray(b, dtype=float))
    va, vb = float(la.var(ddof=1)) / len(a), float(lb.var(ddof=1)) / len(b)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return out(Verdict.INCONCLUSIVE, f"{metric}: no spread between processes, no interval ({what})")
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))  # Welch-Satterthwaite
    z, look = _look_boundary(confidence, looks, max_processes)
    ratio, low, high = _ratio_interval(float(lb.mean() - la.mean()), se, z, df)
    verdict = verdict_from_ci(low, high, tolerance)
    reason = (
        f"{metric} ratio {ratio:.3f} [{low:.3f}, {high:.3f}] at {confidence:.0%} ({k} processes{look}, each "
        f"version {what}), {_tolerance_text(tolerance, gated)}: {verdict}"
    )
    return out(verdict, reason, ratio=ratio, ci_low=low, ci_high=high)


def _outcome(
    metric: str, unit: str, k: int, medians: tuple[float, float], tolerance: float, confidence: float
) -> Callable[..., ProcessMetricGate]:
    """``out(verdict, reason, ratio=..., ci_low=..., ci_high=..., order_ratio=...)``: the gate's record with these
    fixed fields (``medians``: A's and B's, ``unit``)."""

    def out(verdict: Verdict, reason: str, **kw: float | None) -> ProcessMetricGate:
        return ProcessMetricGate(
            metric=metric,
            unit=unit,
            processes=k,
            baseline_median=medians[0],
            candidate_median=medians[1],
            tolerance=tolerance,
            confidence=confidence,
            verdict=verdict,
            reason=reason,
            **{f: kw.get(f) for f in ("ratio", "ci_low", "ci_high", "order_ratio")},
        )

    return out


def _ratio_interval(mean: float, se: float, z: float, df: float) -> tuple[float, float, float]:
    """``exp(mean)`` and its interval ``exp(mean -/+ t se)``, t the z boundary ``z`` carried to Student's t on ``df``
    degrees of freedom (``sequential.t_boundary``); the log half-width capped at ``processes.LOG_CAP`` (an early look
    of 1 degree of freedom has a t boundary of 1e6 and more: a capped interval is still finite, stored as JSON, and
    undecided)."""
    half = min(sequential.t_boundary(z, df) * se, processes.LOG_CAP)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def _check(
    a: Sequence[float], b: Sequence[float], *, metric: str, unit: str, tolerance: float, confidence: float
) -> None:
    """Both sides' figures finite and > 0, the tolerance and confidence in range.

    Raises:
        ValueError: names the side and process of a bad figure, or the bad tolerance or confidence.
    """
    for side, xs in (("baseline", a), ("candidate", b)):
        for i, x in enumerate(xs):
            if not (isinstance(x, int | float) and math.isfinite(x) and x > 0):
                raise ValueError(f"{metric} of the {side} in process {i} = {x!r}: expected a finite value > 0 ({unit})")
    if not 0 < tolerance < 10:
        raise ValueError(f"tolerance = {tolerance!r}: expected a relative change > 0 (0.25 = 25%)")
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence = {confidence!r}: expected a level between 0.5 and 1")


def _look_boundary(confidence: float, looks: Sequence[int] | None, max_processes: int | None) -> tuple[float, str]:
    """The z boundary of the last look (the O'Brien-Fleming-type spending over ``looks`` of ``max_processes``), and
    `` at the gate's look N`` for a reason; without looks, the fixed two-sided z of ``confidence`` and ``""``.

    Raises:
        ValueError: looks not increasing within ``(0, max_processes]``.
    """
    from scipy import stats as sps

    if not (looks and max_processes):
        return float(sps.norm.isf((1 - confidence) / 2)), ""
    steps = zip(looks, looks[1:], strict=False)
    if any(not 0 < p <= max_processes for p in looks) or any(q <= p for p, q in steps):
        raise ValueError(f"looks {list(looks)}: expected increasing process counts in (0, {max_processes}]")
    z = sequential.boundaries(tuple(p / max_processes for p in looks), 1 - confidence)[-1]
    return z, f" at the gate's look {len(looks)}"


def _tolerance_text(tolerance: float, gated: bool) -> str:
    """``tolerance 20%``, or for a figure at its default (its case sets none) ``default tolerance 25%``."""
    return f"tolerance {tolerance:.0%}" if gated else f"default tolerance {tolerance:.0%}"


def _medians(a: float, b: float, unit: str) -> str:
    """``medians 31.2 MiB -> 131.1 MiB (+99.9 MiB)``: both sides' medians and B's change (``unit``)."""
    change = f" ({'+' if b >= a else '-'}{_figure(abs(b - a), unit)})" if math.isfinite(a) and math.isfinite(b) else ""
    return f"medians {_figure(a, unit)} -> {_figure(b, unit)}{change}"


def _figure(x: float, unit: str) -> str:
    """``x`` in ``unit`` for a reason: bytes as MiB (``52.3 MiB``), anything else with one decimal (``4693.0 ms``)."""
    return f"{x / 2**20:.1f} MiB" if unit == "bytes" else f"{x:.1f} {unit}"


def process_gates(
    procs: Sequence[ProcessFigures],
    tolerances: Mapping[str, float | None],
    *,
    confidence: float,
    looks: Sequence[int] | None = None,
    max_processes: int | None = None,
) -> dict[str, ProcessMetricGate]:
    """The gates of every :data:`PROCESS_METRICS` figure over a paired gate's processes, by evidence key.

    Args:
        procs: the processes in measurement order; a process lacking a figure for either version, or its order
            (``first_built``), is left out of that figure's gate.
        tolerances: by ``tolerance_field`` (a ``Case``'s ``cold_step_tolerance``...): None or absent, the
            figure's ``default_tolerance`` (recorded ``gated`` False).
        confidence, looks, max_processes: as :func:`process_metric_gate`.

    A figure no process recorded for both versions has no gate (absent from the result).
    """
    out = {}
    for key, m in PROCESS_METRICS.items():
        tolerance = tolerances.get(m.tolerance_field)
        if m.first_only:
            firsts = {
                who: [float(getattr(p, field)) for p in procs if p.first_built == who and (getattr(p, field) or 0) > 0]
                for who, field in (("A", m.a_field), ("B", m.b_field))
            }
            if not (firsts["A"] or firsts["B"]):
                continue
            held_k = len(firsts["A"]) + len(firsts["B"])
            out[key] = first_built_gate(
                firsts["A"],
                firsts["B"],
                metric=m.metric,
                unit=m.unit,
                tolerance=tolerance if tolerance is not None else m.default_tolerance,
                confidence=confidence,
                looks=[p for p in looks if p <= held_k] if looks else None,
                max_processes=max_processes,
                gated=tolerance is not None,
            )
            continue
        held = [
            (float(getattr(p, m.a_field)), float(getattr(p, m.b_field)), p.first_built == "B")
            for p in procs
            if p.first_built and (getattr(p, m.a_field) or 0) > 0 and (getattr(p, m.b_field) or 0) > 0
        ]
        if not held:
            continue
        out[key] = process_metric_gate(
            [a for a, _, _ in held],
            [b for _, b, _ in held],
            [first for _, _, first in held],
            metric=m.metric,
            unit=m.unit,
            tolerance=tolerance if tolerance is not None else m.default_tolerance,
            confidence=confidence,
            looks=[p for p in looks if p <= len(held)] if looks else None,
            max_processes=max_processes,
            gated=tolerance is not None,
        )
    return out


def environment_gates(
    pairs: Sequence[tuple[Any, Any]],
    tolerances: Mapping[str, float | None],
    *,
    confidence: float,
    looks: Sequence[int] | None = None,
    max_processes: int | None = None,
) -> dict[str, ProcessMetricGate]:
    """The gates of every :data:`ENVIRONMENT_METRICS` figure over a cross-environment gate's process pairs, by
    evidence key: per pair ``ln(B / A)`` of its two processes' figures, the paired t interval (no set-up order to
    take out: each process holds one side), repeated over the gate's looks as :func:`process_metric_gate`.

    Args:
        pairs: per process pair in measurement order, (side A's, side B's) result (``ProfileResult``); a pair
            lacking a figure on either side is left out of that figure's gate.
        tolerances, confidence, looks, max_processes: as :func:`process_gates`.
    """
    out = {}
    for key, m in ENVIRONMENT_METRICS.items():
        held = [
            (float(getattr(a, m.a_field)), float(getattr(b, m.b_field)))
            for a, b in pairs
            if (getattr(a, m.a_field) or 0) > 0 and (getattr(b, m.b_field) or 0) > 0
        ]
        if not held:
            continue
        tolerance = tolerances.get(m.tolerance_field)
        out[key] = process_metric_gate(
            [a for a, _ in held],
            [b for _, b in held],
            None,
            metric=m.metric,
            unit=m.unit,
            tolerance=tolerance if tolerance is not None else m.default_tolerance,
            confidence=confidence,
            looks=[p for p in looks if p <= len(held)] if looks else None,
            max_processes=max_processes,
            unit_name="process pairs",
            gated=tolerance is not None,
        )
    return out


def undecided_gated(
    gates: Mapping[str, ProcessMetricGate], tolerances: Mapping[str, float | None], *, busy: bool
) -> list[str]:
    """The evidence keys of the figures a sequential gate still waits for, of those that will be judged (a
    wall-time figure is not on a busy host) and whose gate is ``inconclusive``: every one whose case sets a
    tolerance, and one at its default tolerance only while its estimate lies past that default (:func:`estimate`):
    a figure that looks like a regression is measured until the gate confirms or clears it, one that looks like no
    change costs no process. The intervals are repeated confidence intervals, valid whatever rule stops the gate
    (Jennison & Turnbull 1999, ch. 9), so stopping on the estimate keeps their level. A figure the processes did
    not measure has no gate and is not waited for (more processes would not measure it)."""
    waiting = []
    for key, gate in gates.items():
        m = METRICS[key]
        if busy and m.wall or gate.verdict != Verdict.INCONCLUSIVE:
            continue
        if tolerances.get(m.tolerance_field) is not None or estimate(gate) > 1 + m.default_tolerance:
            waiting.append(key)
    return waiting


def estimate(gate: ProcessMetricGate) -> float:
    """The figure's B/A as the gate estimates it: its ratio where it has an interval, else the ratio of the two
    sides' medians (fewer processes than an interval needs); NaN where neither exists."""
    if gate.ratio is not None:
        return gate.ratio
    a, b = gate.baseline_median, gate.candidate_median
    return b / a if a > 0 and math.isfinite(a) and math.isfinite(b) else math.nan
