"""step_samples.cpu_ms, wait_ms: each step's process CPU time and run-queue wait

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 04:00:00

Beside each step's wall time (``step_time_ms``, our timer) the runner records, outside that window, the
process's CPU time during the step (all threads, user + system, ``time.process_time``), ms, and the time
its threads were runnable but waiting for a CPU (``/proc/self/task/*/schedstat``), ms
(``tasks.runner.counters``). NULL where not measured: rows stored before this revision, profiled steps,
ingested profiles, and the wait on a host without schedstat.
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("step_samples", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cpu_ms", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("wait_ms", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("step_samples", schema=None) as batch_op:
        batch_op.drop_column("wait_ms")
        batch_op.drop_column("cpu_ms")
