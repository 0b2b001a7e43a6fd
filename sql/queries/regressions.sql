-- name: regressions
-- All runs whose verdict is "regression" in the window since <= started_at < until (UTC), newest
-- first: model, version, case, median step time (ms), the baseline run and its median, and the
-- baseline-compare ratio with its interval and the metric it is of (wall | cpu). The comparison is read from
-- the run's own columns (compare_*, kept by the archive with the comparison: migration 0009).
-- params: since timestamp, until timestamp, model text optional
-- psql:
--   psql "$DB" -v since="'2026-01-01'" -v until="'2100-01-01'" -v model=NULL -f sql/queries/regressions.sql
-- Python: tasks.store.queries.regressions(since="2026-01-01")
SELECT r.id AS run_id,
       r.started_at,
       m.name AS model,
       COALESCE(mv.version, r.version_requested) AS version,
       r.case_name,
       r.trigger,
       r.median_step_ms,
       r.compare_baseline_run_id AS baseline_run_id,
       r.compare_baseline_median_ms AS baseline_median_ms,
       r.compare_ratio AS ratio,
       r.compare_ci_low AS ci_low,
       r.compare_ci_high AS ci_high,
       r.compare_method AS method,
       r.compare_metric AS metric,
       e.comparability_key AS env_key,
       r.dag_id,
       r.dag_run_id
FROM runs r
JOIN models m ON m.id = r.model_id
LEFT JOIN model_versions mv ON mv.id = r.model_version_id
LEFT JOIN environments e ON e.id = r.environment_id
WHERE r.verdict = 'regression'
  AND r.started_at >= :since
  AND r.started_at < :until
  AND (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
ORDER BY r.started_at DESC, r.id DESC;
