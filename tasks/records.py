"""Small typed records handed from stage to stage (as JSON through Airflow XCom).

Each stage takes plain values and returns one of these; ``to_xcom()`` gives the
JSON-safe dict and ``Model.model_validate(d)`` reads it back. Large things (step
samples, profiles, parsed tables) travel as work-dir paths, never inline.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Trigger = Literal["scheduled", "manual", "release", "cli", "test"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def safe_name(raw: str) -> str:
    """``raw`` with every run of characters outside ``[A-Za-z0-9_.-]`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)


class Record(BaseModel):
    """Base of all stage records: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_xcom(self) -> dict[str, Any]:
        """The record as a JSON-serialisable dict."""
        return self.model_dump(mode="json")


#: measured steps per run when a case does not say (see ``Case``): enough for the paired gate to
#: resolve a 5% slowdown on the noisy 2-core dev machine (``bench/detection.py``).
DEFAULT_MEASURED_STEPS = 320


class Case(Record):
    """One benchmark case: which model, and how it is measured.

    Attributes:
        model: model name in the store (letters, digits, ``_.-``).
        version: integer version directory, or ``latest`` (highest integer).
        batch_size: examples per training step.
        measured_steps: steps timed with the profiler OFF (our timer, ms). Default 320
            (``DEFAULT_MEASURED_STEPS``): what a paired gate needs to catch a 5% slowdown 95% of the
            time at 14% step-to-step noise (the 2-core dev machine, ``bench/detection.py``); a quiet
            GPU host needs far fewer.
        profiled_steps: steps run under the TF profiler with step markers.
        seed: seed for synthetic inputs and weights init (recorded with the run).
        deterministic: run with TF op determinism (``TF_DETERMINISTIC_OPS``).
        warmup_window, warmup_cv_max, warmup_max_steps: the steady-state rule of the warm-up
            stage: rolling coefficient of variation of the last ``warmup_window`` step times
            below ``warmup_cv_max``, at most ``warmup_max_steps`` steps.
        tolerance: relative step-time change that counts (0.05 = 5%).
        confidence: confidence level of the comparison interval.
        lookback: how many accepted runs form the history baseline.
        paired: re-measure the baseline version in the same process (A/B, release gates; a
            ``release`` trigger is always paired).
        paired_blocks, paired_block_steps: the paired (A/B) layout: ``paired_blocks`` block pairs in
            ABBA order of ``paired_block_steps`` steps per block (default 1: A B B A A B ...;
            short blocks cancel more of the host's slow drift). Unset ``paired_blocks`` is
            ``measured_steps // paired_block_steps``, so the cost,
            ``2 * paired_blocks * paired_block_steps`` extra timed steps, is twice the measured
            steps (640 by default), plus one more model load and warm-up per version.
        paired_offset_sd: sd (log scale) of the speed difference between two identical model copies
            loaded in one process, which blocks cannot average out; it widens the paired interval
            (``tasks.analysis.stats.compare_paired``). None: estimated from the store's A/A release gates
            (the same version gated against itself), else 0 (``tasks.analysis.calibration``: 10
            self-vs-self processes on the 2-core dev machine showed no offset).
        prior_between_sd: prior sd (log scale) of the drift of median step time between
            processes for the history comparison; ``None`` (default) estimates it from the
            store's accepted runs in the same environment, falling back to 0.05 (rule:
            ``tasks.analysis.calibration``).
        auto_accept: a run whose verdict is pass / no-baseline / improvement / env-changed
            becomes the active baseline automatically (a regression never does).
    """

    model: str
    version: str = "latest"
    batch_size: int = Field(16, ge=1, le=65536)
    measured_steps: int = Field(DEFAULT_MEASURED_STEPS, ge=5, le=100_000)
    profiled_steps: int = Field(5, ge=1, le=1000)
    seed: int = 0
    deterministic: bool = False
    warmup_window: int = Field(5, ge=2, le=7)
    warmup_cv_max: float = Field(0.05, gt=0)
    warmup_max_steps: int = Field(60, ge=10)  # must leave room for min_steps (3) + a window
    tolerance: float = Field(0.05, gt=0, lt=1)
    confidence: float = Field(0.99, gt=0.5, lt=1)
    lookback: int = Field(5, ge=1, le=100)
    paired: bool = False
    paired_blocks: int | None = Field(None, ge=2, le=10_000)  # None: filled in by _paired_layout
    paired_block_steps: int = Field(1, ge=1, le=10_000)
    prior_between_sd: float | None = Field(None, gt=0, lt=1)
    paired_offset_sd: float | None = Field(None, ge=0, lt=1)
    auto_accept: bool = True

    @model_validator(mode="before")
    @classmethod
    def _paired_layout(cls, data: Any) -> Any:
        """Unset ``paired_blocks`` becomes ``measured_steps // paired_block_steps`` (at least 2): each
        version of a paired gate then gets as many timed steps as a normal run measures."""
        if isinstance(data, dict) and data.get("paired_blocks") is None:
            try:
                steps = int(data.get("measured_steps", DEFAULT_MEASURED_STEPS))
                block = max(1, int(data.get("paired_block_steps", 1)))
            except (TypeError, ValueError):
                return data  # the field validators name the bad value
            data = {**data, "paired_blocks": max(2, steps // block)}
        return data

    @field_validator("model")
    @classmethod
    def _model_name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"model name {v!r} must match {_NAME.pattern}")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        v = str(v)
        if v != "latest" and not v.isdigit():
            raise ValueError(f"version {v!r} must be a non-negative integer or 'latest'")
        return v

    @property
    def name(self) -> str:
        """The case key runs are compared within, e.g. ``train-bs16``."""
        return f"train-bs{self.batch_size}" + ("-det" if self.deterministic else "")

    @property
    def paired_timed_steps(self) -> int:
        """Timed steps of the paired (A/B) measurement, both versions together."""
        return 2 * self.paired_blocks * self.paired_block_steps


class RunContext(Record):
    """Identity of one DAG run of one case; (dag_id, dag_run_id, case) is unique in the store.
    ``started_at`` (UTC) is when the case was planned, i.e. when its DAG run began."""

    dag_id: str
    dag_run_id: str
    trigger: Trigger = "manual"
    case: Case
    started_at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))

    @property
    def wants_paired(self) -> bool:
        """A release trigger, or a case with ``paired=True``, gets the paired (A/B) measurement."""
        return self.trigger == "release" or self.case.paired

    @property
    def slug(self) -> str:
        """Filesystem-safe name of this run's work directory."""
        return safe_name(f"{self.dag_id}__{self.dag_run_id}__{self.case.model}__{self.case.name}")


class PulledModel(Record):
    """Output of pull-model-version: the resolved version and its local copy."""

    model: str
    version: str
    source_uri: str
    local_path: str
    format: Literal["keras", "saved_model"]
    digest: str  # sha256 hex over the copied files (path + bytes)
    size_bytes: int


class EnvRecord(Record):
    """Output of env-fingerprint: the full fingerprint and its two hashes."""

    fingerprint_id: str
    comparability_key: str
    data: dict[str, Any]


class WarmupRecord(Record):
    """Output of warm-up (our timer, ms): steady-state step count and the cold first step."""

    warmup_steps: int
    steady: bool
    final_cv: float | None
    cold_step_ms: float
    step_times_ms: list[float]
    wall_s: float


class ProfiledRun(Record):
    """Output of the profiled run: where its files are and the runner's own timings.

    ``samples_path`` holds the runner's JSON result with every measured and profiled step
    time (ms, our timer); ``profile_dir`` is the TF profiler logdir holding
    ``plugins/profile/<ts>/<host>.xplane.pb``.

    Paired runs (release gates) also carry ``paired_path``: the runner's JSON result of the A/B
    measurement (``blocks``: per block pair its order and the per-step ms of the baseline
    version A and the candidate B), the baseline version that was re-measured
    (``baseline_model``), and that measurement's wall time (s).
    """

    work_dir: str
    samples_path: str
    profile_dir: str
    measured_steps: int
    median_step_ms: float
    throughput_eps: float  # examples/s at the median step time
    profile_overhead_ratio: float  # median profiled step / median measured step
    peak_rss_bytes: int
    peak_device_bytes: int | None
    wall_s: float
    paired_path: str | None = None
    baseline_model: PulledModel | None = None
    paired_wall_s: float | None = None


class ParseRecord(Record):
    """Output of parse: headline numbers from xprof and the path of the full tables (JSON)."""

    parsed_path: str
    avg_step_time_ms: float | None
    input_bound_pct: float | None
    n_ops: int
    findings: list[str]
    cross_check_ratio: float | None
    cross_check_ok: bool | None


class CompareRecord(Record):
    """Output of baseline-compare: the verdict and its evidence (JSON-safe)."""

    verdict: Literal["pass", "regression", "improvement", "inconclusive", "no-baseline", "env-changed"]
    method: str
    baseline_run_ids: list[int]
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    median_limit_ms: float | None
    gx_success: bool
    evidence: dict[str, Any]
    gx_results_path: str | None = None  # the full GX validation results (JSON), stored by archive


class ArchiveRecord(Record):
    """Output of archive: the stored run's id and where its profile now lives."""

    run_id: int
    archive_uri: str
    verdict: str
