"""step_quantiles: each run's step samples summarised per phase, kept when raw samples are thinned

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 22:00:00

A year of nightly runs is hundreds of millions of ``step_samples`` rows (issue 24). The named queries read a
run's spread (p10/p90/p99), its sample count and its profiled-step count from ``step_quantiles`` (one row per
run and phase) instead of ranking raw samples at query time, and ``perfwatch db thin`` may delete the raw
samples of old runs (``thinned_at``) while the summary stays (``tasks.store.schema.StepQuantiles``).

The upgrade fills the table from the samples already stored, in one ``INSERT ... SELECT`` with window
functions (SQLite >= 3.25 and PostgreSQL): nearest-rank percentiles, rank ``(n * q + 99) / 100``, and the
median of the recorded ``cpu_ms`` / ``wait_ms`` (the mean of the two middle values when their count is even).
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BACKFILL = """
INSERT INTO step_quantiles (run_id, phase, n, mean_ms, min_ms, p10_ms, p50_ms, p90_ms, p99_ms, max_ms,
                            cpu_median_ms, wait_median_ms, thinned_at)
WITH ranked AS (
    SELECT run_id, phase, step_time_ms,
           ROW_NUMBER() OVER (PARTITION BY run_id, phase ORDER BY step_time_ms) AS rn,
           COUNT(*) OVER (PARTITION BY run_id, phase) AS n
    FROM step_samples
),
summary AS (
    SELECT run_id, phase, MAX(n) AS n, AVG(step_time_ms) AS mean_ms, MIN(step_time_ms) AS min_ms,
           MAX(CASE WHEN rn = (n * 10 + 99) / 100 THEN step_time_ms END) AS p10_ms,
           MAX(CASE WHEN rn = (n * 50 + 99) / 100 THEN step_time_ms END) AS p50_ms,
           MAX(CASE WHEN rn = (n * 90 + 99) / 100 THEN step_time_ms END) AS p90_ms,
           MAX(CASE WHEN rn = (n * 99 + 99) / 100 THEN step_time_ms END) AS p99_ms,
           MAX(step_time_ms) AS max_ms
    FROM ranked
    GROUP BY run_id, phase
),
{counter_ctes}
SELECT s.run_id, s.phase, s.n, s.mean_ms, s.min_ms, s.p10_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms,
       c.m, w.m, NULL
FROM summary s
LEFT JOIN cpu_median c ON c.run_id = s.run_id AND c.phase = s.phase
LEFT JOIN wait_median w ON w.run_id = s.run_id AND w.phase = s.phase
"""

COUNTER_MEDIAN = """{name}_ranked AS (
    SELECT run_id, phase, {col} AS v,
           ROW_NUMBER() OVER (PARTITION BY run_id, phase ORDER BY {col}) AS rn,
           COUNT(*) OVER (PARTITION BY run_id, phase) AS n
    FROM step_samples
    WHERE {col} IS NOT NULL
),
{name}_median AS (
    SELECT run_id, phase, AVG(v) AS m
    FROM {name}_ranked
    WHERE rn IN ((n + 1) / 2, (n + 2) / 2)
    GROUP BY run_id, phase
)"""


def upgrade() -> None:
    op.create_table(
        "step_quantiles",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("mean_ms", sa.Float(), nullable=False),
        sa.Column("min_ms", sa.Float(), nullable=False),
        sa.Column("p10_ms", sa.Float(), nullable=False),
        sa.Column("p50_ms", sa.Float(), nullable=False),
        sa.Column("p90_ms", sa.Float(), nullable=False),
        sa.Column("p99_ms", sa.Float(), nullable=False),
        sa.Column("max_ms", sa.Float(), nullable=False),
        sa.Column("cpu_median_ms", sa.Float(), nullable=True),
        sa.Column("wait_median_ms", sa.Float(), nullable=True),
        sa.Column("thinned_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "phase"),
    )
    ctes = ",\n".join(COUNTER_MEDIAN.format(name=n, col=f"{n}_ms") for n in ("cpu", "wait"))
    op.execute(BACKFILL.format(counter_ctes=ctes))


def downgrade() -> None:
    op.drop_table("step_quantiles")
