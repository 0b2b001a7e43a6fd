"""Shared fixtures: an isolated PERFWATCH_HOME, a store URL per backend, tiny real models."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.models import make_model

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PG_URL = os.environ.get("PERFWATCH_TEST_DATABASE_URL")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh PERFWATCH_HOME; settings read from the environment point into it."""
    h = tmp_path / "pwhome"
    monkeypatch.setenv("PERFWATCH_HOME", str(h))
    for var in ("PERFWATCH_DATABASE_URL", "PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK"):
        monkeypatch.delenv(var, raising=False)
    return h


def _fresh_pg_url() -> str:
    """Drop and recreate the perfwatch tables in the PostgreSQL test database."""
    from sqlalchemy import text

    from tasks.store import get_engine

    with get_engine(PG_URL).begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    return PG_URL


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory) -> Path:
    """One SQLite store migrated to the newest schema per session: each test's store is a copy of it (a file copy
    instead of 13 Alembic migrations per test)."""
    import sqlite3

    from tasks.store import get_engine, migrate

    path = tmp_path_factory.mktemp("template") / "store.db"
    migrate(f"sqlite:///{path}")
    get_engine(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as conn:  # the store runs in WAL mode: everything into the file that is copied
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


#: the PostgreSQL test schema as a migration left it: (alembic version, table names), set on the first migration
_pg_migrated: dict[str, object] = {}


def _pg_schema(conn) -> tuple[str | None, tuple[str, ...]]:
    from sqlalchemy import inspect, text

    tables = tuple(sorted(inspect(conn).get_table_names(schema="public")))
    if "alembic_version" not in tables:
        return None, tables
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar(), tables


def _empty_pg_url() -> str:
    """The PostgreSQL test database with a migrated, empty store: where the schema is still the one the session
    migrated (same Alembic version and tables), its tables are emptied (TRUNCATE ... RESTART IDENTITY, so ids start
    at 1 again); otherwise (a test dropped it, or migrated it elsewhere) it is dropped and migrated afresh."""
    from sqlalchemy import text

    from tasks.store import get_engine, migrate

    with get_engine(PG_URL).begin() as conn:
        version, tables = _pg_schema(conn)
        if _pg_migrated and (version, tables) == _pg_migrated["schema"]:
            names = ", ".join(f'public."{t}"' for t in tables if t != "alembic_version")
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
            return PG_URL
    migrate(_fresh_pg_url())
    with get_engine(PG_URL).connect() as conn:
        _pg_migrated["schema"] = _pg_schema(conn)
    return PG_URL


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path, _sqlite_template) -> str:
    """A migrated, empty store on SQLite always, and on PostgreSQL when PERFWATCH_TEST_DATABASE_URL is set."""
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        shutil.copy(_sqlite_template, path)
        return f"sqlite:///{path}"
    if not PG_URL:
        pytest.skip("PostgreSQL store tests need PERFWATCH_TEST_DATABASE_URL (set by .ci/run)")
    return _empty_pg_url()


@pytest.fixture(scope="session")
def model_files(tmp_path_factory) -> dict[str, Path]:
    """Tiny real Keras models built once per session: tiny, wide (heavier), bad_embedding, tiny SavedModel."""
    root = tmp_path_factory.mktemp("models")
    return {
        "tiny": make_model("tiny", root / "tiny.keras"),
        "wide": make_model("wide", root / "wide.keras"),
        "bad_embedding": make_model("bad_embedding", root / "bad.keras"),
    }


@pytest.fixture
def model_store(home, model_files) -> Path:
    """A TF-Serving layout store: tiny/1 (tiny), tiny/2 (wide: heavier), broken/1 (fails in training)."""
    store = home / "models"
    for model, version, kind in (("tiny", 1, "tiny"), ("tiny", 2, "wide"), ("broken", 1, "bad_embedding")):
        d = store / model / str(version)
        d.mkdir(parents=True)
        shutil.copy(model_files[kind], d / "model.keras")
    return store


@pytest.fixture
def cli(db_url, monkeypatch):
    """Invoke ``perfwatch ARGS...`` against the test store (typer's CliRunner); returns the click Result."""
    from typer.testing import CliRunner

    from tasks.cli.main import app

    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])
