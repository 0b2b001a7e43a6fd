"""comparisons.metric: which per-step measure decided the verdict (wall | cpu)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 15:00:00

Every verdict names the metric its ratio and interval are of (``tasks.records.Metric``): ``wall``, the step's
wall-clock time (our timer), or ``cpu``, the runner process's CPU time per step, which decides a busy host's
paired gate (``tasks.analysis.calibration.choose_metric``). Until this revision the metric lived only in
``comparisons.evidence["metric"]``; the upgrade copies it from there, and rows without it (stored before
issue 23) are ``wall``, the only metric perfwatch decided on then.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.add_column(sa.Column("metric", sa.String(length=8), nullable=True))
    conn = op.get_bind()
    table = sa.table("comparisons", sa.column("id", sa.Integer), sa.column("metric"), sa.column("evidence", sa.JSON))
    maybe = sa.select(table.c.id, table.c.evidence).where(sa.cast(table.c.evidence, sa.Text).like('%"cpu"%'))
    cpu = [i for i, ev in conn.execute(maybe) if (ev or {}).get("metric") == "cpu"]  # the text filter only narrows
    if cpu:
        conn.execute(sa.update(table).where(table.c.id.in_(cpu)).values(metric="cpu"))
    conn.execute(sa.update(table).where(table.c.metric.is_(None)).values(metric="wall"))


def downgrade() -> None:
    with op.batch_alter_table("comparisons", schema=None) as batch_op:
        batch_op.drop_column("metric")
