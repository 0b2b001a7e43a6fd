-- name: history
-- Step-time trend of one model (optionally one case) over time, versions and environments.
-- One row per run, oldest first (source: perfwatch, or external for `perfwatch ingest`): our-timer
-- median step time (ms; xprof's for external runs) with the p10 and p90 of the
-- run's measured samples (nearest rank, from the run's measured summary: kept when raw samples are thinned),
-- throughput (examples/s) with its definition (0013: median_step, server_achieved, offline_run; two are never one
-- series), the verdict with the baseline-compare ratio and its interval (of the metric that
-- decided: wall | cpu), the baseline run's median (the comparison as kept on the run, compare_*: migration 0009),
-- and flags where the version or the environment fingerprint changed from the previous run of the same case that
-- got that far (runs that failed before the pull or the fingerprint are skipped for the flags).
-- Failed runs are listed with their failed stage and no step time.
-- Every value is read from the run's own row (0011: its previous pulled run's model version and its previous
-- environment, kept by the archive as 0008 keeps the environment; its measured n, p10 and p90), so a run shows
-- the same flags whatever the window: with a limit, the oldest run of a case in the window is flagged against its
-- previous run before the window (it was compared with nothing before 0011, so never flagged).
-- params: model text, case_name text optional, limit integer
-- psql (text values quoted, NULL for "any", ALL for no limit):
--   psql "$DB" -v model="'tiny'" -v case_name=NULL -v limit=ALL -f sql/queries/history.sql
-- Python: tasks.store.queries.history("tiny") or run_query("history", url, model="tiny")
WITH picked AS (
    SELECT r.id, r.started_at, r.case_name, r.status, r.verdict, r.failed_stage, r.trigger, r.source,
           r.version_requested, r.model_version_id, r.environment_id,
           r.prev_model_version_id, r.prev_environment_id,
           r.median_step_ms, r.n_measured, r.p10_step_ms, r.p90_step_ms, r.mean_step_ms, r.throughput_eps,
           r.throughput_def,
           r.compare_method, r.compare_metric, r.compare_ratio, r.compare_ci_low, r.compare_ci_high,
           r.compare_baseline_run_id, r.compare_baseline_median_ms
    FROM runs r
    JOIN models m ON m.id = r.model_id
    WHERE m.name = :model
      AND (CAST(:case_name AS VARCHAR(64)) IS NULL OR r.case_name = :case_name)
    ORDER BY r.started_at DESC, r.id DESC
    LIMIT :limit
)
SELECT p.id AS run_id,
       p.started_at,
       p.case_name,
       COALESCE(mv.version, p.version_requested) AS version,
       p.trigger,
       p.source,
       p.status,
       p.verdict,
       p.failed_stage,
       p.median_step_ms,
       p.p10_step_ms,
       -- runs.p90_step_ms is the measured summary's p90 (0010); shown, as the summary's, only beside its n
       CASE WHEN p.n_measured IS NULL THEN NULL ELSE p.p90_step_ms END AS p90_step_ms,
       p.n_measured,
       p.mean_step_ms,
       p.throughput_eps,
       p.throughput_def,
       p.compare_method AS method,
       p.compare_metric AS metric,
       p.compare_ratio AS ratio,
       p.compare_ci_low AS ci_low,
       p.compare_ci_high AS ci_high,
       p.compare_baseline_run_id AS baseline_run_id,
       p.compare_baseline_median_ms AS baseline_median_ms,
       e.comparability_key AS env_key,
       e.fingerprint_id,
       CASE WHEN p.model_version_id IS NOT NULL AND pmv.version <> mv.version THEN 1 ELSE 0 END AS version_changed,
       CASE WHEN p.environment_id IS NOT NULL AND p.prev_environment_id <> p.environment_id
            THEN 1 ELSE 0 END AS env_changed
FROM picked p
LEFT JOIN model_versions mv ON mv.id = p.model_version_id
LEFT JOIN model_versions pmv ON pmv.id = p.prev_model_version_id
LEFT JOIN environments e ON e.id = p.environment_id
ORDER BY p.started_at, p.id;
