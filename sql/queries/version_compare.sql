-- name: version_compare
-- Version A vs version B of one model: per case and environment (comparability key), the number
-- of successful runs of each version, the mean of their median step times (ms, our timer), the
-- mean throughput (examples/s), the ratio B/A of the mean medians (above 1: B is slower), and
-- the newest run id of each version (for top_op_regressions).
-- params: model text, version_a text, version_b text, case_name text optional
-- psql:
--   psql "$DB" -v model="'tiny'" -v version_a="'1'" -v version_b="'2'" -v case_name=NULL \
--        -f sql/queries/version_compare.sql
-- Python: tasks.store.queries.version_compare("tiny", "1", "2")
SELECT r.case_name,
       e.comparability_key AS env_key,
       SUM(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_a THEN 1 ELSE 0 END) AS runs_a,
       SUM(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_b THEN 1 ELSE 0 END) AS runs_b,
       AVG(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_a THEN r.median_step_ms END)
           AS a_median_step_ms,
       AVG(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_b THEN r.median_step_ms END)
           AS b_median_step_ms,
       AVG(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_b THEN r.median_step_ms END)
           / NULLIF(AVG(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_a
                             THEN r.median_step_ms END), 0) AS ratio_b_to_a,
       AVG(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_a THEN r.throughput_eps END)
           AS a_throughput_eps,
       AVG(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_b THEN r.throughput_eps END)
           AS b_throughput_eps,
       MAX(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_a THEN r.id END) AS a_last_run_id,
       MAX(CASE WHEN COALESCE(mv.version, r.version_requested) = :version_b THEN r.id END) AS b_last_run_id
FROM runs r
JOIN models m ON m.id = r.model_id
LEFT JOIN model_versions mv ON mv.id = r.model_version_id
LEFT JOIN environments e ON e.id = r.environment_id
WHERE m.name = :model
  AND r.status = 'success'
  AND COALESCE(mv.version, r.version_requested) IN (:version_a, :version_b)
  AND (CAST(:case_name AS VARCHAR(64)) IS NULL OR r.case_name = :case_name)
GROUP BY r.case_name, e.comparability_key
ORDER BY r.case_name, e.comparability_key;
