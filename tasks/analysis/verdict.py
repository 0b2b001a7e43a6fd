"""The verdict of baseline-compare, decided from plain values (no store, no files, no GX).

``decide`` takes the candidate's measured step times (ms, our timer), the baseline runs' samples as
``tasks.store.reads.CompareInputs`` gathered them, and for a paired gate the ABBA blocks of the
baseline version (A) and the candidate (B), and returns the verdict with its estimate, interval,
the GX step-time ceiling and the evidence:

* same-environment lookback history: ``stats.compare_to_history`` with the calibrated drift prior
  (``calibration.prior_for_case``), method ``history-lookback``;
* no baseline in this environment but one in another: ``stats.median_ratio_ci`` against it, verdict
  ``env-changed`` naming the comparability fields that changed;
* neither: ``no-baseline``;
* paired gate: ``stats.compare_paired`` on the block pairs (method ``paired-abba``) with the
  process-level offset (``calibration.paired_offset_for_case``); the history verdict is kept as
  ``evidence["history"]`` and the ceiling then applies to the paired samples.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.analysis import calibration, stats
from tasks.analysis.environment import diff_fingerprints

DEFAULT_MAX_RATIO = 1.10  #: the GX ceiling is never below this × the baseline median
HARD_MAX_RATIO = 1.50  #: ... and never above this, whatever the statistical uncertainty


@dataclass(frozen=True)
class PairedBlocks:
    """A paired gate's measurement: per-step ms of each block of A (baseline) and B (candidate), and the
    layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``, ``orders``)."""

    a: list[list[float]]
    b: list[list[float]]
    layout: dict[str, Any]


@dataclass
class Decision:
    """What the statistics decided, before GX validates it.

    ``limit``: the GX step-time ceiling (ms) or None without a baseline; ``paired_b``: the candidate's
    paired step times (ms) that the ceiling applies to (None for an unpaired run).
    """

    verdict: str
    method: str
    baseline_run_ids: list[int]
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    limit: float | None = None
    paired_b: list[float] | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def ceiling_ms(reference_ms: float, result: stats.Comparison, max_ratio: float = DEFAULT_MAX_RATIO,
               hard_ratio: float = HARD_MAX_RATIO) -> float:
    """The GX step-time ceiling (ms) passed to the suite as ``median_limit_ms``.

    ``reference_ms × min(hard_ratio, max(max_ratio, (1 + tolerance) × ci_high / ratio))``: at least
    the fixed ceiling (110% by default), widened by the comparison's own upper uncertainty so
    that it is breached only by a median beyond the tolerance *and* beyond what the measured
    noise and drift explain — a plain 110% rule against drift-prone history raised 18–22% false
    alarms on this machine (``bench/detection.py``) — but never above ``hard_ratio`` (150%): a
    median half again the baseline's is a regression even when too few baseline runs exist to
    estimate the drift (6 sd of the drift measured here).
    """
    widen = (1 + result.tolerance) * (result.ci_high / result.ratio) if result.ci_high and result.ratio else 1.0
    return reference_ms * min(hard_ratio, max(max_ratio, widen))


def usable_baselines(samples: Mapping[int, list[float]], run_ids: list[int]) -> tuple[list[int], list[dict[str, Any]]]:
    """Split ``run_ids`` into those whose measured samples can be compared and the skipped ones.

    A run is skipped (``{"run_id", "reason"}``) with fewer than ``stats.MIN_STEPS`` measured
    steps or a NaN, infinite or non-positive step time (ms); the reason names the count or value.
    """
    good, skipped = [], []
    for rid in run_ids:
        xs = samples.get(rid, [])
        bad = [(i, t) for i, t in enumerate(xs) if t is None or not math.isfinite(t) or t <= 0]
        if len(xs) < stats.MIN_STEPS:
            skipped.append({"run_id": rid, "reason": f"{len(xs)} measured step times, need at least {stats.MIN_STEPS}"})
        elif bad:
            skipped.append({"run_id": rid, "reason": f"step {bad[0][0]} = {bad[0][1]!r} ms: step times must be "
                                                     "finite and > 0"})
        else:
            good.append(rid)
    return good, skipped


def decide(measured: Sequence[float], case: Any, *, same_env: list[int], other_env: list[int],
           other_env_data: Mapping[str, Any] | None, env_data: Mapping[str, Any],
           samples: Mapping[int, list[float]], calibration_runs: Sequence[tuple[str, float]] = (),
           aa_gates: Sequence[dict[str, Any]] = (), paired: PairedBlocks | None = None,
           baseline_version: str | None = None, baseline_digest: str | None = None,
           max_ratio: float = DEFAULT_MAX_RATIO) -> Decision:
    """Decide the verdict (see the module docstring); ``case`` is a ``tasks.records.Case``.

    Raises:
        ValueError: the paired blocks are unequal in number or hold a NaN/non-positive step time
            (``stats.compare_paired`` names ``a_blocks[i]``/``b_blocks[i]``).
    """
    evidence: dict[str, Any] = {"candidate_median_ms": statistics.median(measured), "n_candidate": len(measured)}
    same, skipped_same = usable_baselines(samples, same_env)
    other, skipped_other = usable_baselines(samples, other_env)
    if skipped_same or skipped_other:
        evidence["skipped_baselines"] = skipped_same + skipped_other
    d = Decision(verdict="no-baseline", method="none", baseline_run_ids=same or other, evidence=evidence)
    if same:
        prior = calibration.prior_for_case(case, calibration_runs)
        evidence["prior"] = prior.model_dump(mode="json")
        result = stats.compare_to_history(measured, [samples[i] for i in same], tolerance=case.tolerance,
                                          confidence=case.confidence, prior_between_sd=prior.between_sd,
                                          prior_df=prior.prior_df)
        ref = statistics.median(statistics.median(samples[i]) for i in same)
        d.verdict, d.method = result.verdict, result.method
        d.ratio, d.ci_low, d.ci_high = result.ratio, result.ci_low, result.ci_high
        d.limit = ceiling_ms(ref, result, max_ratio)
        evidence.update(stats=result.model_dump(mode="json"), baseline_median_ms=ref)
    elif other:
        est = stats.median_ratio_ci(measured, samples[other[0]], confidence=case.confidence)
        changes = [c.model_dump(mode="json") for c in diff_fingerprints(dict(other_env_data or {}), dict(env_data))
                   if c.affects_comparability]
        d.verdict, d.method = "env-changed", "cross-environment"
        d.ratio, d.ci_low, d.ci_high = est.ratio, est.low, est.high
        evidence.update(stats=est.model_dump(mode="json"), env_changes=changes,
                        baseline_median_ms=statistics.median(samples[other[0]]))
    elif evidence.get("skipped_baselines"):
        evidence["reason"] = "every baseline run was skipped: " + "; ".join(
            f"run {x['run_id']}: {x['reason']}" for x in evidence["skipped_baselines"])
    if paired is not None:
        _decide_paired(d, measured, case, paired, aa_gates, baseline_version, baseline_digest, max_ratio)
    return d


def _decide_paired(d: Decision, measured: Sequence[float], case: Any, paired: PairedBlocks,
                   aa_gates: Sequence[dict[str, Any]], baseline_version: str | None, baseline_digest: str | None,
                   max_ratio: float) -> None:
    ev = d.evidence
    ev["history"] = {"verdict": d.verdict, "method": d.method, "ratio": d.ratio, "ci_low": d.ci_low,
                     "ci_high": d.ci_high, "median_limit_ms": d.limit}
    offset = calibration.paired_offset_for_case(case, aa_gates)
    ev["paired_offset"] = offset.model_dump(mode="json")
    res = stats.compare_paired(paired.a, paired.b, tolerance=case.tolerance, confidence=case.confidence,
                               offset_sd=offset.sd)
    d.verdict, d.method = res.verdict, res.method
    d.ratio, d.ci_low, d.ci_high = res.ratio, res.ci_low, res.ci_high
    a_all = [t for blk in paired.a for t in blk]
    d.paired_b = [t for blk in paired.b for t in blk]
    d.limit = ceiling_ms(statistics.median(a_all), res, max_ratio)
    layout = paired.layout
    ev["paired"] = {**res.model_dump(mode="json"), **layout, "baseline_version": baseline_version,
                    "baseline_digest": baseline_digest, "a_median_ms": statistics.median(a_all),
                    "b_median_ms": statistics.median(d.paired_b),
                    "cost": f"{layout['timed_steps']} extra timed steps ({layout['blocks']} ABBA block "
                            f"pairs x {layout['block_steps']} steps x 2 versions) = "
                            f"{layout['timed_steps'] / max(len(measured), 1):.1f}x the {len(measured)} "
                            f"measured steps, plus a second model load and warm-up; "
                            f"{layout['wall_s'] or 0:.1f} s wall"}
