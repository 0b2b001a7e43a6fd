"""End to end: the DAG through `airflow dags test` on a tiny real Keras model, read back from the store;
and the pipeline's failure records for bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from tasks.records import Case, RunContext
from tasks.settings import Settings
from tasks.stages.pipeline import run_case
from tasks.store import Run, session_scope
from tests.helpers import ROOT as ROOT
from tests.helpers.airflow import BIN, _airflow_env

pytestmark = pytest.mark.slow


def test_dag_run_end_to_end(home, model_store, tmp_path):
    env = _airflow_env(home, tmp_path / "airflow")
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, cwd=ROOT)
    conf = {"model": "tiny", "version": "1", "batch_size": 4, "measured_steps": 10}
    proc = subprocess.run(
        [str(BIN / "airflow"), "dags", "test", "perfwatch_profile", "-c", json.dumps(conf)],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = subprocess.run(
        [str(BIN / "perfwatch"), "runs", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    (row,) = json.loads(out.stdout)
    assert row["model"] == "tiny" and row["version"] == "1" and row["status"] == "success"
    assert row["verdict"] == "no-baseline" and row["trigger"] == "manual"
    assert row["median_step_ms"] > 0 and row["throughput_eps"] > 0
    with session_scope(Settings.from_env(env).database_url) as s:
        run = s.scalar(select(Run))
        assert run.dag_id == "perfwatch_profile" and run.dag_run_id.startswith("manual__")
        xplanes = list(Path(run.archive_uri).glob("plugins/profile/*/*.xplane.pb"))
    assert len(xplanes) == 1
    from tasks.stages.parse import parse_profile

    assert parse_profile(run.archive_uri).avg_step_time_ms > 0  # the archived xplane converts with xprof
    assert not list((home / "work").glob("*")), "the work dir is cleaned after archiving"


def _ctx(model: str, version: str) -> RunContext:
    return RunContext(
        dag_id="t",
        dag_run_id=f"{model}-{version}",
        trigger="test",
        case=Case(model=model, version=version, batch_size=2, measured_steps=5, warmup_max_steps=10),
    )


def test_unknown_version_is_recorded_with_the_versions_there(home, model_store):
    with pytest.raises(LookupError, match=r"versions there: \[1, 2\]"):
        run_case(_ctx("tiny", "9"))
    with session_scope(Settings.from_env().database_url) as s:
        run = s.scalar(select(Run))
    assert (run.status, run.failed_stage, run.median_step_ms) == ("failed", "pull-model-version", None)
    assert "versions there: [1, 2]" in run.error


def test_model_failing_in_training_is_recorded_and_nothing_archived(home, model_store):
    with pytest.raises(RuntimeError, match="training step failed"):
        run_case(_ctx("broken", "1"))
    with session_scope(Settings.from_env().database_url) as s:
        run = s.scalar(select(Run))
    assert (run.status, run.failed_stage) == ("failed", "warm-up")
    assert "InvalidArgumentError" in run.error
    assert not (home / "archive").exists() or not any((home / "archive").rglob("*.xplane.pb"))


def test_an_unchanged_model_reuses_its_warm_up_and_runs_one_process(home, model_store, monkeypatch, caplog):
    """The second run of the same bytes, case and environment starts no warm-up process: it reuses the
    first run's steady-state step count; its stored cold step is its own profiled run's."""
    import tasks.stages.warmup as warmup_stage
    from tasks.store import RunTable

    calls = []
    real = warmup_stage.warm_up
    monkeypatch.setattr(warmup_stage, "warm_up", lambda *a, **k: calls.append(a) or real(*a, **k))
    # an unsteady warm-up is never reused: a CV bound of 100% makes the first one steady on a busy host too
    case = _ctx("tiny", "1").case.model_copy(update={"warmup_cv_max": 1.0})
    first = run_case(RunContext(dag_id="t", dag_run_id="tiny-1", trigger="test", case=case)).to_xcom()
    assert first["warmup"]["steady"] and first["warmup"]["reused_from_run_id"] is None
    ctx = RunContext(dag_id="t", dag_run_id="tiny-1-again", trigger="test", case=case)
    with caplog.at_level("INFO", logger="tasks.stages.pipeline"):
        second = run_case(ctx).to_xcom()
    assert len(calls) == 1, "only the first run started a warm-up process"
    first_id, second_id = first["archived"]["run_id"], second["archived"]["run_id"]
    assert second["warmup"]["reused_from_run_id"] == first_id
    assert f"reusing run {first_id}'s warm-up" in caplog.text
    with session_scope(Settings.from_env().database_url) as s:
        a, b = s.get(Run, first_id), s.get(Run, second_id)
        assert b.warmup_steps == a.warmup_steps and b.steady
        assert b.cold_step_ms > 0 and b.cold_step_ms != a.cold_step_ms  # its own process's first step
        assert s.scalar(
            select(RunTable.data).where(RunTable.run_id == second_id, RunTable.tool == "warmup_reused")
        ) == {"run_id": first_id}
