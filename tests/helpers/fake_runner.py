"""A fake runner: speaks the runner protocol (``tasks.runner.protocol``) without TensorFlow, for stage and DAG tests.

Run as ``python -m tests.helpers.fake_runner SPEC.json`` through the runner command setting
(``PERFWATCH_RUNNER_COMMAND``; :func:`command` gives it): it reads the request, says hello, emits the same
progress and round events as the real runner (answering ``more``/``stop`` in a paired gate in rounds), and
writes a schema-versioned ``result.json`` of the mode's record. Profile mode copies a committed real XSpace
(``tests/data/tiny_train_3steps.xplane.pb``: the tiny Conv2D model of ``tests.helpers.models``, 3 profiled
train steps of batch 4 on CPU) to ``<out_dir>/profile/plugins/profile/<ts>/<host>.xplane.pb``, so the parse
stage runs xprof on a real profile. The probe mode is the real probe without TensorFlow's facts.

Configuration:

* step times: ``PERFWATCH_FAKE_STEP_MS`` (base ms, default 1.0: about the fixture's own step time, so the
  parse stage's cross-check holds) x the model's ``step_factor`` x log-normal noise of sd
  ``PERFWATCH_FAKE_NOISE_CV`` (default 0.02), seeded by the spec's seed and the model's path;
* per-step CPU time (``cpu_ms`` lists, every mode): that step time x ``PERFWATCH_FAKE_CPU_RATIO`` (default
  1.0); run-queue wait (``wait_ms`` lists): the wall time x ``PERFWATCH_FAKE_WAIT_RATIO`` (default 0.0;
  ``none``: no schedstat, the lists stay empty);
* ``PERFWATCH_FAKE_TAKE_TIME=1``: each step also takes its wall time (sleeps it), so that what samples the
  host while steps run (the telemetry) sees them run; otherwise the steps are figures made in microseconds;
* a busy host: ``PERFWATCH_FAKE_WALL_NOISE_CV`` (default 0.0) multiplies the wall time only by log-normal
  noise of that sd (the CPU time stays as steady as the step), and ``PERFWATCH_FAKE_OTHER_CPU_SHARE`` is the
  ``other_cpu_share`` every host load reports (default 0.01, a quiet host);
* ``step_factor`` per model version: the ``fake_runner.json`` member (``{"step_factor": 1.5}``) of the model's
  ``.keras`` zip, written by :func:`write_model` (1.0 without one), so a store of fake models carries its
  versions' speeds and a paired gate sees a regression;
* a ``tflite`` case's profile mode writes a fake ``model.tflite`` beside its result, a ``tflite`` record naming it
  relative to the out dir (as the real runner does) and no profiler window;
* an ``infer`` or ``tflite`` case's profile mode reports its measured batches' latency as the real runner does
  (``latency_ms``: the same ``tasks.runner.measure.latency_summary`` over the measured step times, p50/p90/p99,
  max and throughput; ``serving``: the single-stream or offline scenario's wall time and examples; the server
  scenario's load generator is not faked);
* profile mode samples this host's telemetry over its measured steps with the real runner's sampler
  (``tasks.runner.telemetry.Sampler``: psutil's host rows, NVML's GPU rows where a GPU answers);
* ``PERFWATCH_FAKE_HOLD_S``: seconds the profile mode holds its host (sleeps) before its measured steps (default 0),
  as a real measurement of minutes does: measurements long enough that two on one host would overlap in time;
* ``PERFWATCH_FAKE_BUSY_ONCE``: a directory; each run's first profile reports a busy host (:func:`host_load`), so
  its measure task is retried;
* ``PERFWATCH_FAKE_PROCESS_SD``: sd (log scale) of a paired process's own offset between its two model copies
  (B's steps x exp(N(0, sd)), drawn per process of the gate, ``RunnerSpec.process``; default 0): the drift of
  real processes; each process of a gate also draws its own step noise;
* profile mode with cued blocks (``RunnerSpec.cue_block_steps``) times its measured steps with the real runner's
  ``tasks.runner.modes.profile.cued_steps`` (cue events, ``more``/``stop`` on stdin); ``PERFWATCH_FAKE_BLOCK_LOG``
  (a file): each block's span is appended to it (``<out dir name> <start> <end>``, time.time() s); paired mode
  with ``cue_start`` waits for its cue the same way and logs the span of its pairs there when it timed any;
* a process's peak resident memory: 50 MiB x ``PERFWATCH_FAKE_RSS_FACTOR`` (default 1.0), 2% noise per process;
* ``PERFWATCH_FAKE_FAIL``: a mode (``warmup``, ``profile``, ``paired``, ``probe``) that fails with an error result;
* ``PERFWATCH_FAKE_SCHEMA_VERSION``: the protocol version it claims (default the real one), to test refusals;
* the host load it reports is a quiet host's (other processes 1% of the CPU) unless
  ``PERFWATCH_FAKE_OTHER_CPU_SHARE`` says otherwise, never this machine's.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import socket
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from tasks.runner import progress
from tasks.runner.measure import latency_summary
from tasks.runner.modes.paired import pair_orders
from tasks.runner.modes.profile import cued_steps
from tasks.runner.protocol import (
    MORE,
    SCHEMA_VERSION,
    STOP,
    BlockPair,
    ErrorResult,
    HelloEvent,
    InputFeed,
    LatencySummary,
    PairedResult,
    ProbeResult,
    ProbeSpec,
    ProfileResult,
    RoundEvent,
    RoundSummary,
    Serving,
    WarmupResult,
    event_line,
)
from tasks.runner.spec import RunnerSpec
from tasks.runner.steady import SteadyDetector
from tasks.runner.telemetry import Sampler
from tasks.runner.tflite import PROFILE_ABSENT_REASON as tflite_absent_reason

XPLANE = Path(__file__).resolve().parents[1] / "data" / "tiny_train_3steps.xplane.pb"
#: the host load the fake reports (tasks.runner.measure.HostLoad's keys): a quiet host
QUIET_HOST = {
    "wall_s": 1.0,
    "cpus": 2,
    "load1_start": 0.5,
    "load1_end": 0.5,
    "other_cpu_s": 0.02,
    "other_cpu_share": 0.01,
    "steal_share": 0.0,
    "own_cpu_share": 0.9,
}


def command() -> str:
    """The ``PERFWATCH_RUNNER_COMMAND`` value that runs this fake with the test's interpreter."""
    return f"{sys.executable} -m tests.helpers.fake_runner"


def write_model(path: Path, step_factor: float = 1.0, cold_factor: float = 1.0, memory_factor: float = 1.0) -> Path:
    """Write a fake ``.keras`` model (a zip, as the model store checks) whose steps take ``step_factor`` x the base,
    whose cold step (in paired mode) ``cold_factor`` x more again, and whose resident memory (paired mode)
    ``memory_factor`` x :data:`MODEL_RSS_BYTES`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    factors = {"step_factor": step_factor, "cold_factor": cold_factor, "memory_factor": memory_factor}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("fake_runner.json", json.dumps(factors))
    return path


def step_factor(model_path: str, key: str = "step_factor") -> float:
    """The ``step_factor`` (or ``key``) of the fake model at ``model_path`` (a ``.keras`` file or a directory holding
    one; 1.0 for any other path or file, or a model written without it)."""
    p = Path(model_path)
    files = [p] if p.is_file() else sorted(p.glob("*.keras"))
    if not files:
        return 1.0
    try:
        with zipfile.ZipFile(files[0]) as z:
            return float(json.loads(z.read("fake_runner.json")).get(key, 1.0))
    except (KeyError, zipfile.BadZipFile):
        return 1.0


#: what the version set up first in a paired process pays on its cold step and its memory (one-time costs)
FIRST_COLD_COST = 1.3
#: a fake model's resident memory in paired mode (its load, build and cold step), bytes
MODEL_RSS_BYTES = 50 * 2**20


def host_load(busy_once_key: str | None = None) -> dict[str, float | int]:
    """The host load the fake reports: :data:`QUIET_HOST` with ``PERFWATCH_FAKE_OTHER_CPU_SHARE`` (if set); with
    ``PERFWATCH_FAKE_BUSY_ONCE`` (a directory) a busy host (other processes 90% of the CPU) the first time a profile
    of ``busy_once_key`` (its model path: one per run) is measured, a marker file there remembering it."""
    once = os.environ.get("PERFWATCH_FAKE_BUSY_ONCE")
    if once and busy_once_key is not None:
        marker = Path(once) / hashlib.sha256(busy_once_key.encode()).hexdigest()[:16]
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(busy_once_key)
            return {**QUIET_HOST, "other_cpu_share": 0.9, "other_cpu_s": 0.9 * 2 * QUIET_HOST["wall_s"]}
    share = os.environ.get("PERFWATCH_FAKE_OTHER_CPU_SHARE")
    if share is None:
        return QUIET_HOST
    return {**QUIET_HOST, "other_cpu_share": float(share), "other_cpu_s": float(share) * 2 * QUIET_HOST["wall_s"]}


class Steps:
    """Fake step times (ms) of one model: base x factor x log-normal noise, seeded; with each step's CPU time
    and run-queue wait (ms) in ``cpu_ms``, ``wait_ms`` (module docstring), taken by :meth:`take`."""

    def __init__(self, spec: RunnerSpec, model_path: str, process_factor: float = 1.0) -> None:
        base = float(os.environ.get("PERFWATCH_FAKE_STEP_MS", "1.0"))
        self.ms = base * step_factor(model_path) * process_factor
        self.cv = float(os.environ.get("PERFWATCH_FAKE_NOISE_CV", "0.02"))
        self.wall_cv = float(os.environ.get("PERFWATCH_FAKE_WALL_NOISE_CV", "0.0"))
        self.cpu_ratio = float(os.environ.get("PERFWATCH_FAKE_CPU_RATIO", "1.0"))
        wait = os.environ.get("PERFWATCH_FAKE_WAIT_RATIO", "0.0")
        self.wait_ratio = None if wait == "none" else float(wait)
        self.take_time = os.environ.get("PERFWATCH_FAKE_TAKE_TIME") == "1"
        salt = f":p{spec.process}" if spec.process else ""  # each process of a gate draws its own steps
        self.rng = random.Random(f"{spec.seed}{salt}:{model_path}")
        self.wall_rng = random.Random(f"{spec.seed}{salt}:{model_path}:wall")  # the work drawn is the same either way
        self.cpu_ms: list[float] = []
        self.wait_ms: list[float] = []

    def __call__(self) -> float:
        work = self.ms * math.exp(self.rng.gauss(0.0, self.cv))
        wall = work * math.exp(self.wall_rng.gauss(0.0, self.wall_cv)) if self.wall_cv else work
        self.cpu_ms.append(work * self.cpu_ratio)
        if self.wait_ratio is not None:
            self.wait_ms.append(wall * self.wait_ratio)
        if self.take_time:
            time.sleep(wall / 1000.0)
        return wall

    def run(self, n: int) -> list[float]:
        return [self() for _ in range(n)]

    def take(self) -> tuple[list[float], list[float]]:
        """The CPU times and waits (ms) since the last call, as ``tasks.runner.counters.Recorder.take``."""
        cpu, wait = self.cpu_ms, self.wait_ms
        self.cpu_ms, self.wait_ms = [], []
        return cpu, wait


def _logged_blocks(step: Steps, spec: RunnerSpec) -> Callable[[], float]:
    """``step``, or with ``PERFWATCH_FAKE_BLOCK_LOG`` (a file) a step that appends ``<out dir name> <start>
    <end>`` (time.time() s) per cued block to it: the steps of one block are timed back to back, so a block's
    first step starts it and its ``cue_block_steps``-th step ends it."""
    path = os.environ.get("PERFWATCH_FAKE_BLOCK_LOG")
    if not path or spec.cue_block_steps is None:
        return step
    size, name, count = spec.cue_block_steps, Path(spec.out_dir).name, [0, 0.0]

    def logged() -> float:
        if count[0] % size == 0:
            count[1] = time.time()
        t = step()
        count[0] += 1
        if count[0] % size == 0 or count[0] == spec.measured_steps:
            with open(path, "a") as f:
                f.write(f"{name} {count[1]:.6f} {time.time():.6f}\n")
        return t

    return logged


def _emit_progress(phase: str, n: int, of: int, times: list[float]) -> None:
    median = sorted(times)[len(times) // 2] if times else None
    progress.emit(phase, n=n, of=of, median_ms=median, final=True)


def _case(spec: RunnerSpec, cold_ms: float) -> dict[str, object]:
    return {
        "case_mode": spec.case_mode,
        "inputs": {"input": InputFeed(shape=[spec.batch_size, 16, 16, 3], dtype="float32", min=None, max=None)},
        "input_source": spec.input_fn or "synthetic",
        "safe_mode": spec.safe_mode,
        "signature": spec.signature,
        "batch_size": spec.batch_size,
        "seed": spec.seed,
        "deterministic": spec.deterministic,
        "cold_step_ms": cold_ms,
        # the process's peak: 50 MiB x PERFWATCH_FAKE_RSS_FACTOR, with 2% noise (log scale) per process
        "peak_rss_bytes": int(
            50
            * 2**20
            * float(os.environ.get("PERFWATCH_FAKE_RSS_FACTOR", "1.0"))
            * math.exp(random.Random(f"{spec.seed}:{spec.out_dir}:rss").gauss(0.0, 0.02))
        ),
        "peak_device_bytes": None,
    }


def warmup(spec: RunnerSpec) -> WarmupResult:
    step, t0 = Steps(spec, spec.model_path), time.perf_counter()
    det = SteadyDetector(window=spec.warmup_window, cv_max=spec.warmup_cv_max, max_steps=spec.warmup_max_steps)
    times: list[float] = []
    while True:
        times.append(step())
        if det.add(times[-1]):
            break
    res = det.result()
    cpu, wait = step.take()
    _emit_progress("warm-up", len(times), spec.warmup_max_steps, times)
    return WarmupResult(
        **_case(spec, 20 * step.ms),
        phases_s={"import_tf": 0.0, "load_model": 0.0, "cold_step": 0.0, "warmup_steps": 0.0},
        warmup_step_times_ms=times,
        warmup_cpu_ms=cpu,
        warmup_wait_ms=wait,
        warmup_steps=res.warmup_steps,
        steady=res.steady,
        final_cv=res.final_cv,
        reason=res.reason,
        wall_s=time.perf_counter() - t0,
    )


def profile(spec: RunnerSpec) -> ProfileResult:
    step, t0 = Steps(spec, spec.model_path), time.perf_counter()
    time.sleep(float(os.environ.get("PERFWATCH_FAKE_HOLD_S", "0")))  # the host is measuring
    warm = step.run(spec.warmup_steps)
    warm_cpu, warm_wait = step.take()
    sampler = Sampler(spec.telemetry_interval_ms).start()  # the real runner's telemetry of this host (no TF)
    t_measured = time.perf_counter()
    if spec.cue_block_steps is not None:  # the real runner's cued blocks, each block's span logged when asked
        measured = cued_steps(_logged_blocks(step, spec), spec.measured_steps, spec.cue_block_steps)
    else:
        measured = step.run(spec.measured_steps)
    sampler.steps += len(measured)
    telemetry = sampler.stop()
    measured_cpu, measured_wait = step.take()
    _emit_progress("measure", len(measured), spec.measured_steps, measured)
    latency = serving = None
    if spec.case_mode in ("infer", "tflite"):  # as tasks.runner.modes.profile: per batch, over the measured steps
        if spec.scenario == "server":
            raise NotImplementedError("the fake runner has no load generator: scenario server is not faked")
        latency = LatencySummary(**latency_summary(measured, spec.batch_size))
        serving = Serving(
            scenario=spec.scenario,
            wall_s=time.perf_counter() - t_measured,
            examples=spec.batch_size * len(measured),
            latency_bound_ms=spec.latency_bound_ms,
            upper_rank=spec.upper_rank,
        )
    logdir = Path(spec.out_dir) / "profile"
    logdir.mkdir(parents=True, exist_ok=True)  # as the real runner: there even when no window is profiled
    if spec.case_mode == "tflite":  # the real runner's shape: a converted model beside the result, no profiler window
        lite = Path(spec.out_dir) / "model.tflite"
        lite.write_bytes(b"TFL3" + hashlib.sha256(spec.model_path.encode()).digest())
        tflite: dict | None = {"quantization": spec.quantization, "tflite_path": lite.name, "size_bytes_after": 36}
        profiled: list[float] = []
        absent: str | None = tflite_absent_reason
    else:
        profiled, tflite, absent = step.run(spec.profiled_steps), None, None
        run_dir = logdir / "plugins" / "profile" / time.strftime("%Y_%m_%d_%H_%M_%S")
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / f"{socket.gethostname()}.xplane.pb").write_bytes(XPLANE.read_bytes())
    return ProfileResult(
        **_case(spec, 20 * step.ms),
        phases_s={"import_tf": 0.0, "load_model": 0.0, "cold_step": 0.0, "warmup_steps": 0.0},
        warmup_step_times_ms=warm,
        measured_step_times_ms=measured,
        measured_cpu_ms=measured_cpu,
        measured_wait_ms=measured_wait,
        warmup_cpu_ms=warm_cpu,
        warmup_wait_ms=warm_wait,
        profiled_step_times_ms=profiled,
        profile_dir=str(logdir),
        profiled_window_s=0.0,
        tflite=tflite,
        profile_absent_reason=absent,
        telemetry=telemetry,
        host_load=host_load(spec.model_path),
        latency_ms=latency,
        serving=serving,
        wall_s=time.perf_counter() - t0,
    )


def paired(spec: RunnerSpec) -> PairedResult:
    assert spec.baseline_model_path is not None
    t0 = time.perf_counter()
    # a process's own offset between its two model copies (PERFWATCH_FAKE_PROCESS_SD, log scale): B's steps
    # x exp(N(0, sd)), drawn per process of the gate (spec.process), as two real processes differ
    sd = float(os.environ.get("PERFWATCH_FAKE_PROCESS_SD", "0.0"))
    offset = math.exp(random.Random(f"{spec.seed}:{spec.process}:offset").gauss(0.0, sd)) if sd else 1.0
    step = {"A": Steps(spec, spec.baseline_model_path), "B": Steps(spec, spec.model_path, offset)}
    warm = {who: s.run(spec.warmup_steps) for who, s in step.items()}
    warm_counts = {who: s.take() for who, s in step.items()}
    orders = pair_orders(random.Random(f"{spec.seed}:order"))
    blocks: list[BlockPair] = []
    rounds: list[RoundSummary] = []
    per_round = spec.round_pairs or spec.blocks
    go = progress.wait_for_cue(0, 1, "paired") if spec.cue_start else True  # the real runner's start cue
    t_pairs, t_pairs_perf = time.time(), time.perf_counter()  # after the cue, as the real runner's pairs_wall_s
    stopped_by = "budget" if go else "parent"
    while go and len(blocks) < spec.blocks:
        first = len(blocks)
        for i in range(first, min(spec.blocks, first + per_round)):
            a, (a_cpu, a_wait) = step["A"].run(spec.block_steps), step["A"].take()
            b, (b_cpu, b_wait) = step["B"].run(spec.block_steps), step["B"].take()
            blocks.append(
                BlockPair(
                    pair=i,
                    order=next(orders),
                    a_ms=a,
                    b_ms=b,
                    a_cpu_ms=a_cpu,
                    b_cpu_ms=b_cpu,
                    a_wait_ms=a_wait,
                    b_wait_ms=b_wait,
                )
            )
        final = len(blocks) >= spec.blocks
        info = RoundSummary(
            round=len(rounds), pairs=len(blocks), host_load=host_load(), wall_s=time.perf_counter() - t0, final=final
        )
        rounds.append(info)
        if spec.round_pairs is None:
            continue
        sys.stdout.write(event_line(RoundEvent(**info.model_dump(), blocks=blocks[first:])))
        sys.stdout.flush()
        if final:
            break
        command = sys.stdin.readline().strip()
        if command in ("", STOP):
            stopped_by = "parent" if command else "stdin closed"
            break
        assert command == MORE, command
    if blocks and os.environ.get("PERFWATCH_FAKE_BLOCK_LOG"):
        with open(os.environ["PERFWATCH_FAKE_BLOCK_LOG"], "a") as f:
            f.write(f"{Path(spec.out_dir).name} {t_pairs:.6f} {time.time():.6f}\n")
    # the cold steps: 20 steps' worth x the model's cold_factor, the version set up first (drawn per process, as the
    # real runner draws it) paying FIRST_COLD_COST more, each with 5% noise (log scale)
    draw = random.Random(f"{spec.seed}:{spec.process}:cold")
    first_built = spec.first_built or draw.choice(("A", "B"))
    paths = {"A": spec.baseline_model_path, "B": spec.model_path}
    cold_of = {
        who: 20
        * step[who].ms
        * step_factor(paths[who], "cold_factor")
        * (FIRST_COLD_COST if who == first_built else 1.0)
        * math.exp(draw.gauss(0.0, 0.05))
        for who in ("A", "B")
    }
    rss_of = {
        who: int(
            MODEL_RSS_BYTES
            * step_factor(paths[who], "memory_factor")
            * (FIRST_COLD_COST if who == first_built else 1.0)
            * math.exp(draw.gauss(0.0, 0.03))
        )
        for who in ("A", "B")
    }
    return PairedResult(
        **_case(spec, cold_of["B"]),
        a_inputs={"input": InputFeed(shape=[spec.batch_size, 16, 16, 3], dtype="float32", min=None, max=None)},
        baseline_model_path=spec.baseline_model_path,
        candidate_model_path=spec.model_path,
        a_cold_step_ms=cold_of["A"],
        b_cold_step_ms=cold_of["B"],
        a_model_rss_bytes=rss_of["A"],
        b_model_rss_bytes=rss_of["B"],
        first_built=first_built,
        a_warmup_step_times_ms=warm["A"],
        b_warmup_step_times_ms=warm["B"],
        a_warmup_cpu_ms=warm_counts["A"][0],
        b_warmup_cpu_ms=warm_counts["B"][0],
        a_warmup_wait_ms=warm_counts["A"][1],
        b_warmup_wait_ms=warm_counts["B"][1],
        block_steps=spec.block_steps,
        blocks=blocks,
        max_blocks=spec.blocks,
        round_pairs=spec.round_pairs,
        rounds=rounds,
        stopped_by=stopped_by,
        host_load=host_load(),
        pairs_wall_s=time.perf_counter() - t_pairs_perf,
        timed_steps=2 * len(blocks) * spec.block_steps,
        wall_s=time.perf_counter() - t0,
    )


def main(argv: list[str]) -> int:
    version = int(os.environ.get("PERFWATCH_FAKE_SCHEMA_VERSION", SCHEMA_VERSION))
    sys.stdout.write(event_line(HelloEvent(schema_version=version, python=sys.executable)))
    sys.stdout.flush()
    raw = json.loads(Path(argv[0]).read_text())
    out = Path(raw["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    try:
        if os.environ.get("PERFWATCH_FAKE_FAIL") == raw["mode"]:
            raise RuntimeError(f"fake runner asked to fail in mode {raw['mode']} (PERFWATCH_FAKE_FAIL)")
        if raw["mode"] == "probe":
            from tasks.runner import probe

            ProbeSpec.model_validate(raw)
            result: object = ProbeResult(data=probe.collect(include_tensorflow=False))
        else:
            spec = RunnerSpec.model_validate(raw)
            result = {"warmup": warmup, "profile": profile, "paired": paired}[spec.mode](spec)
        code = 0
    except Exception as e:  # noqa: BLE001 - reported in result.json, as the real runner does
        result, code = ErrorResult(mode=raw.get("mode"), error=f"{type(e).__name__}: {e}", traceback=""), 1
    data = json.loads(result.model_dump_json())  # type: ignore[attr-defined]
    data["schema_version"] = version
    (out / "result.json").write_text(json.dumps(data))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
