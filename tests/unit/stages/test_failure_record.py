"""A failed stage's error is stored with its cause line first (``tasks.analysis.failures``), the full message
kept below, so ``perfwatch failures`` and the alert name the op XLA refused, not ``Graph execution error:``."""

from __future__ import annotations

import pytest

from tasks.records import RunState
from tasks.runner import RunnerError
from tasks.services import alerts
from tasks.settings import Settings
from tasks.stages import pipeline
from tests.helpers import ROOT
from tests.helpers.builders import make_records

XLA_ERROR = (ROOT / "tests" / "data" / "tf_errors" / "xla_unsupported_train.txt").read_text()


def test_a_failed_stage_stores_its_cause_first_and_failures_and_the_alert_show_it(db_url, tmp_path, monkeypatch):
    from tasks.store import queries

    ctx, pulled, env = make_records(tmp_path, dag_run_id="x1", model="area")[:3]
    message = "warm-up: runner (warmup) failed: " + XLA_ERROR
    (tmp_path / "x1" / "model").mkdir(parents=True, exist_ok=True)  # the pulled model's copy

    def fail(state, ctx, settings):
        raise RunnerError(message)

    monkeypatch.setitem(pipeline._WORK, "warm-up", fail)
    settings = Settings.from_env({"PERFWATCH_HOME": str(tmp_path / "home"), "PERFWATCH_DATABASE_URL": db_url})
    with pytest.raises(RunnerError):
        pipeline.run_stage(RunState(ctx=ctx, pulled=pulled, env=env), "warm-up", settings)
    (row,) = queries.failures("2000-01-01", db_url=db_url).to_dict(orient="records")
    assert row["reason"].startswith("cause: XLA unsupported: op ResizeArea could not compile on XLA_CPU_JIT")
    stored = row["error"].split("\n", 1)[1]  # the full message is kept below it (the query cuts at 2000 characters)
    assert len(stored) > 1000 and ("RunnerError: " + message).startswith(stored)
    alert = alerts.dag_run_alert(ctx.dag_id, "x1", failed=True, db_url=db_url)
    assert alert is not None and "failed at stage *warm-up*: cause: XLA unsupported: op ResizeArea" in alert["text"]
    task = alerts.dag_run_alert(
        ctx.dag_id, "none", failed=True, db_url=db_url, task="t", error="RunnerError: " + message
    )
    assert task is not None and "task *t* failed: cause: XLA unsupported: op ResizeArea" in task["text"]


def test_perfwatch_failures_names_the_cause_of_a_run_recorded_before_it_was_stored_first(cli, db_url, tmp_path):
    import json

    from tests.helpers.builders import add_failure

    add_failure(db_url, tmp_path, "old", error="RunnerError: warm-up: runner (warmup) failed: " + XLA_ERROR)
    out = cli("failures", "--since", "2000-01-01", "--format", "json")
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert row["reason"].startswith("cause: XLA unsupported: op ResizeArea could not compile on XLA_CPU_JIT")
