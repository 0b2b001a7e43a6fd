"""The verdict of baseline-compare, decided from plain values (no store, no files, no GX).

``decide`` takes the candidate's measured step times (ms, our timer), the stored facts as the store
gathered them (``tasks.records.CompareInputs``: which baselines are usable is decided here), for a
paired gate the ABBA blocks of the baseline version (A) and the candidate (B) with the gate's record,
and the measurement's noise as the profiled run judged it (:func:`judge_noise`, ``ProfiledRun.noise``),
and returns the **final** verdict with its estimate, interval and evidence. Every rule that can change
a verdict is here (the GX suites of ``tasks.stages.expectations`` only validate it), so a benchmark that
calls ``decide`` runs the verdict as the product does:

* same-environment lookback history: ``stats.compare_to_history`` with the calibrated drift prior
  (``calibration.prior_for_case``), method ``history-lookback``;
* no baseline in this environment but one in another: ``stats.median_ratio_ci`` against it, verdict
  ``env-changed`` naming the comparability fields that changed;
* neither: ``no-baseline``;
* paired gate: :func:`paired_comparison` (the sequential gate's final repeated confidence interval,
  ``tasks.analysis.sequential``; a gate under 32 pairs: ``stats.compare_paired``), method
  ``paired-abba``; the history verdict is kept as ``evidence["history"]``;
* then the **noise rule**: when the measurement ran on a busy host (``noise["busy"]``), a ``pass``,
  ``regression`` or ``improvement`` becomes ``inconclusive`` with the reason "host busy: ..."; the
  statistics' own verdict is kept in ``evidence["verdict_statistics"]``.

Thresholds are tests on the interval (``stats.verdict_from_ci``); a fraction of single steps over a
line never makes a regression.

Evidence keys that other tools read (stable; all JSON):

* ``evidence["paired"]`` (paired gates): the ``stats.Comparison`` fields (``verdict``, ``method``,
  ``ratio``, ``ci_low``, ``ci_high``, ``confidence``, ``tolerance``, ``n_candidate`` = ``n_baseline`` =
  pairs analysed, ``needed_samples`` = pairs that would decide when undecided, ``reason``,
  ``details``: ``sd_log_ratio``, ``scale_log_ratio`` (1.4826 x MAD of the pair log ratios: the noise
  the noise rule judges; gates stored before it lack it), ``se_log_ratio``, ``sd_pair`` (per-pair sd
  implied by the batch means), ``batch_pairs``, ``offset_sd``, ``df``, and for sequential gates ``boundary``,
  ``boundary_z``), the layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``,
  ``pairs_wall_s``, ``orders``, ``stopped_by``, ``rounds``), ``baseline_version``,
  ``baseline_digest``, ``a_median_ms``, ``b_median_ms``, ``host_busy`` (bool: the noise rule fired),
  ``sequential`` (``design``, ``looks``: per look pairs / ratio / ci_low / ci_high / verdict,
  ``stopped``: ``decided`` | ``budget`` | ``fixed``, ``method``), ``spent`` (``pairs``,
  ``timed_steps``, ``wall_s``: the cost actually spent) and ``cost`` (the same in words);
* ``evidence["noise"]``: ``calibration.Noise`` (``busy``, ``reason``, ``host_load``, ``gate_sd``,
  ``calibrated_sd``, ``calibrated_gates``, ``noise_ratio``, ``bounds``), present whenever noise was
  assessed;
* ``evidence["paired_offset"]``: ``calibration.Offset``; ``evidence["history"]``: the history verdict
  of a paired run; ``evidence["verdict_statistics"]``: the verdict before the noise rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.analysis import calibration, sequential, stats
from tasks.analysis.environment import diff_fingerprints
from tasks.records import CompareInputs, Verdict

#: the verdicts the noise rule turns into inconclusive
DECIDED = (Verdict.PASS, Verdict.REGRESSION, Verdict.IMPROVEMENT)


@dataclass(frozen=True)
class PairedBlocks:
    """A paired gate's measurement: per-step ms of each block of A (baseline) and B (candidate), the
    layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``, ``pairs_wall_s``, ``orders``,
    ``stopped_by``, ``rounds``), the gate record written before the first pair (``design``: the
    ``sequential.Design`` fields or None for a fixed gate, ``look_pairs``, ``offset``,
    ``calibrated_noise``; None: an old result without one) and the host load over the pairs."""

    a: list[list[float]]
    b: list[list[float]]
    layout: dict[str, Any]
    gate: dict[str, Any] | None = None
    host_load: dict[str, Any] | None = None


@dataclass
class Decision:
    """What the statistics and the noise rule decided, before GX validates it.

    ``limit``: the step time (ms) at the tolerance threshold, ``(1 + tolerance) x`` the reference median
    (the baseline history's, or the paired A samples'); None without a comparison. ``reason``: the
    verdict in one sentence.
    """

    verdict: str
    method: str
    baseline_run_ids: list[int]
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    limit: float | None = None
    reason: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


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
            skipped.append(
                {"run_id": rid, "reason": f"step {bad[0][0]} = {bad[0][1]!r} ms: step times must be finite and > 0"}
            )
        else:
            good.append(rid)
    return good, skipped


def paired_comparison(
    paired: PairedBlocks, case: Any, offset: calibration.Offset
) -> tuple[stats.Comparison, sequential.GateAnalysis | None]:
    """The paired gate's comparison: the final repeated confidence interval of a sequential gate
    (``paired.gate["design"]`` set: ``sequential.analyse`` over its ``look_pairs``), else the fixed
    batch-means t interval of ``stats.compare_paired`` with ``offset``. ``details["sd_pair"]`` is the
    per-pair sd of the log ratios implied by the batch means (what the interval uses);
    ``details["scale_log_ratio"]`` their robust scale (``stats.noise_scale``: what
    ``calibration.assess_noise`` judges).

    Raises:
        ValueError: unequal block counts, an empty block, a NaN/non-positive step time (named
            ``a_blocks[i]``/``b_blocks[i]``), or look points that do not fit the blocks.
    """
    gate = paired.gate or {}
    design = gate.get("design")
    if not design:
        res = stats.compare_paired(
            paired.a, paired.b, tolerance=case.tolerance, confidence=case.confidence, offset_sd=offset.sd
        )
        n = res.n_candidate
        return res.model_copy(
            update={"details": {**res.details, "sd_pair": res.details["se_log_ratio"] * math.sqrt(n)}}
        ), None
    a = stats._block_medians(paired.a, "a_blocks")
    b = stats._block_medians(paired.b, "b_blocks")
    if a.size != b.size:
        raise ValueError(f"a_blocks has {a.size} blocks but b_blocks has {b.size}: blocks must pair up")
    d = [math.log(y / x) for x, y in zip(a, b, strict=True)]
    dz = sequential.Design(**design)
    g = sequential.analyse(d, gate["look_pairs"], dz)
    f = g.final
    what = (
        f"paired-abba, sequential: {len(g.looks)} look(s), stopped at {f.pairs} of at most {dz.max_pairs} pairs "
        f"({g.stopped}; {f.df + 1} batches of {f.batch}, boundary {f.boundary:.2f})"
    )
    reason = stats._reason(f.verdict, f.ratio, f.ci_low, f.ci_high, dz.confidence, dz.tolerance, what)
    if f.verdict == Verdict.INCONCLUSIVE:
        reason += (
            f" About {g.needed_pairs} pairs (now {f.pairs}) would give a decisive interval at this noise."
            if g.needed_pairs
            else f" More pairs cannot help: the process-level offset (sd {dz.offset_sd:.3f}) "
            "alone is wider than the tolerance allows."
        )
    sd_all = statistics.stdev(d[: f.pairs])
    res = stats.Comparison(
        verdict=f.verdict,
        method="paired-abba",
        ratio=f.ratio,
        ci_low=f.ci_low,
        ci_high=f.ci_high,
        confidence=dz.confidence,
        tolerance=dz.tolerance,
        n_candidate=f.pairs,
        n_baseline=f.pairs,
        needed_samples=g.needed_pairs,
        reason=reason,
        details={
            "sd_log_ratio": sd_all,
            "scale_log_ratio": stats.noise_scale(d[: f.pairs]),
            "se_log_ratio": f.se_log_ratio,
            "sd_pair": f.sd_pair,
            "batch_pairs": float(f.batch),
            "offset_sd": dz.offset_sd,
            "df": float(f.df),
            "boundary": f.boundary,
            "boundary_z": f.boundary_z,
        },
    )
    return res, g


def judge_noise(
    case: Any,
    host_load: dict[str, Any] | None,
    paired: PairedBlocks | None,
    *,
    offset: calibration.Offset,
    calibrated: calibration.NoiseCalibration,
) -> calibration.Noise:
    """The measurement's noise, judged once (the profiled run records it as ``ProfiledRun.noise``; ``decide``
    applies it): ``calibration.assess_noise`` of the paired phase's host load and the gate's robust pair
    noise (``details["scale_log_ratio"]`` of :func:`paired_comparison` with ``offset``) against the case's
    ``calibrated`` gate noise when there is a paired gate, else of ``host_load`` (the runner's ``HostLoad``
    over the measured steps). ``case`` is a ``tasks.records.Case`` (``max_other_cpu_share``).

    Raises:
        ValueError: as :func:`paired_comparison` and ``calibration.assess_noise``.
    """
    if paired is None:
        return calibration.assess_noise(host_load, max_other_cpu_share=case.max_other_cpu_share)
    comparison, _ = paired_comparison(paired, case, offset)
    return calibration.assess_noise(
        paired.host_load,
        gate_sd=comparison.details["scale_log_ratio"],
        gate_pairs=comparison.n_candidate,
        calibration=calibrated,
        max_other_cpu_share=case.max_other_cpu_share,
    )


def decide(
    measured: Sequence[float],
    case: Any,
    inputs: CompareInputs,
    *,
    env_data: Mapping[str, Any],
    paired: PairedBlocks | None = None,
    baseline_version: str | None = None,
    baseline_digest: str | None = None,
    noise: Mapping[str, Any] | None = None,
) -> Decision:
    """Decide the final verdict (see the module docstring); ``case`` is a ``tasks.records.Case``.

    Args:
        measured: the candidate's measured step times (ms, our timer).
        inputs: the stored facts (``tasks.store.reads.gather_compare_inputs``); baselines whose samples are
            unusable (:func:`usable_baselines`) are left out here and named in ``evidence["skipped_baselines"]``.
        env_data: the candidate's fingerprint record (``EnvRecord.data``), diffed against
            ``inputs.other_env_data`` for ``env-changed``.
        paired: the paired gate's blocks (``tasks.stages.profiled_run.read_paired``); None: no gate.
        baseline_version, baseline_digest: the baseline model version the gate re-measured, and its bytes'
            sha256 (recorded in ``evidence["paired"]``).
        noise: ``calibration.Noise`` as a dict (:func:`judge_noise`, ``ProfiledRun.noise``): its ``busy``
            applies the noise rule; None: not assessed (no rule, no ``evidence["noise"]``).

    Raises:
        ValueError: the paired blocks are unequal in number or hold a NaN/non-positive step time
            (``stats.compare_paired`` names ``a_blocks[i]``/``b_blocks[i]``).
    """
    evidence: dict[str, Any] = {"candidate_median_ms": statistics.median(measured), "n_candidate": len(measured)}
    samples = inputs.samples
    same, skipped_same = usable_baselines(samples, inputs.same_env)
    other, skipped_other = usable_baselines(samples, inputs.other_env)
    if skipped_same or skipped_other:
        evidence["skipped_baselines"] = skipped_same + skipped_other
    d = Decision(verdict=Verdict.NO_BASELINE, method="none", baseline_run_ids=same or other, evidence=evidence)
    if same:
        prior = calibration.prior_for_case(case, inputs.calibration_runs)
        evidence["prior"] = prior.model_dump(mode="json")
        result = stats.compare_to_history(
            measured,
            [samples[i] for i in same],
            tolerance=case.tolerance,
            confidence=case.confidence,
            prior_between_sd=prior.between_sd,
            prior_df=prior.prior_df,
        )
        ref = statistics.median(statistics.median(samples[i]) for i in same)
        d.verdict, d.method, d.reason = result.verdict, result.method, result.reason
        d.ratio, d.ci_low, d.ci_high = result.ratio, result.ci_low, result.ci_high
        d.limit = ref * (1 + case.tolerance)
        evidence.update(stats=result.model_dump(mode="json"), baseline_median_ms=ref)
    elif other:
        est = stats.median_ratio_ci(measured, samples[other[0]], confidence=case.confidence)
        changes = [
            c.model_dump(mode="json")
            for c in diff_fingerprints(dict(inputs.other_env_data or {}), dict(env_data))
            if c.affects_comparability
        ]
        d.verdict, d.method = Verdict.ENV_CHANGED, "cross-environment"
        d.ratio, d.ci_low, d.ci_high = est.ratio, est.low, est.high
        d.reason = "the environment changed" + (": " + ", ".join(c["field"] for c in changes) if changes else "")
        evidence.update(
            stats=est.model_dump(mode="json"),
            env_changes=changes,
            baseline_median_ms=statistics.median(samples[other[0]]),
        )
    elif evidence.get("skipped_baselines"):
        evidence["reason"] = "every baseline run was skipped: " + "; ".join(
            f"run {x['run_id']}: {x['reason']}" for x in evidence["skipped_baselines"]
        )
        d.reason = evidence["reason"]
    if paired is not None:
        _decide_paired(d, measured, case, paired, inputs.aa_gates, baseline_version, baseline_digest, noise)
    if noise is not None:
        evidence["noise"] = dict(noise)
        if noise.get("busy") and d.verdict in DECIDED:
            evidence["verdict_statistics"] = {"verdict": d.verdict, "reason": d.reason}
            d.verdict = Verdict.INCONCLUSIVE
            d.reason = f"{noise.get('reason')}; the statistics alone said {evidence['verdict_statistics']['verdict']}"
    return d


def _decide_paired(
    d: Decision,
    measured: Sequence[float],
    case: Any,
    paired: PairedBlocks,
    aa_gates: Sequence[dict[str, Any]],
    baseline_version: str | None,
    baseline_digest: str | None,
    noise: Mapping[str, Any] | None,
) -> None:
    ev = d.evidence
    ev["history"] = {
        "verdict": d.verdict,
        "method": d.method,
        "ratio": d.ratio,
        "ci_low": d.ci_low,
        "ci_high": d.ci_high,
    }
    recorded = (paired.gate or {}).get("offset")
    offset = (
        calibration.Offset.model_validate(recorded) if recorded else calibration.paired_offset_for_case(case, aa_gates)
    )
    ev["paired_offset"] = offset.model_dump(mode="json")
    res, gate = paired_comparison(paired, case, offset)
    d.verdict, d.method, d.reason = res.verdict, res.method, res.reason
    d.ratio, d.ci_low, d.ci_high = res.ratio, res.ci_low, res.ci_high
    a_all = [t for blk in paired.a for t in blk]
    b_all = [t for blk in paired.b[: res.n_candidate] for t in blk]
    d.limit = statistics.median(a_all) * (1 + case.tolerance)
    layout = paired.layout
    pairs, block_steps = len(paired.a), layout.get("block_steps") or 1
    timed = layout.get("timed_steps") or 2 * pairs * block_steps
    wall = layout.get("pairs_wall_s") or layout.get("wall_s") or 0.0
    design = (paired.gate or {}).get("design")
    seq = None
    if gate is not None:
        seq = {
            "design": design,
            "method": gate.method,
            "stopped": gate.stopped,
            "looks": [
                {
                    "pairs": x.pairs,
                    "ratio": x.ratio,
                    "ci_low": x.ci_low,
                    "ci_high": x.ci_high,
                    "boundary": x.boundary,
                    "verdict": x.verdict,
                }
                for x in gate.looks
            ],
        }
    budget = design["max_pairs"] if design else pairs
    ev["paired"] = {
        **res.model_dump(mode="json"),
        **layout,
        "baseline_version": baseline_version,
        "baseline_digest": baseline_digest,
        "a_median_ms": statistics.median(a_all),
        "b_median_ms": statistics.median(b_all),
        "host_busy": bool(noise.get("busy")) if noise is not None else None,
        "sequential": seq if seq else {"stopped": "fixed"},
        "spent": {"pairs": pairs, "max_pairs": budget, "timed_steps": timed, "wall_s": wall},
        "cost": f"{pairs} of at most {budget} ABBA block pairs x {block_steps} step(s) x 2 versions = "
        f"{timed} extra timed steps ({timed / max(len(measured), 1):.1f}x the {len(measured)} "
        f"measured steps) in {wall:.1f} s, plus a second model load and warm-up",
    }
