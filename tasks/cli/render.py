"""Render result tables for people (rich table, markdown) and for programs (csv, json)."""

from __future__ import annotations

import json
import math
import os
import re
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
        table, needed = _table(df, title, console.width)
        if needed > console.width:  # too narrow for every figure whole: wider lines, never a cut figure
            console = Console(width=needed, file=console.file, force_terminal=console.is_terminal)
        console.print(table)
        return None
    print(text, end="" if text.endswith("\n") else "\n")
    return text


#: the narrowest a text column is folded to (characters) before the table is made wider than the console
TEXT_MIN_WIDTH = 8
#: text columns whose words are never folded, however tight the table: a verdict (``no-baseline``, ``regression
#: (CPU time)``, ``failed@warm-up``) wraps at its spaces only, each line whole words (``regressi|on`` misreads)
WORD_COLUMNS = frozenset({"verdict", "status", "severity"})
_NUMBER = re.compile(r"^[\[(]?[-+]?\d[\d,]*(\.\d+)?%?[\]),;]*$")  # a figure inside a text cell: 1.873, [1.773,


def _table(df: pd.DataFrame, title: str | None, width: int) -> tuple[Table, int]:
    """``df`` as a rich table that fits ``width`` characters where it can and never cuts a figure, and the
    table's width (more than ``width`` when even that does not fit: wider lines rather than a cut figure).

    Every column has a fixed width: as wide as its header (``median_step_ms`` is shown ``median step ms``) and
    its widest cell where there is room; else the widest columns are narrowed first, down to their longest word
    (a header or a cell then wraps at its spaces); and where even that does not fit, a text column down to
    :data:`TEXT_MIN_WIDTH`, folding a longer word (a long case name goes on over two lines, never
    ``demo_mobile…``). A figure is never narrowed: a numeric column (right-aligned) is at least as wide as its
    widest figure and never wraps, a text column at least as wide as a figure in its cells
    (``12.30 [11.90, 13.00]``), a verdict column (:data:`WORD_COLUMNS`) as wide as its longest word."""
    from rich.text import Text

    cells = {col: [_cell(v) for v in df[col]] for col in df.columns}
    headers = [Text(str(col).replace("_", " "), no_wrap=False, overflow="fold") for col in df.columns]
    numeric = [_is_number_column(df[col]) for col in df.columns]
    natural, words, floor = [], [], []  # per column: its width on one line, its longest word, its narrowest
    for col, header, is_number in zip(df.columns, headers, numeric, strict=True):
        word = max([len(w) for c in [header.plain, *cells[col]] for w in c.split()], default=1)
        longest = max([len(header.plain), *(len(c) for c in cells[col])])
        figures = [len(t) for c in cells[col] for t in c.split() if _NUMBER.match(t)]
        natural.append(longest)
        words.append(word)
        whole = is_number or str(col) in WORD_COLUMNS  # its words never folded
        floor.append(word if whole else max([min(TEXT_MIN_WIDTH, word), *figures]))
    fixed = 3 * len(natural) + 1  # each column's padding (1 + 1) and border, and the left border
    available = width - fixed
    # first wrap at spaces only (every word whole: a figure's header over two lines), then fold long words
    least = words if sum(words) <= available else floor
    widths = _share(natural, least, available)
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
