"""What every command that reads or writes the store starts from: the settings, with the store migrated.

Its own module so that command groups (``baseline``, ``compare``, ...) and ``main`` import it from below
instead of from each other (``main`` is the app; the groups never import it).

Every command opens the store through :func:`settings` and lets a ``tasks.store.engine.StoreError`` (the
store unreachable, lost mid-use, migrated by a newer perfwatch, or its URL unreadable) propagate: the app's
group (``tasks.cli.main``) prints it as one line and exits :data:`STORE_ERROR_EXIT`, the same for every
command (``tests/unit/cli/test_store_errors.py`` runs each against an unreachable store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tasks.settings import Settings

STORE_ERROR_EXIT = 3
"""Exit code of any command when the store cannot be used (unreachable, migrated by a newer perfwatch, or its URL
unreadable); docs/cli.md's "3 the store cannot be used"."""


def settings(*, migrated: bool = True, create: bool = False) -> Settings:
    """The settings from the environment, with the store migrated to the newest schema (``migrated=False``:
    its URL checked only, for ``perfwatch db upgrade REVISION``, which migrates it itself).

    Only a command that writes runs (``run``, ``ingest``, ``calibrate``; ``db upgrade`` migrates it itself)
    passes ``create``: then a SQLite store that is not there yet is made, and said so on stderr with the path and
    ``PERFWATCH_HOME`` (a mistyped home otherwise looks like a store without runs). Every other command only
    reads an existing store: where there is none it stops (``StoreMissing``: "no store at SQLite file <path>",
    exit 3) and creates no file and no directory.

    Raises:
        tasks.store.engine.StoreError: the store cannot be used (unreachable, not a database, newer schema),
            ``PERFWATCH_DATABASE_URL`` is not a database URL, or (without ``create``) there is no store at it
            (``StoreMissing``).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from tasks.store import StoreError, StoreMissing, migrate, require_existing

    s = Settings.from_env()
    try:
        url = make_url(s.database_url)
    except ArgumentError:  # the value itself is not shown: it may hold a password
        raise StoreError(
            "the store URL (PERFWATCH_DATABASE_URL) is not a database URL; expected e.g. "
            "sqlite:////path/perfwatch.db or postgresql://user@host:5432/perfwatch"
        ) from None
    if not create:
        try:
            require_existing(s.database_url)
        except StoreMissing as e:  # a mistyped home must not look like a store without runs
            raise StoreMissing(f"{e}; PERFWATCH_HOME={s.home}") from None
    if not migrated:
        return s
    db = url.database
    fresh = url.get_backend_name() == "sqlite" and db is not None and db != "" and not Path(db).exists()
    migrate(s.database_url)
    if fresh:
        typer.echo(
            f"note: no perfwatch store was at {url.database}; a new empty one was made there "
            f"(PERFWATCH_HOME={s.home}). If you expected runs, check PERFWATCH_HOME or "
            "PERFWATCH_DATABASE_URL.",
            err=True,
        )
    return s


# Airflow's REST API credentials, the same options (and environment variables) for every command that calls it
AirflowTokenOpt = Annotated[
    str | None,
    typer.Option("--airflow-token", envvar="PERFWATCH_AIRFLOW_TOKEN", help="Bearer JWT for Airflow's API."),
]
AirflowUserOpt = Annotated[
    str | None,
    typer.Option(
        "--airflow-user",
        envvar="PERFWATCH_AIRFLOW_USERNAME",
        help="User exchanged at /auth/token for a JWT (with --airflow-password).",
    ),
]
AirflowPasswordOpt = Annotated[
    str | None,
    typer.Option("--airflow-password", envvar="PERFWATCH_AIRFLOW_PASSWORD", help="Password of --airflow-user."),
]
