"""The seven stages, named once: each stage's id (the store's ``failed_stage``, log lines), its Airflow task
id, the ``RunState`` field its record fills, the record's type, what it does, and the time-limit setting
of the runner process it starts. The pipeline (``tasks.stages.pipeline``), ``perfwatch run`` and the
tests read the stages from here; ``dags/perfwatch_profile.py`` names its tasks by ``task_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from tasks.records import (
    ArchiveRecord,
    Case,
    CompareRecord,
    EnvRecord,
    ParseRecord,
    ProfiledRun,
    PulledModel,
    Record,
    WarmupRecord,
)
from tasks.settings import RunnerStage

StageId = Literal[
    "pull-model-version", "env-fingerprint", "warm-up", "profiled-run", "parse", "baseline-compare", "archive"
]
#: a ``RunState`` field that a stage fills
StateField = Literal["pulled", "env", "warmup", "run", "parsed", "verdict", "archived"]


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline.

    Attributes:
        id: ``pull-model-version``...: the store's ``runs.failed_stage``, log lines, error messages.
        task_id: its task in the DAG ``perfwatch_profile`` (``pull_model_version``...): the three measuring
            stages are one task, ``measure`` (one host measures the case: ``pipeline.measure_case``).
        field: the ``RunState`` field its record fills (``pulled``...).
        record: that record's type.
        doing: what it does, as its start line in the log says (a DAG task log, or ``perfwatch run`` on stderr);
            ``doing_application``: what it does instead for a keras.applications case (``Case.backbone``), where that
            differs (:meth:`says`).
        time_limit: the ``tasks.settings.TIMEOUT_DEFAULTS`` entry of the runner process it starts (None: none);
            the profiled run's paired gate has its own (``paired-run``).
        reads: the files of earlier stages it needs: ``(field, attribute)`` of a path in the ``RunState`` (an
            attribute that is None, e.g. ``paired_path`` of a run without a paired gate, is not needed).
        reads_dirs: directories of the run's work dir it also reads when an earlier stage wrote them (archive:
            the Data Docs ``gx``); with ``PERFWATCH_SCRATCH`` they are downloaded with ``reads``
            (``tasks.stages.scratch``).
    """

    id: StageId
    task_id: str
    field: StateField
    record: type[Record]
    doing: str
    time_limit: RunnerStage | None = None
    reads: tuple[tuple[StateField, str], ...] = ()
    reads_dirs: tuple[str, ...] = ()
    doing_application: str | None = None

    def says(self, case: Case) -> str:
        """What the stage's start line says it does for ``case``: ``doing_application`` for a keras.applications
        case (the pull stage builds the model in the runner), else ``doing`` (a model store's ``.keras`` file or
        SavedModel is copied and hashed)."""
        if case.backbone == "keras.applications" and self.doing_application:
            return self.doing_application
        return self.doing


STAGES: tuple[Stage, ...] = (
    Stage(
        "pull-model-version",
        "pull_model_version",
        "pulled",
        PulledModel,
        "copying and hashing the model version",
        doing_application="building the keras.applications model in the runner and hashing its config",
    ),
    Stage(
        "env-fingerprint",
        "measure",
        "env",
        EnvRecord,
        "reading TF build, NVML, CPU, OS and packages in the runner interpreter",
        time_limit="env-fingerprint",
    ),
    Stage(
        "warm-up",
        "measure",
        "warmup",
        WarmupRecord,
        "fresh runner process: steps until step time is steady",
        time_limit="warm-up",
        reads=(("pulled", "local_path"),),
    ),
    Stage(
        "profiled-run",
        "measure",
        "run",
        ProfiledRun,
        "fresh runner process: warm-up, measured steps (profiler off), then the profiled window",
        time_limit="profiled-run",
        reads=(("pulled", "local_path"),),
    ),
    Stage(
        "parse",
        "parse",
        "parsed",
        ParseRecord,
        "xprof converts the XSpace: step-time breakdown, op self-times, memory",
        reads=(("run", "samples_path"), ("run", "profile_dir")),
    ),
    Stage(
        "baseline-compare",
        "baseline_compare",
        "verdict",
        CompareRecord,
        "finding the comparable baseline; statistics and the Great Expectations suites",
        reads=(("run", "samples_path"), ("run", "paired_path"), ("parsed", "parsed_path")),
    ),
    Stage(
        "archive",
        "archive",
        "archived",
        ArchiveRecord,
        "writing run, samples and verdict in one transaction; moving the profile to the archive",
        reads=(
            ("run", "samples_path"),
            ("run", "paired_path"),
            ("parsed", "parsed_path"),
            ("run", "profile_dir"),
            ("verdict", "gx_results_path"),
            ("run", "tflite_path"),
        ),
        reads_dirs=("gx",),
    ),
)
"""The stages in the order they run (the design card's)."""

STAGE_IDS: tuple[StageId, ...] = get_args(StageId)
_BY_ID: dict[str, Stage] = {s.id: s for s in STAGES}
_BY_FIELD: dict[str, Stage] = {s.field: s for s in STAGES}


def stage(stage_id: str) -> Stage:
    """The stage of this id (``parse``...).

    Raises:
        ValueError: no stage has that id (the message lists the ids).
    """
    try:
        return _BY_ID[stage_id]
    except KeyError:
        raise ValueError(f"no stage {stage_id!r}; the stages are {', '.join(STAGE_IDS)}") from None


def producer(field: StateField) -> Stage:
    """The stage whose record fills this ``RunState`` field."""
    return _BY_FIELD[field]
