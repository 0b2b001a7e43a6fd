-- name: sweep
-- The newest successful run of each case of one model (optionally of one version): the points of
-- `perfwatch sweep`. Per case: run id, start, version, the run's Case as JSON (params: its axes),
-- median step time (ms, our timer), the p99 of its measured steps (nearest rank; one batch's
-- latency in infer/tflite mode) and throughput (examples/s at the median).
-- params: model text, version text optional
-- psql (text values quoted, NULL for "any"):
--   psql "$DB" -v model="'demo_mobilenet'" -v version=NULL -f sql/queries/sweep.sql
-- Python: tasks.store.queries.sweep_points("demo_mobilenet") or run_query("sweep", url, model="demo_mobilenet")
WITH latest AS (
    SELECT r.id, r.started_at, r.case_name, r.params, r.median_step_ms, r.throughput_eps,
           COALESCE(mv.version, r.version_requested) AS version,
           ROW_NUMBER() OVER (PARTITION BY r.case_name ORDER BY r.started_at DESC, r.id DESC) AS newest
    FROM runs r
    JOIN models m ON m.id = r.model_id
    LEFT JOIN model_versions mv ON mv.id = r.model_version_id
    WHERE m.name = :model
      AND r.status = 'success'
      AND r.median_step_ms IS NOT NULL
      AND (CAST(:version AS VARCHAR(32)) IS NULL OR COALESCE(mv.version, r.version_requested) = :version)
),
picked AS (
    SELECT * FROM latest WHERE newest = 1
),
ranked AS (
    SELECT s.run_id, s.step_time_ms,
           ROW_NUMBER() OVER (PARTITION BY s.run_id ORDER BY s.step_time_ms) AS rn,
           COUNT(*) OVER (PARTITION BY s.run_id) AS n
    FROM picked p
    -- CROSS JOIN keeps this join order on SQLite, so only the picked runs' samples are read
    CROSS JOIN step_samples s
    WHERE s.run_id = p.id AND s.phase = 'measured'
),
spread AS (
    SELECT run_id, MAX(CASE WHEN rn = (n * 99 + 99) / 100 THEN step_time_ms END) AS p99_step_ms
    FROM ranked
    GROUP BY run_id
)
SELECT p.id AS run_id,
       p.started_at,
       p.case_name,
       p.version,
       p.params,
       p.median_step_ms,
       sp.p99_step_ms,
       p.throughput_eps
FROM picked p
LEFT JOIN spread sp ON sp.run_id = p.id
ORDER BY p.case_name;
