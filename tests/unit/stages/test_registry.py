"""The stage registry, the run state and the Verdict enumeration: each stage and each verdict word is named
once, and everything that lists them (the DAG, the pipeline, the settings, the CLI) agrees with them."""

from __future__ import annotations

import ast
import json
from typing import get_args

import pytest

from tasks.records import (
    ArchiveRecord,
    CompareRecord,
    RunContext,
    RunState,
    Verdict,
)
from tasks.settings import TIMEOUT_DEFAULTS, RunnerStage
from tasks.stages import pipeline, registry
from tests.helpers import ROOT
from tests.unit.store.test_store import make_records

DAG_FILE = ROOT / "dags" / "perfwatch_profile.py"


def _dag_stage_tasks() -> dict[str, list[str]]:
    """Task function name -> the stage ids it runs (``run_stage``'s, or ``measure_case``'s measuring stages), read
    from the DAG file."""
    tree = ast.parse(DAG_FILE.read_text())
    out: dict[str, list[str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or not any(
            "task" in (getattr(d, "id", None), getattr(getattr(d, "func", None), "id", None)) for d in fn.decorator_list
        ):
            continue
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "run_stage":
                out.setdefault(fn.name, []).append(call.args[1].value)
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "measure_case":
                out.setdefault(fn.name, []).extend(pipeline.MEASURING_STAGES)
    return out


def test_the_registry_names_each_stage_once():
    assert [s.id for s in registry.STAGES] == list(registry.STAGE_IDS) == list(get_args(registry.StageId))
    assert [s.field for s in registry.STAGES] == list(get_args(registry.StateField))
    assert list(pipeline._WORK) == list(registry.STAGE_IDS)  # one implementation per stage, in order
    state_fields = [f for f in RunState.model_fields if f not in ("ctx", "label", "queue", "refused", "confirms")]
    assert [s.field for s in registry.STAGES] == state_fields
    for s in registry.STAGES:  # the RunState field holds the stage's record
        assert RunState.model_fields[s.field].annotation == s.record | None
        assert registry.stage(s.id) is s and registry.producer(s.field) is s
    limits = {s.time_limit for s in registry.STAGES if s.time_limit}
    assert limits | {"paired-run"} == set(get_args(RunnerStage)) == set(TIMEOUT_DEFAULTS)
    with pytest.raises(ValueError, match="no stage 'profile'; the stages are pull-model-version, env-fingerprint"):
        registry.stage("profile")


def test_the_dag_tasks_are_the_registry_stages():
    """Each stage runs in the task the registry names; the three measuring stages in one task, ``measure``, in
    the registry's order (one host fingerprints, warms up and measures)."""
    by_task: dict[str, list[str]] = {}
    for s in registry.STAGES:
        by_task.setdefault(s.task_id, []).append(s.id)
    assert _dag_stage_tasks() == by_task
    assert by_task["measure"] == ["env-fingerprint", "warm-up", "profiled-run"]


def test_each_stage_reads_files_of_earlier_stages():
    order = [s.field for s in registry.STAGES]
    for i, s in enumerate(registry.STAGES):
        for field, attr in s.reads:
            assert order.index(field) < i, (s.id, field)
            assert attr in registry.producer(field).record.model_fields


def test_the_run_state_reads_the_old_bundle_and_travels_as_json(tmp_path):
    ctx, pulled, env, warm, run, parsed, verdict = make_records(tmp_path)
    bundle = {  # the XCom of a DAG run started before the upgrade: the same keys
        "ctx": ctx.to_xcom(),
        "label": "m train-bs16",
        "pulled": pulled.to_xcom(),
        "env": env.to_xcom(),
        "warmup": warm.to_xcom(),
        "run": run.to_xcom(),
        "parsed": parsed.to_xcom(),
        "verdict": verdict.to_xcom(),
    }
    state = RunState.model_validate(json.loads(json.dumps(bundle)))
    assert state.verdict == verdict and state.run == run and state.archived is None
    assert state.to_xcom() == bundle  # the stages that did not run are left out
    assert RunState.model_validate(state.to_xcom()) == state
    assert pipeline.as_state(bundle) == state and pipeline.as_state(state) is state
    assert RunState(ctx=ctx).to_xcom() == {"ctx": ctx.to_xcom()}


def test_one_verdict_enumeration():
    from tasks.cli.history import GATE_CODES
    from tasks.store.writes import ACCEPTED_VERDICTS

    assert [v.value for v in Verdict] == [
        "pass",
        "regression",
        "improvement",
        "inconclusive",
        "no-baseline",
        "env-changed",
    ]
    assert set(GATE_CODES) == {v.value for v in Verdict}
    assert ACCEPTED_VERDICTS <= set(Verdict) and Verdict.REGRESSION not in ACCEPTED_VERDICTS
    assert Verdict("no-baseline") is Verdict.NO_BASELINE and f"{Verdict.ENV_CHANGED}" == "env-changed"
    rec = CompareRecord.model_validate({**_compare_fields(), "verdict": "regression"})
    assert rec.verdict is Verdict.REGRESSION and rec.to_xcom()["verdict"] == "regression"
    with pytest.raises(ValueError, match="verdict"):
        CompareRecord.model_validate({**_compare_fields(), "verdict": "slower"})


def _compare_fields() -> dict:
    return {
        "method": "history",
        "baseline_run_ids": [1],
        "ratio": 1.2,
        "ci_low": 1.1,
        "ci_high": 1.3,
        "median_limit_ms": None,
        "gx_success": True,
        "evidence": {},
    }


def test_busy_reason_decides_for_both_checks(tmp_path):
    """Before baseline-compare the run's noise decides (with a paired gate: no store needed); after it the
    verdict's evidence."""
    ctx, pulled, env, _, run, _, verdict = make_records(tmp_path)
    busy = {"busy": True, "reason": "host busy: other processes took 62%"}
    measured = RunState(ctx=ctx, pulled=pulled, env=env, run=run.model_copy(update={"noise": busy, "paired_path": "x"}))
    assert pipeline.busy_reason(measured) == busy["reason"]
    undecided = verdict.model_copy(update={"verdict": Verdict.INCONCLUSIVE, "evidence": {"noise": busy}})
    assert pipeline.busy_reason(measured.model_copy(update={"verdict": undecided})) == busy["reason"]
    decided = undecided.model_copy(update={"verdict": Verdict.REGRESSION})
    assert pipeline.busy_reason(measured.model_copy(update={"verdict": decided})) is None
    archived = ArchiveRecord(run_id=3, archive_uri="/a", verdict="inconclusive")
    assert pipeline.busy_reason(measured.model_copy(update={"archived": archived})) is None  # retried, verdict gone
    assert pipeline.busy_reason(RunState(ctx=RunContext(dag_id="d", dag_run_id="r", case=ctx.case))) is None


def test_a_stages_start_line_names_what_it_does_for_the_case_and_its_version(tmp_path, monkeypatch, caplog):
    """The pull stage's start line says it builds a model in the runner only for a keras.applications case (a
    model store's ``.keras`` file is copied and hashed); the version is ``version latest`` as asked for, then the
    resolved version (``v3``) once the pull stage resolved it; never ``vlatest``."""
    import logging

    from tasks.records import Case
    from tasks.settings import Settings
    from tasks.store import migrate

    settings = Settings.from_env({"PERFWATCH_HOME": str(tmp_path)})
    migrate(settings.database_url)
    ctx, pulled, *_ = make_records(tmp_path)
    latest = ctx.model_copy(update={"case": Case(model="zoo_cnn", version="latest", measured_steps=10)})
    app = ctx.model_copy(update={"case": Case(model="resnet50", backbone="keras.applications", measured_steps=10)})
    resolved = pulled.model_copy(update={"model": "zoo_cnn", "version": "3"})
    built = pulled.model_copy(update={"model": "resnet50", "version": "keras3.15.1-1a2b3c4d"})
    monkeypatch.setitem(pipeline._WORK, "pull-model-version", lambda state, ctx, st: resolved)
    monkeypatch.setitem(pipeline._WORK, "env-fingerprint", lambda state, ctx, st: state.env)

    def start_line(state: RunState, stage_id: str) -> str:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="tasks.stages.pipeline"):
            pipeline.run_stage(state, stage_id, settings)
        return next(r.getMessage() for r in caplog.records if "(stage " in r.getMessage())

    line = start_line(RunState(ctx=latest), "pull-model-version")
    assert line == (
        "pull-model-version (stage 1 of 7): copying and hashing the model version (zoo_cnn version latest, train-bs16)"
    )
    assert "keras.applications" not in line and "vlatest" not in line
    line = start_line(RunState(ctx=latest, pulled=resolved), "env-fingerprint")
    assert line.endswith("(zoo_cnn v3, train-bs16)")
    monkeypatch.setitem(pipeline._WORK, "pull-model-version", lambda state, ctx, st: built)
    line = start_line(RunState(ctx=app), "pull-model-version")
    assert "building the keras.applications model in the runner" in line and line.endswith(
        f"(resnet50 version latest, {app.case.name})"
    )
    line = start_line(RunState(ctx=app, pulled=built), "env-fingerprint")
    assert line.endswith(f"(resnet50 keras3.15.1-1a2b3c4d, {app.case.name})")
    assert registry.stage("env-fingerprint").says(app.case) == registry.stage("env-fingerprint").doing
