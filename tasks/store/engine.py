"""Engines, transactions and migrations of the SQL store (SQLAlchemy 2, Alembic).

SQLite file by default, PostgreSQL in docker-compose and production; the schema lives in
``tasks.store.schema`` and its migrations in ``sql/migrations``.

Store URLs are normalised in one place, ``normalize_url``: ``postgres://`` and ``postgresql://``
(as hosting platforms and Airflow connections hand them out) mean ``postgresql+psycopg://``, the
driver perfwatch ships. Two kinds of store trouble become typed errors with a one-line message
(the command line prints it and exits non-zero): ``StoreUnreachable`` (cannot connect, or the
connection was lost; names host and port, password masked), ``StoreCorrupt`` (a SQLite file that is not a
database, or a damaged one) and ``StoreSchemaTooNew`` (the store was migrated by a newer perfwatch); the
read-only paths check first with ``check_readable`` (``StoreMissing``, ``StoreNotMigrated``) or
``require_existing`` (``StoreMissing``), which never create a store.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, Connection, Engine, ExceptionContext, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from tasks import wire

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "sql" / "migrations"

MIGRATION_LOCK_KEY = 0x7065_7266_7761_7463  # "perfwatc": the pg_advisory_lock key that serialises migrations
"""PostgreSQL advisory-lock key held while ``migrate`` runs (any 64-bit integer unique to perfwatch)."""


class StoreError(SQLAlchemyError):
    """The store cannot be used as it is; the message is one line meant for a person. A database error
    (``sqlalchemy.exc.SQLAlchemyError``), so code that reports database errors reports these too; never
    retried as a busy store is (not an ``OperationalError``)."""


class StoreUnreachable(StoreError):
    """No connection to the store (refused, unknown host, file not openable), or it was lost mid-use."""


class StoreCorrupt(StoreError):
    """The store's SQLite file is not a database (``file is not a database``: another file at its path) or is
    damaged (``database disk image is malformed``): nothing can be read from it or written to it."""


class StoreSchemaTooNew(StoreError):
    """The store's ``alembic_version`` names a revision this perfwatch does not know (a newer perfwatch
    migrated it). ``revision`` is the store's revision, ``head`` this perfwatch's newest."""

    def __init__(self, message: str, revision: str, head: str | None) -> None:
        super().__init__(message)
        self.revision, self.head = revision, head


class StoreMissing(StoreError):
    """No store at the URL: the SQLite file does not exist (it is made by the first DAG run, ``perfwatch run``
    or ``perfwatch db upgrade``). Raised by :func:`check_readable` and :func:`require_existing`, which never
    create one."""


class StoreNotMigrated(StoreError):
    """The database exists but holds no perfwatch schema (no Alembic revision): it was never migrated."""


def normalize_url(url: str | URL) -> str:
    """The store URL as perfwatch connects to it: ``postgres://`` and driverless ``postgresql://``
    become ``postgresql+psycopg://`` (psycopg 3 is the driver perfwatch ships); others are unchanged.

    Raises:
        sqlalchemy.exc.ArgumentError: ``url`` is not a URL.
    """
    u = make_url(url)
    if u.drivername in ("postgres", "postgresql"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def redact(url: str) -> str:
    """The URL with its password masked, for logs and error messages."""
    return make_url(url).render_as_string(hide_password=True)


def describe(url: str) -> str:
    """Where the store is, for one-line messages: ``host H port P (URL)`` for a server (the driver's
    default port 5432 when the URL has none), ``file F`` for SQLite; the password is masked."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return f"SQLite file {u.database or ':memory:'}"
    port = u.port or (5432 if u.get_backend_name() == "postgresql" else None)
    return f"host {u.host or 'localhost'} port {port} ({redact(url)})"


def _first_line(e: BaseException, password: str | None) -> str:
    line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return line.replace(password, "***") if password else line


#: what SQLite says of a file that is not a database or a damaged one (``sqlite3.DatabaseError``): ``StoreCorrupt``
SQLITE_CORRUPT = ("file is not a database", "database disk image is malformed")

_engines: dict[str, Engine] = {}
#: JSON columns hold strict JSON, NaN and infinities as tasks.wire's strings (PostgreSQL's json rejects the
#: NaN/Infinity tokens), and read them back as floats
_JSON = {"json_serializer": wire.dumps, "json_deserializer": wire.loads}


def get_engine(url: str) -> Engine:
    """A cached engine for ``url`` (normalised by ``normalize_url``); SQLite gets foreign keys on,
    WAL and a busy timeout (30 s).

    Errors while connecting, and a connection lost mid-use, are raised as ``StoreUnreachable``
    (never retried as a busy store would be); a SQLite file that is not a database or is damaged, as
    ``StoreCorrupt`` (naming the file); every other database error is SQLAlchemy's own.
    """
    url = normalize_url(url)
    if url not in _engines:
        u = make_url(url)
        if u.get_backend_name() == "sqlite":
            if u.database and u.database != ":memory:":
                try:
                    Path(u.database).parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise StoreUnreachable(
                        f"cannot connect to the store at {describe(url)}: cannot create its directory: {e}"
                    ) from e
            engine = create_engine(url, connect_args={"timeout": 30}, **_JSON)

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:  # pragma: no cover
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA journal_mode=WAL")
                cur.close()
        else:
            engine = create_engine(url, pool_pre_ping=True, **_JSON)

        password, is_sqlite = u.password, u.get_backend_name() == "sqlite"

        @event.listens_for(engine, "handle_error")
        def _unreachable(ctx: ExceptionContext) -> StoreError | None:
            if ctx.is_pre_ping:  # the pool reconnects on its own
                return None
            detail = _first_line(ctx.original_exception, password)
            if is_sqlite and any(c in detail for c in SQLITE_CORRUPT):
                return StoreCorrupt(
                    f"the store at {describe(url)} cannot be used: {detail} (another file at its path, or a damaged "
                    "store; PERFWATCH_DATABASE_URL names the store)"
                )
            if is_sqlite and "unable to open" not in detail:  # e.g. "database is locked": busy, retried by writers
                return None
            if ctx.connection is None or ctx.is_disconnect:
                what = "cannot connect to" if ctx.connection is None else "lost the connection to"
                return StoreUnreachable(f"{what} the store at {describe(url)}: {detail}")
            return None

        _engines[url] = engine
    return _engines[url]


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception (which is re-raised)."""
    factory = sessionmaker(get_engine(url), expire_on_commit=False)
    with factory() as session, session.begin():
        yield session


@contextmanager
def _sqlite_file_lock(database: str | None) -> Iterator[None]:
    """An exclusive ``flock`` on ``<database>.migrate.lock`` beside a SQLite file (none in memory)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    lock_path = Path(database).with_name(Path(database).name + ".migrate.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _script() -> tuple[Config, ScriptDirectory]:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg, ScriptDirectory.from_config(cfg)


def _check_known(url: str, conn: Connection, script: ScriptDirectory) -> tuple[str, ...]:
    """The store's current revisions; raises StoreSchemaTooNew when one is unknown to ``script``."""
    from alembic.runtime.migration import MigrationContext
    from alembic.util import CommandError

    current = MigrationContext.configure(conn).get_current_heads()
    for rev in current:
        try:
            known = script.get_revision(rev)
        except CommandError:
            known = None
        if known is None:
            head = script.get_current_head()
            raise StoreSchemaTooNew(
                f"the store at {describe(url)} has schema revision {rev!r}, which this perfwatch does not know "
                f"(its newest is {head!r}): the store was migrated by a newer perfwatch; upgrade perfwatch",
                revision=rev,
                head=head,
            )
    return current


def require_existing(url: str) -> None:
    """That a store is at ``url`` before a command that only reads it opens it: opening a SQLite file that does
    not exist would create it (and its directory), empty. A server's database is left to the connection.

    Raises:
        StoreMissing: no SQLite file at the URL's path (names it, and what creates a store).
    """
    u = make_url(normalize_url(url))
    if u.get_backend_name() == "sqlite" and u.database not in (None, "", ":memory:"):
        path = u.database.removeprefix("file:").split("?", 1)[0]
        if not Path(path).is_file():
            raise StoreMissing(
                f"no store at {describe(url)}: it is created by the first DAG run, `perfwatch run` or `perfwatch db "
                "upgrade`; reading never creates one (PERFWATCH_DATABASE_URL names the store)"
            )


def check_readable(url: str | None = None) -> str:
    """Whether the store at ``url`` (default ``PERFWATCH_DATABASE_URL``, ``tasks.settings``) can be read as it
    is, without creating or changing anything: for the
    read-only paths (the plugin's pages and ``/perfwatch/metrics``), which must never create a store. A SQLite
    file that does not exist is not opened (SQLite would create it, empty); an existing database must carry a
    perfwatch schema revision this perfwatch knows.

    Returns:
        the store's Alembic revision (e.g. ``"0007"``).

    Raises:
        StoreMissing: no SQLite file at the URL's path (names it).
        StoreNotMigrated: the database has no perfwatch schema (never migrated).
        StoreSchemaTooNew: migrated by a newer perfwatch.
        StoreUnreachable: cannot connect.
        StoreCorrupt: the SQLite file is not a database, or is damaged.
    """
    from tasks.settings import Settings

    url = normalize_url(url or Settings.from_env().database_url)
    require_existing(url)
    _, script = _script()
    with get_engine(url).connect() as conn:
        current = _check_known(url, conn, script)
    if not current:
        raise StoreNotMigrated(
            f"the store at {describe(url)} has no perfwatch schema (not migrated): run `perfwatch db upgrade` "
            "or a DAG run first (PERFWATCH_DATABASE_URL names the store)"
        )
    return current[0]


def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` with the Alembic migrations in ``sql/migrations``.

    Serialised across processes and threads: a PostgreSQL advisory lock (``pg_advisory_lock``,
    key ``MIGRATION_LOCK_KEY``) held on the migrating connection, or an exclusive file lock on
    ``<sqlite file>.migrate.lock`` beside a SQLite file; whoever comes second finds the schema at
    head and does nothing. A store already at ``revision`` is left untouched (no DDL, no Alembic run; for a SQLite
    file, no lock file either: the commands that only read an existing store leave ``PERFWATCH_HOME`` as it was).

    Raises:
        StoreSchemaTooNew: the store's revision is unknown here (migrated by a newer perfwatch).
        StoreUnreachable: the store cannot be reached.
        StoreCorrupt: the SQLite file is not a database, or is damaged.
    """
    from alembic import command

    url = normalize_url(url)
    cfg, script = _script()
    engine = get_engine(url)
    u = make_url(url)
    is_pg = u.get_backend_name() == "postgresql"
    target = script.get_current_head() if revision == "head" else revision
    if u.get_backend_name() == "sqlite":  # at the revision already: no lock file, nothing written (a read's path)
        with engine.connect() as conn:
            if tuple(_check_known(url, conn, script)) == (target,):
                return
    with _sqlite_file_lock(u.database) if u.get_backend_name() == "sqlite" else nullcontext(), engine.connect() as conn:
        if is_pg:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
            conn.commit()
        try:
            current = _check_known(url, conn, script)
            conn.commit()  # end the read's transaction before Alembic begins its own
            if tuple(current) == (target,):
                return
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
        finally:
            if is_pg and not conn.closed and not conn.invalidated:
                conn.rollback()
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
                conn.commit()
