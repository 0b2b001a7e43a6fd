-- name: history
-- Step-time trend of one model (optionally one case) over time, versions and environments.
-- One row per run, oldest first (source: perfwatch, or external for `perfwatch ingest`): our-timer
-- median step time (ms; xprof's for external runs) with the p10 and p90 of the
-- run's measured samples (nearest rank, from step_quantiles: kept when raw samples are thinned), throughput (examples/s), the verdict with the
-- baseline-compare ratio and its interval (of the metric that decided: wall | cpu), the baseline run's median (the
-- comparison as kept on the run, compare_*: migration 0009), and flags where the
-- version or the environment fingerprint changed from the previous run of the same case that
-- got that far (runs that failed before the pull or the fingerprint are skipped for the flags).
-- Failed runs are listed with their failed stage and no step time.
-- params: model text, case_name text optional, limit integer
-- psql (text values quoted, NULL for "any", ALL for no limit):
--   psql "$DB" -v model="'tiny'" -v case_name=NULL -v limit=ALL -f sql/queries/history.sql
-- Python: tasks.store.queries.history("tiny") or run_query("history", url, model="tiny")
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
       q.baseline_median_ms,
       e.comparability_key AS env_key,
       e.fingerprint_id,
       CASE WHEN q.pulled = 1 AND q.prev_version <> q.version THEN 1 ELSE 0 END AS version_changed,
       CASE WHEN q.fingerprinted = 1 AND q.prev_environment_id <> q.environment_id THEN 1 ELSE 0 END AS env_changed
FROM sequenced q
LEFT JOIN spread sp ON sp.run_id = q.id
LEFT JOIN environments e ON e.id = q.environment_id
ORDER BY q.started_at, q.id;
