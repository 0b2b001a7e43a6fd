-- name: failures
-- Runs that failed and why, in since <= started_at < until (UTC), newest first: the stage that
-- failed (pull-model-version, env-fingerprint, warm-up, profiled-run, parse, baseline-compare,
-- archive) and the stored error (its first line is the cause when perfwatch knows it, "cause: ...",
-- tasks.analysis.failures; then the exception; the rest is the traceback tail, cut at 2000 characters here).
-- params: since timestamp, until timestamp, model text optional, limit integer
-- psql:
--   psql "$DB" -v since="'2026-01-01'" -v until="'2100-01-01'" -v model=NULL -v limit=ALL \
--        -f sql/queries/failures.sql
-- Python: tasks.store.queries.failures(since="2026-01-01")
SELECT r.id AS run_id,
       r.started_at,
       r.finished_at,
       m.name AS model,
       COALESCE(mv.version, r.version_requested) AS version,
       r.case_name,
       r.trigger,
       r.failed_stage,
       SUBSTR(r.error, 1, 2000) AS error,
       r.dag_id,
       r.dag_run_id
FROM runs r
JOIN models m ON m.id = r.model_id
LEFT JOIN model_versions mv ON mv.id = r.model_version_id
WHERE r.status = 'failed'
  AND r.started_at >= :since
  AND r.started_at < :until
  AND (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
ORDER BY r.started_at DESC, r.id DESC
LIMIT :limit;
