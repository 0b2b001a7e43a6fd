-- name: last_success
-- Per model, when its newest successful run finished (UTC) and how many successful runs it has, any
-- trigger (scheduled, release, manual, cli, external): the missing-data check
-- (tasks.services.alerts.check_missing_data) alerts on a model of the nightly config whose newest
-- success is older than PERFWATCH_MISSING_DATA_HOURS (36 h), or that has none.
-- params: model text optional
-- psql:
--   psql "$DB" -v model=NULL -f sql/queries/last_success.sql
-- Python: tasks.store.queries.run_query("last_success", url, model=None)
SELECT m.name AS model,
       MAX(r.finished_at) AS last_success_at,
       COUNT(r.id) AS successful_runs
FROM models m
JOIN runs r ON r.model_id = m.id
WHERE r.status = 'success'
  AND (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
GROUP BY m.name
ORDER BY m.name;
