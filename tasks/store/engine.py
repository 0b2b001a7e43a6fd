"""Engines, transactions and migrations of the SQL store (SQLAlchemy 2, Alembic).

SQLite file by default, PostgreSQL in docker-compose and production; the schema lives in
``tasks.store.schema`` and its migrations in ``sql/migrations``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "sql" / "migrations"


def redact(url: str) -> str:
    """The URL with its password masked, for logs and error messages."""
    return make_url(url).render_as_string(hide_password=True)


_engines: dict[str, Engine] = {}


def get_engine(url: str) -> Engine:
    """A cached engine for ``url``; SQLite gets foreign keys on and a busy timeout (30 s)."""
    if url not in _engines:
        u = make_url(url)
        if u.get_backend_name() == "sqlite":
            if u.database and u.database != ":memory:":
                Path(u.database).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": 30})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn, _record):  # pragma: no cover - trivial
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA journal_mode=WAL")
                cur.close()
        else:
            engine = create_engine(url, pool_pre_ping=True)
        _engines[url] = engine
    return _engines[url]


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception (which is re-raised)."""
    factory = sessionmaker(get_engine(url), expire_on_commit=False)
    with factory() as session, session.begin():
        yield session


def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` with the Alembic migrations in ``sql/migrations``."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = get_engine(url)
    command.upgrade(cfg, revision)
