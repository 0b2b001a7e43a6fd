"""What the runner is asked to measure (``RunnerSpec``, JSON on disk; the request of ``tasks.runner.protocol``).

Imported on both sides of the process boundary: by the stages that write a spec and by the runner
process that reads it. Needs only pydantic, so it loads in a bare TF/GPU venv.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks import wire
from tasks.runner.protocol import SCHEMA_VERSION, RunnerError


class RunnerSpec(BaseModel):
    """What the runner is asked to do; written by the warm-up and profiled-run stages."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan=wire.PYDANTIC_INF_NAN)  # tasks.wire's rule

    schema_version: int = SCHEMA_VERSION  # tasks.runner.protocol: a runner of another version refuses it
    mode: Literal["warmup", "profile", "paired"]
    model_path: str  # paired mode: the candidate (B)
    out_dir: str
    batch_size: int
    seed: int = 0
    deterministic: bool = False
    warmup_steps: int = 0  # profile mode: steps run (untimed for results) after the cold step
    warmup_window: int = 5
    warmup_cv_max: float = 0.05
    warmup_max_steps: int = 60
    measured_steps: int = 50
    profiled_steps: int = 5
    baseline_model_path: str | None = None  # paired mode: the baseline version (A)
    block_steps: int = Field(10, ge=1, le=10_000)  # paired mode: timed steps per block
    blocks: int = Field(8, ge=2, le=100_000)  # paired mode: block pairs at most, the step budget (Case allows 100000)
    # paired mode: block pairs per round. None: all ``blocks`` pairs in one go (a fixed gate). Set: after
    # every round the runner writes a round event on stdout (``tasks.runner.protocol.RoundEvent``) and reads
    # one command line on stdin (``more`` or ``stop``), until the parent says stop or ``blocks`` are done.
    round_pairs: int | None = Field(None, ge=1, le=100_000)
    # paired mode: which of the gate's fresh processes this is (0-based) and how many it plans at most
    # (tasks.analysis.processes: the process is the gate's unit); shown in progress lines
    process: int = Field(0, ge=0)
    processes: int = Field(1, ge=1)
    # paired mode: which version is set up first (it pays the process's one-time costs on its cold step and memory);
    # the parent alternates it over a gate's processes from a random start, so any 2 of them hold both orders
    # (tasks.analysis.metric_gates); None: the runner draws it
    first_built: Literal["A", "B"] | None = None
    # What is measured (the Case fields of the same names, ``tasks.records.Case``; plain values here so
    # the runner needs only pydantic): the step kind, how inputs are fed, and the execution options.
    case_mode: Literal["train", "infer", "tflite"] = "train"
    inputs: dict[str, dict[str, Any]] | None = None  # name -> {"shape", "dtype", "min", "max"} (InputSpec)
    input_fn: str | None = None  # "package.module:function" returning a tf.data.Dataset of batches
    signature: str = "serving_default"
    safe_mode: bool = True
    precision: Literal["fp32", "mixed_float16", "mixed_bfloat16"] = "fp32"
    xla: bool = False
    strategy: Literal["none", "mirrored"] = "none"
    quantization: Literal["none", "dynamic", "int8"] = "none"
    # tflite: the interpreter's num_threads; None: the CPUs this process may use (tasks.runner.tflite.default_threads)
    tflite_threads: int | None = Field(None, ge=1, le=1024)
    telemetry_interval_ms: int = Field(100, ge=10, le=1000)  # tasks.runner.telemetry.MAX_INTERVAL_MS
    # a step fed fewer examples than batch_size (an input_fn's last batch of an epoch) fails the run unless set
    allow_partial_batches: bool = False
    # xla: XLA's persistent compilation cache directory, shared by the processes of one case's run
    # (``tasks.runner.execution.configure_xla_cache``); None: every process compiles afresh
    xla_cache_dir: str | None = None
    # the device kind the case asks for (Case.device; tasks.runner.devices.select): cpu hides the GPUs from TF,
    # gpu/tpu are refused where TF sees none; auto: whatever TF sees. case_name names the case in that refusal.
    device: Literal["auto", "cpu", "gpu", "tpu"] = "auto"
    case_name: str = "?"
    # infer/tflite: how queries reach the model (Case.scenario; tasks.runner.loadgen). single-stream: the measured
    # steps one after another; offline: measured_steps batches back to back, the next issued before the last
    # result is fetched; server: ``queries`` Poisson arrivals at target_qps per point
    scenario: Literal["single-stream", "offline", "server"] = "single-stream"
    target_qps: float | None = Field(None, gt=0)  # server: the rate; search: the first rate tried
    queries: int | None = Field(None, ge=1, le=10_000_000)  # server: queries per point (the stage's minimum n)
    search: bool = False  # server: bisect on the rate (tasks.runner.loadgen.QpsSearch)
    # profile mode, single-stream: time the measured steps in blocks of this many steps, each on the parent's cue.
    # Before every block the runner writes a cue event (``tasks.runner.protocol.CueEvent``) and reads one line on
    # stdin: ``more`` times the block, ``stop`` (or a closed stdin) ends the measured steps there; one last cue
    # (``block == of``) after the last block waits for the parent before the run goes on. None: no cues, the
    # measured steps in one go. A cross-environment gate interleaves two processes' blocks this way.
    cue_block_steps: int | None = Field(None, ge=1, le=100_000)
    # paired mode without rounds: after both versions' warm-up, one cue (``CueEvent`` block 0 of 1) and a line read
    # on stdin before the first pair: ``more`` times the pairs, ``stop`` (or a closed stdin) none. A gate of
    # several processes starts them in batches and times their pairs one after the other this way.
    cue_start: bool = False
    search_max_points: int = Field(8, ge=1, le=64)
    latency_bound_ms: float | None = Field(None, gt=0)
    # server: the rank (1-based) among ``queries`` sorted latencies of the percentile's 95% upper bound, from
    # tasks.analysis.percentiles (the ranks depend on n alone); None: no bound judged in the runner
    upper_rank: int | None = Field(None, ge=1)
    # server: a point lasts at least this long (s): its query count is the smallest n of ``upper_ranks`` (n ->
    # that n's upper-bound rank, from the stage) with n >= queries and n / rate >= min_point_s (LoadGen's minimum
    # duration, scaled down); unset ``upper_ranks``: ``queries`` and ``upper_rank`` at every rate
    min_point_s: float = Field(0.0, ge=0)
    upper_ranks: dict[int, int | None] | None = None

    @model_validator(mode="after")
    def _paired_needs_baseline(self) -> RunnerSpec:
        if self.mode == "paired" and not self.baseline_model_path:
            raise ValueError("paired mode needs baseline_model_path (the baseline version, A)")
        return self

    @model_validator(mode="after")
    def _cues_single_stream(self) -> RunnerSpec:
        if self.cue_block_steps is not None and (self.mode != "profile" or self.scenario != "single-stream"):
            raise ValueError(
                f"cue_block_steps applies to profile mode's single-stream steps (mode {self.mode!r}, "
                f"scenario {self.scenario!r})"
            )
        if self.cue_start and (self.mode != "paired" or self.round_pairs is not None):
            raise ValueError(
                f"cue_start applies to paired mode without rounds (mode {self.mode!r}, round_pairs "
                f"{self.round_pairs!r})"
            )
        return self

    @model_validator(mode="after")
    def _server_needs_rate(self) -> RunnerSpec:
        if self.scenario == "server" and (self.target_qps is None or self.queries is None):
            raise ValueError("scenario server needs target_qps (the rate, or the search's first) and queries")
        if self.search and (self.latency_bound_ms is None or self.upper_rank is None):
            raise ValueError("search needs latency_bound_ms and upper_rank (the percentile's upper-bound rank)")
        return self


__all__ = ["RunnerError", "RunnerSpec"]
