"""Trend commands of the ``perfwatch`` CLI: ``changes`` (change points of the nightly series) and
``creep`` (the creep guard of each case's baseline).

``perfwatch changes MODEL [--case NAME] [--since DATE]`` lists every change point of each case's series
of successful runs (``tasks.analysis.changes.detect_change_points``: Apache Otava's E-divisive means
with a t-test): the first run after the change, its version and environment (and whether either
changed there), the magnitude as the ratio of the segment after to the segment before with its 95%
interval (null in JSON, "—" in the table, when a segment has one run), the p-value (scientific notation in
the table), and the point's status: ``confirmed`` once ``--min-after`` runs (default
``PERFWATCH_CHANGE_MIN_RUNS_AFTER``, else 3) follow it, ``tentative`` with fewer at the end of the series
(``confirms_on``: the night whose run would confirm it on a nightly schedule), ``transient`` with fewer before
the next change point. ``--format json`` is strict JSON (no NaN or Infinity: null). The table ends with the sign
test of each case's verdicts (:func:`verdict_sign_tests`): one-sided when its runs' regressions outnumber their
improvements (or the reverse) beyond what a symmetric measurement could produce.

``--ops`` looks at each case's largest ops instead (``tasks.services.op_changes``): the change points of each
op's time per step (µs, its share of the profiled window scaled to the run's measured median), which op moved,
at which run and version, by how much (``--top``: how many ops per case are watched).

``--confirm`` then runs, in this process, the paired gate that confirms each tentative slowdown at a series' end, as
the nightly DAG does (``tasks.services.trend.confirm_now``), and exits 1 when one confirms it.

``perfwatch creep MODEL`` compares each case's active baseline with the baseline of ``--window-days`` ago
(``tasks.services.trend.creep_check``). Exit code 1 for an unknown model or a bad option value, 0 otherwise
(also when nothing is found).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from tasks.analysis import changes
from tasks.cli.render import Format, render

if TYPE_CHECKING:  # the store and pandas are imported where used: `perfwatch --help` must stay quick
    import pandas as pd

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")]
CaseOpt = Annotated[str | None, typer.Option("--case", help="Only this case, e.g. train-bs16.")]

CHANGE_COLUMNS = [
    "case_name",
    "metric",
    "run_id",
    "started_at",
    "version",
    "prev_version",
    "env_key",
    "env_changed",
    "source",
    "before",
    "after",
    "ratio",
    "ci_low",
    "ci_high",
    "p_value",
    "n_before",
    "n_after",
    "direction",
    "status",
    "confirms_on",
]


def _url() -> str:
    from tasks.cli.context import settings

    return settings().database_url


def _confirm(model: str, names: list[str]) -> None:
    """``changes --confirm``: run the confirming gates (``tasks.services.trend.confirm_now``), print a line for
    each, exit 1 when one confirms its slowdown."""
    from tasks.cli.context import settings
    from tasks.services.trend import confirm_now, planned_cases

    try:
        cases, unknown = planned_cases(settings(), model, names)
    except ValueError as e:  # a config that does not parse: the message names the entry and field
        typer.echo(f"error: --confirm reads the cases' settings from the config: {e}", err=True)
        raise typer.Exit(1) from None
    for n in unknown:
        typer.echo(
            f"{n}: not a case of {model} in the config ({settings().config_path}): its settings are not known, "
            "so no gate can confirm its slowdowns here"
        )
    results = confirm_now(settings(), model, cases)
    for r in results:
        typer.echo(f"{r.confirmation.case_name}: {r.line}")
    if not results:
        typer.echo("no tentative slowdown at a series' end: nothing to confirm")
    if any(r.alert for r in results):
        raise typer.Exit(1)


def _parse_since(since: str | None) -> dt.datetime | None:
    if since is None:
        return None
    try:
        t = dt.datetime.fromisoformat(since)
    except ValueError:
        raise typer.BadParameter(
            f"{since!r}: expected an ISO date or datetime (UTC), e.g. 2026-01-31", param_hint="--since"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def change_table(
    db_url: str,
    model: str,
    case: str | None = None,
    since: dt.datetime | None = None,
    metrics: tuple[str, ...] = ("median_step_ms",),
    min_runs_after: int = changes.DEFAULT_MIN_RUNS_AFTER,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """Every change point of each case's series (``CHANGE_COLUMNS``; before/after in the metric's unit:
    ms, or examples/s for throughput; ci_low/ci_high None without an interval; status and confirms_on, an ISO
    date for a tentative point: ``changes.confirming_night``) and the number of runs per case.

    Raises:
        LookupError: unknown model (names the models of the store).
    """
    import pandas as pd

    from tasks.store.series import run_series

    runs = run_series(db_url, model, case, since, cpu="median_cpu_ms" in metrics)
    rows, sizes = [], {}
    for case_name in sorted({r.case_name for r in runs}):
        s = [r for r in runs if r.case_name == case_name]
        sizes[case_name] = len(s)
        for metric in metrics:
            every = [(r, getattr(r, metric)) for r in s if getattr(r, metric) is not None]
            # throughput: one search per stretch of one definition (runs.throughput_def), never across two
            defs = [r.throughput_def if metric == "throughput_eps" else None for r, _ in every]
            for seg in changes.definition_segments(defs):
                pts = every[seg.start : seg.stop]
                ids = [r.run_id for r, _ in pts]
                found = changes.detect_change_points(
                    [v for _, v in pts], ids, metric=metric, min_runs_after=min_runs_after
                )
                rows += _change_rows(case_name, metric, pts, found)
    df = pd.DataFrame(rows, columns=CHANGE_COLUMNS)
    return df, sizes


def _change_rows(case_name: str, metric: str, pts: list[tuple[Any, float]], found: list[Any]) -> list[dict[str, Any]]:
    """One ``CHANGE_COLUMNS`` row per change point ``found`` of the series ``pts`` ((run, value), oldest first)."""
    rows = []
    for cp in found:
        at, prev = pts[cp.index][0], pts[cp.index - 1][0]
        rows.append(
            {
                "case_name": case_name,
                "metric": metric,
                "run_id": at.run_id,
                "started_at": at.started_at,
                "version": at.version,
                "prev_version": prev.version,
                "env_key": (at.comparability_key or "")[:12],
                "env_changed": int(at.comparability_key != prev.comparability_key),
                "source": at.source,
                **changes.point_row(cp, pts[-1][0].started_at.date()),
            }
        )
    return rows


def short_op(name: str, width: int = 52) -> str:
    """A TF op path in at most about ``width`` characters for a table: ``gradient_tape/`` as ``grad``, the model's
    scope left out, and when still too long the layer and the op with ``…`` between:
    ``gradient_tape/mobilenetv2_0.75_96_1/block_1_depthwise_1/depthwise/DepthwiseConv2dNativeBackpropFilter`` ->
    ``grad block_1_depthwise_1/…/DepthwiseConv2dNativeBackpropFilter``; a name within ``width`` as it is."""
    if len(name) <= width:
        return name
    parts = name.split("/")
    grad = parts[0] == "gradient_tape" and len(parts) > 2
    rest = parts[1:] if grad else parts
    if len(rest) > 2:
        rest = rest[1:]  # the model's scope
    short = "/".join(rest)
    if len(short) > width and len(rest) > 2:
        short = f"{rest[0]}/…/{rest[-1]}"
    return ("grad " if grad else "") + short


T = TypeVar("T")


def _read_or_exit(read: Callable[[], T]) -> T:
    """``read()``; an unknown model (``LookupError``, naming the store's models) is said and exits 1."""
    try:
        return read()
    except LookupError as e:
        typer.echo(f"error: {e.args[0]}", err=True)
        raise typer.Exit(1) from None


def _render_points(df: pd.DataFrame, fmt: Format, model: str, title: str) -> None:
    """Render a change-point listing (p-values in scientific notation in a table or markdown: 1e-5 is not 0.000;
    each case with its label); an empty one prints nothing as a table."""
    from tasks.cli.history import titled_cases
    from tasks.store.queries import with_case_labels

    if df.empty and fmt is Format.table:
        return
    shown = df.assign(p_value=[f"{p:.2e}" for p in df["p_value"]]) if fmt in (Format.table, Format.markdown) else df
    render(titled_cases(with_case_labels(shown, _url(), model=model), fmt), fmt, title=title)


def _no_runs(model: str, case: str | None, start: dt.datetime | None) -> NoReturn:
    """Say that ``model`` (``case``, from ``start``) has no successful run, and exit 1."""
    typer.echo(
        f"error: no successful runs of {model!r}"
        + (f" case {case!r}" if case else "")
        + (f" since {start:%Y-%m-%d}" if start else ""),
        err=True,
    )
    raise typer.Exit(1)


def _op_changes(model: str, case: str | None, start: dt.datetime | None, top: int, after: int, fmt: Format) -> None:
    """Print ``perfwatch changes --ops``: the op change table and, as a table, a line per case."""
    from tasks.services.op_changes import op_change_table

    df, series = _read_or_exit(lambda: op_change_table(_url(), model, case, start, top=top, min_runs_after=after))
    if not series:
        _no_runs(model, case, start)
    if fmt is Format.table:  # the ratio and status must fit beside a TF op path; csv/json/markdown keep it whole
        df = df.assign(op_name=[short_op(n) for n in df["op_name"]])
    _render_points(df, fmt, model, f"{model}: op change points (time per step, µs)")
    if fmt is Format.table:
        for c, s in series.items():
            n = len(s.runs)
            note = f" (change points need at least {changes.MIN_POINTS})" if n < changes.MIN_POINTS else ""
            left = f", {s.left_out} without an op table left out" if s.left_out else ""
            raw = len(s.scaled) - sum(s.scaled)
            unscaled = f" ({raw} run(s) without it: raw window self-times)" if raw else ""
            mine = df[df["case_name"] == c]
            split = "median CPU time per step" if s.basis == "median_cpu_ms" else "median step time"
            typer.echo(
                f"{c}: {n} runs with op tables{note}{left}, the {len(changes.watched_ops(s.per_run, top))} largest "
                f"ops watched, {len(mine)} op change point(s) in {mine['op_name'].nunique()} op(s); the op shares "
                f"split each run's {split}{unscaled}"
            )


def verdict_sign_tests(
    db_url: str, model: str, case: str | None = None, since: dt.datetime | None = None
) -> dict[str, changes.SignTest]:
    """The sign test of the verdicts of each case's successful runs (``changes.sign_test``: are they one-sided,
    k regressions and 0 improvements?), by case name, and of the model's runs of every case together
    (``all cases``) when there are several.

    Raises:
        LookupError: unknown model.
    """
    from tasks.store.series import run_series

    runs = run_series(db_url, model, case, since)
    cases = sorted({r.case_name for r in runs})
    out = {c: changes.sign_test([r.verdict for r in runs if r.case_name == c]) for c in cases}
    if len(cases) > 1:
        out["all cases"] = changes.sign_test([r.verdict for r in runs])
    return out


def register(app: typer.Typer) -> None:
    """Add ``changes`` and ``creep`` to ``app``."""

    @app.command("changes")
    def changes_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        case: CaseOpt = None,
        since: Annotated[
            str | None, typer.Option("--since", help="Only runs from this date (UTC), ISO date or datetime.")
        ] = None,
        metric: Annotated[
            list[str] | None,
            typer.Option(
                "--metric",
                help="Series to look at (repeatable): median_step_ms (default), p90_step_ms, median_cpu_ms "
                "(per-step process CPU time; runs without it left out), throughput_eps.",
            ),
        ] = None,
        min_after: Annotated[
            int | None,
            typer.Option(
                "--min-after",
                min=1,
                help="Runs after a change point that confirm it (default PERFWATCH_CHANGE_MIN_RUNS_AFTER, else "
                f"{changes.DEFAULT_MIN_RUNS_AFTER}); fewer at the end of the series: tentative.",
            ),
        ] = None,
        fmt: FormatOpt = Format.table,
        ops: Annotated[
            bool,
            typer.Option(
                "--ops",
                help="Which op moved: change points of the time per step (µs) of each case's largest ops "
                "(--top), from the op tables xprof gave each run, instead of the step-time series.",
            ),
        ] = False,
        top: Annotated[
            int, typer.Option("--top", min=1, help="--ops: how many of each case's ops are watched (the largest).")
        ] = changes.DEFAULT_TOP_OPS,
        confirm: Annotated[
            bool,
            typer.Option(
                "--confirm",
                help="Then run, in this process, the paired gate that confirms each tentative slowdown at a "
                "case's series end, as the nightly DAG does (the case's settings from the config, "
                "PERFWATCH_CONFIG), and say whether it alerts; exit 1 when a gate confirms one.",
            ),
        ] = False,
    ) -> None:
        """Change points of MODEL's nightly series: run, version and environment at each, magnitude (ratio
        after/before with its 95% interval), p-value (Apache Otava, E-divisive means) and status (confirmed,
        or tentative with the night that would confirm it). With --ops, the same for each case's largest ops:
        which op moved, when, by how much. With --confirm, the paired gate of each tentative
        slowdown runs now (the version before it beside the newest, or the old environment beside the new)."""
        from tasks.services.trend import min_runs_after

        metrics = tuple(metric or ["median_step_ms"])
        for m in metrics:
            if m not in changes.METRICS:
                raise typer.BadParameter(f"{m!r}: expected one of {', '.join(changes.METRICS)}", param_hint="--metric")
        start = _parse_since(since)
        try:
            after = min_after if min_after is not None else min_runs_after()
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--min-after") from None
        if ops:
            if metric or confirm:
                raise typer.BadParameter(
                    "--ops looks at the op series: expected it without --metric and --confirm", param_hint="--ops"
                )
            _op_changes(model, case, start, top, after, fmt)
            return
        df, sizes = _read_or_exit(lambda: change_table(_url(), model, case, start, metrics, after))
        if not sizes:
            _no_runs(model, case, start)
        _render_points(df, fmt, model, f"{model}: change points")
        if fmt is Format.table:
            for c, n in sizes.items():
                note = f" (change points need at least {changes.MIN_POINTS})" if n < changes.MIN_POINTS else ""
                mine = df[df["case_name"] == c]
                pending = mine[mine["status"] == "tentative"]
                tentative = "".join(
                    f"; run {r.run_id} tentative ({r.n_after} run(s) after it, {after} confirm): confirmed by the "
                    f"night of {r.confirms_on} if it holds (no alert until then)"
                    for r in pending.itertuples()
                )
                typer.echo(f"{c}: {n} successful runs{note}, {len(mine)} change point(s){tentative}")
            for who, test in verdict_sign_tests(_url(), model, case, start).items():
                typer.echo(f"{who}: verdicts {test.reason}")
        if confirm:
            _confirm(model, list(sizes))

    @app.command("creep")
    def creep_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        case: CaseOpt = None,
        window_days: Annotated[
            float, typer.Option(min=0.01, help="How far back the old baseline is (days).")
        ] = changes.CREEP_WINDOW_DAYS,
        runs: Annotated[
            int, typer.Option(min=2, help="Accepted runs that make a baseline level.")
        ] = changes.CREEP_RUNS,
        tolerance: Annotated[
            float, typer.Option(min=0.001, max=0.99, help="Level change that counts (0.05 = 5%).")
        ] = changes.CREEP_TOLERANCE,
        fmt: FormatOpt = Format.table,
    ) -> None:
        """Creep guard: each case's active baseline level (median step time of its newest accepted runs)
        against the baseline of WINDOW-DAYS ago, with a one-sided 99.5% bound."""
        import pandas as pd

        from tasks.cli.history import titled_cases
        from tasks.services.trend import creep_check
        from tasks.store.queries import with_case_labels
        from tasks.store.series import run_series

        url = _url()
        try:
            cases = sorted({r.case_name for r in run_series(url, model)})
        except LookupError as e:
            typer.echo(f"error: {e.args[0]}", err=True)
            raise typer.Exit(1) from None
        if case is not None:
            if case not in cases:
                typer.echo(
                    f"error: no successful runs of {model!r} case {case!r}; its cases: {', '.join(cases) or 'none'}",
                    err=True,
                )
                raise typer.Exit(1)
            cases = [case]
        rows = []
        for c in cases:
            chk = creep_check(url, model, c, window_days=window_days, creep_runs=runs, tolerance=tolerance)
            rows.append(
                {
                    "case_name": c,
                    "verdict": chk.verdict,
                    "now_ms": chk.now_ms,
                    "then_ms": chk.then_ms,
                    "ratio": chk.ratio,
                    "bound_low": chk.ci_low,
                    "bound_high": chk.ci_high,
                    "now_runs": len(chk.now_runs),
                    "then_runs": len(chk.then_runs),
                    "reason": chk.reason,
                }
            )
        creep = titled_cases(with_case_labels(pd.DataFrame(rows), url, model=model), fmt)
        render(creep, fmt, title=f"{model}: baseline creep over {window_days:g} days")
