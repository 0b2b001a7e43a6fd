"""The frames of the named queries (``tasks.store.queries.run_query``) are those the text-row builder gave before
PostgreSQL's results were fetched in binary and built from their declared types (issue 24): same columns,
dtypes and values, on SQLite and PostgreSQL, for every named query, with NULLs and empty answers."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy.exc import DataError

from tasks.store import get_engine, queries
from tests.helpers.builders import T0, add_failure, add_run

PG_URL = os.environ.get("PERFWATCH_TEST_DATABASE_URL")


def reference_frame(columns: list[str], rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """The frame builder as it was before issue 24's binary fetch: every column's kind inferred from its values."""
    data = {}
    by_column = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
    for col, column in zip(columns, by_column, strict=True):
        values = pd.Series(column, dtype=object)
        kind = pd.api.types.infer_dtype(values, skipna=True)
        if col.endswith("_at"):
            values = pd.to_datetime(values, utc=True, format="ISO8601")
        elif kind == "integer" and not values.isna().any():
            values = values.astype("int64")
        elif kind in ("floating", "decimal", "mixed-integer-float"):
            values = values.astype(float)
        elif kind == "integer" or values.isna().all():
            values = values.where(values.notna(), None)
        data[col] = values
    return pd.DataFrame(data, columns=columns)


def reference_run(name: str, db_url: str, **params: Any) -> pd.DataFrame:
    """A named query as run_query ran it before: SQLAlchemy text rows, then :func:`reference_frame`."""
    q = queries.named_queries()[name]
    stmt = text(q.sql).bindparams(*(bindparam(p.name, type_=queries._TYPES[p.type]) for p in q.params))
    values = {p.name: queries._coerce(name, p, params.get(p.name)) for p in q.params}
    with get_engine(db_url).connect() as conn:
        result = conn.execute(stmt, values)
        return reference_frame(list(result.keys()), result.fetchall())


def _story(db_url: str, tmp_path) -> dict[str, int]:
    """Two models over five days: a first run without a baseline (no ratio), passes, a regression in a new
    environment and version, failures (no version, no environment, no step times), another case."""
    ids = {"r1": add_run(db_url, tmp_path, "r1", verdict="no-baseline", median=10.0, day=0)}
    ids["r2"] = add_run(db_url, tmp_path, "r2", median=10.5, day=1, baseline=ids["r1"], ratio=1.05)
    ids["f"] = add_failure(db_url, tmp_path, "f", day=2)
    ids["r3"] = add_run(
        db_url, tmp_path, "r3", version="2", verdict="regression", median=13.0, day=3, fp="e", baseline=ids["r2"],
        ratio=1.3, ops=[("conv", "Conv2D", 300.0), ("new", "MatMul", 20.0)],
    )  # fmt: skip
    ids["b"] = add_run(db_url, tmp_path, "b", verdict="no-baseline", median=20.0, day=4, batch_size=32)
    ids["o1"] = add_run(db_url, tmp_path, "o1", model="other", verdict="no-baseline", median=99.0, day=3)
    ids["of"] = add_failure(db_url, tmp_path, "of", model="other", day=4, stage="pull-model-version")
    return ids


def _params(ids: dict[str, int], model: str) -> dict[str, dict[str, Any]]:
    """Parameters for every named query, about ``model`` (a model without runs gives the empty answers)."""
    window = {"since": T0, "until": T0 + dt.timedelta(days=30)}
    return {
        "env_changes": {**window, "model": None},
        "failures": {**window, "model": None, "limit": None},
        "gate": {"model": model, "version": "2", "case_name": None},
        "hardware": {"model": model, "case_name": None},
        "history": {"model": model, "case_name": None, "limit": None},
        "last_success": {"model": model},
        "regressions": {**window, "model": model},
        "runs": {"model": model, "limit": None},
        "sweep": {"model": model, "version": None},
        "top_op_regressions": {"run_a": ids["r2"], "run_b": ids["r3"], "limit": None},
        "version_compare": {"model": model, "version_a": "1", "version_b": "2", "case_name": None},
    }


@pytest.mark.parametrize("model", ["m", "other", "nobody"])
def test_every_named_query_gives_the_frame_it_gave(db_url, tmp_path, model):
    ids = _story(db_url, tmp_path)
    params = _params(ids, model)
    assert sorted(params) == sorted(queries.named_queries())  # a new named query needs its parameters here
    for name, p in params.items():
        got, want = queries.run_query(name, db_url, **p), reference_run(name, db_url, **p)
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=f"{name} {p}")


def test_answers_with_nulls_and_empty_answers(db_url, tmp_path):
    ids = _story(db_url, tmp_path)
    history = queries.run_query("history", db_url, model="m", case_name=None, limit=None)
    # ids with a NULL among them stay Python ints (never NaN), step times are floats with NaN for the failure
    assert history["baseline_run_id"].tolist() == [None, ids["r1"], None, ids["r2"], None]
    assert history["median_step_ms"].dtype == "float64" and history["median_step_ms"].isna().tolist()[2]
    assert str(history["started_at"].dtype).startswith("datetime64") and history["started_at"].dt.tz is not None
    assert history["started_at"].iloc[0] == T0
    empty = queries.run_query("history", db_url, model="nobody", case_name=None, limit=None)
    assert empty.empty and list(empty.columns) == list(history.columns)


@pytest.fixture
def pg_url() -> str:
    if not PG_URL:
        pytest.skip("PostgreSQL store tests need PERFWATCH_TEST_DATABASE_URL (set by .ci/run)")
    return PG_URL


# every type the PostgreSQL builder reads from the declared type, with and without NULLs, NULLs only, and the
# types it leaves to inference (numeric, json, a timestamptz outside *_at, a float column of NaNs)
TYPES_SQL = """
SELECT * FROM (VALUES
    (1, 10::bigint, NULL::integer, 1.5::float8, NULL::float8, 'NaN'::float8, 'a'::text, 'x'::varchar(8), true,
     NULL::text, 2.50::numeric, '{"k": 1}'::json, '7'::json, TIMESTAMPTZ '2026-01-01 02:00:00+00',
     TIMESTAMPTZ '2026-01-01 02:00:00.123456+05:30', NULL::timestamptz, TIMESTAMPTZ '2026-01-02 00:00:00+00'),
    (2, NULL::bigint, NULL::integer, NULL::float8, NULL::float8, 'NaN'::float8, NULL::text, 'y', NULL,
     NULL::text, NULL::numeric, NULL::json, '8'::json, NULL::timestamptz,
     TIMESTAMPTZ '1999-12-31 23:59:59.999999+00', NULL::timestamptz, TIMESTAMPTZ '1969-07-20 20:17:40+00')
) AS t(id, big, none_int, ratio, none_float, nan_float, name, label, flag, none_text, avg_num, doc, scalar_doc,
       started_at, finished_at, never_at, landed)
ORDER BY id
"""


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/New_York"])
def test_postgresql_columns_by_declared_type_match_the_inferred_ones(pg_url, zone):
    engine = create_engine(queries.normalize_url(pg_url), connect_args={"options": f"-c timezone={zone}"})
    try:
        for where in ("", "WHERE false", "WHERE id = 2"):
            sql = TYPES_SQL.replace("ORDER BY id", f"{where} ORDER BY id")
            got = queries._fetch_postgresql(engine, text(sql), {})
            with engine.connect() as conn:
                result = conn.execute(text(sql))
                want = reference_frame(list(result.keys()), result.fetchall())
            pd.testing.assert_frame_equal(got, want, check_exact=True, obj=f"{zone} {where!r}")
            # datetimes compare by instant: their zone (the session's, as psycopg gives them) is checked apart
            assert [str(d.tzinfo) for d in got["landed"]] == [str(d.tzinfo) for d in want["landed"]]
        both = queries._fetch_postgresql(engine, text(TYPES_SQL), {})
        assert both["big"].tolist() == [10, None] and both["id"].dtype == "int64"
        assert both["landed"].iloc[0] == dt.datetime(2026, 1, 2, tzinfo=dt.UTC)  # outside *_at: a datetime
        assert both["finished_at"].iloc[0] == pd.Timestamp("2025-12-31 20:30:00.123456", tz="UTC")
    finally:
        engine.dispose()


@pytest.mark.parametrize(("value", "message"), [("infinity", "too large"), ("-infinity", "too small")])
def test_postgresql_infinite_timestamp_is_refused_as_before(pg_url, value, message):
    sql = text(f"SELECT 1 AS id, TIMESTAMPTZ '{value}' AS started_at")
    with pytest.raises(DataError, match=message), get_engine(pg_url).connect() as conn:
        conn.execute(sql).fetchall()
    with pytest.raises(DataError, match=message):
        queries._fetch_postgresql(get_engine(pg_url), sql, {})
