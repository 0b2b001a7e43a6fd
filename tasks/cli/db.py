"""``perfwatch db upgrade``, ``perfwatch db check [--repair]`` and ``perfwatch db thin [--older-than DAYS]``: the
store's schema, its consistency with the archive and the runs' work dirs, and the retention of raw samples.

``db thin`` deletes the raw step samples of runs older than ``--older-than`` days
(default ``PERFWATCH_SAMPLES_RETENTION_DAYS``), keeping each run's quantiles (``step_quantiles``), its
verdict and everything else (``tasks.store.retention.thin_samples``); active baselines stay raw.

``db check`` reports what finished, failed or killed runs should not have left behind:

* ``partial``: a half-written archive copy (``<archive>/<model>/<run dir>.partial``) whose writer is gone
  (a killed process on this host, or older than the grace period when it cannot be checked);
* ``orphan-archive``: an archive run directory no stored run points to;
* ``missing-archive``: a successful run whose archive directory is gone (its samples and summaries stay:
  ``--repair`` never deletes history);
* ``scratch``: a run's work dir under ``PERFWATCH_WORK`` (or its prefix under ``PERFWATCH_SCRATCH``) that no run
  needs any more.

With ``--repair`` it removes the first, second and fourth kinds. Exit code: 0 when nothing is left
(after repair), 1 otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tasks.cli.render import Format, render
from tasks.settings import Settings

if TYPE_CHECKING:  # the stages are imported where used: `perfwatch --help` stays quick
    from tasks.stages.archive import Leftover


def find_leftovers(settings: Settings, *, grace_hours: float | None = None) -> list[Leftover]:
    """Every leftover (``tasks.stages.archive.Leftover``) of the store at ``settings.database_url``, its
    archive and its work dirs.

    ``grace_hours``: age after which something whose writer cannot be checked counts as left over
    (default: 1 h for archive copies, ``STALE_PARTIAL_S``; 24 h for work dirs, ``WORK_DIR_STALE_S``).

    Raises:
        tasks.store.engine.StoreError: the store cannot be reached or is newer than this perfwatch.
    """
    from tasks.stages.archive import STALE_PARTIAL_S, check_archive
    from tasks.stages.pipeline import WORK_DIR_STALE_S, check_work_dirs  # imported here: it pulls in every stage
    from tasks.store.reads import run_locations

    runs = run_locations(settings.database_url)
    archive_grace = STALE_PARTIAL_S if grace_hours is None else grace_hours * 3600
    work_grace = WORK_DIR_STALE_S if grace_hours is None else grace_hours * 3600
    return check_archive(settings.archive_root, runs, grace_s=archive_grace) + check_work_dirs(
        settings, runs, grace_s=work_grace
    )


def register(app: typer.Typer) -> None:
    """Add the ``db`` command group (``upgrade``, ``check``, ``thin``) to the perfwatch CLI."""
    db_app = typer.Typer(
        help="The store's schema, and its consistency with the archive and the work dirs.", no_args_is_help=True
    )
    app.add_typer(db_app, name="db")

    @db_app.command("upgrade")
    def db_upgrade(revision: Annotated[str, typer.Argument(help="Alembic revision")] = "head") -> None:
        """Migrate the store (PERFWATCH_DATABASE_URL) to the latest schema; idempotent, and safe to run
        from several processes at once (migrations are serialised by a lock)."""
        from tasks.cli.context import settings as store_settings
        from tasks.store import migrate, redact

        url = store_settings(migrated=False, create=True).database_url
        migrate(url, revision)
        typer.echo(f"store at {redact(url)} is at revision {revision}")

    @db_app.command("thin")
    def db_thin(
        older_than: Annotated[
            float | None,
            typer.Option(
                "--older-than",
                help="Thin runs started more than this many days ago (default PERFWATCH_SAMPLES_RETENTION_DAYS).",
            ),
        ] = None,
    ) -> None:
        """Delete old runs' raw step samples, keeping their stored quantiles, verdicts and every run; the
        history, sweep and op queries read the same for them. Active baselines keep their samples."""
        from tasks.cli.context import settings as store_settings
        from tasks.store import redact
        from tasks.store.retention import thin_samples

        settings = Settings.from_env()
        try:
            days = older_than if older_than is not None else settings.samples_retention_days()
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="PERFWATCH_SAMPLES_RETENTION_DAYS") from exc
        if days is None:
            raise typer.BadParameter(
                "no retention given: pass --older-than DAYS or set PERFWATCH_SAMPLES_RETENTION_DAYS",
                param_hint="--older-than",
            )
        if not days > 0:
            raise typer.BadParameter(f"{days!r}: expected a number of days > 0", param_hint="--older-than")
        settings = store_settings()  # the store migrated; one that cannot be used stops here (exit 3)
        report = thin_samples(settings.database_url, days)
        typer.echo(
            f"store {redact(settings.database_url)}: thinned {report.runs} runs started before "
            f"{report.cutoff:%Y-%m-%d %H:%M} UTC ({report.samples} step samples deleted, their quantiles kept"
            + (f", {report.summarised} summaries written first" if report.summarised else "")
            + f"); {report.kept_baselines} active baseline runs kept raw"
        )

    @db_app.command("check")
    def db_check(
        repair: Annotated[
            bool,
            typer.Option(
                "--repair",
                help="Remove the stale partial copies, orphan "
                "archive directories and left-over work dirs "
                "found (never a stored run).",
            ),
        ] = False,
        grace_hours: Annotated[
            float | None,
            typer.Option(
                "--grace-hours",
                min=0,
                help="Age (h) after which what may still be in use counts as left over "
                "(default 1 for archive copies, 24 for work dirs).",
            ),
        ] = None,
        fmt: Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")] = Format.table,
    ) -> None:
        """Report half-written archive copies, archive directories without a run, runs whose archive is
        missing, and left-over work dirs; --repair removes all but the runs. Exit 1 when something is left."""
        import pandas as pd

        from tasks.cli.context import settings as store_settings
        from tasks.stages.archive import remove_leftover
        from tasks.store import redact

        settings = store_settings()
        found = find_leftovers(settings, grace_hours=grace_hours)
        removed = [remove_leftover(f) if repair else False for f in found]
        df = pd.DataFrame(
            [
                {"kind": f.kind, "path": f.path, "run_id": f.run_id, "removed": r, "detail": f.detail}
                for f, r in zip(found, removed, strict=True)
            ],
            columns=["kind", "path", "run_id", "removed", "detail"],
        )
        left = len(found) - sum(removed)
        if fmt is Format.table:
            typer.echo(
                f"store {redact(settings.database_url)}, archive {settings.archive_root}, "
                f"scratch {settings.scratch or settings.work_root}"
            )
            if df.empty:
                typer.echo(
                    "nothing left over: every archive directory belongs to a stored run and every "
                    "successful run has its archive"
                )
                return
        render(df, fmt, title="perfwatch db check")
        if fmt is Format.table:
            typer.echo(
                f"{len(found)} found, {sum(removed)} removed, {left} left"
                + (
                    ""
                    if repair or not any(f.repairable for f in found)
                    else "; `perfwatch db check --repair` removes the repairable ones"
                )
            )
        if left:
            raise typer.Exit(1)
