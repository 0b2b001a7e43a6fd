"""Alembic environment for the perfwatch store.

Run through ``tasks.store.migrate(url)``, which passes the connection it holds the migration lock
on in ``config.attributes["connection"]`` (or an engine in ``config.attributes["engine"]``), or
with the alembic CLI: ``alembic -c sql/alembic.ini -x url=postgresql+psycopg://... upgrade head``
(the CLI takes no lock: run it alone).
"""

from alembic import context
from sqlalchemy import create_engine

from tasks.store import Base
from tasks.store.engine import normalize_url

config = context.config
target_metadata = Base.metadata


def _run(connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # SQLite's procedure for changing a table (https://www.sqlite.org/lang_altertable.html, "Making Other
        # Kinds Of Table Schema Changes"): foreign-key enforcement off while a batch migration copies a table
        # (with it on, dropping the old runs table cascade-deletes every run's rows); a no-op inside a transaction,
        # so it comes first, and the migrations that copy a table check it is off. Checked and back on after.
        connection.commit()
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=sqlite)
    try:
        with context.begin_transaction():
            context.run_migrations()
            if sqlite and (broken := connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()):
                raise RuntimeError(f"the migrated SQLite store breaks its foreign keys: {broken[:5]}")
        connection.commit()
    finally:
        if sqlite:
            connection.rollback()
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = config.attributes.get("engine")
    if engine is None:
        url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
        engine = create_engine(normalize_url(url))
    with engine.connect() as connection:
        _run(connection)


run_migrations_online()
