"""The Alembic migrations: from empty to head on both databases, no drift from the ORM, down and up again."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from tasks.store import MIGRATIONS_DIR, Base, get_engine, migrate


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = get_engine(url)
    return cfg


def _head() -> str:
    return ScriptDirectory.from_config(_config("sqlite://")).get_current_head()


def _revision(url: str) -> str | None:
    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _drift(url: str) -> list:
    with get_engine(url).connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(ctx, Base.metadata)


def test_migrations_reach_head_from_empty(db_url):
    # the db_url fixture migrates an empty database (SQLite file / freshly dropped PG schema)
    assert _revision(db_url) == _head()


def test_migrated_schema_matches_the_orm(db_url):
    # What `alembic check` does: autogenerate finds nothing to add, drop or alter.
    assert _drift(db_url) == []


def test_query_indexes_exist(db_url):
    insp = inspect(get_engine(db_url))
    runs = {ix["name"] for ix in insp.get_indexes("runs")}
    assert {"ix_runs_verdict_time", "ix_runs_status_time", "ix_runs_model_case_time"} <= runs
    assert "ix_comparisons_baseline_run" in {ix["name"] for ix in insp.get_indexes("comparisons")}
    assert "ix_baselines_run" in {ix["name"] for ix in insp.get_indexes("baselines")}


def test_downgrade_to_base_and_upgrade_again(db_url):
    cfg = _config(db_url)
    command.downgrade(cfg, "0001")
    assert _revision(db_url) == "0001"
    assert "ix_runs_verdict_time" not in {ix["name"] for ix in inspect(get_engine(db_url)).get_indexes("runs")}
    command.downgrade(cfg, "base")
    assert _revision(db_url) is None
    assert "runs" not in inspect(get_engine(db_url)).get_table_names()
    migrate(db_url)
    assert _revision(db_url) == _head()
    assert _drift(db_url) == []


def test_migrate_is_idempotent(db_url):
    migrate(db_url)
    migrate(db_url)
    assert _revision(db_url) == _head()
