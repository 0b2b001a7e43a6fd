"""The store's reads for watching the trend: nightly series, baseline levels over time, the metrics snapshot.

* :func:`run_series`: the successful runs of a model (and case) oldest first, with the figures a change
  point detector reads (median and p90 step time ms, throughput examples/s, and on request the median
  CPU time per step, ms) and the version and environment at each run;
* :func:`baseline_levels`: the accepted runs that formed a case's baseline at a given time (the creep
  guard's two sides), by median step time or median CPU time per step;
* :func:`metrics_snapshot`: what ``/perfwatch/metrics`` exposes (latest figures, counts, freshness).

One session per call; times are UTC.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sqlalchemy import Float, func, select, type_coerce
from sqlalchemy.orm import Session

from tasks import wire
from tasks.records import Verdict, case_label
from tasks.settings import Settings
from tasks.store.engine import session_scope
from tasks.store.schema import (
    Baseline,
    Environment,
    Model,
    ModelVersion,
    Run,
    RunTable,
    StepQuantiles,
    StepSample,
)

# Run.median_step_ms in the queries below that keep only runs with one (``is_not(None)``): typed float, same SQL
_MEDIAN_MS = type_coerce(Run.median_step_ms, Float)


@dataclass(frozen=True)
class SeriesRun:
    """One successful run in a series.

    Attributes:
        run_id, started_at (UTC), case_name, version (the pulled version), source (``perfwatch`` or
        ``external``), fingerprint_id and comparability_key of its environment, verdict;
        median_step_ms, p90_step_ms (ms: perfwatch's timer, profiler off; xprof's step time for external
        runs), throughput_eps (examples/s; None when unknown); peak_device_bytes (TF's GPU:0 allocator's
        peak, bytes; None on CPU); median_cpu_ms: median per-step process CPU time of its measured steps
        (ms, ``step_samples.cpu_ms``; None where not recorded: runs before migration 0005, external runs).
    """

    run_id: int
    started_at: dt.datetime
    case_name: str
    version: str | None
    source: str
    fingerprint_id: str | None
    comparability_key: str | None
    median_step_ms: float
    p90_step_ms: float | None
    throughput_eps: float | None
    verdict: str | None
    peak_device_bytes: int | None = None
    median_cpu_ms: float | None = None
    #: what ``throughput_eps`` measures (``runs.throughput_def``, ``tasks.records.THROUGHPUT_DEFS``; None without
    #: a throughput): a throughput series keeps to one definition (``tasks.analysis.changes.definition_segments``)
    throughput_def: str | None = None


def _model_id(s: Session, model: str) -> int:
    mid = s.scalar(select(Model.id).where(Model.name == model))
    if mid is None:
        known = sorted(s.scalars(select(Model.name)))
        raise LookupError(f"no model {model!r} in the store (models: {', '.join(known) or 'none'})")
    return mid


def run_series(
    db_url: str, model: str, case_name: str | None = None, since: dt.datetime | None = None, *, cpu: bool = False
) -> list[SeriesRun]:
    """The successful runs (with a median step time) of ``model``, optionally one case and from ``since``
    (UTC, inclusive), oldest first (``started_at``, then id). With ``cpu``, each with its median CPU time per
    step (:func:`counter_medians`: one more read, of every measured step of the series); without,
    ``median_cpu_ms`` is None.

    Raises:
        LookupError: no model of that name in the store (names the models it has).
    """
    with session_scope(db_url) as s:
        mid = _model_id(s, model)
        q = (
            select(
                Run.id,
                Run.started_at,
                Run.case_name,
                ModelVersion.version,
                Run.source,
                Environment.fingerprint_id,
                Environment.comparability_key,
                _MEDIAN_MS,
                Run.p90_step_ms,
                Run.throughput_eps,
                Run.verdict,
                Run.peak_device_bytes,
                Run.throughput_def,
            )
            .outerjoin(ModelVersion, ModelVersion.id == Run.model_version_id)
            .outerjoin(Environment, Environment.id == Run.environment_id)
            .where(Run.model_id == mid, Run.status == "success", Run.median_step_ms.is_not(None))
            .order_by(Run.started_at, Run.id)
        )
        if case_name is not None:
            q = q.where(Run.case_name == case_name)
        if since is not None:
            q = q.where(Run.started_at >= since)
        runs = [
            SeriesRun(rid, at, case, ver, src, fp, key, med, p90, thr, verdict, dev, throughput_def=tdef)
            for rid, at, case, ver, src, fp, key, med, p90, thr, verdict, dev, tdef in s.execute(q)
        ]
        medians = counter_medians(s, [r.run_id for r in runs]) if cpu and runs else {}
    return [replace(r, median_cpu_ms=medians[r.run_id][0]) if r.run_id in medians else r for r in runs]


def baseline_levels(
    db_url: str,
    model: str,
    case_name: str,
    *,
    runs: int,
    at: dt.datetime | None = None,
    comparability_key: str | None = None,
    metric: Literal["median_step_ms", "median_cpu_ms"] = "median_step_ms",
) -> tuple[str | None, list[tuple[int, float]]]:
    """The accepted runs that formed the baseline of ``model`` / ``case_name`` at time ``at`` (UTC; None: now).

    The ``runs`` newest ``baselines`` rows accepted at or before ``at`` in one environment (comparability
    key): ``comparability_key`` when given, else that of the newest such row. ``metric``: each run's median
    step time (``median_step_ms``) or its measured steps' median CPU time per step (``median_cpu_ms``,
    :func:`counter_medians`; runs that recorded none are left out).

    Returns:
        (the comparability key, [(run id, the metric's median, ms)] newest first); (None, []) without any.

    Raises:
        LookupError: no model of that name in the store.
    """
    with session_scope(db_url) as s:
        mid = _model_id(s, model)
        q = (
            select(Baseline.comparability_key, Run.id, _MEDIAN_MS)
            .join(Run, Run.id == Baseline.run_id)
            .where(Baseline.model_id == mid, Baseline.case_name == case_name, Run.median_step_ms.is_not(None))
            .order_by(Baseline.accepted_at.desc(), Baseline.id.desc())
        )
        if at is not None:
            q = q.where(Baseline.accepted_at <= at)
        if comparability_key is None:
            first = s.execute(q.limit(1)).first()
            if first is None:
                return None, []
            comparability_key = first[0]
        rows = s.execute(q.where(Baseline.comparability_key == comparability_key).limit(runs)).all()
        levels = [(int(r[1]), float(r[2])) for r in rows]
        if metric == "median_cpu_ms":
            cpu = counter_medians(s, [rid for rid, _ in levels]) if levels else {}
            levels = [(rid, c) for rid, _ in levels if (c := cpu.get(rid, (None, None))[0]) is not None]
    return comparability_key, levels


@dataclass(frozen=True)
class LatestRun:
    """The newest successful run of one model and case (``metrics_snapshot``): figures in ms and
    examples/s, times UTC; ``median_cpu_ms``, ``median_wait_ms``: its measured steps' median process CPU time
    and run-queue wait (:func:`step_counter_medians`; None where not recorded)."""

    model: str
    case_name: str
    run_id: int
    version: str | None
    source: str
    finished_at: dt.datetime | None
    median_step_ms: float | None
    p90_step_ms: float | None
    throughput_eps: float | None
    verdict: str | None
    median_cpu_ms: float | None = None
    median_wait_ms: float | None = None
    #: an infer/tflite run's per-batch latency (``run_tables`` row ``inputs``, ``latency_ms``): p50/p90/p99
    #: ms with ``n`` and ``ci`` (``tasks.analysis.percentiles.with_intervals``); None for a train run
    latency_ms: dict[str, Any] | None = None
    #: what ``throughput_eps`` measures (``runs.throughput_def``: ``tasks.records.THROUGHPUT_DEFS``)
    throughput_def: str | None = None


@dataclass(frozen=True)
class MetricsSnapshot:
    """The store at one moment, for ``/perfwatch/metrics``.

    Attributes:
        latest: the newest successful run of each model and case.
        runs_by_status: ``(model, case, status) -> runs`` (status ``success`` or ``failed``).
        regressions: ``(model, case) -> runs whose verdict is regression``.
        newest_finished_at: when the newest run (any status) finished, UTC; None for an empty store.
        baseline_ms: ``(model, case) -> median step time (ms)`` of the newest active baseline run.
        case_labels: ``(model, case) -> readable label`` (:func:`case_labels`; cases without one left out).
    """

    latest: list[LatestRun]
    runs_by_status: dict[tuple[str, str, str], int]
    regressions: dict[tuple[str, str], int]
    newest_finished_at: dt.datetime | None
    baseline_ms: dict[tuple[str, str], float]
    case_labels: dict[tuple[str, str], str] = field(default_factory=dict)


def _utc(t: dt.datetime | None) -> dt.datetime | None:
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=dt.UTC)  # SQLite returns naive UTC


def counter_medians(s: Session, run_ids: list[int]) -> dict[int, tuple[float | None, float | None]]:
    """:func:`step_counter_medians` read in the session ``s``: the medians of :func:`counter_stats`."""
    return {rid: (cpu, wait) for rid, (cpu, _, wait, _) in counter_stats(s, run_ids).items()}


def counter_stats(
    s: Session, run_ids: list[int]
) -> dict[int, tuple[float | None, int | None, float | None, int | None]]:
    """Run id -> ``(median CPU time ms, steps it rests on, median run-queue wait ms, steps it rests on)`` of its
    measured steps, in the session ``s``: from the runs' raw measured samples (the steps that recorded each), and
    for a run whose raw samples were thinned (``tasks.store.retention``) from its ``step_quantiles`` row (0007:
    ``cpu_median_ms``, ``wait_median_ms``, the same ``statistics.median`` taken when the run was archived, with
    the phase's ``n``: the raw samples that said which steps recorded them are gone). A figure not recorded is
    None with its n; a run that recorded neither is left out."""
    rows = s.execute(
        select(StepSample.run_id, StepSample.cpu_ms, StepSample.wait_ms).where(
            StepSample.run_id.in_(run_ids),
            StepSample.phase == "measured",
            StepSample.cpu_ms.is_not(None) | StepSample.wait_ms.is_not(None),
        )
    ).all()
    per_run: dict[int, tuple[list[float], list[float]]] = {}
    for rid, cpu, wait in rows:
        cpus, waits = per_run.setdefault(rid, ([], []))
        if cpu is not None:
            cpus.append(cpu)
        if wait is not None:
            waits.append(wait)

    def stat(xs: list[float]) -> tuple[float | None, int | None]:
        return (statistics.median(xs), len(xs)) if xs else (None, None)

    out: dict[int, tuple[float | None, int | None, float | None, int | None]] = {
        rid: (*stat(cpus), *stat(waits)) for rid, (cpus, waits) in per_run.items()
    }
    thinned = s.execute(
        select(StepQuantiles.run_id, StepQuantiles.cpu_median_ms, StepQuantiles.wait_median_ms, StepQuantiles.n).where(
            StepQuantiles.run_id.in_([i for i in run_ids if i not in out]),
            StepQuantiles.phase == "measured",
            StepQuantiles.thinned_at.is_not(None),
            StepQuantiles.cpu_median_ms.is_not(None) | StepQuantiles.wait_median_ms.is_not(None),
        )
    ).all()
    out.update(
        {
            int(rid): (cpu, None if cpu is None else int(n), wait, None if wait is None else int(n))
            for rid, cpu, wait, n in thinned
        }
    )
    return out


def _latencies(s: Session, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Run id -> its stored per-batch latency (``run_tables`` row ``inputs``, key ``latency_ms``), for the
    runs that have one (infer/tflite)."""
    out: dict[int, dict[str, Any]] = {}
    for rid, data in s.execute(
        select(RunTable.run_id, RunTable.data).where(RunTable.run_id.in_(run_ids), RunTable.tool == "inputs")
    ):
        data = wire.loads(data) if isinstance(data, str) else wire.decode(data)
        if isinstance(data, dict) and isinstance(data.get("latency_ms"), dict):
            out[int(rid)] = data["latency_ms"]
    return out


def run_latencies(run_ids: list[int], db_url: str | None = None) -> dict[int, dict[str, Any]]:
    """Run id -> its stored per-batch latency record (``ProfiledRun.latency_ms``: p50/p90/p99/max ms, our timer,
    throughput, ``n`` batches and per percentile its interval ``ci``), for the infer/tflite runs among
    ``run_ids`` that kept one. ``db_url`` defaults to ``PERFWATCH_DATABASE_URL``."""
    if not run_ids:
        return {}
    with session_scope(db_url or Settings.from_env().database_url) as s:
        return _latencies(s, run_ids)


def step_counter_stats(
    run_ids: list[int], db_url: str | None = None
) -> dict[int, tuple[float | None, int | None, float | None, int | None]]:
    """Run id -> ``(median CPU time, its n, median run-queue wait, its n)`` of its measured steps (ms and steps;
    :func:`counter_stats`). ``db_url`` defaults to ``PERFWATCH_DATABASE_URL``."""
    if not run_ids:
        return {}
    with session_scope(db_url or Settings.from_env().database_url) as s:
        return counter_stats(s, run_ids)


def step_counter_medians(run_ids: list[int], db_url: str | None = None) -> dict[int, tuple[float | None, float | None]]:
    """Run id -> (median CPU time, median run-queue wait) of its measured steps, ms (``step_samples.cpu_ms``,
    ``wait_ms``; ``tasks.runner.counters``): None for a figure the run did not record; a run that recorded
    neither is left out. ``db_url`` defaults to ``PERFWATCH_DATABASE_URL``."""
    if not run_ids:
        return {}
    with session_scope(db_url or Settings.from_env().database_url) as s:
        return counter_medians(s, run_ids)


def labels_in(s: Session, model: str | None = None) -> dict[tuple[str, str], str]:
    """:func:`case_labels` read in the session ``s``."""
    newest = select(func.max(Run.id)).group_by(Run.model_id, Run.case_name)
    q = select(Model.name, Run.case_name, Run.params).join(Model, Model.id == Run.model_id).where(Run.id.in_(newest))
    if model is not None:
        q = q.where(Model.name == model)
    return {(m, c): label for m, c, params in s.execute(q) if (label := case_label(params))}


def case_labels(db_url: str | None = None, model: str | None = None) -> dict[tuple[str, str], str]:
    """``(model, case name) -> readable label`` of every case in the store (of ``model`` only when given):
    :func:`tasks.records.case_label` of the params of the case's newest stored run (highest run id), so a label
    given later in the config names the case's whole history. Cases without a label are left out. ``db_url``
    defaults to ``PERFWATCH_DATABASE_URL``."""
    with session_scope(db_url or Settings.from_env().database_url) as s:
        return labels_in(s, model)


def metrics_snapshot(db_url: str | None = None) -> MetricsSnapshot:
    """Read the figures ``/perfwatch/metrics`` exposes, in one session (grouped queries); ``db_url``
    defaults to ``PERFWATCH_DATABASE_URL`` (``tasks.settings``). The store is read as it is, not migrated."""
    db_url = db_url or Settings.from_env().database_url
    ranked = (
        select(
            Run.id,
            Run.model_id,
            Run.case_name,
            func.row_number()
            .over(partition_by=(Run.model_id, Run.case_name), order_by=(Run.started_at.desc(), Run.id.desc()))
            .label("rn"),
        )
        .where(Run.status == "success")
        .subquery()
    )
    with session_scope(db_url) as s:
        rows = [
            LatestRun(m, c, rid, v, src, _utc(fin), med, p90, thr, ver, throughput_def=tdef)
            for m, c, rid, v, src, fin, med, p90, thr, ver, tdef in s.execute(
                select(
                    Model.name,
                    Run.case_name,
                    Run.id,
                    ModelVersion.version,
                    Run.source,
                    Run.finished_at,
                    Run.median_step_ms,
                    Run.p90_step_ms,
                    Run.throughput_eps,
                    Run.verdict,
                    Run.throughput_def,
                )
                .join(ranked, (ranked.c.id == Run.id) & (ranked.c.rn == 1))
                .join(Model, Model.id == Run.model_id)
                .outerjoin(ModelVersion, ModelVersion.id == Run.model_version_id)
                .order_by(Model.name, Run.case_name)
            )
        ]
        counters = counter_medians(s, [r.run_id for r in rows]) if rows else {}
        latency = _latencies(s, [r.run_id for r in rows]) if rows else {}
        latest = [
            replace(r, median_cpu_ms=cpu, median_wait_ms=wait, latency_ms=latency.get(r.run_id))
            for r in rows
            for cpu, wait in [counters.get(r.run_id, (None, None))]
        ]
        by_status = {
            (m, c, st): int(n)
            for m, c, st, n in s.execute(
                select(Model.name, Run.case_name, Run.status, func.count())
                .join(Model, Model.id == Run.model_id)
                .group_by(Model.name, Run.case_name, Run.status)
            )
        }
        regressions = {
            (m, c): int(n)
            for m, c, n in s.execute(
                select(Model.name, Run.case_name, func.count())
                .join(Model, Model.id == Run.model_id)
                .where(Run.verdict == Verdict.REGRESSION)
                .group_by(Model.name, Run.case_name)
            )
        }
        newest = s.scalar(select(func.max(Run.finished_at)))
        baseline_ms: dict[tuple[str, str], float] = {}
        for m, c, med in s.execute(
            select(Model.name, Baseline.case_name, _MEDIAN_MS)
            .join(Model, Model.id == Baseline.model_id)
            .join(Run, Run.id == Baseline.run_id)
            .where(Baseline.superseded_at.is_(None), Run.median_step_ms.is_not(None))
            .order_by(Baseline.accepted_at, Baseline.id)
        ):
            baseline_ms[(m, c)] = float(med)  # the newest active one wins (one per environment may be active)
        labels = labels_in(s)
    return MetricsSnapshot(latest, by_status, regressions, _utc(newest), baseline_ms, labels)


def dag_run_cases(db_url: str, dag_id: str, dag_run_id: str) -> list[tuple[str, str, int, str]]:
    """The runs one DAG run stored, any status: ``(model, case, run id, status)`` in run id order."""
    with session_scope(db_url) as s:
        return [
            (m, c, i, st)
            for m, c, i, st in s.execute(
                select(Model.name, Run.case_name, Run.id, Run.status)
                .join(Model, Model.id == Run.model_id)
                .where(Run.dag_id == dag_id, Run.dag_run_id == dag_run_id)
                .order_by(Run.id)
            )
        ]
