"""a run's identity names its model and the version as planned

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 14:00:00

Until 0011 a run was identified by (dag_id, dag_run_id, case_name), without its model: in a nightly of two
models whose cases share a name (both ``train-bs16``) the second model's stages found the first model's stored
run "already archived; nothing to do", its own measurement was dropped, and its task failed blaming it for the
first model's regression (issue 35 item 1); a release DAG run that gates two versions of one model had the same
collision. The identity is now (dag_id, dag_run_id, model_id, plan_version, case_name):

- ``runs.plan_version``: the version as the DAG run planned it (``Case.version``: ``latest`` or a pinned one);
  ``version_requested`` of a failed run is the version its request resolved to when it got that far, so it
  cannot be part of the identity. Backfilled from the run's stored Params (``params.version``), else
  ``version_requested``.
- ``uq_run_identity`` on the five columns (``tasks.store.reads.is_run_of`` is the look-up).

On SQLite the constraint is part of the table: Alembic's batch mode copies ``runs`` into a new table with its
indexes (the partial ones included). The migration environment (``sql/migrations/env.py``) switches SQLite's
foreign-key enforcement off while it migrates, as SQLite's own procedure for changing a table says: with it on,
dropping the old ``runs`` would cascade-delete every run's samples. The upgrade refuses to run if it is still on.
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

OLD = ("dag_id", "dag_run_id", "case_name")
NEW = ("dag_id", "dag_run_id", "model_id", "plan_version", "case_name")


def _sqlite_foreign_keys_off() -> None:
    bind = op.get_bind()
    if bind.exec_driver_sql("PRAGMA foreign_keys").scalar():
        raise RuntimeError(
            "migration 0012 rebuilds the runs table and needs SQLite's foreign-key enforcement off (with it on, "
            "dropping the old table deletes every run's samples); run it through perfwatch db upgrade"
        )


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    op.add_column("runs", sa.Column("plan_version", sa.String(length=32), nullable=True))
    planned = "json_extract(params, '$.version')" if sqlite else "(params::json ->> 'version')"
    op.execute(f"UPDATE runs SET plan_version = COALESCE({planned}, version_requested)")
    if sqlite:
        _sqlite_foreign_keys_off()
        with op.batch_alter_table("runs", recreate="always") as b:
            b.alter_column("plan_version", existing_type=sa.String(length=32), nullable=False)
            b.drop_constraint("uq_run_identity", type_="unique")
            b.create_unique_constraint("uq_run_identity", list(NEW))
    else:
        op.alter_column("runs", "plan_version", existing_type=sa.String(length=32), nullable=False)
        op.drop_constraint("uq_run_identity", "runs", type_="unique")
        op.create_unique_constraint("uq_run_identity", "runs", list(NEW))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_foreign_keys_off()
        with op.batch_alter_table("runs", recreate="always") as b:
            b.drop_constraint("uq_run_identity", type_="unique")
            b.create_unique_constraint("uq_run_identity", list(OLD))
            b.drop_column("plan_version")
    else:
        op.drop_constraint("uq_run_identity", "runs", type_="unique")
        op.create_unique_constraint("uq_run_identity", "runs", list(OLD))
        op.drop_column("runs", "plan_version")
