"""Where perfwatch keeps things: one settings record read from the environment.

Every path is derived from ``PERFWATCH_HOME`` unless set on its own, so a single
variable moves the whole embedded default (SQLite file, model store, work dirs,
archive) and a deployment can point each part elsewhere (PostgreSQL URL,
``s3://`` archive, a separate TensorFlow/GPU interpreter for the runner).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    """Resolved perfwatch settings.

    Attributes:
        home: root of the embedded default (``PERFWATCH_HOME``, default ``~/.perfwatch``).
        database_url: SQLAlchemy URL of the historical store (``PERFWATCH_DATABASE_URL``,
            default ``sqlite:///<home>/perfwatch.db``).
        model_store: URI of the versioned model store in TF-Serving layout
            ``<store>/<model>/<version>/`` (``PERFWATCH_MODEL_STORE``, default ``<home>/models``).
        archive_root: URI of the profile archive; ``tensorboard --logdir <archive>/<model>``
            opens it (``PERFWATCH_ARCHIVE``, default ``<home>/archive``).
        work_root: local scratch space for one DAG run's files (``PERFWATCH_WORK``,
            default ``<home>/work``).
        runner_python: interpreter that runs ``python -m tasks.runner`` — the only place
            TensorFlow is imported (``PERFWATCH_RUNNER_PYTHON``, default this interpreter).
        config_path: YAML list of models for the nightly DAG (``PERFWATCH_CONFIG``,
            default ``config/perfwatch.yaml`` in the project).
    """

    home: Path
    database_url: str = field(repr=False)  # may hold a password: never in repr or logs
    model_store: str
    archive_root: str
    work_root: Path
    runner_python: str
    config_path: Path

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``); nothing is created on disk."""
        env = dict(os.environ if env is None else env)
        home = Path(env.get("PERFWATCH_HOME") or Path.home() / ".perfwatch").expanduser().resolve()
        project = Path(__file__).resolve().parent.parent
        return cls(
            home=home,
            database_url=env.get("PERFWATCH_DATABASE_URL") or f"sqlite:///{home / 'perfwatch.db'}",
            model_store=env.get("PERFWATCH_MODEL_STORE") or str(home / "models"),
            archive_root=env.get("PERFWATCH_ARCHIVE") or str(home / "archive"),
            work_root=Path(env.get("PERFWATCH_WORK") or home / "work"),
            runner_python=env.get("PERFWATCH_RUNNER_PYTHON") or sys.executable,
            config_path=Path(env.get("PERFWATCH_CONFIG") or project / "config" / "perfwatch.yaml"),
        )
