"""runs.source: who measured the run

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 02:00:00

``perfwatch`` for runs measured by perfwatch's runner (our timer, profiler off), ``external`` for
profiles of users' own jobs stored by ``perfwatch ingest`` (dag_id ``perfwatch_ingest``; their step
times are xprof's, from the job's step markers). Existing rows are perfwatch's.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=16), nullable=False, server_default="perfwatch"))
    op.execute("UPDATE runs SET source = 'external' WHERE dag_id = 'perfwatch_ingest'")


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("source")
