"""``perfwatch hardware MODEL``: what would new hardware gain? The environments a model's cases were measured
on side by side (median step time, throughput, peak memory, J/example where power was measured) and each
one's step-time ratio against a reference environment with its interval, at one model version per case (the
newest measured on every environment, or ``--version``): never a figure pooled over versions. Rows from
``tasks.store.queries.hardware_inputs`` (``sql/queries/hardware.sql``), with the raw step samples of the compared
runs only (``tasks.analysis.gains.compared_runs``: the case's, at the compared version); the comparison is
``tasks.analysis.gains.side_by_side``. The table shows peak memory in MiB/GiB (``peak_memory``); csv and json keep
``peak_memory_bytes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tasks.cli.history import FormatOpt, _db_url, _fail, unknown_model_message
from tasks.cli.render import Format, render

if TYPE_CHECKING:
    import pandas as pd


def hardware_frame(
    model: str,
    case: str | None = None,
    reference: str | None = None,
    db_url: str | None = None,
    version: str | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """The side-by-side table of ``model`` (``tasks.analysis.gains.side_by_side``'s rows) and its notes (the
    version each case is compared at where it has several, environments left out for lacking a run of it):
    ``case`` is a case name with or without its device part (``train-bs16`` matches ``train-bs16-gpu`` and
    ``train-bs16-cpu``); ``version`` the model version compared (default: per case the newest measured on
    every environment); ``differs_beyond_hardware`` joined by ``; ``.

    Raises:
        ValueError: no successful run of the model (or case), a ``reference`` that matches no environment or
            several, or a ``version`` with no run. tasks.store.queries.QueryError: the store refused the query.
    """
    import pandas as pd

    from tasks.analysis.gains import base_case_name, compared_runs, side_by_side
    from tasks.store import queries

    def wanted(name: str) -> bool:
        return case is None or name == case or base_case_name(name) == case

    # samples of the compared runs only
    def pick(rows: list[dict[str, Any]], envs: dict[int, dict[str, Any]]) -> set[int]:
        return compared_runs([r for r in rows if wanted(r["case_name"])], envs, reference=reference, version=version)

    df, envs, steps = queries.hardware_inputs(model, None, db_url, pick=pick)
    df = df[[wanted(n) for n in df["case_name"]]]
    if df.empty:
        raise ValueError(
            f"no successful run of model {model!r}" + (f" case {case!r}" if case else "") + " in the store"
        )
    got = side_by_side(df.to_dict(orient="records"), envs, steps, reference=reference, version=version)
    out = pd.DataFrame(got.rows)
    out["differs_beyond_hardware"] = ["; ".join(d) if d else None for d in out["differs_beyond_hardware"]]
    return out, got.notes


def register(app: typer.Typer) -> None:
    """Add ``hardware`` to ``app``."""

    @app.command("hardware")
    def hardware_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        case: Annotated[
            str | None, typer.Option(help="Only this case (with or without its device part: train-bs16).")
        ] = None,
        reference: Annotated[
            str | None,
            typer.Option(
                help="The reference environment: a comparability-key prefix or text of its hardware (H100); "
                "default: the environment each case was first measured on."
            ),
        ] = None,
        version: Annotated[
            str | None,
            typer.Option(
                help="The model version to compare; default: per case the newest measured on every environment "
                "(never an average over versions)."
            ),
        ] = None,
        fmt: FormatOpt = Format.table,
    ) -> None:
        """The environments MODEL was measured on, side by side, at one model version per case (--version, else the
        newest measured on every environment; the others are named under the table): median step time (ms),
        throughput (examples/s), peak memory (MiB/GiB; bytes in csv and json), J/example where power was
        measured, and each one's step-time ratio to the reference with its 95% interval (percentile bootstrap of
        the ratio of medians of the pooled measured steps: step-to-step noise only). An environment that differs
        from the reference in more than the hardware (TF, CUDA, driver, packages) is flagged with what differs."""
        from tasks.store import queries

        try:
            url = _db_url()
            if msg := unknown_model_message(url, model):
                raise _fail(msg)
            df, notes = hardware_frame(model, case, reference, url, version)
        except (queries.QueryError, ValueError) as e:
            raise _fail(e) from None
        if fmt in (Format.table, Format.markdown):  # for people: MiB/GiB; csv and json keep the bytes
            from tasks.cli.figures import bytes_text

            df.insert(
                df.columns.get_loc("peak_memory_bytes"), "peak_memory", [bytes_text(v) for v in df["peak_memory_bytes"]]
            )
            df = df.drop(columns="peak_memory_bytes")
        title = f"{model}: hardware side by side"
        shown = people_table(df) if fmt == Format.table else df
        if fmt == Format.table:
            for col in ("case", "version"):  # one value: said in the title, its column room for the figures
                if shown[col].nunique() == 1:
                    title += f", {col} {shown[col].iloc[0]}"
                    shown = shown.drop(columns=[col])
        render(shown, fmt, title=title)
        for note in notes:  # on stderr: csv and json stay one table
            typer.echo(f"note: {note}", err=True)
        if fmt == Format.table:
            methods = sorted({str(m) for m in df["method"].dropna() if m != "reference"})
            typer.echo(
                "ratio: step time over the reference's, with its 95% interval"
                + (f" ({', '.join(methods)})" if methods else "")
                + "; env: the environment's comparability key (its first 8 characters: --reference takes it)"
            )
            for r in df.itertuples():
                if isinstance(r.differs_beyond_hardware, str):
                    typer.echo(
                        f"note: {r.case} on {r.hardware} (env {str(r.env_key)[:8]}) differs in more than the "
                        f"hardware: {r.differs_beyond_hardware}"
                    )


def people_table(df: pd.DataFrame) -> pd.DataFrame:
    """``hardware``'s table for a terminal (120 columns): case, version, env (the comparability key's first 8
    characters), hardware, runs, median step time, throughput (and ``throughput is``, what it measures, where
    the rows' definitions differ: ``runs.throughput_def``), peak memory, J/example (only where some run
    measured power), the ratio to the reference with its interval in one cell (``0.396 [0.392, 0.400]``;
    ``reference`` for the reference itself) and ``beyond hardware``: what differs from the reference
    environment besides the hardware (the fields' names; ``same`` where nothing does; old -> new under the
    table). ``df``: :func:`hardware_frame`'s rows, peak memory as text."""
    import pandas as pd

    def ratio(r: Any) -> str:
        if bool(r.reference):
            return "reference"
        if r.ratio is None or pd.isna(r.ratio):
            return "—"
        interval = (
            f" [{r.ratio_low:.3f}, {r.ratio_high:.3f}]"
            if r.ratio_low is not None and r.ratio_high is not None and pd.notna(r.ratio_low) and pd.notna(r.ratio_high)
            else ""
        )
        return f"{r.ratio:.3f}{interval}"

    def beyond(r: Any) -> str:
        if bool(r.reference):
            return "reference"
        if not isinstance(r.differs_beyond_hardware, str) or not r.differs_beyond_hardware:
            return "same"
        return ", ".join(part.split(":", 1)[0].strip() for part in r.differs_beyond_hardware.split("; "))

    out = pd.DataFrame(
        {
            "case": df["case"],
            "version": df["version"],
            "env": df["env_key"].astype(str).str[:8],
            "hardware": df["hardware"],
            "runs": df["runs"],
            "median_step_ms": df["median_step_ms"],
            "throughput_eps": df["throughput_eps"],
            "peak_memory": df["peak_memory"],
            "J/example": df["energy_per_example_j"],
            "ratio [95%]": [ratio(r) for r in df.itertuples()],
            "beyond hardware": [beyond(r) for r in df.itertuples()],
        }
    )
    if "throughput_def" in df.columns and df["throughput_def"].dropna().nunique() > 1:  # two metrics, one name
        from tasks.records import throughput_definition_text

        out.insert(
            out.columns.get_loc("throughput_eps") + 1,
            "throughput is",
            [throughput_definition_text(d) for d in df["throughput_def"]],
        )
    if out["J/example"].isna().all():
        out = out.drop(columns=["J/example"])
    return out
