-- name: hardware
-- The environments a model (one case, or all) was measured on, side by side: one row per successful
-- run, newest environment facts first per key: the case, the environment (comparability key, the
-- fingerprint and its environments row), the model version, the run's median step time (ms, our timer),
-- throughput and what it measures (throughput_def: tasks.records.THROUGHPUT_DEFS), peak memory (bytes: the device's where measured, and the runner process's RSS)
-- and when it started. tasks.analysis.gains groups the rows by case, version and environment (one version
-- per case: never an average over versions), adds J/example from the telemetry summary (run_tables
-- 'telemetry') and the ratio against a reference environment.
-- params: model text, case_name text optional
-- psql:
--   psql "$DB" -v model="'tiny'" -v case_name=NULL -f sql/queries/hardware.sql
-- Python: tasks.store.queries.hardware("tiny")
SELECT r.id AS run_id,
       r.case_name,
       e.comparability_key AS env_key,
       e.id AS environment_id,
       COALESCE(mv.version, r.version_requested) AS version,
       r.median_step_ms,
       r.throughput_eps,
       r.throughput_def,
       r.peak_device_bytes,
       r.peak_rss_bytes,
       r.started_at
FROM runs r
JOIN models m ON m.id = r.model_id
LEFT JOIN model_versions mv ON mv.id = r.model_version_id
JOIN environments e ON e.id = r.environment_id
WHERE m.name = :model
  AND r.status = 'success'
  AND r.median_step_ms IS NOT NULL
  AND (CAST(:case_name AS VARCHAR(64)) IS NULL OR r.case_name = :case_name)
ORDER BY r.case_name, e.comparability_key, r.started_at, r.id;
