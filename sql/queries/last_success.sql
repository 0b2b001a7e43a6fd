-- name: last_success
-- Per model, when its newest successful run finished (UTC) and how many successful runs it has, any
-- trigger (scheduled, release, manual, cli, external): the missing-data check
-- (tasks.services.alerts.check_missing_data) alerts on a model of the nightly config whose newest
-- success is older than PERFWATCH_MISSING_DATA_HOURS (36 h), or that has none.
-- params: model text optional
-- psql:
--   psql "$DB" -v model=NULL -f sql/queries/last_success.sql
-- Python: tasks.store.queries.run_query("last_success", url, model=None)
-- The count is kept on the models row by the archive (migration 0008), not counted here; the newest
-- success is one probe of the partial index ix_runs_success_finished per model.
SELECT m.name AS model,
       (SELECT MAX(r.finished_at) FROM runs r
        WHERE r.model_id = m.id AND r.status = 'success') AS last_success_at,
       m.successful_runs
FROM models m
WHERE m.successful_runs > 0
  AND (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
ORDER BY m.name;
