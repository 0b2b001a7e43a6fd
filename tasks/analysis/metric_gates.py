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
Student's t on ``mu`` with K - 2 degrees of freedom (``scipy.stats.linregress``). With every process in one order,
the order's effect cannot be told from the versions' (the verdict is ``inconclusive`` and says so); with two
processes or fewer there is no interval. The verdict on the interval is the step-time rule
(``stats.verdict_from_ci``): a ratio whose interval lies above 1 and reaches past ``1 + tolerance`` is a regression."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel

from tasks.analysis.stats import verdict_from_ci
from tasks.records import Verdict


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


def process_metric_gate(
    a: Sequence[float],
    b: Sequence[float],
    b_first: Sequence[bool],
    *,
    metric: str,
    unit: str,
    tolerance: float,
    confidence: float,
) -> ProcessMetricGate:
    """The gate of a figure measured once per version in each of K processes (module docstring).

    Args:
        a, b: the baseline's (A) and the candidate's (B) figure in each process (``unit``, > 0).
        b_first: per process, whether B was set up first (``PairedResult.first_built == "B"``).
        metric, unit: names for the record and the reason (``cold_step_ms``, ``ms``).
        tolerance: the relative change that counts (0.25 = 25%); confidence: of the two-sided interval.

    Raises:
        ValueError: lengths differ, no process, a figure not finite and > 0 (names the side and process), a
            tolerance or confidence out of range.
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
    df = k - 2
    half = float(sps.t.ppf((1 + confidence) / 2, df)) * float(fit.intercept_stderr)
    mu, beta = float(fit.intercept), float(fit.slope)
    ratio, low, high = math.exp(mu), math.exp(mu - half), math.exp(mu + half)
    verdict = verdict_from_ci(low, high, tolerance)
    reason = (
        f"{metric} ratio {ratio:.3f} [{low:.3f}, {high:.3f}] at {confidence:.0%} over {k} processes ({medians}; "
        f"the version set up first paid x{math.exp(beta):.2f}, taken out), "
        f"tolerance {tolerance:.0%}: {verdict}"
    )
    return out(verdict, reason, ratio=ratio, ci_low=low, ci_high=high, order_ratio=math.exp(beta))


def _figure(x: float, unit: str) -> str:
    """``x`` in ``unit`` for a reason: bytes as MiB (``52.3 MiB``), anything else with one decimal (``4693.0 ms``)."""
    return f"{x / 2**20:.1f} MiB" if unit == "bytes" else f"{x:.1f} {unit}"
