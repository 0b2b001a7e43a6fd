"""Shared fixtures: an isolated PERFWATCH_HOME, a store URL per backend, tiny real models."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.models import make_model

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: pytest-xdist's name of this worker process (``gw0``, ``gw1``; ``make test`` runs two), None without xdist
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
#: test files that share one outside resource no worker may use beside another: the live Airflow tests empty and
#: use Redis database 0 and start Celery workers on it; ``--dist loadgroup`` runs a group on one worker, in turn
SHARED_GROUPS = {"test_airflow_live.py": "redis", "test_fleet_live.py": "redis"}


def _own_databases(worker: str) -> None:
    """Give this xdist worker its own databases, before any test module reads the environment: the PostgreSQL
    test database ``<name>_<worker>`` on the same server (created when missing; each test empties or drops its
    tables, so two workers on one database would empty each other's), and its own ``AIRFLOW_HOME``: a copy of
    the one ``make airflow-init`` migrated (its SQLite metadata database; ``airflow.cfg``'s paths rewritten to the
    copy) in a directory of its own, removed at exit. A test that sets an ``AIRFLOW_HOME`` of its own still gets
    that home's database, as in a serial run."""
    import atexit
    import tempfile

    url = os.environ.get("PERFWATCH_TEST_DATABASE_URL")
    if url:
        from sqlalchemy import create_engine, text
        from sqlalchemy.engine import make_url

        base = make_url(url)
        name = f"{base.database}_{worker}"
        engine = create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar() is None:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        os.environ["PERFWATCH_TEST_DATABASE_URL"] = base.set(database=name).render_as_string(hide_password=False)
    home = os.environ.get("AIRFLOW_HOME")
    if home and (Path(home) / "airflow.db").is_file():
        root = Path(tempfile.mkdtemp(prefix=f"perfwatch-{worker}-"))
        atexit.register(shutil.rmtree, root, True)
        own = root / "airflow"
        shutil.copytree(home, own, ignore=shutil.ignore_patterns("logs"))
        if (cfg := own / "airflow.cfg").is_file():  # it names its database, logs and dags by the home's path
            cfg.write_text(cfg.read_text().replace(str(Path(home)), str(own)))
        os.environ["AIRFLOW_HOME"] = str(own)


if WORKER:
    _own_databases(WORKER)
    # execnet starts xdist's workers with COLUMNS=80 and LINES=24; a test process of a serial run has neither (the
    # CLI then renders 200 columns wide, tasks.cli.render): a test that wants a width sets its own
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)

PG_URL = os.environ.get("PERFWATCH_TEST_DATABASE_URL")


def pytest_collection_modifyitems(config, items):
    """Tests of a file in :data:`SHARED_GROUPS` go into that xdist group (one worker runs them in turn)."""
    for item in items:
        if (group := SHARED_GROUPS.get(item.path.name)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))


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
