-- name: runs
-- The newest runs (optionally of one model), newest first: status, version (as pulled; the
-- requested one when the run failed before the pull), median step time (ms, our timer) with the measured
-- steps it rests on (n_measured),
-- throughput and what it measures (throughput_def: tasks.records.THROUGHPUT_DEFS), peak host RSS and device memory (bytes), verdict and the metric that decided it (wall | cpu: comparisons.metric), and for failed runs the stage and error (cut at 500 characters).
-- params is the run's Case as JSON (its axes: mode, batch_size, precision, xla, strategy, quantization);
-- fed is what the runner fed the model (run_tables tool 'inputs': per input shape, dtype, range; NULL
-- for failed runs and runs stored before it was kept), and for infer/tflite runs latency_ms: the per-batch
-- latency percentiles with their intervals, and latency_ms.serving, the scenario's own figures
-- (tasks.analysis.serving.summarize): the scenario (single-stream, offline, server), its throughput, the latency
-- bound's outcome, and for server the rate offered (target_qps), issued (issued_qps) and achieved (achieved_qps,
-- queries/s), the per-query latency percentiles with their intervals and n (latency), every rate tried (points)
-- and a QPS search's max_qps (issued rate, q/s) with its findings. tasks.store.queries.scenario_columns reads them.
-- params: model text optional, limit integer
-- psql:
--   psql "$DB" -v model=NULL -v limit=50 -f sql/queries/runs.sql
-- Python: tasks.store.queries.run_query("runs", url, model=None, limit=50)
SELECT r.id AS run_id,
       r.started_at,
       m.name AS model,
       COALESCE(mv.version, r.version_requested) AS version,
       r.case_name,
       r.params,
       it.data AS fed,
       r.status,
       r.trigger,
       r.median_step_ms,
       r.n_measured,
       r.throughput_eps,
       r.throughput_def,
       r.peak_rss_bytes,
       r.peak_device_bytes,
       r.verdict,
       c.metric,
       r.failed_stage,
       SUBSTR(r.error, 1, 500) AS error
FROM runs r
JOIN models m ON m.id = r.model_id
LEFT JOIN model_versions mv ON mv.id = r.model_version_id
LEFT JOIN run_tables it ON it.run_id = r.id AND it.tool = 'inputs'
LEFT JOIN comparisons c ON c.run_id = r.id
WHERE (CAST(:model AS VARCHAR(128)) IS NULL OR m.name = :model)
ORDER BY r.id DESC
LIMIT :limit;
