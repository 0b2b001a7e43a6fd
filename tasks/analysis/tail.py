"""A paired gate on a tail percentile: the ratio of the candidate's p99 (or any percentile) to the baseline's.

A serving team fears the p99 latency of an inference case more than its median: a change that slows one batch
in fifty leaves the median where it was. The paired release gate (``tasks.analysis.sequential``,
``tasks.analysis.verdict``) judges the median of the pair log ratios; this module judges a percentile ``p`` of
the two versions' per-step times (``Case.gate_percentile``), from the same ABBA measurement.

The interval. For each version the distribution-free interval of its ``p``-th percentile from order statistics
(``tasks.analysis.percentiles.percentile_ci``: Conover 1999, sec. 3.2; the binomial count of samples below the
true percentile), each at level ``1 - alpha/2``. When both cover their percentiles, which by Bonferroni's
inequality happens with probability at least ``1 - alpha`` whatever the dependence between the two versions'
samples (they share the host and its drift: no independence is assumed), the ratio ``q_B / q_A`` lies in

    [ low_B / high_A,  high_B / low_A ]

so that is a two-sided ``1 - alpha`` interval of the percentile ratio (Hahn & Meeker, *Statistical Intervals*,
1991, sec. 5.2 for each interval; the Bonferroni combination of two exact intervals, conservative). The
process-level offset between model copies (``Offset.sd``, log scale, ``tasks.analysis.calibration``) widens it by
``exp(+-z_{1-alpha/2} * offset_sd)`` on each side: added linearly, not in quadrature, which is conservative.
The verdict is the median gate's rule on the interval (``stats.verdict_from_ci``): ``regression`` only when the
interval lies above 1 and past the tolerance band, ``pass`` when it lies below ``1 + tolerance``. An unchanged
candidate is called a regression only when A's upper bound or B's lower bound misses, at most ``alpha / 2 +
alpha / 2 = alpha`` (each bound of the shortest interval misses with at most its level's alpha, here ``alpha/2``).

Assumption and what the pairing buys. The order-statistic interval assumes each version's samples are
exchangeable (i.i.d.); ABBA blocks interleave the two versions in one process, so the host's slow drift enters
both versions' samples alike (the percentile compared is of the same time-mixture of host states), and a
drift cannot fake a tail change. Strong step-to-step correlation would make the per-version intervals too
narrow; ``perfwatch calibrate``'s A/A gates show it (their tail ratios should straddle 1).

The sample it needs, stated up front (:func:`min_arm_samples`): a two-sided interval of the ``p``-th percentile
at ``1 - alpha/2`` needs ``percentiles.min_samples(p, 1 - alpha/2)`` samples per version: for p99, 367 at 95%
and 528 at the Case default 99% (299 and 459 for one version's own two-sided interval). With fewer the verdict
is ``inconclusive (too few samples for p99: n=..., needs ...)``, and the reason says what the sample does
support (MLPerf's early-stopping idea, ``PercentileCI.text``: the bound a short run can vouch for). The tail
gate is a fixed-sample test at the gate's end: a paired gate with a tail percentile measures its whole budget
(``tasks.stages.profiled_run.paired_run``), never stopping at an early look of the median.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from scipy import stats as sps

from tasks.analysis import percentiles
from tasks.analysis.percentiles import level_text
from tasks.analysis.stats import verdict_from_ci
from tasks.records import Verdict

METHOD = "paired-abba tail: Bonferroni of two order-statistic intervals (Conover 1999, 3.2)"


def arm_confidence(confidence: float) -> float:
    """Each version's two-sided level, ``1 - (1 - confidence) / 2``: both cover together at ``confidence``."""
    return 1.0 - (1.0 - confidence) / 2.0


def min_arm_samples(percentile: float, confidence: float) -> int:
    """Samples per version a tail gate of ``percentile`` at two-sided ``confidence`` needs for an interval:
    ``percentiles.min_samples(percentile, arm_confidence(confidence))`` (p99: 367 at 0.95, 528 at 0.99).

    Raises:
        ValueError: ``percentile`` not in (0, 100) or ``confidence`` not in (0, 1).
    """
    return percentiles.min_samples(percentile, arm_confidence(confidence))


class TailComparison(BaseModel):
    """A tail gate's result (JSON-safe; ``evidence["tail"]`` of a paired verdict).

    Attributes:
        percentile: the percentile gated (99: p99); label: ``p99``.
        confidence: the two-sided level of the ratio interval; arm_confidence: each version's.
        tolerance: the verdict rule's t (0.05 = 5%).
        n_a, n_b: per-step samples of the baseline (A) and the candidate (B) it rests on.
        min_n: the samples per version it needs (:func:`min_arm_samples`); enough: both have that many.
        ratio: candidate over baseline of the nearest-rank percentiles (None without samples).
        ci_low, ci_high: the ratio's interval (module docstring); None when not ``enough``.
        offset_sd: the process-level offset added (log scale).
        a, b: each version's ``PercentileCI`` as a dict (ms, our timer).
        verdict, reason: the rule on the interval; ``inconclusive`` with "too few samples ..." when not enough.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    percentile: float
    label: str
    confidence: float
    arm_confidence: float
    tolerance: float
    n_a: int
    n_b: int
    min_n: int
    enough: bool
    ratio: float
    ci_low: float | None
    ci_high: float | None
    offset_sd: float
    a: dict[str, Any]
    b: dict[str, Any]
    verdict: Verdict
    reason: str
    method: str = METHOD


def compare_tail(
    a_ms: Sequence[float],
    b_ms: Sequence[float],
    percentile: float,
    *,
    confidence: float,
    tolerance: float,
    offset_sd: float = 0.0,
) -> TailComparison:
    """The tail gate of the module docstring on per-step times ``a_ms`` (baseline, A) and ``b_ms`` (candidate, B).

    Args:
        a_ms, b_ms: every timed step of each version in the gate's analysed pairs (ms, our timer), any order.
        percentile: the percentile gated, 0 < percentile < 100 (99).
        confidence: two-sided level of the ratio interval (the Case's, 0.99).
        tolerance: the verdict rule's t.
        offset_sd: the process-level offset between model copies (log scale, >= 0).

    Raises:
        ValueError: an empty, non-finite or non-positive sample (names A or B), a percentile, confidence or
            offset out of range.
    """
    if not (math.isfinite(offset_sd) and offset_sd >= 0):
        raise ValueError(f"offset_sd {offset_sd!r}: expected a finite sd >= 0 (log scale)")
    for who, xs in (("A (baseline)", a_ms), ("B (candidate)", b_ms)):
        if len(xs) == 0:
            raise ValueError(f"tail gate: no step times of {who}")
        if not all(math.isfinite(x) and x > 0 for x in xs):
            raise ValueError(f"tail gate: step times of {who} must be finite and > 0 ms")
    level = arm_confidence(confidence)
    a = percentiles.percentile_ci(a_ms, percentile, level)
    b = percentiles.percentile_ci(b_ms, percentile, level)
    label = f"p{percentile:g}"
    need = min_arm_samples(percentile, confidence)
    ratio = b.point / a.point
    common: dict[str, Any] = {
        "percentile": float(percentile),
        "label": label,
        "confidence": confidence,
        "arm_confidence": level,
        "tolerance": tolerance,
        "n_a": a.n,
        "n_b": b.n,
        "min_n": need,
        "ratio": ratio,
        "offset_sd": offset_sd,
        "a": a.as_dict(),
        "b": b.as_dict(),
    }
    if not (a.estimable and b.estimable):
        n = min(a.n, b.n)
        short = a if a.n <= b.n else b
        reach = (
            f" at {level_text(level)} per version {n} samples bound up to {short.reach_text()};"
            if short.supported_percentile
            else ""
        )

        def lower(r: percentiles.PercentileCI) -> str:
            return f"{label} >= {r.low:.2f} ms" if r.low is not None else "no bound"

        reason = (
            f"too few samples for {label}: n={n} per version, needs {need} (a two-sided "
            f"{level_text(confidence)} interval of the {label} ratio takes a {level_text(level)} interval of each "
            f"version's {label});{reach} what they support: baseline {lower(a)}, candidate {lower(b)} (lower "
            f"bounds only); point ratio {ratio:.3f}, not a verdict."
        )
        return TailComparison(
            **common, enough=False, ci_low=None, ci_high=None, verdict=Verdict.INCONCLUSIVE, reason=reason
        )
    assert a.low is not None and a.high is not None and b.low is not None and b.high is not None  # estimable
    widen = math.exp(float(sps.norm.isf((1.0 - confidence) / 2.0)) * offset_sd)
    low, high = b.low / a.high / widen, b.high / a.low * widen
    verdict = verdict_from_ci(low, high, tolerance)
    band = f"[{1 / (1 + tolerance):.3f}, {1 + tolerance:.3f}]"
    tail = {
        Verdict.PASS: f"the CI lies below {1 + tolerance:.3f}: the {label} is not slower than the tolerance allows",
        Verdict.REGRESSION: f"the CI lies above 1 and reaches past the band: the {label} is slower",
        Verdict.IMPROVEMENT: f"the CI lies below 1 and reaches past the band: the {label} is faster",
        Verdict.INCONCLUSIVE: "the CI holds 1 and reaches past the tolerance: too wide to decide",
    }[verdict]
    reason = (
        f"{label} gate: {label} ratio {ratio:.3f} (candidate {label} {b.point:.3f} ms [{b.low:.3f}, {b.high:.3f}] "
        f"n={b.n} / baseline {label} {a.point:.3f} ms [{a.low:.3f}, {a.high:.3f}] n={a.n}, each at "
        f"{level_text(level)}), {level_text(confidence)} CI [{low:.3f}, {high:.3f}] from order statistics (n={a.n} "
        f"and {b.n}, each version's {label} at {level_text(level)}"
        + (f", offset sd {offset_sd:.3f}" if offset_sd else "")
        + f"), tolerance band "
        f"{band}; {tail}."
    )
    return TailComparison(**common, enough=True, ci_low=low, ci_high=high, verdict=verdict, reason=reason)


def combine(median: Verdict, tail: Verdict) -> Verdict:
    """The gate's verdict from the median gate's and the tail gate's: ``regression`` when either is; else
    ``inconclusive`` when either is (a tail the sample cannot judge is not a pass); else ``improvement`` when
    the median improved (the tail passing or improving); else ``pass``."""
    if Verdict.REGRESSION in (median, tail):
        return Verdict.REGRESSION
    if Verdict.INCONCLUSIVE in (median, tail):
        return Verdict.INCONCLUSIVE
    if median == Verdict.IMPROVEMENT:
        return Verdict.IMPROVEMENT
    return Verdict.PASS
