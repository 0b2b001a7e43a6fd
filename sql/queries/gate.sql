-- name: gate
-- The release gate's evidence: per case of one model version, the run that answers for it, with its status,
-- verdict, failed stage, median step time (ms) and the baseline-compare ratio and interval, with the
-- metric they are of (wall: step time, our timer; cpu: process CPU time per step, a busy host's gate).
-- The run that answers: the newest paired ABBA verdict of the version (decided_by 'paired'; both versions
-- timed in one process, the release gate's own measurement) when the case has one, else the newest run
-- (decided_by 'newest'), so that a later, weaker run (an unpaired ad-hoc run compared with two processes'
-- medians) never overrides a release gate's verdict. newest_run_id is the case's newest run of the version
-- (the run itself when it answers). A/A gates (trigger calibrate: the version timed against itself) are no
-- evidence about the version against its baseline and are left out. (perfwatch gate turns these rows into an
-- exit code; see tasks/cli/history.py.)
-- params: model text, version text, case_name text optional
-- psql:
--   psql "$DB" -v model="'tiny'" -v version="'2'" -v case_name=NULL -f sql/queries/gate.sql
-- Python: tasks.store.queries.run_query("gate", url, model="tiny", version="2")
WITH ranked AS (
    SELECT r.id AS run_id, r.started_at, r.case_name, r.status, r.verdict, r.failed_stage, r.median_step_ms,
           SUBSTR(r.error, 1, 500) AS error,
           CASE WHEN r.status = 'success' AND c.method = 'paired-abba' THEN 'paired' ELSE 'newest' END
               AS decided_by,
           ROW_NUMBER() OVER (PARTITION BY r.case_name ORDER BY r.started_at DESC, r.id DESC) AS recency,
           ROW_NUMBER() OVER (
               PARTITION BY r.case_name
               ORDER BY CASE WHEN r.status = 'success' AND c.method = 'paired-abba' THEN 0 ELSE 1 END,
                        r.started_at DESC, r.id DESC
           ) AS answers
    FROM runs r
    JOIN models m ON m.id = r.model_id
    LEFT JOIN model_versions mv ON mv.id = r.model_version_id
    LEFT JOIN comparisons c ON c.run_id = r.id
    WHERE m.name = :model
      AND r.trigger <> 'calibrate'
      AND COALESCE(mv.version, r.version_requested) = :version
      AND (CAST(:case_name AS VARCHAR(64)) IS NULL OR r.case_name = :case_name)
)
SELECT k.run_id, k.started_at, k.case_name, k.status, k.verdict, k.failed_stage, k.median_step_ms,
       c.baseline_run_id, br.median_step_ms AS baseline_median_ms, c.method, c.metric, c.ratio, c.ci_low, c.ci_high,
       k.decided_by, n.run_id AS newest_run_id, k.error
FROM ranked k
JOIN ranked n ON n.case_name = k.case_name AND n.recency = 1
LEFT JOIN comparisons c ON c.run_id = k.run_id
LEFT JOIN runs br ON br.id = c.baseline_run_id
WHERE k.answers = 1
ORDER BY k.case_name;
