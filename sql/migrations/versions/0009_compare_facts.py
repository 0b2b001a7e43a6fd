"""the run's comparison kept on the run, for history.sql and regressions.sql

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 03:00:00

At 100M step samples (318,882 runs) history.sql (3,270 rows) and regressions.sql (4,261 rows) spent most of their
time in two index lookups per result row: the run's comparison (``ix_comparisons_run_cover``) and the compared
baseline run's median (``ix_runs_id_median``), ~40 of regressions' ~50 ms in PostgreSQL (issue 24; README "The store
at scale"). The archive now keeps them on the run as it stores the comparison (``tasks.store.writes.store_run``):

- ``runs.compare_baseline_run_id``, ``compare_ratio``, ``compare_ci_low``, ``compare_ci_high``, ``compare_method``,
  ``compare_metric``: the run's row of ``comparisons``; ``compare_baseline_median_ms``: that baseline run's
  ``median_step_ms``; all NULL for a run without a comparison (a failure);
- ``ix_runs_regression_cover`` (0008) holds them too, so regressions.sql reads its window from that index alone.

The upgrade backfills the columns from the stored comparisons (one ``UPDATE ... FROM``, SQLite >= 3.33 and
PostgreSQL); ``tasks.store.writes.backfill_run_facts`` runs the same statement after a bulk load.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COMPARE = """
UPDATE runs SET
    compare_baseline_run_id = c.baseline_run_id,
    compare_baseline_median_ms = br.median_step_ms,
    compare_ratio = c.ratio,
    compare_ci_low = c.ci_low,
    compare_ci_high = c.ci_high,
    compare_method = c.method,
    compare_metric = c.metric
FROM comparisons c
LEFT JOIN runs br ON br.id = c.baseline_run_id
WHERE c.run_id = runs.id
"""

# the columns of ix_runs_regression_cover at 0008 and at 0009 (tasks.store.schema.REGRESSION_COLUMNS)
REGRESSION_COLUMNS_0008 = [
    "started_at", "id", "model_id", "model_version_id", "version_requested", "case_name", "trigger",
    "median_step_ms", "environment_id", "dag_id", "dag_run_id",
]  # fmt: skip
COMPARE_COLUMNS = [
    ("compare_baseline_run_id", sa.Integer()),
    ("compare_baseline_median_ms", sa.Float()),
    ("compare_ratio", sa.Float()),
    ("compare_ci_low", sa.Float()),
    ("compare_ci_high", sa.Float()),
    ("compare_method", sa.String(32)),
    ("compare_metric", sa.String(8)),
]


def _regression_index(columns: list[str]) -> None:
    op.create_index(
        "ix_runs_regression_cover",
        "runs",
        columns,
        postgresql_where=sa.text("verdict = 'regression'"),
        sqlite_where=sa.text("verdict = 'regression'"),
    )


def upgrade() -> None:
    # the index is rebuilt after the backfill: one sorted build instead of an index update per run
    op.drop_index("ix_runs_regression_cover", table_name="runs")
    # plain ALTER TABLE on both databases, as 0008 (a SQLite batch copy of runs would drop a referenced table)
    for name, type_ in COMPARE_COLUMNS:
        op.add_column("runs", sa.Column(name, type_, nullable=True))
    op.execute(COMPARE)
    _regression_index(REGRESSION_COLUMNS_0008 + [name for name, _ in COMPARE_COLUMNS])


def downgrade() -> None:
    op.drop_index("ix_runs_regression_cover", table_name="runs")
    for name, _ in reversed(COMPARE_COLUMNS):
        op.execute(f"ALTER TABLE runs DROP COLUMN {name}")
    _regression_index(REGRESSION_COLUMNS_0008)
