"""``perfwatch ingest LOGDIR --model M --version V [--case NAME]``: store a profile of your own training job.

The log dir is what the Keras TensorBoard callback (``profile_batch``) or
``tasks.runner.jobprofile.StepProfiler`` wrote (``train/`` subfolders included); the run is judged
against the earlier ingested runs of the same model and case and archived, marked ``source: external``
with xprof's step time (``tasks.services.ingest``). Exit code: 0 stored, 1 the verdict is a regression,
2 the profile could not be used (no profile, no step markers, a bad option; a failure after the
profile was found is recorded in the store as a failed run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add ``ingest`` to ``app``."""

    @app.command("ingest")
    def ingest_cmd(
        logdir: Annotated[Path, typer.Argument(help="TensorBoard log dir of the job's profile.")],
        model: Annotated[str, typer.Option("--model", help="Model (job) name to store it under.")],
        version: Annotated[str, typer.Option("--version", help="Model version (integer).")],
        case: Annotated[
            str | None,
            typer.Option("--case", help="Case name; runs of one model and case are compared (default: external)."),
        ] = None,
        batch_size: Annotated[
            int | None, typer.Option("--batch-size", min=1, help="Examples per step, for throughput (examples/s).")
        ] = None,
    ) -> None:
        """Store a profile of your own job (Keras callback or StepProfiler layout) as an external run."""
        from pydantic import ValidationError

        from tasks.cli.context import settings as store_settings
        from tasks.records import Verdict
        from tasks.services.ingest import NoStepTimes, ingest_profile
        from tasks.stages.parse import ProfileParseError

        settings = store_settings(create=True)  # migrated (made if new); one that cannot be used: exit 3
        try:
            rec, verdict = ingest_profile(
                logdir, model, version, case_name=case, batch_size=batch_size, settings=settings
            )
        except ValidationError as e:
            msg = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'input'}: {x['msg']}" for x in e.errors())
            typer.echo(f"error: {msg}", err=True)
            raise typer.Exit(2) from None
        except (ProfileParseError, NoStepTimes, ValueError) as e:
            notes = "".join(f"\n({n})" for n in getattr(e, "__notes__", []))
            typer.echo(f"error: {type(e).__name__}: {e}{notes}", err=True)
            raise typer.Exit(2) from None
        if verdict is None:
            typer.echo(
                f"run {rec.run_id}: this profile is already stored (verdict {rec.verdict}), archive {rec.archive_uri}"
            )
            return
        ratio = (
            f", step-time ratio {verdict.ratio:.3f} [{verdict.ci_low:.3f}, {verdict.ci_high:.3f}]"
            if verdict.ratio is not None and verdict.ci_low is not None
            else ""
        )
        typer.echo(
            f"run {rec.run_id} (source external): verdict {verdict.verdict} ({verdict.method}){ratio}; "
            f"step time is xprof's ({verdict.evidence.get('step_time_source')}); archive {rec.archive_uri}"
        )
        if verdict.verdict == Verdict.REGRESSION:
            raise typer.Exit(1)
