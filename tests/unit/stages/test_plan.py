"""Planning a DAG run: Params for a manual trigger, the YAML config for the nightly run."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.matrix import load_config
from tasks.records import DEFAULT_MEASURED_STEPS, Case, RunContext
from tasks.settings import Settings
from tasks.stages.pipeline import plan_cases, trigger_kind

CONFIG = """
defaults:
  batch_size: 8
  measured_steps: 30
models:
  - model: resnet
  - model: bert
    batch_size: 4
    version: "3"
"""

PARAM_DEFAULTS = {
    "model": None,
    "version": "latest",
    "batch_size": 16,
    "measured_steps": DEFAULT_MEASURED_STEPS,
    "trigger": "manual",
}


@pytest.fixture
def settings(home, tmp_path):
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(CONFIG)
    return Settings.from_env({"PERFWATCH_HOME": str(home), "PERFWATCH_CONFIG": str(cfg)})


def _cases(bundles):
    return [RunContext.model_validate(b["ctx"]).case for b in bundles]


def test_nightly_run_takes_the_config_as_written(settings):
    bundles = plan_cases("dag", "scheduled__1", "scheduled", PARAM_DEFAULTS, settings)
    cases = _cases(bundles)
    assert [(c.model, c.version, c.batch_size, c.measured_steps) for c in cases] == [
        ("resnet", "latest", 8, 30),
        ("bert", "3", 4, 30),
    ]  # the Params' defaults do not override the config
    assert {RunContext.model_validate(b["ctx"]).trigger for b in bundles} == {"scheduled"}


def test_manual_trigger_profiles_the_param_model(settings):
    params = {**PARAM_DEFAULTS, "model": "bert", "version": "2", "measured_steps": 20, "trigger": "release"}
    (case,) = _cases(plan_cases("dag", "manual__1", "release", params, settings))
    assert (case.model, case.version, case.batch_size, case.measured_steps) == ("bert", "2", 16, 20)
    # the paired gate times at most as many steps of each version as a normal run measures: 1-step ABBA blocks,
    # in whole processes (6 of 20 // 6 = 3 pairs)
    assert (case.paired_blocks, case.paired_block_steps, case.paired_timed_steps) == (20, 1, 36)


def test_paired_layout_follows_measured_steps_unless_set():
    assert Case(model="m").paired_blocks == DEFAULT_MEASURED_STEPS == Case(model="m").measured_steps
    assert Case(model="m", measured_steps=30, paired_block_steps=4).paired_blocks == 7
    assert Case(model="m", measured_steps=5, paired_block_steps=10).paired_blocks == 2  # never below 2 pairs
    assert Case(model="m", measured_steps=30, paired_blocks=12).paired_timed_steps == 24
    with pytest.raises(ValidationError, match="measured_steps"):
        Case(model="m", measured_steps="many")


def test_bad_param_and_bad_config_are_named(settings, tmp_path):
    with pytest.raises(ValidationError, match="measured_steps"):
        plan_cases("dag", "m", "manual", {**PARAM_DEFAULTS, "model": "bert", "measured_steps": 1}, settings)
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  - model: ok\n  - model: '../no path tricks'\n")
    with pytest.raises(ValueError, match=r"models\[1\] is invalid"):
        load_config(bad)
    bad.write_text("just: text\n")
    with pytest.raises(ValueError, match="expected a mapping with a 'models:' list"):
        load_config(bad)


@pytest.mark.parametrize(
    ("run_type", "requested", "expected"),
    [
        ("scheduled", "manual", "scheduled"),
        ("DagRunType.SCHEDULED", None, "scheduled"),
        ("manual", "release", "release"),
        ("manual", "manual", "manual"),
        ("asset_triggered", None, "manual"),
    ],
)
def test_trigger_kind(run_type, requested, expected):
    assert trigger_kind(run_type, requested) == expected


def test_a_night_longer_than_airflow_maps_is_refused_by_name():
    """100 models x 30 cases is 3000 mapped task group instances; Airflow's [core] max_map_length is 1024 by default."""
    from tasks.stages.pipeline import check_map_length

    states = [{"label": f"m{i}"} for i in range(3000)]
    assert check_map_length(states, 4096) is states
    with pytest.raises(
        ValueError, match=r"plans 3000 cases, and Airflow maps at most 1024 \(\[core\] max_map_length\)"
    ):
        check_map_length(states, 1024)


def test_a_measure_task_failed_before_it_ran_is_recorded_with_the_reason(settings):
    """The scheduler fails a task queued past task_queued_timeout (requeued twice first): no perfwatch code ran, so
    measure's failure callback records the case as failed with why; a failure a stage recorded itself, or a
    success, is left as it is."""
    from sqlalchemy import select

    from tasks.stages.pipeline import record_unmeasured, unmeasured_reason
    from tasks.store import Run, session_scope
    from tasks.store.writes import record_failure

    resnet, bert = plan_cases("dag", "scheduled__1", "scheduled", {"model": None}, settings)
    run_id = record_unmeasured(resnet, queue="gpu", worker=None, queued_timeout_s=600.0, settings=settings)
    assert run_id is not None
    assert record_unmeasured(resnet, queue="gpu", worker=None, queued_timeout_s=600.0, settings=settings) is None
    record_failure(settings.database_url, RunContext.model_validate(bert["ctx"]), "warm-up", "RunnerError: boom")
    assert record_unmeasured(bert, queue="gpu", worker="host-1", queued_timeout_s=600.0, settings=settings) is None
    with session_scope(settings.database_url) as s:
        runs = {r.case_name: (r.dag_run_id, r.status, r.failed_stage, r.error) for r in s.scalars(select(Run))}
    assert runs["train-bs8"][:3] == ("scheduled__1", "failed", "env-fingerprint")
    assert runs["train-bs4"][2:] == ("warm-up", "RunnerError: boom")  # the stage's own record is kept
    assert runs["train-bs8"][3] == (
        "NoMeasuringWorker: case resnet train-bs8 was never measured: its measure task waited queued on queue 'gpu' "
        "longer than [scheduler] task_queued_timeout (600 s, AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT) 3 times and "
        "Airflow failed it, so no live measuring worker serves 'gpu'; start one there (airflow celery worker --queues "
        "gpu --concurrency 1) or map the case's kind to a served queue (the config's queues:)"
    )
    lost = unmeasured_reason("m c", "cpu", "measure-host-2", 30.0)
    assert lost.startswith("MeasureLost: case m c's measure task on queue 'cpu' failed before perfwatch recorded")
    assert "(last on worker measure-host-2)" in lost and "task_queued_timeout (30 s" in lost
