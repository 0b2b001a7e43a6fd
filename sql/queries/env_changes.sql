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
WITH sequenced AS (
    SELECT r.id AS run_id, r.model_id, r.case_name, r.started_at, r.environment_id,
           COALESCE(mv.version, r.version_requested) AS version,
           LAG(r.id) OVER (PARTITION BY r.model_id, r.case_name ORDER BY r.started_at, r.id) AS prev_run_id,
           LAG(r.environment_id) OVER (PARTITION BY r.model_id, r.case_name
                                       ORDER BY r.started_at, r.id) AS prev_environment_id
    FROM runs r
    JOIN models m ON m.id = r.model_id
    LEFT JOIN model_versions mv ON mv.id = r.model_version_id
    WHERE r.environment_id IS NOT NULL
      AND r.started_at < :until
      AND (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
)
SELECT s.started_at,
       m.name AS model,
       s.case_name,
       s.version,
       s.prev_run_id,
       s.run_id,
       pe.fingerprint_id AS from_fingerprint,
       ne.fingerprint_id AS to_fingerprint,
       pe.comparability_key AS from_env_key,
       ne.comparability_key AS to_env_key,
       CASE WHEN pe.comparability_key <> ne.comparability_key THEN 1 ELSE 0 END AS affects_comparability
FROM sequenced s
JOIN models m ON m.id = s.model_id
JOIN environments pe ON pe.id = s.prev_environment_id
JOIN environments ne ON ne.id = s.environment_id
WHERE s.prev_environment_id <> s.environment_id
  AND s.started_at >= :since
ORDER BY s.started_at, s.run_id;
