-- name: env_changes
-- Environment changes between two dates: each run in since <= started_at < until (UTC) whose
-- environment fingerprint differs from the previous run of the same model and case. Shows both
-- fingerprints and comparability keys; affects_comparability is 1 when the comparability key
-- changed (driver, CUDA, TF build, GPU...), 0 when only a recorded-only detail moved.
-- (tasks.store.queries.env_changes adds the names of the fingerprint fields that changed.)
-- params: since timestamp, until timestamp, model text optional
-- psql:
--   psql "$DB" -v since="'2026-01-01'" -v until="'2100-01-01'" -v model=NULL -f sql/queries/env_changes.sql
-- Python: tasks.store.queries.env_changes(since="2026-01-01")
-- The previous run (prev_run_id, prev_environment_id: the previous run of the model and case that has an
-- environment, ordered by started_at, id) is kept on each run by the archive (migration 0008), so only the
-- window's changed runs are read (index ix_runs_env_change_time).
SELECT r.started_at,
       m.name AS model,
       r.case_name,
       COALESCE(mv.version, r.version_requested) AS version,
       r.prev_run_id,
       r.id AS run_id,
       pe.fingerprint_id AS from_fingerprint,
       ne.fingerprint_id AS to_fingerprint,
       pe.comparability_key AS from_env_key,
       ne.comparability_key AS to_env_key,
       CASE WHEN pe.comparability_key <> ne.comparability_key THEN 1 ELSE 0 END AS affects_comparability
FROM runs r
JOIN models m ON m.id = r.model_id
LEFT JOIN model_versions mv ON mv.id = r.model_version_id
JOIN environments pe ON pe.id = r.prev_environment_id
JOIN environments ne ON ne.id = r.environment_id
WHERE r.prev_environment_id <> r.environment_id
  AND r.started_at >= :since
  AND r.started_at < :until
  AND (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
ORDER BY r.started_at, r.id;
