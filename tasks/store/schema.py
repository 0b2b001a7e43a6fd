"""The historical store's schema: SQLAlchemy 2 ORM tables.

The schema is created and upgraded only by the Alembic migrations under ``sql/migrations``
(``tasks.store.engine.migrate``); the ORM classes here must match them (a test compares them). Raw
per-step samples are kept (``step_samples``), not just summaries; parsed xprof tables are kept per
run (``op_stats``, ``step_breakdown``, ``run_tables``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> dt.datetime:
    """Timezone-aware now (UTC)."""
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    """Declarative base of the perfwatch schema."""

    type_annotation_map = {dict[str, Any]: JSON, dt.datetime: DateTime(timezone=True)}


class Model(Base):
    """A model name as it appears in the model store."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # 0008: kept by the archive (tasks.store.writes.store_run) for last_success.sql: the number of successful
    # runs (a successful run is never deleted or replaced)
    successful_runs: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class ModelVersion(Base):
    """One pulled model version and the sha256 digest of its bytes."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version", "digest", name="uq_model_version_digest"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    version: Mapped[str] = mapped_column(String(32))
    digest: Mapped[str] = mapped_column(String(64))
    source_uri: Mapped[str] = mapped_column(Text)
    format: Mapped[str] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Environment(Base):
    """One distinct environment fingerprint (stored once, referenced by runs)."""

    __tablename__ = "environments"
    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint_id: Mapped[str] = mapped_column(String(64), unique=True)
    comparability_key: Mapped[str] = mapped_column(String(64), index=True)
    data: Mapped[dict[str, Any]]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


REUSED_WARMUP_TOOL = "warmup_reused"
"""``run_tables.tool`` of a run whose warm-up stage reused another run's warm-up (``{"run_id": N}``;
``tasks.store.reads.warmup_to_reuse``)."""

INGEST_DAG_ID = "perfwatch_ingest"
"""``dag_id`` of the runs ``perfwatch ingest`` stores: profiles of users' own jobs (``runs.source`` external)."""


def run_source(context: Any) -> str:
    """Default of ``runs.source`` for a new row (0003): ``external`` for a run stored by ``perfwatch ingest``
    (``dag_id`` :data:`INGEST_DAG_ID`: a user's own job, its step times are xprof's), else ``perfwatch``
    (measured by perfwatch's runner, step times by its own timer with the profiler off)."""
    return "external" if context.get_current_parameters().get("dag_id") == INGEST_DAG_ID else "perfwatch"


# 0008: the runs columns env_changes.sql and regressions.sql read, held by their partial indexes (0009: with the
# comparison's columns kept on the run)
ENV_CHANGE_COLUMNS = (
    "started_at", "id", "model_id", "environment_id", "prev_environment_id", "prev_run_id", "model_version_id",
    "case_name", "version_requested",
)  # fmt: skip
COMPARE_COLUMNS = (
    "compare_baseline_run_id", "compare_baseline_median_ms", "compare_ratio", "compare_ci_low", "compare_ci_high",
    "compare_method", "compare_metric",
)  # fmt: skip
"""0009: the run's comparison as history.sql and regressions.sql read it, kept on the run (``Run.compare_*``)."""
REGRESSION_COLUMNS = (
    "started_at", "id", "model_id", "model_version_id", "version_requested", "case_name", "trigger",
    "median_step_ms", "environment_id", "dag_id", "dag_run_id", *COMPARE_COLUMNS,
)  # fmt: skip


class Run(Base):
    """One DAG run of one case: its identity, outcome and summary figures.

    Step times are ms by our timer (profiler off); ``profiler_avg_step_ms`` is xprof's
    overview_page average over the profiled window. A failed run keeps ``failed_stage`` and
    ``error`` and has no summary figures (never a zero).
    """

    __tablename__ = "runs"
    __table_args__ = (
        # 0012: the model and the version as planned are part of a run's identity (two models of one nightly share
        # a case name; a release DAG run may gate two versions of one model)
        UniqueConstraint("dag_id", "dag_run_id", "model_id", "plan_version", "case_name", name="uq_run_identity"),
        Index("ix_runs_model_case_time", "model_id", "case_name", "started_at"),
        Index("ix_runs_started_at", "started_at"),
        Index("ix_runs_verdict_time", "verdict", "started_at"),  # 0002: regressions.sql
        Index("ix_runs_status_time", "status", "started_at"),  # 0002: failures.sql
        # 0008: env_changes.sql reads only the runs whose environment differs from the previous run's, and only
        # this index (it holds every column the query reads from runs)
        Index(
            "ix_runs_env_change_time",
            *ENV_CHANGE_COLUMNS,
            postgresql_where=text("prev_environment_id <> environment_id"),
            sqlite_where=text("prev_environment_id <> environment_id"),
        ),
        # 0008: regressions.sql reads the window's regressions from this index alone (0009: their comparisons too)
        Index(
            "ix_runs_regression_cover",
            *REGRESSION_COLUMNS,
            postgresql_where=text("verdict = 'regression'"),
            sqlite_where=text("verdict = 'regression'"),
        ),
        # 0008: last_success.sql's newest success per model, one index probe each
        Index(
            "ix_runs_success_finished",
            "model_id",
            "finished_at",
            postgresql_where=text("status = 'success'"),
            sqlite_where=text("status = 'success'"),
        ),
        # 0008: a baseline run's median read by id (gate; history and regressions before 0009) without the wide row
        Index("ix_runs_id_median", "id", "median_step_ms"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    dag_id: Mapped[str] = mapped_column(String(250))
    dag_run_id: Mapped[str] = mapped_column(String(250))
    case_name: Mapped[str] = mapped_column(String(64))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    version_requested: Mapped[str] = mapped_column(String(32))
    # 0012: the version as the DAG run planned it (``Case.version``: ``latest`` or a pinned one), part of the run's
    # identity; ``version_requested`` of a failure is the version its request resolved to, when it got that far
    plan_version: Mapped[str] = mapped_column(String(32))
    model_version_id: Mapped[int | None] = mapped_column(ForeignKey("model_versions.id"))
    environment_id: Mapped[int | None] = mapped_column(ForeignKey("environments.id"))
    trigger: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))  # success | failed
    failed_stage: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    params: Mapped[dict[str, Any]]
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None]
    median_step_ms: Mapped[float | None] = mapped_column(Float)
    mean_step_ms: Mapped[float | None] = mapped_column(Float)
    p90_step_ms: Mapped[float | None] = mapped_column(Float)
    throughput_eps: Mapped[float | None] = mapped_column(Float)
    # 0013: what throughput_eps measures (``tasks.records.THROUGHPUT_DEFS``: median_step, server_achieved,
    # offline_run); NULL where the run has no throughput. Series and comparisons of throughput keep to one
    throughput_def: Mapped[str | None] = mapped_column(String(24))
    cold_step_ms: Mapped[float | None] = mapped_column(Float)
    warmup_steps: Mapped[int | None] = mapped_column(Integer)
    steady: Mapped[bool | None] = mapped_column(Boolean)
    profile_overhead_ratio: Mapped[float | None] = mapped_column(Float)
    peak_rss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    peak_device_bytes: Mapped[int | None] = mapped_column(BigInteger)
    profiler_avg_step_ms: Mapped[float | None] = mapped_column(Float)
    input_bound_pct: Mapped[float | None] = mapped_column(Float)
    verdict: Mapped[str | None] = mapped_column(String(16), index=True)
    archive_uri: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16), default=run_source, server_default="perfwatch")  # 0003
    # 0008: the previous run of the same model and case that has an environment (ordered by started_at, id)
    # and that run's environment, kept by the archive (tasks.store.writes.store_run); NULL for the first
    prev_run_id: Mapped[int | None] = mapped_column(Integer)
    prev_environment_id: Mapped[int | None] = mapped_column(Integer)
    # 0009: the run's comparison (``comparisons``: its baseline run, ratio with interval, method, metric) and the
    # compared baseline run's median (ms), kept on the run by the archive as it stores the comparison, so
    # history.sql and regressions.sql read thousands of runs without a lookup per run; NULL without a comparison
    compare_baseline_run_id: Mapped[int | None] = mapped_column(Integer)
    compare_baseline_median_ms: Mapped[float | None] = mapped_column(Float)
    compare_ratio: Mapped[float | None] = mapped_column(Float)
    compare_ci_low: Mapped[float | None] = mapped_column(Float)
    compare_ci_high: Mapped[float | None] = mapped_column(Float)
    compare_method: Mapped[str | None] = mapped_column(String(32))
    compare_metric: Mapped[str | None] = mapped_column(String(8))
    # 0011: what history.sql reads per run without a window or a lookup, kept by the archive: the model version of
    # the previous run of the same model and case that was pulled (ordered by started_at, id; NULL for the first),
    # and the measured phase's sample count and nearest-rank p10 from its step_quantiles row (p90_step_ms is that
    # row's p90, 0010); NULL without a measured summary (a failure)
    prev_model_version_id: Mapped[int | None] = mapped_column(Integer)
    n_measured: Mapped[int | None] = mapped_column(Integer)
    p10_step_ms: Mapped[float | None] = mapped_column(Float)


class StepSample(Base):
    """One raw step time (ms, our timer). ``phase``: warmup | measured | profiled. ``cpu_ms``: the runner
    process's CPU time during the step (all threads, user + system), ``wait_ms``: its threads' run-queue wait
    (schedstat), both ms (0005; ``tasks.runner.counters``); NULL where not measured."""

    __tablename__ = "step_samples"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    phase: Mapped[str] = mapped_column(String(16), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    step_time_ms: Mapped[float] = mapped_column(Float)
    cpu_ms: Mapped[float | None] = mapped_column(Float)
    wait_ms: Mapped[float | None] = mapped_column(Float)


QUANTILE_RANKS = (10, 50, 90, 99)
"""The percentiles ``step_quantiles`` keeps of each run's phase (``p10_ms`` ... ``p99_ms``), nearest rank: the
value of rank ``(n * q + 99) // 100`` in ascending order (rank 1 the fastest), as the named queries ranked raw
samples before 0007."""


class StepQuantiles(Base):
    """The summary of one run's step samples of one phase (0007), written with the samples by the archive
    (``tasks.store.writes.step_quantiles``) and kept when ``perfwatch db thin`` deletes the raw samples of old
    runs (``thinned_at`` set then; NULL while the raw samples are kept). The named queries read per-run spread
    and counts from here, never from ``step_samples``, so a thinned run reads the same as before.

    ``n``: samples of the phase; ``mean_ms``, ``min_ms``, ``max_ms`` and the nearest-rank percentiles of
    :data:`QUANTILE_RANKS` of ``step_time_ms`` (ms, our timer); ``cpu_median_ms`` / ``wait_median_ms``: the
    median (``statistics.median``) of the steps' recorded ``cpu_ms`` / ``wait_ms``, NULL where none was."""

    __tablename__ = "step_quantiles"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    phase: Mapped[str] = mapped_column(String(16), primary_key=True)
    n: Mapped[int] = mapped_column(Integer)
    mean_ms: Mapped[float] = mapped_column(Float)
    min_ms: Mapped[float] = mapped_column(Float)
    p10_ms: Mapped[float] = mapped_column(Float)
    p50_ms: Mapped[float] = mapped_column(Float)
    p90_ms: Mapped[float] = mapped_column(Float)
    p99_ms: Mapped[float] = mapped_column(Float)
    max_ms: Mapped[float] = mapped_column(Float)
    cpu_median_ms: Mapped[float | None] = mapped_column(Float)
    wait_median_ms: Mapped[float | None] = mapped_column(Float)
    thinned_at: Mapped[dt.datetime | None]


class TelemetrySample(Base):
    """One device telemetry sample of the measured steps (0004; ``tasks.runner.telemetry``). ``device``:
    ``host`` (CPU utilization %, process RSS bytes) or ``gpu<i>`` (NVML: utilization %, memory used bytes,
    power W, SM clock MHz, temperature °C, throttle-reason bitmask); ``t_s``: s since sampling began;
    ``step``: measured steps finished by then. A quantity the device does not report is NULL, never 0."""

    __tablename__ = "telemetry_samples"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    device: Mapped[str] = mapped_column(String(16), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    t_s: Mapped[float] = mapped_column(Float)
    step: Mapped[int] = mapped_column(Integer)
    utilization_pct: Mapped[float | None] = mapped_column(Float)
    memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    power_w: Mapped[float | None] = mapped_column(Float)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Float)
    temperature_c: Mapped[float | None] = mapped_column(Float)
    throttle_reasons: Mapped[int | None] = mapped_column(BigInteger)


class OpStat(Base):
    """One op row of xprof's framework_op_stats tool (self-times in µs over the profiled window)."""

    __tablename__ = "op_stats"
    __table_args__ = (Index("ix_op_stats_run", "run_id", "op_name"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    host_or_device: Mapped[str] = mapped_column(String(16))
    op_type: Mapped[str] = mapped_column(String(256))
    op_name: Mapped[str] = mapped_column(Text)
    occurrences: Mapped[int] = mapped_column(BigInteger)
    total_self_time_us: Mapped[float] = mapped_column(Float)
    avg_self_time_us: Mapped[float] = mapped_column(Float)
    self_time_share: Mapped[float] = mapped_column(Float)


class StepBreakdown(Base):
    """Per-step time breakdown from xprof's overview_page, long format (component, ms)."""

    __tablename__ = "step_breakdown"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    step_num: Mapped[int] = mapped_column(Integer, primary_key=True)
    component: Mapped[str] = mapped_column(String(64), primary_key=True)
    ms: Mapped[float] = mapped_column(Float)


class RunTable(Base):
    """A whole parsed xprof tool output for a run (overview, input pipeline, memory, kernels, findings)."""

    __tablename__ = "run_tables"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tool: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[dict[str, Any]]


class RunComparison(Base):
    """The baseline-compare result of a run: verdict, ratio with its interval, GX validation."""

    __tablename__ = "comparisons"
    __table_args__ = (
        Index("ix_comparisons_baseline_run", "baseline_run_id"),  # 0002
        # 0008: covers the columns the named queries read, so their per-run lookups skip the wide rows
        Index(
            "ix_comparisons_run_cover", "run_id", "baseline_run_id", "ratio", "ci_low", "ci_high", "method", "metric"
        ),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    baseline_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    method: Mapped[str] = mapped_column(String(32))
    verdict: Mapped[str] = mapped_column(String(16))
    ratio: Mapped[float | None] = mapped_column(Float)
    ci_low: Mapped[float | None] = mapped_column(Float)
    ci_high: Mapped[float | None] = mapped_column(Float)
    median_limit_ms: Mapped[float | None] = mapped_column(Float)
    metric: Mapped[str | None] = mapped_column(String(8))  # 0006: wall | cpu (tasks.records.Metric)
    gx_success: Mapped[bool] = mapped_column(Boolean)
    gx_result: Mapped[dict[str, Any]]
    evidence: Mapped[dict[str, Any]]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Baseline(Base):
    """An accepted run of (model, case, environment). The active one has ``superseded_at`` NULL;
    the older rows are the lookback history. A partial unique index allows one active row."""

    __tablename__ = "baselines"
    __table_args__ = (
        Index(
            "uq_baseline_active",
            "model_id",
            "case_name",
            "comparability_key",
            unique=True,
            sqlite_where=text("superseded_at IS NULL"),
            postgresql_where=text("superseded_at IS NULL"),
        ),
        Index("ix_baselines_lookup", "model_id", "case_name", "comparability_key", "accepted_at"),
        Index("ix_baselines_run", "run_id"),  # 0002: foreign-key checks on run deletion
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    case_name: Mapped[str] = mapped_column(String(64))
    comparability_key: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    accepted_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    accepted_by: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(Text)
    superseded_at: Mapped[dt.datetime | None]


class Artifact(Base):
    """A file kept for a run (the archived xplane, the GX data docs...) with size and sha256."""

    __tablename__ = "artifacts"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    uri: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
