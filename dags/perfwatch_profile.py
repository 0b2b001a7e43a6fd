"""perfwatch: profile TensorFlow models and gate their step time.

pull-model-version → env-fingerprint → warm-up → profiled run → parse → baseline-compare → archive

Nightly (cron, no catchup) it profiles every model in the YAML config (``PERFWATCH_CONFIG``);
a manual trigger profiles one model version given as Params (a release gate when
``trigger`` is ``release``). Each stage is mapped over the cases, so one DAG run can profile
several models. The stages live in ``tasks.stages.pipeline``; nothing heavy is imported here, so
parsing this file never imports TensorFlow.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import Param, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

MEASURED_STEPS = 320  # = tasks.records.DEFAULT_MEASURED_STEPS (tests/test_dag.py checks); DAG parsing imports no tasks.*

PROFILE_POOL = "perfwatch_profile"  # one profiled run at a time: timings need a quiet host
# A measurement on a busy host (tasks.stages.pipeline.HostBusy) is taken again later, this often and
# this long after (settings, read at DAG parse time); the last try archives the verdict as
# inconclusive ("host busy: ...") and the run goes red.
HOST_BUSY_RETRIES = int(os.environ.get("PERFWATCH_HOST_BUSY_RETRIES", "2"))
HOST_BUSY_RETRY_DELAY = pendulum.duration(seconds=float(os.environ.get("PERFWATCH_HOST_BUSY_RETRY_DELAY_S", "600")))
# The stages that must see the measured hardware (fingerprint, warm-up, profiled run) go to this
# Celery queue; docker-compose.yml serves "gpu" with a GPU worker. Default: Airflow's own default.
PROFILE_QUEUE = os.environ.get("PERFWATCH_PROFILE_QUEUE", "default")


def _store_url_from_connection(context) -> None:
    """on_execute_callback: when PERFWATCH_DB_CONN_ID names an Airflow connection, export its URI as
    PERFWATCH_DATABASE_URL for this task process (tasks/ reads settings, never Airflow)."""
    conn_id = os.environ.get("PERFWATCH_DB_CONN_ID")
    if conn_id:
        from airflow.sdk import BaseHook

        from tasks.store.queries import sqlalchemy_url

        os.environ["PERFWATCH_DATABASE_URL"] = sqlalchemy_url(BaseHook.get_connection(conn_id).get_uri())


@dag(
    dag_id="perfwatch_profile",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["perfwatch", "profiling"],
    default_args={"retries": 0, "on_execute_callback": _store_url_from_connection},
    params={
        "model": Param(None, type=["null", "string"], minLength=1, maxLength=128,
                       description="Model name in the store; empty profiles every model of the config."),
        "version": Param("latest", type="string", pattern=r"^(latest|[0-9]+)$",
                         description="Integer version directory, or 'latest'."),
        "batch_size": Param(16, type="integer", minimum=1, maximum=65536),
        "measured_steps": Param(MEASURED_STEPS, type="integer", minimum=5, maximum=100000,
                                description="Steps timed with the profiler off (a paired release gate "
                                            "times at most this many steps of each version, stopping as "
                                            "soon as its interval decides)."),
        "trigger": Param("manual", type="string", enum=["manual", "release"],
                         description="'release' marks a release-gate run."),
    },
    doc_md=__doc__,
)
def perfwatch_profile():
    @task
    def plan() -> list[dict]:
        """Resolve the cases of this DAG run (Params, or the YAML config when no model is given)."""
        from tasks.stages.pipeline import plan_cases, trigger_kind

        ctx = get_current_context()
        dag_run = ctx["dag_run"]
        trigger = trigger_kind(dag_run.run_type, ctx["params"].get("trigger"))
        return plan_cases(dag_run.dag_id, dag_run.run_id, trigger, dict(ctx["params"]))

    @task
    def pull_model_version(bundle: dict) -> dict:
        """Resolve the model version in the store, copy it to the work dir, sha256 it."""
        from tasks.stages.pipeline import pull

        return pull(bundle)

    @task(queue=PROFILE_QUEUE)
    def env_fingerprint(bundle: dict) -> dict:
        """TF build (CUDA/cuDNN), NVML driver and GPUs, CPU, OS, packages: the comparability key."""
        from tasks.stages.pipeline import fingerprint

        return fingerprint(bundle)

    @task(queue=PROFILE_QUEUE)
    def warm_up(bundle: dict) -> dict:
        """Fresh process: train until step time is steady; cold first step recorded."""
        from tasks.stages.pipeline import warmup

        return warmup(bundle)

    @task(pool=PROFILE_POOL, queue=PROFILE_QUEUE, retries=HOST_BUSY_RETRIES, retry_delay=HOST_BUSY_RETRY_DELAY)
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

    @task
    def parse(bundle: dict) -> dict:
        """xprof's converters: step-time breakdown, input-bound %, op self-times, memory."""
        from tasks.stages.pipeline import parse as parse_stage

        return parse_stage(bundle)

    @task
    def baseline_compare(bundle: dict) -> dict:
        """Statistics against the comparable baseline; GX expectation suites enforce the thresholds."""
        from tasks.stages.pipeline import compare

        return compare(bundle)

    @task
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
        from tasks.stages.trend import TrendAlert, check_dag_run

        dag_run = get_current_context()["dag_run"]
        try:
            return check_dag_run(dag_run.dag_id, dag_run.run_id)
        except TrendAlert as e:
            raise AirflowFailException(str(e)) from e

    cases = plan()
    pulled = pull_model_version.expand(bundle=cases)
    env = env_fingerprint.expand(bundle=pulled)
    warm = warm_up.expand(bundle=env)
    run = profiled_run.expand(bundle=warm)
    parsed = parse.expand(bundle=run)
    verdict = baseline_compare.expand(bundle=parsed)
    archive.expand(bundle=verdict) >> watch_trend()


perfwatch_profile()
