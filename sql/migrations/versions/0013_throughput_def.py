"""a run's throughput names its definition

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 15:00:00

Since scenarios got their own figure (commit b76d56e), ``runs.throughput_eps`` of a server run is its queries
served per second and of an offline run its examples over the run; runs archived before keep the examples of a
step over the median step time under the same name, so a case's history across the change read two metrics as
one series (issue 40 item 8). ``runs.throughput_def`` names the definition (``tasks.records.THROUGHPUT_DEFS``):
``median_step``, ``server_achieved`` or ``offline_run``; NULL where the run has no throughput.

Backfill: a run's scenario summary (``run_tables`` row ``inputs``, ``latency_ms.serving``) was stored before and
after the change, and its ``throughput_eps`` is the scenario's own figure. A server or offline run whose stored
throughput equals that figure (relative 1e-9) was archived under the new definition; every other run with a
throughput (single-stream, train, tflite, ingested, and server/offline runs archived before the change, whose
stored figure is the median step's) is ``median_step``. The rule is written out here, not imported, so the
migration keeps meaning what it meant when ``tasks.records.throughput_def`` changes.
"""

import json
import math
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

NEW = {"server": "server_achieved", "offline": "offline_run"}


def _serving(data: Any) -> dict[str, Any]:
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError:
            return {}
    s = ((data if isinstance(data, dict) else {}).get("latency_ms") or {}).get("serving")
    return s if isinstance(s, dict) else {}


def definition(stored: float, data: Any) -> str:
    """The definition of a stored throughput ``stored`` (examples/s) given its run's ``inputs`` table ``data``."""
    s = _serving(data)
    own = s.get("throughput_eps")
    new = NEW.get(str(s.get("scenario")))
    if new and isinstance(own, int | float) and math.isfinite(own) and own > 0 and math.isclose(stored, own):
        return new
    return "median_step"


def upgrade() -> None:
    op.add_column("runs", sa.Column("throughput_def", sa.String(length=24), nullable=True))
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT r.id, r.throughput_eps, t.data FROM runs r "
            "LEFT JOIN run_tables t ON t.run_id = r.id AND t.tool = 'inputs' WHERE r.throughput_eps IS NOT NULL"
        )
    ).all()
    by_def: dict[str, list[int]] = {}
    for rid, stored, data in rows:
        by_def.setdefault(definition(float(stored), data), []).append(int(rid))
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("throughput_def", sa.String))
    for name, ids in by_def.items():
        for i in range(0, len(ids), 500):
            bind.execute(runs.update().where(runs.c.id.in_(ids[i : i + 500])).values(throughput_def=name))


def downgrade() -> None:
    op.execute("ALTER TABLE runs DROP COLUMN throughput_def")
