"""Waiting says it is waiting: while a busy host's profiled run waits for its retry, what ``make demo`` shows of the
DAG run's log (``perfwatch demo follow``) says what it waits for and until when, folds the scheduler's warning
of every second, and ``perfwatch runs`` (the demo's last output) gives each verdict's reason."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from typer.testing import CliRunner

from tasks.cli.follow import follow
from tasks.cli.main import app
from tasks.stages import pipeline
from tasks.stages.archive import archive_run
from tests.helpers.builders import make_records

T = dt.datetime(2026, 12, 1, 19, 32, 9, tzinfo=dt.UTC)
UNRUNNABLE = (
    "{<TaskInstance: perfwatch_profile.measure manual__2026-12-01T19:20:00+00:00 map_index=0 [up_for_retry] "
    "ti_id=019a>, <TaskInstance: perfwatch_profile.parse manual__2026-12-01T19:20:00+00:00 map_index=0 [None] "
    "ti_id=019b>, <TaskInstance: perfwatch_profile.archive manual__2026-12-01T19:20:00+00:00 map_index=0 [None] "
    "ti_id=019c>}"
)


def _line(at: dt.datetime, level: str, text: str, logger: str) -> str:
    """One line of ``airflow dags test``'s log, as its structlog console renderer writes it."""
    return f"{at:%Y-%m-%dT%H:%M:%S}.123456Z [{level:<9}] {text} [{logger}] loc=x.py:1\n"


def test_a_retry_wait_says_until_when_and_folds_the_schedulers_warnings():
    retry = pipeline.retry_when(600, (1, 3), now=T)
    assert retry == "at 19:42:09 UTC (in 600 s, try 2 of 3)"
    with pytest.raises(ValueError, match="retry delay"):
        pipeline.retry_when(float("nan"))
    busy = f"waiting for a quieter host: m (train-bs16): host busy: other processes took 62%; measuring again {retry}"
    log = [
        _line(T, "warning", busy, "tasks.stages.pipeline"),
        _line(T, "info", "[DAG TEST] end task task_id=measure map_index=0", "airflow.sdk.definitions.dag"),
    ]
    log += [
        _line(T + dt.timedelta(seconds=1 + i), "warning", f"No tasks to run. unrunnable tasks: {UNRUNNABLE}", "airflow")
        for i in range(600)
    ]
    log.append(_line(T + dt.timedelta(seconds=601), "info", "[DAG TEST] starting task_id=measure", "airflow"))
    shown = list(follow(log))
    assert shown[:3] == [
        f"   19:32:09     {busy}",
        "   19:32:09 task measure: ended",
        "   19:32:10 waiting: measure up for retry; 2 tasks after it until 19:42:09 UTC",
    ]
    assert shown[3] == "   19:33:10 still waiting (60 s) until 19:42:09 UTC"
    assert len(shown) == 3 + 9 + 2  # a line a minute, not 600 lines
    assert shown[-2:] == [
        "   19:42:09 waited 599 s (600 'No tasks to run' lines in the log)",
        "   19:42:10 task measure: started",
    ]
    # any other shown line repeated right after itself is shown once; three or more say how often
    same = [_line(T + dt.timedelta(seconds=i), "info", "warm-up: step 42", "tasks.runner.progress") for i in range(3)]
    assert list(follow(same[:2])) == ["   19:32:09     warm-up: step 42"]
    assert list(follow(same)) == ["   19:32:09     warm-up: step 42", "   19:32:11 (repeated 3 times until 19:32:11)"]


def test_the_busy_retry_logs_what_it_waits_for_and_when(tmp_path, monkeypatch, caplog):
    from tasks.records import RunState
    from tasks.settings import Settings

    settings = Settings.from_env({"PERFWATCH_HOME": str(tmp_path)})
    state = RunState(ctx=make_records(tmp_path)[0])
    monkeypatch.setattr(pipeline, "run_stage", lambda state, stage_id, settings=None: state)
    monkeypatch.setattr(pipeline, "busy_reason", lambda state, settings=None: "host busy: other processes took 62%")
    with caplog.at_level(logging.WARNING, logger="tasks.stages.pipeline"):
        with pytest.raises(pipeline.HostBusy, match=r"measuring again at \d\d:\d\d:\d\d UTC \(in 600 s, try 2 of 3\)"):
            pipeline.profile_unless_busy(state, settings, retry_left=True, retry_in_s=600, attempt=(1, 3))
    (rec,) = [r for r in caplog.records if r.name == "tasks.stages.pipeline"]
    assert rec.levelno == logging.WARNING and "waiting for a quieter host: m (train-bs16)" in rec.getMessage()
    assert "UTC (in 600 s, try 2 of 3)" in rec.getMessage()
    with pytest.raises(pipeline.HostBusy, match="measuring again later"):  # no delay given: as before
        pipeline.profile_unless_busy(state, settings, retry_left=True)


def test_runs_ends_with_each_verdicts_reason(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp_path, dag_run_id="a", verdict="inconclusive")
    busy = comp.model_copy(update={"evidence": {"noise": {"busy": True, "reason": "host busy: load 9.1 on 2 CPUs"}}})
    archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, busy)
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp_path, dag_run_id="b", verdict="regression")
    slow = comp.model_copy(update={"evidence": {"reason": "step time x1.70 [1.62, 1.79] is above x1.05"}})
    archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, slow)
    out = CliRunner().invoke(app, ["runs", "--model", "m", "--last", "2"])
    assert out.exit_code == 0, out.output
    lines = out.output.rstrip().splitlines()
    assert lines[-2:] == [
        "  run 1 inconclusive; no comparison (nothing to compare with); why: host busy: load 9.1 on 2 CPUs",
        "  run 2 regression; no comparison (nothing to compare with); why: step time x1.70 [1.62, 1.79] is above x1.05",
    ]


def test_make_demo_ends_with_the_runs_table_when_building_the_model_store_fails(tmp_path):
    """``make demo``'s first step (``perfwatch demo build-store``) failing ended the demo before the runs table
    the Makefile promises whatever happened: it is told, no DAG run is tried, the table still comes, exit 1
    (make's 2). ``perfwatch`` and ``airflow`` are stubs that log their arguments."""
    import shutil
    import subprocess

    from tests.helpers import ROOT

    calls, stub = tmp_path / "calls", tmp_path / "stub"
    stub.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in "demo build-store") echo "boom: the model store is read-only" >&2; exit 1;;\n'
        '  runs*) echo "THE RUNS TABLE";; esac\n'
    )
    stub.chmod(0o755)
    (tmp_path / "airflow").mkdir()
    (tmp_path / "airflow" / ".initialised").touch()
    make = shutil.which("make")
    assert make is not None
    out = subprocess.run(
        [make, "-s", "-C", str(ROOT), "-o", "airflow-init", "demo", f"PERFWATCH={stub}", f"AIRFLOW={stub}",
         f"AIRFLOW_HOME={tmp_path / 'airflow'}", f"PERFWATCH_HOME={tmp_path / 'home'}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr  # make's code for a recipe that exited 1
    assert "building the demo's model store failed: no DAG run is tried" in out.stdout
    assert out.stdout.rstrip().endswith("THE RUNS TABLE") and "boom: the model store is read-only" in out.stderr
    assert calls.read_text().splitlines() == ["demo build-store", "runs --model demo_mobilenet --last 2"]
