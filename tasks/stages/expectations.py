"""Data-quality checks with Great Expectations Core 1.x, run directly inside a task.

* :func:`validate_step_times` -- the measured step times (ms) of a run: enough rows, no nulls,
  all > 0, and, with a baseline, median <= limit and ``mostly`` of the steps <= limit. The
  limit is a *suite parameter* (``$PARAMETER: median_limit_ms``) supplied at validate time, so
  the suite itself is the same for every run.
* :func:`validate_op_table` -- the parsed xprof op table: non-empty, the expected columns,
  self-times and occurrence counts non-negative.
* :func:`render_data_docs` -- GX Data Docs HTML for any of these results, written only under
  the given directory.

GX is imported lazily (it takes seconds) with analytics disabled, and each call builds one
ephemeral (in-memory) data context, so nothing is written outside ``render_data_docs``'s
target directory.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

os.environ["GX_ANALYTICS_ENABLED"] = "false"  # must be set before great_expectations is imported

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GxFailure", "GxOutcome", "render_data_docs", "step_time_expectations", "validate_op_table", "validate_step_times",
           "STEP_SUITE", "OP_SUITE", "STEP_COLUMN", "OP_COLUMNS"]

STEP_SUITE = "perfwatch_step_times"
OP_SUITE = "perfwatch_op_table"
STEP_COLUMN = "step_time_ms"
OP_COLUMNS = ("op_name", "op_type", "total_self_time_us", "occurrences")
LIMIT_PARAM = "median_limit_ms"


class GxFailure(BaseModel):
    """One failed expectation.

    Attributes:
        expectation: GX expectation type, e.g. ``expect_column_median_to_be_between``.
        column: the column it checks (``None`` for table expectations).
        observed_value: GX's observed value, or for column-map expectations a dict of
            ``element_count``, ``unexpected_count``, ``unexpected_percent``, ``partial_unexpected_list``.
        kwargs: the expectation's arguments with suite parameters resolved (``batch_id`` dropped).
        is_limit: it is one of the baseline-limit expectations (not a data-quality one).
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


def _context():
    """A fresh ephemeral GX context, progress bars off."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

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
        observed = {k: res.get(k) for k in ("element_count", "unexpected_count", "unexpected_percent",
                                             "partial_unexpected_list")}
        pct = res.get("unexpected_percent")
        text = (f"{res.get('unexpected_count')} of {res.get('element_count')} values unexpected"
                + (f" ({pct:.1f}%)" if isinstance(pct, int | float) else "")
                + f", e.g. {(res.get('partial_unexpected_list') or [])[:5]}")
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if k != "column")
    where = (f" on column {column!r}" if column else "") + (f" ({args})" if args else "")
    return GxFailure(expectation=etype, column=column, observed_value=observed, kwargs=kwargs,
                     is_limit=(cfg.get("meta") or {}).get("perfwatch") == "limit",
                     text=f"{etype}{where} failed: {text}")


def _run(df: pd.DataFrame, suite_name: str, expectations: list, params: dict[str, Any] | None) -> GxOutcome:
    import great_expectations as gx

    ctx = _context()
    batch = (ctx.data_sources.add_pandas("perfwatch").add_dataframe_asset(suite_name)
             .add_batch_definition_whole_dataframe("whole"))
    suite = ctx.suites.add(gx.ExpectationSuite(name=suite_name))
    for e in expectations:
        suite.add_expectation(e)
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=suite_name, data=batch, suite=suite))
    result = vd.run(batch_parameters={"dataframe": df}, expectation_parameters=params or None,
                    result_format="SUMMARY")
    d = json.loads(json.dumps(result.to_json_dict(), default=str))  # plain JSON types only (XCom)
    return GxOutcome(success=bool(d["success"]), result_json=d,
                     failures=[_failure(r) for r in d["results"] if not r["success"]])


def step_time_expectations(min_rows: int, *, with_limit: bool, mostly: float = 0.9) -> list:
    """The expectations of the ``perfwatch_step_times`` suite (see :func:`validate_step_times`).

    The limit expectations take ``max_value={"$PARAMETER": "median_limit_ms"}``, resolved from
    ``expectation_parameters`` at validate time, and carry ``meta={"perfwatch": "limit"}``
    (their failures have ``is_limit=True``).
    """
    import great_expectations as gx

    E, col = gx.expectations, STEP_COLUMN
    exps = [E.ExpectTableRowCountToBeBetween(min_value=min_rows),
            E.ExpectColumnValuesToNotBeNull(column=col),
            E.ExpectColumnValuesToBeBetween(column=col, min_value=0, strict_min=True)]
    if with_limit:
        limit, meta = {"$PARAMETER": LIMIT_PARAM}, {"perfwatch": "limit"}
        exps += [E.ExpectColumnMedianToBeBetween(column=col, max_value=limit, meta=meta),
                 E.ExpectColumnValuesToBeBetween(column=col, max_value=limit, mostly=mostly, meta=meta)]
    return exps


def validate_step_times(step_times_ms: Sequence[float], *, min_rows: int, median_limit_ms: float | None,
                        mostly: float = 0.9) -> GxOutcome:
    """Validate measured step times (ms) with the ``perfwatch_step_times`` suite.

    Expectations on column ``step_time_ms``: row count >= ``min_rows``; no nulls; every value
    > 0; and, when ``median_limit_ms`` is given, median <= limit and at least ``mostly`` of the
    values <= limit (limit passed as suite parameter ``median_limit_ms``). NaN/None step times
    are validated as nulls, not rejected.

    Args:
        step_times_ms: shape (n,), per-step times in ms.
        min_rows: the configured number of measured steps (>= 0).
        median_limit_ms: limit derived from the baseline (ms, > 0), or ``None`` when there is no
            baseline (the two limit expectations are then left out).
        mostly: fraction of steps that must be <= the limit, in (0, 1].

    Returns:
        GxOutcome; each failure names the expectation, column and observed value.

    Raises:
        ValueError: ``min_rows < 0``, a non-finite or non-positive ``median_limit_ms``, or
            ``mostly`` outside (0, 1].
    """
    import pandas as pd

    if min_rows < 0:
        raise ValueError(f"min_rows = {min_rows}: must be >= 0")
    if median_limit_ms is not None and not (math.isfinite(median_limit_ms) and median_limit_ms > 0):
        raise ValueError(f"median_limit_ms = {median_limit_ms!r}: must be finite and > 0 ms (or None)")
    if not 0 < mostly <= 1:
        raise ValueError(f"mostly = {mostly}: must be in (0, 1]")
    df = pd.DataFrame({STEP_COLUMN: pd.Series([math.nan if v is None else v for v in step_times_ms],
                                              dtype="float64")})
    exps = step_time_expectations(min_rows, with_limit=median_limit_ms is not None, mostly=mostly)
    params = None if median_limit_ms is None else {LIMIT_PARAM: float(median_limit_ms)}
    return _run(df, STEP_SUITE, exps, params)


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
    exps = [E.ExpectTableRowCountToBeBetween(min_value=1)]
    exps += [E.ExpectColumnToExist(column=c) for c in OP_COLUMNS]
    if "op_name" in op_df.columns:
        exps.append(E.ExpectColumnValuesToNotBeNull(column="op_name"))
    numeric = sorted({c for c in op_df.columns if "self_time" in str(c)} | {"total_self_time_us", "occurrences"})
    exps += [E.ExpectColumnValuesToBeBetween(column=c, min_value=0) for c in numeric if c in op_df.columns]
    return _run(op_df, OP_SUITE, exps, None)


def render_data_docs(outcomes: Mapping[str, GxOutcome | Any], target_dir: str | Path) -> Path:
    """Write GX Data Docs HTML for validation results into ``target_dir``; return its index.html.

    Args:
        outcomes: name -> a :class:`GxOutcome`, a GX ``ExpectationSuiteValidationResult``, or
            its ``to_json_dict()`` dict. The name becomes the run name (and the file name) of
            the result's page under ``validations/<suite>/<name>/``.
        target_dir: directory for the site (created if missing); nothing is written elsewhere.

    Returns:
        Path of ``<target_dir>/index.html``.

    Raises:
        ValueError: ``outcomes`` is empty or an entry is not a validation result.
    """
    from great_expectations.core import ExpectationSuiteValidationResult
    from great_expectations.core.expectation_validation_result import ExpectationSuiteValidationResultSchema
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    if not outcomes:
        raise ValueError("outcomes: nothing to render")
    target = Path(target_dir).resolve()
    target.mkdir(parents=True, exist_ok=True)
    ctx = _context()
    ctx.variables.data_docs_sites = {"perfwatch": {  # replaces the default site (a temp dir)
        "class_name": "SiteBuilder",
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(target)}}}
    now = datetime.now(UTC)
    for name, item in outcomes.items():
        raw = item.result_json if isinstance(item, GxOutcome) else item
        if isinstance(raw, dict):
            try:
                raw = ExpectationSuiteValidationResultSchema().load(raw)
            except Exception as e:  # noqa: BLE001 - marshmallow/GX errors vary
                raise ValueError(f"outcomes[{name!r}]: not a GX validation result ({e})") from e
        if not isinstance(raw, ExpectationSuiteValidationResult):
            raise ValueError(f"outcomes[{name!r}]: not a GX validation result ({type(item).__name__})")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)) or "result"
        key = ValidationResultIdentifier(ExpectationSuiteIdentifier(raw.suite_name or "suite"),
                                         RunIdentifier(run_name=safe, run_time=now), safe)
        ctx.validation_results_store.set(key, raw)
    ctx.build_data_docs(site_names=["perfwatch"])
    return target / "index.html"
