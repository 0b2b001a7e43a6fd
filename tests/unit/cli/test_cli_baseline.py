"""``perfwatch baseline show`` / ``accept``: the active baseline, its history with who and why, manual accept."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tasks.cli.main import app
from tasks.stages.archive import archive_run
from tasks.store.writes import record_failure
from tests.helpers.builders import make_records

runner = CliRunner()


@pytest.fixture
def store(db_url, home, tmp_path, monkeypatch):
    """Run 1 (no-baseline: auto-accepted), run 2 (regression: not accepted), run 3 failed."""
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    arch = str(tmp_path / "archive")
    ids = [
        archive_run(db_url, arch, *make_records(tmp_path, dag_run_id="r1")).run_id,
        archive_run(db_url, arch, *make_records(tmp_path, dag_run_id="r2", verdict="regression", median=12.0)).run_id,
    ]
    ids.append(record_failure(db_url, make_records(tmp_path, dag_run_id="r3")[0], "warm-up", "RunnerError: boom"))
    return ids


def _show(*args: str) -> list[dict]:
    res = runner.invoke(app, ["baseline", "show", "m", "--format", "json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_show_lists_active_baseline_with_who_and_why(store):
    rows = _show()
    assert [(r["run_id"], r["active"], r["accepted_by"]) for r in rows] == [(store[0], True, "perfwatch")]
    assert rows[0]["reason"] == "automatic: verdict no-baseline" and rows[0]["version"] == "1"
    table = runner.invoke(app, ["baseline", "show", "m"])
    assert table.exit_code == 0 and f"run {store[0]} v1" in table.stdout and "accepted by perfwatch" in table.stdout


def test_accept_moves_baseline_to_a_regression_and_keeps_history(store):
    res = runner.invoke(
        app, ["baseline", "accept", str(store[1]), "--by", "alice", "--reason", "intended: larger input resolution"]
    )
    assert res.exit_code == 0, res.output
    assert (
        f"run {store[1]} is now the active baseline" in res.stdout
        and f"previous baseline run: {store[0]}" in res.stdout
    )
    rows = _show("--case", "train-bs16")
    assert [(r["run_id"], r["active"]) for r in rows] == [(store[1], True), (store[0], False)]
    assert rows[0]["accepted_by"] == "alice" and rows[0]["reason"] == "intended: larger input resolution"
    assert rows[0]["run_verdict"] == "regression" and rows[1]["superseded_at"] is not None
    again = runner.invoke(app, ["baseline", "accept", str(store[1]), "--by", "bob", "--reason", "again"])
    assert again.exit_code == 0 and "already is the active baseline" in again.stdout
    assert len(_show()) == 2


def test_accept_errors_name_the_cause(store):
    missing = runner.invoke(app, ["baseline", "accept", "999", "--by", "a", "--reason", "r"])
    assert missing.exit_code == 1 and "no run 999" in missing.output
    failed = runner.invoke(app, ["baseline", "accept", str(store[2]), "--by", "a", "--reason", "r"])
    assert failed.exit_code == 1 and "status 'failed' (failed at warm-up)" in failed.output
    blank = runner.invoke(app, ["baseline", "accept", str(store[1]), "--by", "a", "--reason", " "])
    assert blank.exit_code == 1 and "--by and --reason must be non-empty" in blank.output
    assert [r["run_id"] for r in _show()] == [store[0]]  # nothing moved


def test_show_unknown_model_lists_models(store):
    res = runner.invoke(app, ["baseline", "show", "nope"])
    assert res.exit_code == 1 and "model 'nope' is not in the store; models there: ['m']" in res.output


def test_show_other_case_is_empty(store):
    assert _show("--case", "train-bs32") == []


def test_accepting_a_case_s_first_baseline_says_so_not_none(db_url, home, tmp_path, monkeypatch):
    """A new team's first accept printed "previous baseline run: None"."""
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    run = archive_run(db_url, str(tmp_path / "a"), *make_records(tmp_path, dag_run_id="r1", verdict="inconclusive"))
    res = runner.invoke(app, ["baseline", "accept", str(run.run_id), "--by", "alice", "--reason", "measured quiet"])
    assert res.exit_code == 0, res.output
    assert "the case had no baseline before" in res.stdout and "None" not in res.stdout
