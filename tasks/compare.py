"""baseline-compare: pick the comparable baseline, run the statistics and the GX suites.

The baseline is the lookback history of accepted runs (``baselines`` rows, newest first) of the
same model, case and environment comparability key. Without one, the latest accepted run of the
same model and case in another environment is compared anyway and the verdict is
``env-changed``, naming the fingerprint fields that differ. With neither, ``no-baseline``.

The statistics (``tasks.stats``) decide ``pass``/``regression``/``improvement``/``inconclusive``
within the tolerance; Great Expectations (``tasks.expectations``) enforces the data-quality
expectations and the step-time ceiling (``ceiling_ms``: between 110% and 150% of the baseline
median, widened within that by the comparison's own uncertainty), passed to the suite as a
parameter. A ceiling breach turns a statistically undecided run into a ``regression``; a failed
data-quality expectation fails the stage.

The history comparison's prior for process-to-process drift comes from ``tasks.calibration``
(the Case's ``prior_between_sd``, else estimated from the store's accepted runs in the same
environment, else 0.05); it is recorded in ``evidence["prior"]``. Baseline runs whose samples
are unusable (fewer than ``stats.MIN_STEPS`` measured steps, a NaN or non-positive step time) are
left out of the lookback and named in ``evidence["skipped_baselines"]``; if none is left the
verdict is ``no-baseline`` with that reason.

Paired gates (release trigger or ``Case.paired``; ``run.paired_path`` is set by the profiled-run
stage) are judged by ``stats.compare_paired`` on the ABBA block pairs of the baseline version
(A) and the candidate (B) measured in one process: method ``paired-abba``. The history verdict
is kept as evidence (``evidence["history"]``), and the GX ceiling is then applied to the paired
samples, ``median(B) <= max_ratio x median(A)`` (same process, same time window), not to the
drift-prone history; the paired interval includes the process-level offset
(``tasks.calibration.paired_offset_for_case``, in ``evidence["paired_offset"]``). Cost (in
``evidence["paired"]["cost"]``): ``2 x blocks x block_steps`` extra timed steps, twice the
measured steps with the defaults.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import select

from tasks import calibration, expectations, stats
from tasks.explain import attribute_against_run
from tasks.fingerprint import diff_fingerprints
from tasks.records import Case, CompareRecord, EnvRecord, ParseRecord, ProfiledRun
from tasks.store import Baseline, Environment, Model, Run, StepSample, session_scope

DEFAULT_MAX_RATIO = 1.10  #: the GX ceiling is never below this × the baseline median
HARD_MAX_RATIO = 1.50  #: ... and never above this, whatever the statistical uncertainty


class MeasurementRejected(ValueError):
    """The run's samples fail a data-quality expectation (too few rows, nulls, non-positive)."""


def _measured_samples(s, run_ids: list[int]) -> dict[int, list[float]]:
    rows = s.execute(select(StepSample.run_id, StepSample.step_time_ms)
                     .where(StepSample.run_id.in_(run_ids), StepSample.phase == "measured")
                     .order_by(StepSample.run_id, StepSample.step)).all()
    out: dict[int, list[float]] = {rid: [] for rid in run_ids}
    for rid, t in rows:
        out[rid].append(t)
    return out


def find_baselines(db_url: str, model: str, case_name: str, comparability_key: str,
                   lookback: int) -> tuple[list[int], list[int], dict[str, Any] | None]:
    """Baseline run ids for a comparison.

    Returns:
        (same-environment lookback run ids newest first, other-environment run ids (at most one),
        the other environment's fingerprint data or None).
    """
    with session_scope(db_url) as s:
        model_id = s.scalar(select(Model.id).where(Model.name == model))
        if model_id is None:
            return [], [], None
        same = list(s.scalars(select(Baseline.run_id).where(
            Baseline.model_id == model_id, Baseline.case_name == case_name,
            Baseline.comparability_key == comparability_key).order_by(Baseline.accepted_at.desc(), Baseline.id.desc())
            .limit(lookback)))
        if same:
            return same, [], None
        other = s.execute(select(Baseline.run_id, Environment.data)
                          .join(Run, Run.id == Baseline.run_id).join(Environment, Environment.id == Run.environment_id)
                          .where(Baseline.model_id == model_id, Baseline.case_name == case_name)
                          .order_by(Baseline.accepted_at.desc(), Baseline.id.desc()).limit(1)).first()
        if other is None:
            return [], [], None
        return [], [other[0]], other[1]


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


def usable_baselines(samples: dict[int, list[float]], run_ids: list[int]) -> tuple[list[int], list[dict[str, Any]]]:
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


def paired_blocks(path: str | Path) -> tuple[list[list[float]], list[list[float]], dict[str, Any]]:
    """The A (baseline) and B (candidate) per-step ms of each block pair from the paired runner result
    at ``path``, and its layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``, ``orders``).

    Raises:
        ValueError: the file holds no ``blocks`` (names the path).
    """
    r = json.loads(Path(path).read_text())
    blocks = r.get("blocks")
    if not blocks:
        raise ValueError(f"{path}: paired result holds no 'blocks' (expected the runner's paired-mode output)")
    layout = {"blocks": len(blocks), "block_steps": r.get("block_steps"), "timed_steps": r.get("timed_steps"),
              "wall_s": r.get("wall_s"), "orders": "".join(b["order"] for b in blocks)}
    return [b["a_ms"] for b in blocks], [b["b_ms"] for b in blocks], layout


def load_samples(db_url: str, run_ids: list[int]) -> dict[int, list[float]]:
    """Measured step times (ms, our timer) of each run, in step order."""
    with session_scope(db_url) as s:
        return _measured_samples(s, run_ids)


def baseline_compare(db_url: str, case: Case, env: EnvRecord, run: ProfiledRun, parsed: ParseRecord,
                     work_dir: str | Path, *, max_ratio: float = DEFAULT_MAX_RATIO) -> CompareRecord:
    """Compare the run's measured step times with its baseline and validate them with GX.

    Writes the GX Data Docs HTML under ``<work_dir>/gx`` (archived with the run). Whenever a baseline
    run exists (any verdict), ``evidence["attribution"]`` holds the op-level attribution of the change
    against the newest one (``tasks.explain.attribute_against_run``: µs per profiled step).

    Raises:
        MeasurementRejected: a data-quality expectation failed (names it and the observed value).
        ValueError: the paired result (``run.paired_path``) holds no blocks, unequal block counts or a
            NaN/non-positive step time (names ``a_blocks[i]``/``b_blocks[i]`` and the index).
    """
    measured: list[float] = json.loads(Path(run.samples_path).read_text())["measured_step_times_ms"]
    same, other, other_env = find_baselines(db_url, case.model, case.name, env.comparability_key, case.lookback)
    base_ids = same or other
    samples = load_samples(db_url, base_ids) if base_ids else {}
    evidence: dict[str, Any] = {"candidate_median_ms": statistics.median(measured), "n_candidate": len(measured)}
    same, skipped_same = usable_baselines(samples, same)
    other, skipped_other = usable_baselines(samples, other)
    if skipped_same or skipped_other:
        evidence["skipped_baselines"] = skipped_same + skipped_other
    base_ids = same or other
    limit = None
    ratio = low = high = None
    if same:
        prior = calibration.prior_for_case(db_url, case, env.comparability_key)
        evidence["prior"] = prior.model_dump(mode="json")
        result = stats.compare_to_history(measured, [samples[i] for i in same], tolerance=case.tolerance,
                                          confidence=case.confidence, prior_between_sd=prior.between_sd,
                                          prior_df=prior.prior_df)
        verdict, method = result.verdict, result.method
        ratio, low, high = result.ratio, result.ci_low, result.ci_high
        ref = statistics.median(statistics.median(samples[i]) for i in same)
        limit = ceiling_ms(ref, result, max_ratio)
        evidence.update(stats=result.model_dump(mode="json"), baseline_median_ms=ref)
    elif other:
        est = stats.median_ratio_ci(measured, samples[other[0]], confidence=case.confidence)
        ratio, low, high = est.ratio, est.low, est.high
        changes = [c.model_dump(mode="json") for c in diff_fingerprints(other_env or {}, env.data)
                   if c.affects_comparability]
        verdict, method = "env-changed", "cross-environment"
        evidence.update(stats=est.model_dump(mode="json"), env_changes=changes,
                        baseline_median_ms=statistics.median(samples[other[0]]))
    else:
        verdict, method = "no-baseline", "none"
        if evidence.get("skipped_baselines"):
            evidence["reason"] = "every baseline run was skipped: " + "; ".join(
                f"run {x['run_id']}: {x['reason']}" for x in evidence["skipped_baselines"])
    paired_steps = None
    if run.paired_path:
        a_blocks, b_blocks, layout = paired_blocks(run.paired_path)
        evidence["history"] = {"verdict": verdict, "method": method, "ratio": ratio, "ci_low": low, "ci_high": high,
                               "median_limit_ms": limit}
        offset = calibration.paired_offset_for_case(db_url, case, env.comparability_key)
        evidence["paired_offset"] = offset.model_dump(mode="json")
        res = stats.compare_paired(a_blocks, b_blocks, tolerance=case.tolerance, confidence=case.confidence,
                                   offset_sd=offset.sd)
        verdict, method = res.verdict, res.method
        ratio, low, high = res.ratio, res.ci_low, res.ci_high
        a_all = [t for blk in a_blocks for t in blk]
        b_all = [t for blk in b_blocks for t in blk]
        limit = ceiling_ms(statistics.median(a_all), res, max_ratio)
        base = run.baseline_model
        evidence["paired"] = {**res.model_dump(mode="json"), **layout,
                              "baseline_version": base.version if base else None,
                              "baseline_digest": base.digest if base else None,
                              "a_median_ms": statistics.median(a_all), "b_median_ms": statistics.median(b_all),
                              "cost": f"{layout['timed_steps']} extra timed steps ({layout['blocks']} ABBA block "
                                      f"pairs x {layout['block_steps']} steps x 2 versions) = "
                                      f"{layout['timed_steps'] / max(len(measured), 1):.1f}x the {len(measured)} "
                                      f"measured steps, plus a second model load and warm-up; "
                                      f"{layout['wall_s'] or 0:.1f} s wall"}
        paired_steps = expectations.validate_step_times(b_all, min_rows=case.paired_blocks * case.paired_block_steps,
                                                        median_limit_ms=limit)
    gx_dir = Path(work_dir) / "gx"
    steps = expectations.validate_step_times(measured, min_rows=case.measured_steps,
                                             median_limit_ms=None if paired_steps else limit)
    parsed_tables = json.loads(Path(parsed.parsed_path).read_text())
    ops = expectations.validate_op_table(pd.DataFrame(parsed_tables.get("op_stats", []),
                                                      columns=["op_name", "op_type", "total_self_time_us",
                                                               "occurrences"]))
    outcomes = {"step_times": steps, "op_stats": ops, **({"paired_b_steps": paired_steps} if paired_steps else {})}
    expectations.render_data_docs(outcomes, gx_dir)
    # The full GX validation results (KBs each) go to a file archived with the run and into the
    # store by the archive stage; the verdict that travels through XCom carries their summary.
    gx_results = gx_dir / "validation_results.json"
    gx_results.write_text(json.dumps({k: o.result_json for k, o in outcomes.items()}))
    evidence["gx"] = {k: {"success": o.success, "failures": len(o.failures)} for k, o in outcomes.items()}
    evidence["gx_failures"] = [f.model_dump(mode="json") for o in outcomes.values() for f in o.failures]
    quality = [f for o in (steps, paired_steps) if o for f in o.failures if not f.is_limit]
    if quality:
        raise MeasurementRejected("step-time samples failed data-quality expectations: "
                                  + "; ".join(f.text for f in quality))
    ceiling = paired_steps or steps
    if limit is not None and not ceiling.success and verdict == "inconclusive":
        evidence["ceiling_breached"] = True
        verdict = "regression"
    if base_ids:  # op-level attribution against the newest baseline run, whatever the verdict
        evidence["attribution"] = attribute_against_run(db_url, base_ids[0], parsed_tables, case.profiled_steps,
                                                        parsed.avg_step_time_ms)
    return CompareRecord(verdict=verdict, method=method, baseline_run_ids=base_ids, ratio=ratio, ci_low=low,
                         ci_high=high, median_limit_ms=limit, gx_results_path=str(gx_results),
                         gx_success=steps.success and ops.success and (paired_steps is None or paired_steps.success),
                         evidence=evidence)
