"""History commands of the ``perfwatch`` CLI: ``history``, ``regressions``, ``failures``,
``env-changes``, ``gate`` and ``query``.

Each runs a named query from ``sql/queries`` through ``tasks.store.queries`` against the store named by
``PERFWATCH_DATABASE_URL`` (default: the SQLite file under ``PERFWATCH_HOME``). Every listing
takes ``--format table|csv|json|markdown``; times are UTC.

``perfwatch gate MODEL VERSION`` is the release gate. Each case of that version is answered by its newest
paired ABBA verdict when it has one, else by its newest run (``sql/queries/gate.sql``: a later, weaker
run never overrides a release gate's verdict; a newer paired gate does), and it exits with

====  ==========================================================================================
0     pass: every case passed, improved, or is a first version of its case (``no-baseline`` and no earlier
      version of the case measured: nothing to regress against; the headline then says ``NO BASELINE``,
      never ``PASS``, for the cases not compared)
1     regression: at least one case's verdict is ``regression``
2     inconclusive or no data: a case is ``inconclusive``, its run failed, or it ran in a changed
      environment that the interval across the change could not judge (``env-changed``: judge it with a
      cross-environment gate, or accept a baseline in the new environment first; a judged change is ``pass``,
      ``improvement`` or ``regression``); a case answered ``no-baseline`` although an earlier
      version of it was measured (no baseline accepted, e.g. a first run on a busy host: ``NOT COMPARED``;
      ``perfwatch run MODEL --version V --paired`` pairs with that version); or there is no run of that version.
      Usage errors (bad option) also exit 2, as in every click program.
3     the store cannot be used (unreachable, newer schema): one line, as every command
====  ==========================================================================================

``--strict`` also turns a first version's ``no-baseline`` into 2, for pipelines that must never ship uncompared.
A gate never suggests accepting the run it answers with as its own baseline.
A regression anywhere wins over an inconclusive case (1 before 2).

A model the store does not know (a typo) is an error in every command that takes one: ``unknown
model X; models: ...`` on stderr, exit 2 for ``gate`` and 1 for the others.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tasks.cli.render import Format, long_text_columns, pyplot, render, save_figure
from tasks.settings import Settings

if TYPE_CHECKING:  # the store and pandas are imported where used: `perfwatch --help` must stay quick
    import pandas as pd

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")]
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since", help="Start of the window (UTC), ISO date or datetime, e.g. 2026-01-31. Default: 7 days ago."
    ),
]
UntilOpt = Annotated[str | None, typer.Option("--until", help="End of the window (UTC, exclusive). Default: now.")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Only this model.")]

GATE_PASS, GATE_REGRESSION, GATE_INCONCLUSIVE = 0, 1, 2
GATE_CODES: dict[str, int] = {  # by tasks.records.Verdict value (imported by commands only, not at start-up)
    "pass": GATE_PASS,
    "improvement": GATE_PASS,
    "no-baseline": GATE_PASS,
    "regression": GATE_REGRESSION,
    "inconclusive": GATE_INCONCLUSIVE,
    "env-changed": GATE_INCONCLUSIVE,
}
"""Exit code of ``perfwatch run`` and ``perfwatch gate`` per verdict of a successful run (a failed run is 2;
:func:`exit_code`)."""

EXIT_CODES_HELP = (
    "Exit codes (perfwatch run and gate alike): 0 pass, improvement (faster beyond the tolerance: nothing to "
    "block) or no-baseline of a first version (nothing to regress against; gate --strict makes it 2); "
    "1 regression (also across an environment change); 2 undecided or failed: inconclusive (interval too wide, "
    "or host busy), env-changed (an environment change the interval across it could not judge), no-baseline not "
    "compared (an earlier version was measured but no baseline accepted; or run --paired found nothing to pair "
    "with), a failed stage, no run of the version, or bad input; "
    "3 the store cannot be used."
)
"""The exit codes as ``--help`` of ``run`` and ``gate`` print them (their epilog) and docs/cli.md says them."""


def _db_url() -> str:
    """The store URL from settings, migrated to the latest schema (``tasks.cli.context.settings``: a store that
    cannot be used raises ``StoreError``, which every command reports in one line with exit code 3)."""
    from tasks.cli.context import settings

    return settings().database_url


def _fail(e: Exception | str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {e}", err=True)
    return typer.Exit(code)


def _names_message(kind: str, name: str, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, names, n=1)
    return (
        f"unknown {kind} {name!r}"
        + (f" (did you mean {close[0]!r}?)" if close else "")
        + f"; {kind}s: {', '.join(names) or 'none'}"
    )


def unknown_model_message(db_url: str, model: str) -> str | None:
    """``unknown model 'X' (did you mean 'Y'?); models: a, b`` when the store (its ``models`` table)
    has no model ``model``; None when it has."""
    from sqlalchemy import select

    from tasks.store import Model, session_scope

    with session_scope(db_url) as s:
        names = list(s.scalars(select(Model.name).order_by(Model.name)))
    return None if model in names else _names_message("model", model, names)


def check_in_model_store(store_uri: str, model: str, version: str) -> None:
    """Before ``perfwatch run`` records anything: ``model`` and ``version`` must exist in the model store.

    Raises:
        typer.BadParameter: unknown model (names the models there, exit 2) or version (lists the
            versions). Which directory ``latest`` is, and a store that cannot be read, are left to the
            pull stage, which records its failure.
    """
    from tasks.modelstore import ModelNotFoundError, UnknownModelError, resolve_version_dir, version_dirs

    try:
        if version == "latest":
            version_dirs(store_uri, model)
        else:
            resolve_version_dir(store_uri, model, version)
    except UnknownModelError as e:
        raise typer.BadParameter(str(e), param_hint="MODEL") from None
    except ModelNotFoundError as e:
        raise typer.BadParameter(str(e), param_hint="--version") from None
    except Exception:  # noqa: BLE001, S110 - unreadable store: the pull stage fails and records it
        pass


def validation_message(e: Any, names: dict[str, str] | None = None) -> str:
    """A pydantic ValidationError of a ``Case`` in the user's terms: each error as ``--option-name: why``
    (``names`` maps a field to what the user typed instead, e.g. ``{"model": "MODEL"}``); an error of
    the whole case (two fields together) is its message alone."""
    parts = []
    for err in e.errors():
        msg = str(err["msg"]).removeprefix("Value error, ")
        field = ".".join(map(str, err["loc"]))
        parts.append(f"{(names or {}).get(field, '--' + field.replace('_', '-'))}: {msg}" if field else msg)
    return "; ".join(parts)


def _known(model: str | None, code: int = 1) -> str:
    """The migrated store's URL (``_db_url``); exits ``code`` with ``unknown model ...`` when ``model``
    is given and the store does not know it."""
    url = _db_url()
    if model is not None and (msg := unknown_model_message(url, model)):
        raise _fail(msg, code)
    return url


def _since(since: str | None) -> Any:
    return since if since is not None else dt.datetime.now(dt.UTC) - dt.timedelta(days=7)


HISTORY_TABLE_COLUMNS = [
    "run_id",
    "started_at",
    "case_name",
    "case_label",
    "version",
    "status",
    "verdict",
    "median_step_ms",
    "p10_step_ms",
    "p90_step_ms",
    "n_measured",
    "throughput_eps",
    "method",
    "ratio",
    "ci_low",
    "ci_high",
    "baseline_median_ms",
    "env_key",
    "env_changed",
]
#: the history table's columns a narrow terminal loses first, in this order (the story under the table names the
#: method and the environment; csv, json and markdown keep them): the verdict's ratio and interval stay
HISTORY_DROPPED_FIRST = [
    "env_key",
    "env_changed",
    "status",
    "n_measured",
    "p10_step_ms",
    "p90_step_ms",
    "throughput_eps",
    "throughput_def",  # after its figure, so a throughput shown always says which one it is
    "method",
    "started_at",
    "baseline_median_ms",
]


SPREAD = (10, 90)
"""The percentiles of each run's measured steps the history shows (its p10-p90 band)."""


def history_frame(
    model: str, case: str | None = None, db_url: str | None = None, *, limit: int | None = None
) -> pd.DataFrame:
    """``tasks.store.queries.history`` with each run's p10 and p90 step time given their distribution-free 95%
    intervals from its measured steps (``tasks.analysis.percentiles.percentile_ci``, the samples of
    ``tasks.store.reads.load_samples``): columns ``p10_low_ms``, ``p10_high_ms``, ``p90_low_ms``,
    ``p90_high_ms`` after ``p90_step_ms`` (ms; None where the run is too short for that bound: a two-sided 95%
    interval of p10 or p90 needs 29 steps) beside ``n_measured``, the steps they rest on, and ``p10_estimable``,
    ``p90_estimable`` (the run's ``n_measured`` supports a two-sided interval; None where unknown); the median
    likewise after ``median_step_ms`` (``median_step_low_ms``, ``median_step_high_ms``, ``median_step_estimable``:
    ``tasks.cli.figures.median_columns``; 6 steps give its interval); and after ``throughput_eps`` an
    infer/tflite run's latency columns as ``perfwatch runs`` has them (``tasks.store.queries.latency_columns``:
    ``latency_n``, ``latency_p50_ms`` ... ``latency_p99_high_ms``, ``latency_confidence``, per batch; and
    ``scenario_columns``: ``scenario``, a server run's ``server_p99_ms`` ... per query, ``server_queries``; from
    each run's stored latency record, ``tasks.store.series.run_latencies``; None for a train run). The points stay:
    they are the run's own spread, drawn as its band; what a reader is given as a figure of a run too short for
    an interval is its bound (:func:`spread_cells`). What ``perfwatch history`` and the plugin's model page
    show. ``db_url``: default the settings' store.

    Raises:
        tasks.store.queries.QueryError: the store refused the query.
    """
    import pandas as pd

    from tasks.analysis.percentiles import min_samples, percentile_ci
    from tasks.store import queries, reads

    db_url = db_url or Settings.from_env().database_url
    df = queries.history(model, case, db_url, limit=limit)
    ids = [int(i) for i, n in zip(df["run_id"], df["n_measured"], strict=True) if pd.notna(n) and n]
    samples = reads.load_samples(db_url, ids) if ids else {}
    cols: dict[str, list[Any]] = {f"p{q}_{b}_ms": [] for q in SPREAD for b in ("low", "high")}
    for rid in df["run_id"]:
        xs = samples.get(int(rid))
        for q in SPREAD:
            ci = percentile_ci(xs, q) if xs else None
            cols[f"p{q}_low_ms"].append(ci.low if ci else None)
            cols[f"p{q}_high_ms"].append(ci.high if ci else None)
    for q in SPREAD:
        cols[f"p{q}_estimable"] = [None if pd.isna(n) else bool(n >= min_samples(q)) for n in df["n_measured"]]
    at = df.columns.get_loc("p90_step_ms") + 1
    for k, (name, values) in enumerate(cols.items()):
        df.insert(at + k, name, pd.Series(values, index=df.index, dtype=object))
    from tasks.cli.figures import median_columns

    median = median_columns(df["run_id"], df["n_measured"], samples)  # n: the run's n_measured, beside it
    at = df.columns.get_loc("median_step_ms") + 1
    for k, name in enumerate(("median_step_low_ms", "median_step_high_ms", "median_step_estimable")):
        df.insert(at + k, name, pd.Series(median[name], index=df.index, dtype=object))
    from tasks.store.series import run_latencies

    lats = run_latencies([int(i) for i in df["run_id"]], db_url)  # infer/tflite runs: their latency record
    fed = [{"latency_ms": lats[int(i)]} if int(i) in lats else None for i in df["run_id"]]
    at = df.columns.get_loc("throughput_eps") + 1
    for k, (name, values) in enumerate({**queries.latency_columns(fed), **queries.scenario_columns(fed)}.items()):
        df.insert(at + k, name, pd.Series(values, index=df.index, dtype=object))
    return df


def latency_cells(df: pd.DataFrame) -> pd.DataFrame:
    """A ``history_frame`` for the table: an infer/tflite run's p99 latency as one cell with its interval and n
    (``p99_latency_ms``: ``tasks.cli.figures.p99_cell``, a server run's per query, as ``perfwatch runs`` shows it)
    after ``throughput_eps``, the latency and scenario columns dropped; no column when no run has a latency."""
    from tasks.cli.figures import p99_cell

    lat = [c for c in df.columns if c.startswith(("latency_", "server_"))]
    lat += [c for c in ("scenario", "scenario_throughput_eps", "bound_outcome") if c in df.columns]
    cells = [p99_cell(r) for r in df[lat].to_dict(orient="records")]
    out = df.drop(columns=lat)
    if any(c is not None for c in cells):
        out.insert(out.columns.get_loc("throughput_eps") + 1, "p99_latency_ms", cells)
    return out


def median_cells(df: pd.DataFrame) -> pd.DataFrame:
    """A ``history_frame`` (or a sweep frame) for the table: ``median_step_ms`` as a cell with its 95% interval
    and n (``tasks.cli.figures.median_cell``: the steps it rests on, ``n_measured``), its bound columns dropped."""
    from tasks.cli.figures import median_cell

    out = df.copy()
    n = df["n_measured"] if "n_measured" in df.columns else df["median_step_n"]
    out["median_step_ms"] = [
        median_cell(p, lo, hi, k)
        for p, lo, hi, k in zip(
            df["median_step_ms"], df["median_step_low_ms"], df["median_step_high_ms"], n, strict=True
        )
    ]
    gone = [c for c in ("median_step_low_ms", "median_step_high_ms", "median_step_estimable") if c in out.columns]
    return out.drop(columns=gone)


def spread_cells(df: pd.DataFrame) -> pd.DataFrame:
    """A ``history_frame`` for the table: ``p10_step_ms`` and ``p90_step_ms`` as cells with their interval and
    n (``tasks.cli.figures.ci_cell``), the bound columns dropped."""
    from tasks.analysis.percentiles import min_samples
    from tasks.cli.figures import ci_cell

    out = df.copy()
    for q in SPREAD:
        out[f"p{q}_step_ms"] = [
            ci_cell(p, lo, hi, n, min_samples(q))
            for p, lo, hi, n in zip(
                df[f"p{q}_step_ms"], df[f"p{q}_low_ms"], df[f"p{q}_high_ms"], df["n_measured"], strict=True
            )
        ]
    return out.drop(columns=[f"p{q}_{k}" for q in SPREAD for k in ("low_ms", "high_ms", "estimable")])


def metric_cells(df: pd.DataFrame, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """``table`` (default ``df``; rows as ``df``'s) with each ratio cell naming its metric where it is not the
    default wall time: ``1.360 (CPU time)`` where ``df``'s ``metric`` is ``cpu`` (the runner's CPU time per
    step decided, a busy host), the figure alone for wall time; unchanged without a ``metric`` or ``ratio``
    column. The tables' form only: csv and json keep the number and the ``metric`` column."""
    import pandas as pd

    out = (df if table is None else table).copy()
    if "metric" not in df.columns or "ratio" not in out.columns:
        return out
    on_cpu = (df["metric"] == "cpu").to_numpy() & out["ratio"].notna().to_numpy()
    if not on_cpu.any():
        return out
    out["ratio"] = [
        (f"{r:.3f} (CPU time)" if cpu else r) if pd.notna(r) else None
        for r, cpu in zip(out["ratio"], on_cpu, strict=True)
    ]
    return out


def titled_cases(df: pd.DataFrame, fmt: Format, column: str = "case_name") -> pd.DataFrame:
    """``df`` as a listing shows it: in a table, each case in ``column`` with its readable label beside it
    (``tasks.records.case_title``: ``train-bs16-in1be8b91f (images_slow)``, one cell that wraps at the space,
    so a narrow terminal never cuts the stable name) and no ``case_label`` column; csv, json and markdown keep
    both columns as they are."""
    if fmt is not Format.table or "case_label" not in df.columns:
        return df
    from tasks.records import case_title

    out = df.drop(columns=["case_label"])
    labels = [lb if isinstance(lb, str) else None for lb in df["case_label"]]
    out[column] = [case_title(c, lb) for c, lb in zip(df[column], labels, strict=True)]
    return out


def with_env_changes(df: pd.DataFrame, db_url: str | None = None) -> pd.DataFrame:
    """A history frame (``tasks.store.queries.history``, oldest first) whose ``env_changed`` is 1 where the
    run's comparability key (``env_key``) differs from the previous fingerprinted run of its case: a new
    baseline history starts there. The query's own flag, 1 where any fingerprint field changed (e.g.
    only ``TF_CPP_MIN_LOG_LEVEL``, recorded for information only), is kept as ``fingerprint_changed``.

    A history cut by a limit may start a case with a run whose fingerprint changed from a run before the window
    (history.sql flags it against its previous run, migration 0011); with ``db_url`` that previous run's key is
    read from the store (``tasks.store.reads.previous_env_keys``), so the run is marked as in the whole history.
    Without it such a run is not marked."""
    import pandas as pd

    out = df.rename(columns={"env_changed": "fingerprint_changed"})
    changed = pd.Series(0, index=out.index, dtype="int64")
    if not out.empty:
        keyed = out[out["env_key"].notna()]
        prev = keyed.groupby("case_name")["env_key"].shift()
        cut = keyed.index[(prev.isna() & (keyed["fingerprint_changed"] == 1)).to_numpy()]
        if db_url is not None and len(cut):
            from tasks.store.reads import previous_env_keys

            before = previous_env_keys(db_url, [int(i) for i in keyed.loc[cut, "run_id"]])
            prev.loc[cut] = [before.get(int(i)) for i in keyed.loc[cut, "run_id"]]
        changed.loc[keyed.index[(prev.notna() & (prev != keyed["env_key"])).to_numpy()]] = 1
    return out.assign(env_changed=changed)


def env_changes(since: Any, until: Any = None, model: str | None = None, db_url: str | None = None) -> pd.DataFrame:
    """Environment changes in [since, until) (UTC), oldest first (``tasks.store.queries.env_changes``), plus
    ``changed_fields``: the fingerprint fields that differ (``tasks.analysis.environment.diff_fingerprints``),
    comparability-affecting ones first, ``", "``-joined.

    Raises:
        tasks.store.queries.QueryError: a bad window, or the store refused the query.
    """
    import pandas as pd

    from tasks.analysis.environment import diff_fingerprints
    from tasks.store import queries

    df = queries.env_changes(since, until, model, db_url)
    data = queries.fingerprint_data(set(df["from_fingerprint"]) | set(df["to_fingerprint"]), db_url)

    def fields(row: Any) -> str:
        changes = diff_fingerprints(data.get(row.from_fingerprint, {}), data.get(row.to_fingerprint, {}))
        changes.sort(key=lambda c: not c.affects_comparability)
        return ", ".join(c.field for c in changes)

    df["changed_fields"] = [fields(r) for r in df.itertuples()] if len(df) else pd.Series(dtype=object)
    return df


def gate_decision(
    rows: pd.DataFrame,
    *,
    strict: bool = False,
    stories: dict[int, Any] | None = None,
    uncompared: Mapping[str, str] | None = None,
) -> tuple[int, list[str]]:
    """The release-gate exit code from the run that answers for each case (rows of ``sql/queries/gate.sql``:
    the newest paired ABBA verdict of the version, else the newest run; with a ``case_label`` column,
    ``tasks.store.queries.with_case_labels``, each reason line names the case with it). ``stories``: run id ->
    ``tasks.records.VerdictStory`` (``tasks.store.reads.verdict_stories``) of the answering runs and of the
    case's newest runs; a row's line is its story on one line (``tasks.services.story.story_line`` without the
    advice to accept the run as the baseline: a gate never suggests making its candidate its own baseline:
    verdict, ratio and interval, method, baseline, reason), else the row's own figures, followed by a line
    saying which run answered and why (:func:`answered_by`). ``uncompared``: case name -> why its
    ``no-baseline`` answer was not a comparison it could have been (:func:`uncompared_cases`): exit 2 and that
    reason; a ``no-baseline`` case not in it is a first version (exit 0; 2 with ``strict``).

    Returns:
        (exit code 0/1/2 as in the module docstring, per case a reason line and its ``answered by`` line, or one
        line for no data).
    """
    import pandas as pd

    from tasks.records import Verdict, case_title, ratio_name
    from tasks.services.story import story_line
    from tasks.store import queries

    if rows.empty:
        return GATE_INCONCLUSIVE, ["no run of this version in the store"]
    codes, reasons = [], []
    for r in rows.itertuples(index=False):
        story = (stories or {}).get(int(r.run_id))
        if r.status != "success":
            code = GATE_INCONCLUSIVE
            why = f"run {r.run_id} failed at {r.failed_stage}: {queries.first_line(r.error)}"
        else:
            note = (uncompared or {}).get(str(r.case_name)) if r.verdict == Verdict.NO_BASELINE else None
            code = exit_code(r.verdict, strict=strict, uncompared=note is not None)
            if note is not None:
                why = f"run {r.run_id} no-baseline: {note}"
            elif story is not None:
                why = f"run {r.run_id} {story_line(story, advice=False)}"
            else:
                why = f"run {r.run_id} verdict {r.verdict}"
                if r.ratio is not None and pd.notna(r.ratio):
                    why += f", {ratio_name(getattr(r, 'metric', None))} {r.ratio:.3f}"
                    if pd.notna(r.ci_low) and pd.notna(r.ci_high):
                        why += f" [{r.ci_low:.3f}, {r.ci_high:.3f}]"
            if strict and r.verdict == Verdict.NO_BASELINE:
                why += " (--strict: a run without a baseline is not a pass)"
        codes.append(code)
        reasons.append(f"{case_title(r.case_name, getattr(r, 'case_label', None))}: {why} -> {code}")
        reasons.append(f"  answered by run {r.run_id}: {answered_by(r, stories or {})}")
    if GATE_REGRESSION in codes:
        return GATE_REGRESSION, reasons
    return max(codes), reasons


def gate_word(
    rows: pd.DataFrame,
    code: int,
    version: str,
    *,
    strict: bool = False,
    stories: dict[int, Any] | None = None,
    uncompared: Mapping[str, str] | None = None,
) -> str:
    """What ``perfwatch gate``'s headline says of its exit ``code`` (:func:`gate_decision` over ``rows``, the
    answering runs of ``sql/queries/gate.sql``, with the same ``strict`` and ``uncompared``): ``REGRESSION``; for
    exit 0 ``PASS`` when every case was compared (``pass`` or ``improvement``), ``NO BASELINE (a first version:
    nothing to compare with)`` when no case was, ``PASS (2 cases) and NO BASELINE (1 case: a first version, not
    compared)`` when some were: ``PASS`` never stands for a case that was not compared; for exit 2
    what made it undecided: ``NOT COMPARED (...)`` (a ``no-baseline`` answer that could have been a comparison:
    ``uncompared``, or any with ``strict``), ``no runs of version V`` (no row),
    ``FAILED (warm-up: RunnerError: out of memory)`` (an
    answering run failed: its stage and its error's first line; ``+ N more failed`` for further cases),
    ``ENV-CHANGED (gpu.driver_version 535.104.05 -> 535.129.03)`` (an answering run's environment differs from
    its baseline's: the comparability fields old -> new from its story in ``stories``, run id ->
    ``VerdictStory``; ``absent`` for a field a side lacks), ``INCONCLUSIVE``, or those joined by `` and `` where
    cases differ (``FAILED (...) and ENV-CHANGED (...) and INCONCLUSIVE``)."""
    from tasks.records import Verdict
    from tasks.services.story import env_changes_text
    from tasks.store import queries

    if code == GATE_REGRESSION:
        return "REGRESSION"
    if rows.empty:
        return f"no runs of version {version}"
    ok = rows["status"] == "success"
    first = rows[ok & (rows["verdict"] == Verdict.NO_BASELINE)]
    if code == GATE_PASS:
        if first.empty:
            return "PASS"
        if len(first) == len(rows):
            return "NO BASELINE (a first version: nothing to compare with)"
        n, k = len(rows) - len(first), len(first)
        return (
            f"PASS ({n} case{'s' * (n != 1)}) and NO BASELINE ({k} case{'s' * (k != 1)}: a first version, not compared)"
        )
    failed = rows[~ok]
    words = []
    if not failed.empty:
        first = failed.iloc[0]
        error = queries.first_line(first["error"]) or "no error"
        word = f"FAILED ({first['failed_stage'] or 'unknown stage'}: {error})"
        words.append(word + (f" + {len(failed) - 1} more failed" if len(failed) > 1 else ""))
    if not first.empty and (strict or set(map(str, first["case_name"])) & set(uncompared or {})):
        later = [c for c in map(str, first["case_name"]) if c in (uncompared or {})]
        words.append(
            "NOT COMPARED (no baseline is accepted, and an earlier version was measured: a paired gate compares "
            "them; see below)"
            if later
            else "NOT COMPARED (a first version: no baseline; --strict)"
        )
    undecided = rows[ok & rows["verdict"].map(lambda v: exit_code(v) == GATE_INCONCLUSIVE)]
    env = undecided[undecided["verdict"] == Verdict.ENV_CHANGED]
    if not env.empty:
        changes = []
        for rid in env["run_id"]:
            story = (stories or {}).get(int(rid))
            text = env_changes_text(story) if story is not None else None
            if text and text not in changes:
                changes.append(text)
        words.append(
            "ENV-CHANGED (" + ("; ".join(changes) or "the comparability key differs from the baseline's") + ")"
        )
    if len(undecided) > len(env) or not words:
        words.append("INCONCLUSIVE")
    return " and ".join(words)


def uncompared_cases(rows: pd.DataFrame, db_url: str, model: str, version: str) -> dict[str, str]:
    """The cases whose answering run (``rows``: ``sql/queries/gate.sql``) is ``no-baseline`` although an earlier
    version of the case was measured (``tasks.store.reads.measured_version``: the version a paired gate pairs with
    when no baseline is accepted), each with why, naming that version, its run and the paired gate that compares
    them (``tasks.stages.compare.uncompared_note``): case name -> reason. What ``gate`` does not pass."""
    from tasks.stages.compare import uncompared_note
    from tasks.store.reads import measured_version

    out: dict[str, str] = {}
    for r in rows.itertuples(index=False):
        if r.status != "success" or r.verdict != "no-baseline":
            continue
        earlier = measured_version(db_url, model, str(r.case_name), version)
        if earlier is not None and (note := uncompared_note(model, version, earlier)) is not None:
            out[str(r.case_name)] = note
    return out


def answered_by(row: Any, stories: dict[int, Any]) -> str:
    """Why a gate row's run answers for its case (``sql/queries/gate.sql``'s rule), e.g. ``the newest paired
    ABBA gate of the version; the newer run 9 (inconclusive, history-lookback) is not a paired gate and does not
    override it``. ``row``: a gate row (``decided_by``, ``run_id``, ``newest_run_id``); ``stories``: run id ->
    ``VerdictStory``, for the newer run's verdict and method."""
    from tasks.services.story import verdict_text

    if row.decided_by != "paired":
        return "the newest run (the version has no paired ABBA gate of this case)"
    newest = int(row.newest_run_id)
    if newest == int(row.run_id):
        return "the newest paired ABBA gate of the version, and its newest run"
    st = stories.get(newest)
    what = f" ({verdict_text(st)}, {st.method or 'no comparison'})" if st is not None else ""
    return (
        f"the newest paired ABBA gate of the version; the newer run {newest}{what} is not a paired gate "
        "and does not override it"
    )


GATE_TABLE_COLUMNS = [
    "run_id",
    "case_name",
    "case_label",
    "verdict",
    "median_step_ms",
    "baseline_median_ms",
    "method",
    "ratio",
    "ci_low",
    "ci_high",
]
"""The columns of ``perfwatch gate``'s table (csv and json have every column of ``sql/queries/gate.sql``)."""


def gate_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Gate rows (``sql/queries/gate.sql``, with ``case_label``) as its table shows them: :data:`GATE_TABLE_COLUMNS`,
    the verdict ``failed@<stage>`` for a failed run and the ratio cell marked ``(CPU time)`` where CPU time decided
    (:func:`metric_cells`, as every table marks it; the status, failed stage and metric columns then say nothing
    more; which run answered is said under the table)."""
    out = rows.copy()
    failed = out["status"] != "success"
    out["verdict"] = out["verdict"].astype(object)
    out.loc[failed, "verdict"] = ["failed@" + str(s) for s in out.loc[failed, "failed_stage"]]
    return metric_cells(out, out[[c for c in GATE_TABLE_COLUMNS if c in out.columns]])


REGRESSIONS_TABLE_COLUMNS = [
    "run_id",
    "started_at",
    "model",
    "version",
    "case_name",
    "case_label",
    "median_step_ms",
    "ratio",
    "ci_low",
    "ci_high",
]
"""The columns of ``perfwatch regressions``' table; the story under it says the method, metric and baseline, and
csv and json have every column of ``sql/queries/regressions.sql``."""


def exit_code(verdict: str | None, *, strict: bool = False, failed: bool = False, uncompared: bool = False) -> int:
    """The exit code of a verdict in every command that exits by one (``perfwatch run``, ``gate``;
    ``EXIT_CODES_HELP``): ``GATE_CODES[verdict]``; 2 for a failed run, an unknown or missing verdict, and for
    ``no-baseline`` with ``strict`` or ``uncompared`` (the run could have been compared and was not: an earlier
    version of its case was measured, ``tasks.store.reads.measured_version``, or it asked for a paired gate and
    had nothing to pair with: ``tasks.stages.compare.uncompared_note``)."""
    if failed or verdict is None:
        return GATE_INCONCLUSIVE
    if (strict or uncompared) and verdict == "no-baseline":
        return GATE_INCONCLUSIVE
    return GATE_CODES.get(str(verdict), GATE_INCONCLUSIVE)


def version_segments(runs: pd.DataFrame) -> list[pd.DataFrame]:
    """The runs of one case (rows of a history frame, oldest first) split where the model version changes:
    each part is a run of consecutive rows of one ``version``. A chart draws one line per part, so no line
    joins two versions (issue 25: one line across v1 and v2 read as a trend of one model)."""
    if runs.empty:
        return []
    part = (runs["version"].astype(str) != runs["version"].astype(str).shift()).cumsum()
    return [g for _, g in runs.groupby(part, sort=True)]


LABEL_PT = 8  #: the font size of the plot's version labels (points)
TIME_PAD = 0.05  #: the time axis' padding on each side, as a fraction of the runs' span
SINGLE_RUN_PAD_S = 1800.0  #: the padding on each side when all runs started at one time (s): an hour's axis


def time_window(times: pd.Series) -> tuple[Any, Any]:
    """(left, right) of a time axis for ``times`` (UTC datetimes), chosen from the runs' span: the span padded by
    ``TIME_PAD`` (5%) on each side, so runs minutes apart get an axis of minutes and
    runs months apart one of months; runs that all started at one time get an hour (``SINGLE_RUN_PAD_S`` each
    side), not the years a plotting library's default picks for one point. Never a fixed pad of hours that
    squeezes runs minutes apart into one spot."""
    import pandas as pd

    lo, hi = times.min(), times.max()
    span = hi - lo
    pad = span * TIME_PAD if span > pd.Timedelta(0) else pd.Timedelta(seconds=SINGLE_RUN_PAD_S)
    return lo - pad, hi + pad


def label_rows(xs: list[float], widths: list[float], gap: float = 0.0) -> list[int]:
    """The row of each label on a line of labels, so that no two overlap: label ``i`` starts at ``xs[i]`` and is
    ``widths[i]`` wide (any one unit, e.g. points), rows count down from the top (0, 1, ...). Labels go in order
    of their start; each takes the first row whose labels all end ``gap`` before it starts. The version labels
    of ``history --plot`` and the model page's chart (runs minutes apart put ``v1`` and ``v2`` next to each
    other: the second goes a row lower instead of on top of the first)."""
    ends: list[float] = []  # the right end of the last label in each row
    rows = [0] * len(xs)
    for i in sorted(range(len(xs)), key=lambda k: xs[k]):
        row = next((r for r, end in enumerate(ends) if end + gap <= xs[i]), len(ends))
        if row == len(ends):
            ends.append(xs[i] + widths[i])
        else:
            ends[row] = xs[i] + widths[i]
        rows[i] = row
    return rows


def label_width(text: str, font_size: float) -> float:
    """The width of ``text`` in a sans-serif font of ``font_size`` (same unit), generously estimated (0.65 of
    the size per character, plus one size of margin): what :func:`label_rows` keeps apart."""
    return font_size * (0.65 * len(text) + 1.0)


def plot_history(df: pd.DataFrame, path: str | Path, *, title: str) -> Path:
    """Draw a history frame (``tasks.store.queries.history``) as a PNG/SVG/PDF at ``path`` (matplotlib, Agg):
    :func:`history_figure`, saved.

    Raises:
        ValueError: ``df`` has no run with a step time to draw.
    """
    return save_figure(history_figure(df, title=title), path)


def history_figure(df: pd.DataFrame, *, title: str) -> Any:
    """A history frame (``tasks.store.queries.history``) as a matplotlib figure (Agg).

    One panel per case, each with its own step-time scale (a 1.4 ms and a 300 ms case never share an axis),
    over one shared time axis chosen from the runs' span (:func:`time_window`: runs minutes apart on an axis of
    minutes, a single run on an hour's, never years). In each panel: the
    median step time (ms, our timer) with its p10–p90 band over the run's measured samples, one line per
    model version (:func:`version_segments`: a line never joins two versions) in that version's colour, the
    compared baseline's median (dashed steps), regressions as red crosses, inconclusive runs ringed in orange
    (legend ``inconclusive (undecided)``), failed runs as black ticks on the
    time axis, and vertical lines where the version (dotted, labelled; labels too close to sit side by side go a
    row lower: :func:`label_rows`) or the environment's comparability key
    (dashed, red: a new baseline history; ``with_env_changes``) changed. A fingerprint change outside the key
    (e.g. ``TF_CPP_MIN_LOG_LEVEL``) draws no line.

    Raises:
        ValueError: ``df`` has no run with a step time to draw.
    """
    import matplotlib.dates as mdates

    from tasks.records import version_label

    plt = pyplot()

    ok = df[df["median_step_ms"].notna()]
    if ok.empty:
        raise ValueError("no successful run with a step time to plot")
    if "fingerprint_changed" not in df.columns:
        df = with_env_changes(df)
    cases = sorted(df["case_name"].unique())
    versions = list(dict.fromkeys(str(v) for v in df["version"]))
    colours = {v: f"C{i % 10}" for i, v in enumerate(versions)}
    fig, axes = plt.subplots(
        len(cases), 1, sharex=True, squeeze=False, figsize=(11, 1.2 + 2.6 * len(cases)), layout="constrained"
    )
    labelled: set[str] = set()
    window = time_window(df["started_at"])
    x0, x1 = (float(mdates.date2num(t)) for t in window)
    # the panels' width (points) before the layout widens them: version labels closer than their width on it
    # go a row lower (label_rows), so v1 and v2 of runs minutes apart never overlap
    width_pt = axes[0, 0].get_position().width * fig.get_figwidth() * 72

    def once(label: str) -> str | None:
        if label in labelled:
            return None
        labelled.add(label)
        return label

    for ax, case in zip(axes[:, 0], cases, strict=True):
        g = df[df["case_name"] == case]
        good = g[g["median_step_ms"].notna()]
        for part in version_segments(good):
            v = str(part["version"].iloc[0])
            colour = colours[v]
            ax.plot(
                part["started_at"], part["median_step_ms"], marker="o", ms=4, color=colour, label=once(f"v{v} median")
            )
            lo, hi = part["p10_step_ms"].astype(float), part["p90_step_ms"].astype(float)
            if len(part) == 1:  # a band of one point has no width: a bar instead
                ax.vlines(
                    part["started_at"], lo, hi, color=colour, alpha=0.5, lw=6, label=once("p10–p90 of the run's steps")
                )
            else:
                ax.fill_between(
                    part["started_at"], lo, hi, color=colour, alpha=0.2, label=once("p10–p90 of the run's steps")
                )
            base = part[part["baseline_median_ms"].notna()]
            if not base.empty:
                ax.plot(
                    base["started_at"],
                    base["baseline_median_ms"].astype(float),
                    drawstyle="steps-post",
                    ls="--",
                    marker="_",
                    ms=14,
                    color=colour,
                    alpha=0.8,
                    label=once("baseline median (dashed)"),
                )
        reg = good[good["verdict"] == "regression"]
        if not reg.empty:
            ax.scatter(
                reg["started_at"],
                reg["median_step_ms"],
                marker="x",
                s=80,
                color="red",
                zorder=5,
                label=once("regression"),
            )
        undecided = good[good["verdict"] == "inconclusive"]
        if not undecided.empty:  # undecided, not a pass: an open ring around the median's dot, as the pages draw it
            ax.scatter(
                undecided["started_at"],
                undecided["median_step_ms"],
                marker="o",
                s=110,
                facecolors="none",
                edgecolors="darkorange",
                linewidths=1.8,
                zorder=5,
                label=once("inconclusive (undecided)"),
            )
        failed = g[g["status"] != "success"]
        if not failed.empty:
            ax.plot(
                failed["started_at"],
                [0] * len(failed),
                "|",
                color="black",
                ms=12,
                transform=ax.get_xaxis_transform(),
                label=once("failed run"),
            )
        first = good.iloc[0] if not good.empty else g.iloc[0]
        marks = [first, *[r for _, r in g[g["version_changed"] == 1].iterrows()]]
        texts = [version_label(str(r["version"])) for r in marks]
        at = [(mdates.date2num(r["started_at"]) - x0) / (x1 - x0) * width_pt for r in marks]
        rows = label_rows(at, [label_width(t, LABEL_PT) + 2 for t in texts])  # + 2: the label's offset
        for r, text, row in zip(marks, texts, rows, strict=True):
            if r is not first:
                ax.axvline(r["started_at"], ls=":", color="grey")
            ax.annotate(
                text,
                (r["started_at"], 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -12 - (LABEL_PT + 2) * row),
                textcoords="offset points",
                fontsize=LABEL_PT,
                color="grey",
                bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            )
        for _, r in g[g["env_changed"] == 1].iterrows():
            ax.axvline(r["started_at"], ls="--", color="red", alpha=0.6, label=once("environment change"))
        label = g["case_label"].dropna().iloc[0] if "case_label" in g and g["case_label"].notna().any() else None
        ax.set_title(case + (f" ({label})" if label and label != case else ""), fontsize=9, loc="left")
        if not good.empty:  # from 0 to just above this case's highest figure: its own scale
            top = good[["median_step_ms", "p90_step_ms", "baseline_median_ms"]].astype(float).max().max()
            ax.set_ylim(bottom=0, top=float(top) * 1.15)
        ax.set_ylabel("step time (ms)")
    bottom = axes[-1, 0]
    bottom.set_xlim(*window)
    locator = mdates.AutoDateLocator(minticks=3, maxticks=8)
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    bottom.set_xlabel("run started (UTC)")
    fig.suptitle(title)
    fig.legend(loc="outside lower center", ncols=min(6, max(1, len(labelled))), fontsize=8)
    return fig


def register(app: typer.Typer) -> None:
    """Add ``history``, ``regressions``, ``failures``, ``env-changes``, ``gate`` and ``query`` to ``app``."""

    @app.command("history")
    def history_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        case: Annotated[str | None, typer.Option(help="Only this case, e.g. train-bs16.")] = None,
        last: Annotated[int | None, typer.Option(min=1, help="Only the newest N runs.")] = None,
        plot: Annotated[
            Path | None,
            typer.Option(help="Also draw step time, its p10–p90 band and the baseline over time to this PNG."),
        ] = None,
        fmt: FormatOpt = Format.table,
    ) -> None:
        """Step-time trend of MODEL over time, versions and environments (median ms with p10–p90); each
        verdict's story under the table (json: decision)."""
        from tasks.store import queries

        try:
            url = _db_url()
            if msg := unknown_model_message(url, model):
                raise _fail(msg)
            df = history_frame(model, case, url, limit=last)
        except queries.QueryError as e:
            raise _fail(e) from None
        if df.empty:
            cases = sorted(queries.history(model, None, url)["case_name"].unique())
            raise _fail(
                f"no runs of model {model!r}"
                + (f" case {case!r}" if case else "")
                + f" in the store; its cases: {', '.join(cases) or 'none'}"
            )
        df = with_env_changes(df, url)
        from tasks.services.story import reason_text, story_dict, story_line
        from tasks.store.reads import verdict_stories

        ids = [int(i) for i in df["run_id"]]
        stories = verdict_stories(ids, url)
        if fmt is Format.table:  # each percentile with its interval and n; an infer run's p99 latency beside them
            shown = latency_cells(median_cells(spread_cells(df)))
            cols = [*HISTORY_TABLE_COLUMNS]
            if "p99_latency_ms" in shown.columns:
                cols.insert(cols.index("throughput_eps") + 1, "p99_latency_ms")
            if df["throughput_def"].dropna().nunique() > 1:  # two metrics under one name: each row says which
                cols.insert(cols.index("throughput_eps") + 1, "throughput_def")
            shown = metric_cells(df, shown[cols])
        else:
            shown = df.copy()
        if fmt is Format.json:  # each run's verdict with its story (tasks.services.story.story_dict)
            shown["decision"] = [story_dict(stories[i]) if i in stories else None for i in ids]
        elif fmt is not Format.table:
            shown["decision"] = [story_line(stories[i]) if i in stories else None for i in ids]
        render(titled_cases(shown, fmt), fmt, title=f"{model}: step time per run (ms)", drop=HISTORY_DROPPED_FIRST)
        if fmt is Format.table:  # each verdict's story under the table, one line per run that has one
            for i in ids:
                if (st := stories.get(i)) is not None and (st.ratio is not None or reason_text(st)):
                    typer.echo(f"  run {i} {story_line(st)}")
        if plot is not None:
            try:
                out = plot_history(df, plot, title=f"{model}: step time per run" + (f" ({case})" if case else ""))
            except (ValueError, OSError) as e:
                raise _fail(e) from None
            typer.echo(f"plot: {out}", err=True)

    @app.command("regressions")
    def regressions_cmd(
        since: SinceOpt = None, until: UntilOpt = None, model: ModelOpt = None, fmt: FormatOpt = Format.table
    ) -> None:
        """Runs flagged as a regression in a time window, newest first, with ratio and interval; each verdict's
        story under the table (csv, json and markdown: decision)."""
        from tasks.services.story import story_dict, story_line
        from tasks.store import queries
        from tasks.store.reads import verdict_stories

        try:
            url = _known(model)
            df = queries.regressions(_since(since), until, model, url)
        except queries.QueryError as e:
            raise _fail(e) from None
        ids = [int(i) for i in df["run_id"]]
        stories = verdict_stories(ids, url)
        if fmt is Format.json:  # each run's verdict with its story (tasks.services.story.story_dict)
            df["decision"] = [story_dict(stories[i]) if i in stories else None for i in ids]
        elif fmt is not Format.table:
            df["decision"] = [story_line(stories[i]) if i in stories else None for i in ids]
        shown = (
            metric_cells(df, df[[c for c in REGRESSIONS_TABLE_COLUMNS if c in df.columns]])
            if fmt is Format.table
            else df
        )
        render(titled_cases(shown, fmt), fmt, title="regressions")
        if fmt is Format.table:  # each verdict's story under the table, one line per run
            for i in ids:
                if (st := stories.get(i)) is not None:
                    typer.echo(f"  run {i} {story_line(st)}")

    @app.command("failures")
    def failures_cmd(
        since: SinceOpt = None,
        until: UntilOpt = None,
        model: ModelOpt = None,
        last: Annotated[int | None, typer.Option(min=1, help="Only the newest N failures.")] = None,
        full: Annotated[bool, typer.Option(help="Show the stored error text, not only its first line.")] = False,
        fmt: FormatOpt = Format.table,
    ) -> None:
        """Runs that failed and why: the stage that failed and the error's cause (the op XLA refused, a missing
        custom class, a string input without an input_fn) or first line, newest first."""
        from tasks.analysis.failures import headline
        from tasks.store import queries

        try:
            df = queries.failures(_since(since), until, model, _known(model), limit=last)
        except queries.QueryError as e:
            raise _fail(e) from None
        # the cause line (stored first since issue 26; found in the text of a run recorded before), else line 1
        df["reason"] = [
            headline(e) if isinstance(e, str) else r for e, r in zip(df["error"], df["reason"], strict=True)
        ]
        if not full:
            df = df.drop(columns=["error"])
        render(titled_cases(df, fmt), fmt, title="failed runs")

    @app.command("env-changes")
    def env_changes_cmd(
        since: SinceOpt = None, until: UntilOpt = None, model: ModelOpt = None, fmt: FormatOpt = Format.table
    ) -> None:
        """Environment changes in a time window: runs whose fingerprint differs from the previous run."""
        from tasks.store import queries

        try:
            df = env_changes(_since(since), until, model, _known(model))
        except queries.QueryError as e:
            raise _fail(e) from None
        if fmt is Format.table:
            df = df.assign(
                from_fingerprint=df["from_fingerprint"].str[:12], to_fingerprint=df["to_fingerprint"].str[:12]
            )
        render(df, fmt, title="environment changes")

    @app.command("gate", epilog=EXIT_CODES_HELP)
    def gate_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        version: Annotated[
            str,
            typer.Argument(
                help="Model version: a version directory, e.g. 3, or a keras.applications case's keras3.15.1-1a2b3c4d."
            ),
        ],
        case: Annotated[str | None, typer.Option(help="Only this case.")] = None,
        strict: Annotated[
            bool, typer.Option(help="A first version without a baseline (nothing to compare with) exits 2, not 0.")
        ] = False,
        fmt: FormatOpt = Format.table,
    ) -> None:
        """Release gate of MODEL VERSION: whether it may ship, said by its exit status (below).

        Each case is answered by its newest paired ABBA verdict of VERSION (both versions timed in one
        process, as a release gate measures) when it has one, else by its newest run: a later unpaired run
        never overrides a release gate's verdict. The output names the run that answered (decided_by: paired
        or newest; newest_run_id) and its verdict's story (json: decision).
        """
        from tasks.records import stored_version, version_label
        from tasks.services.story import story_dict, story_line
        from tasks.store import queries
        from tasks.store.reads import verdict_stories

        try:
            version = stored_version(version)
            url = _known(model, GATE_INCONCLUSIVE)
            rows = queries.run_query("gate", url, model=model, version=version, case_name=case)
            rows = queries.with_case_labels(rows, url, model=model)
        except (queries.QueryError, ValueError) as e:
            raise _fail(e, GATE_INCONCLUSIVE) from None
        ids = [int(i) for i in rows["run_id"]]
        stories = verdict_stories(sorted({*ids, *(int(i) for i in rows["newest_run_id"])}), url) if ids else {}
        uncompared = uncompared_cases(rows, url, model, version) if not rows.empty else {}
        code, reasons = gate_decision(rows, strict=strict, stories=stories, uncompared=uncompared)
        if not rows.empty:
            shown = gate_table(rows) if fmt is Format.table else rows.drop(columns=["error"])
            if fmt is Format.json:  # each answering run's verdict with its story (tasks.services.story)
                shown["decision"] = [story_dict(stories[i]) if i in stories else None for i in ids]
            elif fmt is not Format.table:
                shown["decision"] = [story_line(stories[i]) if i in stories else None for i in ids]
            render(titled_cases(shown, fmt), fmt, title=f"gate {model} {version_label(version)}")
        word = gate_word(rows, code, version, strict=strict, stories=stories, uncompared=uncompared)  # PASS, ...
        # the answer, on stdout with the table (a CI log of stdout keeps it); beside csv or json data, on stderr so
        # that stdout stays one document
        beside_data = fmt in (Format.json, Format.csv)
        typer.echo(f"gate {model} {version_label(version)}: {word} (exit {code})", err=beside_data)
        for line in reasons:
            typer.echo(f"  {line}", err=beside_data)
        for i in ids:  # where another figure or a tail gate decided, the ratio column is not the figure that did
            if (st := stories.get(i)) is not None and st.led_by_other:  # another figure than step time decided
                typer.echo(
                    f"  note: run {i}'s verdict is a regression on {'; '.join(st.regressed_on)}; its ratio, ci low "
                    f"and ci high are step time's ({st.step_verdict or 'no verdict'}), not the figure that decided",
                    err=beside_data,
                )
            if st is not None and st.gated_on:
                typer.echo(
                    f"  note: run {i}'s ratio, ci low and ci high are its {st.gated_on} ratio (its tail gate "
                    "decided), not the medians' beside them",
                    err=beside_data,
                )
        led = {i for i in ids if (st := stories.get(i)) is not None and st.led_by_other}
        if not rows.empty and (rows["method"] == "paired-abba").any() and not set(ids) <= led:  # which figure decided
            typer.echo(
                "  note: the verdict's figure is the ratio column (a paired gate: both versions timed in one "
                "process); the median step ms and baseline median ms columns are two processes' medians and may "
                "differ (perfwatch compare says why)",
                err=beside_data,
            )
        raise typer.Exit(code)

    @app.command("query")
    def query_cmd(
        name: Annotated[str | None, typer.Argument(help="Named query (omit to list them).")] = None,
        param: Annotated[
            list[str] | None,
            typer.Option("--param", "-p", help="NAME=VALUE, repeatable; e.g. -p model=tiny -p limit=10."),
        ] = None,
        fmt: FormatOpt = Format.table,
    ) -> None:
        """Run a named query of sql/queries with bound parameters (no name: list the queries)."""
        from tasks.store import queries

        if name is None:
            render(queries.list_queries(), fmt, title="named queries (sql/queries)")
            return
        params: dict[str, str] = {}
        for item in param or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise typer.BadParameter(f"{item!r}: expected NAME=VALUE", param_hint="--param")
            params[key] = value
        try:
            df = queries.run_query(name, _db_url(), **params)
        except queries.QueryError as e:
            raise _fail(e) from None
        # a narrow terminal loses the long text columns (params, fed: JSON) first: csv and json keep them
        render(df, fmt, title=name, drop=long_text_columns(df))
