"""The ``perfwatch`` command line (typer + rich).

Every listing takes ``--format table|csv|json|markdown``. Commands read the store named by
``PERFWATCH_DATABASE_URL`` (default: the SQLite file under ``PERFWATCH_HOME``).
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import pandas as pd
import typer
from typer.core import TyperGroup

from tasks.cli.render import Format, render
from tasks.records import DEFAULT_MEASURED_STEPS, Case, RunContext
from tasks.settings import Settings
from tasks.store import migrate
from tasks.store.engine import StoreError

STORE_ERROR_EXIT = 3
"""Exit code of any command when the store cannot be used (unreachable, or migrated by a newer perfwatch)."""


class _StoreErrorsInOneLine(TyperGroup):
    """Every command: a ``StoreError`` (store unreachable, schema newer than this perfwatch) is printed as
    one line on stderr, exit code ``STORE_ERROR_EXIT``, instead of a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except StoreError as e:
            typer.echo(f"perfwatch: {e}", err=True)
            raise typer.Exit(STORE_ERROR_EXIT) from e


app = typer.Typer(help="perfwatch: scheduled TensorFlow profiling and step-time regression gates.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=_StoreErrorsInOneLine)
demo_app = typer.Typer(help="The demo's model store.", no_args_is_help=True)
app.add_typer(demo_app, name="demo")

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")]


def _settings() -> Settings:
    s = Settings.from_env()
    migrate(s.database_url)
    return s


def runs_frame(db_url: str, model: str | None = None, last: int | None = None) -> pd.DataFrame:
    """Runs as a DataFrame, oldest first: run_id, started_at, model, version, case, status, trigger,
    median_step_ms (our timer), throughput_eps (examples/s), verdict (``failed@<stage>`` for a
    failed run), error (first line). The named query ``sql/queries/runs.sql`` via ``tasks.store.queries.runs``."""
    from tasks.store.queries import runs as runs_query

    return runs_query(model, last, db_url)


@app.command()
def runs(model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
         last: Annotated[int | None, typer.Option(help="Only the last N runs.")] = None,
         fmt: FormatOpt = Format.table) -> None:
    """List runs from the store: run id, model, version, median step time (ms), throughput, verdict.
    An unknown --model exits 1 naming the models there are."""
    from tasks.cli.history import unknown_model_message

    url = _settings().database_url
    if model is not None and (msg := unknown_model_message(url, model)):
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(1)
    df = runs_frame(url, model, last)
    render(df, fmt, title="perfwatch runs")


@app.command("run")
def run_cmd(model: Annotated[str, typer.Argument(help="Model name in the model store.")],
            version: Annotated[str, typer.Option(help="Integer version, or 'latest'.")] = "latest",
            batch_size: Annotated[int, typer.Option(help="Examples per training step.")] = 16,
            measured_steps: Annotated[int, typer.Option(help="Steps timed with the profiler off (a paired gate "
                                                                 "times as many of each version).")] = DEFAULT_MEASURED_STEPS,
            profiled_steps: Annotated[int, typer.Option(help="Steps run under the TF profiler.")] = 5,
            paired: Annotated[bool, typer.Option(help="Re-measure the baseline version in the same process "
                                                      "(A/B), as a release gate does.")] = False) -> None:
    """Run the seven stages for one model version in this process, without Airflow.

    Exit code: 0 done, 1 the verdict is a regression, 2 a stage failed (the failed run and its
    error are recorded in the store, as a DAG run's would be) or the input is wrong: an option out
    of range (named as given, e.g. ``--measured-steps``), a model or version that is not in the
    model store (nothing is recorded then; the message lists what there is).
    """
    import datetime as dt

    from pydantic import ValidationError

    from tasks.stages.pipeline import RegressionDetected, raise_on_regression, run_case

    try:
        case = Case(model=model, version=version, batch_size=batch_size, measured_steps=measured_steps,
                    profiled_steps=profiled_steps, paired=paired)
    except ValidationError as e:
        from tasks.cli.history import validation_message

        raise typer.BadParameter(validation_message(e, {"model": "MODEL"})) from e
    from tasks.cli.history import check_in_model_store

    check_in_model_store(Settings.from_env().model_store, model, case.version)  # typo: nothing is recorded
    ctx = RunContext(dag_id="perfwatch_cli", dag_run_id=dt.datetime.now(dt.UTC).strftime("cli__%Y%m%dT%H%M%S%f"),
                     trigger="cli", case=case)
    try:
        bundle = run_case(ctx, _settings())
    except StoreError:
        raise  # one line, exit STORE_ERROR_EXIT (_StoreErrorsInOneLine)
    except Exception as e:  # noqa: BLE001 - every stage error is reported, and said whether it was recorded
        from tasks.stages.pipeline import failure_note

        note = failure_note(e)
        if note is not None and note.run_id is not None:
            where = f"recorded in the store as failed run {note.run_id} of {model!r}; see `perfwatch failures`"
        else:
            where = ("the failure could NOT be recorded in the store"
                     + (f": {note.detail}" if note is not None and note.detail else ""))
        typer.echo(f"error: {type(e).__name__}: {e}\n({where})", err=True)
        raise typer.Exit(2) from e
    typer.echo(f"run {bundle['archived']['run_id']}: verdict {bundle['verdict']['verdict']}, "
               f"median {bundle['run']['median_step_ms']:.2f} ms, archive {bundle['archived']['archive_uri']}")
    from tasks.cli.env import env_change_summary

    if note := env_change_summary(bundle["verdict"]):
        typer.echo(note)
    try:
        raise_on_regression(bundle)
    except RegressionDetected as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from e


@demo_app.command("build-store")
def demo_build_store(force: Annotated[bool, typer.Option(help="Rebuild existing versions.")] = False) -> None:
    """Write the demo model store (two MobileNetV2 versions) under PERFWATCH_MODEL_STORE."""
    from tasks.runner.zoo import build_store

    for p in build_store(Settings.from_env().model_store, force=force):
        typer.echo(f"model file: {p}")


@demo_app.command("check")
def demo_check(model: Annotated[str, typer.Option()] = "demo_mobilenet") -> None:
    """Check the demo's outcome in the store: the newest run of v1 succeeded and the newest run of
    v2 was archived and flagged as a regression. Exit 1 otherwise."""
    df = runs_frame(_settings().database_url, model)
    problems = []
    for version in ("1", "2"):
        mine = df[df["version"] == version]
        if mine.empty:
            problems.append(f"no run of version {version}")
            continue
        last = mine.iloc[-1]
        if last["status"] != "success":
            problems.append(f"version {version}: run {last['run_id']} failed: {last['error']}")
        elif version == "2" and last["verdict"] != "regression":
            problems.append(f"version 2: run {last['run_id']} verdict {last['verdict']!r}, expected 'regression'")
    if problems:
        typer.echo("demo check FAILED: " + "; ".join(problems), err=True)
        raise typer.Exit(1)
    v1 = df[df["version"] == "1"].iloc[-1]
    typer.echo(f"demo check: version 1 archived as run {v1['run_id']} (verdict {v1['verdict']}), "
               "version 2 flagged as a regression")


# Command groups that live in their own modules; each defines ``register(app: typer.Typer)``.
_COMMAND_MODULES: tuple[str, ...] = ("env", "compare", "history", "baseline", "db", "changes", "ingest", "calibrate")
for _name in _COMMAND_MODULES:
    importlib.import_module(f"tasks.cli.{_name}").register(app)


def main() -> None:  # pragma: no cover - console script shim
    """Console-script entry point."""
    sys.exit(app())
