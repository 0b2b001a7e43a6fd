"""The runner process: ``python -m tasks.runner SPEC.json`` — the only code that runs TensorFlow.

One process per measurement (PerfZero's rule): a fresh interpreter loads the model (a ``.keras`` file
with the case's ``safe_mode``, or a SavedModel), feeds it the inputs it declares -- synthetic batches
through ``tf.data`` with prefetch, shaped and ranged by the case's ``inputs``, or the case's own
``input_fn`` pipeline (``tasks.runner.inputs``) -- and times one kind of step, the case's ``case_mode``:

* ``train``: forward + backward + SGD update of a Keras model; the synthetic loss is the mean square of
  its floating outputs (integer/string outputs stay out). A SavedModel has no training function (its
  signatures are inference functions): refused with an error that says to use ``infer``.
* ``infer``: the forward pass, Keras ``model(x, training=False)`` or the SavedModel's ``signature``
  (default ``serving_default``); a step is one batch and ends when all its outputs are on the host, so
  the step times ARE per-batch latencies (history, paired gate and GX thresholds apply unchanged), and
  profile mode adds ``latency_ms``: p50/p90/p99/max (ms) and throughput (examples/s) of the measured
  batches.
* ``tflite``: the model converted with the case's ``quantization`` and one TFLite interpreter invocation
  per batch (``tasks.runner.tflite``); latency as for ``infer``, ``tflite`` records sizes before/after and
  the agreement with TF; no profiler window (``profile_absent_reason``).

``train`` and ``infer`` run with the case's ``precision``, ``xla`` and ``strategy``
(``tasks.runner.execution``: the loaded model rebuilt in the mixed-precision policy, the step compiled
with XLA, the model built and run under ``MirroredStrategy``; ``PERFWATCH_CPU_LOGICAL_DEVICES`` splits
the CPU before TF starts); ``execution`` in the result says what was built (compute dtypes, replicas,
devices, optimizer). In profile mode the measured steps are sampled by ``tasks.runner.telemetry`` every
``telemetry_interval_ms`` (``telemetry``: host CPU and RSS, per-GPU NVML series where NVML answers).

Every result (warm-up, profile, paired) records ``case_mode``, ``inputs`` (per input name: the shape
fed with the batch dimension, dtype, min, max), ``input_source`` (``synthetic`` or the ``input_fn``),
``safe_mode`` and ``signature``. Three runner modes:

* ``warmup``: run steps until step time is steady (``tasks.runner.steady.SteadyDetector``), report
  the cold first step (tracing/compilation) and how many warm-up steps steady state took.
* ``profile``: cold step + ``warmup_steps`` steps, then ``measured_steps`` steps timed with the
  profiler OFF, then ``profiled_steps`` steps under ``tf.profiler.experimental`` with every step
  wrapped in ``Trace(case_mode, step_num=i, _r=1)`` (without ``_r=1`` xprof sees no step markers).
* ``paired``: the A/B release gate. Loads the baseline version (A, ``baseline_model_path``) and the
  candidate (B, ``model_path``) in this ONE process, each with its own ``tf.data`` iterator,
  optimizer and compiled train step (which of the two is set up first is drawn per gate, ``first_built``);
  runs each one's cold step and ``warmup_steps`` warm-up steps,
  then ``blocks`` block pairs of ``block_steps`` steps each in ABBA order (pair i is A then B for
  even i, B then A for odd i: A B B A A B ...), so process-level drift cancels within a pair and a
  linear trend cancels over each ABBA quadruple. Cost: ``2 * blocks * block_steps`` timed steps
  (plus two warm-ups): about twice the measured steps of a normal run when
  ``blocks * block_steps`` is about ``measured_steps``. With ``round_pairs`` set, the pairs are
  measured in rounds and the *parent* decides after each one whether to go on (a sequential gate,
  ``tasks.runner.session``): the runner writes the round as one line ``ROUND_PREFIX + JSON`` on
  stdout (``{"round", "pairs", "blocks": [the round's block pairs], "host_load", "wall_s",
  "final"}``) and reads one line on stdin, ``more`` or ``stop``; it stops by itself once ``blocks``
  pairs are done (``final``: true, nothing is read) and treats a closed stdin as ``stop``. The
  decision never lives here: the runner only measures.

Host load (:class:`HostLoad`, psutil): during the measured steps (profile mode) and during the paired
phase (every round and all of it), the 1-minute load average at start and end; the CPU time the
other processes took, ``busy CPU time of the host (user + nice + system + irq + softirq, from
/proc/stat) - this process's CPU time``, as a share of ``wall x logical CPUs``; the steal time
(hypervisor) as the same share; and, where NVML answers, the most processes other than this one
seen on any GPU (the key is absent without NVML, never 0 by default). The load average counts this
process's own threads too, so it is recorded, not judged here (``tasks.analysis.calibration`` judges).

Every step is timed by our timer (``time.perf_counter``) and ends only when its loss is on the
host (``.numpy()``), so asynchronous dispatch cannot make a step look short. The result is
written as JSON to ``<out_dir>/result.json`` — also on failure, with the error, and the process
then exits 1.
"""

from __future__ import annotations

import json
import os
import random
import resource
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tasks.runner import execution, progress
from tasks.runner import inputs as inputs_mod
from tasks.runner import tflite as tflite_mod
from tasks.runner.spec import MORE, ROUND_PREFIX, STOP, RunnerError, RunnerSpec
from tasks.runner.steady import SteadyDetector
from tasks.runner.telemetry import Sampler


def _gpu_other_processes() -> int | None:
    """Processes other than this one on any GPU (compute and graphics, NVML), the most on one device;
    ``None`` when NVML is not there (no driver, no pynvml, or it fails)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - pynvml raises NVMLError subclasses (no driver, no GPU)
        return None
    try:
        me, most = os.getpid(), 0
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
            pids |= {p.pid for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)}
            most = max(most, len(pids - {me}))
        return most
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


class HostLoad:
    """How busy the host was over a window of this process's life (module docstring), from psutil.

    ``start()`` takes the first reading, ``result()`` the second and returns a JSON-safe dict:
    ``wall_s``; ``cpus`` (logical); ``load1_start``, ``load1_end`` (1-min load average);
    ``other_cpu_s`` (CPU seconds other processes used) and ``other_cpu_share`` (that over ``wall_s x
    cpus``, 0..1); ``steal_share`` (likewise, steal time); ``own_cpu_share`` (this process);
    ``gpu_other_processes`` only where NVML answers (the most seen at start or end). Without psutil,
    ``{"error": ...}``.
    """

    def __init__(self) -> None:
        self._t0 = self._sys0 = self._me0 = None
        self._load0 = 0.0
        self._gpu0: int | None = None

    def start(self) -> HostLoad:
        try:
            import psutil
        except ImportError:
            return self
        self._psutil = psutil
        self._t0 = time.perf_counter()
        self._sys0, self._me0 = psutil.cpu_times(), psutil.Process().cpu_times()
        self._load0 = os.getloadavg()[0]
        self._gpu0 = _gpu_other_processes()
        return self

    def result(self) -> dict[str, Any]:
        if self._t0 is None:
            return {"error": "psutil is not installed in the runner's interpreter: host load not recorded"}
        psutil = self._psutil
        wall = max(time.perf_counter() - self._t0, 1e-9)
        sys1, me1 = psutil.cpu_times(), psutil.Process().cpu_times()
        cpus = psutil.cpu_count() or 1

        def busy(t) -> float:
            return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))

        own = (me1.user + me1.system) - (self._me0.user + self._me0.system)
        other = max(0.0, busy(sys1) - busy(self._sys0) - own)
        steal = max(0.0, getattr(sys1, "steal", 0.0) - getattr(self._sys0, "steal", 0.0))
        out: dict[str, Any] = {
            "wall_s": wall,
            "cpus": cpus,
            "load1_start": self._load0,
            "load1_end": os.getloadavg()[0],
            "other_cpu_s": other,
            "other_cpu_share": min(1.0, other / (wall * cpus)),
            "steal_share": min(1.0, steal / (wall * cpus)),
            "own_cpu_share": min(1.0, max(0.0, own) / (wall * cpus)),
        }
        gpu = [g for g in (self._gpu0, _gpu_other_processes()) if g is not None]
        if gpu:
            out["gpu_other_processes"] = max(gpu)
        return out


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@dataclass
class Loaded:
    """A loaded model: ``kind`` (``keras`` or ``saved_model``), ``obj``, its inputs ``sig``, ``variables``
    (trainable), ``forward(inputs, training)`` (inputs in ``sig``'s structure), and ``no_training``: why it
    cannot train (None: it can)."""

    kind: str
    obj: Any
    sig: inputs_mod.Signature
    variables: list[Any]
    forward: Callable[[Any, bool], Any]
    no_training: str | None = None


def _load(model_path: str, spec: RunnerSpec) -> Loaded:
    """Load a ``.keras`` file (with ``spec.safe_mode``) or a SavedModel dir (its ``spec.signature``).

    Raises:
        RunnerError: nothing loadable there, the load failed (names the file; a ``safe_mode`` refusal says
            how a trusted model is loaded), or the SavedModel has no signature ``spec.signature`` (lists
            those it has).
    """
    import keras
    import tensorflow as tf

    p = Path(model_path)
    files = [p] if p.is_file() else sorted(p.glob("*.keras"))
    if files:
        try:
            model = keras.models.load_model(files[0], compile=False, safe_mode=spec.safe_mode)
        except Exception as e:  # noqa: BLE001 - re-raised with the file named
            hint = (
                (
                    "; if you trust this model's code (e.g. a Lambda layer), set safe_mode: false in its case "
                    "(perfwatch run --no-safe-mode)"
                )
                if spec.safe_mode and "safe_mode" in str(e)
                else ""
            )
            raise RunnerError(f"cannot load Keras model {files[0]}: {type(e).__name__}: {e}{hint}") from e
        return Loaded(
            "keras",
            model,
            inputs_mod.keras_signature(model),
            list(model.trainable_variables),
            lambda x, training: model(x, training=training),
        )
    if (p / "saved_model.pb").exists():
        try:
            loaded = tf.saved_model.load(str(p))
        except Exception as e:  # noqa: BLE001
            raise RunnerError(f"cannot load SavedModel {p}: {type(e).__name__}: {e}") from e
        if spec.signature not in loaded.signatures:
            raise RunnerError(
                f"SavedModel {p} has no signature {spec.signature!r}; its signatures are {sorted(loaded.signatures)}"
            )
        fn = loaded.signatures[spec.signature]
        why = (
            f"SavedModel {p} has no training function: its signatures {sorted(loaded.signatures)} are "
            "inference functions (model.export, tf.saved_model.save), and a gradient through one is not "
            "the model's training step; measure it with mode: infer (or bring the .keras model to time "
            "training)"
        )
        return Loaded(
            "saved_model",
            loaded,
            inputs_mod.function_signature(fn),
            list(fn.trainable_variables),
            lambda x, training: fn(**x),
            no_training=why,
        )
    raise RunnerError(f"no model at {model_path}: expected a *.keras file or a SavedModel (saved_model.pb)")


def _dataset(spec: RunnerSpec, sig: inputs_mod.Signature):
    """The batches the step pulls (``{input name: tensor}``) and the feeds they hold: the case's
    ``input_fn`` pipeline as it is, else 4 distinct synthetic batches cycled through ``tf.data`` with
    prefetch (``tasks.runner.inputs``)."""
    import tensorflow as tf

    if spec.input_fn:
        return inputs_mod.user_dataset(spec.input_fn, sig, spec.batch_size, spec.seed)
    feeds = inputs_mod.resolve(sig, spec.inputs, spec.batch_size)
    pool = 4  # distinct synthetic batches, cycled
    xs = inputs_mod.synthetic(feeds, spec.batch_size * pool, spec.seed)
    ds = (
        tf.data.Dataset.from_tensor_slices(xs)
        .repeat()
        .batch(spec.batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    return ds, feeds


def _synthetic_loss(outputs):
    """Mean square of every floating output, summed (a scalar float32): the step's cost is the model's
    forward + backward + update; the value itself means nothing. Integer, bool and string outputs (labels,
    argmax ids) are left out.

    Raises:
        RunnerError: the model has no floating output.
    """
    import tensorflow as tf

    floats = [o for o in tf.nest.flatten(outputs) if o.dtype.is_floating]
    if not floats:
        raise RunnerError(
            f"the model has no floating output to build a synthetic training loss from (outputs: "
            f"{[o.dtype.name for o in tf.nest.flatten(outputs)]}); measure it with mode: infer"
        )
    return tf.add_n([tf.reduce_mean(tf.square(tf.cast(o, tf.float32))) for o in floats])


@dataclass
class Step:
    """One timed step: ``step()`` runs it and returns its time in ms (our timer, ends when its result is on
    the host); ``inputs``: the feeds it takes (input name -> ``{"shape", "dtype", "min", "max"}``, batch
    dimension first); ``source``: ``synthetic`` or the ``input_fn`` reference."""

    run: Callable[[], float]
    inputs: dict[str, dict[str, Any]]
    source: str
    extra: dict[str, Any] = field(default_factory=dict)  # more for the result: execution, tflite

    def __call__(self) -> float:
        return self.run()


def _build_step(spec: RunnerSpec, model_path: str | None = None) -> Step:
    """The step of ``spec.case_mode`` for the model at ``model_path`` (default ``spec.model_path``), a
    ``tf.function`` pulling from its own tf.data iterator: ``train`` runs forward + backward + SGD update
    (synthetic loss of the floating outputs) and ends when the loss is on the host; ``infer`` runs the
    forward pass (Keras ``training=False``, or the SavedModel's ``signature``) and ends when every output
    is on the host.

    Raises:
        RunnerError: the model cannot be loaded or fed (``tasks.runner.inputs``), cannot train in ``train``
            mode (a SavedModel, no trainable variables: says to use ``infer``), or the mode is not here.
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(spec.seed)
    if spec.deterministic:
        tf.config.experimental.enable_op_determinism()
    model_path = model_path or spec.model_path
    if spec.case_mode == "tflite" and (spec.precision, spec.xla, spec.strategy) != ("fp32", False, "none"):
        raise RunnerError(
            f"mode tflite times the TFLite interpreter: precision {spec.precision}, xla {spec.xla}, "
            f"strategy {spec.strategy} do not apply (use quantization); give fp32, no xla, none"
        )
    ex = execution.Execution(spec.precision, spec.xla, spec.strategy)
    with ex.scope():  # the model's variables live on the strategy's devices
        m = _in_precision(_load(model_path, spec), ex, model_path)
    ds, feeds = _dataset(spec, m.sig)
    inputs = {f.name: f.record() for f in feeds}
    source = spec.input_fn or "synthetic"

    if spec.case_mode == "tflite":
        name = "model.tflite" if model_path == spec.model_path else "baseline.tflite"  # paired: A is the baseline
        lite = tflite_mod.build(
            model_path,
            m.obj if m.kind == "keras" else None,
            lambda b: m.forward(m.sig.pack(b), False),
            ds,
            spec.quantization,
            spec.signature,
            Path(spec.out_dir) / name,
        )
        return Step(lite.run, inputs, source, extra={"tflite": lite.record})
    ds = ex.distribute(ds)
    if spec.case_mode == "infer":
        infer_step = ex.step_function(lambda batch: m.forward(m.sig.pack(batch), False), ds, combine="concat")

        def step() -> float:
            t0 = time.perf_counter()
            tf.nest.map_structure(lambda t: t.numpy(), infer_step())  # the batch ends on the host
            return (time.perf_counter() - t0) * 1000.0

        return Step(step, inputs, source, extra={"execution": ex.describe()})

    if m.no_training:
        raise RunnerError(m.no_training)
    if not m.variables:
        raise RunnerError(
            f"model {model_path} has no trainable variables: nothing to train; measure it with mode: infer"
        )
    with ex.scope():
        optimizer = ex.optimizer(keras.optimizers.SGD(learning_rate=1e-4), m.variables)

    def compute(batch):  # one replica's step (all of it without a strategy); tasks.runner.execution
        with tf.GradientTape() as tape:
            loss = _synthetic_loss(m.forward(m.sig.pack(batch), True))
            scaled = ex.scaled(loss, optimizer)  # / replicas; x loss scale under mixed_float16
        grads = tape.gradient(scaled, m.variables)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, m.variables, strict=True) if g is not None])
        return loss

    train_step = ex.step_function(compute, ds)

    def step() -> float:
        t0 = time.perf_counter()
        loss = train_step()
        value = float(loss.numpy())  # sync: the step ends when its output is on the host
        elapsed = (time.perf_counter() - t0) * 1000.0
        if value != value:  # NaN loss means the step computed garbage
            raise RunnerError("training step produced a NaN loss")
        return elapsed

    return Step(step, inputs, source, extra={"execution": ex.describe()})


def _in_precision(m: Loaded, ex: execution.Execution, model_path: str) -> Loaded:
    """``m`` computing in ``ex``'s precision: a Keras model rebuilt in its dtype policy
    (``execution.with_precision``); a SavedModel only in fp32 (its graph fixes its dtypes).

    Raises:
        RunnerError: a SavedModel with a precision other than fp32, or the model cannot be rebuilt.
    """
    if m.kind != "keras":
        ex.check_graph_model(model_path)
        return m
    model = ex.prepare_model(m.obj)
    if model is m.obj:
        return m
    return replace(
        m,
        obj=model,
        sig=inputs_mod.keras_signature(model),
        variables=list(model.trainable_variables),
        forward=lambda x, training: model(x, training=training),
    )


def _device_peak_bytes() -> int | None:
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        return None
    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])


def _cold_step(step, model_path: str, case_mode: str = "train") -> float:
    """The first (tracing/compiling) step, its failure re-raised naming the model and the step kind."""
    try:
        return step()
    except RunnerError:
        raise
    except Exception as e:  # noqa: BLE001
        kind = "inference" if case_mode == "infer" else "training"
        raise RunnerError(f"{kind} step failed for model {model_path}: {type(e).__name__}: {e}") from e


def latency_summary(times_ms: list[float], batch_size: int) -> dict[str, float]:
    """Per-batch latency percentiles of ``times_ms`` (ms, our timer; numpy's linear interpolation):
    ``p50``, ``p90``, ``p99``, ``max``, and ``throughput_eps``: examples/s over all of them
    (``batch_size x len(times_ms) / total seconds``).

    Raises:
        RunnerError: ``times_ms`` is empty.
    """
    import numpy as np

    if not times_ms:
        raise RunnerError("no timed batches to summarise")
    t = np.asarray(times_ms, dtype=float)
    p50, p90, p99 = (float(x) for x in np.percentile(t, [50, 90, 99]))
    return {
        "p50": p50,
        "p90": p90,
        "p99": p99,
        "max": float(t.max()),
        "throughput_eps": batch_size * len(t) / (float(t.sum()) / 1000.0),
    }


def _case_record(spec: RunnerSpec, step: Step) -> dict[str, Any]:
    """What was measured, for the result: ``case_mode``, ``inputs`` (name -> shape with batch dimension,
    dtype, min, max), ``input_source`` (``synthetic`` or the ``input_fn``), ``safe_mode``, ``signature``."""
    return {
        "case_mode": spec.case_mode,
        "inputs": step.inputs,
        "input_source": step.source,
        "safe_mode": spec.safe_mode,
        "signature": spec.signature,
        **step.extra,
    }


def _run_paired(spec: RunnerSpec) -> dict[str, Any]:
    """Paired mode (module docstring): both models in this process, ABBA blocks; times in ms."""
    t_start = time.perf_counter()
    assert spec.baseline_model_path is not None  # checked by RunnerSpec
    # Which version is loaded, traced and warmed up first is drawn for each gate (``first_built``): in A/A
    # gates on the 2-core dev machine the version set up first ran about 1% faster (issue 12). A fixed order
    # would put that bias on every gate in one direction, unseen by A/A calibration; drawn per gate it is
    # zero-mean gate-to-gate spread, which the calibrated offset (``paired_offset_sd``) covers.
    first_built = random.SystemRandom().choice("AB")
    paths = {"A": spec.baseline_model_path, "B": spec.model_path}
    setup_order = sorted("AB", key=lambda w: w != first_built)
    steps = {who: _build_step(spec, paths[who]) for who in setup_order}
    cold = {who: _cold_step(steps[who], paths[who], spec.case_mode) for who in setup_order}
    warm = {}
    for who in setup_order:
        warm[who] = progress.run_steps(f"warm-up {who}", steps[who], spec.warmup_steps)
    step_a, step_b = steps["A"], steps["B"]
    cold_a, cold_b, warm_a, warm_b = cold["A"], cold["B"], warm["A"], warm["B"]
    blocks: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    per_round = spec.round_pairs or spec.blocks
    stopped_by = "budget"
    t_pairs = time.perf_counter()
    phase = HostLoad().start()
    while len(blocks) < spec.blocks:
        load = HostLoad().start()
        first = len(blocks)
        for i in range(first, min(spec.blocks, first + per_round)):
            order = "AB" if i % 2 == 0 else "BA"
            times: dict[str, list[float]] = {}
            for who in order:
                step = step_a if who == "A" else step_b
                times[who] = [step() for _ in range(spec.block_steps)]
            blocks.append({"pair": i, "order": order, "a_ms": times["A"], "b_ms": times["B"]})
        final = len(blocks) >= spec.blocks
        info = {
            "round": len(rounds),
            "pairs": len(blocks),
            "host_load": load.result(),
            "wall_s": time.perf_counter() - t_pairs,
            "final": final,
        }
        rounds.append(info)
        if spec.round_pairs is None:
            continue
        sys.stdout.write(ROUND_PREFIX + json.dumps({**info, "blocks": blocks[first:]}) + "\n")
        sys.stdout.flush()
        if final:
            break
        command = sys.stdin.readline().strip()
        if command in ("", STOP):  # "" is a closed stdin: the parent is gone
            stopped_by = "parent" if command else "stdin closed"
            break
        if command != MORE:
            raise RunnerError(
                f"paired mode: unknown command {command!r} on stdin after round {info['round']}; "
                f"expected {MORE!r} or {STOP!r}"
            )
    return {
        "mode": "paired",
        **_case_record(spec, step_b),
        "a_inputs": step_a.inputs,
        "batch_size": spec.batch_size,
        "seed": spec.seed,
        "deterministic": spec.deterministic,
        "baseline_model_path": spec.baseline_model_path,
        "candidate_model_path": spec.model_path,
        "cold_step_ms": cold_b,
        "a_cold_step_ms": cold_a,
        "b_cold_step_ms": cold_b,
        "first_built": first_built,
        "a_warmup_step_times_ms": warm_a,
        "b_warmup_step_times_ms": warm_b,
        "block_steps": spec.block_steps,
        "blocks": blocks,
        "max_blocks": spec.blocks,
        "round_pairs": spec.round_pairs,
        "rounds": rounds,
        "stopped_by": stopped_by,
        "host_load": phase.result(),
        "pairs_wall_s": time.perf_counter() - t_pairs,
        "timed_steps": 2 * len(blocks) * spec.block_steps,
        "peak_rss_bytes": _peak_rss_bytes(),
        "peak_device_bytes": _device_peak_bytes(),
        "wall_s": time.perf_counter() - t_start,
    }


def run(spec: RunnerSpec) -> dict[str, Any]:
    """Execute ``spec`` in this process and return the result dict (all times in ms, our timer).

    Paired mode returns ``blocks``: a list of ``{"pair", "order" ("AB"|"BA"), "a_ms", "b_ms"}``
    with the per-step times of the baseline (A) and candidate (B) block of each pair (as many as were
    measured: ``blocks`` of the spec at most), ``rounds`` (per round: pairs so far, ``host_load``,
    wall s since the first pair), ``stopped_by`` (``budget``, ``parent`` or ``stdin closed``),
    ``host_load`` over all pairs and ``timed_steps`` actually spent. Profile mode adds ``host_load``
    over the measured steps. Warm-up and profile modes add ``phases_s``: this process's wall time (s, our
    timer) in ``import_tf``, ``load_model`` (load, precision rebuild, inputs), ``cold_step`` (trace/compile
    and the first step), ``warmup_steps``, and in profile mode ``measured_steps`` and ``profiled_window``
    (profiler start, the profiled steps, the XSpace written). See :class:`HostLoad` for its keys.

    Raises:
        RunnerError: a model failed to load or its training step failed (names the model).
    """
    t_import = time.perf_counter()
    import tensorflow as tf

    execution.configure_devices()  # PERFWATCH_CPU_LOGICAL_DEVICES, before TF initialises
    progress.emit("start", text=f"{spec.mode}: TensorFlow imported; loading the model and tracing its first step")
    if spec.mode == "paired":
        return _run_paired(spec)
    t_start = time.perf_counter()
    # where this process's wall time went (s, our timer): what a case costs beyond its timed steps
    phases = {"import_tf": t_start - t_import}
    step = _build_step(spec)
    phases["load_model"] = time.perf_counter() - t_start
    cold_ms = _cold_step(step, spec.model_path, spec.case_mode)
    phases["cold_step"] = time.perf_counter() - t_start - phases["load_model"]
    result: dict[str, Any] = {
        "mode": spec.mode,
        **_case_record(spec, step),
        "cold_step_ms": cold_ms,
        "batch_size": spec.batch_size,
        "seed": spec.seed,
        "deterministic": spec.deterministic,
        "phases_s": phases,
    }
    if spec.mode == "warmup":
        det = SteadyDetector(window=spec.warmup_window, cv_max=spec.warmup_cv_max, max_steps=spec.warmup_max_steps)
        times = []
        t0 = time.perf_counter()
        ticker = progress.Ticker("warm-up", spec.warmup_max_steps, open_ended=True, cv_max=spec.warmup_cv_max)
        while True:
            times.append(step())
            over = det.add(times[-1])
            ticker.tick(times[-1], cv=det.result().final_cv)
            if over:
                break
        res = det.result()
        ticker.done(cv=res.final_cv)
        phases["warmup_steps"] = time.perf_counter() - t0
        result.update(
            warmup_step_times_ms=times,
            warmup_steps=res.warmup_steps,
            steady=res.steady,
            final_cv=res.final_cv,
            reason=res.reason,
        )
    else:
        t0 = time.perf_counter()
        warm = progress.run_steps("warm-up", step, spec.warmup_steps)
        phases["warmup_steps"] = time.perf_counter() - t0
        load = HostLoad().start()
        sampler = Sampler(spec.telemetry_interval_ms).start()  # device telemetry (tasks.runner.telemetry)
        counted = sampler.count(step)
        t0 = time.perf_counter()
        measured = progress.run_steps("measure", counted, spec.measured_steps)
        phases["measured_steps"] = time.perf_counter() - t0
        result["telemetry"] = sampler.stop()
        result["host_load"] = load.result()
        if spec.case_mode in ("infer", "tflite"):
            result["latency_ms"] = latency_summary(measured, spec.batch_size)
        logdir = Path(spec.out_dir) / "profile"
        logdir.mkdir(parents=True, exist_ok=True)
        profiled: list[float] = []
        t_prof = time.perf_counter()
        if spec.case_mode == "tflite":  # the TF profiler cannot see the TFLite interpreter: no window
            result["profile_absent_reason"] = tflite_mod.PROFILE_ABSENT_REASON
        else:
            progress.emit(
                "profile",
                n=0,
                of=spec.profiled_steps,
                text=f"{spec.profiled_steps} steps under the TF profiler, then writing the XSpace",
            )
            tf.profiler.experimental.start(str(logdir))
            try:
                for i in range(spec.profiled_steps):
                    with tf.profiler.experimental.Trace(spec.case_mode, step_num=i, _r=1):
                        profiled.append(step())
            finally:
                tf.profiler.experimental.stop()
        phases["profiled_window"] = time.perf_counter() - t_prof  # profiler start, steps, XSpace written
        result.update(
            warmup_step_times_ms=warm,
            measured_step_times_ms=measured,
            profiled_step_times_ms=profiled,
            profile_dir=str(logdir),
            profiled_window_s=phases["profiled_window"],
        )
    result.update(
        peak_rss_bytes=_peak_rss_bytes(), peak_device_bytes=_device_peak_bytes(), wall_s=time.perf_counter() - t_start
    )
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m tasks.runner SPEC.json``; writes ``<out_dir>/result.json``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m tasks.runner SPEC.json", file=sys.stderr)
        return 2
    spec = RunnerSpec.model_validate_json(Path(argv[0]).read_text())
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        xla_cache = execution.configure_xla_cache(spec.xla_cache_dir if spec.xla else None)  # before TF
        cached = len(os.listdir(xla_cache)) if xla_cache else None
        result = {"status": "ok", **run(spec)}
        if xla_cache:
            result["xla_cache"] = {
                "dir": xla_cache,
                "entries_before": cached,
                "entries_after": len(os.listdir(xla_cache)),
            }
        code = 0
    except Exception as e:  # noqa: BLE001 - every failure is reported in result.json
        result = {
            "status": "error",
            "error": f"{type(e).__name__}: {e}" if not isinstance(e, RunnerError) else str(e),
            "traceback": traceback.format_exc()[-4000:],
        }
        code = 1
    tmp = out / "result.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(out / "result.json")
    return code
