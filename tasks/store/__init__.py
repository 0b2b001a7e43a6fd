"""The store: the SQL side of perfwatch (SQLAlchemy 2, Alembic), and nothing else.

Modules: ``schema`` (ORM tables), ``engine`` (engines, transactions, serialised migrations, URL normalisation,
the typed store errors: unreachable, corrupt, missing, schema too new), ``queries`` (the
named comparison queries in ``sql/queries/*.sql``), ``reads`` (what the stages read back: baselines,
samples, op tables, calibration history), ``writes`` (the archive's transaction, failure records,
baselines). May import ``tasks.records`` and ``tasks.settings`` only: it returns stored facts as records,
and what they mean is decided in ``tasks.analysis``; never a stage, the runner or the command line.

The schema and engine names are re-exported here: ``from tasks.store import Run, session_scope``.
"""

from tasks.store.engine import (
    MIGRATIONS_DIR,
    StoreCorrupt,
    StoreError,
    StoreMissing,
    StoreNotMigrated,
    StoreSchemaTooNew,
    StoreUnreachable,
    check_readable,
    get_engine,
    migrate,
    normalize_url,
    redact,
    require_existing,
    session_scope,
)
from tasks.store.schema import (
    Artifact,
    Base,
    Baseline,
    Environment,
    Model,
    ModelVersion,
    OpStat,
    Run,
    RunComparison,
    RunTable,
    StepBreakdown,
    StepQuantiles,
    StepSample,
    TelemetrySample,
    utcnow,
)

__all__ = [
    "MIGRATIONS_DIR",
    "Artifact",
    "Base",
    "Baseline",
    "RunComparison",
    "Environment",
    "Model",
    "ModelVersion",
    "OpStat",
    "Run",
    "RunTable",
    "StepBreakdown",
    "StepQuantiles",
    "StepSample",
    "StoreCorrupt",
    "StoreError",
    "StoreMissing",
    "StoreNotMigrated",
    "StoreSchemaTooNew",
    "StoreUnreachable",
    "TelemetrySample",
    "check_readable",
    "get_engine",
    "migrate",
    "normalize_url",
    "redact",
    "require_existing",
    "session_scope",
    "utcnow",
]
