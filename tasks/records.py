"""Small typed records handed from stage to stage (as JSON through Airflow XCom).

Each stage takes plain values and returns one of these; ``to_xcom()`` gives the
JSON-safe dict and ``Model.model_validate(d)`` reads it back. Large things (step
samples, profiles, parsed tables) travel as work-dir paths, never inline.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator

from tasks import wire

Trigger = Literal["scheduled", "manual", "release", "cli", "test", "calibrate", "confirm"]

#: Longest model name, in characters (the store's ``models.name`` column).
MAX_NAME_CHARS = 128
#: Longest directory name perfwatch makes, in UTF-8 bytes (filesystems allow 255).
MAX_DIR_NAME_BYTES = 200
#: Most timed steps per version of one run: ``measured_steps``, and ``paired_blocks * paired_block_steps``.
MAX_TIMED_STEPS = 100_000
#: Longest readable case label, in characters (``Case.label``, :func:`case_label`).
MAX_LABEL_CHARS = 48

_CONTROL = frozenset({"Cc", "Cs", "Zl", "Zp"})  # control chars, lone surrogates (bytes that are not UTF-8), line breaks


def check_model_name(name: str) -> str:
    """``name`` if it can name a model: any directory name of the model store, in any script, that is
    not a path trick.

    Raises:
        ValueError: the name is empty, ``.`` or ``..``, holds a path separator (``/``, ``\\``) or a
            control character (named by code point, e.g. U+000A), is longer than
            ``MAX_NAME_CHARS`` characters or 255 UTF-8 bytes.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("model name is empty; expected the name of a directory of the model store")
    if name in (".", ".."):
        raise ValueError(f"model name {name!r} is a relative path, not a directory name")
    if sep := next((c for c in name if c in "/\\"), None):
        raise ValueError(f"model name {name!r} holds the path separator {sep!r}; expected one directory name")
    if bad := next((c for c in name if unicodedata.category(c) in _CONTROL), None):
        raise ValueError(
            f"model name {name!r} holds the control character U+{ord(bad):04X}; "
            "expected a directory name without control characters"
        )
    if len(name) > MAX_NAME_CHARS or len(name.encode("utf-8")) > 255:
        raise ValueError(
            f"model name {name[:40]!r}... is {len(name)} characters ({len(name.encode('utf-8'))} "
            f"bytes) long; at most {MAX_NAME_CHARS} characters and 255 bytes"
        )
    return name


def safe_name(raw: str) -> str:
    """``raw`` as one directory name: every run of characters other than letters, marks and digits (any
    script) and ``_.-`` becomes ``_`` (so ASCII names keep their old spelling); a result of only dots
    gets a leading ``_``; one longer than ``MAX_DIR_NAME_BYTES`` UTF-8 bytes is cut and ends with
    ``~`` and 10 hex digits of the sha256 of ``raw`` (distinct inputs stay distinct)."""
    out, gap = [], False
    for c in raw:
        if c in "_.-" or unicodedata.category(c)[0] in "LMN":
            out.append(c)
            gap = False
        elif not gap:
            out.append("_")
            gap = True
    name = "".join(out)
    if name.strip(".") == "":
        name = "_" + name
    if len(name.encode("utf-8")) > MAX_DIR_NAME_BYTES:
        suffix = "~" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        cut = name.encode("utf-8")[: MAX_DIR_NAME_BYTES - len(suffix)].decode("utf-8", "ignore")
        name = cut + suffix
    return name


def run_slug(dag_id: str, dag_run_id: str, model: str, version: str, case_name: str) -> str:
    """The work-directory name of one run of one case (``RunContext.slug``): ``safe_name`` of
    ``<dag_id>__<dag_run_id>__<model>__v<version>__<case>``, ``version`` as planned (``Case.version``: ``latest``
    or a pinned one); a model name that ``safe_name`` changes (spaces, punctuation) adds 8 hex digits of its
    sha256, so two models (or two versions of one model) of one DAG run never share a work dir."""
    if safe_name(model) != model:
        model += "__" + hashlib.sha256(model.encode("utf-8")).hexdigest()[:8]
    return safe_name(f"{dag_id}__{dag_run_id}__{model}__v{version}__{case_name}")


def canonical_version(version: str) -> str:
    """A model version as perfwatch records it: ``latest``, or the integer with leading zeros dropped
    (``0001`` -> ``1``, as TF Serving reads version directories).

    Raises:
        ValueError: neither ``latest`` nor ASCII digits (names the value).
    """
    v = str(version).strip()
    if v == "latest":
        return v
    if not (v.isascii() and v.isdigit()):
        raise ValueError(
            f"version {version!r} must be a non-negative integer (a version directory such as 3 or 0003) or 'latest'"
        )
    return str(int(v))


APPLICATION_VERSION = re.compile(r"keras[0-9A-Za-z.+_]{1,18}-[0-9a-f]{8}")
"""A keras.applications case's version (``tasks.runner.applications.version_string``): ``keras<Keras
version>-<8 hex of the architecture config's sha256>``, e.g. ``keras3.15.1-1a2b3c4d``, at most 32 characters."""
#: an environment variable name (POSIX portable: letters, digits and _, not a digit first)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def stored_version(version: str) -> str:
    """A version as the store records it, to look runs up by: a model store version (:func:`canonical_version`:
    ``latest`` or an integer, ``0003`` -> ``3``) or a keras.applications case's (:data:`APPLICATION_VERSION`,
    ``keras3.15.1-1a2b3c4d``, kept as written). What ``perfwatch compare`` and ``perfwatch gate`` accept.

    Raises:
        ValueError: neither (names the value and both forms).
    """
    v = str(version).strip()
    if APPLICATION_VERSION.fullmatch(v):
        return v
    try:
        return canonical_version(v)
    except ValueError:
        raise ValueError(
            f"version {version!r} must be a model store version (a version directory such as 3 or 0003, or "
            "'latest') or a keras.applications case's keras<Keras version>-<8 hex>, e.g. keras3.15.1-1a2b3c4d"
        ) from None


METRICS: dict[str, str] = {
    "step_time": "median step time (ms, our timer; per batch in infer/tflite mode)",
    "throughput": "examples/s at the median step time",
    "memory_usage": "peak host RSS and peak device memory (bytes, shown in MiB)",
    "latency": "per-batch latency p50/p90/p99 with their intervals and n (infer/tflite)",
}
"""The figures a case's ``metrics:`` line may name (``Case.metrics``), and what each is."""

THROUGHPUT_DEFS: dict[str, str] = {
    "median_step": "examples/s at the median step",
    "server_achieved": "queries/s achieved",
    "offline_run": "examples/s over the run",
}
"""What a stored ``runs.throughput_eps`` measures (``runs.throughput_def``, migration 0013), by definition name:
``median_step`` a step's examples over the median step time (every run until scenarios had their own figure,
and single-stream, train, tflite and ingested runs still), ``server_achieved`` a server run's queries served per
second at its reported point, ``offline_run`` an offline run's examples over its measured wall time. Two
definitions are two metrics: a series, a change-point search or a comparison of throughput keeps to one."""


def throughput_def(serving: Mapping[str, Any] | None) -> str:
    """The :data:`THROUGHPUT_DEFS` name of a run's throughput, from its scenario summary ``serving``
    (``latency_ms.serving``, ``tasks.analysis.serving.summarize``; None for a run without one): ``server_achieved``
    or ``offline_run`` for a server or offline run whose summary has a finite positive ``throughput_eps``
    (examples/s, then the run's figure), else ``median_step``. The one rule ``serving.run_throughput_eps``
    follows and the archive stores."""
    s = serving or {}
    own = s.get("throughput_eps")
    if isinstance(own, int | float) and not isinstance(own, bool) and math.isfinite(own) and own > 0:
        return {"server": "server_achieved", "offline": "offline_run"}.get(str(s.get("scenario")), "median_step")
    return "median_step"


# Throughput across definitions: one rule for every reader (the CLI, the pages, the hardware comparison). Two
# definitions are two metrics under one name, so a figure is shown with its definition (throughput_text), two
# runs' figures are compared only under one definition (throughput_pair_text), and a median is taken over runs of
# one definition only (throughputs_of_one_definition).

THROUGHPUT_NOT_RECORDED = "not recorded"
"""What a throughput whose definition the store does not hold (None, or a name it does not know) is called."""


def throughput_definition_text(definition: str | None) -> str:
    """What a throughput of ``definition`` (a :data:`THROUGHPUT_DEFS` name) measures, in words with its unit:
    ``examples/s at the median step``; :data:`THROUGHPUT_NOT_RECORDED` for None or an unknown name."""
    return (
        THROUGHPUT_DEFS.get(str(definition), THROUGHPUT_NOT_RECORDED)
        if definition is not None
        else THROUGHPUT_NOT_RECORDED
    )


def throughput_text(value: float, definition: str | None) -> str:
    """One throughput with what it measures: ``812.4 examples/s at the median step`` (one decimal)."""
    return f"{value:.1f} {throughput_definition_text(definition)}"


def throughput_comparable(a: str | None, b: str | None) -> bool:
    """Whether two throughputs of definitions ``a`` and ``b`` are one metric: the same definition."""
    return a == b


def throughput_pair_text(a_value: float, a_def: str | None, b_value: float, b_def: str | None) -> str:
    """Two runs' throughputs, a then b: ``throughput 812.4 -> 790.1 examples/s at the median step`` under one
    definition; under two, each named and not compared: ``throughput not compared: 812.4 examples/s at the median
    step vs 95.0 queries/s achieved (two definitions)``."""
    if not throughput_comparable(a_def, b_def):
        return (
            f"throughput not compared: {throughput_text(a_value, a_def)} vs {throughput_text(b_value, b_def)} "
            "(two definitions)"
        )
    return f"throughput {a_value:.1f} -> {b_value:.1f} {throughput_definition_text(a_def)}"


def throughputs_of_one_definition(
    rows: Sequence[Mapping[str, Any]], *, value: str = "throughput_eps", definition: str = "throughput_def"
) -> tuple[list[float], str | None, int]:
    """The throughputs of ``rows`` (oldest first) that share the newest row's definition, to take one median of:
    (the finite ``value`` of each row whose ``definition`` is the newest such row's, that definition, how many rows
    with a throughput of another definition were left out). Rows without a throughput are skipped;
    ([], None, 0) when none has one."""
    have = [r for r in rows if isinstance(r.get(value), int | float) and math.isfinite(float(r[value]))]
    if not have:
        return [], None, 0
    newest = have[-1].get(definition)
    kept = [float(r[value]) for r in have if throughput_comparable(r.get(definition), newest)]
    return kept, newest, len(have) - len(kept)


DEFAULT_LEAD: tuple[str, ...] = ("step_time", "throughput")
"""What a verdict line leads with when the case has no ``metrics:`` line."""


def check_metrics(names: Any) -> list[str]:
    """``names`` (a case's ``metrics:`` line) as a list of :data:`METRICS` names, each once.

    Raises:
        ValueError: not a list of strings, an unknown name (names it and lists the valid ones), or a name twice.
    """
    if isinstance(names, str) or not isinstance(names, list | tuple) or not names:
        raise ValueError(f"metrics {names!r}: expected a non-empty list of names, e.g. [throughput, step_time]")
    valid = ", ".join(METRICS)
    out: list[str] = []
    for n in names:
        if not isinstance(n, str) or n not in METRICS:
            raise ValueError(f"metrics: unknown metric {n!r}; the metrics are {valid}")
        if n in out:
            raise ValueError(f"metrics: {n!r} is listed twice")
        out.append(n)
    return out


def lead_order(metrics: Sequence[str] | None) -> list[str]:
    """The figures a verdict line shows, in order: a case's ``metrics`` (``Case.metrics``) first, as written,
    then those of :data:`DEFAULT_LEAD` it leaves out; without a metrics line :data:`DEFAULT_LEAD`."""
    first = list(metrics or [])
    return first + [m for m in DEFAULT_LEAD if m not in first]


def version_label(version: str) -> str:
    """A version as output names it: ``v3`` for a version directory, a keras.applications version as it is
    (``keras3.15.1-1a2b3c4d``, which says what it is)."""
    return f"v{version}" if str(version).isdigit() else str(version)


def newest_version(versions: Sequence[Any]) -> str | None:
    """The newest of the model versions ``versions`` (as stored; ordered oldest to newest measured): the highest
    version directory number (``12`` after ``9``), else, for keras.applications versions (no number), the last
    in ``versions``; None for none. ``latest`` (a request never resolved: a run that failed before its pull)
    is no version."""
    known = [str(v) for v in versions if v is not None and str(v) not in ("", "latest")]
    numbered = [v for v in known if v.isdigit()]
    if numbered:
        return max(numbered, key=int)
    return known[-1] if known else None


class Record(BaseModel):
    """Base of all stage records: immutable, unknown fields rejected; NaN and infinities cross JSON as
    :mod:`tasks.wire` says (``"NaN"``, ``"Infinity"``, ``"-Infinity"``) and read back as the floats."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan=wire.PYDANTIC_INF_NAN)

    @model_validator(mode="before")
    @classmethod
    def _numbers_from_json(cls, data: Any) -> Any:
        return wire.decode_untyped({k: f.annotation for k, f in cls.model_fields.items()}, data)

    def to_xcom(self) -> dict[str, Any]:
        """The record as a dict of strict JSON values (no NaN or infinities: :func:`tasks.wire.encode`), what
        Airflow's XCom, its HTTP API and PostgreSQL's ``json`` accept; ``Model.model_validate`` reads it back."""
        return wire.encode_object(self.model_dump(mode="json"))


#: measured steps per run when a case does not say (see ``Case``): enough for the paired gate to
#: resolve a 5% slowdown on the noisy 2-core dev machine (``bench/detection.py``).
DEFAULT_MEASURED_STEPS = 320
#: most processes of a paired gate (Case.paired_processes) unless the case says: both versions share each process,
#: so the spread between processes largely cancels within it (bench/processes.py: median 5 processes)
PAIRED_PROCESSES = 6
#: most process pairs of a cross-environment gate unless the case says: each side has its own processes, so every
#: pair holds the whole spread between two processes (sd 0.069 of the log ratio with 2 intra-op threads, 0.031
#: with 1, demo_mobilenet on the 2-core dev VM, 2026-12-04, bench/process_offset.py); at sd 0.07 the 99%
#: interval of the last look is +/-3.2% at 40 pairs (+/-4.2% at 24), so an identical pair of environments passes
#: the 5% tolerance in about 89% of gates (38% at 24), while a difference of 20% or more decides within a few pairs
ENVIRONMENT_PROCESS_PAIRS = 40


#: ``json_schema_extra`` of a Case field set in the YAML config and by ``perfwatch run``, but not a DAG Param (the
#: trigger form keeps the few a manual trigger needs). A field without a mark is all three
#: (``tasks.stages.params.case_param_schema``); every Case field is a ``perfwatch run`` option.
NOT_A_PARAM: dict[str, Any] = {"set_in": ["config", "cli"]}

Mode = Literal["train", "infer", "tflite"]
Precision = Literal["fp32", "mixed_float16", "mixed_bfloat16"]
Strategy = Literal["none", "mirrored"]
#: the kind of device a case runs on: ``auto`` is whatever the measuring host's TensorFlow sees (a GPU where
#: one is visible, else the CPU: the behaviour before cases named a device); tasks.devices
Device = Literal["auto", "cpu", "gpu", "tpu"]
Quantization = Literal["none", "dynamic", "int8"]
#: how inference queries reach the model (MLPerf LoadGen's scenarios; tasks.runner.loadgen): one at a time,
#: all at once, or arriving as a Poisson process at a target rate
Scenario = Literal["single-stream", "offline", "server"]


def _number_word(x: float) -> str:
    """A rate or a bound as a case-name word: ``50``, ``12.5`` (``%g``, no exponent within the fields' limits)."""
    return f"{x:g}"


class InputSpec(Record):
    """How to feed one model input (``Case.inputs[name]``): the user's word where the model's own
    signature is not enough (a ``None`` dimension, an integer range such as a vocabulary).

    Attributes:
        shape: the shape of one example, without the batch dimension, e.g. ``[224, 224, 3]``; every
            dimension a positive integer (a ``None`` of the model must be given here).
        dtype: numpy/TF dtype name (``float32``, ``int32``...); None: the model's declared dtype.
        min, max: integer inputs: synthetic values are drawn uniformly from ``[min, max)``
            (e.g. ``0`` and the vocabulary size for token ids); None: inferred by the runner (an
            ``Embedding`` that consumes the input), else refused with a message asking for them.
            Floating inputs: uniform in ``[min, max)`` when both are given, else standard normal.
    """

    # the schema says what the validator checks (the trigger form refuses a 0); the validator gives the message
    shape: list[Annotated[int, WithJsonSchema({"type": "integer", "minimum": 1})]] | None = None
    dtype: str | None = None
    min: int | None = None
    max: int | None = None

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any((not isinstance(d, int)) or d < 1 for d in v):
            raise ValueError(f"input shape {v} must list positive integers (one example, without the batch dimension)")
        return v

    @model_validator(mode="after")
    def _range(self) -> InputSpec:
        if self.min is not None and self.max is not None and self.max <= self.min:
            raise ValueError(f"input range min={self.min}, max={self.max}: max must be greater than min")
        return self


#: The tolerance ``Case.cold_step_tolerance`` stands at when unset: above the widest interval of the real A/A gates at
#: the look where their step time decided (docs/verdicts.md, "Default tolerances"; ``bench/process_figures.py``), so
#: a gate of a version against itself passes on it, while a first step half as slow again (a new trace, an XLA
#: compile) is a regression (``tasks.analysis.metric_gates``).
COLD_STEP_DEFAULT_TOLERANCE = 0.5
#: The tolerance ``Case.memory_tolerance`` stands at when unset, measured the same way.
MEMORY_DEFAULT_TOLERANCE = 0.25


class Case(Record):
    """One benchmark case: which model, and how it is measured. Each field's description says what it does
    (the DAG's trigger form shows it: ``tasks.stages.params``); every field is set in the YAML config and by its
    ``perfwatch run`` option, and a field that is no DAG Param says so in its ``json_schema_extra``
    (``NOT_A_PARAM``)."""

    model: str = Field(
        description="Model name: a directory of the model store, in any script (no '..', path separators or "
        "control characters; at most 128 characters)."
    )
    version: str = Field(
        "latest",
        pattern=r"^(latest|[0-9]+)$",
        description="Integer version directory (0003 is 3, as in TF Serving), or 'latest' (the highest version "
        "directory that holds a model).",
    )
    batch_size: int = Field(
        16, ge=1, le=65536, description="Examples per step (a training step or an inference batch)."
    )
    measured_steps: int = Field(
        DEFAULT_MEASURED_STEPS,
        ge=5,
        le=MAX_TIMED_STEPS,
        description="Steps timed with the profiler off (our timer, ms); a paired release gate times at most this "
        "many steps of each version, stopping as soon as its interval decides. The default is what a paired gate "
        "needs to catch a 5% slowdown at 14% step-to-step noise (bench/detection.py).",
    )
    profiled_steps: int = Field(
        5,
        ge=1,
        le=1000,
        description="Steps run under the TF profiler, with step markers.",
        json_schema_extra=NOT_A_PARAM,
    )
    seed: int = Field(
        0,
        description="Seed of synthetic inputs and weights init (recorded with the run).",
        json_schema_extra=NOT_A_PARAM,
    )
    deterministic: bool = Field(
        False, description="Run with TF op determinism (TF_DETERMINISTIC_OPS).", json_schema_extra=NOT_A_PARAM
    )
    warmup_window: int = Field(
        5,
        ge=2,
        le=7,
        description="Warm-up is steady when the coefficient of variation of the last this many step times is below "
        "warmup_cv_max.",
        json_schema_extra=NOT_A_PARAM,
    )
    warmup_cv_max: float = Field(
        0.05, gt=0, description="The warm-up's steady-state coefficient of variation.", json_schema_extra=NOT_A_PARAM
    )
    warmup_max_steps: int = Field(  # must leave room for min_steps (3) + a window
        60, ge=10, description="Most steps of the warm-up.", json_schema_extra=NOT_A_PARAM
    )
    tolerance: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Relative step-time change that counts (0.05 = 5%).",
        json_schema_extra=NOT_A_PARAM,
    )
    confidence: float = Field(
        0.99, gt=0.5, lt=1, description="Confidence level of the comparison interval.", json_schema_extra=NOT_A_PARAM
    )
    lookback: int = Field(
        5, ge=1, le=100, description="Accepted runs that form the history baseline.", json_schema_extra=NOT_A_PARAM
    )
    paired: bool = Field(
        False,
        description="Re-measure the baseline version in the same process (A/B), as a release gate does (no "
        "baseline accepted: the newest earlier version measured); a release trigger is always paired, and so is a "
        "scheduled run whose version differs from that version.",
        json_schema_extra=NOT_A_PARAM,
    )
    # never None on a Case: the before-validator _paired_layout fills an unset one
    paired_blocks: int = Field(  # type: ignore[assignment]
        None,
        ge=2,
        le=MAX_TIMED_STEPS,
        description="Most block pairs of the paired gate, in ABBA order; unset: measured_steps // "
        "paired_block_steps. The gate is sequential (tasks.analysis.sequential): it stops at the first look whose "
        "interval decides, spending 2 x pairs x paired_block_steps timed steps (evidence['paired']['spent']).",
        json_schema_extra=NOT_A_PARAM,
    )
    paired_block_steps: int = Field(
        1,
        ge=1,
        le=10_000,
        description="Steps per block of the paired gate (short blocks cancel more of the host's slow drift); "
        "at most 100000 timed steps per version.",
        json_schema_extra=NOT_A_PARAM,
    )
    prior_between_sd: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Prior sd (log scale) of the drift of median step time between processes, for the history "
        "comparison; unset: estimated from the store's accepted runs in the environment, else 0.05 "
        "(tasks.analysis.calibration).",
        json_schema_extra=NOT_A_PARAM,
    )
    paired_offset_sd: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Sd (log scale) of the speed difference of two identical model copies in one process, which "
        "widens the paired interval; unset: estimated from the store's A/A release gates, else 0.",
        json_schema_extra=NOT_A_PARAM,
    )
    paired_round_pairs: int = Field(
        16,
        ge=2,
        le=MAX_TIMED_STEPS,
        description="Pairs measured between two looks of the sequential gate (the first look is at 32 pairs; a "
        "budget under 32 pairs gets one look at the end).",
        json_schema_extra=NOT_A_PARAM,
    )
    # never None on a Case: the before-validator _paired_layout fills an unset one
    paired_processes: int = Field(  # type: ignore[assignment]
        None,
        ge=1,
        le=1000,
        description="Most fresh processes of the paired gate, the unit of its interval (tasks.analysis.processes): "
        "each times paired_blocks // paired_processes ABBA pairs of both versions, and the gate looks after each "
        "process from the third on, stopping when the interval across processes decides. 1: one process, whose "
        f"interval comes from its steps (the design before processes were the unit). Unset: {PAIRED_PROCESSES}; "
        f"a cross-environment gate (baseline_runner, baseline_env): {ENVIRONMENT_PROCESS_PAIRS} process pairs, "
        "since its two sides cannot share a process and each pair holds the whole spread between processes.",
        json_schema_extra=NOT_A_PARAM,
    )
    baseline_runner: str | None = Field(
        None,
        min_length=1,
        description="A cross-environment gate: the command that starts side A's runner (the baseline environment: "
        "another venv's or image's interpreter and '-m tasks.runner', e.g. '/opt/tf222/bin/python -m tasks.runner'; "
        "split like a shell line), SPEC.json appended. Side B runs in this run's own runner. Unset: A runs in B's.",
    )
    baseline_env: dict[str, str] | None = Field(
        None,
        description="A cross-environment gate: environment variables set for side A's runner only (KEY: VALUE, "
        "e.g. {TF_NUM_INTRAOP_THREADS: '1'}; on the command line KEY=VALUE, repeated), over B's environment. With "
        "baseline_runner or baseline_env set, the paired gate compares the two environments on the same model "
        "version (tasks.stages.profiled_run).",
    )
    max_other_cpu_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="The host is busy when other processes took more than this share of its CPU time during the "
        "measurement; the verdict is then inconclusive ('host busy: ...').",
        json_schema_extra=NOT_A_PARAM,
    )
    max_steal_share: float = Field(
        0.05,
        gt=0,
        le=1,
        description="The host is busy when the hypervisor stole more than this share of its CPU time during the "
        "measurement (a shared virtual machine); neither wall nor CPU time then decides: the verdict is "
        "inconclusive ('host busy: ...').",
        json_schema_extra=NOT_A_PARAM,
    )
    auto_accept: bool = Field(
        True,
        description="A run whose verdict is pass, no-baseline or improvement becomes the active baseline (a "
        "regression never does, nor an environment change left undecided: env-changed), unless its measurement "
        "was unsound: a busy host, a warm-up that never got steady, or timed steps that compiled "
        "(CompareRecord.baseline_refused; accept it with perfwatch baseline accept).",
        json_schema_extra=NOT_A_PARAM,
    )
    allow_partial_batches: bool = Field(
        False,
        description="Measure steps fed fewer examples than batch_size (an input_fn's last batch of an epoch) as "
        "fed, throughput counting the examples fed; unset: such a step fails the run. Not part of the case "
        "identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    mode: Mode = Field(
        "train",
        description="What a step is: 'train' (forward, backward, update), 'infer' (one batch's forward pass, or a "
        "SavedModel's signature; step times are per-batch latencies) or 'tflite' (the model converted by "
        "TFLiteConverter, timed in the interpreter).",
    )
    inputs: dict[str, InputSpec] | None = Field(
        None,
        description='How to feed the model, per input name: {"image": {"shape": [224, 224, 3]}, "ids": {"dtype": '
        '"int32", "min": 0, "max": 30522}}; shape without the batch dimension (needed where the model has None), '
        "integer range [min, max). Empty: the model's own input signature.",
    )
    input_fn: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="'package.module:function' (importable by the runner) returning a tf.data.Dataset of "
        "model-ready batches of batch_size; step time then includes that pipeline. Empty: synthetic batches.",
    )
    signature: str = Field(
        "serving_default", min_length=1, max_length=128, description="The SavedModel signature called in 'infer' mode."
    )
    safe_mode: bool = Field(
        True,
        description="Keras safe_mode when loading a .keras file; turn off only for a model whose code (Lambda "
        "layers) you trust. Recorded with the run.",
    )
    precision: Precision = Field(
        "fp32",
        description="Keras mixed-precision policy: fp32, mixed_float16 (with a loss-scaling optimizer) or "
        "mixed_bfloat16.",
        json_schema_extra=NOT_A_PARAM,
    )
    xla: bool = Field(False, description="Compile the step with XLA (jit_compile).", json_schema_extra=NOT_A_PARAM)
    strategy: Strategy = Field(
        "none",
        description="none, or mirrored (tf.distribute.MirroredStrategy over the visible devices).",
        json_schema_extra=NOT_A_PARAM,
    )
    quantization: Quantization = Field(
        "none",
        description="tflite mode only: none, dynamic (dynamic-range) or int8 (full integer, with a representative "
        "dataset drawn from the input spec).",
        json_schema_extra=NOT_A_PARAM,
    )
    tflite_threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="tflite mode only: the TFLite interpreter's num_threads; unset: the CPUs the runner process may "
        "use (its CPU affinity, os.sched_getaffinity). The count used is recorded with the run (run_tables tool "
        "tflite, num_threads).",
        json_schema_extra=NOT_A_PARAM,
    )
    cold_step_tolerance: float | None = Field(
        None,
        gt=0,
        le=10,
        description="A paired gate of several processes also gates the cold step (the first step: tracing, with XLA "
        "the compilation, and one step; ms) of the two versions, one figure per version and process, the order the "
        "versions were set up in taken out (tasks.analysis.metric_gates; a cross-environment gate: over its process "
        "pairs): a ratio whose interval lies above 1 and past 1 + this tolerance is a regression on the cold step, "
        "whatever the step time; the gate goes on until it decides, and an undecided one is said in the reason. "
        f"Unset: judged at {COLD_STEP_DEFAULT_TOLERANCE}; the gate goes on for it only while it looks past that (its "
        "estimate above 1 + the default) and is undecided, and an undecided one is in the evidence, not the reason. "
        "Not part of the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    memory_tolerance: float | None = Field(
        None,
        gt=0,
        le=10,
        description="A paired gate of several processes also gates each version's resident memory (what its load, "
        "build and cold step added to the process's resident set, bytes), taken in the processes that set that "
        "version up first and compared between processes (tasks.analysis.metric_gates.first_built_gate); a "
        "cross-environment gate gates each process's peak resident memory over its process pairs. A ratio whose "
        "interval lies above 1 and past 1 + this tolerance is a regression on memory, whatever the step time "
        "(judged on a busy host too: it is no time); the gate goes on until it decides. Unset: judged at "
        f"{MEMORY_DEFAULT_TOLERANCE}; the gate goes on for it only while it looks past that and is undecided. Not "
        "part of the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    min_top1_agreement: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Mixed precision, XLA or tflite: the least share of examples whose top-1 class must match the fp32 "
        "eager model's on the same inputs (tasks.runner.agreement, classifier outputs); a run below it is a "
        "regression on output agreement, whatever its step time. Unset: recorded, not judged. Not part of the case "
        "identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    max_output_rel_diff: float | None = Field(
        None,
        gt=0,
        description="Mixed precision, XLA or tflite: the largest relative difference of the outputs from the fp32 "
        "eager model's on the same inputs (per output, its largest absolute difference over the reference's largest "
        "magnitude); a run above it is a regression on output agreement. Unset: recorded, not judged. Not part of "
        "the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    scenario: Scenario = Field(
        "single-stream",
        description="infer/tflite: how queries reach the model (MLPerf LoadGen's scenarios, tasks.runner.loadgen): "
        "single-stream (one batch at a time, the next when the last is done: per-batch latency), offline (every "
        "query available at once, batches back to back: throughput over the whole run) or server (queries arrive "
        "as a Poisson process at target_qps and are served in arrival order, up to batch_size waiting queries a "
        "batch: per-query latency from arrival to result, queueing included). Part of the case name.",
    )
    target_qps: float | None = Field(
        None,
        ge=0.01,
        le=100_000,
        description="server scenario: the Poisson arrival rate, queries/s (part of the case name, -q<rate>); with "
        "search_qps the first rate tried (unset: the capacity the warm-up's step time gives, batch_size / median).",
    )
    search_qps: bool = Field(
        False,
        description="server scenario: bisect on the rate for the highest QPS whose latency_percentile's 95% upper "
        "bound stays within latency_bound_ms, every point at least the queries its percentile needs; every point "
        "tried is reported. Part of the case name (-search-b<bound>ms).",
    )
    latency_bound_ms: float | None = Field(
        None,
        ge=0.01,
        le=100_000,
        description="single-stream/server: the latency bound, ms; a run records whether the upper bound of its "
        "latency_percentile's 95% interval is within it (server: per query, queueing included). Needed by "
        "search_qps.",
    )
    server_min_duration_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="server scenario: each rate's point lasts at least this long (s): queries = the larger of "
        "measured_steps (at least what the percentile's interval needs) and rate x this, rounded up to measured_steps "
        "x a power of 2 (MLPerf's minimum duration, 600 s, scaled down). Not part of the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    latency_percentile: float = Field(
        99.0,
        ge=50,
        le=99.9,
        description="The percentile that latency_bound_ms bounds (99: p99, as MLPerf's server scenario).",
    )
    telemetry_interval_ms: int = Field(
        100,
        ge=10,
        le=1000,
        description="How often the runner samples device telemetry during the measured steps (NVML per GPU, else "
        "host CPU and RSS), ms, at most 1000 (a GPU's utilization is the mean of NVML's samples since the "
        "previous reading; tasks.runner.telemetry). Not part of the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    label: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_LABEL_CHARS,
        description="A readable name for the case, e.g. 'slow image pipeline', shown beside its stable name "
        "(Case.name, e.g. train-bs16-in1be8b91f) in tables, pages, alerts and metrics (case_label). Not part of "
        "the case's identity: a new label keeps the case's history and baseline. Unset: derived from the input "
        "options (tasks.records.case_label).",
        json_schema_extra=NOT_A_PARAM,
    )
    warmup_reuse_days: float = Field(
        7.0,
        ge=0,
        le=365,
        description="Reuse the steady-state step count of this case's newest warm-up on the same model bytes and "
        "environment within this many days instead of a warm-up process (the profiled run still warms up in its "
        "own process); 0: always warm up afresh. Not part of the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    gate_percentile: float | None = Field(
        None,
        gt=50,
        lt=100,
        description="A paired release gate also gates this percentile of the per-step times (99: the p99 latency of "
        "an infer case), from the same ABBA measurement (tasks.analysis.tail): the candidate/baseline ratio of "
        "the two p99s with a distribution-free interval, verdict regression when either the median's or this "
        "gate's interval lies above the band. It needs per version min_samples(p, 1 - (1 - confidence)/2) steps "
        "(p99: 528 at confidence 0.99, 367 at 0.95; paired_blocks x paired_block_steps); with fewer its verdict "
        "is inconclusive (too few samples for p99). A gate with it measures its whole budget. On a server case the "
        "paired blocks time batches back to back, the service time: the compare stage also tests this percentile "
        "per query (arrival to result) against the baseline run's at the same rate, and each point issues the "
        "queries that test needs. Unset: the median only. Not part of the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )
    metrics: list[str] | None = Field(
        None,
        description="The figures the case's verdict line and summaries (perfwatch run, perfwatch runs) lead with, "
        "in this order, e.g. [throughput, memory_usage, step_time] (the benchmarking guide's metrics line); names: "
        "step_time, throughput, memory_usage, latency. Every run records all of them; unset: step time, then "
        "throughput. Not part of the case identity.",
        json_schema_extra=NOT_A_PARAM,
    )

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics_words(cls, v: Any) -> Any:
        if isinstance(v, str):  # the command line's --metrics throughput,step_time
            return [m.strip() for m in v.split(",") if m.strip()]
        return v

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else check_metrics(v)

    backbone: Literal["keras.applications"] | None = Field(
        None,
        description="Where the model comes from: unset, the model store; 'keras.applications', the architecture "
        "the model name gives (resnet50, efficientnetb0, mobilenet_v3_small, mobilenetv2...), built by the runner "
        "with random weights (weights=None: nothing is downloaded) and versioned keras<Keras version>-<8 hex of "
        "its config's sha256>; give version latest.",
        json_schema_extra=NOT_A_PARAM,
    )
    input_shape: list[Annotated[int, WithJsonSchema({"type": "integer", "minimum": 1})]] | None = Field(
        None,
        description="backbone keras.applications only: one example's shape, without the batch dimension, e.g. "
        "[96, 96, 3] (or '96,96,3'); unset: the constructor's default (224, 224, 3). Part of the case name.",
        json_schema_extra=NOT_A_PARAM,
    )
    classes: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="backbone keras.applications only: output classes; unset: the constructor's default (1000). "
        "Part of the case name.",
        json_schema_extra=NOT_A_PARAM,
    )

    @field_validator("input_shape", mode="before")
    @classmethod
    def _input_shape(cls, v: Any) -> Any:
        if isinstance(v, str):  # the command line's --input-shape 96,96,3
            try:
                return [int(d) for d in v.replace(" ", "").strip("()[]").split(",") if d]
            except ValueError:
                raise ValueError(
                    f"input shape {v!r}: expected positive integers separated by commas, e.g. 96,96,3"
                ) from None
        return v

    @field_validator("input_shape")
    @classmethod
    def _input_shape_dims(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(d < 1 for d in v)):
            raise ValueError(f"input shape {v} must list positive integers (one example, without the batch dimension)")
        return v

    @model_validator(mode="after")
    def _backbone_options(self) -> Case:
        if self.backbone is None:
            given = [f for f in ("input_shape", "classes") if getattr(self, f) is not None]
            if given:
                raise ValueError(
                    f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to backbone keras.applications "
                    "only (a store model has its own)"
                )
        elif self.version != "latest":
            raise ValueError(
                f"version {self.version!r}: a keras.applications model is built by the runner's Keras and versioned "
                "keras<Keras version>-<config hash> by the pull stage; give version latest"
            )
        return self

    device: Device = Field(
        "auto",
        description="The kind of device the case runs on: cpu (the GPUs hidden from TensorFlow, so the CPU is "
        "measured), gpu or tpu (the runner refuses the case on a host where TensorFlow sees none), or auto (whatever "
        "the measuring host's TensorFlow sees). The config's queues: section maps each kind to the Celery queue "
        "of the workers that have it (tasks.devices).",
    )
    hardware: str | None = Field(
        None,
        pattern=r"^(cpu|gpu|tpu)(-[a-z0-9_.]+)+$",
        max_length=32,
        description="A hardware label within the device kind, e.g. gpu-h100: it names the case (a history per "
        "label) and may have its own queue in the config's queues: section; its first word is the device kind.",
    )

    @model_validator(mode="before")
    @classmethod
    def _device_of_hardware(cls, data: Any) -> Any:
        """A ``hardware`` label without ``device`` gives the device kind (its first word, ``gpu-h100``: gpu)."""
        if isinstance(data, dict) and isinstance(data.get("hardware"), str) and data.get("device") in (None, "auto"):
            data = {**data, "device": data["hardware"].split("-", 1)[0]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _paired_layout(cls, data: Any) -> Any:
        """Unset ``paired_blocks`` becomes ``measured_steps // paired_block_steps`` (at least 2): each
        version of a paired gate then gets as many timed steps as a normal run measures. The derived
        value is kept within its limits, so a bad ``measured_steps`` is reported as such, never as a
        ``paired_blocks`` the user did not give. Unset ``paired_processes`` becomes :data:`PAIRED_PROCESSES`,
        or :data:`ENVIRONMENT_PROCESS_PAIRS` for a cross-environment case."""
        if isinstance(data, dict) and data.get("paired_processes") is None:
            cross = data.get("baseline_runner") is not None or bool(data.get("baseline_env"))
            data = {**data, "paired_processes": ENVIRONMENT_PROCESS_PAIRS if cross else PAIRED_PROCESSES}
        if isinstance(data, dict) and data.get("paired_blocks") is None:
            try:
                steps = int(data.get("measured_steps", DEFAULT_MEASURED_STEPS))
                block = max(1, int(data.get("paired_block_steps", 1)))
            except (TypeError, ValueError):
                return data  # the field validators name the bad value
            data = {**data, "paired_blocks": min(MAX_TIMED_STEPS, max(2, steps // block))}
        return data

    @field_validator("baseline_env", mode="before")
    @classmethod
    def _baseline_env_pairs(cls, v: Any) -> Any:
        """``KEY=VALUE`` strings (``perfwatch run --baseline-env``, repeated) as the mapping; an empty one: None."""
        if isinstance(v, list | tuple):
            bad = [x for x in v if not isinstance(x, str) or "=" not in x]
            if bad:
                raise ValueError(f"baseline_env: {bad[0]!r} is not KEY=VALUE (e.g. TF_NUM_INTRAOP_THREADS=1)")
            v = dict(x.split("=", 1) for x in v)
        return v or None

    @field_validator("baseline_env")
    @classmethod
    def _baseline_env(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        bad = [k for k in v or {} if not ENV_NAME.fullmatch(k)]
        if bad:
            raise ValueError(
                f"baseline_env: {bad[0]!r} is not an environment variable name (letters, digits, _; not a digit first)"
            )
        return v

    @property
    def cross_environment(self) -> bool:
        """Whether the paired gate compares two runner environments (``baseline_runner`` or ``baseline_env``
        set): side A in the baseline environment, side B in this run's, each in its own processes."""
        return self.baseline_runner is not None or bool(self.baseline_env)

    @model_validator(mode="after")
    def _paired_size(self) -> Case:
        if self.cross_environment and self.paired_processes < 3:
            raise ValueError(
                f"paired_processes={self.paired_processes}: a cross-environment gate (baseline_runner, baseline_env) "
                "runs each side in its own processes and looks across process pairs from the third on; give at "
                "least 3"
            )
        if self.paired_processes == 2:
            raise ValueError(
                "paired_processes=2: a gate across processes looks from its third process on (its between-process "
                "spread needs 2 degrees of freedom); give 1 (one process) or at least 3"
            )
        per_version = self.paired_blocks * self.paired_block_steps
        if per_version > MAX_TIMED_STEPS:
            raise ValueError(
                f"paired_blocks={self.paired_blocks} x paired_block_steps={self.paired_block_steps} "
                f"is {per_version} timed steps per version; at most {MAX_TIMED_STEPS}, as for measured_steps"
            )
        return self

    @model_validator(mode="after")
    def _mode_options(self) -> Case:
        if self.quantization != "none" and self.mode != "tflite":
            raise ValueError(
                f"quantization={self.quantization!r} applies to mode 'tflite' only (mode is {self.mode!r})"
            )
        if self.tflite_threads is not None and self.mode != "tflite":
            raise ValueError(
                f"tflite_threads={self.tflite_threads} applies to mode 'tflite' only (mode is {self.mode!r})"
            )
        if self.mode == "tflite" and (self.precision, self.xla, self.strategy) != ("fp32", False, "none"):
            raise ValueError(
                f"mode 'tflite' times the TFLite interpreter: precision={self.precision!r}, xla={self.xla}, "
                f"strategy={self.strategy!r} do not apply to it (give fp32, no xla, none; use quantization)"
            )
        if self.mode == "tflite" and self.device in ("gpu", "tpu"):
            raise ValueError(
                f"mode 'tflite' runs the TFLite interpreter on the CPU (perfwatch loads no GPU or TPU delegate): "
                f"device={self.device!r} would time the CPU under a {self.device} case name; give device cpu or auto"
            )
        if self.hardware is not None and self.hardware.split("-", 1)[0] != self.device:
            raise ValueError(f"hardware={self.hardware!r} is not a label of device {self.device!r} (it starts with it)")
        if self.inputs and self.input_fn:
            raise ValueError(
                f"give inputs or input_fn, not both: the batches of input_fn {self.input_fn!r} decide "
                "the shapes and values fed"
            )
        return self

    @model_validator(mode="after")
    def _scenario_options(self) -> Case:
        if self.scenario != "single-stream" and self.mode == "train":
            raise ValueError(f"scenario={self.scenario!r} applies to modes 'infer' and 'tflite' (mode is 'train')")
        if self.scenario != "server":
            given = [f for f in ("target_qps", "search_qps") if getattr(self, f) not in (None, False)]
            if given:
                raise ValueError(
                    f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to scenario 'server' "
                    f"only (scenario is {self.scenario!r})"
                )
        elif self.target_qps is None and not self.search_qps:
            raise ValueError("scenario 'server' needs target_qps (queries/s), or search_qps with latency_bound_ms")
        if self.search_qps and self.latency_bound_ms is None:
            raise ValueError("search_qps needs latency_bound_ms: the bound the highest QPS must keep its percentile in")
        if self.latency_bound_ms is not None and self.mode == "train":
            raise ValueError("latency_bound_ms applies to modes 'infer' and 'tflite' (mode is 'train')")
        if self.latency_bound_ms is not None and self.scenario == "offline":
            raise ValueError(
                "latency_bound_ms does not apply to scenario 'offline' (its figure is throughput, as LoadGen's "
                "offline has no latency bound)"
            )
        return self

    @field_validator("model")
    @classmethod
    def _model_name(cls, v: str) -> str:
        return check_model_name(v)

    @field_validator("label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and (v != v.strip() or any(unicodedata.category(c) in _CONTROL for c in v)):
            raise ValueError(
                f"label {v!r} must be one line without leading or trailing spaces (a name shown beside the case's)"
            )
        return v

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v: Any) -> str:
        return canonical_version(v)

    @property
    def name(self) -> str:
        """The case key runs are compared within (each name has its own history and baseline), built
        from the axes that change what is measured, in this order, defaults left out: ``<mode>-bs<batch_size>
        [-<scenario>[-q<target_qps>|-search-[p<percentile>]b<latency_bound_ms>ms]][-<precision>][-xla][-<strategy>]
        [-<quantization>][-t<tflite_threads>][-det][-<device or hardware>][-in<8 hex>]``, e.g. ``train-bs16``,
        ``train-bs32-mixed_bfloat16-xla``, ``tflite-bs1-int8-t4``, ``infer-bs1-offline``, ``infer-bs4-server-q50``,
        ``infer-bs1-server-search-b20ms`` (p99 left out as the default),
        ``train-bs16-gpu``, ``train-bs16-gpu-h100`` (the hardware label, when set, in place of the device kind;
        ``auto`` adds nothing). The ``-in`` part is the sha256 of the input options (``inputs``, ``input_fn``, a
        non-default ``signature``; a ``backbone``'s ``input_shape`` and ``classes``): two input shapes or
        pipelines are two cases, never one history. At most 64 characters (``runs.case_name``).
        """
        parts = [self.mode, f"bs{self.batch_size}"]
        if self.scenario != "single-stream":  # another scenario measures another thing: its own history
            parts.append(self.scenario)
        if self.scenario == "server":
            if self.search_qps:
                pct = "" if self.latency_percentile == 99 else f"p{_number_word(self.latency_percentile)}"
                parts += ["search", f"{pct}b{_number_word(self.latency_bound_ms or 0)}ms"]
            else:
                parts.append(f"q{_number_word(self.target_qps or 0)}")
        if self.precision != "fp32":
            parts.append(self.precision)
        if self.xla:
            parts.append("xla")
        if self.strategy != "none":
            parts.append(self.strategy)
        if self.quantization != "none":
            parts.append(self.quantization)
        if self.tflite_threads is not None:  # the interpreter's threads change its speed: another history
            parts.append(f"t{self.tflite_threads}")
        if self.deterministic:
            parts.append("det")
        if self.device != "auto":
            parts.append(self.hardware or self.device)
        if self.inputs or self.input_fn or self.signature != "serving_default" or self.backbone:
            ident: dict[str, Any] = {
                "inputs": {k: v.to_xcom() for k, v in sorted((self.inputs or {}).items())},
                "input_fn": self.input_fn,
                "signature": None if self.signature == "serving_default" else self.signature,
            }
            if self.backbone:  # an application's shape and classes, and never a store model's history
                ident["application"] = [self.backbone, self.input_shape, self.classes]
            parts.append("in" + hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:8])
        return "-".join(parts)

    @property
    def paired_timed_steps(self) -> int:
        """Timed steps of the paired (A/B) measurement at most, both versions together, all its processes."""
        return 2 * self.paired_process_pairs * self.paired_processes * self.paired_block_steps

    @property
    def paired_process_pairs(self) -> int:
        """ABBA block pairs each process of the paired gate times: ``paired_blocks // paired_processes``, at least 2
        (one process: ``paired_blocks``)."""
        return max(2, self.paired_blocks // self.paired_processes)


def check_case_name(name: str) -> str:
    """``name`` if :attr:`Case.name` can produce it (``train-bs16``, ``infer-bs8-mixed_bfloat16-xla``,
    ``tflite-bs1-int8-in1a2b3c4d``): its axes, read back into a ``Case``, give the same name (the
    ``-in<8 hex>`` part, a hash of the input options, is checked for its form only).

    Raises:
        ValueError: ``name`` is not ``<mode>-bs<batch_size>`` followed by the axes ``Case.name`` writes,
            in its order, defaults left out, or names a case ``Case`` rejects (names the value).
    """
    words: dict[str, tuple[str, Any]] = {"xla": ("xla", True), "det": ("deterministic", True)}
    for axis, values in (("precision", Precision), ("strategy", Strategy), ("quantization", Quantization)):
        words |= {v: (axis, v) for v in get_args(values)}
    parts = name.split("-")
    if len(parts) > 2 and re.fullmatch(r"in[0-9a-f]{8}", parts[-1]):
        parts.pop()
    device = next((i for i, p in enumerate(parts) if i >= 2 and p in get_args(Device) and p != "auto"), None)
    if device is not None:  # the device kind, or the hardware label that starts with it, ends the axes
        label = "-".join(parts[device:])
        words[label] = ("hardware", label) if device + 1 < len(parts) else ("device", label)
        parts = [*parts[:device], label]
    words |= {p: ("tflite_threads", int(p[1:])) for p in parts[2:] if re.fullmatch(r"t[1-9][0-9]{0,3}", p)}
    words |= {"offline": ("scenario", "offline"), "server": ("scenario", "server"), "search": ("search_qps", True)}
    number = r"[0-9]+(?:\.[0-9]+)?"
    words |= {p: ("target_qps", float(p[1:])) for p in parts[2:] if re.fullmatch(rf"q{number}", p)}
    for p in parts[2:]:
        if m := re.fullmatch(rf"(?:p({number}))?b({number})ms", p):
            words[p] = ("latency", (float(m[1] or 99), float(m[2])))
    expected = (
        "<mode>-bs<batch_size>[-<scenario>[-q<qps>|-search-[p<pct>]b<bound>ms]][-<precision>][-xla][-<strategy>]"
        "[-<quantization>][-t<threads>][-det][-<device or hardware>][-in<8 hex>]"
    )
    if len(parts) < 2 or parts[1][:2] != "bs" or any(p not in words for p in parts[2:]):
        raise ValueError(f"case name {name!r} is not {expected}")
    try:
        axes = {"model": "case", "mode": parts[0], "batch_size": parts[1][2:], **dict(words[p] for p in parts[2:])}
        if "latency" in axes:  # one word, two fields: the percentile and its bound
            axes["latency_percentile"], axes["latency_bound_ms"] = axes.pop("latency")
        case = Case.model_validate(axes)
    except ValueError as e:
        raise ValueError(f"case name {name!r} names no valid case: {e}") from e
    if case.name != "-".join(parts):
        raise ValueError(f"case name {name!r} is not {expected} (this case is named {case.name!r})")
    return name


def case_label(case: Case | Mapping[str, Any] | str | None) -> str | None:
    """The readable name shown beside a case's stable name (``Case.name``), of a ``Case`` or of a run's stored
    ``params`` (its Case as a JSON dict, or that JSON's text as SQLite returns it): the case's own ``label``
    when the config gives one, else what its ``-in<8 hex>`` part hashes, in words: the ``input_fn``'s function
    name (``tasks.runner.input_fns:images_slow`` -> ``images_slow``), or per input ``name:shape`` with its
    dtype and integer range (``image:64x64x3``, ``ids:16 int32 [0,30522)``, inputs in name order, ``; ``
    between them), then ``signature:<name>`` for a non-default SavedModel signature; at most
    ``MAX_LABEL_CHARS`` characters (a longer one is cut and ends with ``…``). None for a case that has
    neither (its name says it all: ``train-bs16``) and for missing params.

    Raises:
        ValueError: ``case`` is neither a Case, a mapping, JSON text of an object, nor None.
    """
    if case is None:
        return None
    if isinstance(case, str):
        case = json.loads(case)
    if isinstance(case, Case):
        case = case.to_xcom()
    if not isinstance(case, Mapping):
        raise ValueError(f"case_label: expected a Case or its stored params (a JSON object), got {type(case).__name__}")
    if case.get("label"):
        return str(case["label"])
    words = []
    if fn := case.get("input_fn"):
        words.append(str(fn).rpartition(":")[2])
    for name, spec in sorted((case.get("inputs") or {}).items()):
        spec = spec or {}
        parts = ["x".join(str(d) for d in spec["shape"])] if spec.get("shape") else []
        if spec.get("dtype"):
            parts.append(str(spec["dtype"]))
        if spec.get("min") is not None and spec.get("max") is not None:
            parts.append(f"[{spec['min']},{spec['max']})")
        words.append(f"{name}:{' '.join(parts)}" if parts else str(name))
    if (sig := case.get("signature")) and sig != "serving_default":
        words.append(f"signature:{sig}")
    label = "; ".join(words)
    if not label:
        return None
    return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"


def case_title(case_name: str, label: str | None) -> str:
    """A case as one line of text: its stable name, with its readable label beside it when it has one
    (:func:`case_label`): ``train-bs16-in1be8b91f (images_slow)``, ``train-bs16``."""
    return f"{case_name} ({label})" if label else case_name


class RunContext(Record):
    """Identity of one DAG run of one case: (dag_id, dag_run_id, model, version as planned, case) is unique in
    the store (``runs.plan_version`` holds ``case.version``): two models of one nightly may share a case name,
    and one release DAG run may gate two versions of a model.
    ``started_at`` (UTC) is when the case was planned, i.e. when its DAG run began."""

    dag_id: str
    dag_run_id: str
    trigger: Trigger = "manual"
    case: Case
    started_at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))
    #: re-measure this version as the paired gate's A instead of the baseline's (``perfwatch calibrate``
    #: gates a version against itself: an A/A gate); None: the baseline's version
    paired_version: str | None = None

    @field_validator("paired_version", mode="before")
    @classmethod
    def _paired_version(cls, v: Any) -> str | None:
        return None if v is None else canonical_version(v)

    @property
    def wants_paired(self) -> bool:
        """Paired whatever the versions: a release trigger, a case with ``paired=True``, or an explicit
        ``paired_version``."""
        return (
            self.trigger == "release"
            or self.case.paired
            or self.case.cross_environment
            or self.paired_version is not None
        )

    def pairs_with(self, candidate_version: str | None, baseline_version: str | None) -> bool:
        """Whether this run gets the paired (A/B) gate against ``baseline_version``, the version to pair with
        (the accepted baseline's, else the newest earlier version measured: ``tasks.stages.pipeline.
        pull_paired_baseline``; None: nothing to pair with, never paired unless ``paired_version`` names A or the
        case is a cross-environment gate): when it ``wants_paired``, and also when a scheduled (nightly) run's
        resolved ``candidate_version`` (None: not known) differs from it -- the history verdict alone detects a 5%
        change in 0.4% of runs on a drifting host."""
        if self.paired_version is not None or self.case.cross_environment:  # A: this run's version, elsewhere
            return True
        if baseline_version is None:
            return False
        changed = candidate_version is not None and str(candidate_version) != str(baseline_version)
        return self.wants_paired or (self.trigger == "scheduled" and changed)

    @property
    def slug(self) -> str:
        """Filesystem-safe name of this run's work directory (:func:`run_slug`)."""
        return run_slug(self.dag_id, self.dag_run_id, self.case.model, self.case.version, self.case.name)

    @property
    def identity(self) -> str:
        """The run's identity as one line of text, for messages: ``<dag_id> <dag_run_id> <model> v<version as
        planned> <case>``."""
        return f"{self.dag_id} {self.dag_run_id} {self.case.model} {version_label(self.case.version)} {self.case.name}"


class PulledModel(Record):
    """Output of pull-model-version: the resolved version and its local copy."""

    model: str
    version: str
    source_uri: str
    local_path: str
    format: Literal["keras", "saved_model"]
    digest: str  # sha256 hex over the copied files (path + bytes)
    size_bytes: int
    #: a built model's (``backbone``): what the builder built, from the runner's ``BuildResult``: constructor,
    #: keras_version, params, input_shape and output_shape (one example), config_sha256 and weights_sha256 (hex);
    #: None for a model pulled from the store (its files' ``digest`` says what it is)
    built: dict[str, Any] | None = None


class EnvRecord(Record):
    """Output of env-fingerprint: the full fingerprint and its two hashes."""

    fingerprint_id: str
    comparability_key: str
    data: dict[str, Any]


class WarmupRecord(Record):
    """Output of warm-up (our timer, ms): steady-state step count and the cold first step.

    ``reused_from_run_id``: set when no warm-up process ran and the record is that stored run's warm-up
    (``tasks.stages.warmup.reusable_warm_up``; ``wall_s`` is then 0); its ``step_times_ms`` only size the
    next process's time limit and are not stored again with the new run.
    """

    warmup_steps: int
    steady: bool
    final_cv: float | None
    cold_step_ms: float
    step_times_ms: list[float]
    wall_s: float
    reused_from_run_id: int | None = None


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
    profile_overhead_ratio: float | None  # median profiled / median measured step; None: no window (tflite)
    peak_rss_bytes: int
    peak_device_bytes: int | None
    wall_s: float
    paired_path: str | None = None
    baseline_model: PulledModel | None = None
    paired_wall_s: float | None = None
    #: tflite mode: the converted ``.tflite`` model on the measuring host (the result's ``tflite_path``, which is
    #: relative to the runner's out dir, resolved against it); None in other modes
    tflite_path: str | None = None
    #: the measurement's noise against the bounds (``tasks.analysis.calibration.Noise`` as a dict): of the
    #: paired gate when there is one, else of the measured steps; None when not assessed
    noise: dict[str, Any] | None = None
    #: ``infer`` mode: per-batch latency of the measured batches, ``p50``/``p90``/``p99``/``max`` (ms, our
    #: timer; nearest rank) and ``throughput_eps`` (examples/s over all of them;
    #: ``tasks.runner.measure.latency_summary``), with ``n`` (batches), ``confidence`` and ``ci``: per
    #: percentile its distribution-free interval (``tasks.analysis.percentiles.with_intervals``)
    latency_ms: dict[str, Any] | None = None
    #: findings on the steps themselves (``tasks.analysis.soundness.measurement_findings``: recompiles in timed
    #: steps, batch shapes, partial batches, an unsteady warm-up), ``tasks.analysis.findings.Finding`` dicts
    findings: list[dict[str, Any]] = Field(default_factory=list)


class ParseRecord(Record):
    """Output of parse: headline numbers from xprof and the path of the full tables (JSON)."""

    parsed_path: str
    avg_step_time_ms: float | None
    input_bound_pct: float | None
    n_ops: int
    findings: list[str]
    cross_check_ratio: float | None
    cross_check_ok: bool | None


class Verdict(enum.StrEnum):
    """The baseline-compare verdict of a run; the values are the words stored in ``runs.verdict`` and shown
    everywhere (a member equals its string: ``Verdict.PASS == "pass"``)."""

    PASS = "pass"  #: within the tolerance of the baseline
    REGRESSION = "regression"  #: slower than the baseline beyond the tolerance
    IMPROVEMENT = "improvement"  #: faster than the baseline beyond the tolerance
    INCONCLUSIVE = "inconclusive"  #: the interval is too wide to decide, or the host was busy
    NO_BASELINE = "no-baseline"  #: no accepted run of the case in any environment to compare with
    #: the environment changed (no accepted run in this one) and the change could not be judged: the interval across
    #: it too wide, or the host busy. A change that was judged gets ``pass``, ``improvement`` or ``regression``
    #: (method ``cross-environment``, the fields in ``evidence["env_changes"]``; ``tasks.analysis.verdict``)
    ENV_CHANGED = "env-changed"


#: Verdicts whose run becomes the new baseline when its case auto-accepts and nothing refuses it
#: (``CompareRecord.baseline_refused``). A regression, an inconclusive run and an environment change left undecided
#: (``env-changed``) never move the baseline by themselves: a person accepts those (``perfwatch baseline accept``).
AUTO_ACCEPT_VERDICTS = frozenset({Verdict.PASS, Verdict.NO_BASELINE, Verdict.IMPROVEMENT})


#: The per-step measure a verdict's ratio is of: ``wall`` the step's wall-clock time (our timer: what a user
#: waits for), ``cpu`` the runner process's CPU time during the step (all threads, user + system:
#: ``tasks.runner.counters``), which decides a busy host's gate (``tasks.analysis.calibration.choose_metric``).
Metric = Literal["wall", "cpu"]


def ratio_name(metric: str | None) -> str:
    """How a verdict's ratio is named where users read it: ``CPU-time ratio`` for ``cpu``, else
    ``step-time ratio`` (``wall``, and rows stored before the metric was recorded)."""
    return "CPU-time ratio" if metric == "cpu" else "step-time ratio"


class CompareRecord(Record):
    """Output of baseline-compare: the verdict and its evidence (JSON-safe)."""

    verdict: Verdict
    method: str
    baseline_run_ids: list[int]
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    median_limit_ms: float | None
    gx_success: bool
    evidence: dict[str, Any]
    gx_results_path: str | None = None  # the full GX validation results (JSON), stored by archive
    reason: str | None = None  # the verdict's reason in one sentence (e.g. "host busy: ..."); also in evidence
    metric: Metric = Field(
        "wall", description="which per-step measure decided, the ratio's and interval's metric (``Metric``)"
    )
    baseline_refused: list[str] = Field(
        default_factory=list,
        description="why this run does not become the baseline by itself although its verdict would make it one "
        "(``tasks.analysis.soundness.baseline_refusals``: a busy host, an unsteady warm-up, timed steps that "
        "compiled); empty: nothing refuses it",
    )


#: How a story names each stored ``comparisons.method`` (``VerdictStory.method_text``).
METHOD_WORDS = {
    "paired-abba": "paired ABBA gate: both versions in one process",
    "history-lookback": "two processes' medians: this run against the lookback history of accepted runs",
    "cross-environment": "across an environment change: this run against the lookback history of accepted runs of "
    "the previous environment, with the drift between processes",
    "fixed-threshold": "fixed threshold on the medians",
    "none": "no comparison (nothing to compare with)",
}


def judged_profiles(xplane_paths: list[str] | None) -> list[str]:
    """The xplane files the parse stage read (``parsed.json``/``run_tables`` 'parse' ``xplane_paths``, absolute
    paths in the run's work dir) as paths inside the run's archive directory: from ``plugins/profile/`` on
    (``plugins/profile/<session>/<host>.xplane.pb``, the form the archive and the run page list); a path
    without that part keeps its file name only. Empty for None (a tflite run, a run stored before it was kept)."""
    out = []
    for p in xplane_paths or []:
        p = str(p).replace("\\", "/")
        at = p.rfind("plugins/profile/")
        out.append(p[at:] if at >= 0 else p.rsplit("/", 1)[-1])
    return out


class ComparabilityChange(Record):
    """One comparability field that differs between a run's environment and its baseline's (the
    ``evidence["env_changes"]`` of a verdict across an environment change, ``tasks.analysis.environment.
    FieldChange``): the dotted field, the baseline's value and the run's (``"absent"`` where a side lacks the
    field)."""

    field: str
    old: Any = "absent"
    new: Any = "absent"


#: how a verdict across an environment change begins its reason, followed by ``: `` and :func:`env_changes_text`
ENV_CHANGED_REASON = "the environment changed"


def env_changes_text(changes: Sequence[ComparabilityChange | Mapping[str, Any]]) -> str:
    """The changed comparability fields, old -> new, "; "-joined: ``gpu.driver_version 535.104.05 -> 535.129.03;
    tensorflow.build.cudnn_version 8.6 -> 8.9`` (``absent`` for a side that lacks the field: None or missing).
    The one wording of a change, in a verdict's reason (``tasks.analysis.verdict``) and its story
    (``tasks.services.story``); empty for no changes."""

    def shown(v: Any) -> str:
        return "absent" if v is None else str(v)

    out = []
    for c in changes:
        d = c.model_dump() if isinstance(c, ComparabilityChange) else dict(c)
        out.append(f"{d['field']} {shown(d.get('old', 'absent'))} -> {shown(d.get('new', 'absent'))}")
    return "; ".join(out)


ENV_CHANGE_NO_FIELDS = "the comparability key differs (no field named)"
"""What an environment change's reason names when no comparability field is recorded as changed."""


def env_change_reason(changes: Sequence[ComparabilityChange | Mapping[str, Any]], judgement: str) -> str:
    """The reason of a verdict across an environment change: ``the environment changed: <fields>; <judgement>``
    (``judgement``: the verdict and what said it, ``regression: ...``); the fields by :func:`env_changes_text`."""
    return f"{ENV_CHANGED_REASON}: {env_changes_text(changes) or ENV_CHANGE_NO_FIELDS}; {judgement}"


def env_change_judgement(reason: str | None, changes: Sequence[ComparabilityChange | Mapping[str, Any]]) -> str | None:
    """The verdict part of an :func:`env_change_reason` (what the judgement said: ``env-changed: the interval
    across the change ...``), without the fields it begins with; a reason of another shape as it is; None
    without one."""
    if not reason:
        return None
    head = env_change_reason(changes, "")
    return reason[len(head) :] if reason.startswith(head) else reason


class Acceptance(Record):
    """A run's acceptance as its case's baseline (the store's ``baselines`` row): who (``perfwatch`` itself,
    ``perfwatch baseline accept --by NAME``, ``make demo``), when (UTC), why, and when a later baseline superseded
    it (None while it is the active one)."""

    by: str
    at: dt.datetime
    reason: str | None = None
    superseded_at: dt.datetime | None = None


#: the evidence keys of the per-process figures a paired gate records beside step time (``tasks.analysis.metric_gates``)
FIGURE_KEYS = ("cold_step", "model_memory", "process_memory")
#: what :attr:`VerdictStory.figures` keeps of each: the figure and its unit, B/A with its interval, the verdict at
#: the tolerance, the processes, both sides' medians (``unit``), whether it was measured (False: a tolerance the case
#: set that the gate could not judge, said in the reason) and whether the case set its tolerance (``gated``: the
#: gate waited for its decision; False: judged at the figure's default, ``metric_gates.DEFAULT_TOLERANCES``); the
#: story adds ``tolerance_from`` (``case`` or ``default``), the same fact in words
FIGURE_FIELDS = (
    "metric",
    "unit",
    "ratio",
    "ci_low",
    "ci_high",
    "verdict",
    "tolerance",
    "processes",
    "baseline_median",
    "candidate_median",
    "measured",
    "gated",
)


def _figure_fields(figure: Mapping[str, Any]) -> dict[str, Any]:
    """A figure's :data:`FIGURE_FIELDS` from its evidence (None where absent; ``measured`` True unless the evidence
    says False) and ``tolerance_from``: ``case`` where the case set the tolerance (``gated``), else ``default``."""
    out = {f: figure.get(f) for f in FIGURE_FIELDS}
    out["measured"] = figure.get("measured") is not False
    out["tolerance_from"] = "case" if figure.get("gated") else "default"
    return out


class VerdictStory(Record):
    """One run's verdict with its story: the ONE record of a decision that every command and page renders
    (``tasks.services.story``: text lines for the CLI, a dict for JSON, an HTML fragment for the pages, the
    alerts and the metrics' labels). Built from a ``CompareRecord`` (:meth:`from_compare`, what
    ``perfwatch run`` has in hand) or from what the store holds (``tasks.store.reads.verdict_stories``), by the
    same rule (:meth:`from_evidence`), so both say the same.

    Attributes:
        run_id: the stored run (None before archive); status: ``success`` | ``failed``; failed_stage: the
            stage that failed (failed runs; no verdict then).
        verdict: the ``Verdict`` value; None for a failed run.
        reason: the verdict's reason in one sentence (``evidence["reason"]``, else the noise rule's).
        metric: which per-step measure the ratio is of (``wall`` | ``cpu``); None without a comparison.
        ratio, ci_low, ci_high: candidate over baseline of that metric, with its interval at ``confidence``
            (0..1); None where there was no comparison.
        tolerance: the relative change that counts (0.05 = 5%): the regression line is ``1 + tolerance`` on
            the ratio (:attr:`threshold`).
        method: the stored method (``paired-abba``, ``history-lookback``, ``cross-environment``, ``none``);
            sequential: a paired gate that looked at its interval as it went (``tasks.analysis.sequential``).
        pairs: a paired gate's ABBA block pairs analysed (``evidence["paired"]["spent"]["pairs"]``);
            max_pairs: its budget; baseline_runs: the accepted runs a history comparison used.
        baseline_run_id: the baseline run compared with (the newest); baseline_version: its model version
            (a paired gate: the version it re-measured as A).
        profile: the xplane files the parse stage judged (:func:`judged_profiles`: paths in the archive).
        accepted: the run's first acceptance as the baseline (:class:`Acceptance`; None when never accepted):
            the renderer shows it instead of a stored reason's advice to accept the run.
        gated_on: the figure that decided where a tail gate changed the verdict (``evidence["gated_on"]``:
            ``p99 per query``, a server case's per-query tail against the baseline run's at one rate,
            ``tasks.analysis.verdict.gate_per_query``; ``p99``, a paired gate's tail of its batches); None where
            the median decided. The ratio, interval and confidence are then the tail's.
        tail_sides: with ``gated_on``, the deciding percentile of each side (``baseline``, ``candidate``: ``point``,
            ``low``, ``high`` in ms, ``n`` samples, ``confidence`` of each side's interval, ``estimable``; the
            ``tasks.analysis.percentiles.PercentileCI`` fields the tail gate kept).
        env_changes: the comparability fields that differ from its baseline's environment, for a verdict across
            an environment change (method ``cross-environment``: ``pass``, ``improvement``, ``regression`` or the
            undecided ``env-changed``; :class:`ComparabilityChange`, old -> new); empty for any other.
    """

    run_id: int | None = None
    status: Literal["success", "failed"] = "success"
    failed_stage: str | None = None
    verdict: str | None = None
    reason: str | None = None
    metric: Metric | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    tolerance: float | None = None
    method: str | None = None
    sequential: bool = False
    pairs: int | None = None
    max_pairs: int | None = None
    baseline_runs: int | None = None
    baseline_run_id: int | None = None
    baseline_version: str | None = None
    profile: list[str] = Field(default_factory=list)
    accepted: Acceptance | None = None
    gated_on: str | None = None
    tail_sides: dict[str, dict[str, Any]] | None = None
    env_changes: list[ComparabilityChange] = Field(default_factory=list)
    #: a paired gate over fresh processes: how many (process pairs, for a cross-environment gate)
    processes: int | None = None
    #: a cross-environment gate: each side ran in its own fresh processes, not both versions in one
    across_environments: bool = False
    #: the figures beside step time that regressed (``evidence["regressed_on"]``: the cold step, memory, output
    #: agreement), each in words with its figure; step_verdict: step time's own verdict where they are set
    regressed_on: list[str] = Field(default_factory=list)
    step_verdict: str | None = None
    #: the per-process figures a paired gate recorded beside step time, by evidence key (``cold_step``,
    #: ``model_memory``, ``process_memory``: ``tasks.analysis.metric_gates``), each with :data:`FIGURE_FIELDS`
    #: (None where absent), so JSON readers need not parse a reason
    figures: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @property
    def led_by_other(self) -> bool:
        """A regression that another figure than step time made (step time itself did not regress): the headline
        names that figure, and step time's ratio follows as context."""
        return self.verdict == "regression" and bool(self.regressed_on) and self.step_verdict != "regression"

    @property
    def threshold(self) -> float | None:
        """The regression line on the ratio, ``1 + tolerance`` (None when the tolerance is not known)."""
        return None if self.tolerance is None else 1 + self.tolerance

    @property
    def method_text(self) -> str | None:
        """The method in words (``METHOD_WORDS``), a paired gate with its sequential design and pairs."""
        if self.method is None:
            return None
        if self.gated_on is not None and self.gated_on.endswith("per query"):  # two runs' tails, not medians
            return (
                f"tail gate on the {self.gated_on}: this run's reported point against the baseline run's at the "
                "same rate (two runs, two processes)"
            )
        text = METHOD_WORDS.get(self.method, self.method)
        if self.gated_on is not None:
            text += f"; decided by its tail gate on the {self.gated_on}"
        if self.method == "paired-abba" and self.across_environments:
            text = "cross-environment gate: each environment in its own fresh processes, alternating in random order"
            if self.processes is not None:
                text += f", {self.processes} process pairs"
            if self.pairs is not None:
                text += f", {self.pairs} step pairs" + (f" of at most {self.max_pairs}" if self.max_pairs else "")
        elif self.method == "paired-abba":
            if self.sequential:
                text = text.replace("paired ABBA gate", "paired ABBA sequential gate")
            if self.processes is not None:
                text = text.replace(
                    "both versions in one process", f"both versions in each of {self.processes} processes"
                )
            if self.pairs is not None:
                text += f", {self.pairs} pairs" + (f" of at most {self.max_pairs}" if self.max_pairs else "")
        elif self.baseline_runs is not None and self.method == "history-lookback":
            text += f" ({self.baseline_runs} run{'s' if self.baseline_runs != 1 else ''})"
        return text

    @classmethod
    def from_evidence(
        cls,
        *,
        run_id: int | None,
        verdict: str | None,
        method: str | None,
        metric: str | None,
        ratio: float | None,
        ci_low: float | None,
        ci_high: float | None,
        evidence: Mapping[str, Any] | None,
        baseline_run_id: int | None,
        baseline_version: str | None = None,
        profile: list[str] | None = None,
        status: str = "success",
        failed_stage: str | None = None,
    ) -> VerdictStory:
        """The story from a comparison's figures and evidence (``CompareRecord`` or ``comparisons`` row; the
        evidence keys of ``tasks.analysis.verdict``): the reason (``evidence["reason"]``, else
        ``evidence["noise"]["reason"]``), confidence and tolerance of the comparison that decided
        (``evidence["cpu"]`` when CPU time decided, else ``evidence["paired"]`` of a paired gate, else
        ``evidence["stats"]``), a paired gate's pairs (``spent``) and whether it was sequential, the history's
        baseline runs (``stats.n_baseline``), the comparability fields that changed (``env_changes``), the
        baseline version (a paired gate's ``baseline_version`` when ``baseline_version`` is not given); where a
        tail gate decided (``evidence["gated_on"]``), that tail's confidence and tolerance and each side's
        percentile (``tail_sides``, from ``evidence["per_query_tail"]`` or ``evidence["tail"]``)."""
        ev = dict(evidence or {})
        paired = ev.get("paired") or {}
        decided = (ev.get("cpu") if metric == "cpu" else None) or (paired if method == "paired-abba" else None)
        decided = decided or ev.get("stats") or {}
        gated_on = ev.get("gated_on") if isinstance(ev.get("gated_on"), str) else None
        tail = (ev.get("per_query_tail") if str(gated_on).endswith("per query") else ev.get("tail")) or {}
        sides = None
        if gated_on is not None and isinstance(tail.get("a"), Mapping) and isinstance(tail.get("b"), Mapping):
            decided = {**decided, **{k: tail[k] for k in ("confidence", "tolerance") if k in tail}}
            keep = ("percentile", "point", "low", "high", "n", "confidence", "estimable")
            sides = {who: {k: tail[side].get(k) for k in keep} for who, side in (("baseline", "a"), ("candidate", "b"))}
        spent = paired.get("spent") or {}
        reason = ev.get("reason") or (ev.get("noise") or {}).get("reason")
        return cls(
            run_id=run_id,
            status="failed" if status == "failed" else "success",
            failed_stage=failed_stage,
            verdict=None if status == "failed" else (str(verdict) if verdict is not None else None),
            reason=reason,
            metric=cast(Metric, metric) if metric in get_args(Metric) else ("wall" if ratio is not None else None),
            ratio=ratio,
            ci_low=ci_low,
            ci_high=ci_high,
            confidence=decided.get("confidence"),
            tolerance=decided.get("tolerance"),
            method=method,
            sequential=bool((paired.get("sequential") or {}).get("design")) if method == "paired-abba" else False,
            pairs=(spent.get("pairs") or paired.get("n_candidate")) if method == "paired-abba" else None,
            max_pairs=spent.get("max_pairs") if method == "paired-abba" else None,
            processes=spent.get("processes") if method == "paired-abba" else None,
            across_environments=bool(spent.get("environments")) if method == "paired-abba" else False,
            baseline_runs=(ev.get("stats") or {}).get("n_baseline") if method == "history-lookback" else None,
            baseline_run_id=baseline_run_id,
            baseline_version=baseline_version or paired.get("baseline_version"),
            profile=list(profile or []),
            gated_on=gated_on,
            tail_sides=sides,
            env_changes=[
                ComparabilityChange(field=str(c["field"]), old=c.get("old", "absent"), new=c.get("new", "absent"))
                for c in ev.get("env_changes") or []
                if isinstance(c, Mapping) and c.get("field")
            ],
            regressed_on=[str(x) for x in ev.get("regressed_on") or []],
            step_verdict=str(ev["step_verdict"]) if ev.get("step_verdict") else None,
            figures={key: _figure_fields(ev[key]) for key in FIGURE_KEYS if isinstance(ev.get(key), Mapping)},
        )

    @classmethod
    def from_compare(
        cls,
        rec: CompareRecord,
        *,
        run_id: int | None,
        baseline_version: str | None = None,
        profile: list[str] | None = None,
    ) -> VerdictStory:
        """The story of a baseline-compare result (``CompareRecord``) as ``perfwatch run`` has it: its newest
        baseline run (``baseline_run_ids[0]``), the given baseline version and judged profile
        (:func:`judged_profiles`); the rest as :meth:`from_evidence`. The record's own reason wins over the
        evidence's."""
        story = cls.from_evidence(
            run_id=run_id,
            verdict=rec.verdict,
            method=rec.method,
            metric=rec.metric,
            ratio=rec.ratio,
            ci_low=rec.ci_low,
            ci_high=rec.ci_high,
            evidence={**rec.evidence, **({"reason": rec.reason} if rec.reason else {})},
            baseline_run_id=rec.baseline_run_ids[0] if rec.baseline_run_ids else None,
            baseline_version=baseline_version,
            profile=profile,
        )
        return story


class ArchiveRecord(Record):
    """Output of archive: the stored run's id and where its profile now lives."""

    run_id: int
    archive_uri: str
    verdict: str


class Confirmation(Record):
    """A tentative slowdown at the end of a case's nightly series and the paired gate that confirms it (or not) in
    the same night, before anything alerts (``tasks.services.trend.confirmations``; the rule:
    ``tasks.analysis.changes.confirm_choice``). ``kind`` None: no paired gate can confirm it (``reason`` says why)
    and the point stays tentative.

    Attributes:
        model, case_name: the series; change_run_id: the first run after the tentative point; metric: the series'
            metric (``median_step_ms``, ``median_cpu_ms``); ratio: after/before at the point.
        kind: ``version`` (``baseline_version`` beside ``version`` in one paired gate) or ``environment`` (the old
            environment beside the new: the case's cross-environment gate); baseline_version: side A's model
            version; version: side B's (the newest run's).
        reason: the choice in words.
    """

    model: str
    case_name: str
    change_run_id: int
    metric: str
    ratio: float
    kind: Literal["version", "environment"] | None
    baseline_version: str | None
    version: str | None
    reason: str

    @property
    def change(self) -> str:
        """The point in words: ``tentative change point at run 12 (median_step_ms x1.083)``."""
        return f"tentative change point at run {self.change_run_id} ({self.metric} x{self.ratio:.3f})"


class RunState(Record):
    """One case's run as it goes from stage to stage: its identity, the grid label, and one record per stage
    that ran (None until it has; ``tasks.stages.registry`` says which stage fills which field). Through XCom it
    travels as ``to_xcom()``, a JSON dict with the fields that are set, which ``RunState.model_validate`` reads
    back (the same keys as the dict "bundle" of earlier perfwatch versions)."""

    ctx: RunContext
    #: ``<model> <case name>`` (with its readable label: ``case_title``): the case's mapped task instances in the
    #: Airflow grid
    label: str | None = None
    #: the Celery queue whose measuring workers measure the case (plan: ``tasks.stages.devices.queue_for``); the
    #: profile DAG's mapped task group of that queue runs its stages
    queue: str | None = None
    #: why no measuring queue of the DAG can take the case (plan: ``tasks.stages.devices.refusals``), None when
    #: one can; a refused case fails at pull-model-version with this reason, recorded, and the others run
    refused: str | None = None
    pulled: PulledModel | None = None
    env: EnvRecord | None = None
    warmup: WarmupRecord | None = None
    run: ProfiledRun | None = None
    parsed: ParseRecord | None = None
    verdict: CompareRecord | None = None
    archived: ArchiveRecord | None = None
    #: the tentative slowdown this run re-measures to confirm (trigger ``confirm``: the nightly trend check planned
    #: it), None for any other run
    confirms: Confirmation | None = None

    def to_xcom(self) -> dict[str, Any]:
        """The state as a dict of strict JSON values (:meth:`Record.to_xcom`), without the stages that did not run."""
        return {k: v for k, v in super().to_xcom().items() if v is not None}


# ----------------------------------------------------------------- stored facts that baseline-compare decides on

#: framework_op_stats columns as the parse stage writes them and the store keeps them (``op_stats``):
#: self-times µs summed over the profiled window, ``self_time_share`` 0..1.
OP_STATS_COLUMNS = [
    "host_or_device",
    "op_type",
    "op_name",
    "occurrences",
    "total_self_time_us",
    "avg_self_time_us",
    "self_time_share",
]


class CompareInputs(Record):
    """What baseline-compare reads from the store, in one session (``tasks.store.reads.gather_compare_inputs``),
    as stored: nothing is filtered or judged here; ``tasks.analysis.verdict.decide`` does that.
    ``CompareInputs()`` is what a store that knows nothing of the model gives."""

    same_env: list[int] = Field(
        default_factory=list, description="lookback baseline run ids in the candidate's environment, newest first"
    )
    other_env: list[int] = Field(
        default_factory=list,
        description="only when same_env is empty: the lookback baseline run ids of the environment of the case's "
        "newest accepted run (another environment: the one before the change), newest first",
    )
    other_env_data: dict[str, Any] | None = Field(
        default=None, description="the fingerprint record (environments.data) of the newest other_env run"
    )
    samples: dict[int, list[float]] = Field(
        default_factory=dict,
        description="measured step times (ms, our timer) of each same_env / other_env run, in step order",
    )
    cpu_samples: dict[int, list[float]] = Field(
        default_factory=dict,
        description="measured per-step process CPU time (ms, all threads, user + system; step_samples.cpu_ms) of "
        "each same_env / other_env run whose every measured step recorded it, in step order; a run without it "
        "(stored before migration 0005, ingested) is absent",
    )
    calibration_runs: list[tuple[str, float]] = Field(
        default_factory=list,
        description="(version, median step ms) of the newest accepted runs of the model, case and the baselines' "
        "environment (same_env's; other_env's when same_env is empty) (tasks.analysis.calibration.prior_for_case's "
        "input)",
    )
    calibration_cpu_ms: list[float | None] = Field(
        default_factory=list,
        description="median measured CPU time per step (ms) of each calibration_runs entry, in the same order; "
        "None for a run that recorded none; empty: not read (tasks.analysis.calibration.history_metric's input)",
    )
    aa_gates: list[dict[str, Any]] = Field(
        default_factory=list,
        description="evidence['paired'] of the stored paired gates of the case and environment whose baseline "
        "bytes equal the candidate's (A/A gates), newest first",
    )
    paired_gates: list[dict[str, Any]] = Field(
        default_factory=list,
        description="evidence['paired'] of every stored paired gate of the case and environment (any versions, "
        "A/A ones included), newest first (tasks.analysis.calibration.calibrated_noise's input)",
    )

    @model_validator(mode="after")
    def _cpu_medians_align(self) -> CompareInputs:
        if self.calibration_cpu_ms and len(self.calibration_cpu_ms) != len(self.calibration_runs):
            raise ValueError(
                f"calibration_cpu_ms has {len(self.calibration_cpu_ms)} medians for {len(self.calibration_runs)} "
                "calibration_runs: expected one per run (None where a run recorded no CPU time) or none"
            )
        return self


class RunOps(Record):
    """A run's op table and the facts of its profiled window, as attribution needs them
    (``tasks.store.reads.run_ops`` for a stored run; ``tasks.analysis.attribution.attribute_runs``)."""

    run_id: int | None = Field(description="the stored run; None for a run not archived yet (baseline-compare's)")
    ops: list[dict[str, Any]] = Field(
        description="framework_op_stats rows (OP_STATS_COLUMNS keys; self-times µs over the profiled window)"
    )
    profiled_steps: int | None = Field(description="steps in the profiled window; None when the run records none")
    profiler_avg_step_ms: float | None = Field(
        description="xprof's average step time over the window (ms, overview_page); None without step markers"
    )
    measured_median_ms: float | None = Field(
        default=None, description="the run's measured median step time (ms, profiler off; runs.median_step_ms)"
    )
    window_check: dict[str, Any] | None = Field(
        default=None,
        description="the run's window check (tasks.analysis.profile.CrossCheck fields, run_tables 'cross_check'); "
        "None when not stored",
    )
    idle_rows: int = Field(
        default=0,
        description="the IDLE rows xprof's framework_op_stats held beside the ops (one per Host / Device side; the "
        "keys of run_tables 'framework_op_stats' idle_time_us): with the ops they tell whether the table was cut at "
        "xprof's cap (tasks.analysis.profile.op_table_capped)",
    )
