"""The run facts the archive keeps for the named queries (migration 0008, ``tasks.store.writes.store_run``): each
run's previous environment (env_changes.sql) and each model's newest success (last_success.sql) give the rows the
queries' old definitions (window functions and aggregates over all runs) give, runs archived out of order too."""

from __future__ import annotations

import datetime as dt

import pandas as pd
from alembic import command
from sqlalchemy import bindparam, select, text

from tasks.store import Model, Run, migrate, queries, session_scope
from tasks.store.engine import get_engine
from tests.helpers.builders import T0, add_failure, add_run
from tests.unit.store.test_migrations import _config

# the definitions the queries had before 0008 (issue 24): computed from all runs at query time
OLD_ENV_CHANGES = """
WITH sequenced AS (
    SELECT r.id AS run_id, r.model_id, r.case_name, r.started_at, r.environment_id,
           COALESCE(mv.version, r.version_requested) AS version,
           LAG(r.id) OVER (PARTITION BY r.model_id, r.case_name ORDER BY r.started_at, r.id) AS prev_run_id,
           LAG(r.environment_id) OVER (PARTITION BY r.model_id, r.case_name
                                       ORDER BY r.started_at, r.id) AS prev_environment_id
    FROM runs r
    JOIN models m ON m.id = r.model_id
    LEFT JOIN model_versions mv ON mv.id = r.model_version_id
    WHERE r.environment_id IS NOT NULL AND r.started_at < :until
)
SELECT s.started_at, m.name AS model, s.case_name, s.version, s.prev_run_id, s.run_id,
       pe.fingerprint_id AS from_fingerprint, ne.fingerprint_id AS to_fingerprint,
       pe.comparability_key AS from_env_key, ne.comparability_key AS to_env_key,
       CASE WHEN pe.comparability_key <> ne.comparability_key THEN 1 ELSE 0 END AS affects_comparability
FROM sequenced s
JOIN models m ON m.id = s.model_id
JOIN environments pe ON pe.id = s.prev_environment_id
JOIN environments ne ON ne.id = s.environment_id
WHERE s.prev_environment_id <> s.environment_id AND s.started_at >= :since
ORDER BY s.started_at, s.run_id
"""
OLD_LAST_SUCCESS = """
SELECT m.name AS model, MAX(r.finished_at) AS last_success_at, COUNT(r.id) AS successful_runs
FROM models m JOIN runs r ON r.model_id = m.id
WHERE r.status = 'success'
GROUP BY m.name ORDER BY m.name
"""
WINDOW = {"since": T0, "until": T0 + dt.timedelta(days=30)}


def _old(db_url: str, sql: str, **params) -> pd.DataFrame:
    stmt = text(sql).bindparams(*(bindparam(k, type_=queries._TYPES["timestamp"]) for k in params))
    with get_engine(db_url).connect() as conn:
        result = conn.execute(stmt, params)
        return queries._frame(list(result.keys()), result.fetchall())


def _out_of_order_story(db_url: str, tmp_path) -> dict[str, int]:
    """m/train-bs16 in environments f, e, e (days 0, 2, 4), then day 3 in f and day 1 in e archived late (an
    ingest of older jobs), a failure between them; m/train-bs32 in e on day 2 and in f on day 2 (a tie on
    started_at, ordered by id); model 'other' in f; model 'down' with failures only."""
    ids = {"a0": add_run(db_url, tmp_path, "a0", day=0, fp="f")}
    ids["a2"] = add_run(db_url, tmp_path, "a2", day=2, fp="e")
    ids["a4"] = add_run(db_url, tmp_path, "a4", day=4, fp="e")
    ids["fail"] = add_failure(db_url, tmp_path, "fail", day=3)
    ids["a3"] = add_run(db_url, tmp_path, "a3", day=3, fp="f")  # late: a4's previous is now a3 (f)
    ids["a1"] = add_run(db_url, tmp_path, "a1", day=1, fp="e")  # late: a2's previous is now a1 (e)
    ids["b2"] = add_run(db_url, tmp_path, "b2", day=2, fp="e", batch_size=32)
    ids["b2f"] = add_run(db_url, tmp_path, "b2f", day=2, fp="f", batch_size=32)
    ids["o"] = add_run(db_url, tmp_path, "o", model="other", day=1, fp="f")
    add_failure(db_url, tmp_path, "down", model="down", day=1)
    return ids


def test_env_changes_and_last_success_keep_their_definition_with_runs_archived_out_of_order(db_url, tmp_path):
    ids = _out_of_order_story(db_url, tmp_path)
    changes = queries.run_query("env_changes", db_url, **WINDOW, model=None)
    # a1 (f -> e), a3 (e -> f), a4 (f -> e), b2f (e -> f); a2 follows a1 in e now, so it is no change
    assert list(changes["run_id"]) == [ids["a1"], ids["b2f"], ids["a3"], ids["a4"]]
    assert list(changes["prev_run_id"]) == [ids["a0"], ids["b2"], ids["a2"], ids["a3"]]
    pd.testing.assert_frame_equal(changes, _old(db_url, OLD_ENV_CHANGES, **WINDOW))
    narrow = queries.run_query("env_changes", db_url, since=T0 + dt.timedelta(days=2), until=T0 + dt.timedelta(days=4))
    pd.testing.assert_frame_equal(
        narrow, _old(db_url, OLD_ENV_CHANGES, since=T0 + dt.timedelta(days=2), until=T0 + dt.timedelta(days=4))
    )
    last = queries.run_query("last_success", db_url, model=None)
    assert list(last["model"]) == ["m", "other"] and list(last["successful_runs"]) == [7, 1]  # 'down': none
    pd.testing.assert_frame_equal(last, _old(db_url, OLD_LAST_SUCCESS))
    one = queries.run_query("last_success", db_url, model="other")
    assert list(one["successful_runs"]) == [1]


def _facts(db_url: str) -> tuple[list, list]:
    with session_scope(db_url) as s:
        runs = s.execute(select(Run.id, Run.prev_run_id, Run.prev_environment_id).order_by(Run.id)).all()
        models = s.execute(select(Model.name, Model.successful_runs).order_by(Model.id)).all()
    return [tuple(r) for r in runs], [tuple(m) for m in models]


def test_migration_0008_backfills_the_facts_the_archive_keeps(db_url, tmp_path):
    _out_of_order_story(db_url, tmp_path)
    kept = _facts(db_url)
    assert sum(1 for r in kept[0] if r[1] is not None) == 5  # every successful run but the first of each case
    command.downgrade(_config(db_url), "0007")
    migrate(db_url)
    assert _facts(db_url) == kept
