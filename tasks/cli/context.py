"""What every command that reads or writes the store starts from: the settings, with the store migrated.

Its own module so that command groups (``baseline``, ``compare``, ...) and ``main`` import it from below
instead of from each other (``main`` is the app; the groups never import it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tasks.settings import Settings


def settings() -> Settings:
    """The settings from the environment, with the store migrated. When that creates a new SQLite store (no
    file was at its path), says so on stderr with the path and ``PERFWATCH_HOME``: a mistyped home otherwise
    looks like a store without runs."""
    from sqlalchemy.engine import make_url

    from tasks.store import migrate

    s = Settings.from_env()
    url = make_url(s.database_url)
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
