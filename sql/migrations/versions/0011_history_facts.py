"""history facts kept on the run: its measured spread and its previous pulled run's model version

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 12:00:00

At 100M step samples (318,882 runs) history.sql (a model's whole history, 3,270 rows) spent about half of its time
in PostgreSQL on two things it computed per call (issue 24 item 5; README "The store at scale"): two window sorts
(``LAG`` over case and time) for ``version_changed`` / ``env_changed``, and a lookup per row of the run's measured
spread in ``step_quantiles``. The archive now keeps both on the run (``tasks.store.writes.store_run``):

- ``runs.prev_model_version_id``: the model version of the previous run of the same model and case that was
  pulled (has a model version; ``started_at, id`` order), NULL for the first; as 0008 keeps the previous
  environment (``prev_environment_id``), a run archived out of order re-points its successor. history.sql compares
  the two versions' names (``version_changed``) and ``prev_environment_id`` with ``environment_id``
  (``env_changed``) without a window;
- ``runs.n_measured``, ``runs.p10_step_ms``: the measured phase's sample count and nearest-rank p10 from its
  ``step_quantiles`` row (0007); ``runs.p90_step_ms`` is that row's p90 already (0010). NULL for a run without
  a measured summary (a failure); ``perfwatch db thin`` sets them where it writes a missing summary.

The upgrade backfills the three columns from the stored runs and summaries in one ``UPDATE ... FROM`` (a ``LAG``
and a join with ``step_quantiles``; SQLite >= 3.33 and PostgreSQL), setting ``p90_step_ms`` from the summary again
so the three figures are one row's; ``tasks.store.writes.backfill_run_facts`` runs the same statement after a bulk
load.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# the same statement as tasks.store.writes._BACKFILL_RUN_FACTS' last one (a migration keeps its own copy)
HISTORY_FACTS = """
UPDATE runs SET
    prev_model_version_id = s.prev_model_version_id,
    n_measured = q.n,
    p10_step_ms = q.p10_ms,
    p90_step_ms = CASE WHEN q.run_id IS NULL THEN runs.p90_step_ms ELSE q.p90_ms END
FROM (
    SELECT id,
           CASE WHEN model_version_id IS NULL THEN NULL
                ELSE LAG(model_version_id) OVER (PARTITION BY model_id, case_name, model_version_id IS NULL
                                                 ORDER BY started_at, id) END AS prev_model_version_id
    FROM runs
) s
LEFT JOIN step_quantiles q ON q.run_id = s.id AND q.phase = 'measured'
WHERE runs.id = s.id AND (s.prev_model_version_id IS NOT NULL OR q.run_id IS NOT NULL)
"""

COLUMNS = [
    ("prev_model_version_id", sa.Integer()),
    ("n_measured", sa.Integer()),
    ("p10_step_ms", sa.Float()),
]


def upgrade() -> None:
    # plain ALTER TABLE on both databases, as 0008 (a SQLite batch copy of runs would drop a referenced table)
    for name, type_ in COLUMNS:
        op.add_column("runs", sa.Column(name, type_, nullable=True))
    op.execute(HISTORY_FACTS)


def downgrade() -> None:
    for name, _ in reversed(COLUMNS):
        op.execute(f"ALTER TABLE runs DROP COLUMN {name}")
