"""Where perfwatch keeps things: one settings record read from the environment.

Every path is derived from ``PERFWATCH_HOME`` unless set on its own, so a single
variable moves the whole embedded default (SQLite file, model store, work dirs,
archive) and a deployment can point each part elsewhere (PostgreSQL URL,
``s3://`` archive, a separate TensorFlow/GPU interpreter for the runner).

The four stages that run a child process (env-fingerprint, warm-up, profiled run, paired run) each
have a time limit (``PERFWATCH_*_TIMEOUT_S``, seconds). A limit exists to stop a hung process, never
a slow healthy one: the defaults are several times what the stages took on the 2-core dev machine
under load (figures beside :data:`TIMEOUT_DEFAULTS`), and the two measuring stages also get
:data:`STEP_ALLOWANCE` times the warm-up's median step time for every step they time
(:meth:`Settings.runner_limit`), so 100 000 measured steps of a slow model are not cut short.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

RunnerStage = Literal["env-fingerprint", "warm-up", "profiled-run", "paired-run"]

#: Default time limit (s) of each stage that runs a child process, and its environment variable.
#: Measured on the 2-core dev machine on the demo's MobileNetV2 v2 (α=0.75, batch 16), wall time of the
#: child process including interpreter start and the TensorFlow import, at load average ~4 (other
#: work on the host) and ~11-14 (three more busy loops): env-fingerprint 17-29 s / 49-53 s; warm-up
#: 40 s / 131 s; profiled run of 320 measured steps 102 s / 451 s (median step 193 / 640 ms, so
#: about 40 s / 235 s outside the steps); paired run of 2 x 320 steps (v1 against v2) 162 s /
#: 607 s (about 310 s outside the steps when loaded). The defaults are 6-14x the loaded figures.
TIMEOUT_DEFAULTS: dict[RunnerStage, tuple[str, float]] = {
    "env-fingerprint": ("PERFWATCH_FINGERPRINT_TIMEOUT_S", 600.0),
    "warm-up": ("PERFWATCH_WARMUP_TIMEOUT_S", 1800.0),
    "profiled-run": ("PERFWATCH_PROFILE_TIMEOUT_S", 1800.0),
    "paired-run": ("PERFWATCH_PAIRED_TIMEOUT_S", 1800.0),
}

#: Days after which ``perfwatch db thin`` deletes a run's raw step samples, keeping its quantiles
#: (``tasks.store.retention``); unset: raw samples are kept forever.
RETENTION_VAR = "PERFWATCH_SAMPLES_RETENTION_DAYS"

#: The profiled and paired runs' limits grow by this many times the warm-up's median step time for
#: every step they run: a step may take several times longer than at warm-up when the host gets
#: busy (measured: the warm-up's median was 0.9-2.3x the measured steps' median, and a step under load
#: 3.3x one on a quieter host), and only a hung process should ever reach the limit.
STEP_ALLOWANCE = 10.0

#: The S3 checksum mode perfwatch sets where an S3 API other than AWS's is configured (``FSSPEC_S3_ENDPOINT_URL``,
#: or ``endpoint_url`` in fsspec's ``s3`` configuration): botocore >= 1.36 sends a CRC32 checksum with every PUT
#: and asks for one on every GET by default, which MinIO and Ceph versions reject (boto/boto3#4392);
#: ``when_required`` sends one only where the operation requires it, as botocore did before. Each is botocore
#: ``Config`` option -> the environment variable that, when set, is left to decide instead.
S3_CHECKSUM_MODE: dict[str, tuple[str, str]] = {
    "request_checksum_calculation": ("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required"),
    "response_checksum_validation": ("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required"),
}


def configure_object_store(env: dict[str, str]) -> dict[str, str]:
    """Set :data:`S3_CHECKSUM_MODE` in fsspec's ``s3`` configuration (``config_kwargs``, which s3fs hands botocore)
    of this process when an S3 endpoint other than AWS's is configured: ``FSSPEC_S3_ENDPOINT_URL`` in ``env``, or
    ``endpoint_url`` already in fsspec's configuration. An option set in ``config_kwargs`` or by its environment
    variable in ``env`` is left as it is. Idempotent; returns the options it set (empty: none, or no endpoint)."""
    import fsspec.config

    s3 = fsspec.config.conf.get("s3", {})
    if not (env.get("FSSPEC_S3_ENDPOINT_URL") or s3.get("endpoint_url")):
        return {}
    given = dict(s3.get("config_kwargs") or {})
    added = {k: v for k, (var, v) in S3_CHECKSUM_MODE.items() if k not in given and not env.get(var)}
    if added:
        fsspec.config.conf["s3"] = {**s3, "config_kwargs": {**given, **added}}
    return added


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name}={raw!r}: expected a time limit in seconds, a number > 0 (default {default:g})")
    return value


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
        work_root: local directory of the runs' work dirs, one per run of a case
            (``tasks.stages.pipeline.work_dir``; ``PERFWATCH_WORK``, default ``<home>/work``).
        scratch: URI of the scratch space the stages of one case hand their files on through when they run
            on hosts that share no disk (``PERFWATCH_SCRATCH``, e.g. ``s3://bucket/perfwatch/scratch``; any
            fsspec URI). None (unset): the work dirs under ``work_root`` are the scratch space, shared by every
            stage (one host, or a volume every worker mounts). Set: each task works in its own local work dir,
            fetches the files it reads from there and uploads the ones it writes (``tasks.stages.scratch``).
        runner_python: interpreter that runs ``python -m tasks.runner`` — the only place
            TensorFlow is imported (``PERFWATCH_RUNNER_PYTHON``, default this interpreter).
        runner_command: the command that starts the runner, ``SPEC.json`` appended (``PERFWATCH_RUNNER_COMMAND``,
            split like a shell line, e.g. ``docker run -i --gpus all IMAGE python -m tasks.runner``; default
            ``<runner_python> -m tasks.runner``; ``tasks.runner.driver.RunnerProcess``).
        config_path: YAML list of models for the nightly DAG (``PERFWATCH_CONFIG``: a local path or any fsspec
            URI, e.g. ``s3://bucket/perfwatch/perfwatch.yaml``; default ``config/perfwatch.yaml`` in the project).
        timeout_env: the ``PERFWATCH_*_TIMEOUT_S`` variables as set (``PERFWATCH_FINGERPRINT_TIMEOUT_S``,
            ``PERFWATCH_WARMUP_TIMEOUT_S``, ``PERFWATCH_PROFILE_TIMEOUT_S``, ``PERFWATCH_PAIRED_TIMEOUT_S``;
            defaults in :data:`TIMEOUT_DEFAULTS`), read by :meth:`timeout_s` when a stage starts, so a
            bad value fails that stage (recorded with the run) and no other command.
        samples_retention: ``PERFWATCH_SAMPLES_RETENTION_DAYS`` as set (None: unset, raw samples kept forever),
            read by :meth:`samples_retention_days` (``perfwatch db thin``; ``tasks.store.retention``).
    """

    home: Path
    database_url: str = field(repr=False)  # may hold a password: never in repr or logs
    model_store: str
    archive_root: str
    work_root: Path
    runner_python: str
    config_path: str
    runner_command: tuple[str, ...]
    timeout_env: dict[str, str] = field(default_factory=dict)
    samples_retention: str | None = None
    scratch: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``); nothing is created on disk. Where an S3 endpoint
        other than AWS's is configured, this process's S3 checksum mode is set (:func:`configure_object_store`)."""
        env = dict(os.environ if env is None else env)
        configure_object_store({**os.environ, **env})
        home = Path(env.get("PERFWATCH_HOME") or Path.home() / ".perfwatch").expanduser().resolve()
        project = Path(__file__).resolve().parent.parent
        runner_python = env.get("PERFWATCH_RUNNER_PYTHON") or sys.executable
        return cls(
            home=home,
            database_url=env.get("PERFWATCH_DATABASE_URL") or f"sqlite:///{home / 'perfwatch.db'}",
            model_store=env.get("PERFWATCH_MODEL_STORE") or str(home / "models"),
            archive_root=env.get("PERFWATCH_ARCHIVE") or str(home / "archive"),
            work_root=Path(env.get("PERFWATCH_WORK") or home / "work"),
            runner_python=runner_python,
            runner_command=tuple(shlex.split(env.get("PERFWATCH_RUNNER_COMMAND") or ""))
            or (runner_python, "-m", "tasks.runner"),
            config_path=env.get("PERFWATCH_CONFIG") or str(project / "config" / "perfwatch.yaml"),
            timeout_env={var: env[var] for var, _ in TIMEOUT_DEFAULTS.values() if var in env},
            samples_retention=env.get(RETENTION_VAR) or None,
            scratch=(env.get("PERFWATCH_SCRATCH") or "").strip() or None,
        )

    def with_store(self, db_url: str | None) -> Settings:
        """These settings with the store at ``db_url`` (None: as they are). The DAGs' tasks get their store from an
        Airflow connection (``PERFWATCH_DB_CONN_ID``, read by the plugin's ``PerfwatchStoreHook``) and hand its URL
        to the entry points they call (their ``db_url``), which use it instead of ``PERFWATCH_DATABASE_URL``."""
        return replace(self, database_url=db_url) if db_url else self

    def samples_retention_days(self) -> float | None:
        """Days after which a run's raw step samples may be thinned into its stored quantiles
        (``PERFWATCH_SAMPLES_RETENTION_DAYS``); None when unset (kept forever).

        Raises:
            ValueError: the variable is not a number of days > 0 (the message names it and its value).
        """
        if self.samples_retention is None or self.samples_retention.strip() == "":
            return None
        try:
            days = float(self.samples_retention)
        except ValueError:
            days = float("nan")
        if not days > 0 or days == float("inf"):
            raise ValueError(
                f"{RETENTION_VAR}={self.samples_retention!r}: expected a number of days > 0 (unset: keep every sample)"
            )
        return days

    def timeout_s(self, stage: RunnerStage) -> float:
        """The time limit (s) set for ``stage`` (its ``PERFWATCH_*_TIMEOUT_S``, else the default).

        Raises:
            ValueError: the variable is not a number of seconds > 0 (the message names it and its value).
        """
        var, default = TIMEOUT_DEFAULTS[stage]
        return _seconds(self.timeout_env, var, default)

    def runner_limit(
        self, stage: RunnerStage, *, timed_steps: int = 0, step_ms: float | None = None
    ) -> tuple[float, str]:
        """The time limit (s) of ``stage``'s child process and how it was made, for error messages.

        ``timed_steps`` steps of ``step_ms`` ms each (the warm-up's median step time) add
        ``STEP_ALLOWANCE * timed_steps * step_ms / 1000`` s to the stage's setting.

        Returns:
            (limit in s, e.g. ``"PERFWATCH_PROFILE_TIMEOUT_S=1800 s + 10 x 330 steps x 64.2 ms"``).

        Raises:
            ValueError: the stage's variable is not a number of seconds > 0 (see :meth:`timeout_s`).
        """
        var = TIMEOUT_DEFAULTS[stage][0]
        base = self.timeout_s(stage)
        how = f"{var}={base:g} s"
        if timed_steps > 0 and step_ms is not None and step_ms > 0:
            base += STEP_ALLOWANCE * timed_steps * step_ms / 1000.0
            how += f" + {STEP_ALLOWANCE:g} x {timed_steps} steps x {step_ms:.1f} ms"
        return base, how
