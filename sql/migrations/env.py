"""Alembic environment for the perfwatch store.

Run through ``tasks.store.migrate(url)`` (which passes the engine in ``config.attributes``), or
with the alembic CLI: ``alembic -c sql/alembic.ini -x url=postgresql+psycopg://... upgrade head``.
"""

from alembic import context
from sqlalchemy import create_engine

from tasks.store import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    engine = config.attributes.get("engine")
    if engine is None:
        url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
        engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations_online()
