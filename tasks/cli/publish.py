"""``perfwatch publish MODEL PATH [--version N] [--airflow-url URL]``: the CI/CD hook "on model release".

Copies a ``.keras`` file or SavedModel directory into the model store as the next version, atomically
(``tasks.services.publish.publish_version``), then, when an Airflow API is given (``--airflow-url`` or
``PERFWATCH_AIRFLOW_API_URL``), emits the model's Asset event (``perfwatch://models/<model>``, extra:
model, version, digest, source, format) so that ``perfwatch_profile`` runs the paired release gate for
exactly that version. Exit code: 0 published (and the event emitted when asked), 1 the version exists or
the input is not a model, 2 published but Airflow refused the event (the version stays in the store;
``--no-copy`` resends only the event).
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
        path: Annotated[Path, typer.Argument(help="A .keras file or a SavedModel directory.")],
        version: Annotated[
            int | None,
            typer.Option("--version", min=1, help="Version to write (refused if it exists); default: the next one."),
        ] = None,
        airflow_url: Annotated[
            str | None,
            typer.Option(
                "--airflow-url",
                envvar="PERFWATCH_AIRFLOW_API_URL",
                help="Airflow API server to send the Asset event to (e.g. http://localhost:8080); unset: none.",
            ),
        ] = None,
        token: AirflowTokenOpt = None,
        username: AirflowUserOpt = None,
        password: AirflowPasswordOpt = None,
        no_copy: Annotated[
            bool, typer.Option("--no-copy", help="Do not copy: send the event for the existing --version (a resend).")
        ] = False,
    ) -> None:
        """Publish a model version into the store and emit its Asset event (the release gate's trigger)."""
        from tasks.modelstore import ModelNotFoundError
        from tasks.services.airflow_api import AirflowApi, AirflowApiError, emit_asset_event, paused_message
        from tasks.services.publish import model_asset, publish_version
        from tasks.settings import Settings
        from tasks.stages.pull import pull_model_version

        store = Settings.from_env().model_store
        try:
            if no_copy:
                if version is None:
                    raise typer.BadParameter("--no-copy needs --version (the published version to announce)")
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
        try:
            event = emit_asset_event(api, uri, extra)
        except AirflowApiError as e:
            typer.echo(
                f"error: version {extra['version']} is in the store, but the Asset event was not sent: {e}\n"
                f"(resend: perfwatch publish {model} {path} --version {extra['version']} --no-copy)",
                err=True,
            )
            raise typer.Exit(2) from e
        head = f"Asset event {event.get('id')} for {uri} (asset id {event.get('asset_id')}): "
        gate = f"the release gate of {model} version {extra['version']}"
        if event.get("dag_paused"):
            typer.echo(f"{head}{gate} is queued, but {paused_message()}")
        else:
            typer.echo(f"{head}{gate} is scheduled")
