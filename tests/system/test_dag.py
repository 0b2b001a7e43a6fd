"""The DAG file: imports cleanly, reads like the arrow chain, imports nothing heavy at parse time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT as ROOT
from tests.helpers.airflow import DAG_PYTHONPATH

STAGE_TASKS = [
    "pull_model_version",
    "measure",
    "parse",
    "baseline_compare",
    "archive",
    "watch_trend",
    "outcome",
]
CASE_TASKS = STAGE_TASKS[:5]  #: the mapped task group of one case
#: plan -> each case -> watch_trend -> the paired gates that confirm tentative slowdowns -> judge_trend -> outcome
CHAIN = [
    *CASE_TASKS,
    "watch_trend",
    "route_confirm_default",
    *(f"confirm.{t}" for t in CASE_TASKS),
    "judge_trend",
    "outcome",
]

_PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
dag = bag.get_dag("perfwatch_profile")
rel = bag.get_dag("perfwatch_release")
rule = lambda t: getattr(t.weight_rule, "value", t.weight_rule)  # noqa: E731
chain, t = [], dag.get_task("plan")
while t.downstream_list:  # archive -> watch_trend -> the confirmations -> judge_trend -> outcome
    last = ("watch_trend", "judge_trend")  # after the case's own stages
    t = sorted(t.downstream_list, key=lambda d: (d.task_id == "outcome", d.task_id in last))[0]
    chain.append(t.task_id)
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "chain": chain,
    "schedule": getattr(dag.timetable, "timetable", dag.timetable).expression, "catchup": dag.catchup,
    "release_assets": sorted(a.uri for a in getattr(getattr(rel.timetable, "asset_condition", None), "objects", [])),
    "release": {"max_active_runs": rel.max_active_runs, "catchup": rel.catchup,
                "nightly_max_active_runs": dag.max_active_runs,
                "nightly_assets": getattr(dag.timetable, "asset_condition", None) is not None,
                "trigger_default": rel.params.get_param("trigger").value,
                "measure_weight": rel.get_task("measure").priority_weight,
                "measure_rule": rule(rel.get_task("measure")), "nightly_rule": rule(dag.get_task("measure")),
                "same_tasks": sorted(rel.task_ids) == sorted(dag.task_ids),
                "callbacks": [type(c).__name__ for c in (rel.on_failure_callback, rel.on_success_callback)]},
    "callbacks": [type(c).__name__ for c in (dag.on_failure_callback, dag.on_success_callback)],
    "on_execute": sorted({f"{d.dag_id}.{t.task_id}" for d in (dag, rel, bag.get_dag("perfwatch_watch"))
                          for t in d.tasks if t.on_execute_callback}),
    "watch": {"schedule": bag.get_dag("perfwatch_watch").timetable.expression,
              "on_failure": type(
                  bag.get_dag("perfwatch_watch").get_task("missing_data").on_failure_callback[0]).__name__},
    "params": sorted(dag.params.keys()),
    "param_schemas": {k: {**dag.params.get_param(k).schema, "default": dag.params.get_param(k).value,
                          "description": dag.params.get_param(k).description} for k in dag.params.keys()},
    "heavy": [m for m in ("tensorflow", "keras", "great_expectations", "xprof", "tasks.stages.pipeline")
              if m in sys.modules],
    "max_active_tasks": dag.max_active_tasks,
    "measure_on_failure": [c.__name__ for c in dag.get_task("measure").on_failure_callback],
    "busy_retries": dag.get_task("measure").retries,
    "busy_retry_delay_s": dag.get_task("measure").retry_delay.total_seconds(),
    "return_logged": {t.task_id: t.show_return_value_in_logs for t in dag.tasks
                      if hasattr(t, "show_return_value_in_logs")},
}))
"""


def _probe(**extra_env: str) -> dict:
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": DAG_PYTHONPATH, **extra_env}
    env.setdefault("AIRFLOW_HOME", str(ROOT / ".airflow"))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT / "dags")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dag_imports_in_card_order_without_heavy_imports():
    info = _probe()
    assert info["errors"] == {}
    assert info["chain"] == CHAIN
    assert info["heavy"] == []
    assert info["schedule"] == "0 2 * * *" and info["catchup"] is False
    assert info["params"] == [
        "baseline_env",
        "baseline_runner",
        "batch_size",
        "case",
        "device",
        "hardware",
        "input_fn",
        "inputs",
        "latency_bound_ms",
        "latency_percentile",
        "measured_steps",
        "mode",
        "model",
        "safe_mode",
        "scenario",
        "search_qps",
        "signature",
        "target_qps",
        "trigger",
        "version",
    ]


def test_tasks_that_hand_on_run_states_do_not_log_them_whole():
    """Issue 35: a baseline_compare task log ended with Airflow's "Done. Returned value was: {...}", the whole run
    state with the verdict's evidence (tens of KB) on one line. Airflow 3's @task logs its return value unless
    show_return_value_in_logs is False: the tasks that hand on run states set it, archive (a run id, an archive
    path, a verdict) and the trend watch still log theirs."""
    logged = _probe()["return_logged"]
    assert {t: logged[t] for t in ("plan", *CASE_TASKS[:4])} == dict.fromkeys(("plan", *CASE_TASKS[:4]), False)
    assert logged["archive"] is True and logged["watch_trend"] is True


def test_release_assets_and_alerts_are_wired(tmp_path):
    """One Asset per model of the nightly config schedules the release DAG (a release event runs the gate), which
    runs the same tasks as the nightly DAG, several runs at once and ahead of the nightly's in the measuring pool
    (issue 35 item 4: a release waited 6 minutes behind a nightly case's busy-host retry, max_active_runs=1); the
    nightly DAG keeps its cron alone; failed DAG runs and noteworthy verdicts alert through PerfwatchNotifier in
    both; the missing-data check runs hourly with the same notifier. No task has an ``on_execute_callback``. A config
    that cannot be read leaves the cron schedule alone."""
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(
        "models:\n  - {model: resnet}\n  - {model: bert, batch_size: 8}\n  - {model: resnet, batch_size: 4}\n"
    )
    info = _probe(PERFWATCH_CONFIG=str(cfg))
    assert info["errors"] == {} and info["schedule"] == "0 2 * * *"
    assert info["release_assets"] == ["perfwatch://models/bert", "perfwatch://models/resnet"]
    assert info["callbacks"] == ["PerfwatchNotifier", "PerfwatchNotifier"]
    assert info["release"] == {
        "max_active_runs": 8,
        "catchup": False,
        "nightly_max_active_runs": 1,
        "nightly_assets": False,
        "trigger_default": "release",
        "measure_weight": 100,
        "measure_rule": "absolute",
        "nightly_rule": "downstream",
        "same_tasks": True,
        "callbacks": ["PerfwatchNotifier", "PerfwatchNotifier"],
    }
    assert info["watch"] == {"schedule": "0 * * * *", "on_failure": "PerfwatchNotifier"}
    # no task runs a callback before it starts: each reads its store itself (perfwatch.hooks.store_url), where one
    # exported the store connection into os.environ before
    assert info["on_execute"] == []
    broken = _probe(PERFWATCH_CONFIG=str(tmp_path / "missing.yaml"))
    assert broken["errors"] == {} and broken["schedule"] == "0 2 * * *" and broken["release_assets"] == []


def test_measured_steps_param_default_is_the_case_default():
    """Every Case-field Param of the parsed DAG is the Case field's schema (``case_param_schema``): its default
    (measured_steps: ``DEFAULT_MEASURED_STEPS``), limits and description."""
    from tasks.records import DEFAULT_MEASURED_STEPS
    from tasks.stages.params import case_param_schema

    got = _probe()["param_schemas"]
    assert got["measured_steps"]["default"] == DEFAULT_MEASURED_STEPS
    assert {k: got[k] for k in case_param_schema("dag")} == case_param_schema("dag")


def test_host_busy_retries_are_settings(monkeypatch):
    """``measure`` measures again on a busy host: 2 retries 600 s apart unless the settings say otherwise."""
    monkeypatch.delenv("PERFWATCH_HOST_BUSY_RETRIES", raising=False)
    monkeypatch.delenv("PERFWATCH_HOST_BUSY_RETRY_DELAY_S", raising=False)
    got = _probe()
    assert (got["busy_retries"], got["busy_retry_delay_s"]) == (2, 600.0)
    got = _probe(PERFWATCH_HOST_BUSY_RETRIES="0", PERFWATCH_HOST_BUSY_RETRY_DELAY_S="5")
    assert (got["busy_retries"], got["busy_retry_delay_s"]) == (0, 5.0)


def test_airflows_caps_are_settings_read_when_the_dag_is_parsed(monkeypatch):
    """A DAG run may run 128 task instances at once (Airflow's default, [core] max_active_tasks_per_dag, is 16: 32
    or 64 measuring hosts could not all be busy) unless PERFWATCH_MAX_ACTIVE_TASKS says otherwise; measure has the
    failure callback that records a case the scheduler failed before it ran."""
    monkeypatch.delenv("PERFWATCH_MAX_ACTIVE_TASKS", raising=False)
    got = _probe()
    assert (got["max_active_tasks"], got["measure_on_failure"]) == (128, ["measure_failed"])
    assert _probe(PERFWATCH_MAX_ACTIVE_TASKS="64")["max_active_tasks"] == 64


_STUCK = """
import json, sys, types
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).get_dag("perfwatch_profile")
measure = dag.get_task("measure")
state = json.loads(sys.argv[2])
pulls = []
def xcom_pull(task_ids, map_indexes):
    pulls.append([task_ids, map_indexes])
    return state
# what the dag-processor hands the callback of a task the scheduler failed in queued: no host name
ti = types.SimpleNamespace(queue="gpu", hostname="", map_index=3, xcom_pull=xcom_pull)
for callback in measure.on_failure_callback:
    callback({"ti": ti, "task": measure})
print(json.dumps({"pulls": pulls}))
"""


def test_a_case_the_scheduler_failed_in_queued_is_recorded_with_the_timeout_it_was_parsed_with(home, tmp_path):
    """measure's failure callback, as the dag-processor runs it for a task failed in queued (no host name): it reads
    the case's state from its pull task's XCom (same map index) and records the case as failed, citing [scheduler]
    task_queued_timeout as the deployment sets it (AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT, read at parse time)."""
    from sqlalchemy import select

    from tasks.settings import Settings
    from tasks.stages.pipeline import plan_cases
    from tasks.store import Run, session_scope

    settings = Settings.from_env({"PERFWATCH_HOME": str(home)})
    (state,) = plan_cases("perfwatch_profile", "scheduled__1", "scheduled", {"model": "tiny"}, settings)
    env = {
        **os.environ,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": DAG_PYTHONPATH,
        "PERFWATCH_HOME": str(home),
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "42",
    }
    env.setdefault("AIRFLOW_HOME", str(ROOT / ".airflow"))
    env.pop("PERFWATCH_DATABASE_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", _STUCK, str(ROOT / "dags"), json.dumps(state)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["pulls"] == [["pull_model_version", 3]]
    with session_scope(settings.database_url) as s:
        (run,) = s.scalars(select(Run)).all()
        assert (run.case_name, run.status, run.failed_stage) == ("train-bs16", "failed", "env-fingerprint")
        assert run.error.startswith("NoMeasuringWorker: case tiny train-bs16 was never measured: its measure task ")
        assert (
            "longer than [scheduler] task_queued_timeout (42 s, AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT)" in run.error
        )


_MAPPED_RUN = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.models import TaskInstance
from airflow.utils.session import create_session
dag = DagBag(dag_folder=sys.argv[1]).get_dag("perfwatch_profile")
dr = dag.test(run_conf={})
with create_session() as s:
    tis = s.query(TaskInstance).filter(TaskInstance.run_id == dr.run_id).all()
    print(json.dumps({"state": str(dr.state),
                      "tis": [[t.task_id, t.map_index, str(t.state), t.rendered_map_index, t.queue] for t in tis]}))
"""


_ROUTES = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).get_dag("perfwatch_profile")
print(json.dumps({"tasks": {t.task_id: {"queue": t.queue, "up": sorted(t.upstream_task_ids)} for t in dag.tasks}}))
"""


@pytest.mark.slow
def test_cases_go_to_their_kinds_queue_and_a_failing_case_fails_only_itself(home, tmp_path):
    """The config's ``queues:`` gives the DAG one mapped task group per measuring queue (issue 24: hardware kinds as
    queues; Airflow's ``expand`` cannot map ``queue``): the default queue's with the plain task ids, each other's
    ``on_<queue>.*`` with its ``measure`` on that queue, each fed by its ``route_<queue>`` task. A DAG run
    (``dag.test()``, the fake runner) of two auto cases and a cpu case measures each in its own queue's group, each
    named in the grid (``map_index_template``); the tpu case, which no queue serves, is refused by name at its
    first task and fails only itself (the other cases' stages all succeed and are archived), the gpu queue's
    group, with no case in this run, is skipped, and the DAG run is red because of the failed case."""
    from sqlalchemy import select

    from tasks.settings import Settings
    from tasks.store import Run, session_scope
    from tests.helpers import fake_runner

    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(
        "queues: {cpu: cpu-hosts, gpu: gpu}\n"
        "defaults: {version: '1', measured_steps: 10, profiled_steps: 2, warmup_max_steps: 10}\n"
        "models:\n  - {model: tiny, batch_size: 2}\n  - {model: tiny, batch_size: 3, device: cpu}\n"
        "  - {model: tiny, batch_size: 4, device: tpu}\n"
    )  # no queue for tpu: refused
    fake_runner.write_model(home / "models" / "tiny" / "1" / "model.keras")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": DAG_PYTHONPATH,
        "PERFWATCH_CONFIG": str(cfg),
        "PERFWATCH_PROFILE_QUEUE": "measure",
        "PERFWATCH_RUNNER_COMMAND": fake_runner.command(),
        "GX_ANALYTICS_ENABLED": "false",
    }
    env.pop("PERFWATCH_RUNNER_PYTHON", None)
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, cwd=ROOT)
    shape = json.loads(
        subprocess.run(
            [sys.executable, "-c", _ROUTES, str(ROOT / "dags")], env=env, capture_output=True, text=True, check=True
        ).stdout.splitlines()[-1]
    )["tasks"]
    assert {t: v["queue"] for t, v in shape.items() if t.split(".")[-1] == "measure"} == {
        "measure": "measure",
        "on_cpu-hosts.measure": "cpu-hosts",
        "on_gpu.measure": "gpu",
        # the night's paired confirmations of tentative slowdowns measure on the same queues
        "confirm.measure": "measure",
        "confirm_on_cpu-hosts.measure": "cpu-hosts",
        "confirm_on_gpu.measure": "gpu",
    }
    for group, queue in (("", "measure"), ("on_cpu-hosts.", "cpu-hosts"), ("on_gpu.", "gpu")):
        assert shape[f"{group}pull_model_version"]["up"] == [f"route_{queue}"]
        assert shape[f"route_{queue}"]["up"] == ["plan"]
        assert f"{group}archive" in shape["outcome"]["up"] and f"{group}archive" in shape["watch_trend"]["up"]
        confirm = f"confirm_{group}" if group else "confirm."
        assert shape[f"{confirm}pull_model_version"]["up"] == [f"route_confirm_{queue}"]
        assert shape[f"route_confirm_{queue}"]["up"] == ["watch_trend"]
        assert f"{confirm}archive" in shape["outcome"]["up"] and f"{confirm}archive" in shape["judge_trend"]["up"]
    proc = subprocess.run(
        [sys.executable, "-c", _MAPPED_RUN, str(ROOT / "dags")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    states = {(t, label): state for t, _, state, label, _ in got["tis"]}
    queues = {t: queue for t, _, _, _, queue in got["tis"]}
    assert {t: states[(t, "tiny train-bs2")] for t in CASE_TASKS} == dict.fromkeys(CASE_TASKS, "success")
    routed = {t: states[(f"on_cpu-hosts.{t}", "tiny train-bs3-cpu")] for t in CASE_TASKS}
    assert routed == dict.fromkeys(CASE_TASKS, "success")
    assert (queues["measure"], queues["on_cpu-hosts.measure"]) == ("measure", "cpu-hosts")
    # a task that never ran has no rendered name: the failed case's instances by its map index
    (idx,) = [i for t, i, _, label, _ in got["tis"] if (t, label) == ("pull_model_version", "tiny train-bs4-tpu")]
    failed = {t: state for t, i, state, _, _ in got["tis"] if i == idx and t in CASE_TASKS}
    assert failed == {"pull_model_version": "failed", **dict.fromkeys(CASE_TASKS[1:], "upstream_failed")}
    assert {s for (t, _), s in states.items() if t.startswith("on_gpu.")} == {"skipped"}
    assert {t: states[(t, None)] for t in ("plan", "route_measure", "route_cpu-hosts", "route_gpu", "watch_trend")} == (
        dict.fromkeys(("plan", "route_measure", "route_cpu-hosts", "route_gpu", "watch_trend"), "success")
    )
    assert states[("outcome", None)] == "upstream_failed" and got["state"] == "failed"  # red: a case failed
    with session_scope(Settings.from_env({"PERFWATCH_HOME": str(home)}).database_url) as s:
        runs = {r.case_name: (r.status, r.failed_stage, r.error) for r in s.scalars(select(Run))}
    assert {k: v[:2] for k, v in runs.items()} == {
        "train-bs2": ("success", None),
        "train-bs3-cpu": ("success", None),
        "train-bs4-tpu": ("failed", "pull-model-version"),
    }
    assert "case tiny train-bs4-tpu asks for device tpu, which no queue serves" in runs["train-bs4-tpu"][2]


@pytest.mark.slow
def test_a_nightly_of_two_models_with_one_case_name_keeps_both_runs_through_a_retry(home, tmp_path):
    """Issue 35 item 1: two models of the nightly config whose cases share a name (``train-bs2``). Two DAG runs
    (``dag.test()``, the fake runner): the first makes each model's baseline, the second measures each on a busy
    host first, so ``measure`` is retried. Each DAG run stores one successful run per model, each with its own
    model's step times (before: the second model's stages found the first model's run "already archived; nothing
    to do", its own measurement was dropped and it was blamed for the other's verdict)."""
    from sqlalchemy import select

    from tasks.settings import Settings
    from tasks.store import Model, Run, session_scope
    from tests.helpers import fake_runner

    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(
        "defaults: {version: '1', measured_steps: 10, profiled_steps: 2, warmup_max_steps: 10, batch_size: 2}\n"
        "models:\n  - {model: tiny}\n  - {model: ranker}\n"
    )
    fake_runner.write_model(home / "models" / "tiny" / "1" / "model.keras")
    fake_runner.write_model(home / "models" / "ranker" / "1" / "model.keras", step_factor=3.0)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": DAG_PYTHONPATH,
        "PERFWATCH_CONFIG": str(cfg),
        "PERFWATCH_RUNNER_COMMAND": fake_runner.command(),
        "PERFWATCH_HOST_BUSY_RETRIES": "1",
        "PERFWATCH_HOST_BUSY_RETRY_DELAY_S": "0",
        "GX_ANALYTICS_ENABLED": "false",
    }
    env.pop("PERFWATCH_RUNNER_PYTHON", None)
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, cwd=ROOT)
    script = _MAPPED_RUN.replace("t.rendered_map_index, t.queue]", "t.rendered_map_index, t.try_number]")
    for night, extra in enumerate(({}, {"PERFWATCH_FAKE_BUSY_ONCE": str(tmp_path / "busy-once")})):
        proc = subprocess.run(
            [sys.executable, "-c", script, str(ROOT / "dags")],
            env={**env, **extra},
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        states = {(t, label): state for t, _, state, label, _ in got["tis"]}
        for model in ("tiny", "ranker"):
            assert {t: states[(t, f"{model} train-bs2")] for t in CASE_TASKS} == dict.fromkeys(CASE_TASKS, "success")
        tries = {label: n for t, _, _, label, n in got["tis"] if t == "measure"}
        assert tries == dict.fromkeys(("tiny train-bs2", "ranker train-bs2"), night + 1)  # night 2: busy, then again
    with session_scope(Settings.from_env({"PERFWATCH_HOME": str(home)}).database_url) as s:
        runs = s.execute(
            select(Model.name, Run.status, Run.median_step_ms).join(Model, Model.id == Run.model_id).order_by(Run.id)
        ).all()
    assert sorted((m, st) for m, st, _ in runs) == sorted([("tiny", "success"), ("ranker", "success")] * 2)
    median = {m: med for m, _, med in runs}
    assert 2.5 < median["ranker"] / median["tiny"] < 3.5  # each run holds its own model's step times


@pytest.mark.slow
@pytest.mark.parametrize(("v2_factor", "v1_level", "red"), [(1.5, 1.0, True), (1.0, 1 / 1.5, False)])
def test_a_tentative_slowdown_is_confirmed_by_a_paired_gate_that_decides_the_alert(
    home, tmp_path, v2_factor, v1_level, red
):
    """Issue 36 item 4: the store's nightly series of ``tiny train-bs16`` holds 12 nights of version 1 and one of
    version 2, slower; tonight's DAG run (``dag.test()``, the fake runner) measures version 2 again, so the series
    ends in a tentative slowdown (2 runs after it). ``watch_trend`` plans a paired gate of version 1 beside version
    2, the ``confirm`` task group measures it through the measuring pool, and its verdict decides the night: the
    model store's v2 really is x1.5 slower -> regression, ``judge_trend`` fails naming the gate's interval and the
    DAG run is red; v2 as fast as v1 (the series' step was the host's) -> pass, no alert, the DAG run green."""
    import datetime as dt
    import shlex

    from sqlalchemy import select

    from tasks.records import Case
    from tasks.runner import RunnerProcess
    from tasks.settings import Settings
    from tasks.stages.archive import archive_run
    from tasks.stages.devices import with_device
    from tasks.stages.fingerprint import take_fingerprint_in
    from tasks.store import Run, migrate, session_scope
    from tests.helpers import fake_runner
    from tests.helpers.builders import make_records

    fake_runner.write_model(home / "models" / "tiny" / "1" / "model.keras")
    fake_runner.write_model(home / "models" / "tiny" / "2" / "model.keras", step_factor=v2_factor)
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(
        "defaults: {version: '2', measured_steps: 60, profiled_steps: 2, warmup_max_steps: 10, lookback: 1}\n"
        "models:\n  - {model: tiny}\n"
    )
    url = Settings.from_env({"PERFWATCH_HOME": str(home)}).database_url
    migrate(url)
    fp = take_fingerprint_in(RunnerProcess(shlex.split(fake_runner.command())))
    key = with_device(fp, Case(model="tiny")).comparability_key  # the fake runner's environment: one series
    now = dt.datetime.now(dt.UTC)
    for i in range(13):  # 1% noise; the 13th night is version 2's
        v2 = i == 12
        ctx, pulled, env, *rest = make_records(
            tmp_path,
            dag_run_id=f"n{i}",
            model="tiny",
            median=(v2_factor if v2 else v1_level) * (1 + 0.01 * (i % 3 - 1)),
        )
        ctx = ctx.model_copy(update={"dag_id": "perfwatch_profile", "started_at": now - dt.timedelta(days=13 - i)})
        pulled = pulled.model_copy(update={"version": "2" if v2 else "1", "digest": ("b" if v2 else "a") * 64})
        archive_run(
            url, str(tmp_path / "archive"), ctx, pulled, env.model_copy(update={"comparability_key": key}), *rest
        )
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": DAG_PYTHONPATH,
        "PERFWATCH_CONFIG": str(cfg),
        "PERFWATCH_RUNNER_COMMAND": fake_runner.command(),
        "PERFWATCH_FAKE_NOISE_CV": "0.005",
        "GX_ANALYTICS_ENABLED": "false",
    }
    env.pop("PERFWATCH_RUNNER_PYTHON", None)
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, cwd=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", _MAPPED_RUN, str(ROOT / "dags")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    states = {(t, label): state for t, _, state, label, _ in got["tis"]}
    assert {t: states[(t, "tiny train-bs16")] for t in CASE_TASKS} == dict.fromkeys(CASE_TASKS, "success")
    with session_scope(url) as s:
        (gate,) = s.execute(select(Run.id, Run.verdict, Run.dag_run_id).where(Run.trigger == "confirm")).all()
    assert gate.dag_run_id.endswith(".confirm")
    (label,) = [label for t, label in states if t == "confirm.pull_model_version"]
    assert label.startswith("tiny train-bs16") and "(confirm run " in label
    confirm = {t: states[(f"confirm.{t}", label)] for t in CASE_TASKS}
    if red:
        assert gate.verdict == "regression"
        assert confirm == {**dict.fromkeys(CASE_TASKS[:4], "success"), "archive": "failed"}
        assert states[("judge_trend", None)] == "failed" and got["state"] == "failed"
        assert "confirmed by a paired gate: regression x1." in proc.stdout + proc.stderr
    else:
        assert gate.verdict == "pass"
        assert confirm == dict.fromkeys(CASE_TASKS, "success")
        assert states[("judge_trend", None)] == "success" and got["state"] == "success"


@pytest.mark.slow
def test_a_version_that_only_grows_memory_or_its_cold_step_is_a_regression_through_the_dag_and_the_cli(
    home, tmp_path, monkeypatch
):
    """Issue 38's done-when, item 1: version 2 steps as fast as version 1 and takes 1.3x its resident memory; version 3
    steps as fast as version 2 and its cold step (tracing, compilation) takes 1.6x as long (the fake runner:
    ``write_model(memory_factor=..., cold_factor=...)``). A manual DAG run (``dag.test()``; the model, ``version``,
    ``paired`` and ``memory_tolerance`` in its run conf) of version 2 runs the paired gate of up to 8 processes: the
    run is a ``regression`` named as the memory's, the archive task fails after archiving it and the DAG run is red;
    then ``perfwatch run tiny --version 3 --paired --cold-step-tolerance 0.2`` is a ``regression`` on the cold step,
    exit 1, and ``perfwatch gate tiny 3`` says REGRESSION."""
    from sqlalchemy import select
    from typer.testing import CliRunner

    from tasks.cli.main import app
    from tasks.settings import Settings
    from tasks.store import Run, RunComparison, session_scope
    from tests.helpers import fake_runner

    for version, grown in (("1", {}), ("2", {"memory_factor": 1.3}), ("3", {"memory_factor": 1.3, "cold_factor": 1.6})):
        fake_runner.write_model(home / "models" / "tiny" / version / "model.keras", **grown)
    small = {"measured_steps": 10, "profiled_steps": 2, "warmup_max_steps": 10, "batch_size": 4}
    gate = {"paired_processes": 8, "paired_blocks": 160, "paired_block_steps": 1}
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(f"defaults: {json.dumps(small)}\nmodels:\n  - {{model: tiny}}\n")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": DAG_PYTHONPATH,
        "PERFWATCH_CONFIG": str(cfg),
        "PERFWATCH_RUNNER_COMMAND": fake_runner.command(),
        "PERFWATCH_FAKE_NOISE_CV": "0.01",
        "GX_ANALYTICS_ENABLED": "false",
    }
    env.pop("PERFWATCH_RUNNER_PYTHON", None)
    env.pop("PERFWATCH_FAKE_OTHER_CPU_SHARE", None)
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, cwd=ROOT)
    conf = {"model": "tiny", "version": "2", "paired": True, **small, **gate, "memory_tolerance": 0.2}
    script = _MAPPED_RUN.replace("run_conf={}", f"run_conf={conf!r}")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "dags")], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    states = {t: state for t, _, state, label, _ in got["tis"] if label == "tiny train-bs4"}
    assert {t: states[t] for t in CASE_TASKS} == {**dict.fromkeys(CASE_TASKS[:4], "success"), "archive": "failed"}
    assert got["state"] == "failed"
    url = Settings.from_env().database_url
    with session_scope(url) as s:
        ((verdict, evidence),) = s.execute(
            select(Run.verdict, RunComparison.evidence).join(RunComparison, RunComparison.run_id == Run.id)
        ).all()
    reason = evidence["reason"]
    assert verdict == "regression", reason
    assert reason.startswith("regression on the model's resident memory (load, build, cold step): model_rss_bytes")
    assert evidence["model_memory"]["ci_low"] < 1.3 < evidence["model_memory"]["ci_high"] and "; step time: " in reason
    assert evidence["regressed_on"][0].startswith("the model's resident memory (load, build, cold step): model_rss")
    assert "regressed (paired-abba): on the model's resident memory" in proc.stdout + proc.stderr  # the task's error

    for key, value in env.items():  # the CLI, in this process, with the same config and runner
        if key.startswith("PERFWATCH_"):
            monkeypatch.setenv(key, value)
    options = [f"--{k.replace('_', '-')}={v}" for k, v in {**small, **gate}.items()]
    res = CliRunner().invoke(app, ["run", "tiny", "--version", "3", "--paired", "--cold-step-tolerance=0.2", *options])
    out = res.stdout + res.stderr
    assert res.exit_code == 1, out
    # the headline names the figure that regressed; step time's own figure and verdict follow
    assert "verdict regression on the cold step (tracing, compilation, one step): cold_step_ms ratio 1." in out
    assert re.search(
        r"\n  step time: step-time ratio (0.99|1.0)\d+ \[[^]]+\] at 99%, regression line 1.050 "
        r"\(tolerance 5%\) \(pass\)\n",
        out,
    ), out
    assert "regressed (paired-abba): on the cold step (tracing, compilation, one step): cold_step_ms" in out
    assert "vs version 2" in out
    res = CliRunner().invoke(app, ["gate", "tiny", "3"])
    assert res.exit_code == 1 and "gate tiny v3: REGRESSION (exit 1)" in res.stdout, res.stdout
    # the table's ratio is step time's: the gate says which figure decided, and so do `runs` and the JSON
    assert "note: run 2's verdict is a regression on the cold step (tracing, compilation, one step)" in res.stdout
    assert "the verdict's figure is the ratio column" not in res.stdout
    res = CliRunner().invoke(app, ["runs", "--model", "tiny"])
    assert "regression (on cold step)" in res.stdout and "regression (on model's resident memory)" in res.stdout
    res = CliRunner().invoke(app, ["gate", "tiny", "3", "-f", "json"])
    (row,) = json.loads(res.stdout)
    cold = row["decision"]["figures"]["cold_step"]
    assert cold["gated"] is True and cold["verdict"] == "regression" and cold["ci_low"] > 1.0, cold
