"""A run's identity (issue 35 item 1): (dag_id, dag_run_id, model, version as planned, case), in every look-up, write,
work dir and archive name, and migration 0012 that made it so (on a store holding runs and their samples)."""

from __future__ import annotations

import json

import pytest
from alembic import command
from sqlalchemy import func, select, text

from tasks.records import RunContext
from tasks.stages.archive import run_key
from tasks.store import Run, StepSample, migrate, session_scope
from tasks.store.engine import get_engine
from tasks.store.reads import stored_run
from tasks.store.writes import SuccessAlreadyStored, record_failure
from tests.helpers.builders import add_run, make_records
from tests.unit.store.test_migrations import _config


def _ctx(tmp, model: str, version: str = "latest", dag_run_id: str = "scheduled__1") -> RunContext:
    ctx = make_records(tmp, dag_run_id=dag_run_id, model=model)[0]
    return ctx.model_copy(update={"case": ctx.case.model_copy(update={"version": version})})


def test_two_models_of_one_dag_run_with_one_case_name_are_two_runs(db_url, tmp_path):
    """The nightly of two models whose cases share a name: the second model's run is its own, never the first's
    (before: its stages found the first model's run "already archived; nothing to do" and its own was dropped)."""
    first = add_run(db_url, tmp_path, "scheduled__1", model="demo_mobilenet", verdict="regression")
    ranker = _ctx(tmp_path, "ranker")
    assert stored_run(db_url, _ctx(tmp_path, "demo_mobilenet")).run_id == first
    assert stored_run(db_url, ranker) is None  # nothing of ranker's is stored yet
    failed = record_failure(db_url, ranker, "warm-up", "RunnerError: out of memory")  # not "already a success"
    assert failed != first and stored_run(db_url, ranker).status == "failed"
    second = add_run(db_url, tmp_path, "scheduled__1", model="ranker")  # the retry's success replaces the failure
    assert second != first
    with session_scope(db_url) as s:
        rows = s.execute(select(Run.id, Run.status).order_by(Run.id)).all()
    assert rows == [(first, "success"), (second, "success")]
    assert stored_run(db_url, ranker).run_id == second


def test_two_versions_of_one_model_in_one_release_dag_run_are_two_runs(db_url, tmp_path):
    """One release DAG run gating v3 and v4 of a model (two Asset events) keeps both runs."""
    v3, v4 = _ctx(tmp_path, "m", "3"), _ctx(tmp_path, "m", "4")
    record_failure(db_url, v3, "warm-up", "RunnerError: boom")
    record_failure(db_url, v4, "warm-up", "RunnerError: bang")
    assert stored_run(db_url, v3).run_id != stored_run(db_url, v4).run_id
    add_run(db_url, tmp_path, "scheduled__1", model="m")  # the nightly's: m latest, beside the release's two
    with pytest.raises(SuccessAlreadyStored, match=r"\(d scheduled__1 m latest train-bs16\)"):
        record_failure(db_url, _ctx(tmp_path, "m"), "warm-up", "a late failure never replaces a success")


def test_work_dirs_and_archive_keys_name_the_model_and_version(tmp_path):
    a, b, b2 = _ctx(tmp_path, "a"), _ctx(tmp_path, "b"), _ctx(tmp_path, "b", "2")
    assert len({a.slug, b.slug, b2.slug}) == 3 and len({run_key(a), run_key(b), run_key(b2)}) == 3
    assert "__b__vlatest__" in b.slug and "__b__v2__" in b2.slug


def test_migration_0012_keeps_runs_and_samples_and_backfills_the_planned_version(tmp_path):
    """From 0011 with a run and its samples (SQLite: the runs table is copied, foreign keys cascade): every row
    kept, the planned version from the run's Params (a failed ``latest`` run stored its resolved version),
    the partial indexes still there, and two models' runs with one case name allowed afterwards."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    migrate(url, "0011")
    with get_engine(url).begin() as c:
        c.execute(text("INSERT INTO models (id, name, created_at, successful_runs) VALUES (1, 'a', '2026-01-01', 0)"))
        for rid, version, status in ((1, "2", "failed"), (2, "1", "success")):
            c.execute(
                text(
                    "INSERT INTO runs (id, dag_id, dag_run_id, case_name, model_id, version_requested, trigger, "
                    "status, params, started_at, source) VALUES (:id, 'd', :r, 'train-bs16', 1, :v, 'scheduled', "
                    ":s, :p, '2026-01-01', 'perfwatch')"
                ),
                {"id": rid, "r": f"r{rid}", "v": version, "s": status, "p": json.dumps({"version": "latest"})},
            )
        c.execute(text("INSERT INTO step_samples (run_id, phase, step, step_time_ms) VALUES (2, 'measured', 0, 9.5)"))
    migrate(url)
    with session_scope(url) as s:
        assert s.execute(select(Run.id, Run.plan_version).order_by(Run.id)).all() == [(1, "latest"), (2, "latest")]
        assert s.scalar(select(func.count()).select_from(StepSample)) == 1
    with get_engine(url).connect() as c:
        partial = c.execute(text("SELECT sql FROM sqlite_master WHERE name = 'ix_runs_regression_cover'")).scalar()
        assert "WHERE" in partial and c.execute(text("PRAGMA foreign_keys")).scalar() == 1
    command.downgrade(_config(url), "0011")  # and back: the old identity, the samples kept
    with session_scope(url) as s:
        assert s.scalar(select(func.count()).select_from(StepSample)) == 1
