"""perfwatch: profile TensorFlow models and gate their step time.

pull-model-version → env-fingerprint → warm-up → profiled run → parse → baseline-compare → archive

Two DAGs run these stages, built by one function (``profile_dag``) so they cannot drift apart:

* ``perfwatch_profile``: nightly (cron, no catchup) it profiles every model in the YAML config
  (``PERFWATCH_CONFIG``); a manual trigger profiles one model version given as Params, or a case of its config
  matrix (Param ``case``, or ``all``). One run at a time (``max_active_runs=1``): a night does not overlap the next.
* ``perfwatch_release``: the release gates. An event of a model's Asset ``perfwatch://models/<model>``
  (``perfwatch publish``), or a triggered run with the Params ``model``, ``version`` (``perfwatch publish`` on a
  paused DAG, whose Asset events Airflow would not queue), runs the paired release gate of the published version
  over the model's config cases. Several at once (``PERFWATCH_MAX_ACTIVE_RELEASES``, default 8), never behind the
  nightly: the measuring pool (``perfwatch_profile``) and the measuring workers' concurrency are the only
  serialisation, and a release's ``measure`` outranks the nightly's in that pool (``priority_weight``), so a
  release waits at most for the one measurement in progress, not for the night.

The three measuring stages are one task, ``measure``, on a measuring queue: a task runs on one worker, so the
fingerprint describes the host that warmed up and measured, and a measuring worker with Celery concurrency 1
measures one case at a time (docs/deployment.md: N hosts, N cases at once). A case that names a device kind
goes to that kind's queue (the config's ``queues:``): one mapped task group per measuring queue, the default
queue's with the plain task ids, each other's named ``on_<queue>``. The stages form a task group mapped over the
cases, so one DAG run profiles many models and matrix cases, each named in the grid, and a failing case fails
only its own task instances. After the cases, ``watch_trend`` looks at each case's nightly series and plans a paired
gate for each tentative slowdown at a series' end (the version before it beside the newest, or the old environment
beside the new); those gates are measured by the same mapped task groups (``confirm``, ``confirm_on_<queue>``),
through the same measuring pool, and ``judge_trend`` alerts on what they confirm (docs/monitoring.md). Failed runs,
regressions and ``env-changed`` verdicts alert through ``PerfwatchNotifier`` (the plugin's ``perfwatch.notifier``).
Every task reads the store once, from the Airflow connection ``PERFWATCH_DB_CONN_ID`` names when it is set
(``perfwatch.hooks.store_url``), and hands its URL to what it calls (``db_url``). The stages live in
``tasks.stages.pipeline``; nothing heavy is imported here, so parsing this file never imports TensorFlow.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import (
    Asset,
    AssetAny,
    CronTriggerTimetable,
    Param,
    conf,
    dag,
    get_current_context,
    task,
    task_group,
)
from airflow.sdk.exceptions import AirflowFailException
from perfwatch.hooks import store_url
from perfwatch.notifier import PerfwatchNotifier

from tasks.services.publish import release_asset_uris
from tasks.stages.devices import dag_measuring_queues, group_id, id_part
from tasks.stages.params import case_param_schema

# Measurements need a quiet host. Per host: the measuring worker that serves PROFILE_QUEUE runs with Celery
# concurrency 1 (docker-compose.yml, docs/deployment.md), so N measuring hosts measure N cases at once and
# never two on one host. Per deployment: this pool's slots cap how many measure at once (1 by default, the
# number of measuring hosts in a fleet; on one host with the LocalExecutor it is what keeps them apart).
PROFILE_POOL = "perfwatch_profile"
# A measurement on a busy host (tasks.stages.pipeline.HostBusy) is taken again later, this often and
# this long after (settings, read at DAG parse time); the last try archives the verdict as
# inconclusive ("host busy: ...") and the run goes red.
HOST_BUSY_RETRIES = int(os.environ.get("PERFWATCH_HOST_BUSY_RETRIES", "2"))
HOST_BUSY_RETRY_DELAY = pendulum.duration(seconds=float(os.environ.get("PERFWATCH_HOST_BUSY_RETRY_DELAY_S", "600")))
# The measure task (fingerprint, warm-up, profiled run: the stages that must see the measured hardware) goes
# to this Celery queue; docker-compose.yml serves "gpu" with a GPU worker. Default: Airflow's own default.
PROFILE_QUEUE = os.environ.get("PERFWATCH_PROFILE_QUEUE", "default")
# Every measuring queue: PROFILE_QUEUE (cases of device auto), then each queue of the config's `queues:` (a
# device kind's or hardware label's), read when the DAG is parsed; one mapped task group per queue.
MEASURING_QUEUES = dag_measuring_queues(PROFILE_QUEUE)
# Each case's task instances are named "<model> <case name>" in the grid (the run state's label, set by plan).
CASE_LABEL = "{{ task.op_kwargs['state']['label'] }}"
# A task that hands on run states (tasks.records.RunState, tens of KB with a verdict's evidence) does not have
# Airflow log its return value ("Done. Returned value was: {...}", one line that size): the stage's own lines say
# what it did; the XCom is in the grid.
STATE_XCOM = {"show_return_value_in_logs": False}
# Airflow's own caps on a night (docs/deployment.md). The task instances of one DAG run that run at once: Airflow's
# default ([core] max_active_tasks_per_dag) is 16, so 32 or 64 measuring hosts could never all be busy; read at
# parse time. [core] parallelism (per scheduler, default 32) caps them too, and [core] max_map_length (default
# 1024) the cases of a night (100 models x 30 cases is 3000): deployment settings (docker-compose.yml sets them),
# the latter read here for plan to refuse, by name, a night longer than Airflow would map.
MAX_ACTIVE_TASKS = int(os.environ.get("PERFWATCH_MAX_ACTIVE_TASKS", "128"))
MAX_MAP_LENGTH = conf.getint("core", "max_map_length")
# A task queued longer than [scheduler] task_queued_timeout (s) is requeued, twice, then failed by the scheduler
# (no live worker on its queue): measure's failure callback then records the case with that reason.
QUEUED_TIMEOUT_S = conf.getfloat("scheduler", "task_queued_timeout")


NIGHTLY = CronTriggerTimetable("0 2 * * *", timezone="UTC")
# Release triggers: one Asset per model of the nightly config (perfwatch://models/<model>, read when the DAG
# is parsed); an event of one (`perfwatch publish`) runs perfwatch_release's paired gate of the published version.
RELEASE_ASSETS = [Asset(name=name, uri=uri) for uri, name in release_asset_uris()]
# Release gates at once (each measures through the pool, one case at a time per measuring host).
MAX_ACTIVE_RELEASES = int(os.environ.get("PERFWATCH_MAX_ACTIVE_RELEASES", "8"))
# A release's tasks outrank the nightly's for pool slots (Airflow's default weights are the count of downstream
# tasks, under 10 here): a queued release measures next, after the measurement in progress.
RELEASE_PRIORITY = 100


def measure_failed(context) -> None:
    """measure's failure callback: a case whose measure task the scheduler failed before it ran (queued past
    task_queued_timeout, or its worker lost) is recorded in the store as failed with the reason, so its pages and
    the DAG run's alert name it; a failure its stage recorded already is left as it is (tasks.stages.pipeline)."""
    from tasks.stages.pipeline import record_unmeasured

    ti = context["ti"]
    (pulled,) = context["task"].upstream_task_ids  # the case's pull_model_version: its state, as measure got it
    state = ti.xcom_pull(task_ids=pulled, map_indexes=ti.map_index)
    if state:
        record_unmeasured(
            state, queue=ti.queue, worker=ti.hostname or None, queued_timeout_s=QUEUED_TIMEOUT_S, db_url=store_url()
        )


def profile_dag(dag_id: str, schedule, *, max_active_runs: int, trigger: str, priority: dict | None = None):
    """The DAG ``dag_id`` of the seven stages (module docstring): ``schedule`` (a timetable, Assets or None),
    ``max_active_runs`` of it at once, the Param ``trigger``'s default, and default task arguments ``priority``
    (``priority_weight``/``weight_rule``: the release DAG's place in the measuring pool)."""
    return dag(
        dag_id=dag_id,
        schedule=schedule,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=max_active_runs,
        max_active_tasks=MAX_ACTIVE_TASKS,
        tags=["perfwatch", "profiling" if trigger != "release" else "release"],
        default_args={"retries": 0, **(priority or {})},
        # alerts (webhook of the Airflow connection PERFWATCH_ALERT_CONN_ID): every failed DAG run, and a
        # successful one only when a run of it has a noteworthy verdict (env-changed)
        on_failure_callback=PerfwatchNotifier(),
        on_success_callback=PerfwatchNotifier(only_noteworthy=True),
        params={
            "model": Param(
                None,
                type=["null", "string"],
                minLength=1,
                maxLength=128,
                description="Model name in the store; empty profiles every model of the config.",
            ),
            **{name: Param(**schema) for name, schema in case_param_schema("dag").items()},  # the Case fields
            "case": Param(
                None,
                type=["null", "string"],
                minLength=1,
                maxLength=64,
                description="With model: a case of the model's config entry (e.g. "
                "train-bs32-mixed_bfloat16-xla), or 'all' for its whole matrix; its axes come "
                "from the config, version and measured_steps from these Params. Empty: one "
                "case from these Params.",
            ),
            "trigger": Param(
                trigger, type="string", enum=["manual", "release"], description="'release' marks a release-gate run."
            ),
        },
        doc_md=__doc__,
    )(_stages)


def _stages():
    """One DAG run's data flow: plan the cases, then each case's stages (a mapped task group per measuring queue),
    then the trend watch and the outcome."""

    @task(**STATE_XCOM)
    def plan() -> list[dict]:
        """Resolve the cases of this DAG run (release Asset events, Params, or the YAML config when no model
        is given)."""
        from tasks.services.publish import release_cases
        from tasks.stages.pipeline import check_map_length, plan_cases, trigger_kind

        ctx = get_current_context()
        dag_run = ctx["dag_run"]
        events = [(a.uri, dict(e.extra or {})) for a, evs in ctx["triggering_asset_events"].items() for e in evs]
        db_url = store_url()
        if events:
            return release_cases(
                dag_run.dag_id, dag_run.run_id, events, measuring_queues=MEASURING_QUEUES, db_url=db_url
            )
        trigger = trigger_kind(dag_run.run_type, ctx["params"].get("trigger"))
        params = dict(ctx["params"])
        states = plan_cases(dag_run.dag_id, dag_run.run_id, trigger, params, None, MEASURING_QUEUES, db_url=db_url)
        return check_map_length(states, MAX_MAP_LENGTH)

    @task(**STATE_XCOM)
    def route(states: list[dict], queue: str) -> list[dict]:
        """The planned cases that the measuring workers of ``queue`` measure (plan chose each case's queue)."""
        from tasks.stages.devices import states_on

        return states_on(states, queue)

    @task(map_index_template=CASE_LABEL, **STATE_XCOM)
    def pull_model_version(state: dict) -> dict:
        """Resolve the model version in the store, copy it to the work dir, sha256 it."""
        from tasks.stages.pipeline import run_stage

        return run_stage(state, "pull-model-version", db_url=store_url()).to_xcom()

    @task(
        map_index_template=CASE_LABEL,
        pool=PROFILE_POOL,
        retries=HOST_BUSY_RETRIES,
        retry_delay=HOST_BUSY_RETRY_DELAY,
        on_failure_callback=measure_failed,
        **STATE_XCOM,
    )
    def measure(state: dict) -> dict:
        """env-fingerprint → warm-up → profiled run, one task so one host: the fingerprint (TF build, NVML, CPU,
        packages) describes the host that warmed up (fresh process, steps until steady) and measured (fresh
        process, measured steps with the profiler off, then the profiled window, and the paired gate). Retried
        later, all three again, only when the host was busy; any other failure is final."""
        from tasks.stages.pipeline import HostBusy, measure_case

        ti = get_current_context()["ti"]
        try:
            return measure_case(
                state,
                retry_left=ti.try_number <= ti.max_tries,
                retry_in_s=HOST_BUSY_RETRY_DELAY.total_seconds(),
                attempt=(ti.try_number, ti.max_tries + 1),
                db_url=store_url(),
            ).to_xcom()
        except HostBusy:
            raise
        except Exception as e:
            raise AirflowFailException(f"{type(e).__name__}: {e}") from e

    @task(map_index_template=CASE_LABEL, **STATE_XCOM)
    def parse(state: dict) -> dict:
        """xprof's converters: step-time breakdown, input-bound %, op self-times, memory."""
        from tasks.stages.pipeline import run_stage

        return run_stage(state, "parse", db_url=store_url()).to_xcom()

    @task(map_index_template=CASE_LABEL, **STATE_XCOM)
    def baseline_compare(state: dict) -> dict:
        """Statistics against the comparable baseline; GX expectation suites enforce the thresholds."""
        from tasks.stages.pipeline import run_stage

        return run_stage(state, "baseline-compare", db_url=store_url()).to_xcom()

    @task(map_index_template=CASE_LABEL)
    def archive(state: dict) -> dict:
        """Store run, samples, tables and verdict in one transaction; archive the profile.
        Then fail the task if the verdict is a regression, undecided on a busy host, or a release gate that
        compared nothing, so alerting fires."""
        from tasks.stages.pipeline import HostBusy, NotCompared, RegressionDetected, raise_on_outcome, run_stage

        done = run_stage(state, "archive", db_url=store_url())
        try:
            raise_on_outcome(done)
        except (RegressionDetected, HostBusy, NotCompared) as e:
            raise AirflowFailException(str(e)) from e
        return done.archived.to_xcom()

    @task(trigger_rule="all_done", multiple_outputs=True)
    def watch_trend(planned: list[dict]) -> dict[str, list[dict]]:
        """After archiving, whatever the verdicts: new change points in each case's nightly series, the creep guard
        of its baseline, and the paired gates that confirm tonight's tentative slowdowns (``confirm``, measured
        next like any case). Alerts nothing itself: ``judge_trend`` does, after the confirmations."""
        from tasks.services.trend import check_dag_run

        dag_run = get_current_context()["dag_run"]
        return check_dag_run(dag_run.dag_id, dag_run.run_id, planned, db_url=store_url())

    @task(trigger_rule="all_done")
    def judge_trend(trend: dict) -> list[str]:
        """After the confirmations, whatever they did: fails, so alerting fires, on a new slowdown, a creep, or a
        tentative slowdown that its paired gate confirmed (naming the gate's interval)."""
        from tasks.services.trend import TrendAlert, judge_night

        try:
            return judge_night(trend, db_url=store_url())
        except TrendAlert as e:
            raise AirflowFailException(str(e)) from e

    @task(trigger_rule="none_failed")
    def outcome() -> None:
        """Runs only when every case and the trend watch succeeded (a measuring queue with no case in this run is
        skipped); otherwise it is upstream_failed, which makes the DAG run red (watch_trend, which runs whatever
        the cases did, would leave it green)."""

    def each_case(queue: str, confirming: bool = False):
        """The stages of one case whose measuring queue is ``queue``, as a task group to map over its cases: a task
        instance waits only for the same case's upstream, so one failing case fails only itself. ``confirming``:
        the group of the night's paired confirmations (``confirm``, ``confirm_on_<queue>``)."""
        group = group_id(queue, PROFILE_QUEUE)
        if confirming:
            group = f"confirm_{group}" if group else "confirm"

        @task_group(group_id=group or "each_case", prefix_group_id=group is not None)
        def stages(state: dict):
            measured = measure.override(queue=queue)(state=pull_model_version(state=state))  # fingerprint, warm-up, run
            return archive(state=baseline_compare(state=parse(state=measured)))

        return stages

    planned, done = plan(), outcome()
    trend = watch_trend(planned)
    judged = judge_trend(trend)
    for queue in MEASURING_QUEUES:
        routed = route.override(task_id=f"route_{id_part(queue)}")
        states = planned if len(MEASURING_QUEUES) == 1 else routed(planned, queue)
        cases = each_case(queue).expand(state=states)
        cases >> trend
        cases >> done
        to_confirm = route.override(task_id=f"route_confirm_{id_part(queue)}")(trend["confirm"], queue)
        confirms = each_case(queue, confirming=True).expand(state=to_confirm)
        confirms >> judged
        confirms >> done
    judged >> done


perfwatch_profile = profile_dag("perfwatch_profile", NIGHTLY, max_active_runs=1, trigger="manual")()
perfwatch_release = profile_dag(
    "perfwatch_release",
    AssetAny(*RELEASE_ASSETS) if RELEASE_ASSETS else None,
    max_active_runs=MAX_ACTIVE_RELEASES,
    trigger="release",
    priority={"priority_weight": RELEASE_PRIORITY, "weight_rule": "absolute"},
)()
