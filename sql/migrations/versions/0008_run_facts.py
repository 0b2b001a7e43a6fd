"""run facts kept at write time: each run's previous environment, each model's success count

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 23:00:00

At 100M step samples (318,882 runs) env_changes.sql ranked every run before ``until`` with ``LAG`` (1.7-2.7 s)
and last_success.sql counted all successful runs (185-408 ms) on every call (issue 24). The archive now keeps
those facts as it writes a run (``tasks.store.writes.store_run``):

- ``runs.prev_run_id`` / ``runs.prev_environment_id``: the previous run of the same model and case that has an
  environment (ordered by ``started_at, id``) and its environment; a partial index holds only the runs whose
  environment differs from it, with every column env_changes.sql reads (``ix_runs_env_change_time``);
- ``models.successful_runs``: the number of successful runs (the newest one's ``finished_at`` is one probe of
  the partial index ``ix_runs_success_finished``);
- ``ix_runs_regression_cover``: the regressions with every column regressions.sql reads from runs;
- ``ix_comparisons_run_cover`` and ``ix_runs_id_median``: the comparison columns and the baseline run's median
  the named queries read per run, so those lookups read an index and not the wide rows (gx_result, evidence,
  error, params).

The upgrade backfills the columns from the runs already stored (one ``UPDATE ... FROM`` with ``LAG``, SQLite
>= 3.33 and PostgreSQL); ``tasks.store.writes.backfill_run_facts`` is the same statement for bulk loads.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

PREV_ENV = """
UPDATE runs SET prev_run_id = s.prev_run_id, prev_environment_id = s.prev_environment_id
FROM (
    SELECT id,
           LAG(id) OVER w AS prev_run_id,
           LAG(environment_id) OVER w AS prev_environment_id
    FROM runs
    WHERE environment_id IS NOT NULL
    WINDOW w AS (PARTITION BY model_id, case_name ORDER BY started_at, id)
) s
WHERE runs.id = s.id AND s.prev_run_id IS NOT NULL
"""

LAST_SUCCESS = """
UPDATE models SET
    successful_runs = (SELECT COUNT(*) FROM runs r WHERE r.model_id = models.id AND r.status = 'success')
"""

WHERE = "prev_environment_id <> environment_id"
# the columns of the partial indexes, as tasks.store.schema.ENV_CHANGE_COLUMNS / REGRESSION_COLUMNS at 0008
ENV_CHANGE_COLUMNS = [
    "started_at", "id", "model_id", "environment_id", "prev_environment_id", "prev_run_id", "model_version_id",
    "case_name", "version_requested",
]  # fmt: skip
REGRESSION_COLUMNS = [
    "started_at", "id", "model_id", "model_version_id", "version_requested", "case_name", "trigger",
    "median_step_ms", "environment_id", "dag_id", "dag_run_id",
]  # fmt: skip


def upgrade() -> None:
    # plain ALTER TABLE on both databases: a SQLite batch copy of models/runs would drop a table other rows
    # reference (SQLite >= 3.35 drops a column in place too)
    op.add_column("runs", sa.Column("prev_run_id", sa.Integer(), nullable=True))
    op.add_column("runs", sa.Column("prev_environment_id", sa.Integer(), nullable=True))
    op.add_column("models", sa.Column("successful_runs", sa.Integer(), nullable=False, server_default="0"))
    op.execute(PREV_ENV)
    op.execute(LAST_SUCCESS)
    op.create_index(
        "ix_runs_env_change_time",
        "runs",
        ENV_CHANGE_COLUMNS,
        postgresql_where=sa.text(WHERE),
        sqlite_where=sa.text(WHERE),
    )
    op.create_index(
        "ix_runs_regression_cover",
        "runs",
        REGRESSION_COLUMNS,
        postgresql_where=sa.text("verdict = 'regression'"),
        sqlite_where=sa.text("verdict = 'regression'"),
    )
    op.create_index(
        "ix_comparisons_run_cover",
        "comparisons",
        ["run_id", "baseline_run_id", "ratio", "ci_low", "ci_high", "method", "metric"],
    )
    op.create_index("ix_runs_id_median", "runs", ["id", "median_step_ms"])
    op.create_index(
        "ix_runs_success_finished",
        "runs",
        ["model_id", "finished_at"],
        postgresql_where=sa.text("status = 'success'"),
        sqlite_where=sa.text("status = 'success'"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_success_finished", table_name="runs")
    op.drop_index("ix_runs_id_median", table_name="runs")
    op.drop_index("ix_comparisons_run_cover", table_name="comparisons")
    op.drop_index("ix_runs_regression_cover", table_name="runs")
    op.drop_index("ix_runs_env_change_time", table_name="runs")
    for table, column in (
        ("models", "successful_runs"),
        ("runs", "prev_environment_id"),
        ("runs", "prev_run_id"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
