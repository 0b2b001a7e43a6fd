-- name: top_op_regressions
-- The ops whose self-time grew most from run A (before) to run B (after), from xprof's
-- framework_op_stats. Self-times are µs; per-step figures divide the profiled window's total by
-- its number of profiled steps (step_quantiles.n, kept when raw samples are thinned; NULL when a run kept no profiled samples). Ops present in one
-- run only show 0 on the other side. Largest per-step growth first (total growth when a
-- per-step figure is missing).
-- params: run_a integer, run_b integer, limit integer
-- psql:
--   psql "$DB" -v run_a=1 -v run_b=2 -v limit=20 -f sql/queries/top_op_regressions.sql
-- Python: tasks.store.queries.top_op_regressions(1, 2)
WITH steps AS (
    SELECT MAX(CASE WHEN run_id = :run_a THEN n END) AS a_steps,
           MAX(CASE WHEN run_id = :run_b THEN n END) AS b_steps
    FROM step_quantiles
    WHERE run_id IN (:run_a, :run_b) AND phase = 'profiled'
),
ops AS (
    SELECT o.host_or_device, o.op_type, o.op_name,
           SUM(CASE WHEN o.run_id = :run_a THEN o.total_self_time_us ELSE 0 END) AS a_total_us,
           SUM(CASE WHEN o.run_id = :run_b THEN o.total_self_time_us ELSE 0 END) AS b_total_us,
           CAST(SUM(CASE WHEN o.run_id = :run_a THEN o.occurrences ELSE 0 END) AS BIGINT) AS a_occurrences,
           CAST(SUM(CASE WHEN o.run_id = :run_b THEN o.occurrences ELSE 0 END) AS BIGINT) AS b_occurrences
    FROM op_stats o
    WHERE o.run_id IN (:run_a, :run_b)
    GROUP BY o.host_or_device, o.op_type, o.op_name
),
scored AS (
    SELECT ops.*,
           ops.a_total_us / NULLIF(st.a_steps, 0) AS a_us_per_step,
           ops.b_total_us / NULLIF(st.b_steps, 0) AS b_us_per_step,
           ops.b_total_us / NULLIF(st.b_steps, 0) - ops.a_total_us / NULLIF(st.a_steps, 0) AS delta_us_per_step,
           ops.b_total_us - ops.a_total_us AS delta_total_us,
           ops.b_total_us / NULLIF(ops.a_total_us, 0) AS ratio
    FROM ops CROSS JOIN steps st
)
SELECT host_or_device, op_type, op_name, a_total_us, b_total_us, delta_total_us, a_us_per_step, b_us_per_step,
       delta_us_per_step, ratio, a_occurrences, b_occurrences
FROM scored
ORDER BY CASE WHEN delta_us_per_step IS NULL THEN 1 ELSE 0 END,
         delta_us_per_step DESC,
         delta_total_us DESC,
         op_name
LIMIT :limit;
