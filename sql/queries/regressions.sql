-- name: regressions
-- All runs whose verdict is "regression" in the window since <= started_at < until (UTC), newest
-- first: model, version, case, median step time (ms), the baseline run and its median, and the
-- baseline-compare ratio with its interval and the metric it is of (wall | cpu).
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
