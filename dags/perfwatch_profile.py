"""perfwatch: profile TensorFlow models and gate their step time.

pull-model-version → env-fingerprint → warm-up → profiled run → parse → baseline-compare → archive

Nightly (cron, no catchup) it profiles every model in the YAML config (``PERFWATCH_CONFIG``);
a manual trigger profiles one model version given as Params (a release gate when
``trigger`` is ``release``), or a case of its config matrix (Param ``case``, or ``all``). The
stages form a task group mapped over the cases, so one DAG run profiles many models and matrix
cases, each named in the grid, and a failing case fails only its own task instances. On model
release: an event of a model's Asset ``perfwatch://models/<model>`` (``perfwatch publish``) runs the
paired release gate of the published version. Failed runs, regressions and ``env-changed`` verdicts
alert through ``PerfwatchNotifier`` (``perfwatch_alerts.py``). The stages
live in ``tasks.stages.pipeline``; nothing heavy is imported here, so parsing this file never
imports TensorFlow.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import (
    Asset,
    AssetAny,
    AssetOrTimeSchedule,
    CronTriggerTimetable,
    Param,
    dag,
    get_current_context,
    task,
    task_group,
)
from airflow.sdk.exceptions import AirflowFailException
from perfwatch_alerts import PerfwatchNotifier, store_url_from_connection

from tasks.services.publish import release_asset_uris

MEASURED_STEPS = 320  # = tasks.records.DEFAULT_MEASURED_STEPS (tests/system/test_dag.py checks)

PROFILE_POOL = "perfwatch_profile"  # one profiled run at a time: timings need a quiet host
# A measurement on a busy host (tasks.stages.pipeline.HostBusy) is taken again later, this often and
# this long after (settings, read at DAG parse time); the last try archives the verdict as
# inconclusive ("host busy: ...") and the run goes red.
HOST_BUSY_RETRIES = int(os.environ.get("PERFWATCH_HOST_BUSY_RETRIES", "2"))
HOST_BUSY_RETRY_DELAY = pendulum.duration(seconds=float(os.environ.get("PERFWATCH_HOST_BUSY_RETRY_DELAY_S", "600")))
# The stages that must see the measured hardware (fingerprint, warm-up, profiled run) go to this
# Celery queue; docker-compose.yml serves "gpu" with a GPU worker. Default: Airflow's own default.
PROFILE_QUEUE = os.environ.get("PERFWATCH_PROFILE_QUEUE", "default")
# Each case's task instances are named "<model> <case name>" in the grid (the bundle's label, set by plan).
CASE_LABEL = "{{ task.op_kwargs['bundle']['label'] }}"


NIGHTLY = "0 2 * * *"
# Release triggers: one Asset per model of the nightly config (perfwatch://models/<model>, read when the DAG
# is parsed); an event of one (`perfwatch publish`) runs the paired release gate of the published version.
RELEASE_ASSETS = [Asset(name=name, uri=uri) for uri, name in release_asset_uris()]
SCHEDULE = (
    AssetOrTimeSchedule(timetable=CronTriggerTimetable(NIGHTLY, timezone="UTC"), assets=AssetAny(*RELEASE_ASSETS))
    if RELEASE_ASSETS
    else NIGHTLY
)


@dag(
    dag_id="perfwatch_profile",
    schedule=SCHEDULE,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["perfwatch", "profiling"],
    default_args={"retries": 0, "on_execute_callback": store_url_from_connection},
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
        "version": Param(
            "latest", type="string", pattern=r"^(latest|[0-9]+)$", description="Integer version directory, or 'latest'."
        ),
        "batch_size": Param(16, type="integer", minimum=1, maximum=65536),
        "measured_steps": Param(
            MEASURED_STEPS,
            type="integer",
            minimum=5,
            maximum=100000,
            description="Steps timed with the profiler off (a paired release gate "
            "times at most this many steps of each version, stopping as "
            "soon as its interval decides).",
        ),
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
            "manual", type="string", enum=["manual", "release"], description="'release' marks a release-gate run."
        ),
        "mode": Param(
            "train",
            type="string",
            enum=["train", "infer", "tflite"],
            description="What a step is: 'train' (forward, backward, update), 'infer' (one batch's "
            "forward pass; step times are per-batch latencies) or 'tflite'.",
        ),
        "inputs": Param(
            None,
            type=["null", "object"],
            additionalProperties={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "shape": {"type": ["null", "array"], "items": {"type": "integer", "minimum": 1}},
                    "dtype": {"type": ["null", "string"]},
                    "min": {"type": ["null", "integer"]},
                    "max": {"type": ["null", "integer"]},
                },
            },
            description='How to feed the model, per input name: {"image": {"shape": [224, 224, 3]}, '
            '"ids": {"dtype": "int32", "min": 0, "max": 30522}}; shape without '
            "the batch dimension (needed where the model has None), integer range [min, max). "
            "Empty: the model's own input signature.",
        ),
        "input_fn": Param(
            None,
            type=["null", "string"],
            pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
            description="'package.module:function' (importable by the runner) returning a "
            "tf.data.Dataset of model-ready batches; step time then includes that "
            "pipeline. Empty: synthetic batches.",
        ),
        "signature": Param(
            "serving_default",
            type="string",
            minLength=1,
            maxLength=128,
            description="The SavedModel signature called in 'infer' mode.",
        ),
        "safe_mode": Param(
            True,
            type="boolean",
            description="Keras safe_mode when loading a .keras file; turn off only for a "
            "model whose code (Lambda layers) you trust. Recorded with the run.",
        ),
    },
    doc_md=__doc__,
)
def perfwatch_profile():
    @task
    def plan() -> list[dict]:
        """Resolve the cases of this DAG run (release Asset events, Params, or the YAML config when no model
        is given)."""
        from tasks.services.publish import release_cases
        from tasks.stages.pipeline import plan_cases, trigger_kind

        ctx = get_current_context()
        dag_run = ctx["dag_run"]
        events = [(a.uri, dict(e.extra or {})) for a, evs in ctx["triggering_asset_events"].items() for e in evs]
        if events:
            return release_cases(dag_run.dag_id, dag_run.run_id, events)
        trigger = trigger_kind(dag_run.run_type, ctx["params"].get("trigger"))
        return plan_cases(dag_run.dag_id, dag_run.run_id, trigger, dict(ctx["params"]))

    @task(map_index_template=CASE_LABEL)
    def pull_model_version(bundle: dict) -> dict:
        """Resolve the model version in the store, copy it to the work dir, sha256 it."""
        from tasks.stages.pipeline import pull

        return pull(bundle)

    @task(map_index_template=CASE_LABEL, queue=PROFILE_QUEUE)
    def env_fingerprint(bundle: dict) -> dict:
        """TF build (CUDA/cuDNN), NVML driver and GPUs, CPU, OS, packages: the comparability key."""
        from tasks.stages.pipeline import fingerprint

        return fingerprint(bundle)

    @task(map_index_template=CASE_LABEL, queue=PROFILE_QUEUE)
    def warm_up(bundle: dict) -> dict:
        """Fresh process: train until step time is steady; cold first step recorded. An unchanged model
        (same bytes, same environment) reuses its newest warm-up within the case's warmup_reuse_days."""
        from tasks.stages.pipeline import warmup

        return warmup(bundle)

    @task(
        map_index_template=CASE_LABEL,
        pool=PROFILE_POOL,
        queue=PROFILE_QUEUE,
        retries=HOST_BUSY_RETRIES,
        retry_delay=HOST_BUSY_RETRY_DELAY,
    )
    def profiled_run(bundle: dict) -> dict:
        """Fresh process: measured steps with the profiler off, then a profiled window (and the paired
        gate). Retried later only when the host was busy; any other failure is final."""
        from tasks.stages.pipeline import HostBusy, profile_unless_busy

        ti = get_current_context()["ti"]
        try:
            return profile_unless_busy(bundle, retry_left=ti.try_number <= ti.max_tries)
        except HostBusy:
            raise
        except Exception as e:
            raise AirflowFailException(f"{type(e).__name__}: {e}") from e

    @task(map_index_template=CASE_LABEL)
    def parse(bundle: dict) -> dict:
        """xprof's converters: step-time breakdown, input-bound %, op self-times, memory."""
        from tasks.stages.pipeline import parse as parse_stage

        return parse_stage(bundle)

    @task(map_index_template=CASE_LABEL)
    def baseline_compare(bundle: dict) -> dict:
        """Statistics against the comparable baseline; GX expectation suites enforce the thresholds."""
        from tasks.stages.pipeline import compare

        return compare(bundle)

    @task(map_index_template=CASE_LABEL)
    def archive(bundle: dict) -> dict:
        """Store run, samples, tables and verdict in one transaction; archive the profile.
        Then fail the task if the verdict is a regression, or undecided on a busy host, so alerting fires."""
        from tasks.stages.pipeline import (
            HostBusy,
            RegressionDetected,
            archive,
            raise_on_host_busy,
            raise_on_regression,
        )

        bundle = archive(bundle)
        try:
            raise_on_regression(bundle)
            raise_on_host_busy(bundle)
        except (RegressionDetected, HostBusy) as e:
            raise AirflowFailException(str(e)) from e
        return bundle["archived"]

    @task(trigger_rule="all_done")
    def watch_trend() -> list[dict]:
        """After archiving, whatever the verdicts: new change points in each case's nightly series and the
        creep guard of its baseline; fails, so alerting fires, on a new slowdown or a creep."""
        from tasks.services.trend import TrendAlert, check_dag_run

        dag_run = get_current_context()["dag_run"]
        try:
            return check_dag_run(dag_run.dag_id, dag_run.run_id)
        except TrendAlert as e:
            raise AirflowFailException(str(e)) from e

    @task
    def outcome() -> None:
        """Runs only when every case and the trend watch succeeded; otherwise it is upstream_failed, which
        makes the DAG run red (watch_trend, which runs whatever the cases did, would leave it green)."""

    @task_group(prefix_group_id=False)
    def each_case(bundle: dict):
        """The stages of one case, mapped over the cases: a task instance waits only for the same case's
        upstream, so one failing case fails only itself."""
        env = env_fingerprint(bundle=pull_model_version(bundle=bundle))
        run = profiled_run(bundle=warm_up(bundle=env))
        return archive(bundle=baseline_compare(bundle=parse(bundle=run)))

    cases, done = each_case.expand(bundle=plan()), outcome()
    cases >> watch_trend() >> done
    cases >> done


perfwatch_profile()
