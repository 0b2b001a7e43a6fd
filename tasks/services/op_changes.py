"""Which op moved, over the nights: per-op change points of a model's nightly series (issue 38, item 5).

A step-time change point says *that* a case got slower on some night; the op tables the parse stage stores for
every run (xprof's framework_op_stats, ``op_stats`` rows) say *where*. For each case of a model:

1. :func:`op_series` reads the successful runs (``tasks.store.series.run_series``) and their op tables
   (``tasks.store.reads.runs_ops``) and puts each run's ops per step as the attribution does
   (``tasks.analysis.attribution.op_times``: the op's share of its profiled window's op self-time × a per-step
   figure of the run, µs). That figure is the run's median CPU time per step when every run of the series
   recorded one and none allocated GPU memory, else its median step time: on a busy 2-core host a watched op's
   figure spread 0.236 (median sd of its log over 12 runs of one version) split from CPU time and 0.368 from wall
   time, and the next version read x2.18 and x1.80 per op (``bench/op_changes.py``); where a GPU carries
   the steps the host's CPU time is not the ops' time. Op scopes that another version named differently (Keras
   names a model after its config) are renamed to the newest run's (``attribution.match_scopes``), so an op
   keeps one series across versions. Runs without an op table or without profiled steps (external runs, a failed
   parse) are left out and counted.
2. :func:`op_change_table` watches each case's largest ops (``changes.watched_ops``) and looks for change points
   in each op's series (``changes.op_change_points``: Otava's E-divisive means, the same persistence rule as the
   step-time series), one row per change point.

``perfwatch changes MODEL --ops`` prints the table; the model page shows it. How often an op series alarms with
no change, and how often a real version change is found per op: ``bench/op_changes.py``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tasks.analysis import changes

if TYPE_CHECKING:
    import pandas as pd

    from tasks.store.series import SeriesRun

#: the per-step figure a run's op shares split (``OpSeries.basis``)
Basis = Literal["median_cpu_ms", "median_step_ms"]

#: ops watched per case by default (``changes.DEFAULT_TOP_OPS``; the pages read it here)
DEFAULT_TOP_OPS = changes.DEFAULT_TOP_OPS

#: one op change point per row (``op_change_table``; a table shows the first that fit); before_us/after_us: the op's
#: time per step, µs
OP_CHANGE_COLUMNS = [
    "case_name",
    "op_name",
    "run_id",
    "version",
    "prev_version",
    "ratio",
    "ci_low",
    "ci_high",
    "status",
    "before_us",
    "after_us",
    "direction",
    "p_value",
    "confirms_on",
    "op_type",
    "n_before",
    "n_after",
    "missing_runs",
    "host_or_device",
    "started_at",
]


@dataclass(frozen=True)
class OpSeries:
    """One case's nightly series of op tables.

    Attributes:
        case_name: the case.
        runs: its successful runs with an op table, oldest first (``SeriesRun``).
        per_run: one mapping per run, op key (host_or_device, op_type, op_name) -> the op's time per step, µs.
        scaled: per run, whether its ops are scaled to its per-step figure (else raw window self-time per step:
            ``attribution.op_times``).
        basis: the per-step figure the op shares split: ``median_cpu_ms`` (each run's median process CPU time per
            step) or ``median_step_ms`` (its median step time, wall).
        left_out: successful runs of the case with no op table or no profiled steps (not in the series).
        renamed: run id -> the op scopes renamed to the newest run's names (empty when none was).
    """

    case_name: str
    runs: list[SeriesRun]
    per_run: list[dict[tuple[str, str, str], float]]
    scaled: list[bool]
    left_out: int = 0
    renamed: dict[int, dict[str, str]] = field(default_factory=dict)
    basis: Basis = "median_step_ms"


def op_series(
    db_url: str, model: str, case: str | None = None, since: dt.datetime | None = None
) -> dict[str, OpSeries]:
    """Each case's series of per-run op times (module docstring, step 1), by case name; two store reads.

    Raises:
        LookupError: unknown model (names the models of the store).
    """
    from tasks.analysis.attribution import match_scopes, op_times
    from tasks.store.reads import runs_ops
    from tasks.store.series import run_series

    runs = run_series(db_url, model, case, since, cpu=True)
    tables = runs_ops(db_url, [r.run_id for r in runs])
    out = {}
    for name in sorted({r.case_name for r in runs}):
        mine = [r for r in runs if r.case_name == name]
        held = [r for r in mine if (t := tables.get(r.run_id)) is not None and t.ops and t.profiled_steps]
        newest = [o["op_name"] for o in tables[held[-1].run_id].ops] if held else []
        basis: Basis = (
            "median_cpu_ms"
            if all(r.median_cpu_ms is not None and r.peak_device_bytes is None for r in held)
            else "median_step_ms"
        )
        per_run, scaled, renamed = [], [], {}
        for r in held:
            ops = tables[r.run_id]
            rename = match_scopes(newest, [o["op_name"] for o in ops.ops])
            if rename:
                renamed[r.run_id] = rename
            times, was_scaled = op_times(ops, rename=rename, step_ms=getattr(r, basis))
            per_run.append({(str(k[0]), str(k[1]), str(k[2])): float(v) for k, v in times.items()})
            scaled.append(was_scaled)
        out[name] = OpSeries(name, held, per_run, scaled, left_out=len(mine) - len(held), renamed=renamed, basis=basis)
    return out


def op_change_table(
    db_url: str,
    model: str,
    case: str | None = None,
    since: dt.datetime | None = None,
    *,
    top: int = changes.DEFAULT_TOP_OPS,
    min_runs_after: int = changes.DEFAULT_MIN_RUNS_AFTER,
    runs_before: dt.datetime | None = None,
) -> tuple[pd.DataFrame, dict[str, OpSeries]]:
    """Every op change point of each case's series (``OP_CHANGE_COLUMNS``, by case, then op (largest first), then
    run; before_us/after_us: the op's geometric-mean time per step in the segments, µs; ratio with its 95%
    interval (None with a segment of one run); status confirmed, tentative (with ``confirms_on``, an ISO date) or
    transient; missing_runs: runs of the series whose op table lacks the op), and each case's series.

    ``top``: ops watched per case (``changes.watched_ops``); ``runs_before``: only runs started at or before it
    (UTC; e.g. to look at one stretch of a stored series).

    Raises:
        LookupError: unknown model.
        ValueError: ``top`` or ``min_runs_after`` < 1.
    """
    import pandas as pd

    series = op_series(db_url, model, case, since)
    if runs_before is not None:
        series = {
            c: _until(s, runs_before) for c, s in series.items() if any(r.started_at <= runs_before for r in s.runs)
        }
    rows: list[dict[str, Any]] = []
    for name, s in series.items():
        ids = [r.run_id for r in s.runs]
        at = {r.run_id: i for i, r in enumerate(s.runs)}
        found = changes.op_change_points(s.per_run, ids, top=top, min_runs_after=min_runs_after)
        for f in found:
            cp, run = f.point, s.runs[at[f.point.run_id]]
            # the run of the op's series just before the point (its series leaves out runs that lack the op)
            prev = s.runs[max(i for i in range(at[cp.run_id]) if s.per_run[i].get(f.op, 0.0) > 0)]
            rows.append(
                {
                    "case_name": name,
                    "op_name": f.op[2],
                    "op_type": f.op[1],
                    "host_or_device": f.op[0],
                    "run_id": run.run_id,
                    "started_at": run.started_at,
                    "version": run.version,
                    "prev_version": prev.version,
                    **changes.point_row(cp, s.runs[-1].started_at.date(), unit="_us"),
                    "missing_runs": f.missing,
                }
            )
    return pd.DataFrame(rows, columns=OP_CHANGE_COLUMNS), series


def _until(s: OpSeries, t: dt.datetime) -> OpSeries:
    keep = [i for i, r in enumerate(s.runs) if r.started_at <= t]
    return OpSeries(
        s.case_name,
        [s.runs[i] for i in keep],
        [s.per_run[i] for i in keep],
        [s.scaled[i] for i in keep],
        left_out=s.left_out,
        renamed={r.run_id: s.renamed[r.run_id] for r in (s.runs[i] for i in keep) if r.run_id in s.renamed},
        basis=s.basis,
    )
