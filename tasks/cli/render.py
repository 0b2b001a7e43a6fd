"""Render result tables for people (rich table, markdown) and for programs (csv, json)."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
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
    df: pd.DataFrame,
    fmt: Format | str = Format.table,
    *,
    title: str | None = None,
    console: Console | None = None,
    drop: Sequence[str] = (),
    under: Sequence[str] = (),
) -> str | None:
    """Print ``df`` in ``fmt``; for csv/json/markdown also return the text.

    Floats are shown with 3 significant decimals in the table and markdown forms; csv and json
    carry full precision, None for missing values (never 0). json is strict JSON: NaN and infinities are
    written as null (``json.dumps(allow_nan=False)`` checks it).

    The table form fits the console's width (a terminal's, or ``COLUMNS``; 200 columns piped into a file or a
    log) and never splits a word (:func:`_table`): where even every column at its longest word does not fit,
    columns are left out (:func:`_fitting`: those with no value first, then ``under``, then ``drop`` in its
    order, the command's least telling columns, then from the right; never the first) and one line under the
    table names them, e.g. ``(left out to fit 100 columns: p10 step ms, p90 step ms; --format csv, json or
    markdown has every column)``. A column of ``under`` (long names: an op's scope path) is not lost: each row's
    value is printed under the table, after the row's first cell (``  3: gradient_tape/model/conv/Conv2D``).
    Only a single word wider than the console is printed wider than it.
    """

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
        width = console.width
        shown, left_out = _fitting(df, width, [*under, *drop])
        table, needed = _table(shown, title, width)
        if needed > width:  # one word wider than the console: wider lines, never a split word
            console = Console(width=needed, file=console.file, force_terminal=console.is_terminal)
        console.print(table)
        lines = [
            f"  {_cell(key)}: {' '.join(_cell(row[c]) for c in left_out if c in under)}"
            for key, (_, row) in zip(df.iloc[:, 0], df.iterrows(), strict=True)
            if any(c in under for c in left_out)
        ]
        dropped = [str(c).replace("_", " ") for c in left_out if c not in under]
        if dropped:
            lines.append(
                f"(left out to fit {width} columns: {', '.join(dropped)}; --format csv, json or markdown has every "
                "column)"
            )
        for line in lines:  # never wrapped by rich: a long name goes on whole
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        return None
    print(text, end="" if text.endswith("\n") else "\n")
    return text


#: a text column with a cell longer than this (characters) is a long one (:func:`long_text_columns`)
LONG_TEXT = 40


def long_text_columns(df: pd.DataFrame, longer_than: int = LONG_TEXT) -> list[Any]:
    """The text columns of ``df`` with a cell longer than ``longer_than`` characters as the table shows it (JSON
    params, error text), longest first: what a table of a generic query (``perfwatch query``) leaves out first
    on a narrow terminal (``render``'s ``drop``)."""
    longest = {c: max((len(_cell(v)) for v in df[c]), default=0) for c in df.columns if not _is_number_column(df[c])}
    return sorted((c for c, n in longest.items() if n > longer_than), key=lambda c: -longest[c])


def _fitting(df: pd.DataFrame, width: int, drop: Sequence[str]) -> tuple[pd.DataFrame, list[Any]]:
    """``df`` with as few columns left out as it takes for its table to fit ``width`` characters with every word
    whole, and the columns left out in the order they went: first columns with no value in any row (shown all
    ``—``; none of a table without rows), then ``drop`` (in its order; names not in ``df`` are skipped), then the
    rightmost; the first column (the row's key: a run id, a side) always stays."""
    order = [c for c in df.columns[1:] if len(df) and df[c].isna().all()]
    order += [c for c in drop if c in df.columns and c not in order and c != df.columns[0]]
    order += [c for c in reversed(df.columns[1:]) if c not in order]
    shown: pd.DataFrame = df
    left_out: list[Any] = []
    for col in order:
        if _table(shown, None, width)[1] <= width:
            break
        shown, left_out = shown.drop(columns=[col]), [*left_out, col]
    return shown, left_out


def _table(df: pd.DataFrame, title: str | None, width: int) -> tuple[Table, int]:
    """``df`` as a rich table that fits ``width`` characters where it can and never splits a word, and the
    table's width (more than ``width`` when even that does not fit: :func:`_fitting` then leaves out columns).

    Every column has a fixed width: as wide as its header (``median_step_ms`` is shown ``median step ms``) and
    its widest cell where there is room; else the widest columns are narrowed first, down to their longest word
    (a header or a cell then wraps at its spaces: a long case name or model name stays on one line, never
    ``demo_mobile…`` or ``train-bs|16``). A numeric column (right-aligned) never wraps."""
    from rich.text import Text

    cells = {col: [_cell(v) for v in df[col]] for col in df.columns}
    headers = [Text(str(col).replace("_", " "), no_wrap=False, overflow="fold") for col in df.columns]
    numeric = [_is_number_column(df[col]) for col in df.columns]
    natural, words = [], []  # per column: its width on one line, its longest word (its narrowest)
    for col, header in zip(df.columns, headers, strict=True):
        words.append(max([len(w) for c in [header.plain, *cells[col]] for w in c.split()], default=1))
        natural.append(max([len(header.plain), *(len(c) for c in cells[col])]))
    fixed = 3 * len(natural) + 1  # each column's padding (1 + 1) and border, and the left border
    widths = _share(natural, words, width - fixed)
    table = Table(title=title)
    for header, is_number, w in zip(headers, numeric, widths, strict=True):
        if is_number:
            table.add_column(header, justify="right", no_wrap=True, width=w)
        else:
            table.add_column(header, overflow="fold", width=w)
    for r in zip(*cells.values(), strict=True):
        table.add_row(*r)
    return table, fixed + sum(widths)


def _is_number_column(values: pd.Series) -> bool:
    """Whether a column holds figures (ints or floats; missing values aside), also where missing ones gave it
    the object dtype; booleans are text."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(values):
        return False
    if pd.api.types.is_numeric_dtype(values):
        return True
    kind = pd.api.types.infer_dtype(values, skipna=True)
    return kind in ("integer", "floating", "mixed-integer-float", "decimal") and values.notna().any()


def _share(natural: list[int], floor: list[int], available: int) -> list[int]:
    """Widths of the text columns within ``available`` characters: each column its ``natural`` width when they
    all fit, else the widest narrowed first to one level, never below its ``floor`` (the floors when even they
    do not fit)."""
    if sum(natural) <= available:
        return list(natural)

    def at(level: int) -> list[int]:
        return [min(max(level, f), n) for f, n in zip(floor, natural, strict=True)]

    lo, hi = 0, max(natural, default=0)
    while lo < hi:  # the highest level whose widths fit
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if sum(at(mid)) <= available else (lo, mid - 1)
    widths = at(lo)
    spare = available - sum(widths)
    for i in sorted(range(len(widths)), key=lambda k: -natural[k]):  # what is left: one more to the widest
        if spare > 0 and widths[i] < natural[i]:
            widths[i] += 1
            spare -= 1
    return widths


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.1f}"
    if hasattr(v, "strftime"):
        stamp: str = v.strftime("%Y-%m-%d %H:%M")
        return stamp
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
