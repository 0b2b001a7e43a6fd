"""``perfwatch publish MODEL [PATH] [--version N] [--airflow-url URL]``: the CI/CD hook "on model release".

Copies a ``.keras`` file or SavedModel directory into the model store as the next version, atomically
(``tasks.services.publish.publish_version``), then, when an Airflow API is given (``--airflow-url`` or
``PERFWATCH_AIRFLOW_API_URL``), starts the paired release gate of exactly that version in ``perfwatch_release``
(``tasks.services.airflow_api.send_release``): the model's Asset event (``perfwatch://models/<model>``, extra:
model, version, digest, source, format), or, when the DAG is paused (Airflow queues no Asset event for a paused
DAG), a triggered DAG run that waits for the unpause. Without PATH, ``--version N`` resends the release of a
version already in the store. Exit code: 0 published (and the gate started when asked), 1 the version exists, is
missing, or the input is not a model, 2 published but Airflow refused (the version stays in the store;
``perfwatch publish MODEL --version N`` resends).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tasks.cli.context import AirflowPasswordOpt, AirflowTokenOpt, AirflowUserOpt


def register(app: typer.Typer) -> None:
    """Add ``publish`` to ``app``."""

    @app.command("publish")
    def publish_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        path: Annotated[
            Path | None,
            typer.Argument(help="A .keras file or a SavedModel directory; omit it to resend the release of --version."),
        ] = None,
        version: Annotated[
            int | None,
            typer.Option(
                "--version",
                min=1,
                help="Version to write (refused if it exists); default: the next one. Without PATH: the stored "
                "version whose release gate to start again.",
            ),
        ] = None,
        airflow_url: Annotated[
            str | None,
            typer.Option(
                "--airflow-url",
                envvar="PERFWATCH_AIRFLOW_API_URL",
                help="Airflow API server to start the release gate in (e.g. http://localhost:8080); unset: none.",
            ),
        ] = None,
        token: AirflowTokenOpt = None,
        username: AirflowUserOpt = None,
        password: AirflowPasswordOpt = None,
        no_copy: Annotated[
            bool, typer.Option("--no-copy", help="Do not copy PATH: resend the release of --version (as without PATH).")
        ] = False,
    ) -> None:
        """Publish a model version into the store and start its release gate (its Asset event; a queued DAG run
        while the DAG perfwatch_release is paused). Without PATH, --version N starts the gate of a stored version."""
        from tasks.modelstore import ModelNotFoundError
        from tasks.services.airflow_api import RELEASE_DAG_ID, AirflowApi, AirflowApiError, send_release
        from tasks.services.publish import model_asset, publish_version
        from tasks.settings import Settings
        from tasks.stages.pull import pull_model_version

        store = Settings.from_env().model_store
        try:
            if no_copy or path is None:
                if version is None:
                    raise ValueError(
                        "give PATH (a .keras file or SavedModel directory to publish) or --version N (the stored "
                        "version whose release gate to start again)"
                    )
                import tempfile

                with tempfile.TemporaryDirectory() as t:  # digest and format of the stored version
                    pulled = pull_model_version(store, model, str(version), t)
                extra = {
                    "model": model,
                    "version": pulled.version,
                    "digest": pulled.digest,
                    "source": pulled.source_uri,
                    "format": pulled.format,
                }
            else:
                pub = publish_version(store, model, path, version)
                typer.echo(
                    f"published {model} version {pub.version} at {pub.path} ({pub.format}, "
                    f"{pub.size_bytes} bytes, sha256 {pub.digest[:12]})"
                )
                extra = pub.event_extra()
        except (OSError, ValueError, ModelNotFoundError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from e
        if not airflow_url:
            typer.echo("no Airflow API given (--airflow-url / PERFWATCH_AIRFLOW_API_URL): no Asset event sent")
            return
        uri, _ = model_asset(model)
        api = AirflowApi.from_env(airflow_url, token=token, username=username, password=password)
        gate = f"the release gate of {model} version {extra['version']}"
        try:
            sent = send_release(api, uri, extra)
        except AirflowApiError as e:
            typer.echo(
                f"error: version {extra['version']} is in the store, but {gate} was not started: {e}\n"
                f"(resend: perfwatch publish {model} --version {extra['version']})",
                err=True,
            )
            raise typer.Exit(2) from e
        if sent["via"] == "asset-event":
            event = sent["event"]
            typer.echo(
                f"Asset event {event.get('id')} for {uri} (asset id {event.get('asset_id')}): {gate} is scheduled "
                f"(DAG {RELEASE_DAG_ID})"
            )
        else:
            typer.echo(
                f"the DAG {RELEASE_DAG_ID} is paused, and Airflow queues no Asset event for a paused DAG: {gate} is "
                f"queued as DAG run {sent['dag_run'].get('dag_run_id')} instead and runs once the DAG is unpaused "
                f"(airflow dags unpause {RELEASE_DAG_ID})"
            )
