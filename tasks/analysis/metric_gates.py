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
(``stats.verdict_from_ci``): a ratio whose interval lies above 1 and reaches past ``1 + tolerance`` is a regression."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple, Protocol

from pydantic import BaseModel

from tasks.analysis import sequential
from tasks.analysis.stats import verdict_from_ci
from tasks.records import Verdict

#: a repeated interval's log half-width is capped here (an early look of 1 degree of freedom has a t boundary of
#: 1e6 and more): a capped interval is still finite (stored as JSON) and undecided
LOG_CAP = 50.0


class ProcessMetric(NamedTuple):
    """One figure each process of a paired gate measures once per version.

    Attributes:
        a_field, b_field: the baseline's and the candidate's field on a process's samples (``a_cold_step_ms``).
        metric, unit: the figure's name and unit in records and reasons (``cold_step_ms``, ``ms``).
        tolerance_field: the ``Case`` field of its tolerance (None there: recorded, not judged).
        words: the figure in a verdict's reason.
        wall: whether it is wall time (then not judged on a busy host).
    """

    a_field: str
    b_field: str
    metric: str
    unit: str
    tolerance_field: str
    words: str
    wall: bool


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
    ),
    "model_memory": ProcessMetric(
        "a_model_rss_bytes",
        "b_model_rss_bytes",
        "model_rss_bytes",
        "bytes",
        "memory_tolerance",
        "the model's resident memory (load, build, cold step)",
        False,
    ),
}
#: the tolerance a figure's gate is recorded with when its case sets none (not judged then)
RECORD_TOLERANCE = 0.5


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
    b_first: Sequence[bool],
    *,
    metric: str,
    unit: str,
    tolerance: float,
    confidence: float,
    looks: Sequence[int] | None = None,
    max_processes: int | None = None,
) -> ProcessMetricGate:
    """The gate of a figure measured once per version in each of K processes (module docstring).

    Args:
        a, b: the baseline's (A) and the candidate's (B) figure in each process (``unit``, > 0).
        b_first: per process, whether B was set up first (``PairedResult.first_built == "B"``).
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
    if not (len(b) == len(b_first) == k) or k == 0:
        raise ValueError(
            f"{len(a)} baseline, {len(b)} candidate and {len(b_first)} order values: expected one each per process"
        )
    for side, xs in (("baseline", a), ("candidate", b)):
        for i, x in enumerate(xs):
            if not (isinstance(x, int | float) and math.isfinite(x) and x > 0):
                raise ValueError(f"{metric} of the {side} in process {i} = {x!r}: expected a finite value > 0 ({unit})")
    if not 0 < tolerance < 10:
        raise ValueError(f"tolerance = {tolerance!r}: expected a relative change > 0 (0.25 = 25%)")
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence = {confidence!r}: expected a level between 0.5 and 1")
    d = np.log(np.asarray(b, dtype=float)) - np.log(np.asarray(a, dtype=float))
    s = np.where(np.asarray(b_first, dtype=bool), 1.0, -1.0)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    medians = f"medians {_figure(med_a, unit)} -> {_figure(med_b, unit)}"

    def out(verdict: Verdict, reason: str, **kw: float | None) -> ProcessMetricGate:
        return ProcessMetricGate(
            metric=metric,
            unit=unit,
            processes=k,
            baseline_median=med_a,
            candidate_median=med_b,
            ratio=kw.get("ratio"),
            ci_low=kw.get("ci_low"),
            ci_high=kw.get("ci_high"),
            order_ratio=kw.get("order_ratio"),
            verdict=verdict,
            tolerance=tolerance,
            confidence=confidence,
            reason=reason,
        )

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
    if looks and max_processes:
        steps = zip(looks, looks[1:], strict=False)
        if any(not 0 < p <= max_processes for p in looks) or any(q <= p for p, q in steps):
            raise ValueError(f"looks {list(looks)}: expected increasing process counts in (0, {max_processes}]")
        z = sequential.boundaries(tuple(p / max_processes for p in looks), 1 - confidence)[-1]
        look = f"look {len(looks)}, "
    else:
        z, look = float(sps.norm.isf((1 - confidence) / 2)), ""
    half = min(float(sps.t.isf(sps.norm.sf(z), k - 2)) * float(fit.intercept_stderr), LOG_CAP)
    mu, beta = float(fit.intercept), float(fit.slope)
    ratio, low, high = math.exp(mu), math.exp(mu - half), math.exp(mu + half)
    verdict = verdict_from_ci(low, high, tolerance)
    reason = (
        f"{metric} ratio {ratio:.3f} [{low:.3f}, {high:.3f}] at {confidence:.0%} ({look}{k} processes; {medians}; "
        f"the version set up first paid x{math.exp(beta):.2f}, taken out), "
        f"tolerance {tolerance:.0%}: {verdict}"
    )
    return out(verdict, reason, ratio=ratio, ci_low=low, ci_high=high, order_ratio=math.exp(beta))


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
            gate is recorded at :data:`RECORD_TOLERANCE`.
        confidence, looks, max_processes: as :func:`process_metric_gate`.

    A figure no process recorded for both versions has no gate (absent from the result).
    """
    out = {}
    for key, m in PROCESS_METRICS.items():
        held = [
            (float(getattr(p, m.a_field)), float(getattr(p, m.b_field)), p.first_built == "B")
            for p in procs
            if p.first_built and (getattr(p, m.a_field) or 0) > 0 and (getattr(p, m.b_field) or 0) > 0
        ]
        if not held:
            continue
        tolerance = tolerances.get(m.tolerance_field)
        out[key] = process_metric_gate(
            [a for a, _, _ in held],
            [b for _, b, _ in held],
            [first for _, _, first in held],
            metric=m.metric,
            unit=m.unit,
            tolerance=tolerance if tolerance is not None else RECORD_TOLERANCE,
            confidence=confidence,
            looks=[p for p in looks if p <= len(held)] if looks else None,
            max_processes=max_processes,
        )
    return out


def undecided_gated(
    gates: Mapping[str, ProcessMetricGate], tolerances: Mapping[str, float | None], *, busy: bool
) -> list[str]:
    """The evidence keys of the figures a sequential gate still waits for: those whose case sets a tolerance,
    whose gate is ``inconclusive``, and that will be judged (a wall-time figure is not on a busy host). A figure
    the processes did not measure has no gate and is not waited for (more processes would not measure it)."""
    return [
        key
        for key, m in PROCESS_METRICS.items()
        if tolerances.get(m.tolerance_field) is not None
        and not (busy and m.wall)
        and key in gates
        and gates[key].verdict == Verdict.INCONCLUSIVE
    ]
