"""What history.sql reads from the run's own row (migration 0011, ``tasks.store.writes.store_run``): its previous
pulled run's model version and previous environment (the flags, without a window sort) and its measured n, p10 and
p90 (without a ``step_quantiles`` lookup). A whole history gives the frame its definition before 0011 gave, with runs
archived out of order, failures (no version, no environment), a run that failed after its pull (a version, no
environment), thinned runs and a run whose summary ``perfwatch db thin`` had to write; with a limit, the oldest run
of a case in the window keeps the flags it has in the whole history (before 0011 it was never flagged)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
from alembic import command
from sqlalchemy import bindparam, delete, select, text, update

from tasks.store import Run, StepQuantiles, migrate, queries, session_scope
from tasks.store.engine import get_engine
from tasks.store.retention import thin_samples
from tasks.store.writes import backfill_run_facts
from tests.helpers.builders import T0, add_failure, add_run
from tests.unit.store.test_migrations import _config

# history.sql before 0011 (issue 24 item 5): the flags from two window sorts over the picked runs, the spread
# looked up per run in step_quantiles
OLD_HISTORY = """
WITH picked AS (
    SELECT r.id, r.started_at, r.case_name, r.status, r.verdict, r.failed_stage, r.trigger, r.source,
           COALESCE(mv.version, r.version_requested) AS version, r.environment_id,
           CASE WHEN r.model_version_id IS NULL THEN 0 ELSE 1 END AS pulled,
           CASE WHEN r.environment_id IS NULL THEN 0 ELSE 1 END AS fingerprinted,
           r.median_step_ms, r.mean_step_ms, r.throughput_eps,
           r.compare_method AS method, r.compare_metric AS metric, r.compare_ratio AS ratio,
           r.compare_ci_low AS ci_low, r.compare_ci_high AS ci_high, r.compare_baseline_run_id AS baseline_run_id,
           r.compare_baseline_median_ms AS baseline_median_ms
    FROM runs r
    JOIN models m ON m.id = r.model_id
    LEFT JOIN model_versions mv ON mv.id = r.model_version_id
    WHERE m.name = :model
      AND (CAST(:case_name AS VARCHAR(64)) IS NULL OR r.case_name = :case_name)
    ORDER BY r.started_at DESC, r.id DESC
    LIMIT :limit
),
spread AS (
    SELECT q.run_id, q.n AS n_measured, q.p10_ms AS p10_step_ms, q.p90_ms AS p90_step_ms
    FROM picked p
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
SELECT q.id AS run_id, q.started_at, q.case_name, q.version, q.trigger, q.source, q.status, q.verdict,
       q.failed_stage, q.median_step_ms, sp.p10_step_ms, sp.p90_step_ms, sp.n_measured, q.mean_step_ms,
       q.throughput_eps, q.method, q.metric, q.ratio, q.ci_low, q.ci_high, q.baseline_run_id, q.baseline_median_ms,
       e.comparability_key AS env_key, e.fingerprint_id,
       CASE WHEN q.pulled = 1 AND q.prev_version <> q.version THEN 1 ELSE 0 END AS version_changed,
       CASE WHEN q.fingerprinted = 1 AND q.prev_environment_id <> q.environment_id THEN 1 ELSE 0 END AS env_changed
FROM sequenced q
LEFT JOIN spread sp ON sp.run_id = q.id
LEFT JOIN environments e ON e.id = q.environment_id
ORDER BY q.started_at, q.id
"""
FLAGS = ["version_changed", "env_changed"]
FACTS = ("prev_run_id", "prev_environment_id", "prev_model_version_id", "n_measured", "p10_step_ms", "p90_step_ms")


def _old(db_url: str, **params: Any) -> pd.DataFrame:
    """history by its definition before 0011, bound and framed as run_query does (PostgreSQL's typed frame too)."""
    declared = queries.named_queries()["history"].params
    stmt = text(OLD_HISTORY).bindparams(*(bindparam(p.name, type_=queries._TYPES[p.type]) for p in declared))
    values = {p.name: queries._coerce("history", p, params.get(p.name)) for p in declared}
    engine = get_engine(db_url)
    if engine.dialect.name == "postgresql":
        return queries._fetch_postgresql(engine, stmt, values)
    with engine.connect() as conn:
        result = conn.execute(stmt, values)
        return queries._frame(list(result.keys()), result.fetchall())


def _history(db_url: str, model: str = "m", case_name: str | None = None, limit: int | None = None) -> pd.DataFrame:
    return queries.run_query("history", db_url, model=model, case_name=case_name, limit=limit)


def _story(db_url: str, tmp_path) -> dict[str, int]:
    """m/train-bs16: v1 in f (day 0), v2 in e (days 2, 5), a failure (day 3), then days 4 (v1 in f) and 1 (v2 in e)
    archived late, as ``perfwatch ingest`` stores older jobs: a5's previous run is now a4 (v1, f), a2's is a1 (v2,
    e); a failure on day 6 that got past the pull (v1, no environment: the version chain has it, the environment
    chain not), then a7 (v2 in e). m/train-bs32: v1 in e and v2 in f on day 2 (a tie on started_at, by id). Model
    'other': one run."""
    ids = {"a0": add_run(db_url, tmp_path, "a0", day=0, fp="f")}
    ids["a2"] = add_run(db_url, tmp_path, "a2", day=2, version="2", fp="e", median=12.0)
    ids["a5"] = add_run(db_url, tmp_path, "a5", day=5, version="2", fp="e", median=12.5)
    ids["fail"] = add_failure(db_url, tmp_path, "fail", day=3)
    ids["a4"] = add_run(db_url, tmp_path, "a4", day=4, fp="f", median=10.5)  # late
    ids["a1"] = add_run(db_url, tmp_path, "a1", day=1, version="2", fp="e", median=11.0)  # late
    ids["pulled"] = add_failure(db_url, tmp_path, "pulled", day=6, stage="env-fingerprint")
    with get_engine(db_url).begin() as conn:  # a failure after the pull, as a store may hold (bench/store.py)
        v1 = conn.scalar(select(Run.model_version_id).where(Run.id == ids["a0"]))
        conn.execute(update(Run).where(Run.id == ids["pulled"]).values(model_version_id=v1))
        backfill_run_facts(conn)  # the row was changed outside the archive
    ids["a7"] = add_run(db_url, tmp_path, "a7", day=7, version="2", fp="e")
    ids["b2"] = add_run(db_url, tmp_path, "b2", day=2, fp="e", batch_size=32)
    ids["b2f"] = add_run(db_url, tmp_path, "b2f", day=2, version="2", fp="f", batch_size=32)
    ids["o"] = add_run(db_url, tmp_path, "o", model="other", day=1, fp="f")
    return ids


WHOLE = [
    {"model": "m"},
    {"model": "m", "case_name": "train-bs16"},
    {"model": "m", "case_name": "train-bs32"},
    {"model": "other"},
    {"model": "nobody"},
]


def _same_as_before(db_url: str) -> None:
    for params in WHOLE:
        got = _history(db_url, **params).drop(columns=["throughput_def"])  # 0013's column, the others as before
        pd.testing.assert_frame_equal(got, _old(db_url, **params), check_exact=True, obj=params)


def test_a_whole_history_keeps_its_definition(db_url, tmp_path):
    ids = _story(db_url, tmp_path)
    _same_as_before(db_url)
    bs16 = _history(db_url, case_name="train-bs16").set_index("run_id")
    assert list(bs16.index) == [ids[k] for k in ("a0", "a1", "a2", "fail", "a4", "a5", "pulled", "a7")]
    assert list(bs16["version_changed"]) == [0, 1, 0, 0, 1, 1, 1, 1]  # pulled (v1) follows a5 (v2), a7 follows it
    assert list(bs16["env_changed"]) == [0, 1, 0, 0, 1, 1, 0, 0]  # a7 follows a5 (e): pulled has no environment
    # make_records' measured steps: median + 0.00, 0.01, ... 0.09 ms; nearest ranks 1 and 9 of 10
    assert bs16.loc[ids["a4"], ["n_measured", "p10_step_ms", "p90_step_ms"]].tolist() == [10, 10.5, 10.5 + 8 * 0.01]
    assert bs16.loc[ids["fail"], "n_measured"] is None
    assert bs16.loc[ids["fail"], ["p10_step_ms", "p90_step_ms"]].isna().all()
    bs32 = _history(db_url, case_name="train-bs32")
    assert list(bs32["run_id"]) == [ids["b2"], ids["b2f"]] and list(bs32["env_changed"]) == [0, 1]


def test_a_limited_history_flags_its_oldest_runs_against_their_previous_run(db_url, tmp_path):
    """With a limit, each row is the whole history's row: the oldest run of a case in the window is flagged against
    its previous run before the window, as the whole history and ``env_changes`` flag it. Before 0011 the window
    sorts saw no previous run for it and flagged nothing: a change could vanish by asking for fewer rows."""
    ids = _story(db_url, tmp_path)
    for params in WHOLE[:3]:
        whole = _history(db_url, **params)
        for limit in (1, 2, 3, 5, len(whole)):
            got = _history(db_url, **params, limit=limit)
            # the values of the whole history's rows (a column's dtype follows its NULLs: ids without one are int64)
            pd.testing.assert_frame_equal(
                got, whole.tail(limit).reset_index(drop=True), check_exact=True, check_dtype=False
            )
            old = _old(db_url, **params, limit=limit)  # the same but the flags
            new = [*FLAGS, "throughput_def"]  # 0013's column is not in the old definition either
            pd.testing.assert_frame_equal(got.drop(columns=new), old.drop(columns=FLAGS), check_exact=True)
    # the newest 3 runs of train-bs16: a5 (v2, e after a4's v1, f), pulled, a7; a5 changed both, as it always did
    got = _history(db_url, case_name="train-bs16", limit=3).set_index("run_id")
    old = _old(db_url, model="m", case_name="train-bs16", limit=3).set_index("run_id")
    assert list(got.index) == [ids["a5"], ids["pulled"], ids["a7"]]
    assert got.loc[ids["a5"], FLAGS].tolist() == [1, 1] and old.loc[ids["a5"], FLAGS].tolist() == [0, 0]


def test_thinned_runs_and_a_summary_written_by_thin_read_as_before(db_url, tmp_path):
    ids = _story(db_url, tmp_path)
    before = _history(db_url)
    # a run stored with its samples but no summary (a bulk load): thin writes it, and the run's copy with it
    with get_engine(db_url).begin() as conn:
        conn.execute(delete(StepQuantiles).where(StepQuantiles.run_id == ids["a1"]))
        conn.execute(update(Run).where(Run.id == ids["a1"]).values(n_measured=None, p10_step_ms=None))
    unsummarised = _history(db_url).set_index("run_id")
    assert unsummarised.loc[ids["a1"], ["p10_step_ms", "p90_step_ms"]].isna().all()
    _same_as_before(db_url)
    report = thin_samples(db_url, 1, now=T0 + dt.timedelta(days=4, hours=12))
    assert report.runs > 0 and report.summarised == 3  # a1's three phases
    pd.testing.assert_frame_equal(_history(db_url), before, check_exact=True)
    _same_as_before(db_url)


def _facts(db_url: str) -> list[tuple]:
    with session_scope(db_url) as s:
        return [tuple(r) for r in s.execute(select(Run.id, *(getattr(Run, c) for c in FACTS)).order_by(Run.id))]


def test_migration_0011_and_the_bulk_backfill_give_what_the_archive_keeps(db_url, tmp_path):
    ids = _story(db_url, tmp_path)
    kept = _facts(db_url)
    by_id = {r[0]: dict(zip(FACTS, r[1:], strict=True)) for r in kept}
    with session_scope(db_url) as s:
        v1, v2 = (s.scalar(select(Run.model_version_id).where(Run.id == ids[k])) for k in ("a0", "a5"))
    # a7 follows a5 in the environment chain, the failure after the pull in the version chain
    assert (by_id[ids["a7"]]["prev_run_id"], by_id[ids["a7"]]["prev_model_version_id"]) == (ids["a5"], v1)
    assert by_id[ids["pulled"]]["prev_model_version_id"] == v2 != v1 and by_id[ids["pulled"]]["prev_run_id"] is None
    assert by_id[ids["a5"]]["prev_model_version_id"] == v1  # a4, archived after a5
    assert by_id[ids["fail"]]["n_measured"] is None and by_id[ids["a4"]]["n_measured"] == 10
    command.downgrade(_config(db_url), "0010")
    migrate(db_url)
    assert _facts(db_url) == kept
    _same_as_before(db_url)
    with get_engine(db_url).begin() as conn:
        conn.execute(update(Run).values(prev_model_version_id=None, n_measured=None, p10_step_ms=None))
        backfill_run_facts(conn)
    assert _facts(db_url) == kept
