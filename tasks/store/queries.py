"""The named historical queries (``sql/queries/*.sql``) as pandas DataFrames, for the CLI and notebooks.

Each ``.sql`` file is plain SQL that runs unchanged on SQLite and PostgreSQL, with named
parameters (``:model``) that SQLAlchemy binds here and that ``psql -v model="'tiny'"`` fills in
by hand (the header of each file shows the psql line). Its header declares the parameters::

    -- params: model text, case_name text optional, limit integer

Types are ``text``, ``integer``, ``float`` and ``timestamp`` (timezone-aware, compared in UTC);
``optional`` ones may be None, meaning "any". Values are always bound, never formatted into the
SQL text. Columns named ``*_at`` come back as UTC ``datetime64`` on both databases.

Example::

    from tasks.store import queries
    df = queries.history("tiny", db_url="sqlite:////home/me/.perfwatch/perfwatch.db")
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import DateTime, Float, Integer, String, bindparam, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.sql.expression import Executable
from sqlalchemy.types import TypeEngine

from tasks import wire
from tasks.settings import Settings
from tasks.store import get_engine, redact
from tasks.store.engine import StoreError, normalize_url
from tasks.store.reads import verdict_reasons
from tasks.store.series import case_labels, step_counter_stats

QUERIES_DIR = Path(__file__).resolve().parents[2] / "sql" / "queries"
NO_LIMIT = 2**31 - 1
"""What ``limit=None`` binds to: the largest 32-bit integer, i.e. no limit on either database."""

_TYPES: dict[str, TypeEngine[Any]] = {
    "text": String(),
    "integer": Integer(),
    "float": Float(),
    "timestamp": DateTime(timezone=True),
}


class QueryError(ValueError):
    """A named query was asked for with a bad name or bad parameters, or the store refused it.

    The message names the query and the offending input; a database URL in it has its password
    masked."""


@dataclass(frozen=True)
class Param:
    """One declared parameter of a named query (from its ``-- params:`` header line)."""

    name: str
    type: str
    optional: bool


@dataclass(frozen=True)
class NamedQuery:
    """A ``sql/queries/<name>.sql`` file: its SQL text, declared parameters and description."""

    name: str
    path: Path
    sql: str
    params: tuple[Param, ...]
    description: str


def _parse(path: Path) -> NamedQuery:
    text_ = path.read_text()
    header = [ln[2:].strip() for ln in text_.splitlines() if ln.startswith("--")]
    params_line = next((h for h in header if h.startswith("params:")), None)
    if params_line is None:
        raise QueryError(f"{path}: no '-- params:' header line")
    params = []
    for item in filter(None, (p.strip() for p in params_line.removeprefix("params:").split(","))):
        words = item.split()
        if len(words) not in (2, 3) or words[1] not in _TYPES or (len(words) == 3 and words[2] != "optional"):
            raise QueryError(
                f"{path}: bad parameter declaration {item!r}; expected 'NAME TYPE [optional]' "
                f"with TYPE one of {sorted(_TYPES)}"
            )
        params.append(Param(words[0], words[1], len(words) == 3))
    # The description is the header between the "name:" line and the "params:" line.
    end = header.index(params_line)
    description = " ".join(h for h in header[:end] if not h.startswith("name:"))
    # Bind-parameter discovery must see only SQL, so the comment header is dropped.
    body = "\n".join(ln for ln in text_.splitlines() if not ln.lstrip().startswith("--"))
    return NamedQuery(name=path.stem, path=path, sql=body, params=tuple(params), description=description)


@cache
def named_queries() -> dict[str, NamedQuery]:
    """Every named query under ``sql/queries``, by file stem (``history``, ``regressions``...)."""
    return {p.stem: _parse(p) for p in sorted(QUERIES_DIR.glob("*.sql"))}


def _to_utc(name: str, value: Any) -> dt.datetime:
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError as e:
            raise QueryError(
                f"parameter {name}={value!r}: expected an ISO date or datetime "
                "such as 2026-01-31 or 2026-01-31T02:00:00+00:00"
            ) from e
    elif isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if not isinstance(value, dt.datetime):
        raise QueryError(f"parameter {name}={value!r}: expected a date or datetime")
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _coerce(query: str, p: Param, value: Any) -> Any:
    if value is None:
        if p.type == "integer" and p.name == "limit":
            return NO_LIMIT
        if not p.optional:
            raise QueryError(f"query {query!r}: parameter {p.name!r} ({p.type}) is required")
        return None
    if p.type == "timestamp":
        return _to_utc(p.name, value)
    try:
        if p.type == "integer":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if p.type == "float":
            return float(value)
    except (TypeError, ValueError) as e:
        raise QueryError(f"query {query!r}: parameter {p.name}={value!r} is not {p.type}") from e
    return str(value)


def _default_url(db_url: str | None) -> str:
    return db_url or Settings.from_env().database_url


def run_query(name: str, db_url: str | None = None, **params: Any) -> pd.DataFrame:
    """Run the named query ``sql/queries/<name>.sql`` with bound parameters; rows as a DataFrame.

    Args:
        name: file stem, e.g. ``"history"`` (see ``named_queries()``).
        db_url: SQLAlchemy URL of the store; default ``PERFWATCH_DATABASE_URL`` / the SQLite file
            under ``PERFWATCH_HOME``. The store must already be migrated.
        **params: the query's declared parameters. Optional ones default to None ("any");
            ``limit`` None means no limit; timestamps take datetimes, dates or ISO strings
            (naive values are UTC).

    Returns:
        The rows with the SQL's column names; ``*_at`` columns as UTC ``datetime64``. An empty
        result still has the columns.

    Raises:
        QueryError: unknown query name, unknown or missing parameter, a value of the wrong type,
            or a database error (its message carries the query name and the redacted URL).
        tasks.store.engine.StoreError: the store cannot be used at all (unreachable, lost, or migrated by a
            newer perfwatch): raised as it is, never as a QueryError of this one query.
    """
    queries = named_queries()
    if name not in queries:
        raise QueryError(f"unknown query {name!r}; the named queries are {sorted(queries)}")
    q = queries[name]
    declared = {p.name: p for p in q.params}
    unknown = set(params) - set(declared)
    if unknown:
        raise QueryError(f"query {name!r} takes parameters {sorted(declared)}, not {sorted(unknown)}")
    values = {p.name: _coerce(name, p, params.get(p.name)) for p in q.params}
    stmt = text(q.sql).bindparams(*(bindparam(p.name, type_=_TYPES[p.type]) for p in q.params))
    url = _default_url(db_url)
    try:
        make_url(url)
    except (ArgumentError, ValueError) as e:
        raise QueryError(
            f"query {name!r}: {url!r} is not a SQLAlchemy database URL "
            "(expected e.g. sqlite:///path/perfwatch.db or postgresql+psycopg://user@host/db)"
        ) from e
    try:
        engine = get_engine(url)
        if engine.dialect.name == "postgresql":
            return _fetch_postgresql(engine, stmt, values)
        with engine.connect() as conn:
            result = conn.execute(stmt, values)
            return _frame(list(result.keys()), result.fetchall())
    except StoreError:
        raise  # the store cannot be used at all: every command says so in one line, exit 3 (tasks.cli.main)
    except SQLAlchemyError as e:
        detail = str(getattr(e, "orig", None) or e).splitlines()[0]
        raise QueryError(f"query {name!r} on {redact(url)} failed: {type(e).__name__}: {detail}") from None


def _frame(columns: list[str], rows: Sequence[Sequence[Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with the same dtypes on both databases: ``*_at`` as UTC datetimes,
    numbers as float (PostgreSQL's NUMERIC too), whole-number columns as int64, or as Python
    ints and None when some are missing (never NaN for an id). Each column's kind is read from its
    values (``pandas.api.types.infer_dtype``); :func:`_fetch_postgresql` gives PostgreSQL's columns
    the same dtypes from their declared types."""
    # one transpose of the rows, not one pass over them per column (thousands of rows at scale, issue 24)
    by_column = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
    data = {col: _inferred_column(col, column) for col, column in zip(columns, by_column, strict=True)}
    return pd.DataFrame(data, columns=columns)


def _inferred_column(col: str, column: Sequence[Any]) -> pd.Series:
    """One column of :func:`_frame`, its dtype inferred from its values."""
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
    return values


# PostgreSQL type OIDs (pg_type.oid, fixed for built-in types) whose values give a frame column its dtype
# without looking at them; any other type goes through _inferred_column
_PG_INTEGER = frozenset({20, 21, 23})  # int8, int2, int4
_PG_FLOAT8 = 701
_PG_AS_OBJECTS = frozenset({16, 25, 1042, 1043})  # bool, text, bpchar, varchar: Python objects, None kept
_PG_TIMESTAMPTZ = 1184
_PG_EPOCH_US = 946_684_800_000_000
"""PostgreSQL's binary timestamps count microseconds from 2000-01-01 00:00 UTC; this is that instant in
microseconds from 1970-01-01 (the numpy/pandas epoch)."""
_PG_INFINITY = {2**63 - 1: "timestamp too large (after year 10K)", -(2**63): "timestamp too small (before year 1)"}
"""The binary ``timestamptz`` values of ``infinity`` and ``-infinity``, with the message psycopg refuses them with."""


@cache
def _binary_results_hook() -> Any:
    """The engine hook (``before_cursor_execute``) that gives a statement executed with the execution option
    ``perfwatch_binary_results`` binary results, ``timestamptz`` as integer microseconds since 2000-01-01 UTC
    (PostgreSQL's own representation, read by psycopg's int8 loader), on that statement's cursor only.
    psycopg is imported here, when a PostgreSQL store is queried."""
    from psycopg import pq
    from psycopg.types.numeric import Int8BinaryLoader

    def hook(conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, executemany: bool) -> None:
        if context is not None and context.execution_options.get("perfwatch_binary_results"):
            cursor.format = pq.Format.BINARY
            cursor.adapters.register_loader("timestamptz", Int8BinaryLoader)

    return hook


def _fetch_postgresql(engine: Engine, stmt: Executable, values: dict[str, Any]) -> pd.DataFrame:
    """Run ``stmt`` on a PostgreSQL store and build its frame column by column from the columns' declared types,
    with the dtypes and values :func:`_frame` gives the same rows fetched as text.

    A few thousand rows (``history``/``regressions`` at 100M samples, issue 24) decode in a third of the time
    in binary, and ``timestamptz`` arrives as integers that become a ``*_at`` column in one numpy step instead
    of one zone-aware ``datetime`` each (figures: docs/operations.md, "The store at scale"). The statement still goes
    through SQLAlchemy (bound parameters, errors, the pool); only its cursor's result format differs, and the
    rows are the driver's tuples, not a SQLAlchemy ``Row`` each: those stay tracked by the garbage collector
    and reached its oldest generation, so every few calls paid a full collection (120-190 ms at load ~3).
    """
    hook = _binary_results_hook()
    if not event.contains(engine, "before_cursor_execute", hook):
        event.listen(engine, "before_cursor_execute", hook)
    with engine.connect() as conn:
        result = conn.execute(stmt.execution_options(perfwatch_binary_results=True), values)
        columns = list(result.keys())
        cursor: Any = result.cursor  # psycopg's
        types = [d.type_code for d in cursor.description]
        zone = cursor.connection.info.timezone  # the session's TimeZone, as psycopg's own loader uses it
        dbapi_error = conn.dialect.loaded_dbapi.Error
        try:
            rows = cursor.fetchall()
            by_column = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
            for oid, column in zip(types, by_column, strict=True):
                infinite = [m for us, m in _PG_INFINITY.items() if us in column] if oid == _PG_TIMESTAMPTZ else []
                if infinite:  # refused as psycopg's own loader refuses it
                    raise conn.dialect.loaded_dbapi.DataError(infinite[0])
        except dbapi_error as e:  # a value the driver cannot load, reported as SQLAlchemy reports it
            raise DBAPIError.instance(None, None, e, dbapi_error) from e
        finally:
            result.close()
    data = {
        col: _typed_column(col, oid, column, zone) for col, oid, column in zip(columns, types, by_column, strict=True)
    }
    return pd.DataFrame(data, columns=columns)


def _typed_column(col: str, oid: int, column: Sequence[Any], zone: dt.tzinfo) -> Any:
    """One column of :func:`_fetch_postgresql` from its PostgreSQL type (``oid``), with the dtype
    :func:`_inferred_column` gives the same values: a numpy array, or a Series for objects (an object array would
    become pandas' ``str`` dtype). A column of NULLs only, or of a type not listed above, goes through
    :func:`_inferred_column`. ``timestamptz`` values are integer microseconds (:func:`_binary_results_hook`);
    outside ``*_at`` columns they become what psycopg would give, datetimes in the session's ``zone``."""
    if all(v is None for v in column):
        return _inferred_column(col, column)
    if oid == _PG_TIMESTAMPTZ:
        if not col.endswith("_at"):
            epoch = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
            column = [None if v is None else (epoch + dt.timedelta(microseconds=v)).astimezone(zone) for v in column]
            return _inferred_column(col, column)
        if None in column:
            nat = np.iinfo(np.int64).min  # numpy's NaT
            us = np.array([nat if v is None else v + _PG_EPOCH_US for v in column], dtype=np.int64)
        else:
            us = np.array(column, dtype=np.int64) + _PG_EPOCH_US
        return pd.DatetimeIndex(us.view("datetime64[us]")).tz_localize("UTC").array
    if col.endswith("_at"):
        return _inferred_column(col, column)
    if oid in _PG_INTEGER:
        return pd.Series(column, dtype=object) if None in column else np.array(column, dtype=np.int64)
    if oid == _PG_FLOAT8:
        floats = np.array(column, dtype=np.float64)  # None -> NaN
        return _inferred_column(col, column) if np.isnan(floats).all() else floats
    if oid in _PG_AS_OBJECTS:
        return pd.Series(column, dtype=object)
    return _inferred_column(col, column)


def history(
    model: str, case: str | None = None, db_url: str | None = None, *, limit: int | None = None
) -> pd.DataFrame:
    """Step-time trend of ``model`` (one case, or all): one row per run, oldest first.

    Columns include ``median_step_ms`` (ms, our timer), ``p10_step_ms``/``p90_step_ms`` (nearest
    rank over the run's measured samples), ``throughput_eps`` (examples/s), ``verdict``, the
    comparison ``ratio``/``ci_low``/``ci_high``, ``baseline_median_ms`` (the compared baseline run's
    median), ``version_changed`` and ``env_changed`` (1 where it differs from the previous run of
    that case; a run keeps its flags in a limited history), ``case_label`` (the case's readable label,
    :func:`with_case_labels`). ``limit`` keeps only the newest N runs. See ``sql/queries/history.sql``.
    """
    return with_case_labels(run_query("history", db_url, model=model, case_name=case, limit=limit), db_url, model=model)


def version_compare(
    model: str, version_a: str, version_b: str, case: str | None = None, db_url: str | None = None
) -> pd.DataFrame:
    """Version A vs version B of ``model`` per case and environment key: runs of each, mean median
    step time (ms), mean throughput (examples/s), ``ratio_b_to_a`` (above 1: B slower), newest run
    ids, ``case_label`` (:func:`with_case_labels`). See ``sql/queries/version_compare.sql``."""
    df = run_query(
        "version_compare", db_url, model=model, version_a=str(version_a), version_b=str(version_b), case_name=case
    )
    return with_case_labels(df, db_url, model=model)


def _window(since: Any, until: Any) -> tuple[dt.datetime, dt.datetime]:
    start = _to_utc("since", since)
    end = _to_utc("until", until) if until is not None else dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    if end <= start:
        raise QueryError(f"empty time window: until ({end.isoformat()}) is not after since ({start.isoformat()})")
    return start, end


def regressions(since: Any, until: Any = None, model: str | None = None, db_url: str | None = None) -> pd.DataFrame:
    """Runs with verdict ``regression`` started in [since, until) (UTC; until default: now), newest
    first, with ratio, interval and baseline median (ms) and ``case_label`` (:func:`with_case_labels`). See
    ``sql/queries/regressions.sql``."""
    start, end = _window(since, until)
    return with_case_labels(run_query("regressions", db_url, since=start, until=end, model=model), db_url)


def failures(
    since: Any, until: Any = None, model: str | None = None, db_url: str | None = None, *, limit: int | None = None
) -> pd.DataFrame:
    """Failed runs started in [since, until) (UTC), newest first, with ``failed_stage``, the stored
    ``error`` and ``reason`` (the error's first line: its cause line, ``cause: ...``, when the failure was
    recorded with one (``tasks.analysis.failures``), else the exception) and ``case_label``
    (:func:`with_case_labels`). See ``sql/queries/failures.sql``."""
    start, end = _window(since, until)
    df = with_case_labels(run_query("failures", db_url, since=start, until=end, model=model, limit=limit), db_url)
    df.insert(
        df.columns.get_loc("error"),
        "reason",
        df["error"].map(lambda e: e.strip().splitlines()[0] if isinstance(e, str) and e.strip() else None),
    )
    return df


def env_changes(since: Any, until: Any = None, model: str | None = None, db_url: str | None = None) -> pd.DataFrame:
    """Environment changes in [since, until) (UTC), oldest first: runs whose fingerprint differs
    from the previous run of the same model and case (``from_fingerprint``, ``to_fingerprint``). See
    ``sql/queries/env_changes.sql``; ``tasks.cli.history.env_changes`` names the fields that differ."""
    start, end = _window(since, until)
    return run_query("env_changes", db_url, since=start, until=end, model=model)


def fingerprint_data(fingerprint_ids: set[str], db_url: str | None = None) -> dict[str, dict[str, Any]]:
    """The stored fingerprint record (``environments.data``) of each of ``fingerprint_ids``; absent ids are
    left out."""
    from sqlalchemy import select

    from tasks.store import Environment, session_scope

    if not fingerprint_ids:
        return {}
    with session_scope(_default_url(db_url)) as s:
        rows = s.execute(
            select(Environment.fingerprint_id, Environment.data).where(Environment.fingerprint_id.in_(fingerprint_ids))
        ).all()
    return {fingerprint_id: env for fingerprint_id, env in rows}


def top_op_regressions(run_a: int, run_b: int, limit: int | None = 20, db_url: str | None = None) -> pd.DataFrame:
    """Ops whose self-time (µs, per profiled step where known) grew most from run ``run_a`` to
    ``run_b``, largest growth first. See ``sql/queries/top_op_regressions.sql``."""
    return run_query("top_op_regressions", db_url, run_a=run_a, run_b=run_b, limit=limit)


def first_line(e: Any) -> str | None:
    """The first line of a stored error (the exception), cut at 120 characters; None when empty."""
    if not isinstance(e, str) or not e.strip():
        return None
    line = e.strip().splitlines()[0]
    return line if len(line) <= 120 else line[:119] + "…"


AXIS_COLUMNS: tuple[str, ...] = ("mode", "batch_size", "precision", "xla", "strategy", "quantization")
"""The case axes read back from a run's ``params`` (its Case as JSON) by :func:`case_axes`."""


def case_axes(params: Any) -> dict[str, Any]:
    """The ``AXIS_COLUMNS`` of one run from its stored ``params`` (a dict, or its JSON text as SQLite
    returns it through a named query); an axis the params lack (a run stored before it existed) is the
    Case default (e.g. ``mode`` ``train``, ``precision`` ``fp32``), which is what that run measured.

    Raises:
        QueryError: ``params`` is neither a mapping nor JSON text of one.
    """
    import json

    from tasks.records import Case

    if isinstance(params, str):
        params = json.loads(params)
    if not isinstance(params, dict):
        raise QueryError(f"a run's params must be its Case as a JSON object, got {type(params).__name__}")
    return {k: params.get(k, Case.model_fields[k].default) for k in AXIS_COLUMNS}


SERIES_COLUMNS: tuple[str, ...] = (*AXIS_COLUMNS, "scenario", "tflite_threads", "deterministic", "device", "inputs")
"""Every axis that names a case, one column each (:func:`case_identity`): two runs of a model are of one case
exactly when they agree on all of them, and the cases of one sweep series agree on all but the swept axis."""


def case_identity(params: Any, case_name: str) -> dict[str, Any]:
    """The :data:`SERIES_COLUMNS` of one run: every part of its case name (``Case.name``) as an axis, from its
    stored ``params`` (as :func:`case_axes`; an axis they lack is the Case default) and ``case_name``:

    * the ``AXIS_COLUMNS``;
    * ``scenario`` as the name spells it, the server's rate or search included (``single-stream``,
      ``offline``, ``server-q100``, ``server-search-b10ms``: ``Case.name`` writes it, never a copy of its rule);
    * ``tflite_threads`` (``auto`` unset: the CPUs the runner may use), ``deterministic``;
    * ``device``: the hardware label, else the device kind (``gpu-h100``, ``cpu``, ``auto``);
    * ``inputs``: the name's ``in<8 hex>`` part, the hash of the input options (``default``: the model's own
      signature and synthetic batches).

    Raises:
        QueryError: as :func:`case_axes`, or scenario fields no Case accepts.
    """
    import json

    from pydantic import ValidationError

    from tasks.records import Case

    if isinstance(params, str):
        params = json.loads(params)
    axes = case_axes(params)

    def got(k: str) -> Any:
        return params.get(k, Case.model_fields[k].default)

    search = got("scenario") == "server" and bool(got("search_qps"))
    fields = {"mode", "scenario", "target_qps", "search_qps"} | (
        {"latency_percentile", "latency_bound_ms"} if search else set()
    )
    try:
        scenario = Case(model="m", **{k: got(k) for k in fields}).name.split("-", 2)[2:]
    except ValidationError as e:
        raise QueryError(f"run of case {case_name!r}: its params name no scenario a Case accepts: {e}") from e
    last = case_name.rsplit("-", 1)[-1]
    return {
        **axes,
        "scenario": scenario[0] if scenario else "single-stream",
        "tflite_threads": "auto" if got("tflite_threads") is None else got("tflite_threads"),
        "deterministic": bool(got("deterministic")),
        "device": got("hardware") or got("device"),
        "inputs": last if re.fullmatch(r"in[0-9a-f]{8}", last) else "default",
    }


def with_case_axes(df: pd.DataFrame, after: str) -> pd.DataFrame:
    """``df`` with its ``params`` column (runs' Case JSON) replaced by the ``AXIS_COLUMNS``, placed after
    column ``after``."""
    axes = pd.DataFrame([case_axes(p) for p in df["params"]], columns=list(AXIS_COLUMNS), index=df.index)
    df = df.drop(columns=["params"])
    at = df.columns.get_loc(after) + 1
    return pd.concat([df.iloc[:, :at], axes, df.iloc[:, at:]], axis=1)


def with_case_labels(
    df: pd.DataFrame, db_url: str | None = None, *, model: str | None = None, after: str = "case_name"
) -> pd.DataFrame:
    """``df`` (rows naming a case in column ``after``, and a model in column ``model`` or the ``model`` given)
    with a ``case_label`` column after ``after``: the case's readable label (``tasks.store.series.case_labels``:
    its newest run's), None for a case whose name says it all (``train-bs16``)."""
    labels = case_labels(_default_url(db_url), model)
    models = df["model"] if "model" in df.columns else [model] * len(df)
    out = df.copy()
    out.insert(
        out.columns.get_loc(after) + 1,
        "case_label",
        pd.Series([labels.get((m, c)) for m, c in zip(models, df[after], strict=True)], index=df.index, dtype=object),
    )
    return out


def _json_object(v: Any) -> dict[str, Any] | None:
    """A JSON column read through a named query: a dict (PostgreSQL), its JSON text (SQLite) or None; NaN and
    infinities as floats (:func:`tasks.wire.loads`)."""
    obj: dict[str, Any] | None = wire.loads(v) if isinstance(v, str) else wire.decode(v)
    return obj


def case_safe_mode(params: Any) -> bool:
    """A run's Keras ``safe_mode`` from its stored ``params`` (its Case; True when the params predate it)."""
    return bool((_json_object(params) or {}).get("safe_mode", True))


def case_metrics(params: Any) -> str | None:
    """A run's ``metrics:`` line from its stored ``params`` (``Case.metrics``, the figures its summaries lead
    with) as ``throughput,memory_usage,step_time``; None when its case has none (or the params predate it)."""
    got = (_json_object(params) or {}).get("metrics")
    return ",".join(str(m) for m in got) if isinstance(got, list) and got else None


def fed_summary(fed: Any) -> str | None:
    """One line of what a run fed its model, from its ``run_tables`` row ``inputs`` (``fed`` in
    ``runs.sql``; ``tasks.store.writes.RUN_INPUT_KEYS``): per input ``name shape dtype`` with the batch
    dimension first and an integer range as ``[min,max)``, then `` via <input_fn>`` for a pipeline, e.g.
    ``tokens 2x6 int32 [0,1000); mask 2x6 int32 [0,2)``. None when nothing was stored (a failed run, or one
    stored before it was kept)."""
    fed = _json_object(fed)
    if not fed or not fed.get("inputs"):
        return None
    parts = []
    for name, f in fed["inputs"].items():
        rng = f" [{f['min']:g},{f['max']:g})" if f.get("min") is not None and f.get("max") is not None else ""
        parts.append(f"{name} {'x'.join(str(d) for d in f['shape'])} {f['dtype']}{rng}")
    source = fed.get("input_source")
    return "; ".join(parts) + (f" via {source}" if source and source != "synthetic" else "")


def runs(model: str | None = None, last: int | None = None, db_url: str | None = None) -> pd.DataFrame:
    """The newest ``last`` runs (all when None) of ``model`` (or every model), oldest first:
    run_id, started_at, model, version, case, case_label (its readable label: :func:`with_case_labels`), the
    case's axes (``AXIS_COLUMNS``: mode, batch_size, precision, xla, strategy, quantization), inputs (what was
    fed: :func:`fed_summary`), safe_mode (Keras ``safe_mode`` of the case; False for a trusted model), status,
    trigger, median_step_ms (ms, our timer), n_measured (the measured steps it rests on),
    median_cpu_ms and median_wait_ms (the measured steps' process CPU time and run-queue wait, ms:
    :func:`tasks.store.series.step_counter_stats`; None where not recorded) each with its n (``median_cpu_n``,
    ``median_wait_n``: the steps that recorded it), throughput_eps and throughput_def (what it measures:
    ``tasks.records.THROUGHPUT_DEFS``), the
    infer/tflite per-batch latency percentiles with their intervals and n (:func:`latency_columns`), the
    scenario's own figures (:func:`scenario_columns`: a server run's rates and per-query percentiles, a search's
    max QPS),
    peak_rss_bytes and peak_device_bytes (the runner's peak host RSS and device memory, bytes; None where not
    recorded), metrics (the case's metrics: line, :func:`case_metrics`), verdict
    (``failed@<stage>`` for a failed run), metric (which per-step measure decided the verdict: wall | cpu;
    None without a comparison), reason (the verdict's reason in one sentence: ``tasks.store.reads.verdict_reasons``;
    None without one), error (first line). See ``sql/queries/runs.sql``."""
    raw = run_query("runs", db_url, model=model, limit=last)
    stats = step_counter_stats([int(i) for i in raw["run_id"]], _default_url(db_url))
    at = raw.columns.get_loc("median_step_ms") + 1
    for k, name in enumerate(("median_cpu_ms", "median_wait_ms", "median_cpu_n", "median_wait_n")):
        index = (0, 2, 1, 3)[k]  # counter_stats: (cpu, cpu n, wait, wait n); the medians first, beside the step's
        raw.insert(at + k, name, [stats.get(int(i), (None, None, None, None))[index] for i in raw["run_id"]])
    safe = [case_safe_mode(p) for p in raw["params"]]
    raw.insert(raw.columns.get_loc("peak_device_bytes") + 1, "metrics", [case_metrics(p) for p in raw["params"]])
    df = with_case_labels(with_case_axes(raw, after="case_name"), db_url)
    at = df.columns.get_loc(AXIS_COLUMNS[-1]) + 1
    fed = list(df.pop("fed"))
    df.insert(at, "inputs", [fed_summary(f) for f in fed])
    df.insert(at + 1, "safe_mode", safe)
    failed = df["status"] == "failed"
    df["verdict"] = df["verdict"].astype(object)
    df.loc[failed, "verdict"] = "failed@" + df.loc[failed, "failed_stage"].astype(str)
    df["error"] = df["error"].map(first_line)
    reasons = verdict_reasons([int(i) for i in df["run_id"]], _default_url(db_url))
    df.insert(df.columns.get_loc("metric") + 1, "reason", [reasons.get(int(i)) for i in df["run_id"]])
    df = df.rename(columns={"case_name": "case"}).drop(columns=["failed_stage"])
    at = df.columns.get_loc("throughput_eps") + 1
    for k, (name, values) in enumerate({**latency_columns(fed), **scenario_columns(fed)}.items()):
        df.insert(at + k, name, values)
    return df.iloc[::-1].reset_index(drop=True)


LATENCY_KEYS = ("p50", "p90", "p99")


def latency_columns(fed: list[Any]) -> dict[str, list[Any]]:
    """The per-batch latency percentiles of infer/tflite runs as ``runs`` columns, from each run's
    ``run_tables`` row ``inputs`` (``fed``; ``latency_ms``, ``tasks.analysis.percentiles.with_intervals``):
    ``latency_n`` (measured batches), then per percentile ``latency_p50_ms`` (nearest rank, ms, our timer)
    with ``latency_p50_low_ms`` and ``latency_p50_high_ms`` (its distribution-free interval at
    ``latency_confidence``) and ``latency_p50_estimable`` (the sample supports that two-sided interval),
    likewise p90 and p99, and ``latency_confidence``.

    A percentile the run is too short for (``estimable`` false: p99 under 299 batches at 95%) has no point,
    as the text output prints none (issue 27: the bound the sample supports, not a point it cannot): its
    ``_ms`` is None and its ``_low_ms`` / ``_high_ms`` are the one-sided bounds the sample has (at
    ``1 - (1 - confidence) / 2``; a p99 of 100 batches: the lower bound only). All None for a train run, a
    failed one or one stored without latency; the bounds, n and ``estimable`` None for one stored before
    intervals were kept (its point stays: nothing says what it rests on)."""
    cols: dict[str, list[Any]] = {"latency_n": []}
    for key in LATENCY_KEYS:
        cols |= {f"latency_{key}{col}": [] for col in ("_ms", "_low_ms", "_high_ms", "_estimable")}
    cols["latency_confidence"] = []
    for f in fed:
        lat = (_json_object(f) or {}).get("latency_ms") or {}
        ci = lat.get("ci") or {}
        cols["latency_n"].append(lat.get("n"))
        for key in LATENCY_KEYS:
            one = ci.get(key) or {}
            estimable = one.get("estimable")
            cols[f"latency_{key}_ms"].append(None if estimable is False else lat.get(key))
            cols[f"latency_{key}_low_ms"].append(one.get("low"))
            cols[f"latency_{key}_high_ms"].append(one.get("high"))
            cols[f"latency_{key}_estimable"].append(None if estimable is None else bool(estimable))
        cols["latency_confidence"].append(lat.get("confidence"))
    return cols


SERVER_KEYS = ("p50", "p90", "p99")


def serving_summary(fed: Any) -> dict[str, Any] | None:
    """A run's scenario summary (``latency_ms.serving`` of its ``run_tables`` row ``inputs``:
    ``tasks.analysis.serving.summarize``), None for a run without one (train, failed, stored before scenarios)."""
    lat = (_json_object(fed) or {}).get("latency_ms") or {}
    s = lat.get("serving")
    return s if isinstance(s, dict) else None


def scenario_columns(fed: list[Any]) -> dict[str, list[Any]]:
    """The scenario's own figures of each infer/tflite run as ``runs`` columns, from its ``run_tables`` row
    ``inputs`` (``latency_ms.serving``: ``tasks.analysis.serving.summarize``; stored with every run since
    scenarios, no migration):

    * ``scenario`` (single-stream, offline, server) and ``scenario_throughput_eps``: the scenario's own
      throughput (examples/s: single-stream over the batches' time, offline over the whole run, server the
      queries served per second at its reported point), beside ``throughput_eps`` (batch size over the median
      step, the same formula for every run);
    * the bound: ``latency_bound_ms``, ``latency_percentile`` and ``bound_outcome`` (met, missed, not
      estimable, invalid);
    * server only: ``server_offered_qps`` (the nominal rate of the reported point), ``server_issued_qps`` (what
      its schedule issued), ``server_achieved_qps`` (queries served per second), ``server_queries``,
      ``server_invalid`` (why the point is no valid measurement: its queue grew through the run; None: valid); the
      per-query latency percentiles ``server_p50_ms`` (nearest rank, ms, queueing included) with
      ``server_p50_low_ms``, ``server_p50_high_ms`` (95% interval) and ``server_p50_estimable``, likewise p90 and
      p99 (a percentile the point is too short for has no point, as :func:`latency_columns`, and an invalid point
      has none); and for a QPS search ``server_max_qps`` (the max's issued rate, q/s; None: no rate met),
      ``server_max_qps_target`` (its nominal rate),
      ``server_points`` (rates measured) and ``server_findings`` (codes of its warnings, ``,``-joined: an
      unstable search; None when there are none).

    All None for a run without a scenario summary; the server ones None for other scenarios."""
    names = ["scenario", "scenario_throughput_eps", "latency_bound_ms", "latency_percentile", "bound_outcome"]
    names += ["server_offered_qps", "server_issued_qps", "server_achieved_qps", "server_queries", "server_invalid"]
    for key in SERVER_KEYS:
        names += [f"server_{key}{col}" for col in ("_ms", "_low_ms", "_high_ms", "_estimable")]
    names += ["server_max_qps", "server_max_qps_target", "server_points", "server_findings"]
    cols: dict[str, list[Any]] = {n: [] for n in names}
    for f in fed:
        s = serving_summary(f) or {}
        server = s.get("scenario") == "server"
        row: dict[str, Any] = dict.fromkeys(names)
        if s:
            row |= {
                "scenario": s.get("scenario"),
                "scenario_throughput_eps": s.get("throughput_eps"),
                "latency_bound_ms": s.get("latency_bound_ms"),
                "latency_percentile": s.get("percentile"),
                "bound_outcome": s.get("outcome", None if s.get("met") is None else ("met" if s["met"] else "missed")),
            }
        if server:
            row |= {
                "server_offered_qps": s.get("target_qps"),
                "server_issued_qps": s.get("issued_qps"),
                "server_achieved_qps": s.get("achieved_qps"),
                "server_queries": s.get("queries"),
                "server_invalid": s.get("invalid"),
            }
            for key in SERVER_KEYS:  # an invalid point's percentiles are no result (they grow with the run)
                ci = {} if s.get("invalid") else (s.get("latency") or {}).get(key) or {}
                estimable = False if s.get("invalid") else ci.get("estimable")
                row |= {
                    f"server_{key}_ms": None if estimable is False else ci.get("point"),
                    f"server_{key}_low_ms": ci.get("low"),
                    f"server_{key}_high_ms": ci.get("high"),
                    f"server_{key}_estimable": None if estimable is None else bool(estimable),
                }
            if s.get("search"):
                codes = [x.get("code") for x in s.get("findings") or []]
                row |= {
                    "server_max_qps": s.get("max_qps"),
                    "server_max_qps_target": s.get("max_qps_target", s.get("max_qps")),
                    "server_points": len(s.get("points") or []),
                    "server_findings": ",".join(codes) if codes else None,
                }
        for n in names:
            cols[n].append(row[n])
    return cols


def sweep_points(model: str, version: str | None = None, db_url: str | None = None) -> pd.DataFrame:
    """The newest successful run of each case of ``model`` (of ``version`` when given), by case name:
    run_id, started_at, case_name, version, every axis that names the case (:data:`SERIES_COLUMNS`:
    :func:`case_identity`), median_step_ms and p99_step_ms (ms, our timer; nearest-rank p99 of the measured
    steps), n_measured (the measured steps) and throughput_eps (examples/s), then the scenario's own figures
    (:func:`scenario_columns` but ``scenario``, which is an axis here: its throughput, a server run's per-query
    percentiles and rates). The points of ``tasks.analysis.sweep.sweep``; see ``sql/queries/sweep.sql``."""
    df = run_query("sweep", db_url, model=model, version=version)
    axes = pd.DataFrame(
        [case_identity(p, n) for p, n in zip(df["params"], df["case_name"], strict=True)],
        columns=list(SERIES_COLUMNS),
        index=df.index,
    )
    scenario = {k: v for k, v in scenario_columns(list(df.pop("fed"))).items() if k != "scenario"}  # an axis too
    df = df.drop(columns=["params"])
    at = df.columns.get_loc("case_name") + 1
    df = pd.concat([df.iloc[:, :at], axes, df.iloc[:, at:]], axis=1)
    for name, values in scenario.items():
        df[name] = pd.Series(values, index=df.index, dtype=object)
    return df


def list_queries() -> pd.DataFrame:
    """The named queries: name, parameters (``name type[?]``), file, description."""
    rows = [
        {
            "name": q.name,
            "params": ", ".join(f"{p.name} {p.type}{'?' if p.optional else ''}" for p in q.params),
            "file": str(q.path.relative_to(QUERIES_DIR.parent.parent)),
            "description": q.description,
        }
        for q in named_queries().values()
    ]
    return pd.DataFrame(rows, columns=["name", "params", "file", "description"])


def sqlalchemy_url(uri: str) -> str:
    """A connection URI as a SQLAlchemy URL for the store.

    Airflow connections render PostgreSQL as ``postgres://`` or ``postgresql://``; both become
    ``postgresql+psycopg://`` (the driver perfwatch ships). Other URLs are returned unchanged.

    Raises:
        QueryError: ``uri`` is not a URL (the message shows it with the password masked).
    """
    try:
        return normalize_url(uri)
    except (ArgumentError, ValueError) as e:
        shown = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", uri)
        raise QueryError(f"{shown!r} is not a database URL (expected e.g. postgresql://user@host:5432/db)") from e


def hardware(model: str, case: str | None = None, db_url: str | None = None) -> pd.DataFrame:
    """The environments ``model`` (one case, or all) was measured on: one row per successful run, with its
    case, environment (``env_key``, ``environment_id``), version, ``median_step_ms`` (ms, our timer),
    ``throughput_eps`` (examples/s), ``peak_device_bytes`` / ``peak_rss_bytes`` (bytes) and ``started_at``
    (``sql/queries/hardware.sql``), plus ``energy_per_example_j`` (J/example, the telemetry summary's, where
    power was measured; else None). :func:`hardware_inputs` adds what the comparison needs.

    Raises:
        QueryError: as :func:`run_query`.
    """
    df = run_query("hardware", db_url, model=model, case_name=case)
    energy = _telemetry_energy([int(i) for i in df["run_id"]], db_url)
    df["energy_per_example_j"] = [energy.get(int(i)) for i in df["run_id"]]
    return df


def _telemetry_energy(run_ids: list[int], db_url: str | None) -> dict[int, float]:
    """J/example of each run whose telemetry summary (``run_tables`` 'telemetry') has one: the mean over its
    devices that report ``energy_per_example_j`` (tasks.analysis.telemetry.summarize), summed (each GPU's
    energy is its share of the examples' energy)."""
    from sqlalchemy import select

    from tasks.store import RunTable, session_scope

    if not run_ids:
        return {}
    with session_scope(_default_url(db_url)) as s:
        rows = s.execute(
            select(RunTable.run_id, RunTable.data).where(RunTable.tool == "telemetry", RunTable.run_id.in_(run_ids))
        ).all()
    out: dict[int, float] = {}
    for run_id, data in rows:
        devices = data.get("devices") if isinstance(data, dict) else None
        values = [
            d["energy_per_example_j"]
            for d in (devices.values() if isinstance(devices, dict) else devices or [])
            if isinstance(d, dict) and isinstance(d.get("energy_per_example_j"), int | float)
        ]
        if values:
            out[int(run_id)] = float(sum(values))
    return out


def hardware_inputs(
    model: str,
    case: str | None = None,
    db_url: str | None = None,
    *,
    pick: Callable[[list[dict[str, Any]], dict[int, dict[str, Any]]], Collection[int]] | None = None,
) -> tuple[pd.DataFrame, dict[int, dict[str, Any]], dict[int, list[float]]]:
    """What ``perfwatch hardware`` compares, reading raw step samples only for the runs the comparison pools:
    the hardware query's rows (``sql/queries/hardware.sql``: runs, no samples), the fingerprint record of each
    environment row (``{environment_id: data}``), then for the runs ``pick(rows, envs)`` names (run ids; default:
    every row's) their J/example (``energy_per_example_j``; None on the other rows) and their measured step
    times (``{run_id: [ms, ...]}``, our timer, step order). ``perfwatch hardware`` picks the runs of each case's
    compared version (``tasks.analysis.gains.compared_runs``): a model's other cases and versions are never read.

    Raises:
        QueryError: as :func:`run_query`. Whatever ``pick`` raises (ValueError for a bad ``--reference``).
    """
    from sqlalchemy import select

    from tasks.store import Environment, StepSample, session_scope

    df = run_query("hardware", db_url, model=model, case_name=case)
    env_ids = {int(i) for i in df["environment_id"]}
    envs: dict[int, dict[str, Any]] = {}
    if env_ids:
        with session_scope(_default_url(db_url)) as s:
            envs = dict(s.execute(select(Environment.id, Environment.data).where(Environment.id.in_(env_ids))).all())
    rows = df.to_dict(orient="records")
    run_ids = sorted({int(i) for i in (pick(rows, envs) if pick is not None else df["run_id"])})
    energy = _telemetry_energy(run_ids, db_url)
    df["energy_per_example_j"] = [energy.get(int(i)) for i in df["run_id"]]
    steps: dict[int, list[float]] = {i: [] for i in run_ids}
    if run_ids:
        with session_scope(_default_url(db_url)) as s:
            for run_id, ms in s.execute(
                select(StepSample.run_id, StepSample.step_time_ms)
                .where(StepSample.run_id.in_(run_ids), StepSample.phase == "measured")
                .order_by(StepSample.run_id, StepSample.step)
            ):
                steps[int(run_id)].append(float(ms))
    return df, envs, steps
