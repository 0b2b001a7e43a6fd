"""The store's reads for the stages and the command line: typed snapshots, one session each.

``gather_compare_inputs`` is baseline-compare's read of the stored facts (``tasks.records.CompareInputs``):
the lookback baselines and their measured samples (step times and, where recorded, per-step CPU time), the
history that calibrates the drift prior (with each run's median CPU time, for the history's choice of metric)
and the paired offset; which of them count is decided in ``tasks.analysis`` (the store imports no analysis). The
other functions read one run's parsed tables back (op self-times µs over the profiled window, per-step
breakdown ms, the xprof tool tables) or the latest runs of a version.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session, aliased

from tasks.records import (
    OP_STATS_COLUMNS,
    Acceptance,
    CompareInputs,
    RunContext,
    RunOps,
    VerdictStory,
    WarmupRecord,
    case_label,
    judged_profiles,
)
from tasks.settings import Settings
from tasks.store.engine import session_scope
from tasks.store.schema import (
    REUSED_WARMUP_TOOL,
    Baseline,
    Environment,
    Model,
    ModelVersion,
    OpStat,
    Run,
    RunComparison,
    RunTable,
    StepBreakdown,
    StepQuantiles,
    StepSample,
)
from tasks.store.series import counter_medians

if TYPE_CHECKING:  # pandas is imported where used: every stage reads this module (stored_run), and a DAG
    import pandas as pd  # task should not pay for what it does not use


def _model_id(s: Session, model: str) -> int | None:
    return s.scalar(select(Model.id).where(Model.name == model))


def _lookback(s: Session, model_id: int, case_name: str, comparability_key: str, lookback: int) -> list[int]:
    """The newest ``lookback`` accepted run ids of the case in the environment ``comparability_key``."""
    return list(
        s.scalars(
            select(Baseline.run_id)
            .where(
                Baseline.model_id == model_id,
                Baseline.case_name == case_name,
                Baseline.comparability_key == comparability_key,
            )
            .order_by(Baseline.accepted_at.desc(), Baseline.id.desc())
            .limit(lookback)
        )
    )


def _baselines(
    s: Session, model_id: int, case_name: str, comparability_key: str, lookback: int
) -> tuple[list[int], list[int], dict[str, Any] | None, str]:
    """(same-environment lookback, other-environment lookback, the newest other run's fingerprint, the key of the
    environment the baselines are of): without an accepted run in ``comparability_key``, the lookback of the
    environment of the case's newest accepted run (the one before the change)."""
    same = _lookback(s, model_id, case_name, comparability_key, lookback)
    if same:
        return same, [], None, comparability_key
    newest = s.execute(
        select(Baseline.run_id, Baseline.comparability_key, Environment.data)
        .join(Run, Run.id == Baseline.run_id)
        .join(Environment, Environment.id == Run.environment_id)
        .where(Baseline.model_id == model_id, Baseline.case_name == case_name)
        .order_by(Baseline.accepted_at.desc(), Baseline.id.desc())
        .limit(1)
    ).first()
    if newest is None:
        return [], [], None, comparability_key
    run_id, key, data = newest
    other = _lookback(s, model_id, case_name, key, lookback) or [run_id]
    return [], other, data, key


def _measured(s: Session, run_ids: list[int]) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """Measured step times (ms) of each run, and the per-step CPU time (ms) of each run whose every measured
    step recorded it; both in step order, in one query."""
    rows = s.execute(
        select(StepSample.run_id, StepSample.step_time_ms, StepSample.cpu_ms)
        .where(StepSample.run_id.in_(run_ids), StepSample.phase == "measured")
        .order_by(StepSample.run_id, StepSample.step)
    ).all()
    wall: dict[int, list[float]] = {rid: [] for rid in run_ids}
    cpu: dict[int, list[float | None]] = {rid: [] for rid in run_ids}
    for rid, t, c in rows:
        wall[rid].append(t)
        cpu[rid].append(c)
    return wall, {rid: cast(list[float], xs) for rid, xs in cpu.items() if xs and None not in xs}


def _calibration_rows(
    s: Session, model_id: int, case_name: str, comparability_key: str, window: int
) -> list[tuple[int, str, float]]:
    """(run id, version, median step ms) of the newest ``window`` accepted runs of the case and environment."""
    rows = s.execute(
        select(Run.id, ModelVersion.version, Run.median_step_ms)
        .select_from(Baseline)
        .join(Run, Run.id == Baseline.run_id)
        .join(ModelVersion, ModelVersion.id == Run.model_version_id)
        .where(
            Baseline.model_id == model_id,
            Baseline.case_name == case_name,
            Baseline.comparability_key == comparability_key,
            Run.median_step_ms.is_not(None),
        )
        .order_by(Baseline.accepted_at.desc(), Baseline.id.desc())
        .limit(window)
    ).all()
    return [(int(i), str(v), float(cast(float, m))) for i, v, m in rows]  # median_step_ms IS NOT NULL


def _paired_gates(
    s: Session, model_id: int, case_name: str, comparability_key: str, window: int
) -> list[tuple[dict[str, Any], str]]:
    """(``evidence["paired"]``, the candidate's digest) of the newest ``window`` paired gates."""
    rows = s.execute(
        select(RunComparison.evidence, ModelVersion.digest)
        .join(Run, Run.id == RunComparison.run_id)
        .join(ModelVersion, ModelVersion.id == Run.model_version_id)
        .join(Environment, Environment.id == Run.environment_id)
        .where(
            Run.model_id == model_id,
            Run.case_name == case_name,
            RunComparison.method == "paired-abba",
            Environment.comparability_key == comparability_key,
        )
        .order_by(Run.id.desc())
        .limit(window)
    ).all()
    return [(p, digest) for ev, digest in rows if (p := (ev or {}).get("paired"))]


def _aa_gates(s: Session, model_id: int, case_name: str, comparability_key: str, window: int) -> list[dict[str, Any]]:
    return [
        p
        for p, digest in _paired_gates(s, model_id, case_name, comparability_key, window)
        if p.get("baseline_digest") == digest
    ]


def _run_ops(s: Session, run_id: int) -> RunOps | None:
    return _runs_ops(s, [run_id]).get(run_id)


def _runs_ops(s: Session, run_ids: list[int]) -> dict[int, RunOps]:
    found = s.execute(
        select(Run.id, Run.params, Run.profiler_avg_step_ms, Run.median_step_ms).where(Run.id.in_(run_ids))
    ).all()
    ops: dict[int, list[dict[str, Any]]] = {r.id: [] for r in found}
    for row in s.execute(
        select(OpStat.run_id, *[getattr(OpStat, c) for c in OP_STATS_COLUMNS])
        .where(OpStat.run_id.in_(run_ids))
        .order_by(OpStat.run_id, OpStat.id)
    ):
        ops[row[0]].append(dict(zip(OP_STATS_COLUMNS, row[1:], strict=True)))
    tables: dict[tuple[int, str], Any] = {
        (rid, tool): data
        for rid, tool, data in s.execute(
            select(RunTable.run_id, RunTable.tool, RunTable.data).where(
                RunTable.run_id.in_(run_ids), RunTable.tool.in_(("cross_check", "framework_op_stats"))
            )
        )
    }
    out = {}
    for base in found:
        steps = (base.params or {}).get("profiled_steps")
        idle = (tables.get((base.id, "framework_op_stats")) or {}).get("idle_time_us") or {}
        out[base.id] = RunOps(
            run_id=base.id,
            ops=ops[base.id],
            profiled_steps=steps if isinstance(steps, int) and steps > 0 else None,
            profiler_avg_step_ms=base.profiler_avg_step_ms,
            measured_median_ms=base.median_step_ms,
            window_check=(tables.get((base.id, "cross_check")) or {}).get("cross_check"),
            idle_rows=len(idle),
        )
    return out


def gather_compare_inputs(
    db_url: str, model: str, case_name: str, comparability_key: str, *, lookback: int, calibration_window: int
) -> CompareInputs:
    """Baseline-compare's one read of the store (``tasks.records.CompareInputs``, the facts as stored);
    empty inputs for an unknown model.

    ``lookback``: most baseline runs of the same environment (of the environment before the change when this one
    has none); ``calibration_window``: most accepted runs (of the baselines' environment) and paired gates (of this
    one) looked at for calibration. The baselines' per-step CPU time comes with their step times
    (one query), the calibration runs' median CPU time from one grouped read of their measured steps
    (``tasks.store.series.counter_medians``).
    """
    with session_scope(db_url) as s:
        model_id = _model_id(s, model)
        if model_id is None:
            return CompareInputs()
        same, other, other_data, key = _baselines(s, model_id, case_name, comparability_key, lookback)
        ids = same or other
        wall, cpu = _measured(s, ids) if ids else ({}, {})
        cal = _calibration_rows(s, model_id, case_name, key, calibration_window)  # the drift of the baselines' env
        cal_cpu = counter_medians(s, [i for i, _, _ in cal]) if cal else {}
        gates = _paired_gates(s, model_id, case_name, comparability_key, calibration_window)
        return CompareInputs(
            same_env=same,
            other_env=other,
            other_env_data=other_data,
            samples=wall,
            cpu_samples=cpu,
            calibration_runs=[(v, m) for _, v, m in cal],
            calibration_cpu_ms=[cal_cpu.get(i, (None, None))[0] for i, _, _ in cal],
            aa_gates=[p for p, digest in gates if p.get("baseline_digest") == digest],
            paired_gates=[p for p, _ in gates],
        )


def load_samples(db_url: str, run_ids: list[int]) -> dict[int, list[float]]:
    """Measured step times (ms, our timer) of each run, in step order."""
    with session_scope(db_url) as s:
        return _measured(s, run_ids)[0]


def calibration_runs(
    db_url: str, model: str, case_name: str, comparability_key: str, window: int
) -> list[tuple[str, float]]:
    """``(version, median step ms)`` of the newest ``window`` accepted runs of a model, case and environment."""
    with session_scope(db_url) as s:
        model_id = _model_id(s, model)
        rows = [] if model_id is None else _calibration_rows(s, model_id, case_name, comparability_key, window)
        return [(v, m) for _, v, m in rows]


def aa_gates(db_url: str, model: str, case_name: str, comparability_key: str, window: int) -> list[dict[str, Any]]:
    """The newest ``window`` stored A/A paired gates of a model, case and environment (``evidence["paired"]``)."""
    with session_scope(db_url) as s:
        model_id = _model_id(s, model)
        return [] if model_id is None else _aa_gates(s, model_id, case_name, comparability_key, window)


def runs_ops(db_url: str, run_ids: list[int]) -> dict[int, RunOps]:
    """The op tables of ``run_ids`` and the facts of their profiled windows (as :func:`run_ops`), read in one
    session: run id -> ``RunOps``; a run not in the store is left out."""
    if not run_ids:
        return {}
    with session_scope(db_url) as s:
        return _runs_ops(s, list(run_ids))


def run_ops(db_url: str, run_id: int) -> RunOps | None:
    """A stored run's op table and profiled-window facts; None when the run is not in the store."""
    with session_scope(db_url) as s:
        return _run_ops(s, run_id)


def baseline_version(db_url: str, model: str, case_name: str, comparability_key: str) -> tuple[str, int] | None:
    """The model version of the baseline a paired (A/B) gate re-measures, and that baseline's run id.

    The active baseline (newest accepted run) of ``model`` and ``case_name`` in the same environment
    (``comparability_key``); without one, the newest accepted run of the model and case in any
    environment (both versions are then re-measured here, so the comparison is fair). The version
    comes from that run's ``model_versions`` row. ``None`` when the model has no accepted run yet.
    """
    q = (
        select(ModelVersion.version, Baseline.run_id, Baseline.comparability_key)
        .select_from(Baseline)
        .join(Model, Model.id == Baseline.model_id)
        .join(Run, Run.id == Baseline.run_id)
        .join(ModelVersion, ModelVersion.id == Run.model_version_id)
        .where(Model.name == model, Baseline.case_name == case_name)
        .order_by(Baseline.accepted_at.desc(), Baseline.id.desc())
    )
    with session_scope(db_url) as s:
        rows = s.execute(q.limit(200)).all()
    same = [r for r in rows if r[2] == comparability_key]
    pick = same[0] if same else rows[0] if rows else None
    return None if pick is None else (str(pick[0]), int(pick[1]))


def measured_version(db_url: str, model: str, case_name: str, before: str) -> tuple[str, int] | None:
    """The version a paired gate of version ``before`` pairs with when the case has no accepted baseline: the
    newest earlier version measured, i.e. the highest integer version below ``before`` with a successful run of
    ``model`` and ``case_name`` in any environment (both versions are re-measured in one process), A/A gates of
    ``perfwatch calibrate`` left out; and that version's newest such run id (``runs.id``). None when ``before``
    is not an integer version (``latest`` unresolved, a keras.applications build: no order) or nothing earlier
    was measured (a first version)."""
    if not str(before).isdigit():
        return None
    q = (
        select(ModelVersion.version, Run.id)
        .select_from(Run)
        .join(Model, Model.id == Run.model_id)
        .join(ModelVersion, ModelVersion.id == Run.model_version_id)
        .where(Model.name == model, Run.case_name == case_name, Run.status == "success", Run.trigger != "calibrate")
        .order_by(Run.started_at.desc(), Run.id.desc())
    )
    with session_scope(db_url) as s:
        rows = s.execute(q).all()
    earlier = [(int(v), str(v), int(rid)) for v, rid in rows if str(v).isdigit() and int(v) < int(before)]
    if not earlier:
        return None
    top = max(v for v, _, _ in earlier)
    return next((name, rid) for v, name, rid in earlier if v == top)


def warmup_to_reuse(
    db_url: str,
    model: str,
    case_name: str,
    digest: str,
    comparability_key: str,
    max_age_days: float,
    *,
    now: dt.datetime | None = None,
) -> WarmupRecord | None:
    """The warm-up of the newest successful perfwatch run of ``model`` and ``case_name`` whose warm-up
    process ran (it has no ``run_tables`` row ``warmup_reused``: a reuse is never reused, so the age
    counts from a real warm-up) and whose samples were not thinned (``tasks.store.retention``), reached steady
    state, finished within
    ``max_age_days`` days of ``now`` (default: the current time, UTC), and measured the same model bytes
    (``model_versions.digest`` = ``digest``) in the same environment (``environments.comparability_key``).

    Returns its record with ``reused_from_run_id`` set and ``wall_s`` 0: ``warmup_steps``, ``steady``,
    ``cold_step_ms`` from the run's row, ``step_times_ms`` its stored ``warmup`` step samples (the
    profiled-run process's warm-up steps after its cold step, ms, our timer),
    ``final_cv`` None (not stored). ``None`` when there is no such run, or ``max_age_days`` is 0.
    """
    if max_age_days <= 0:
        return None
    since = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=max_age_days)
    reused = select(RunTable.run_id).where(RunTable.run_id == Run.id, RunTable.tool == REUSED_WARMUP_TOOL).exists()
    thinned = (  # its warm-up samples were deleted by tasks.store.retention: nothing left to reuse
        select(StepQuantiles.run_id)
        .where(StepQuantiles.run_id == Run.id, StepQuantiles.thinned_at.is_not(None))
        .exists()
    )
    q = (
        select(Run.id, Run.warmup_steps, Run.steady, Run.cold_step_ms)
        .join(Model, Model.id == Run.model_id)
        .join(ModelVersion, ModelVersion.id == Run.model_version_id)
        .join(Environment, Environment.id == Run.environment_id)
        .where(
            Model.name == model,
            Run.case_name == case_name,
            Run.status == "success",
            Run.source == "perfwatch",
            Run.steady.is_(True),
            Run.warmup_steps.is_not(None),
            Run.cold_step_ms.is_not(None),
            Run.finished_at >= since,
            ~thinned,
            ModelVersion.digest == digest,
            Environment.comparability_key == comparability_key,
            ~reused,
        )
        .order_by(Run.finished_at.desc(), Run.id.desc())
        .limit(1)
    )
    with session_scope(db_url) as s:
        row = s.execute(q).first()
        if row is None:
            return None
        times = list(
            s.scalars(
                select(StepSample.step_time_ms)
                .where(StepSample.run_id == row[0], StepSample.phase == "warmup")
                .order_by(StepSample.step)
            )
        )
    return WarmupRecord(  # the query asks for warmup_steps and cold_step_ms IS NOT NULL
        warmup_steps=int(cast(int, row[1])),
        steady=bool(row[2]),
        final_cv=None,
        cold_step_ms=float(cast(float, row[3])),
        step_times_ms=times,
        wall_s=0.0,
        reused_from_run_id=int(row[0]),
    )


def run_digests(db_url: str, run_ids: list[int]) -> dict[int, str]:
    """The sha256 digest of the model bytes each run measured (``model_versions.digest``), by run id; runs
    without a model version row are left out."""
    with session_scope(db_url) as s:
        rows = s.execute(
            select(Run.id, ModelVersion.digest)
            .join(ModelVersion, ModelVersion.id == Run.model_version_id)
            .where(Run.id.in_(run_ids))
        ).all()
    return {int(r): str(d) for r, d in rows}


def run_environments(db_url: str, run_ids: list[int]) -> dict[int, tuple[str, dict[str, Any]]]:
    """Each run's environment by run id: (its comparability key, its fingerprint data as stored,
    ``environments``); runs without an environment (failed before it was archived) are left out."""
    if not run_ids:
        return {}
    with session_scope(db_url) as s:
        rows = s.execute(
            select(Run.id, Environment.comparability_key, Environment.data)
            .join(Environment, Environment.id == Run.environment_id)
            .where(Run.id.in_(run_ids))
        ).all()
    return {int(r): (str(k), dict(d or {})) for r, k, d in rows}


# ------------------------------------------------------------------------------------- per-run tables


def op_table(db_url: str, run_id: int) -> pd.DataFrame:
    """The run's framework_op_stats rows (``OP_STATS_COLUMNS``; self-times µs over the profiled window,
    ``self_time_share`` 0..1). Empty frame when the run has none."""
    import pandas as pd

    ops = run_ops(db_url, run_id)
    return pd.DataFrame(ops.ops if ops is not None else [], columns=OP_STATS_COLUMNS)


def step_breakdown_table(db_url: str, run_id: int) -> pd.DataFrame:
    """The run's overview_page per-step breakdown, wide: ``step`` plus one column per component (ms)."""
    import pandas as pd

    with session_scope(db_url) as s:
        rows = s.execute(
            select(StepBreakdown.step_num, StepBreakdown.component, StepBreakdown.ms).where(
                StepBreakdown.run_id == run_id
            )
        ).all()
    if not rows:
        return pd.DataFrame(columns=["step"])
    wide = pd.DataFrame(rows, columns=["step", "component", "ms"]).pivot(index="step", columns="component", values="ms")
    return wide.rename_axis(columns=None).reset_index()


def run_tool_tables(db_url: str, run_id: int) -> dict[str, dict[str, Any]]:
    """The run's ``run_tables`` rows as ``{tool: data}`` (tools: overview_page, framework_op_stats,
    input_pipeline_analyzer, memory_profile, kernel_stats, diagnosis, cross_check, parse)."""
    with session_scope(db_url) as s:
        return {t: d for t, d in s.execute(select(RunTable.tool, RunTable.data).where(RunTable.run_id == run_id))}


def built_references(db_url: str, model: str, case_name: str) -> dict[str, dict[str, Any]]:
    """What earlier successful runs of ``model``'s case ``case_name`` built (``run_tables`` 'model_built':
    ``PulledModel.built``), the newest run's per Keras version: ``{keras_version: built record with its
    run_id}``. Empty for a case never built, or a store without the model."""
    with session_scope(db_url) as s:
        rows = s.execute(
            select(Run.id, RunTable.data)
            .join(RunTable, RunTable.run_id == Run.id)
            .join(Model, Model.id == Run.model_id)
            .where(
                Model.name == model,
                Run.case_name == case_name,
                Run.status == "success",
                RunTable.tool == "model_built",
            )
            .order_by(Run.started_at.desc(), Run.id.desc())
        ).all()
    out: dict[str, dict[str, Any]] = {}
    for run_id, data in rows:
        if isinstance(data, dict) and (version := data.get("keras_version")) and version not in out:
            out[str(version)] = {**data, "run_id": run_id}
    return out


def server_point(db_url: str, run_id: int) -> dict[str, Any] | None:
    """A server run's reported point with its per-query latencies (``run_tables`` 'server_point':
    ``tasks.store.writes.server_point_record``); None for a run without one."""
    with session_scope(db_url) as s:
        data = s.scalar(select(RunTable.data).where(RunTable.run_id == run_id, RunTable.tool == "server_point"))
    return dict(data) if isinstance(data, dict) else None


def run_findings(db_url: str, run_id: int) -> list[dict[str, Any]]:
    """The run's diagnosis findings (``tasks.analysis.findings.Finding`` fields) from ``run_tables``
    'diagnosis'; empty when the run has none."""
    with session_scope(db_url) as s:
        data = s.scalar(select(RunTable.data).where(RunTable.run_id == run_id, RunTable.tool == "diagnosis"))
    return list((data or {}).get("findings") or [])


def latest_runs(db_url: str, model: str, version: str, case: str | None) -> list[Mapping[str, Any]]:
    """Successful runs of ``model`` ``version`` (optionally one case), newest first: run_id, version, case,
    started_at, median_step_ms, throughput_eps, throughput_def (0013), profiler_avg_step_ms, input_bound_pct, verdict,
    params.

    Raises:
        LookupError: no model of that name in the store (names the models it has).
    """
    with session_scope(db_url) as s:
        model_id = _model_id(s, model)
        if model_id is None:
            known = sorted(s.scalars(select(Model.name)))
            raise LookupError(f"no model {model!r} in the store (models: {known or 'none'})")
        q = (
            _run_summary()
            .where(Run.model_id == model_id, Run.status == "success", ModelVersion.version == str(version))
            .order_by(Run.started_at.desc(), Run.id.desc())
        )
        if case:
            q = q.where(Run.case_name == case)
        return [dict(r) for r in s.execute(q).mappings()]


def _run_summary() -> Any:
    """The select of :func:`latest_runs`' columns (runs joined to their pulled model version)."""
    return select(
        Run.id.label("run_id"),
        ModelVersion.version,
        Run.case_name.label("case"),
        Run.started_at,
        Run.median_step_ms,
        Run.throughput_eps,
        Run.throughput_def,
        Run.profiler_avg_step_ms,
        Run.input_bound_pct,
        Run.verdict,
        Run.params,
    ).join(ModelVersion, ModelVersion.id == Run.model_version_id)


def store_url(db_url: str | None = None) -> str:
    """``db_url``, else the settings' store (``PERFWATCH_DATABASE_URL``): the store the plugin's pages read."""
    return db_url or Settings.from_env().database_url


def successful_runs(db_url: str, run_ids: list[int]) -> dict[int, Mapping[str, Any]]:
    """The successful runs among ``run_ids`` by run id, with :func:`latest_runs`' columns plus ``model``; failed
    and absent ids are left out."""
    if not run_ids:
        return {}
    with session_scope(db_url) as s:
        q = (
            _run_summary()
            .add_columns(Model.name.label("model"))
            .join(Model, Model.id == Run.model_id)
            .where(Run.id.in_(run_ids), Run.status == "success")
        )
        return {int(r["run_id"]): dict(r) for r in s.execute(q).mappings()}


def run_comparison(db_url: str, run_id: int) -> dict[str, Any] | None:
    """The run's baseline-compare record as stored (``comparisons``): baseline_run_id (None for a paired or
    first run), method, metric, verdict, ratio, ci_low, ci_high (candidate over baseline), median_limit_ms and
    the whole ``evidence`` (its ``attribution``: the op deltas scaled to the measured change,
    ``tasks.analysis.attribution.attribute_against_run``); None when the run has no comparison."""
    with session_scope(db_url) as s:
        row = s.execute(
            select(
                RunComparison.baseline_run_id,
                RunComparison.method,
                RunComparison.metric,
                RunComparison.verdict,
                RunComparison.ratio,
                RunComparison.ci_low,
                RunComparison.ci_high,
                RunComparison.median_limit_ms,
                RunComparison.evidence,
            ).where(RunComparison.run_id == run_id)
        ).first()
    return dict(row._mapping) | {"evidence": row.evidence or {}} if row is not None else None


def run_dag_ids(run_ids: list[int], db_url: str | None = None) -> dict[int, str]:
    """Run id -> the ``dag_id`` that made it (``runs.dag_id``: an Airflow DAG's id, or ``perfwatch_cli`` and the
    other local ids of runs made outside Airflow) for each of ``run_ids`` in the store at ``db_url`` (default: the
    settings', ``PERFWATCH_DATABASE_URL``); absent ids are left out. What the plugin's per-DAG authorization
    checks a run against."""
    if not run_ids:
        return {}
    with session_scope(db_url or Settings.from_env().database_url) as s:
        rows = s.execute(select(Run.id, Run.dag_id).where(Run.id.in_(run_ids))).all()
    return {int(i): str(d) for i, d in rows}


def run_pages(run_ids: list[int], db_url: str | None = None) -> dict[int, dict[str, Any]]:
    """What the history pages show and link for each of ``run_ids`` (absent ids are left out) in the store
    at ``db_url`` (default: the settings', ``PERFWATCH_DATABASE_URL``): run_id,
    dag_id, dag_run_id, model, version (as pulled, else as requested), case, case_label (the run's readable case
    label, ``tasks.records.case_label``; None for a case without one), device and hardware (the case's
    ``Case.device``, ``auto`` for runs stored before cases named one, and ``Case.hardware``), status, verdict,
    failed_stage, error (failed runs, full text), started_at and finished_at (UTC), median_step_ms (ms,
    our timer), median_cpu_ms and median_wait_ms (the measured steps' median process CPU time and run-queue
    wait, ms; None where not recorded: ``tasks.store.series.step_counter_medians``), throughput_eps
    (examples/s), archive_uri (successful runs: the run's archive directory) and the verdict's figures from
    baseline-compare (None without a comparison): metric (which per-step measure decided: wall | cpu), ratio,
    ci_low, ci_high (candidate over baseline, of that metric), method and reason (the verdict's reason in one
    sentence, ``evidence["reason"]`` else the noise rule's ``evidence["noise"]["reason"]``)."""
    if not run_ids:
        return {}
    with session_scope(db_url or Settings.from_env().database_url) as s:
        rows = (
            s.execute(
                select(
                    Run.id.label("run_id"),
                    Run.dag_id,
                    Run.dag_run_id,
                    Model.name.label("model"),
                    func.coalesce(ModelVersion.version, Run.version_requested).label("version"),
                    Run.case_name.label("case"),
                    Run.status,
                    Run.verdict,
                    Run.failed_stage,
                    Run.error,
                    Run.started_at,
                    Run.finished_at,
                    Run.median_step_ms,
                    Run.throughput_eps,
                    Run.archive_uri,
                    RunComparison.metric,
                    RunComparison.ratio,
                    RunComparison.ci_low,
                    RunComparison.ci_high,
                    RunComparison.method,
                    RunComparison.evidence,
                    Run.params,
                )
                .join(Model, Model.id == Run.model_id)
                .outerjoin(ModelVersion, ModelVersion.id == Run.model_version_id)
                .outerjoin(RunComparison, RunComparison.run_id == Run.id)
                .where(Run.id.in_(run_ids))
            )
            .mappings()
            .all()
        )
        medians = counter_medians(s, [r["run_id"] for r in rows]) if rows else {}
    out = {}
    for r in rows:
        cpu, wait = medians.get(r["run_id"], (None, None))
        row = dict(r)
        ev = row.pop("evidence") or {}
        reason = ev.get("reason") or (ev.get("noise") or {}).get("reason") if ev else None
        params = row.pop("params") or {}
        label = case_label(params)
        device = {"device": params.get("device") or "auto", "hardware": params.get("hardware")}
        out[r["run_id"]] = {
            **row,
            **device,
            "case_label": label,
            "median_cpu_ms": cpu,
            "median_wait_ms": wait,
            "reason": reason,
        }
    return out


def verdict_reasons(run_ids: list[int], db_url: str | None = None) -> dict[int, str]:
    """Run id -> its verdict's reason in one sentence, as :func:`run_pages` gives it (``evidence["reason"]``,
    else the noise rule's ``evidence["noise"]["reason"]``), read without the rest of the evidence; runs without
    a comparison or a reason are left out. ``db_url`` defaults to ``PERFWATCH_DATABASE_URL``."""
    if not run_ids:
        return {}
    with session_scope(db_url or Settings.from_env().database_url) as s:
        rows = s.execute(
            select(
                RunComparison.run_id,
                RunComparison.evidence["reason"].as_string(),
                RunComparison.evidence[("noise", "reason")].as_string(),
            ).where(RunComparison.run_id.in_(run_ids))
        ).all()
    return {rid: own or noise for rid, own, noise in rows if own or noise}


def verdict_stories(run_ids: list[int], db_url: str | None = None) -> dict[int, VerdictStory]:
    """Run id -> the story of its verdict (``tasks.records.VerdictStory``, built by ``from_evidence`` as
    ``perfwatch run`` builds it from its ``CompareRecord``) from what the store holds: the run's status,
    verdict and failed stage, its ``comparisons`` row (method, metric, ratio and interval, evidence, baseline
    run), the baseline run's model version, and the xplane files the parse stage read (``run_tables`` 'parse'
    ``xplane_paths``, as paths in the archive). Absent ids are left out; a run without a comparison (failed,
    or stored without one) has a story of its status alone. ``db_url`` defaults to
    ``PERFWATCH_DATABASE_URL``."""
    if not run_ids:
        return {}
    base_run, base_version = aliased(Run), aliased(ModelVersion)
    parse = aliased(RunTable)
    with session_scope(db_url or Settings.from_env().database_url) as s:
        rows = s.execute(
            select(
                Run.id,
                Run.status,
                Run.verdict,
                Run.failed_stage,
                RunComparison.method,
                RunComparison.metric,
                RunComparison.ratio,
                RunComparison.ci_low,
                RunComparison.ci_high,
                RunComparison.evidence,
                RunComparison.baseline_run_id,
                base_version.version,
                parse.data,
            )
            .outerjoin(RunComparison, RunComparison.run_id == Run.id)
            .outerjoin(base_run, base_run.id == RunComparison.baseline_run_id)
            .outerjoin(base_version, base_version.id == base_run.model_version_id)
            .outerjoin(parse, (parse.run_id == Run.id) & (parse.tool == "parse"))
            .where(Run.id.in_(run_ids))
        ).all()
    accepted = acceptances([int(r[0]) for r in rows], db_url)
    return {
        int(rid): VerdictStory.from_evidence(
            run_id=int(rid),
            status=status,
            failed_stage=stage,
            verdict=verdict,
            method=method,
            metric=metric,
            ratio=ratio,
            ci_low=low,
            ci_high=high,
            evidence=ev,
            baseline_run_id=base,
            baseline_version=bv,
            profile=judged_profiles((data or {}).get("xplane_paths")),
        ).model_copy(update={"accepted": accepted.get(int(rid))})
        for rid, status, verdict, stage, method, metric, ratio, low, high, ev, base, bv, data in rows
    }


def acceptances(run_ids: list[int], db_url: str | None = None) -> dict[int, Acceptance]:
    """Run id -> its first acceptance as its case's baseline (the ``baselines`` row: by ``perfwatch`` itself,
    ``perfwatch baseline accept`` or ``make demo``; when; why; when a later baseline superseded it); runs never
    accepted are left out. ``db_url`` defaults to ``PERFWATCH_DATABASE_URL``."""
    if not run_ids:
        return {}
    with session_scope(db_url or Settings.from_env().database_url) as s:
        rows = s.execute(
            select(Baseline.run_id, Baseline.accepted_by, Baseline.accepted_at, Baseline.reason, Baseline.superseded_at)
            .where(Baseline.run_id.in_([int(i) for i in run_ids]))
            .order_by(Baseline.accepted_at, Baseline.id)
        ).all()
    out: dict[int, Acceptance] = {}
    for rid, by, at, why, superseded in rows:
        out.setdefault(int(rid), Acceptance(by=by, at=at, reason=why, superseded_at=superseded))
    return out


def run_version(db_url: str, run_id: int | None) -> str | None:
    """The model version a stored run measured (``model_versions.version``); None for None, an absent run or
    one that failed before the pull."""
    if run_id is None:
        return None
    with session_scope(db_url) as s:
        return s.scalar(
            select(ModelVersion.version).join(Run, Run.model_version_id == ModelVersion.id).where(Run.id == run_id)
        )


def previous_env_keys(db_url: str, run_ids: list[int]) -> dict[int, str]:
    """The comparability key of each run's previous environment (its previous run of the same model and case that
    has an environment, ``runs.prev_environment_id``: migration 0008), by run id; runs without one are left out.
    For a history cut by a limit, whose oldest run of a case has its previous run before the window."""
    if not run_ids:
        return {}
    with session_scope(db_url) as s:
        rows = s.execute(
            select(Run.id, Environment.comparability_key)
            .join(Environment, Environment.id == Run.prev_environment_id)
            .where(Run.id.in_(run_ids))
        ).all()
    return {int(rid): key for rid, key in rows}


# ------------------------------------------------------------------------------- runs as the stages see them


@dataclass(frozen=True)
class StoredRun:
    """What the store holds for one run identity (:func:`is_run_of`): enough for a retried
    stage to decide whether there is anything left to do.

    Attributes:
        run_id: the row's id; status: ``success`` or ``failed``; failed_stage: the stage that failed
        (failed runs); archive_uri: the run's archive directory (successful runs); verdict: the
        baseline-compare verdict (successful runs).
    """

    run_id: int
    status: str
    failed_stage: str | None
    archive_uri: str | None
    verdict: str | None


def is_run_of(ctx: RunContext) -> ColumnElement[bool]:
    """The ``WHERE`` clause of the run whose identity is ``ctx``'s (:class:`tasks.records.RunContext`: dag_id,
    dag_run_id, model, version as planned, case): the one rule every look-up and replacement of a run by its
    identity uses (``runs.uq_run_identity``)."""
    return and_(
        Run.dag_id == ctx.dag_id,
        Run.dag_run_id == ctx.dag_run_id,
        Run.model_id == select(Model.id).where(Model.name == ctx.case.model).scalar_subquery(),
        Run.plan_version == ctx.case.version,
        Run.case_name == ctx.case.name,
    )


def stored_run(db_url: str, ctx: RunContext) -> StoredRun | None:
    """The stored run of ``ctx``'s identity (:func:`is_run_of`), or None when it has none yet."""
    with session_scope(db_url) as s:
        row = s.execute(
            select(Run.id, Run.status, Run.failed_stage, Run.archive_uri, Run.verdict).where(is_run_of(ctx))
        ).first()
    return None if row is None else StoredRun(*row)


@dataclass(frozen=True)
class RunLocation:
    """One stored run and where its files are (for ``perfwatch db check``).

    ``archive_uri`` is None for a failed run (it has no archive); ``finished_at`` is UTC.
    """

    run_id: int
    dag_id: str
    dag_run_id: str
    model: str
    plan_version: str
    case_name: str
    status: str
    archive_uri: str | None
    finished_at: Any


def run_locations(db_url: str) -> list[RunLocation]:
    """Every stored run with its identity, status and archive directory, oldest first."""
    with session_scope(db_url) as s:
        rows = s.execute(
            select(
                Run.id,
                Run.dag_id,
                Run.dag_run_id,
                Model.name,
                Run.plan_version,
                Run.case_name,
                Run.status,
                Run.archive_uri,
                Run.finished_at,
            )
            .join(Model, Model.id == Run.model_id)
            .order_by(Run.id)
        ).all()
    return [RunLocation(*r) for r in rows]
