"""Data-quality checks with Great Expectations Core 1.x, run directly inside a task.

* :func:`validate_step_times` -- the data quality of measured step times (ms): enough rows, no
  nulls, all > 0. No per-step threshold: a fraction of single steps over a line is not a test of a
  change in the median (under load 18-45% of an unchanged model's steps exceed 110% of its median),
  so it must not make a verdict.
* :func:`validate_verdict` -- the step-time threshold, enforced on the comparison's estimate *with its
  interval*: a one-row result table (``ratio``, ``ci_low``, ``ci_high``, ``host_busy``) must be a sound
  interval (one row, no nulls, all > 0, ``ci_low <= ratio <= ci_high``) and, where the interval lies
  above the no-change line 1 on a quiet host, its upper end must stay within the threshold
  ``1 + tolerance`` (a *suite parameter*, ``$PARAMETER: threshold_ratio``, supplied at validate time,
  so the suite is the same for every run). That expectation fails exactly when
  ``tasks.analysis.stats.verdict_from_ci`` says ``regression`` and the noise rule lets it stand, so GX
  and the verdict cannot disagree.
* :func:`validate_gated_figures` -- the figures a case gates beside step time (the cold step, the model's memory:
  ``tasks.analysis.metric_gates``), one row each with its interval: each figure's threshold ``1 + tolerance`` is
  an expectation of its own (suite parameter ``<figure>_threshold_ratio``), failing exactly for a regression on it.
* :func:`validate_agreement` -- a run's output agreement with the fp32 eager model against the case's bounds
  (``min_top1_agreement``, ``max_output_rel_diff``: suite parameters of those names), failing exactly where the
  run broke one, or could not check it.
* :func:`validate_op_table` -- the parsed xprof op table: non-empty, the expected columns,
  self-times and occurrence counts non-negative.
* :func:`render_data_docs` -- GX Data Docs HTML for any of these results, written only under
  the given directory, that render without internet (``tasks.stages.data_docs_offline``: the CDN
  assets of GX's templates are vendored and served from the site itself).

GX is imported lazily (it takes seconds) with analytics disabled, and each call builds one
ephemeral (in-memory) data context, so nothing is written outside ``render_data_docs``'s
target directory.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from tasks.records import RunContext
from tasks.stages import data_docs_offline

log = logging.getLogger(__name__)

os.environ["GX_ANALYTICS_ENABLED"] = "false"  # must be set before great_expectations is imported
#: the level of GX's loggers (``great_expectations`` and below). At INFO, as an Airflow task logs, GX writes 214
#: lines of API-docs registration on import ("Skipping registering function ...") and a few per data context
#: ("Created temporary directory ...", "Loading 'datasources'"): 214 of a baseline_compare task log's 238 lines.
#: Its warnings and errors still show. Set on GX's top logger before GX is imported (its import-time lines), and
#: again on the GX loggers that set their own level when imported (:func:`_quiet_gx`).
GX_LOG_LEVEL = logging.WARNING
logging.getLogger("great_expectations").setLevel(GX_LOG_LEVEL)


def _quiet_gx() -> None:
    """Every imported ``great_expectations.*`` logger that set its own level below :data:`GX_LOG_LEVEL` gets that
    level (``great_expectations.data_context.types.base`` sets INFO when imported, then says "Created temporary
    directory ..." for each data context)."""
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if (
            name.startswith("great_expectations.")
            and isinstance(logger, logging.Logger)
            and logging.NOTSET < logger.level < GX_LOG_LEVEL
        ):
            logger.setLevel(GX_LOG_LEVEL)


if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.data_context import EphemeralDataContext
    from great_expectations.expectations import Expectation

__all__ = [
    "GxFailure",
    "GxOutcome",
    "data_docs_title",
    "render_data_docs",
    "step_time_expectations",
    "validate_op_table",
    "validate_query_latencies",
    "validate_step_times",
    "validate_verdict",
    "verdict_expectations",
    "GatedFigure",
    "gated_figure_expectations",
    "limit_param",
    "validate_gated_figures",
    "agreement_expectations",
    "validate_agreement",
    "GATED_SUITE",
    "AGREEMENT_SUITE",
    "STEP_SUITE",
    "QUERY_SUITE",
    "OP_SUITE",
    "VERDICT_SUITE",
    "STEP_COLUMN",
    "QUERY_COLUMN",
    "OP_COLUMNS",
    "VERDICT_COLUMNS",
    "THRESHOLD_PARAM",
]

STEP_SUITE = "perfwatch_step_times"
OP_SUITE = "perfwatch_op_table"
GATED_SUITE = "perfwatch_gated_figures"
AGREEMENT_SUITE = "perfwatch_output_agreement"
#: the agreement suite's columns, each with the case's bound it is held to (``Case`` field and suite parameter)
#: and whether the bound is a floor (``min_value``) or a ceiling (``max_value``)
AGREEMENT_BOUNDS = {
    "top1_agreement": ("min_top1_agreement", "min_value"),
    "max_rel_diff": ("max_output_rel_diff", "max_value"),
}
STEP_COLUMN = "step_time_ms"
QUERY_SUITE = "perfwatch_query_latencies"
QUERY_COLUMN = "latency_ms"
OP_COLUMNS = ("op_name", "op_type", "total_self_time_us", "occurrences")
VERDICT_SUITE = "perfwatch_verdict"
VERDICT_COLUMNS = ("ratio", "ci_low", "ci_high", "host_busy")
THRESHOLD_PARAM = "threshold_ratio"  #: 1 + tolerance, the step-time threshold as a ratio to the baseline
NO_CHANGE = 1.0  #: the no-change line of the verdict rule (a constant of the rule, not a setting)


class GxFailure(BaseModel):
    """One failed expectation.

    Attributes:
        expectation: GX expectation type, e.g. ``expect_column_median_to_be_between``.
        column: the column it checks (``None`` for table expectations).
        observed_value: GX's observed value, or for column-map expectations a dict of
            ``element_count``, ``unexpected_count``, ``unexpected_percent``, ``partial_unexpected_list``.
        kwargs: the expectation's arguments with suite parameters resolved (``batch_id`` dropped).
        is_limit: it is the step-time threshold expectation (not a data-quality one).
        text: one sentence naming the expectation, its arguments and the observation.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    expectation: str
    column: str | None
    observed_value: Any
    kwargs: dict[str, Any]
    is_limit: bool
    text: str


class GxOutcome(BaseModel):
    """Result of one GX validation: overall success, the failures, and GX's own JSON result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    success: bool
    failures: list[GxFailure]
    result_json: dict[str, Any]


def _context() -> EphemeralDataContext:
    """A fresh ephemeral GX context, progress bars off."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    _quiet_gx()  # before the context: it says where its docs site went, at INFO
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx


def _failure(r: dict[str, Any]) -> GxFailure:
    cfg, res = r.get("expectation_config") or {}, r.get("result") or {}
    kwargs = {k: v for k, v in (cfg.get("kwargs") or {}).items() if k != "batch_id"}
    etype, column = cfg.get("type", "?"), kwargs.get("column")
    exc = r.get("exception_info") or {}
    if exc.get("raised_exception"):
        observed, text = None, f"raised: {exc.get('exception_message')}"
    elif not res:
        observed = None
        text = "column not found" if etype == "expect_column_to_exist" else "no observed value"
    elif "observed_value" in res:
        observed = res["observed_value"]
        text = f"observed {observed!r}"
    else:  # column map expectation: report the unexpected values
        observed = {
            k: res.get(k)
            for k in ("element_count", "unexpected_count", "unexpected_percent", "partial_unexpected_list")
        }
        pct = res.get("unexpected_percent")
        text = (
            f"{res.get('unexpected_count')} of {res.get('element_count')} values unexpected"
            + (f" ({pct:.1f}%)" if isinstance(pct, int | float) else "")
            + f", e.g. {(res.get('partial_unexpected_list') or [])[:5]}"
        )
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if k != "column")
    where = (f" on column {column!r}" if column else "") + (f" ({args})" if args else "")
    return GxFailure(
        expectation=etype,
        column=column,
        observed_value=observed,
        kwargs=kwargs,
        is_limit=(cfg.get("meta") or {}).get("perfwatch") == "limit",
        text=f"{etype}{where} failed: {text}",
    )


def _run(
    df: pd.DataFrame, suite_name: str, expectations: list[Expectation], params: dict[str, Any] | None
) -> GxOutcome:
    import great_expectations as gx

    ctx = _context()
    batch = (
        ctx.data_sources.add_pandas("perfwatch")
        .add_dataframe_asset(suite_name)
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = ctx.suites.add(gx.ExpectationSuite(name=suite_name))
    for e in expectations:
        suite.add_expectation(e)
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=suite_name, data=batch, suite=suite))
    result = vd.run(batch_parameters={"dataframe": df}, expectation_parameters=params or None, result_format="SUMMARY")
    d = json.loads(json.dumps(result.to_json_dict(), default=str))  # plain JSON types only (XCom)
    return GxOutcome(
        success=bool(d["success"]), result_json=d, failures=[_failure(r) for r in d["results"] if not r["success"]]
    )


def step_time_expectations(min_rows: int, column: str = STEP_COLUMN) -> list[Expectation]:
    """The expectations of the ``perfwatch_step_times`` suite (and of ``perfwatch_query_latencies`` on
    ``column`` ``latency_ms``): data quality only (see :func:`validate_step_times`)."""
    import great_expectations as gx

    E, col = gx.expectations, column
    return [
        E.ExpectTableRowCountToBeBetween(min_value=min_rows),
        E.ExpectColumnValuesToNotBeNull(column=col),
        E.ExpectColumnValuesToBeBetween(column=col, min_value=0, strict_min=True),
    ]


def validate_step_times(step_times_ms: Sequence[float], *, min_rows: int) -> GxOutcome:
    """Validate the data quality of step times (ms) with the ``perfwatch_step_times`` suite.

    Expectations on column ``step_time_ms``: row count >= ``min_rows``; no nulls; every value > 0.
    NaN/None step times are validated as nulls, not rejected.

    Args:
        step_times_ms: shape (n,), per-step times in ms.
        min_rows: the configured number of steps (>= 0).

    Returns:
        GxOutcome; each failure names the expectation, column and observed value.

    Raises:
        ValueError: ``min_rows < 0``.
    """
    return _validate_samples(step_times_ms, min_rows, STEP_SUITE, STEP_COLUMN)


def validate_query_latencies(latency_ms: Sequence[float], *, min_rows: int) -> GxOutcome:
    """Validate a server run's per-query latencies (ms, arrival to result, queueing included; the runner's
    ``ServerPoint.latency_ms`` of the reported rate) with the ``perfwatch_query_latencies`` suite: the
    expectations of :func:`validate_step_times` on column ``latency_ms``.

    Args:
        latency_ms: shape (queries,), per query, ms.
        min_rows: the queries a server point issues at least (``profiled_run.server_queries``).

    Returns:
        GxOutcome; each failure names the expectation, column and observed value.

    Raises:
        ValueError: ``min_rows < 0``.
    """
    return _validate_samples(latency_ms, min_rows, QUERY_SUITE, QUERY_COLUMN)


def _validate_samples(values_ms: Sequence[float], min_rows: int, suite: str, column: str) -> GxOutcome:
    """One column of ms samples through :func:`step_time_expectations` (None/NaN become nulls)."""
    import pandas as pd

    if min_rows < 0:
        raise ValueError(f"min_rows = {min_rows}: must be >= 0")
    df = pd.DataFrame({column: pd.Series([math.nan if v is None else v for v in values_ms], dtype="float64")})
    return _run(df, suite, step_time_expectations(min_rows, column), None)


def _sound_intervals(flag: str) -> list[Expectation]:
    """Sound rows of ``ratio``, ``ci_low``, ``ci_high`` (no nulls, all > 0, ``ci_low <= ratio <= ci_high``) and a
    non-null boolean column ``flag`` (``host_busy``, ``judged``)."""
    import great_expectations as gx

    E = gx.expectations
    exps: list[Expectation] = []
    for c in ("ratio", "ci_low", "ci_high"):
        exps += [
            E.ExpectColumnValuesToNotBeNull(column=c),
            E.ExpectColumnValuesToBeBetween(column=c, min_value=0, strict_min=True),
        ]
    return [
        *exps,
        E.ExpectColumnValuesToNotBeNull(column=flag),
        E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="ratio", column_B="ci_low", or_equal=True),
        E.ExpectColumnPairValuesAToBeGreaterThanB(column_A="ci_high", column_B="ratio", or_equal=True),
    ]


def verdict_expectations() -> list[Expectation]:
    """The expectations of the ``perfwatch_verdict`` suite (see :func:`validate_verdict`). The threshold
    expectation takes ``max_value={"$PARAMETER": "threshold_ratio"}`` and carries
    ``meta={"perfwatch": "limit"}`` (its failure has ``is_limit=True``)."""
    import great_expectations as gx
    from great_expectations.expectations.row_conditions import Column

    E = gx.expectations
    exps: list[Expectation] = [E.ExpectTableRowCountToEqual(value=1), *_sound_intervals("host_busy")]
    exps += [
        E.ExpectColumnValuesToBeBetween(
            column="ci_high",
            max_value={"$PARAMETER": THRESHOLD_PARAM},
            row_condition=(Column("ci_low") > NO_CHANGE) & (Column("host_busy") == False),  # noqa: E712
            meta={"perfwatch": "limit"},
            notes="Step-time threshold as a test: where the interval lies above 1 (significantly slower) "
            "on a quiet host, its upper end must stay within 1 + tolerance; fails exactly for a "
            "regression.",
        ),
    ]
    return exps


def validate_verdict(
    ratio: float | None, ci_low: float | None, ci_high: float | None, *, tolerance: float, host_busy: bool = False
) -> GxOutcome:
    """Validate a comparison's result (candidate/baseline step-time ratio and its interval) with the
    ``perfwatch_verdict`` suite: a sound interval, and the threshold ``1 + tolerance`` (suite
    parameter ``threshold_ratio``) not exceeded by an interval that lies above 1 on a quiet host.

    Args:
        ratio, ci_low, ci_high: the estimate and its interval (ratios, > 0; NaN/None are validated as nulls).
        tolerance: the case's tolerance t in (0, 1); the threshold is ``1 + t``.
        host_busy: the measurement ran on a busy host (``calibration.Noise.busy``): the threshold is then
            not tested (the verdict is ``inconclusive``).

    Returns:
        GxOutcome; the threshold failure has ``is_limit=True`` and names the observed ``ci_high``.

    Raises:
        ValueError: ``tolerance`` outside (0, 1).
    """
    import pandas as pd

    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance = {tolerance}: must be in (0, 1)")
    row = {"ratio": ratio, "ci_low": ci_low, "ci_high": ci_high}
    df = pd.DataFrame({k: pd.Series([math.nan if v is None else v], dtype="float64") for k, v in row.items()})
    df["host_busy"] = pd.Series([bool(host_busy)], dtype="bool")
    return _run(df, VERDICT_SUITE, verdict_expectations(), {THRESHOLD_PARAM: 1.0 + tolerance})


class GatedFigure(BaseModel):
    """One figure beside step time that a paired gate judges, as the ``perfwatch_gated_figures`` suite validates it.

    Attributes:
        figure: its metric name (``cold_step_ms``, ``model_rss_bytes``: ``tasks.analysis.metric_gates``).
        ratio, ci_low, ci_high: candidate over baseline and its interval (> 0).
        tolerance: the case's tolerance of it (``cold_step_tolerance``...), else the figure's default
            (``tasks.analysis.metric_gates.DEFAULT_TOLERANCES``): the threshold is ``1 + tolerance``.
        judged: whether the figure is judged on this run (a wall-time figure is not on a busy host).
    """

    model_config = ConfigDict(extra="forbid")

    figure: str
    ratio: float
    ci_low: float
    ci_high: float
    tolerance: float
    judged: bool


def limit_param(figure: str) -> str:
    """The suite parameter of ``figure``'s threshold (``1 + tolerance``): ``cold_step_ms_threshold_ratio``."""
    return f"{figure}_{THRESHOLD_PARAM}"


def gated_figure_expectations(figures: Sequence[str]) -> list[Expectation]:
    """The expectations of the ``perfwatch_gated_figures`` suite for these figures (see
    :func:`validate_gated_figures`): sound rows, and per figure its threshold (suite parameter
    :func:`limit_param`), carrying ``meta={"perfwatch": "limit", "figure": <figure>}``."""
    import great_expectations as gx
    from great_expectations.expectations.row_conditions import Column

    E = gx.expectations
    exps: list[Expectation] = [E.ExpectTableRowCountToBeBetween(min_value=1), *_sound_intervals("judged")]
    for f in figures:
        exps.append(
            E.ExpectColumnValuesToBeBetween(
                column="ci_high",
                max_value={"$PARAMETER": limit_param(f)},
                row_condition=(Column("figure") == f) & (Column("ci_low") > NO_CHANGE) & (Column("judged") == True),  # noqa: E712
                meta={"perfwatch": "limit", "figure": f},
                notes=f"{f}'s threshold as a test: where its interval lies above 1 (significantly larger), its "
                "upper end must stay within 1 + the case's tolerance of it; fails exactly for a regression on it.",
            )
        )
    return exps


def validate_gated_figures(rows: Sequence[GatedFigure]) -> GxOutcome:
    """Validate the figures beside step time that a case gates (one row each: the cold step, the model's memory;
    ``tasks.analysis.metric_gates``) with the ``perfwatch_gated_figures`` suite: sound intervals, and each figure's
    threshold ``1 + tolerance`` (suite parameter :func:`limit_param`) not exceeded by an interval that lies above 1
    where it is judged. A failed threshold is the figure's ``regression`` (``is_limit=True``; its
    ``kwargs["row_condition"]`` names the figure), so Data Docs show each figure's check beside step time's.

    Raises:
        ValueError: no rows, or two rows of one figure.
    """
    import pandas as pd

    if not rows:
        raise ValueError("rows: expected at least one gated figure")
    names = [r.figure for r in rows]
    if len(set(names)) != len(names):
        raise ValueError(f"figures {names}: expected each figure once")
    df = pd.DataFrame([r.model_dump() for r in rows])
    df["judged"] = df["judged"].astype("bool")
    params = {limit_param(r.figure): 1.0 + r.tolerance for r in rows}
    return _run(df, GATED_SUITE, gated_figure_expectations(names), params)


def agreement_expectations(bounds: Sequence[str]) -> list[Expectation]:
    """The expectations of the ``perfwatch_output_agreement`` suite for the case's ``bounds`` (``min_top1_agreement``,
    ``max_output_rel_diff``; see :func:`validate_agreement`): one row, and per bound its figure present (a bound the
    run could not check fails here, as it never passes in the verdict) and within the bound (suite parameter named
    as the ``Case`` field, ``meta={"perfwatch": "limit", ...}``)."""
    import great_expectations as gx

    E = gx.expectations
    exps: list[Expectation] = [E.ExpectTableRowCountToBeBetween(min_value=1, max_value=1)]
    for column, (field, side) in AGREEMENT_BOUNDS.items():
        if field not in bounds:
            continue
        exps.append(
            E.ExpectColumnValuesToNotBeNull(
                column=column,
                notes=f"{field} is set: the run must have measured {column} (else the bound is not checked)",
            )
        )
        exps.append(
            E.ExpectColumnValuesToBeBetween(
                column=column,
                **{side: {"$PARAMETER": field}},  # type: ignore[arg-type]
                meta={"perfwatch": "limit", "figure": column},
                notes=f"the case's {field} as a test: fails exactly where the run broke it (a regression on output "
                "agreement)",
            )
        )
    return exps


def validate_agreement(agreement: Mapping[str, Any] | None, bounds: Mapping[str, float]) -> GxOutcome:
    """Validate a run's output agreement with the fp32 eager model (the runner's ``agreement`` record:
    ``top1_agreement`` 0..1, ``max_rel_diff``; ``tasks.analysis.agreement``) against the case's bounds with the
    ``perfwatch_output_agreement`` suite, so Data Docs show the check beside step time's. A broken bound fails its
    limit expectation (``is_limit=True``); a bound the run could not check (no record, no classifier output) fails
    the figure's not-null expectation.

    Args:
        agreement: the record, None where the run measured none (a row of nulls is validated then).
        bounds: the bounds the case sets, by ``Case`` field (``min_top1_agreement``, ``max_output_rel_diff``).

    Raises:
        ValueError: no bound, or a bound that is not one of those two.
    """
    import pandas as pd

    known = {field for field, _ in AGREEMENT_BOUNDS.values()}
    if not bounds or set(bounds) - known:
        raise ValueError(f"bounds {dict(bounds)}: expected one or both of {sorted(known)}")
    row = {column: (agreement or {}).get(column) for column in AGREEMENT_BOUNDS}
    df = pd.DataFrame([row], columns=list(AGREEMENT_BOUNDS)).astype("float64")
    return _run(df, AGREEMENT_SUITE, agreement_expectations(list(bounds)), {k: float(v) for k, v in bounds.items()})


def validate_op_table(op_df: pd.DataFrame) -> GxOutcome:
    """Validate a parsed op table with the ``perfwatch_op_table`` suite.

    Expectations: at least one row; columns ``op_name``, ``op_type``, ``total_self_time_us``,
    ``occurrences`` exist; ``op_name`` has no nulls; every column whose name contains
    ``self_time`` (µs) and ``occurrences`` are >= 0.

    Args:
        op_df: one row per op (self-times in µs over the profiled window).

    Returns:
        GxOutcome (a missing column shows up as a failed ``expect_column_to_exist``).
    """
    import great_expectations as gx

    E = gx.expectations
    exps: list[Expectation] = [E.ExpectTableRowCountToBeBetween(min_value=1)]
    exps += [E.ExpectColumnToExist(column=c) for c in OP_COLUMNS]
    if "op_name" in op_df.columns:
        exps.append(E.ExpectColumnValuesToNotBeNull(column="op_name"))
    numeric = sorted({c for c in op_df.columns if "self_time" in str(c)} | {"total_self_time_us", "occurrences"})
    exps += [E.ExpectColumnValuesToBeBetween(column=c, min_value=0) for c in numeric if c in op_df.columns]
    return _run(op_df, OP_SUITE, exps, None)


def render_data_docs(
    outcomes: Mapping[str, GxOutcome | Any], target_dir: str | Path, *, title: str | None = None
) -> Path:
    """Write GX Data Docs HTML for validation results into ``target_dir``; return its index.html.

    The index is headed "Data Docs | <title>"; every result page names ``title`` as its run name and the
    outcome's name as its data asset; each suite's page (``expectations/<suite>.html``, linked from the
    index and the result pages) is built from the expectations the result holds, so every link between
    the pages resolves inside ``target_dir`` (all relative: the site can be moved or archived whole).
    Two results of one suite with different expectations (e.g. ``min_rows``) get a page each, the
    second suite named ``<suite>_<name>``. The pages render without internet: the styles, scripts and
    fonts GX's templates load from CDNs are copied into ``<target_dir>/static/vendor/`` and linked from
    there (``data_docs_offline.make_offline``; ~0.9 MB beside GX's own 4 MB ``static/``); anything still
    remote is logged as a warning.

    Args:
        outcomes: name -> a :class:`GxOutcome`, a GX ``ExpectationSuiteValidationResult``, or
            its ``to_json_dict()`` dict. The name becomes the batch id (and the file name) of the
            result's page under ``validations/<suite>/<title>/<time>/<name>.html``.
        target_dir: directory for the site (created if missing); nothing is written elsewhere.
        title: what the results are of, e.g. :func:`data_docs_title`'s "resnet v2 train-bs16, DAG run
            perfwatch_profile/manual__2026-11-30T15:00:00+00:00"; default "perfwatch".

    Returns:
        Path of ``<target_dir>/index.html``.

    Raises:
        ValueError: ``outcomes`` is empty or an entry is not a validation result.
    """
    import great_expectations as gx
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.core.expectation_validation_result import ExpectationSuiteValidationResultSchema
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    if not outcomes:
        raise ValueError("outcomes: nothing to render")
    title = title or "perfwatch"
    target = Path(target_dir).resolve()
    target.mkdir(parents=True, exist_ok=True)
    ctx = _context()
    ctx.variables.data_docs_sites = {
        title: {  # replaces the default site (a temp dir); its name heads the index
            "class_name": "SiteBuilder",
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(target)},
        }
    }
    now = datetime.now(UTC)
    run_name = _file_part(title)
    suites: dict[str, list[dict[str, Any]]] = {}
    for name, item in outcomes.items():
        raw = item.result_json if isinstance(item, GxOutcome) else item
        if isinstance(raw, ExpectationSuiteValidationResult):
            raw = raw.to_json_dict()
        if not isinstance(raw, dict):
            raise ValueError(f"outcomes[{name!r}]: not a GX validation result ({type(item).__name__})")
        try:
            raw = ExpectationSuiteValidationResultSchema().load(json.loads(json.dumps(raw, default=str)))
        except Exception as e:  # noqa: BLE001 - marshmallow/GX errors vary
            raise ValueError(f"outcomes[{name!r}]: not a GX validation result ({e})") from e
        safe = _file_part(name) or "result"
        configs = [
            {k: v for k, v in r.expectation_config.to_json_dict().items() if k in ("type", "kwargs", "meta", "notes")}
            for r in raw.results
        ]
        for c in configs:
            c["kwargs"] = {k: v for k, v in c["kwargs"].items() if k != "batch_id"}
        suite = raw.suite_name or "suite"
        if suites.get(suite, configs) != configs:
            suite = f"{suite}_{safe}"
        if suite not in suites:
            suites[suite] = configs
            ctx.suites.add(gx.ExpectationSuite(name=suite, expectations=configs))
        raw.suite_name = suite
        raw.meta["run_id"] = RunIdentifier(run_name=title, run_time=now)
        raw.meta["batch_spec"] = {**(raw.meta.get("batch_spec") or {}), "data_asset_name": name}
        key = ValidationResultIdentifier(
            ExpectationSuiteIdentifier(suite), RunIdentifier(run_name=run_name, run_time=now), safe
        )
        ctx.validation_results_store.set(key, raw)
    ctx.build_data_docs(site_names=[title])
    # GX 1.x's result pages (validations/<suite>/<run>/<time>/<name>.html) link the favicon one level too
    # high, at validations/static/images/ (GX issue #1943): put a copy there so every link resolves.
    icon = target / "static" / "images" / "favicon.ico"
    if icon.is_file():
        (target / "validations" / "static" / "images").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(icon, target / "validations" / "static" / "images" / "favicon.ico")
    # GX's templates load their styles and scripts from public CDNs: serve vendored copies from the site itself
    remote = data_docs_offline.make_offline(target)
    if remote:
        log.warning("Data Docs under %s still load from the network (offline they render without): %s", target, remote)
    return target / "index.html"


def _file_part(text: str) -> str:
    """``text`` as an ASCII file-name part: runs of other characters become ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_")


def data_docs_title(ctx: RunContext, version: str) -> str:
    """The name a run's Data Docs carry: ``"<model> v<version> <case>, DAG run <dag_id>/<dag_run_id>"``
    (``version``: the version pulled, e.g. ``2`` for a requested ``latest``), e.g.
    ``"resnet v2 train-bs16, DAG run perfwatch_profile/manual__2026-11-30T15:00:00+00:00"``."""
    return f"{ctx.case.model} v{version} {ctx.case.name}, DAG run {ctx.dag_id}/{ctx.dag_run_id}"
