"""``perfwatch env``: the environment fingerprint of a stored run, and what changed between two runs.

``perfwatch env show RUN`` prints run RUN's fingerprint flattened to ``field``/``value`` rows
(dotted paths such as ``gpu.devices.0.name``), each marked with whether it is a comparability
field (one that starts a new baseline history when it changes, see
``tasks.analysis.environment.COMPARABILITY_FIELDS``). ``perfwatch env diff RUN_A RUN_B`` lists the fields
that differ, old (RUN_A) and new (RUN_B) value and whether each affects comparability; the
``recorded`` section (hostname, timestamp, interpreter path) is shown only with ``--all``.
RUN is a run id as listed by ``perfwatch runs``. Fingerprints are read from the ``environments``
table of the store named by ``PERFWATCH_DATABASE_URL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tasks.cli.render import Format, render

if TYPE_CHECKING:  # the store, pandas and pydantic are imported where used: `perfwatch --help` must stay quick
    import pandas as pd

    from tasks.analysis.environment import Fingerprint

env_app = typer.Typer(help="Environment fingerprints of stored runs: show one, diff two.", no_args_is_help=True)

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")]
RunArg = Annotated[int, typer.Argument(metavar="RUN", help="Run id (see `perfwatch runs`).", show_default=False)]


def run_environment(db_url: str, run_id: int) -> Fingerprint:
    """The fingerprint stored for run ``run_id`` (from ``runs.environment_id`` → ``environments``).

    Raises:
        LookupError: no run ``run_id`` in the store, or the run has no fingerprint (it failed
            before its environment was archived); the message names the run id and the store.
    """
    from sqlalchemy import select

    from tasks.analysis.environment import Fingerprint
    from tasks.store import Environment, Run, redact, session_scope

    with session_scope(db_url) as s:
        row = s.execute(
            select(
                Run.id,
                Run.status,
                Run.failed_stage,
                Environment.fingerprint_id,
                Environment.comparability_key,
                Environment.data,
            )
            .outerjoin(Environment, Environment.id == Run.environment_id)
            .where(Run.id == run_id)
        ).first()
    if row is None:
        raise LookupError(f"run {run_id} not found in the store at {redact(db_url)} (see `perfwatch runs`)")
    if row.fingerprint_id is None:
        why = f"it failed at stage {row.failed_stage}" if row.status == "failed" else f"status {row.status}"
        raise LookupError(f"run {run_id} has no stored environment fingerprint ({why})")
    return Fingerprint(data=row.data, fingerprint_id=row.fingerprint_id, comparability_key=row.comparability_key)


def fingerprint_frame(env: Fingerprint, *, comparability_only: bool = False) -> pd.DataFrame:
    """A stored fingerprint as rows ``field`` (dotted path), ``value``, ``affects_comparability``.

    The first two rows are the hashes (``fingerprint_id``, ``comparability_key``); then every leaf
    of ``env.data`` in record order. Values keep their JSON types (str, int, bool).
    """
    import pandas as pd

    from tasks.analysis.environment import flatten, is_comparability

    rows = [
        {"field": "fingerprint_id", "value": env.fingerprint_id, "affects_comparability": False},
        {"field": "comparability_key", "value": env.comparability_key, "affects_comparability": True},
    ]
    rows += [
        {"field": path, "value": value, "affects_comparability": is_comparability(path)}
        for path, value in flatten(env.data).items()
    ]
    df = pd.DataFrame(rows, columns=["field", "value", "affects_comparability"])
    if comparability_only:
        df = df[df["affects_comparability"]].reset_index(drop=True)
    return df


def diff_frame(old: Fingerprint, new: Fingerprint, *, include_recorded: bool = False) -> pd.DataFrame:
    """Differing fingerprint fields of two stored environments, sorted by path.

    Columns ``field``, ``old`` (value in ``old``), ``new``, ``affects_comparability``; a field
    missing on one side reads ``"absent"`` there. The ``recorded`` section is left out unless
    ``include_recorded``.
    """
    import pandas as pd

    from tasks.analysis.environment import diff_fingerprints

    changes = diff_fingerprints(old, new, include_recorded=include_recorded)
    return pd.DataFrame([c.model_dump() for c in changes], columns=["field", "old", "new", "affects_comparability"])


def format_env_changes(changes: list[dict[str, Any]]) -> str:
    """``field old → new`` for each change of ``CompareRecord.evidence["env_changes"]``, "; "-joined."""
    return "; ".join(f"{c['field']} {c['old']!r} → {c['new']!r}" for c in changes)


def env_change_summary(verdict: dict[str, Any]) -> str | None:
    """One readable line for an ``env-changed`` verdict (a ``CompareRecord`` as a dict), else None.

    Names the comparability fields that changed against the baseline run, with old and new
    values, and the cross-environment step-time ratio (candidate/baseline median) when known; says
    so when NVML failed (``"unknown: NVMLError..."``: comparable with no other environment).
    """
    from tasks.records import Verdict

    if verdict.get("verdict") != Verdict.ENV_CHANGED:
        return None
    evidence = verdict.get("evidence") or {}
    base = ", ".join(str(i) for i in verdict.get("baseline_run_ids") or []) or "?"
    changes = evidence.get("env_changes") or []
    text = f"environment changed since baseline run {base}: " + (
        format_env_changes(changes) if changes else "no comparability field differs (comparability key changed)"
    )
    nvml = [c for c in changes if str(c.get("new", "")).startswith("unknown: NVMLError")]
    if nvml:
        text += (
            "; NVML failed on this host (driver and GPUs unknown): this run is comparable with no other "
            "until the driver is fixed"
        )
    if verdict.get("ratio") is not None:
        text += f"; step-time ratio across environments {verdict['ratio']:.3f}"
        if verdict.get("ci_low") is not None and verdict.get("ci_high") is not None:
            text += f" [{verdict['ci_low']:.3f}, {verdict['ci_high']:.3f}]"
        text += " (informational, not a gate)"
    return text + "; this run starts a new baseline history"


def _load(db_url: str, run_id: int) -> Fingerprint:
    try:
        return run_environment(db_url, run_id)
    except LookupError as e:
        raise typer.BadParameter(str(e), param_hint="RUN") from e


def _db_url() -> str:
    from tasks.cli.context import settings

    return settings().database_url


@env_app.command("show")
def show(
    run: RunArg,
    fmt: FormatOpt = Format.table,
    comparability_only: Annotated[
        bool, typer.Option("--comparability-only", help="Only the fields that decide comparability.")
    ] = False,
) -> None:
    """Print run RUN's environment fingerprint as field/value rows."""
    env = _load(_db_url(), run)
    render(
        fingerprint_frame(env, comparability_only=comparability_only),
        fmt,
        title=f"run {run}: environment {env.fingerprint_id[:12]} (comparability key {env.comparability_key})",
    )


@env_app.command("diff")
def diff(
    run_a: Annotated[int, typer.Argument(metavar="RUN_A", help="Old run id.", show_default=False)],
    run_b: Annotated[int, typer.Argument(metavar="RUN_B", help="New run id.", show_default=False)],
    fmt: FormatOpt = Format.table,
    all_fields: Annotated[
        bool, typer.Option("--all", help="Also the recorded-only section (hostname, timestamp, interpreter).")
    ] = False,
) -> None:
    """List the fingerprint fields that differ between RUN_A (old) and RUN_B (new)."""
    url = _db_url()
    old, new = _load(url, run_a), _load(url, run_b)
    df = diff_frame(old, new, include_recorded=all_fields)
    comparable = old.comparability_key == new.comparability_key
    n_comp = int(df["affects_comparability"].sum()) if not df.empty else 0
    summary = f"run {run_a} → run {run_b}: {len(df)} field(s) differ, {n_comp} affect comparability; " + (
        "comparable (same comparability key)"
        if comparable
        else f"NOT comparable (comparability key {old.comparability_key} → {new.comparability_key})"
    )
    if fmt is Format.table:
        if df.empty:
            typer.echo(summary)
            return
        render(df, fmt, title=summary)
    else:
        render(df, fmt)


def register(app: typer.Typer) -> None:
    """Add the ``env`` command group to the ``perfwatch`` app."""
    app.add_typer(env_app, name="env")
