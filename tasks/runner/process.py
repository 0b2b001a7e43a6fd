"""The runner process: ``python -m tasks.runner SPEC.json`` — the only code that runs TensorFlow.

One process per measurement (PerfZero's rule): a fresh interpreter loads the model, builds
synthetic inputs from its input signature through ``tf.data`` with prefetch, and runs
training steps. Three modes:

* ``warmup``: run steps until step time is steady (``tasks.runner.steady.SteadyDetector``), report
  the cold first step (tracing/compilation) and how many warm-up steps steady state took.
* ``profile``: cold step + ``warmup_steps`` steps, then ``measured_steps`` steps timed with the
  profiler OFF, then ``profiled_steps`` steps under ``tf.profiler.experimental`` with every step
  wrapped in ``Trace("train", step_num=i, _r=1)`` (without ``_r=1`` xprof sees no step markers).
* ``paired``: the A/B release gate. Loads the baseline version (A, ``baseline_model_path``) and the
  candidate (B, ``model_path``) in this ONE process, each with its own ``tf.data`` iterator,
  optimizer and compiled train step; runs each one's cold step and ``warmup_steps`` warm-up steps,
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
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tasks.runner.spec import MORE, ROUND_PREFIX, STOP, RunnerError, RunnerSpec
from tasks.runner.steady import SteadyDetector


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
        out: dict[str, Any] = {"wall_s": wall, "cpus": cpus, "load1_start": self._load0,
                               "load1_end": os.getloadavg()[0], "other_cpu_s": other,
                               "other_cpu_share": min(1.0, other / (wall * cpus)),
                               "steal_share": min(1.0, steal / (wall * cpus)),
                               "own_cpu_share": min(1.0, max(0.0, own) / (wall * cpus))}
        gpu = [g for g in (self._gpu0, _gpu_other_processes()) if g is not None]
        if gpu:
            out["gpu_other_processes"] = max(gpu)
        return out


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _load(model_path: str):
    """Load a ``.keras`` file or a SavedModel dir; return (step_fn_factory inputs)."""
    import keras
    import tensorflow as tf

    p = Path(model_path)
    files = [p] if p.is_file() else sorted(p.glob("*.keras"))
    if files:
        try:
            model = keras.models.load_model(files[0], compile=False)
        except Exception as e:  # noqa: BLE001 - re-raised with the file named
            raise RunnerError(f"cannot load Keras model {files[0]}: {type(e).__name__}: {e}") from e
        specs = [(tuple(t.shape), t.dtype) for t in model.inputs]
        return "keras", model, specs, model.trainable_variables, lambda xs: model(
            xs if len(xs) > 1 else xs[0], training=True
        )
    if (p / "saved_model.pb").exists():
        try:
            loaded = tf.saved_model.load(str(p))
            fn = loaded.signatures["serving_default"]
        except Exception as e:  # noqa: BLE001
            raise RunnerError(f"cannot load SavedModel {p}: {type(e).__name__}: {e}") from e
        names = sorted(fn.structured_input_signature[1])
        sig = fn.structured_input_signature[1]
        specs = [(tuple(sig[n].shape), sig[n].dtype.name) for n in names]
        variables = list(loaded.trainable_variables)
        return "saved_model", loaded, specs, variables, lambda xs: fn(**dict(zip(names, xs, strict=True)))
    raise RunnerError(f"no model at {model_path}: expected a *.keras file or a SavedModel (saved_model.pb)")


def _synthetic_batch(specs, batch_size: int, rng):
    import numpy as np

    xs = []
    for shape, dtype in specs:
        full = (batch_size, *[d if d is not None else 1 for d in shape[1:]])
        dt = np.dtype(str(dtype))
        if np.issubdtype(dt, np.integer):
            xs.append(rng.integers(0, 2, size=full).astype(dt))
        else:
            xs.append(rng.standard_normal(full).astype(dt))
    return xs


def _build_step(spec: RunnerSpec, model_path: str | None = None):
    """Return ``step()`` for the model at ``model_path`` (default ``spec.model_path``): one call runs
    one compiled training step (a ``tf.function`` pulling from its own tf.data iterator) and returns
    its time in ms, the loss on the host."""
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(spec.seed)
    if spec.deterministic:
        tf.config.experimental.enable_op_determinism()
    model_path = model_path or spec.model_path
    kind, obj, specs, variables, forward = _load(model_path)
    if not variables:
        raise RunnerError(f"model {model_path} has no trainable variables: nothing to train")
    rng = np.random.default_rng(spec.seed)
    pool = 4  # distinct synthetic batches, cycled
    xs = _synthetic_batch(specs, spec.batch_size * pool, rng)
    ds = (
        tf.data.Dataset.from_tensor_slices(tuple(xs))
        .repeat()
        .batch(spec.batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    iterator = iter(ds)
    optimizer = keras.optimizers.SGD(learning_rate=1e-4)

    @tf.function
    def train_step(it):
        batch = next(it)
        with tf.GradientTape() as tape:
            out = forward(list(batch))
            outs = tf.nest.flatten(out)
            # Synthetic objective: mean square of every float output (the step's cost is the
            # model's forward + backward + update; the loss value itself is meaningless).
            loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(o, tf.float32))) for o in outs])
        grads = tape.gradient(loss, variables)
        pairs = [(g, v) for g, v in zip(grads, variables, strict=True) if g is not None]
        if kind == "keras":
            optimizer.apply_gradients(pairs)
        else:
            for g, v in pairs:
                v.assign_sub(1e-4 * g)
        return loss

    def step() -> float:
        t0 = time.perf_counter()
        loss = train_step(iterator)
        value = float(loss.numpy())  # sync: the step ends when its output is on the host
        elapsed = (time.perf_counter() - t0) * 1000.0
        if value != value:  # NaN loss means the step computed garbage
            raise RunnerError("training step produced a NaN loss")
        return elapsed

    return step


def _device_peak_bytes() -> int | None:
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        return None
    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])


def _cold_step(step, model_path: str) -> float:
    """The first (tracing/compiling) step, its failure re-raised naming the model."""
    try:
        return step()
    except RunnerError:
        raise
    except Exception as e:  # noqa: BLE001
        raise RunnerError(f"training step failed for model {model_path}: {type(e).__name__}: {e}") from e


def _run_paired(spec: RunnerSpec) -> dict[str, Any]:
    """Paired mode (module docstring): both models in this process, ABBA blocks; times in ms."""
    t_start = time.perf_counter()
    assert spec.baseline_model_path is not None  # checked by RunnerSpec
    step_a = _build_step(spec, spec.baseline_model_path)
    step_b = _build_step(spec, spec.model_path)
    cold_a = _cold_step(step_a, spec.baseline_model_path)
    cold_b = _cold_step(step_b, spec.model_path)
    warm_a = [step_a() for _ in range(spec.warmup_steps)]
    warm_b = [step_b() for _ in range(spec.warmup_steps)]
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
        info = {"round": len(rounds), "pairs": len(blocks), "host_load": load.result(),
                "wall_s": time.perf_counter() - t_pairs, "final": final}
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
            raise RunnerError(f"paired mode: unknown command {command!r} on stdin after round {info['round']}; "
                              f"expected {MORE!r} or {STOP!r}")
    return {"mode": "paired", "batch_size": spec.batch_size, "seed": spec.seed,
            "deterministic": spec.deterministic, "baseline_model_path": spec.baseline_model_path,
            "candidate_model_path": spec.model_path, "cold_step_ms": cold_b, "a_cold_step_ms": cold_a,
            "b_cold_step_ms": cold_b, "a_warmup_step_times_ms": warm_a, "b_warmup_step_times_ms": warm_b,
            "block_steps": spec.block_steps, "blocks": blocks, "max_blocks": spec.blocks,
            "round_pairs": spec.round_pairs, "rounds": rounds, "stopped_by": stopped_by,
            "host_load": phase.result(), "pairs_wall_s": time.perf_counter() - t_pairs,
            "timed_steps": 2 * len(blocks) * spec.block_steps,
            "peak_rss_bytes": _peak_rss_bytes(), "peak_device_bytes": _device_peak_bytes(),
            "wall_s": time.perf_counter() - t_start}


def run(spec: RunnerSpec) -> dict[str, Any]:
    """Execute ``spec`` in this process and return the result dict (all times in ms, our timer).

    Paired mode returns ``blocks``: a list of ``{"pair", "order" ("AB"|"BA"), "a_ms", "b_ms"}``
    with the per-step times of the baseline (A) and candidate (B) block of each pair (as many as were
    measured: ``blocks`` of the spec at most), ``rounds`` (per round: pairs so far, ``host_load``,
    wall s since the first pair), ``stopped_by`` (``budget``, ``parent`` or ``stdin closed``),
    ``host_load`` over all pairs and ``timed_steps`` actually spent. Profile mode adds ``host_load``
    over the measured steps. See :class:`HostLoad` for its keys.

    Raises:
        RunnerError: a model failed to load or its training step failed (names the model).
    """
    import tensorflow as tf

    if spec.mode == "paired":
        return _run_paired(spec)
    t_start = time.perf_counter()
    step = _build_step(spec)
    cold_ms = _cold_step(step, spec.model_path)
    result: dict[str, Any] = {"mode": spec.mode, "cold_step_ms": cold_ms, "batch_size": spec.batch_size,
                              "seed": spec.seed, "deterministic": spec.deterministic}
    if spec.mode == "warmup":
        det = SteadyDetector(window=spec.warmup_window, cv_max=spec.warmup_cv_max,
                             max_steps=spec.warmup_max_steps)
        times = []
        while True:
            times.append(step())
            if det.add(times[-1]):
                break
        res = det.result()
        result.update(warmup_step_times_ms=times, warmup_steps=res.warmup_steps, steady=res.steady,
                      final_cv=res.final_cv, reason=res.reason)
    else:
        warm = [step() for _ in range(spec.warmup_steps)]
        load = HostLoad().start()
        measured = [step() for _ in range(spec.measured_steps)]
        result["host_load"] = load.result()
        logdir = Path(spec.out_dir) / "profile"
        logdir.mkdir(parents=True, exist_ok=True)
        profiled: list[float] = []
        t_prof = time.perf_counter()
        tf.profiler.experimental.start(str(logdir))
        try:
            for i in range(spec.profiled_steps):
                with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    profiled.append(step())
        finally:
            tf.profiler.experimental.stop()
        result.update(warmup_step_times_ms=warm, measured_step_times_ms=measured,
                      profiled_step_times_ms=profiled, profile_dir=str(logdir),
                      profiled_window_s=time.perf_counter() - t_prof)
    result.update(peak_rss_bytes=_peak_rss_bytes(), peak_device_bytes=_device_peak_bytes(),
                  wall_s=time.perf_counter() - t_start)
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
        result = {"status": "ok", **run(spec)}
        code = 0
    except Exception as e:  # noqa: BLE001 - every failure is reported in result.json
        result = {"status": "error", "error": f"{type(e).__name__}: {e}" if not isinstance(e, RunnerError)
                  else str(e), "traceback": traceback.format_exc()[-4000:]}
        code = 1
    tmp = out / "result.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(out / "result.json")
    return code
