"""The store's writes: a finished run in one transaction, a failure record, a baseline accepted.

Every write retries on a concurrent-writer conflict (two first archives creating the same model
row, a busy SQLite file, a PostgreSQL deadlock). The file side of the archive (the profile copy)
is ``tasks.stages.archive``'s; it hands in ``before_commit`` to move its copy into place inside
the transaction, so a failure of either undoes both.

A run is identified by (dag_id, dag_run_id, model, version as planned, case): ``tasks.store.reads.is_run_of``.
A stored *success* is final: writing that run again raises ``SuccessAlreadyStored`` and changes nothing, so a
retried Airflow task can never replace a success, neither by a failure record nor by a second archive. A stored
*failure* is replaced by the next attempt (success or failure); a failure replacing a failure keeps the earlier
attempts' errors under its own.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import and_, delete, or_, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from tasks.records import (
    AUTO_ACCEPT_VERDICTS,
    CompareRecord,
    EnvRecord,
    ParseRecord,
    ProfiledRun,
    PulledModel,
    RunContext,
    WarmupRecord,
    throughput_def,
)
from tasks.store.engine import session_scope
from tasks.store.reads import is_run_of
from tasks.store.schema import (
    QUANTILE_RANKS,
    REUSED_WARMUP_TOOL,
    Artifact,
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
    TelemetrySample,
    utcnow,
)

ACCEPTED_VERDICTS = AUTO_ACCEPT_VERDICTS
"""Verdicts whose run becomes the new baseline (when auto-accept is on and ``CompareRecord.baseline_refused``
is empty). A regression or an inconclusive run never moves the baseline."""

_RETRIES = 5
_ERROR_CHARS = 20000  # a failed run's stored error is cut to this many characters


class SuccessAlreadyStored(RuntimeError):
    """The run of this identity (``tasks.store.reads.is_run_of``) is already stored as a success, which is never
    replaced; ``run_id`` is the stored run's id."""

    def __init__(self, run_id: int, ctx: RunContext) -> None:
        super().__init__(f"run {run_id} ({ctx.identity}) is already stored as a success and is kept unchanged")
        self.run_id = run_id


def get_or_create_model(s: Session, name: str) -> Model:
    """The ``models`` row named ``name``, created if absent."""
    m = s.scalar(select(Model).where(Model.name == name))
    if m is None:
        m = Model(name=name)
        s.add(m)
        s.flush()
    return m


def lock_model(s: Session, model_id: int) -> None:
    """Hold the model's row until commit (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite serialises
    writers anyway). Taken before inserting rows that reference the model, whose key-share locks
    would otherwise deadlock two concurrent archives."""
    s.execute(select(Model.id).where(Model.id == model_id).with_for_update())


def _replace_failed_run(s: Session, ctx: RunContext) -> str | None:
    """Delete an earlier *failed* row of the same identity (``tasks.store.reads.is_run_of``), so a retry replaces it
    and never duplicates it; returns that row's stored error (None when there was none).

    Raises:
        SuccessAlreadyStored: the identity is stored as a success (nothing is deleted).
    """
    old = s.execute(
        select(Run.id, Run.status, Run.failed_stage, Run.error).where(is_run_of(ctx)).with_for_update()
    ).first()
    if old is None:
        return None
    if old.status == "success":
        raise SuccessAlreadyStored(old.id, ctx)
    for table in (
        StepSample,
        StepQuantiles,
        TelemetrySample,
        OpStat,
        StepBreakdown,
        RunTable,
        RunComparison,
        Artifact,
        Baseline,
    ):
        s.execute(delete(table).where(table.run_id == old.id))
    # runs compared against the replaced row lose that baseline, in comparisons and in their 0009 facts
    compared = select(RunComparison.run_id).where(RunComparison.baseline_run_id == old.id)
    s.execute(
        update(Run)
        .where(Run.id.in_(compared))
        .values(compare_baseline_run_id=None, compare_baseline_median_ms=None)
        .execution_options(synchronize_session=False)
    )
    s.execute(update(RunComparison).where(RunComparison.baseline_run_id == old.id).values(baseline_run_id=None))
    s.execute(delete(Run).where(Run.id == old.id))
    s.flush()
    return f"[{old.failed_stage}] {old.error or ''}"


def _keep_run_facts(s: Session, r: Run) -> None:
    """Keep the 0008 and 0011 facts of the new successful run ``r`` (flushed, with its environment and model
    version): its previous run of the same model and case that has an environment (``started_at, id`` order) and
    that run's environment, the model version of its previous run of the same model and case that was pulled, the
    next such runs' pointers to ``r`` (a run stored out of order, e.g. ``perfwatch ingest`` of an older job, slots
    in between), and the model's success count (``models.successful_runs``). Runs under the model's lock
    (``lock_model``), so concurrent archives see each other."""
    same_case = and_(Run.model_id == r.model_id, Run.case_name == r.case_name, Run.id != r.id)
    before = or_(Run.started_at < r.started_at, and_(Run.started_at == r.started_at, Run.id < r.id))
    after = or_(Run.started_at > r.started_at, and_(Run.started_at == r.started_at, Run.id > r.id))
    newest_first = (Run.started_at.desc(), Run.id.desc())
    with_env = and_(same_case, Run.environment_id.is_not(None))
    prev = s.execute(
        select(Run.id, Run.environment_id).where(with_env, before).order_by(*newest_first).limit(1)
    ).first()
    r.prev_run_id, r.prev_environment_id = (prev.id, prev.environment_id) if prev else (None, None)
    nxt = s.scalar(select(Run.id).where(with_env, after).order_by(Run.started_at, Run.id).limit(1))
    if nxt is not None:
        s.execute(update(Run).where(Run.id == nxt).values(prev_run_id=r.id, prev_environment_id=r.environment_id))
    pulled = and_(same_case, Run.model_version_id.is_not(None))
    r.prev_model_version_id = s.scalar(
        select(Run.model_version_id).where(pulled, before).order_by(*newest_first).limit(1)
    )
    nxt = s.scalar(select(Run.id).where(pulled, after).order_by(Run.started_at, Run.id).limit(1))
    if nxt is not None:
        s.execute(update(Run).where(Run.id == nxt).values(prev_model_version_id=r.model_version_id))
    s.execute(
        update(Model)
        .where(Model.id == r.model_id)
        .values(successful_runs=Model.successful_runs + 1)
        .execution_options(synchronize_session=False)
    )


def _compare_facts(s: Session, verdict: CompareRecord) -> dict[str, Any]:
    """The 0009 columns of a run compared as ``verdict`` says (``Run.compare_*``, the row of ``comparisons`` the
    archive writes with it), with the compared baseline run's median (ms) read from the store."""
    baseline = verdict.baseline_run_ids[0] if verdict.baseline_run_ids else None
    return {
        "compare_baseline_run_id": baseline,
        "compare_baseline_median_ms": None
        if baseline is None
        else s.scalar(select(Run.median_step_ms).where(Run.id == baseline)),
        "compare_ratio": verdict.ratio,
        "compare_ci_low": verdict.ci_low,
        "compare_ci_high": verdict.ci_high,
        "compare_method": verdict.method,
        "compare_metric": verdict.metric,
    }


# migrations 0008's, 0009's and 0011's backfills, for stores filled without the archive (bench/store.py's bulk load)
_BACKFILL_RUN_FACTS = (
    """UPDATE runs SET prev_run_id = s.prev_run_id, prev_environment_id = s.prev_environment_id
    FROM (
        SELECT id, LAG(id) OVER w AS prev_run_id, LAG(environment_id) OVER w AS prev_environment_id
        FROM runs
        WHERE environment_id IS NOT NULL
        WINDOW w AS (PARTITION BY model_id, case_name ORDER BY started_at, id)
    ) s
    WHERE runs.id = s.id AND s.prev_run_id IS NOT NULL""",
    """UPDATE models SET
        successful_runs = (SELECT COUNT(*) FROM runs r WHERE r.model_id = models.id AND r.status = 'success')""",
    """UPDATE runs SET
        compare_baseline_run_id = c.baseline_run_id,
        compare_baseline_median_ms = br.median_step_ms,
        compare_ratio = c.ratio,
        compare_ci_low = c.ci_low,
        compare_ci_high = c.ci_high,
        compare_method = c.method,
        compare_metric = c.metric
    FROM comparisons c
    LEFT JOIN runs br ON br.id = c.baseline_run_id
    WHERE c.run_id = runs.id""",
    """UPDATE runs SET
        prev_model_version_id = s.prev_model_version_id,
        n_measured = q.n,
        p10_step_ms = q.p10_ms,
        p90_step_ms = CASE WHEN q.run_id IS NULL THEN runs.p90_step_ms ELSE q.p90_ms END
    FROM (
        SELECT id,
               CASE WHEN model_version_id IS NULL THEN NULL
                    ELSE LAG(model_version_id) OVER (PARTITION BY model_id, case_name, model_version_id IS NULL
                                                     ORDER BY started_at, id) END AS prev_model_version_id
        FROM runs
    ) s
    LEFT JOIN step_quantiles q ON q.run_id = s.id AND q.phase = 'measured'
    WHERE runs.id = s.id AND (s.prev_model_version_id IS NOT NULL OR q.run_id IS NOT NULL)""",
)


def backfill_run_facts(conn: Connection) -> None:
    """Recompute every run's previous-environment facts and every model's success count (the 0008 columns
    ``_keep_run_facts`` keeps per archive), every run's comparison facts (0009, ``_compare_facts``) and its history
    facts (0011: its previous pulled run's model version, its measured summary's n, p10 and p90) from the stored
    rows, in the caller's transaction: for a store filled by bulk ``COPY`` rather than ``store_run``. Four
    statements; on 318,882 runs (PostgreSQL) they take about as long as migrations 0008, 0009 and 0011
    (docs/operations.md)."""
    for sql in _BACKFILL_RUN_FACTS:
        conn.execute(text(sql))


_T = TypeVar("_T")


def _with_retries(fn: Callable[[], _T]) -> _T:
    """Run a store transaction, retrying on a concurrent-writer conflict (two first archives creating
    the same model row, a busy SQLite file, a PostgreSQL deadlock) with a short randomised backoff."""
    for attempt in range(_RETRIES):
        try:
            return fn()
        except (IntegrityError, OperationalError):
            if attempt == _RETRIES - 1:
                raise
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")


def record_failure(db_url: str, ctx: RunContext, stage: str, error: str, *, version: str | None = None) -> int:
    """Store a failed run with the stage that failed and its error; returns the run id.

    ``version``: the version the request resolved to, when the run got that far (``latest`` -> ``2``);
    it is stored as the row's version (``runs.version_requested``; the params keep what was asked).

    Nothing else is written for a failed run: no samples, no summary, no zero step time. An earlier
    failed attempt of the same run is replaced, its error kept below the new one ("earlier attempt");
    the stored error is cut at 20000 characters.

    Raises:
        SuccessAlreadyStored: the run is already stored as a success; it is kept and nothing is written.
        tasks.store.engine.StoreUnreachable: the store cannot be reached (nothing is written).
    """

    def tx() -> int:
        with session_scope(db_url) as s:
            model = get_or_create_model(s, ctx.case.model)
            lock_model(s, model.id)
            earlier = _replace_failed_run(s, ctx)
            text = error if earlier is None else f"{error}\n\n--- an earlier attempt failed at {earlier}"
            run = Run(
                dag_id=ctx.dag_id,
                dag_run_id=ctx.dag_run_id,
                case_name=ctx.case.name,
                model_id=model.id,
                version_requested=version or ctx.case.version,
                plan_version=ctx.case.version,
                trigger=ctx.trigger,
                status="failed",
                failed_stage=stage,
                error=text[:_ERROR_CHARS],
                params=ctx.case.to_xcom(),
                started_at=ctx.started_at,
                finished_at=utcnow(),
            )
            s.add(run)
            s.flush()
            return run.id

    return _with_retries(tx)


def _aligned(values: list[float] | None, n: int) -> list[float | None]:
    """``values`` as one per step of ``n`` steps: None each where the runner recorded none, or a list that
    does not line up with the steps."""
    return list(values) if values and len(values) == n else [None] * n


def step_quantiles(
    times: list[float], cpu: list[float | None] | None = None, wait: list[float | None] | None = None
) -> dict[str, Any]:
    """The ``step_quantiles`` columns (``tasks.store.schema.StepQuantiles``) of one phase's step times ``times``
    (ms, our timer, any order) and the steps' ``cpu`` / ``wait`` ms (None where not recorded): ``n``, mean,
    min, max, the nearest-rank percentiles of ``QUANTILE_RANKS`` (rank ``(n * q + 99) // 100`` ascending, as
    migration 0007's backfill) and the median of the recorded counters (None when none was).

    Raises:
        ValueError: ``times`` is empty (a phase without samples has no summary row).
    """
    if not times:
        raise ValueError("step_quantiles: times is empty; expected at least one step time (ms)")
    ordered = sorted(times)
    n = len(ordered)
    row: dict[str, Any] = {"n": n, "mean_ms": statistics.fmean(ordered), "min_ms": ordered[0], "max_ms": ordered[-1]}
    for q in QUANTILE_RANKS:
        row[f"p{q}_ms"] = nearest_rank(ordered, q)
    for name, values in (("cpu", cpu), ("wait", wait)):
        recorded = [v for v in values or [] if v is not None]
        row[f"{name}_median_ms"] = statistics.median(recorded) if recorded else None
    return row


def nearest_rank(ordered: list[float], q: int) -> float:
    """The nearest-rank ``q``-th percentile of ``ordered`` (ascending, not empty): ``x(ceil(n q / 100))``, the
    rank ``(n * q + 99) // 100``; the one rule of every stored percentile (``runs.p90_step_ms``,
    ``step_quantiles``, migration 0007's backfill), which the order-statistic intervals of
    ``tasks.analysis.percentiles`` bracket."""
    return ordered[(len(ordered) * q + 99) // 100 - 1]


def store_run(
    db_url: str,
    ctx: RunContext,
    pulled: PulledModel,
    env: EnvRecord,
    warmup: WarmupRecord,
    run: ProfiledRun,
    parsed: ParseRecord,
    verdict: CompareRecord,
    *,
    samples: dict[str, Any],
    parsed_tables: dict[str, Any],
    gx_result: Any,
    telemetry_summary: dict[str, Any] | None,
    artifacts: list[tuple[str, str, int, str]],
    archive_uri: str | Callable[[int], str],
    auto_accept: bool = True,
    before_commit: Callable[[], None] | None = None,
) -> int:
    """Write a finished run in one transaction; returns its run id.

    ``samples``: the runner's step-time lists (ms, our timer: ``warmup_step_times_ms``,
    ``measured_step_times_ms``, ``profiled_step_times_ms``) and, where the runner recorded them, each step's CPU
    time and run-queue wait (``warmup_cpu_ms``, ``warmup_wait_ms``, ``measured_cpu_ms``, ``measured_wait_ms``;
    stored in the samples' ``cpu_ms``, ``wait_ms``, NULL without them); ``parsed_tables``: the parse stage's
    ``parsed.json``; ``telemetry_summary``: the summary of ``samples["telemetry"]``
    (``tasks.analysis.telemetry.summarize``), stored as ``run_tables`` 'telemetry' with its samples;
    ``artifacts``: (kind, path relative to the run's archive directory, size in bytes, sha256) rows, stored
    with the directory's URI in front; ``archive_uri``: the run's archive directory, or a function of the new
    run id that names it (the archive names its directories after the run id, known only once the row is
    flushed; it is called again on a retried transaction); ``before_commit`` runs last inside the transaction
    (the archive moves its copy into place there; it may run again when the transaction is retried, so it
    must be idempotent). An earlier failed row of the run is replaced.

    Raises:
        SuccessAlreadyStored: the run is already stored as a success (nothing is written; ``before_commit``
            is not called).
        tasks.store.engine.StoreUnreachable: the store cannot be reached or the connection was lost.
        sqlalchemy.exc.SQLAlchemyError: the transaction failed after its retries (nothing is written).
    """
    measured = samples["measured_step_times_ms"]
    ordered = sorted(measured)
    # the run's cold start: the warm-up process's first step, or with a reused warm-up (no warm-up process
    # ran) the profiled-run process's own first step, never the reused run's
    cold_step_ms = warmup.cold_step_ms if warmup.reused_from_run_id is None else samples.get("cold_step_ms")

    def tx() -> int:
        with session_scope(db_url) as s:
            model = get_or_create_model(s, ctx.case.model)
            lock_model(s, model.id)  # before any row that references it: see accept_baseline
            _replace_failed_run(s, ctx)
            mv = s.scalar(
                select(ModelVersion).where(
                    ModelVersion.model_id == model.id,
                    ModelVersion.version == pulled.version,
                    ModelVersion.digest == pulled.digest,
                )
            )
            if mv is None:
                mv = ModelVersion(
                    model_id=model.id,
                    version=pulled.version,
                    digest=pulled.digest,
                    source_uri=pulled.source_uri,
                    format=pulled.format,
                    size_bytes=pulled.size_bytes,
                )
                s.add(mv)
            envrow = s.scalar(select(Environment).where(Environment.fingerprint_id == env.fingerprint_id))
            if envrow is None:
                envrow = Environment(
                    fingerprint_id=env.fingerprint_id, comparability_key=env.comparability_key, data=env.data
                )
                s.add(envrow)
            s.flush()
            r = Run(
                dag_id=ctx.dag_id,
                dag_run_id=ctx.dag_run_id,
                case_name=ctx.case.name,
                model_id=model.id,
                version_requested=ctx.case.version,
                plan_version=ctx.case.version,
                model_version_id=mv.id,
                environment_id=envrow.id,
                trigger=ctx.trigger,
                status="success",
                params=ctx.case.to_xcom(),
                started_at=ctx.started_at,
                finished_at=utcnow(),
                median_step_ms=run.median_step_ms,
                mean_step_ms=statistics.fmean(measured),
                # the measured summary's n, p10 and p90, as its step_quantiles row below (0010, 0011)
                n_measured=len(measured),
                p10_step_ms=nearest_rank(ordered, 10),
                p90_step_ms=nearest_rank(ordered, 90),
                throughput_eps=run.throughput_eps,
                # 0013: which figure it is (median step, server's queries/s, offline's run), the rule that chose it
                throughput_def=None
                if run.throughput_eps is None
                else throughput_def((run.latency_ms or {}).get("serving")),
                cold_step_ms=cold_step_ms,
                warmup_steps=warmup.warmup_steps,
                steady=warmup.steady,
                profile_overhead_ratio=run.profile_overhead_ratio,
                peak_rss_bytes=run.peak_rss_bytes,
                peak_device_bytes=run.peak_device_bytes,
                profiler_avg_step_ms=parsed.avg_step_time_ms,
                input_bound_pct=parsed.input_bound_pct,
                verdict=verdict.verdict,
                **_compare_facts(s, verdict),
            )
            s.add(r)
            s.flush()
            _keep_run_facts(s, r)
            r.archive_uri = uri = archive_uri(r.id) if callable(archive_uri) else archive_uri
            for phase in ("warmup", "measured", "profiled"):
                times = samples.get(f"{phase}_step_times_ms") or []
                cpu = _aligned(samples.get(f"{phase}_cpu_ms"), len(times))
                wait = _aligned(samples.get(f"{phase}_wait_ms"), len(times))
                s.add_all(
                    StepSample(run_id=r.id, phase=phase, step=i, step_time_ms=t, cpu_ms=cpu[i], wait_ms=wait[i])
                    for i, t in enumerate(times)
                )
                if times:  # the summary the named queries read, kept when the samples are thinned (0007)
                    s.add(StepQuantiles(run_id=r.id, phase=phase, **step_quantiles(times, cpu, wait)))
            if samples.get("telemetry"):  # the measured steps' device telemetry (tasks.runner.telemetry)
                tel = samples["telemetry"]
                s.add_all(TelemetrySample(run_id=r.id, seq=i, **row) for i, row in enumerate(tel["samples"]))
                s.add(RunTable(run_id=r.id, tool="telemetry", data=telemetry_summary))
            if warmup.reused_from_run_id is not None:  # tasks.store.reads.warmup_to_reuse
                s.add(RunTable(run_id=r.id, tool=REUSED_WARMUP_TOOL, data={"run_id": warmup.reused_from_run_id}))
            s.add_all(
                RunTable(run_id=r.id, tool=key, data=samples[key])  # how it ran; a tflite run's figures
                for key in ("execution", "tflite", "threads", "agreement")
                if samples.get(key)
            )
            s.add_all(
                OpStat(run_id=r.id, **{k: row[k] for k in _OP_COLUMNS}) for row in parsed_tables.get("op_stats", [])
            )
            s.add_all(
                StepBreakdown(run_id=r.id, step_num=int(row["step"]), component=comp, ms=float(ms))
                for row in parsed_tables.get("step_breakdown", [])
                for comp, ms in row.items()
                if comp != "step" and ms is not None
            )
            s.add_all(RunTable(run_id=r.id, tool=tool, data=data) for tool, data in group_tables(parsed_tables).items())
            if samples.get("inputs") is not None:  # what the runner fed the model, and how (RUN_INPUT_KEYS)
                fed = {k: samples[k] for k in RUN_INPUT_KEYS if k in samples}
                if run.latency_ms is not None:  # the stage's, with each percentile's interval and n
                    fed["latency_ms"] = run.latency_ms
                s.add(RunTable(run_id=r.id, tool="inputs", data=fed))
            if (point := server_point_record(samples, run.latency_ms)) is not None:
                s.add(RunTable(run_id=r.id, tool=SERVER_POINT_TOOL, data=point))
            if pulled.built is not None:  # what a builder built (its weights' and config's digests)
                s.add(RunTable(run_id=r.id, tool=BUILT_MODEL_TOOL, data=pulled.built))
            s.add(
                RunComparison(
                    run_id=r.id,
                    baseline_run_id=r.compare_baseline_run_id,
                    method=verdict.method,
                    verdict=verdict.verdict,
                    ratio=verdict.ratio,
                    ci_low=verdict.ci_low,
                    ci_high=verdict.ci_high,
                    median_limit_ms=verdict.median_limit_ms,
                    metric=verdict.metric,
                    gx_success=verdict.gx_success,
                    gx_result=gx_result,
                    evidence=verdict.evidence,
                )
            )
            s.add_all(
                Artifact(run_id=r.id, kind=kind, uri=f"{uri}/{rel}", size_bytes=size, sha256=sha)
                for kind, rel, size, sha in artifacts
            )
            if auto_accept and verdict.verdict in ACCEPTED_VERDICTS and not verdict.baseline_refused:
                accept_baseline(
                    s, r, env.comparability_key, accepted_by="perfwatch", reason=f"automatic: verdict {verdict.verdict}"
                )
            s.flush()
            if before_commit is not None:  # a failure here rolls the transaction back
                before_commit()
            return r.id

    return _with_retries(tx)


#: the ``run_tables`` tool of a built model's record (``PulledModel.built``: constructor, Keras version, parameter
#: count, shapes, the config's and the weights' sha256)
BUILT_MODEL_TOOL = "model_built"
#: the ``run_tables`` tool of a server run's reported point's per-query latencies (:func:`server_point_record`)
SERVER_POINT_TOOL = "server_point"


def server_point_record(samples: dict[str, Any], latency_ms: dict[str, Any] | None) -> dict[str, Any] | None:
    """The per-query latencies of a server run's reported point (its ``latency_ms["serving"]["point_index"]``,
    ``tasks.analysis.serving.summarize``; a search's max, else its only or last rate), from the runner's result
    (``samples["serving"]["points"]``): ``target_qps``, ``issued_qps``, ``seed``, ``latency_ms`` (per query,
    arrival to result, ms), ``host_load`` and ``invalid`` (the runner's ``loadgen.overload_reason``), what a
    later run's per-query tail gate compares with (``tasks.analysis.verdict.gate_per_query``). Kept in its own
    ``run_tables`` row (:data:`SERVER_POINT_TOOL`), out of the ``inputs`` row that ``runs`` reads for every listed
    run. None for another scenario."""
    served = (latency_ms or {}).get("serving") or {}
    points = (samples.get("serving") or {}).get("points") or []
    if served.get("scenario") != "server" or not points:
        return None
    p = points[min(int(served.get("point_index", len(points) - 1)), len(points) - 1)]
    out = {k: p.get(k) for k in ("target_qps", "issued_qps", "seed", "host_load", "invalid")}
    # to 0.1 us: the timer's figures need no more, and a fast point's 10,000 queries stay ~100 KB of JSON
    return out | {"latency_ms": [round(float(x), 4) for x in p.get("latency_ms") or []]}


RUN_INPUT_KEYS = ("case_mode", "inputs", "input_source", "safe_mode", "signature", "latency_ms", "fed")
"""What the runner's result says it measured (``tasks.runner.protocol``), kept as the run's ``run_tables``
row ``inputs``: the step kind, per input the shape fed (batch dimension first), dtype and value range,
``synthetic`` or the ``input_fn``, Keras ``safe_mode``, the SavedModel signature, and in ``infer`` mode
the per-batch latency percentiles (ms) and throughput (examples/s), with each percentile's interval and the
number of batches (``ProfiledRun.latency_ms``: ``tasks.analysis.percentiles.with_intervals``), and ``fed``: per
phase the distinct batch shapes fed with their step counts and the steps that compiled
(``tasks.runner.protocol.Fed``)."""

RUN_TABLE_GROUPS: dict[str, tuple[str, ...]] = {
    "overview_page": (
        "hardware_type",
        "device_type",
        "device_core_count",
        "num_steps",
        "avg_step_time_ms",
        "step_time_stddev_ms",
        "breakdown_avg_ms",
        "input_bound_pct",
        "bottleneck",
        "conclusion",
        "recommendation",
        "statements",
        "device_idle_pct",
        "diagnostics",
    ),
    "framework_op_stats": ("idle_time_us",),
    "input_pipeline_analyzer": ("input_steps", "input_ops", "input_time_breakdown_us", "input_recommendations"),
    "memory_profile": ("memory", "memory_absent_reason"),
    "kernel_stats": ("kernel_stats", "kernel_stats_absent_reason"),
    "diagnosis": ("findings",),
    "cross_check": ("cross_check",),
}
"""How the parsed profile's fields are kept in ``run_tables`` (one JSON row per xprof tool); the
op table and the step breakdown have tables of their own, everything else lands in ``parse``."""


def group_tables(parsed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Split a parsed profile (``parsed.json``) into the ``run_tables`` rows, keyed by tool."""
    out: dict[str, dict[str, Any]] = {}
    taken = {"op_stats", "step_breakdown"}
    for tool, fields in RUN_TABLE_GROUPS.items():
        present = {f: parsed[f] for f in fields if f in parsed}
        if present:
            out[tool] = present
        taken.update(fields)
    rest = {k: v for k, v in parsed.items() if k not in taken}
    if rest:
        out["parse"] = rest
    return out


_OP_COLUMNS = (
    "host_or_device",
    "op_type",
    "op_name",
    "occurrences",
    "total_self_time_us",
    "avg_self_time_us",
    "self_time_share",
)


def accept_baseline(s: Session, run: Run, comparability_key: str, *, accepted_by: str, reason: str) -> Baseline:
    """Make ``run`` the active baseline of its (model, case, environment); the old one is superseded
    and stays in the lookback history.

    The model's row is locked (``lock_model``), so two archives of the same model accept one after
    the other: the second sees the first's baseline and supersedes it instead of colliding on the
    one-active index.
    """
    lock_model(s, run.model_id)
    now = utcnow()
    s.execute(
        update(Baseline)
        .where(
            Baseline.model_id == run.model_id,
            Baseline.case_name == run.case_name,
            Baseline.comparability_key == comparability_key,
            Baseline.superseded_at.is_(None),
        )
        .values(superseded_at=now)
    )
    b = Baseline(
        model_id=run.model_id,
        case_name=run.case_name,
        comparability_key=comparability_key,
        run_id=run.id,
        accepted_at=now,
        accepted_by=accepted_by,
        reason=reason,
    )
    s.add(b)
    s.flush()
    return b
