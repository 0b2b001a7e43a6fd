"""``perfwatch calibrate MODEL``: run A/A paired gates on purpose and print the offset and noise they give.

An A/A gate measures one model version against itself (the same bytes as A and B, two copies loaded in
one runner process), through the same seven stages as any run (``run_case`` with
``RunContext.paired_version``, trigger ``calibrate``), and is archived like any gate but never
accepted as a baseline. The store then holds what ``tasks.analysis.calibration`` learns from:

* the process-level **offset** between two copies (``paired_offset_for_case``: quiet A/A gates only,
  robust estimator, capped), which later gates add to their interval;
* the case's calibrated **gate noise** (``calibrated_noise``: median robust per-pair scale, 1.4826 x MAD,
  of quiet gates), which later gates' noise is judged against ("host busy: ...").

Gates measured on a busy host are archived (inconclusive, "host busy") but never calibrate anything.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tasks.cli import DEFAULT_MEASURED_STEPS
from tasks.cli.render import Format, render
from tasks.settings import Settings

if TYPE_CHECKING:  # the records are imported where used: `perfwatch --help` must stay quick
    from tasks.records import Case, RunState


def calibration_summary(db_url: str, case: Case, comparability_key: str) -> dict[str, Any]:
    """What the store's gates of ``case`` (its model and case name) in this environment calibrate now:
    ``offset`` (``calibration.Offset`` fields, from quiet A/A gates; the Case's own ``paired_offset_sd``
    ignored) and ``noise`` (``calibration.NoiseCalibration`` fields)."""
    from tasks.analysis import calibration
    from tasks.store import reads

    inputs = reads.gather_compare_inputs(
        db_url,
        case.model,
        case.name,
        comparability_key,
        lookback=case.lookback,
        calibration_window=calibration.CALIBRATION_WINDOW,
    )
    free = case.model_copy(update={"paired_offset_sd": None})
    return {
        "offset": calibration.paired_offset_for_case(free, inputs.aa_gates).model_dump(mode="json"),
        "noise": calibration.calibrated_noise(inputs.paired_gates).model_dump(mode="json"),
    }


def _row(state: RunState) -> dict[str, Any]:
    v, archived = state.verdict, state.archived
    assert v is not None and archived is not None  # run_case ran every stage
    p = v.evidence.get("paired") or {}
    noise = v.evidence.get("noise") or {}
    load = noise.get("host_load") or {}
    return {
        "run_id": archived.run_id,
        "verdict": v.verdict.value,
        "ratio": v.ratio,
        "ci_low": v.ci_low,
        "ci_high": v.ci_high,
        "pairs": (p.get("spent") or {}).get("pairs"),
        "gate_sd": noise.get("gate_sd"),
        "other_cpu_share": load.get("other_cpu_share"),
        "host_busy": noise.get("busy"),
        "wall_s": (p.get("spent") or {}).get("wall_s"),
    }


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to the perfwatch CLI."""

    @app.command("calibrate")
    def calibrate(
        model: Annotated[str, typer.Argument(help="Model name in the model store.")],
        version: Annotated[str, typer.Option(help="Integer version, or 'latest': gated against itself.")] = "latest",
        gates: Annotated[int, typer.Option(min=1, max=100, help="A/A gates to run.")] = 3,
        batch_size: Annotated[int, typer.Option(help="Examples per training step.")] = 16,
        pairs: Annotated[
            int, typer.Option(help="Most ABBA pairs per gate (the gate stops earlier once its interval decides).")
        ] = DEFAULT_MEASURED_STEPS,
        measured_steps: Annotated[
            int, typer.Option(help="Steps of the unpaired measurement each run also takes.")
        ] = 50,
        fmt: Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")] = Format.table,
    ) -> None:
        """Run GATES A/A paired gates of MODEL's VERSION against itself (archived, never a baseline), then
        print each gate (verdict, ratio and interval, pairs spent, the gate's pair noise scale, the CPU share
        other processes took, host busy) and the process offset and gate noise the store now calibrates.

        Exit code: 0 done; 2 a gate failed (recorded in the store) or the input is wrong.
        """
        import pandas as pd
        from pydantic import ValidationError

        from tasks.cli.context import settings as store_settings
        from tasks.cli.history import check_in_model_store, validation_message
        from tasks.cli.stage_lines import progress_shown
        from tasks.records import Case, RunContext
        from tasks.stages.pipeline import run_case
        from tasks.store import StoreError

        try:
            case = Case(
                model=model,
                version=version,
                batch_size=batch_size,
                measured_steps=measured_steps,
                paired_blocks=pairs,
                paired=True,
                auto_accept=False,
            )
        except ValidationError as e:
            raise typer.BadParameter(validation_message(e, {"model": "MODEL", "paired_blocks": "--pairs"})) from e
        check_in_model_store(Settings.from_env().model_store, model, case.version)
        settings = store_settings(create=True)  # migrated (made if new); one that cannot be used: exit 3
        rows, key = [], ""  # key: the environment's comparability key, from the gates (at least one)
        for i in range(gates):
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
            ctx = RunContext(
                dag_id="perfwatch_calibrate",
                dag_run_id=f"calibrate__{stamp}__{i}",
                trigger="calibrate",
                case=case,
                paired_version=case.version,
            )
            try:
                with progress_shown():
                    state = run_case(ctx, settings)
            except StoreError:
                raise  # one line, exit 3, as every command (tasks.cli.main)
            except Exception as e:  # noqa: BLE001 - every stage error is reported (and recorded by the stage)
                typer.echo(f"error: gate {i + 1} of {gates}: {type(e).__name__}: {e}", err=True)
                raise typer.Exit(2) from e
            key = state.env.comparability_key if state.env else key
            rows.append(_row(state))
            typer.echo(f"gate {i + 1}/{gates}: run {rows[-1]['run_id']} {rows[-1]['verdict']}", err=True)
        render(pd.DataFrame(rows), fmt, title=f"A/A gates of {model} v{case.version} ({case.name})")
        s = calibration_summary(settings.database_url, case, key)
        off, noise = s["offset"], s["noise"]
        typer.echo(
            f"process offset sd {off['sd']:.4f} (log scale; source {off['source']}, {off['n_gates']} quiet A/A "
            f"gates{', capped' if off['capped'] else ''}, {off['skipped_busy']} busy ones left out); "
            + (
                f"gate noise scale {noise['sd_pair']:.4f} per pair ({noise['n_gates']} quiet gates)"
                if noise["sd_pair"] is not None
                else f"gate noise not calibrated yet ({noise['n_gates']} quiet gates, need 3)"
            )
        )
