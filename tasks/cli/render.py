"""Render result tables for people (rich table, markdown) and for programs (csv, json)."""

from __future__ import annotations

import json
import math
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # pandas is imported where a table is rendered: `perfwatch --help` must not pay for it
    import pandas as pd


class Format(StrEnum):
    """Output formats every listing takes (``--format``)."""

    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):  # NaN, Infinity: not JSON
        return None
    if hasattr(v, "isoformat"):  # datetime, pandas.Timestamp
        return v.isoformat()
    return v


def render(
    df: pd.DataFrame, fmt: Format | str = Format.table, *, title: str | None = None, console: Console | None = None
) -> str | None:
    """Print ``df`` in ``fmt``; for csv/json/markdown also return the text.

    Floats are shown with 3 significant decimals in the table and markdown forms; csv and json
    carry full precision, None for missing values (never 0). json is strict JSON: NaN and infinities are
    written as null (``json.dumps(allow_nan=False)`` checks it).
    """
    import pandas as pd

    fmt = Format(fmt)
    # a terminal's own width (or COLUMNS); piped into a file or a log, 200 columns rather than rich's 80
    console = console or Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200)
    if fmt is Format.json:
        rows = [{k: _jsonable(v) for k, v in r.items()} for r in df.astype(object).to_dict(orient="records")]
        text = json.dumps(rows, indent=2, default=str, allow_nan=False)
    elif fmt is Format.csv:
        text = df.to_csv(index=False)
    elif fmt is Format.markdown:
        text = df.to_markdown(index=False, floatfmt=".3f")
    else:
        table = Table(title=title)
        for col in df.columns:
            table.add_column(str(col), justify="right" if pd.api.types.is_numeric_dtype(df[col]) else "left")
        for r in df.itertuples(index=False):
            table.add_row(*[_cell(v) for v in r])
        console.print(table)
        return None
    print(text, end="" if text.endswith("\n") else "\n")
    return text


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.1f}"
    if hasattr(v, "strftime"):
        return v.strftime("%Y-%m-%d %H:%M")
    return str(v)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (image files, no display), imported on first use so that
    commands without ``--plot`` never load matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (PNG, 110 dpi; parent directories made), close it, and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    pyplot().close(fig)
    return out
