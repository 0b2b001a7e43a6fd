"""The runner protocol: what crosses the boundary between perfwatch and its runner process, typed and versioned.

The parent writes a request (``tasks.runner.spec.RunnerSpec``, :class:`ProbeSpec` or :class:`BuildSpec`) as
JSON and starts ``<runner command> SPEC.json``; the runner writes *events* on stdout, one line each,
:data:`EVENT_PREFIX` + JSON (:class:`HelloEvent` first, then :class:`ProgressEvent` and, in a paired gate in
rounds, :class:`RoundEvent`), reads ``more``/``stop`` on stdin after each round, and ends by writing
``<out_dir>/result.json``: one result record per mode (:class:`ProbeResult`, :class:`BuildResult`,
:class:`WarmupResult`, :class:`ProfileResult`, :class:`PairedResult`) or an :class:`ErrorResult`. Every record
carries :data:`SCHEMA_VERSION`; a result of another version is refused by name (:class:`ProtocolMismatch`),
since the runner's venv may hold another perfwatch.

The two interpreters may differ, so this module imports only pydantic, the standard library and :mod:`tasks.wire`
(how NaN and infinities cross JSON, stdlib only). Field names
are those of the result files on disk before the protocol was typed: archived runs and the store read them.
Units: step times in ms (our timer, ``time.perf_counter``, a step ends when its output is on the host), wall
times in s (the same timer), memory in bytes; per-step CPU time and run-queue wait in ms
(``tasks.runner.counters``; version 2 added them). Version 3: a paired gate runs several fresh processes
(``RunnerSpec.process`` numbers them) and the parent keeps them in one :class:`PairedGate` file, which is what
baseline-compare reads (:class:`PairedSamples` of each process).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from tasks import wire

#: Version of this protocol (requests, events, results). Raise it whenever a field is renamed, removed or
#: changes meaning; a runner and a parent of different versions refuse each other by name.
SCHEMA_VERSION = 3
#: prefix of every event line on the runner's stdout; the JSON object follows it. Other lines are chatter.
EVENT_PREFIX = "PERFWATCH_EVENT "
#: the commands the parent answers a round with, one per line on the runner's stdin
MORE, STOP = "more", "stop"

StopReason = Literal["budget", "parent", "stdin closed"]


class RunnerError(RuntimeError):
    """The runner failed; the message names the stage or the model and what went wrong."""


class ProtocolMismatch(RunnerError):
    """The runner speaks another protocol version than this perfwatch (the message names both and the runner)."""


class ProtocolError(RunnerError):
    """A line or file that claims to follow the protocol but does not parse (the message quotes it)."""


def mismatch(runner: str, theirs: object) -> ProtocolMismatch:
    """The refusal of a runner at ``runner`` (its command or result file) that speaks version ``theirs``."""
    return ProtocolMismatch(
        f"runner at {runner} speaks protocol {theirs}, this perfwatch speaks {SCHEMA_VERSION}: "
        "install the same perfwatch in the runner's venv"
    )


def _numbers_from_json(model: type[BaseModel], data: Any) -> Any:
    return wire.decode_untyped({k: f.annotation for k, f in model.model_fields.items()}, data)


class _Record(BaseModel):
    # NaN and infinities cross as tasks.wire says (strict JSON strings, read back as floats), never as null
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan=wire.PYDANTIC_INF_NAN)

    @model_validator(mode="before")
    @classmethod
    def _decode(cls, data: Any) -> Any:
        return _numbers_from_json(cls, data)


# ---------------------------------------------------------------- requests


class ProbeSpec(_Record):
    """The request of the env-fingerprint stage: read this interpreter's and host's facts (``tasks.runner.probe``)."""

    schema_version: int = SCHEMA_VERSION
    mode: Literal["probe"] = "probe"
    out_dir: str = Field(description="where the runner writes result.json")
    include_tensorflow: bool = Field(True, description="read TensorFlow's facts from its package (never imported)")


class BuildSpec(_Record):
    """The request of the pull stage for a ``keras.applications`` case (``tasks.runner.modes.build``): build
    the named architecture with random weights, save it as ``<model_dir>/model.keras`` and hash its config."""

    schema_version: int = SCHEMA_VERSION
    mode: Literal["build"] = "build"
    out_dir: str = Field(description="where the runner writes result.json")
    model_dir: str = Field(description="where the built model is saved (model.keras)")
    name: str = Field(description="the model name as the case gives it, e.g. resnet50 or mobilenet_v3_small")
    input_shape: list[int] | None = Field(None, description="one example's shape; None: the constructor's default")
    classes: int | None = Field(None, description="output classes; None: the constructor's default (1000)")
    seed: int = Field(0, description="keras.utils.set_random_seed before the constructor (the random weights)")


# ---------------------------------------------------------------- events (stdout lines)


class HelloEvent(_Record):
    """The runner's first line, before anything slow: the parent refuses another protocol version at once."""

    event: Literal["hello"] = "hello"
    schema_version: int
    python: str = Field(description="the runner's interpreter, ``sys.executable``")


class ProgressEvent(_Record):
    """Progress of a long phase (``tasks.runner.progress``); only the fields the runner set are sent."""

    event: Literal["progress"] = "progress"
    phase: str = Field(description="start, warm-up, measure, profile, paired, or a paired run's 'warm-up A'/'B'")
    n: int | None = Field(None, description="steps (or pairs) done")
    of: int | None = Field(None, description="steps planned (a warm-up's most steps, a gate's most pairs)")
    median_ms: float | None = Field(None, description="running median step time so far, ms (our timer)")
    cv: float | None = Field(None, description="coefficient of variation of the warm-up's last window, a fraction")
    cv_max: float | None = Field(None, description="the warm-up's steady threshold, a fraction")
    open_ended: bool | None = Field(None, description="a warm-up that stops when steady, before ``of``")
    final: bool | None = Field(None, description="the phase's last line")
    round: int | None = Field(None, description="paired gate: the round just measured")
    decision: str | None = Field(None, description="paired gate: why it stops, in words")
    text: str | None = Field(None, description="what is going on, for people")

    def fields(self) -> dict[str, Any]:
        """The event as the progress reporters take it: the fields set, without ``event``."""
        return self.model_dump(exclude_unset=True, exclude={"event"})


class BlockPair(_Record):
    """One ABBA block pair of a paired gate: ``block_steps`` steps of each version, per-step ms (our timer)."""

    pair: int = Field(description="index of the pair, from 0")
    order: Literal["AB", "BA"] = Field(
        description="which version ran first, drawn per quadruple: pairs 2k, 2k+1 are AB, BA or BA, AB"
    )
    a_ms: list[float] = Field(description="the baseline's (A) step times, ms")
    b_ms: list[float] = Field(description="the candidate's (B) step times, ms")
    a_cpu_ms: list[float] = Field(
        default_factory=list, description="A's per-step process CPU time, ms (empty: not measured)"
    )
    b_cpu_ms: list[float] = Field(
        default_factory=list, description="B's per-step process CPU time, ms (empty: not measured)"
    )
    a_wait_ms: list[float] = Field(
        default_factory=list, description="A's per-step run-queue wait, ms (empty: no schedstat)"
    )
    b_wait_ms: list[float] = Field(
        default_factory=list, description="B's per-step run-queue wait, ms (empty: no schedstat)"
    )


class RoundSummary(_Record):
    """One round of a paired gate as kept in the result (the blocks are in ``PairedResult.blocks``)."""

    round: int = Field(description="index of the round, from 0")
    pairs: int = Field(description="block pairs measured so far, this round included")
    host_load: dict[str, Any] = Field(description="host load over the round (``tasks.runner.measure.HostLoad``)")
    wall_s: float = Field(description="s since the first pair (our timer)")
    final: bool = Field(description="the budget (``blocks``) is spent: the runner stops without asking")


class RoundEvent(RoundSummary):
    """A round of a paired gate in rounds, sent when measured; the parent answers ``more`` or ``stop``
    unless ``final``."""

    event: Literal["round"] = "round"
    blocks: list[BlockPair] = Field(description="the block pairs of this round")


class CueEvent(_Record):
    """A runner waiting for its turn to measure: profile mode with cued blocks (``RunnerSpec.cue_block_steps``)
    is ready to time block ``block`` of ``of`` (from 0; ``block == of``: the measured blocks are done, and it
    waits before it goes on); paired mode with ``RunnerSpec.cue_start`` sends block 0 of 1 once, warmed up,
    before its first pair. The parent answers ``more`` (go on) or ``stop`` on stdin."""

    event: Literal["cue"] = "cue"
    block: int = Field(ge=0, description="the block the runner would time next, from 0; ``of``: all are done")
    of: int = Field(ge=1, description="measured blocks in all")


AnyEvent = HelloEvent | ProgressEvent | RoundEvent | CueEvent
Event = Annotated[AnyEvent, Field(discriminator="event")]
_EVENT: TypeAdapter[AnyEvent] = TypeAdapter(Event)


def event_line(event: AnyEvent) -> str:
    """The stdout line of ``event`` (with its newline); only the fields set are written."""
    fields = {"event": event.event, **event.model_dump(mode="json", exclude_unset=True)}
    return EVENT_PREFIX + wire.dumps(fields) + "\n"


def parse_event(line: str) -> AnyEvent | None:
    """The event of one stdout line, or ``None`` for a line that is not an event (TF's chatter).

    Raises:
        ProtocolError: the line starts with :data:`EVENT_PREFIX` but holds no valid event (quotes the line).
    """
    if not line.startswith(EVENT_PREFIX):
        return None
    body = line[len(EVENT_PREFIX) :]
    try:
        return _EVENT.validate_json(body)
    except ValidationError as e:
        raise ProtocolError(f"malformed event line ({_first_error(e)}): {line.rstrip()[:200]!r}") from e


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err['msg']}" if where else str(err["msg"])


# ---------------------------------------------------------------- results (result.json)


class InputFeed(_Record):
    """One input as fed (``tasks.runner.inputs.Feed.record``): shape with the batch dimension first."""

    shape: list[int]
    dtype: str
    min: int | float | None = Field(description="lowest synthetic value (None: the dtype's default range)")
    max: int | float | None = Field(description="highest (exclusive for integers)")


class LatencySummary(_Record):
    """Per-batch latency of the measured steps (infer, tflite), ms (our timer; nearest-rank percentiles, the
    stage adds their intervals: ``tasks.analysis.percentiles``)."""

    p50: float
    p90: float
    p99: float
    max: float
    throughput_eps: float = Field(description="examples/s over all measured batches")


class ServerPoint(_Record):
    """One rate of the server scenario (``tasks.runner.loadgen.serve``): ms and s on our timer (``perf_counter``)."""

    target_qps: float = Field(description="the Poisson arrival rate, queries/s")
    seed: int = Field(description="numpy default_rng seed of the arrival schedule")
    issued_qps: float = Field(
        description="queries / the last arrival, queries/s: the rate the schedule issued (LoadGen's scheduled rate)"
    )
    achieved_qps: float = Field(description="queries served / from the start to the last result, queries/s")
    duration_s: float = Field(description="from the start to the last result, s")
    latency_ms: list[float] = Field(description="per query, arrival to its batch's result, queueing included, ms")
    queue_ms: list[float] = Field(description="per query, arrival to the start of its batch, ms")
    service_ms: list[float] = Field(description="per batch, the step's own time, ms")
    batch_queries: list[int] = Field(description="per batch, the queries it served (1..batch_size)")
    arrivals_s: list[float] = Field(
        default_factory=list, description="per query, its scheduled arrival, s from the start (empty: not kept)"
    )
    done_s: list[float] = Field(
        default_factory=list, description="per batch, when its result was on the host, s from the start"
    )
    upper_ms: float | None = Field(None, description="the upper_rank-th smallest latency, ms (None: no rank)")
    met: bool | None = Field(
        None, description="upper_ms within latency_bound_ms (None: no bound); False for an invalid point"
    )
    backlog_growth: float | None = Field(
        None,
        description="the queueing delay's growth, s per s of the run (``loadgen.backlog_growth``; None: too few "
        "queries, or a point stored before it was kept)",
    )
    invalid: str | None = Field(
        None, description="why the point is not a valid measurement (``loadgen.overload_reason``); None: valid"
    )
    host_load: dict[str, Any] = Field(description="host load over this point (``tasks.runner.measure.HostLoad``)")


class Serving(_Record):
    """How an infer/tflite run's queries reached the model (``RunnerSpec.scenario``; ``tasks.runner.loadgen``)."""

    scenario: Literal["single-stream", "offline", "server"]
    wall_s: float = Field(description="the measured phase, s: offline's throughput is examples over it")
    examples: int = Field(
        description="examples computed in the measured phase (server: batches x batch_size, padding included; "
        "its real examples are the queries served)"
    )
    points: list[ServerPoint] = Field(default_factory=list, description="server: each rate tried, in order")
    search: bool = Field(False, description="server: the rates were bisected (``loadgen.QpsSearch``)")
    latency_bound_ms: float | None = None
    upper_rank: int | None = Field(None, description="rank of the percentile's upper bound among a point's queries")


class FedShape(_Record):
    """One distinct batch a phase's steps were fed (``tasks.runner.measure.FedLog``)."""

    shapes: dict[str, list[int]] = Field(
        description="input name -> the batch's shape as fed, batch dimension first (summed over replicas)"
    )
    examples: int = Field(description="examples in the batch (its batch dimension)")
    steps: int = Field(description="steps of the phase fed a batch of these shapes")
    first_step: int = Field(description="the first of them, index within the phase from 0")


class Fed(_Record):
    """What one phase's steps were fed, and which of them compiled (``tasks.runner.measure.FedLog``)."""

    steps: int = Field(description="steps in the phase")
    examples: int = Field(description="examples fed over the phase's steps")
    distinct: list[FedShape] = Field(description="each distinct set of batch shapes, in the order first fed")
    compiled_steps: list[int] = Field(
        description="steps (index within the phase) that compiled: an XLA step fed input shapes this process had "
        "not run before (XLA compiles one executable per input shapes), or a step whose tf.function retraced"
    )
    retraced_steps: list[int] = Field(description="steps whose tf.function traced again (its tracing count rose)")


class XlaCache(_Record):
    """XLA's persistent compilation cache of the run (``tasks.runner.execution.configure_xla_cache``)."""

    dir: str
    entries_before: int | None = Field(description="files in it when this process started")
    entries_after: int = Field(description="files in it when this process ended")


class CudaCache(_Record):
    """CUDA's JIT cache of a GPU run (``CUDA_CACHE_PATH``, ``tasks.runner.execution.configure_cuda_cache``)."""

    dir: str
    entries_before: int = Field(description="files in it when this process started")
    entries_after: int = Field(description="files in it when this process ended")
    first_on_host: bool = Field(
        description="the cache was empty at start: the cold step may hold CUDA's JIT of every kernel for this GPU, "
        "which later processes on this host read from the cache"
    )


class _Result(_Record):
    schema_version: int = SCHEMA_VERSION
    status: Literal["ok"] = "ok"
    #: the pipeline stage this mode serves, as error messages name it
    stage: ClassVar[str]

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain JSON object, fields that do not apply (None) left out: what the store keeps."""
        return {k: v for k, v in wire.encode_object(self.model_dump(mode="json")).items() if v is not None}


class ProbeResult(_Result):
    """The probe's record (``tasks.runner.probe.collect``): sections ``tensorflow``, ``gpu``, ``host``,
    ``packages``, ``env_vars``, ``recorded``; a fact that cannot be read is ``"absent"`` or ``"unknown: ..."``."""

    stage: ClassVar[str] = "env-fingerprint"
    mode: Literal["probe"] = "probe"
    data: dict[str, Any] = Field(description="the fingerprint record, hashed by tasks.analysis.environment")


class BuildResult(_Result):
    """A ``keras.applications`` model built with random weights (``weights=None``: nothing downloaded) and saved
    (``tasks.runner.applications``); ``config_sha256`` is the sha256 of its ``get_config()`` as canonical JSON."""

    stage: ClassVar[str] = "pull-model-version"
    mode: Literal["build"] = "build"
    constructor: str = Field(description="the keras.applications constructor called, e.g. ResNet50")
    keras_version: str = Field(description="keras.__version__ of the runner's interpreter")
    config_sha256: str = Field(description="sha256 (hex) of the architecture's config, canonical JSON")
    version: str = Field(description="keras<Keras version>-<8 hex of config_sha256> (applications.version_string)")
    source: str = Field(description="the constructor call in words (applications.describe_call)")
    model_path: str = Field(description="the saved model.keras")
    size_bytes: int = Field(description="size of model.keras, bytes")
    params: int = Field(description="the model's parameter count (count_params)")
    input_shape: list[int | None] = Field(description="the built model's input shape, batch dimension left out")
    output_shape: list[int | None] = Field(description="the built model's output shape, batch dimension left out")
    weights_sha256: str | None = Field(
        None, description="sha256 (hex) of the built weights (``applications.weights_sha256``, get_weights order)"
    )


class _Measured(_Result):
    """What every measuring mode records about what it measured (the case's options, as built)."""

    case_mode: Literal["train", "infer", "tflite"]
    inputs: dict[str, InputFeed] = Field(description="input name -> what was fed (the candidate's, paired)")
    input_source: str = Field(description="``synthetic`` or the case's ``input_fn`` reference")
    safe_mode: bool
    signature: str = Field(description="the SavedModel signature called (Keras models: unused)")
    execution: dict[str, Any] | None = Field(
        None, description="train/infer: what was built (``tasks.runner.execution.Execution.describe``)"
    )
    tflite: dict[str, Any] | None = Field(
        None,
        description=(
            "tflite: sizes before/after conversion (bytes), agreement with TF, ``tflite_path`` of the converted "
            "model relative to the spec's ``out_dir`` (``tasks.runner.tflite``)"
        ),
    )
    threads: dict[str, Any] | None = Field(
        None,
        description="TF's thread pools as configured and as TF reports them, the CPU set they run on "
        "(``tasks.runner.measure.thread_record``)",
    )
    agreement: dict[str, Any] | None = Field(
        None,
        description="profile mode, mixed precision or XLA: the outputs' agreement with the fp32 eager model on the "
        "same batches (``tasks.runner.agreement.outputs_agreement``: max_abs_diff, max_rel_diff, top1_agreement, "
        "examples, reference, candidate); None where the step computes the model as saved",
    )
    batch_size: int
    seed: int
    deterministic: bool
    cold_step_ms: float = Field(description="the first step: tracing/compilation and one step, ms")
    peak_rss_bytes: int = Field(description="this process's peak resident memory (getrusage), bytes")
    peak_device_bytes: int | None = Field(
        description="TF's GPU allocator peak, bytes, over this process's logical GPUs, from the start of the measured "
        "steps (profile mode; warm-up mode: from process start; paired mode: the candidate's blocks); None without a "
        "GPU (tasks.runner.measure.device_peak_bytes)"
    )
    wall_s: float = Field(description="from the model load to the result, s (our timer)")
    xla_cache: XlaCache | None = None
    cuda_cache: CudaCache | None = Field(None, description="a GPU run's CUDA JIT cache; None without a GPU")
    fed: dict[str, Fed] = Field(
        default_factory=dict,
        description="phase (cold, warmup, measured, profiled; paired: the candidate's cold, warmup, paired) -> "
        "what its steps were fed and which compiled; empty: not recorded (tflite)",
    )


class WarmupResult(_Measured):
    """Warm-up mode: steps until step time is steady (``tasks.runner.steady.SteadyDetector``)."""

    stage: ClassVar[str] = "warm-up"
    mode: Literal["warmup"] = "warmup"
    phases_s: dict[str, float] = Field(
        description="wall time (s) in import_tf, load_model, cold_step, warmup_steps (our timer)"
    )
    warmup_step_times_ms: list[float]
    warmup_cpu_ms: list[float] = Field(default_factory=list, description="per warm-up step, process CPU time, ms")
    warmup_wait_ms: list[float] = Field(default_factory=list, description="per warm-up step, run-queue wait, ms")
    warmup_steps: int = Field(description="steps to run before measuring (start of the steady window)")
    steady: bool
    final_cv: float | None = Field(description="CV of the deciding (or last full) window, a fraction")
    reason: str = Field(description="the figures behind the decision, in words")


class ProfileResult(_Measured):
    """Profile mode: warm-up steps, measured steps with the profiler off, then the profiled window."""

    stage: ClassVar[str] = "profiled run"
    mode: Literal["profile"] = "profile"
    phases_s: dict[str, float] = Field(
        description="wall time (s) in import_tf, load_model, cold_step, warmup_steps, measured_steps, profiled_window"
    )
    warmup_step_times_ms: list[float]
    measured_step_times_ms: list[float] = Field(description="the numbers compared against the baseline, ms")
    measured_cpu_ms: list[float] = Field(default_factory=list, description="per measured step, process CPU time, ms")
    measured_wait_ms: list[float] = Field(default_factory=list, description="per measured step, run-queue wait, ms")
    profiled_step_times_ms: list[float] = Field(description="the steps under the TF profiler, ms (empty: no window)")
    profile_dir: str = Field(description="the profiler's logdir; the XSpace is under plugins/profile/<run>/")
    profiled_window_s: float = Field(description="profiler start, the profiled steps and the XSpace written, s")
    telemetry: dict[str, Any] = Field(
        description="the measured steps' host/GPU samples (``tasks.runner.telemetry.Sampler.stop``; psutil, NVML)"
    )
    host_load: dict[str, Any] = Field(
        description="host load over the measured steps (``tasks.runner.measure.HostLoad``)"
    )
    latency_ms: LatencySummary | None = Field(None, description="infer and tflite modes")
    serving: Serving | None = Field(None, description="infer and tflite modes: the scenario's own record")
    profile_absent_reason: str | None = Field(None, description="why there is no profiler window (tflite)")
    warmup_cpu_ms: list[float] = Field(default_factory=list, description="per warm-up step, process CPU time, ms")
    warmup_wait_ms: list[float] = Field(default_factory=list, description="per warm-up step, run-queue wait, ms")


class PairedResult(_Measured):
    """Paired mode: baseline (A) and candidate (B) in one process, ABBA block pairs (``inputs`` etc. are B's)."""

    stage: ClassVar[str] = "paired run"
    mode: Literal["paired"] = "paired"
    a_inputs: dict[str, InputFeed]
    baseline_model_path: str
    candidate_model_path: str
    a_cold_step_ms: float
    b_cold_step_ms: float = Field(description="also in ``cold_step_ms``")
    a_model_rss_bytes: int | None = Field(
        None,
        description="what the baseline's (A) load, build and cold step added to this process's resident set, bytes "
        "(/proc/self/statm); the version set up first also adds the process's one-time costs; None without /proc",
    )
    b_model_rss_bytes: int | None = Field(None, description="the candidate's (B) likewise")
    first_built: Literal["A", "B"] = Field(description="the version set up first, drawn per gate")
    a_warmup_step_times_ms: list[float]
    b_warmup_step_times_ms: list[float]
    block_steps: int = Field(description="timed steps per version and block")
    blocks: list[BlockPair] = Field(description="every pair measured, in order")
    max_blocks: int = Field(description="the budget: block pairs at most")
    round_pairs: int | None = Field(description="pairs per round (None: one fixed look at the end)")
    rounds: list[RoundSummary]
    stopped_by: StopReason
    host_load: dict[str, Any] = Field(description="host load over all pairs (``tasks.runner.measure.HostLoad``)")
    pairs_wall_s: float = Field(description="from the first pair to the last, s")
    timed_steps: int = Field(description="2 x pairs x block_steps")
    gate: dict[str, Any] | None = Field(
        None, description="written by the parent (tasks.stages.profiled_run.paired_run): design, looks, offset, noise"
    )
    a_fed: dict[str, Fed] = Field(default_factory=dict, description="as ``fed``, for the baseline (A)")
    a_warmup_cpu_ms: list[float] = Field(default_factory=list, description="per A warm-up step, process CPU time, ms")
    b_warmup_cpu_ms: list[float] = Field(default_factory=list, description="per B warm-up step, process CPU time, ms")
    a_warmup_wait_ms: list[float] = Field(default_factory=list, description="per A warm-up step, run-queue wait, ms")
    b_warmup_wait_ms: list[float] = Field(default_factory=list, description="per B warm-up step, run-queue wait, ms")
    a_peak_device_bytes: int | None = Field(
        None, description="the baseline's (A) GPU allocator peak over its own timed blocks, bytes; None without a GPU"
    )
    b_peak_device_bytes: int | None = Field(
        None,
        description="the candidate's (B) likewise (also ``peak_device_bytes``): each block starts the peak afresh "
        "(tasks.runner.measure.reset_device_peak), so neither side's peak holds the other's or the warm-up's",
    )


class ErrorResult(_Record):
    """The runner failed: ``error`` names the model and what went wrong; ``traceback`` its last 4000 characters."""

    schema_version: int = SCHEMA_VERSION
    status: Literal["error"] = "error"
    mode: str | None = Field(None, description="the request's mode (None: the request did not parse)")
    error: str
    traceback: str


class ExternalSamples(_Record):
    """The samples file of a profile not run by the runner (``perfwatch ingest``): xprof's step times stand
    for the measured steps; read by the same reader as a profile result (:func:`read_samples`)."""

    schema_version: int = SCHEMA_VERSION
    mode: Literal["external"] = "external"
    measured_step_times_ms: list[float]
    warmup_step_times_ms: list[float] = []
    profiled_step_times_ms: list[float] = []
    step_time_source: str = Field(description="where the step times come from, e.g. xprof")


class PairedGate(_Record):
    """A paired gate of several fresh processes as the parent keeps it (``tasks.stages.profiled_run.paired_run``):
    each process's own :class:`PairedResult` (ABBA inside, in measurement order), the gate record (the design,
    the looks, the metric each look was judged on) and the cost over all processes. The process is the unit of
    the gate's interval (``tasks.analysis.processes``)."""

    schema_version: int = SCHEMA_VERSION
    mode: Literal["paired-gate"] = "paired-gate"
    processes: list[PairedResult] = Field(description="one per process, in the order they ran")
    gate: dict[str, Any] = Field(description="design, look_processes, stopping, stopped (tasks.stages.profiled_run)")
    block_steps: int = Field(description="timed steps per version and block")
    host_load: dict[str, Any] = Field(description="host load over all processes' pairs, time-weighted")
    pairs_wall_s: float = Field(description="the processes' pair phases added up, s")
    wall_s: float = Field(
        description="the gate's wall time, s (our timer, start-ups included): its processes start in batches, so "
        "their wall times overlap"
    )
    timed_steps: int = Field(description="2 x pairs x block_steps over all processes")


class EnvironmentProcess(_Record):
    """One process of a cross-environment gate: its process pair, its side (``A``: the baseline environment,
    ``B``: this run's) and its profile-mode result (the measured steps, no profiler window)."""

    pair: int = Field(ge=0, description="the process pair (the gate's unit), 0-based, in the order they ran")
    side: Literal["A", "B"]
    result: ProfileResult


class EnvironmentGate(_Record):
    """A cross-environment gate as the parent keeps it (``tasks.stages.profiled_run``): the two sides of the
    gate are two runner environments (another runner command or other environment variables), each measured
    in its own fresh processes, one process of each side per pair, the side that runs first drawn afresh per
    pair. ``environments``: each side's runner command, its own environment variables and fingerprint
    (``fingerprint_id``, ``comparability_key``), and ``differs`` (``tasks.analysis.environment.FieldChange``
    dicts, A to B). The process pair is the unit of the interval (``tasks.analysis.processes.unit_from_sides``).
    """

    schema_version: int = SCHEMA_VERSION
    mode: Literal["environment-gate"] = "environment-gate"
    processes: list[EnvironmentProcess] = Field(description="every side's process, in the order they ran")
    environments: dict[str, Any] = Field(description="A and B: runner, env, fingerprint; differs: the fields")
    gate: dict[str, Any] = Field(description="design, look_processes, stopping (tasks.stages.profiled_run)")
    block_steps: int = Field(description="timed steps per side and block (the steps are cut into blocks)")
    host_load: dict[str, Any] = Field(description="host load over all processes' measured steps, time-weighted")
    pairs_wall_s: float = Field(
        description="the pairs' measured phases, s: both sides' added up where they ran one after another, the "
        "longer of the two where they were interleaved"
    )
    wall_s: float = Field(
        description="the gate's wall time, s: its processes' wall times added up where they ran one after another, "
        "each pair's elapsed time where its two processes ran together (interleaved; start-up and warm-up included)"
    )
    timed_steps: int = Field(description="measured steps over all processes, both sides")


ModeResult = ProbeResult | BuildResult | WarmupResult | ProfileResult | PairedResult
R = TypeVar("R", bound=BaseModel)


def load_json(path: str | Path, runner: str | None = None) -> dict[str, Any]:
    """A result file's JSON object, its schema version checked.

    Raises:
        OSError: the file cannot be read.
        ProtocolError: it holds no JSON object.
        ProtocolMismatch: its ``schema_version`` is not :data:`SCHEMA_VERSION` (``runner`` names the runner in
            the message; default the file).
    """
    text = Path(path).read_text()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"{path}: not a JSON result ({e})") from e
    if not isinstance(raw, dict):
        raise ProtocolError(f"{path}: not a JSON object")
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise mismatch(runner or str(path), raw.get("schema_version", "0 (before versions)"))
    return raw


def read_result(path: str | Path, kind: type[R], runner: str | None = None) -> R:
    """The record ``kind`` held in ``path`` (a ``result.json``).

    Raises:
        OSError, ProtocolError, ProtocolMismatch: see :func:`load_json`.
        RunnerError: the file holds an :class:`ErrorResult` (``runner (<mode>) failed: <its error>``).
        ProtocolError: the file is not a ``kind`` (names the field).
    """
    raw = load_json(path, runner)
    if raw.get("status") == "error":
        raise RunnerError(f"runner ({raw.get('mode')}) failed: {raw.get('error')}")
    try:
        return kind.model_validate(raw)
    except ValidationError as e:
        raise ProtocolError(f"{path}: not a {kind.__name__} ({_first_error(e)})") from e


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: int

    @model_validator(mode="before")
    @classmethod
    def _decode(cls, data: Any) -> Any:
        return _numbers_from_json(cls, data)


class StepSamples(_View):
    """What the stages after the profiled run read of a run's samples file (``ProfiledRun.samples_path``): a
    :class:`ProfileResult`, or an ingested profile's :class:`ExternalSamples`; step times in ms (our timer,
    or xprof's for an ingested profile). A list the file lacks is empty."""

    measured_step_times_ms: list[float] = []
    #: per measured step, the runner process's CPU time (ms, all threads, user + system); empty where not recorded
    measured_cpu_ms: list[float] = []
    warmup_step_times_ms: list[float] = []
    profiled_step_times_ms: list[float] = []
    cold_step_ms: float | None = None
    profile_absent_reason: str | None = None


class PairedSamples(_View):
    """What baseline-compare reads of one process of a paired gate (``ProfiledRun.paired_path``: a
    :class:`PairedResult` with the parent's ``gate``, or each of a :class:`PairedGate`'s ``processes``); a
    field the file lacks is None (``blocks``: empty)."""

    blocks: list[BlockPair] = []
    block_steps: int | None = None
    timed_steps: int | None = None
    wall_s: float | None = None
    pairs_wall_s: float | None = None
    stopped_by: StopReason | None = None
    rounds: list[dict[str, Any]] | None = None
    gate: dict[str, Any] | None = None
    host_load: dict[str, Any] | None = None
    fed: dict[str, Fed] = {}
    a_fed: dict[str, Fed] = {}
    a_cold_step_ms: float | None = None
    b_cold_step_ms: float | None = None
    a_model_rss_bytes: int | None = None
    b_model_rss_bytes: int | None = None
    first_built: Literal["A", "B"] | None = None


class PairedGateSamples(_View):
    """What baseline-compare reads of a :class:`PairedGate` file: each process as :class:`PairedSamples`."""

    mode: Literal["paired-gate"]
    processes: list[PairedSamples]
    gate: dict[str, Any]
    block_steps: int
    host_load: dict[str, Any]
    pairs_wall_s: float
    wall_s: float
    timed_steps: int


V = TypeVar("V", bound=_View)


def read_view(path: str | Path, kind: type[V]) -> V:
    """The fields ``kind`` reads of the result or samples file ``path`` (:class:`StepSamples`,
    :class:`PairedSamples`); other fields are left to :func:`load_json`'s readers (the store).

    Raises:
        OSError, ProtocolError, ProtocolMismatch: see :func:`load_json`; ProtocolError also for a field of the
            wrong type (names it).
    """
    raw = load_json(path)
    try:
        return kind.model_validate(raw)
    except ValidationError as e:
        raise ProtocolError(f"{path}: not a {kind.__name__} ({_first_error(e)})") from e


def write_result(path: str | Path, record: BaseModel) -> None:
    """Write ``record`` to ``path`` atomically (a temporary file, then a rename): a reader never sees half."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(record.model_dump_json())
    tmp.replace(p)
