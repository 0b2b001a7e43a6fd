"""telemetry_samples: device telemetry of a run's measured steps, as a time series

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 03:00:00

One row per device and sample (``tasks.runner.telemetry``): ``device`` is ``host`` (host CPU
utilization %, this process's RSS bytes; psutil) or ``gpu<i>`` (NVML: utilization %, memory used bytes,
power W, SM clock MHz, temperature °C, clock-event/throttle reason bitmask). ``t_s`` is seconds since
sampling began, ``step`` the measured steps finished by then. A quantity a device does not report is
NULL, never 0. The run's summaries live in ``run_tables`` (tool ``telemetry``).
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "telemetry_samples",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=16), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("utilization_pct", sa.Float(), nullable=True),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("sm_clock_mhz", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.Column("throttle_reasons", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "device", "seq"),
    )


def downgrade() -> None:
    op.drop_table("telemetry_samples")
