"""``perfwatch doctor``: a start-up check of the deployment (``tasks.services.doctor``): the store, the model
store, Airflow's API server, perfwatch's DAGs and pool, whether the api-server accepts this machine's task
tokens, and a trivial task run through Airflow, each with the cause when it fails (e.g. a JWT secret that
differs between Airflow's components). ``make airflow`` runs it once the components are up. Exit code 0 when
every check passed (skipped ones aside); 3 when the store cannot be used (as every command that reads it: the
report is still printed whole); 1 when another check failed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tasks.cli.context import STORE_ERROR_EXIT, AirflowPasswordOpt, AirflowTokenOpt, AirflowUserOpt


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""

    @app.command("doctor")
    def doctor_cmd(
        airflow_url: Annotated[
            str | None,
            typer.Option(
                "--airflow-url",
                envvar="PERFWATCH_AIRFLOW_API_URL",
                help="Airflow API server (default http://localhost:8080).",
            ),
        ] = None,
        token: AirflowTokenOpt = None,
        username: AirflowUserOpt = None,
        password: AirflowPasswordOpt = None,
        timeout_s: Annotated[
            float, typer.Option("--timeout", min=1.0, help="Seconds to wait for the trivial task's run.")
        ] = 120.0,
        dag_wait_s: Annotated[
            float,
            typer.Option("--dag-wait", min=0.0, help="Seconds to wait for the dag-processor to parse the DAGs."),
        ] = 0.0,
        no_config: Annotated[
            bool,
            typer.Option(
                "--no-airflow-config",
                help="Do not read this machine's Airflow configuration (skips the task-token check).",
            ),
        ] = False,
    ) -> None:
        """Check that this deployment can run perfwatch; name the cause of what cannot."""
        from tasks.services.airflow_api import AirflowApi, AirflowClient
        from tasks.services.doctor import read_airflow_config, run_doctor

        config = None
        if not no_config:
            try:
                config = read_airflow_config()
            except (OSError, RuntimeError, ValueError) as e:
                typer.echo(f"note: this machine's Airflow configuration could not be read: {e}", err=True)
        api = AirflowApi.from_env(airflow_url, token=token, username=username, password=password)
        with AirflowClient(api) as client:
            checks = run_doctor(client, config=config, task_timeout_s=timeout_s, dag_wait_s=dag_wait_s)
        for c in checks:
            typer.echo(c.line())
        failed = [c.name for c in checks if c.ok is False]
        typer.echo(f"perfwatch doctor: {'all checks passed' if not failed else 'FAILED: ' + ', '.join(failed)}")
        if "store" in failed:  # the store cannot be used: exit 3, as every command that reads it
            raise typer.Exit(STORE_ERROR_EXIT)
        if failed:
            raise typer.Exit(1)
