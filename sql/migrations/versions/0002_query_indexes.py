"""indexes for the named history queries and the archive's run replacement

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 02:00:00

- ``ix_runs_verdict_time`` (verdict, started_at): ``regressions.sql`` reads one verdict in a window.
- ``ix_runs_status_time`` (status, started_at): ``failures.sql`` reads failed runs in a window.
- ``ix_comparisons_baseline_run`` (baseline_run_id): archive's retry path clears references to a
  replaced run, and PostgreSQL checks this foreign key when a run is deleted.
- ``ix_baselines_run`` (run_id): the same foreign-key check for ``baselines``.

Measured by ``bench/store.py`` (10,000 runs, 1,000,000 samples and op rows).
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_verdict_time", ["verdict", "started_at"], unique=False)
        batch_op.create_index("ix_runs_status_time", ["status", "started_at"], unique=False)
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.create_index("ix_comparisons_baseline_run", ["baseline_run_id"], unique=False)
    with op.batch_alter_table("baselines", schema=None) as batch_op:
        batch_op.create_index("ix_baselines_run", ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("baselines", schema=None) as batch_op:
        batch_op.drop_index("ix_baselines_run")
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.drop_index("ix_comparisons_baseline_run")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_status_time")
        batch_op.drop_index("ix_runs_verdict_time")
