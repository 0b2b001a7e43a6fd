-- name: sweep
-- The newest successful run of each case of one model (optionally of one version): the points of
-- `perfwatch sweep`. Per case: run id, start, version, the run's Case as JSON (params: its axes),
-- median step time (ms, our timer), the p99 of its measured steps (nearest rank, step_quantiles; one batch's
-- latency in infer/tflite mode) with the measured steps it rests on (n_measured: whether the run supports
-- an interval of its p99 at all), throughput (examples/s at the median) and fed: the run's run_tables row
-- 'inputs', whose latency_ms.serving holds the scenario's own figures (tasks.analysis.serving.summarize: its
-- throughput, examples over the run for offline and queries served per second for server; a server run's
-- per-query percentiles with their intervals, a search's max QPS), which the sweep judges a scenario case by.
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
spread AS (
    -- the run's measured samples summarised at archive (step_quantiles, 0007): still there once thinned
    SELECT q.run_id, q.p99_ms AS p99_step_ms, q.n AS n_measured
    FROM picked p
    -- CROSS JOIN keeps this join order on SQLite, so only the picked runs' rows are read
    CROSS JOIN step_quantiles q
    WHERE q.run_id = p.id AND q.phase = 'measured'
)
SELECT p.id AS run_id,
       p.started_at,
       p.case_name,
       p.version,
       p.params,
       p.median_step_ms,
       sp.p99_step_ms,
       sp.n_measured,
       p.throughput_eps,
       it.data AS fed
FROM picked p
LEFT JOIN spread sp ON sp.run_id = p.id
-- the picked runs' rows only (run_tables' primary key is run_id, tool)
LEFT JOIN run_tables it ON it.run_id = p.id AND it.tool = 'inputs'
ORDER BY p.case_name;
