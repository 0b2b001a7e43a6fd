"""The run's comparison kept on the run (migration 0009, ``tasks.store.writes.store_run``): history.sql and
regressions.sql read it there and give the rows their definitions before 0009 gave (joining ``comparisons`` and the
baseline run), with runs without a comparison, without a baseline, and a baseline that was a failed run replaced by
its retry; the upgrade backfills what the archive keeps."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
from alembic import command
from sqlalchemy import bindparam, select, text

from tasks.store import Run, RunComparison, migrate, queries, session_scope
from tasks.store.engine import get_engine
from tasks.store.schema import COMPARE_COLUMNS
from tests.helpers.builders import T0, add_failure, add_run
from tests.unit.store.test_migrations import _config

# the definitions before 0009 (issue 24): the comparison and the baseline's median looked up per result row
OLD = {
    "history": """
WITH picked AS (
    SELECT r.id, r.started_at, r.case_name, r.status, r.verdict, r.failed_stage, r.trigger, r.source,
           COALESCE(mv.version, r.version_requested) AS version, r.environment_id,
           CASE WHEN r.model_version_id IS NULL THEN 0 ELSE 1 END AS pulled,
           CASE WHEN r.environment_id IS NULL THEN 0 ELSE 1 END AS fingerprinted,
           r.median_step_ms, r.mean_step_ms, r.throughput_eps,
           c.method, c.metric, c.ratio, c.ci_low, c.ci_high, c.baseline_run_id
    FROM runs r
    JOIN models m ON m.id = r.model_id
    LEFT JOIN model_versions mv ON mv.id = r.model_version_id
    -- joined here, on the picked model's runs only (a join outside the LIMIT reads the whole table)
    LEFT JOIN comparisons c ON c.run_id = r.id
    WHERE m.name = :model
      AND (CAST(:case_name AS VARCHAR(64)) IS NULL OR r.case_name = :case_name)
    ORDER BY r.started_at DESC, r.id DESC
    LIMIT :limit
),
spread AS (
    -- the run's measured samples summarised at archive (step_quantiles, 0007): still there once thinned
    SELECT q.run_id, q.n AS n_measured, q.p10_ms AS p10_step_ms, q.p90_ms AS p90_step_ms
    FROM picked p
    -- CROSS JOIN keeps this join order on SQLite, so only the picked runs' rows are read
    CROSS JOIN step_quantiles q
    WHERE q.run_id = p.id AND q.phase = 'measured'
),
sequenced AS (
    SELECT p.*,
           LAG(p.version) OVER (PARTITION BY p.case_name, p.pulled ORDER BY p.started_at, p.id) AS prev_version,
           LAG(p.environment_id) OVER (PARTITION BY p.case_name, p.fingerprinted
                                       ORDER BY p.started_at, p.id) AS prev_environment_id
    FROM picked p
)
SELECT q.id AS run_id,
       q.started_at,
       q.case_name,
       q.version,
       q.trigger,
       q.source,
       q.status,
       q.verdict,
       q.failed_stage,
       q.median_step_ms,
       sp.p10_step_ms,
       sp.p90_step_ms,
       sp.n_measured,
       q.mean_step_ms,
       q.throughput_eps,
       q.method,
       q.metric,
       q.ratio,
       q.ci_low,
       q.ci_high,
       q.baseline_run_id,
       br.median_step_ms AS baseline_median_ms,
       e.comparability_key AS env_key,
       e.fingerprint_id,
       CASE WHEN q.pulled = 1 AND q.prev_version <> q.version THEN 1 ELSE 0 END AS version_changed,
       CASE WHEN q.fingerprinted = 1 AND q.prev_environment_id <> q.environment_id THEN 1 ELSE 0 END AS env_changed
FROM sequenced q
LEFT JOIN spread sp ON sp.run_id = q.id
LEFT JOIN runs br ON br.id = q.baseline_run_id
LEFT JOIN environments e ON e.id = q.environment_id
ORDER BY q.started_at, q.id;
""",
    "regressions": """
SELECT r.id AS run_id,
       r.started_at,
       m.name AS model,
       COALESCE(mv.version, r.version_requested) AS version,
       r.case_name,
       r.trigger,
       r.median_step_ms,
       c.baseline_run_id,
       br.median_step_ms AS baseline_median_ms,
       c.ratio,
       c.ci_low,
       c.ci_high,
       c.method,
       c.metric,
       e.comparability_key AS env_key,
       r.dag_id,
       r.dag_run_id
FROM runs r
JOIN models m ON m.id = r.model_id
LEFT JOIN model_versions mv ON mv.id = r.model_version_id
LEFT JOIN comparisons c ON c.run_id = r.id
LEFT JOIN runs br ON br.id = c.baseline_run_id
LEFT JOIN environments e ON e.id = r.environment_id
WHERE r.verdict = 'regression'
  AND r.started_at >= :since
  AND r.started_at < :until
  AND (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
ORDER BY r.started_at DESC, r.id DESC;
""",
}


def _old(db_url: str, name: str, **params: Any) -> pd.DataFrame:
    """The named query ``name`` by its definition before 0009, bound as run_query binds it."""
    declared = queries.named_queries()[name].params
    stmt = text(OLD[name]).bindparams(*(bindparam(p.name, type_=queries._TYPES[p.type]) for p in declared))
    values = {p.name: queries._coerce(name, p, params.get(p.name)) for p in declared}
    with get_engine(db_url).connect() as conn:
        result = conn.execute(stmt, values)
        return queries._frame(list(result.keys()), result.fetchall())


def _story(db_url: str, tmp_path) -> dict[str, int]:
    """m/train-bs16: a first run (no baseline), a pass against it, a failure, a regression in a new version and
    environment, a run compared against the failure (as a store may hold), then the failure retried and failed
    again (its row replaced); m/train-bs32: a regression against a run of its own; model 'other': a regression."""
    ids = {"r1": add_run(db_url, tmp_path, "r1", verdict="no-baseline", median=10.0, day=0)}
    ids["r2"] = add_run(db_url, tmp_path, "r2", median=10.5, day=1, baseline=ids["r1"], ratio=1.05)
    ids["f"] = add_failure(db_url, tmp_path, "f", day=2)
    ids["r3"] = add_run(
        db_url, tmp_path, "r3", version="2", verdict="regression", median=13.0, day=3, fp="e", baseline=ids["r2"],
        ratio=1.3,
    )  # fmt: skip
    ids["on_f"] = add_run(db_url, tmp_path, "on_f", median=12.0, day=4, fp="e", baseline=ids["f"], ratio=1.1)
    ids["f"] = add_failure(db_url, tmp_path, "f", day=2)  # the retry replaces the failed row (a new id)
    ids["b1"] = add_run(db_url, tmp_path, "b1", verdict="no-baseline", median=20.0, day=1, batch_size=32)
    ids["b2"] = add_run(
        db_url, tmp_path, "b2", verdict="regression", median=26.0, day=5, batch_size=32, baseline=ids["b1"], ratio=1.3
    )
    ids["o1"] = add_run(db_url, tmp_path, "o1", model="other", verdict="no-baseline", median=99.0, day=0)
    ids["o2"] = add_run(
        db_url, tmp_path, "o2", model="other", verdict="regression", median=130.0, day=2, baseline=ids["o1"], ratio=1.3
    )
    return ids


def _calls() -> list[tuple[str, dict[str, Any]]]:
    window = {"since": T0, "until": T0 + dt.timedelta(days=30)}
    return [
        ("history", {"model": "m", "case_name": None, "limit": None}),
        ("history", {"model": "m", "case_name": "train-bs16", "limit": None}),
        ("history", {"model": "m", "case_name": None, "limit": 3}),
        ("history", {"model": "other", "case_name": None, "limit": None}),
        ("history", {"model": "nobody", "case_name": None, "limit": None}),
        ("regressions", {**window, "model": None}),
        ("regressions", {**window, "model": "m"}),
        ("regressions", {"since": T0 + dt.timedelta(days=3), "until": T0 + dt.timedelta(days=4), "model": None}),
        ("regressions", {"since": T0 + dt.timedelta(days=40), "until": T0 + dt.timedelta(days=50), "model": None}),
    ]


def _comparable(name: str, params: dict[str, Any], df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without what changed since: a limited history's flags are the whole history's since 0011 (the oldest
    run of a case in the window is flagged against its previous run before it: tests/unit/store/test_history_facts.py),
    not the window's."""
    if name == "history" and params.get("limit") is not None:
        return df.drop(columns=["version_changed", "env_changed"])
    return df


def _same(db_url: str, name: str, params: dict[str, Any]) -> None:
    got, want = queries.run_query(name, db_url, **params), _old(db_url, name, **params)
    got = got.drop(columns=["throughput_def"], errors="ignore")  # 0013's column, after the old ones
    pd.testing.assert_frame_equal(
        _comparable(name, params, got), _comparable(name, params, want), check_exact=True, obj=f"{name} {params}"
    )


def test_history_and_regressions_keep_their_definition(db_url, tmp_path):
    ids = _story(db_url, tmp_path)
    for name, params in _calls():
        _same(db_url, name, params)
    regressions = queries.run_query("regressions", db_url, since=T0, until=T0 + dt.timedelta(days=30), model=None)
    assert list(regressions["run_id"]) == [ids["b2"], ids["r3"], ids["o2"]]
    assert list(regressions["baseline_median_ms"]) == [20.0, 10.5, 99.0]
    history = queries.run_query("history", db_url, model="m", case_name="train-bs16", limit=None).set_index("run_id")
    # the run compared against the replaced failure keeps its ratio and loses the baseline, as its comparison does
    assert history.loc[ids["on_f"], "baseline_run_id"] is None and history.loc[ids["on_f"], "ratio"] == 1.1
    assert pd.isna(history.loc[ids["r1"], "ratio"]) and history.loc[ids["r1"], "method"] is not None


def _kept(db_url: str) -> list[tuple]:
    with session_scope(db_url) as s:
        columns = [getattr(Run, c) for c in COMPARE_COLUMNS]
        return [tuple(r) for r in s.execute(select(Run.id, *columns).order_by(Run.id)).all()]


def test_migration_0009_backfills_what_the_archive_keeps(db_url, tmp_path):
    ids = _story(db_url, tmp_path)
    kept = _kept(db_url)
    with session_scope(db_url) as s:
        c = s.scalars(select(RunComparison).where(RunComparison.run_id == ids["r3"])).one()
        compared = (c.baseline_run_id, 10.5, c.ratio, c.ci_low, c.ci_high, c.method, c.metric)
    assert [r[1:] for r in kept if r[0] == ids["r3"]] == [compared] and c.baseline_run_id == ids["r2"]
    assert all(r[1:] == (None,) * len(COMPARE_COLUMNS) for r in kept if r[0] == ids["f"])  # no comparison
    command.downgrade(_config(db_url), "0008")
    migrate(db_url)
    assert _kept(db_url) == kept
    for name, params in _calls():
        _same(db_url, name, params)
