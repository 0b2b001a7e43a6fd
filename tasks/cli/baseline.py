"""``perfwatch baseline show MODEL`` and ``perfwatch baseline accept RUN``: who moved the baseline, and why.

Every accepted run of a (model, case, environment) is a ``baselines`` row; the active one has no
``superseded_at``, the older ones are the lookback history. Runs are accepted automatically by the
archive stage (verdict pass / no-baseline / improvement, when ``Case.auto_accept``; an environment change left
undecided, ``env-changed``, never;
``accepted_by`` is ``perfwatch``) or by a person with ``baseline accept`` — e.g. for an intended
slowdown, even a run whose verdict was ``regression`` — recorded with who and why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tasks.cli.render import Format, render

if TYPE_CHECKING:  # the store and pandas are imported where used: `perfwatch --help` must stay quick
    import pandas as pd

COLUMNS = [
    "baseline_id",
    "active",
    "case",
    "env_key",
    "run_id",
    "version",
    "run_verdict",
    "median_step_ms",
    "accepted_at",
    "accepted_by",
    "reason",
    "superseded_at",
]


class BaselineError(ValueError):
    """A baseline request that cannot be done (unknown model or run, a failed run); the message says why."""


def baseline_frame(db_url: str, model: str, case: str | None = None) -> pd.DataFrame:
    """Every accepted run of ``model`` (optionally one case), active first, then newest first.

    Columns: baseline_id, active (bool), case, env_key (comparability key, 12 hex), run_id, version,
    run_verdict (the run's own verdict), median_step_ms (ms, our timer), accepted_at (UTC datetime),
    accepted_by, reason, superseded_at (UTC datetime, or None for the active baseline).

    Raises:
        BaselineError: ``model`` is not in the store (lists the models there are).
    """
    import pandas as pd
    from sqlalchemy import select

    from tasks.store import Baseline, Model, ModelVersion, Run, session_scope

    with session_scope(db_url) as s:
        if s.scalar(select(Model.id).where(Model.name == model)) is None:
            names = sorted(s.scalars(select(Model.name)))
            raise BaselineError(f"model {model!r} is not in the store; models there: {names or 'none'}")
        q = (
            select(
                Baseline.id.label("baseline_id"),
                Baseline.superseded_at,
                Baseline.case_name.label("case"),
                Baseline.comparability_key.label("env_key"),
                Baseline.run_id,
                ModelVersion.version,
                Run.verdict.label("run_verdict"),
                Run.median_step_ms,
                Baseline.accepted_at,
                Baseline.accepted_by,
                Baseline.reason,
            )
            .join(Model, Model.id == Baseline.model_id)
            .join(Run, Run.id == Baseline.run_id)
            .outerjoin(ModelVersion, ModelVersion.id == Run.model_version_id)
            .where(Model.name == model)
        )
        if case:
            q = q.where(Baseline.case_name == case)
        rows = s.execute(q).mappings().all()
    df = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "active"] if not rows else None)
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    df["active"] = df["superseded_at"].isna()
    df["env_key"] = df["env_key"].str[:12]
    df = df.sort_values(["active", "accepted_at", "baseline_id"], ascending=False)
    for col in ("accepted_at", "superseded_at"):  # missing as None, never NaT (which no renderer can format)
        stamps = pd.to_datetime(df[col], utc=True)
        df[col] = pd.Series([t.to_pydatetime() if pd.notna(t) else None for t in stamps], index=df.index, dtype=object)
    return df[COLUMNS].reset_index(drop=True)


def accept_run(db_url: str, run_id: int, by: str, reason: str) -> dict[str, Any]:
    """Make run ``run_id`` the active baseline of its model, case and environment, recorded with who and why.

    Works whatever the run's verdict (a person may accept an intended slowdown); the previous active
    baseline is superseded and stays in the lookback history.

    Returns:
        ``{"baseline_id", "run_id", "model", "case", "env_key", "previous_run_id", "changed"}``;
        ``changed`` is False when the run already was the active baseline (nothing is written).

    Raises:
        BaselineError: empty ``by`` or ``reason``; no run ``run_id``; the run failed or has no
            environment (nothing measured to compare against).
    """
    from sqlalchemy import select

    from tasks.store import Baseline, Environment, Model, Run, session_scope
    from tasks.store.writes import accept_baseline

    if not by.strip() or not reason.strip():
        raise BaselineError("--by and --reason must be non-empty: who accepts the baseline, and why")
    with session_scope(db_url) as s:
        run = s.get(Run, run_id)
        if run is None:
            raise BaselineError(f"no run {run_id} in the store (see `perfwatch runs`)")
        if run.status != "success" or run.environment_id is None:
            raise BaselineError(
                f"run {run_id} has status {run.status!r}"
                + (f" (failed at {run.failed_stage})" if run.failed_stage else "")
                + ": only a successful run with measured samples can be a baseline"
            )
        key = s.get_one(Environment, run.environment_id).comparability_key
        model = s.get_one(Model, run.model_id).name
        active = s.scalar(
            select(Baseline).where(
                Baseline.model_id == run.model_id,
                Baseline.case_name == run.case_name,
                Baseline.comparability_key == key,
                Baseline.superseded_at.is_(None),
            )
        )
        info = {
            "run_id": run_id,
            "model": model,
            "case": run.case_name,
            "env_key": key[:12],
            "previous_run_id": active.run_id if active else None,
        }
        if active is not None and active.run_id == run_id:
            return {**info, "baseline_id": active.id, "changed": False}
        b = accept_baseline(s, run, key, accepted_by=by.strip(), reason=reason.strip())
        return {**info, "baseline_id": b.id, "changed": True}


def register(app: typer.Typer) -> None:
    """Add the ``baseline`` command group (``show``, ``accept``) to the perfwatch CLI."""
    baseline_app = typer.Typer(help="The accepted baselines: show them, or accept a run by hand.", no_args_is_help=True)
    app.add_typer(baseline_app, name="baseline")

    @baseline_app.command("show")
    def show(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        case: Annotated[str | None, typer.Option("--case", help="Only this case, e.g. train-bs16.")] = None,
        fmt: Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")] = Format.table,
    ) -> None:
        """The active baseline of each case and environment, then the history of accepted runs, with who
        accepted each and why."""
        from tasks.cli.context import settings as _settings
        from tasks.cli.history import titled_cases
        from tasks.store.queries import with_case_labels

        try:
            df = baseline_frame(_settings().database_url, model, case)
        except BaselineError as e:
            typer.echo(f"perfwatch baseline show: {e}", err=True)
            raise typer.Exit(1) from e
        if fmt is Format.table:
            act = df[df["active"]]
            if act.empty:
                typer.echo(f"{model}: no accepted baseline yet" + (f" for case {case}" if case else ""))
            for r in act.itertuples(index=False):
                typer.echo(
                    f"active baseline of {model} {r.case} (env {r.env_key}): run {r.run_id} v{r.version}, "
                    f"median {r.median_step_ms:.3f} ms, accepted by {r.accepted_by}: {r.reason}"
                )
        df = titled_cases(with_case_labels(df, _settings().database_url, model=model, after="case"), fmt, "case")
        render(df, fmt, title=f"{model}: accepted baselines (active first)")

    @baseline_app.command("accept")
    def accept(
        run_id: Annotated[int, typer.Argument(help="Run id (see `perfwatch runs`).")],
        by: Annotated[str, typer.Option("--by", help="Who accepts it (name or handle).")],
        reason: Annotated[str, typer.Option("--reason", help="Why, e.g. 'intended: larger input'.")],
    ) -> None:
        """Make RUN the active baseline of its model, case and environment, even if its verdict was a
        regression (an intended slowdown); recorded with who and why."""
        from tasks.cli.context import settings as _settings

        try:
            out = accept_run(_settings().database_url, run_id, by, reason)
        except BaselineError as e:
            typer.echo(f"perfwatch baseline accept: {e}", err=True)
            raise typer.Exit(1) from e
        if not out["changed"]:
            typer.echo(f"run {run_id} already is the active baseline of {out['model']} {out['case']}; nothing changed")
            return
        previous = out["previous_run_id"]
        typer.echo(
            f"run {run_id} is now the active baseline of {out['model']} {out['case']} (env {out['env_key']}), "
            f"accepted by {by.strip()}: {reason.strip()}; "
            + (f"previous baseline run: {previous}" if previous is not None else "the case had no baseline before")
        )
