"""runs.p90_step_ms: the nearest-rank p90 of the measured steps, as every other percentile perfwatch stores

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 03:10:00

Until this revision the archive wrote ``runs.p90_step_ms`` with ``statistics.quantiles`` (linear interpolation
between ranks) while ``step_quantiles.p90_ms`` (0007), the order-statistic intervals beside it and every other
stored percentile use the nearest rank ``x(ceil(n q / 100))``: one run showed two p90s (``/metrics``' quantile
0.9 from the runs table, ``perfwatch history`` and the pages from ``step_quantiles``), and the exported point
could fall outside its own exported interval. The upgrade copies each run's measured-phase ``p90_ms`` into
``runs.p90_step_ms`` (runs without a summary row keep theirs); the archive writes the nearest rank from now on
(``tasks.store.writes.nearest_rank``). The downgrade changes nothing (the old values are not kept).
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COPY = """
UPDATE runs SET p90_step_ms = (
    SELECT q.p90_ms FROM step_quantiles q WHERE q.run_id = runs.id AND q.phase = 'measured'
)
WHERE EXISTS (SELECT 1 FROM step_quantiles q WHERE q.run_id = runs.id AND q.phase = 'measured')
"""


def upgrade() -> None:
    op.execute(COPY)


def downgrade() -> None:
    pass
