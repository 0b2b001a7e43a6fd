"""baseline-compare: pick the comparable baseline, run the statistics and the GX suites.

The baseline is the lookback history of accepted runs (``baselines`` rows, newest first) of the
same model, case and environment comparability key. Without one, the latest accepted run of the
same model and case in another environment is compared anyway and the verdict is
``env-changed``, naming the fingerprint fields that differ. With neither, ``no-baseline``.

The statistics (``tasks.stats``) decide ``pass``/``regression``/``improvement``/``inconclusive``
within the tolerance; Great Expectations (``tasks.expectations``) enforces the data-quality
expectations and the hard step-time ceiling, ``median ≤ max_ratio × baseline median``
(default 110%), passed to the suite as a parameter. A ceiling breach turns a statistically
undecided run into a ``regression``; a failed data-quality expectation fails the stage.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import select

from tasks import expectations, stats
from tasks.explain import attribute_against_run
from tasks.fingerprint import diff_fingerprints
from tasks.records import Case, CompareRecord, EnvRecord, ParseRecord, ProfiledRun
from tasks.store import Baseline, Environment, Model, Run, StepSample, session_scope

DEFAULT_MAX_RATIO = 1.10


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


def load_samples(db_url: str, run_ids: list[int]) -> dict[int, list[float]]:
    """Measured step times (ms, our timer) of each run, in step order."""
    with session_scope(db_url) as s:
        return _measured_samples(s, run_ids)


def baseline_compare(db_url: str, case: Case, env: EnvRecord, run: ProfiledRun, parsed: ParseRecord,
                     work_dir: str | Path, *, max_ratio: float = DEFAULT_MAX_RATIO) -> CompareRecord:
    """Compare the run's measured step times with its baseline and validate them with GX.

    Writes the GX Data Docs HTML under ``<work_dir>/gx`` (archived with the run).

    Raises:
        MeasurementRejected: a data-quality expectation failed (names it and the observed value).
    """
    measured: list[float] = json.loads(Path(run.samples_path).read_text())["measured_step_times_ms"]
    same, other, other_env = find_baselines(db_url, case.model, case.name, env.comparability_key, case.lookback)
    base_ids = same or other
    samples = load_samples(db_url, base_ids) if base_ids else {}
    evidence: dict[str, Any] = {"candidate_median_ms": statistics.median(measured), "n_candidate": len(measured)}
    limit = None
    ratio = low = high = None
    if same:
        result = stats.compare_to_history(measured, [samples[i] for i in same], tolerance=case.tolerance,
                                          confidence=case.confidence)
        verdict, method = result.verdict, result.method
        ratio, low, high = result.ratio, result.ci_low, result.ci_high
        ref = statistics.median(statistics.median(samples[i]) for i in same)
        limit = max_ratio * ref
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
    gx_dir = Path(work_dir) / "gx"
    steps = expectations.validate_step_times(measured, min_rows=case.measured_steps, median_limit_ms=limit)
    parsed_tables = json.loads(Path(parsed.parsed_path).read_text())
    ops = expectations.validate_op_table(pd.DataFrame(parsed_tables.get("op_stats", []),
                                                      columns=["op_name", "op_type", "total_self_time_us",
                                                               "occurrences"]))
    expectations.render_data_docs({"step_times": steps, "op_stats": ops}, gx_dir)
    evidence["gx"] = {"step_times": steps.result_json, "op_stats": ops.result_json}
    evidence["gx_failures"] = [f.model_dump(mode="json") for f in [*steps.failures, *ops.failures]]
    quality = [f for f in steps.failures if not f.is_limit]
    if quality:
        raise MeasurementRejected("step-time samples failed data-quality expectations: "
                                  + "; ".join(f.text for f in quality))
    if limit is not None and not steps.success and verdict in ("pass", "inconclusive"):
        evidence["ceiling_breached"] = True
        verdict = "regression"
    if base_ids:  # op-level attribution against the newest baseline run, whatever the verdict
        evidence["attribution"] = attribute_against_run(db_url, base_ids[0], parsed_tables, case.profiled_steps,
                                                        parsed.avg_step_time_ms)
    return CompareRecord(verdict=verdict, method=method, baseline_run_ids=base_ids, ratio=ratio, ci_low=low,
                         ci_high=high, median_limit_ms=limit, gx_success=steps.success and ops.success,
                         evidence=evidence)
