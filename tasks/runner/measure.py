"""What every measuring mode shares: loading the model, building its timed step, host load and memory.

A step (:func:`build_step`) is the case's ``case_mode`` for one model: ``train`` (forward + backward + SGD
update of a Keras model, the synthetic loss the mean square of its floating outputs), ``infer`` (the forward
pass, Keras ``training=False`` or the SavedModel's ``signature``), or ``tflite`` (one TFLite interpreter
invocation, ``tasks.runner.tflite``), with the case's ``precision``, ``xla`` and ``strategy``
(``tasks.runner.execution``). Every step is timed by our timer (``time.perf_counter``) and ends only when its
output is on the host (``.numpy()``), so asynchronous dispatch cannot make a step look short. After the timer,
each step records what it was fed and whether it compiled (:class:`FedLog`: the batch's shapes come back from the
same graph call); a batch of fewer examples than ``batch_size`` fails the run unless the case allows it.

Host load (:class:`HostLoad`, psutil): the 1-minute load average at start and end of a window; the CPU time
the other processes took, ``busy CPU time of the host (user + nice + system + irq + softirq, from /proc/stat) -
this process's CPU time``, as a share of ``wall x logical CPUs`` (of the CPUs this process may run on
when its affinity is a subset: ``taskset -c 0`` counts CPU 0 only); the steal time (hypervisor) as the same
share; and, where NVML answers, the most processes other than this one seen on one of this process's GPUs
(``CUDA_VISIBLE_DEVICES``'s; the key is absent without NVML or a visible GPU, never 0 by default). The load
average counts this process's own threads too, so it is recorded, not judged here
(``tasks.analysis.calibration`` judges).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tasks.runner import cpus as cpus_mod
from tasks.runner import execution
from tasks.runner import gpus as gpus_mod
from tasks.runner import inputs as inputs_mod
from tasks.runner import tflite as tflite_mod
from tasks.runner.spec import RunnerError, RunnerSpec


def gpu_other_processes() -> dict[str, Any] | None:
    """The processes other than this one on this process's GPUs (``tasks.runner.gpus``: only the GPUs
    ``CUDA_VISIBLE_DEVICES`` gives it, none for a ``cpu`` case; this process told apart by PID or, where NVML
    lists host PIDs as in many containers, by its CUDA context): ``{"most": N, "own": "pid"|"context"|"none"}``
    (``tasks.runner.gpus.other_processes``); ``None`` when NVML is not there (no driver, no pynvml, or it fails)
    or this process has no GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - pynvml raises NVMLError subclasses (no driver, no GPU)
        return None
    try:
        visible, _ = gpus_mod.visible_gpus(pynvml)
        return gpus_mod.other_processes(pynvml, visible)
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
    ``wall_s``; ``cpus`` (logical CPUs this process may run on: the host's, or its affinity set's when pinned,
    e.g. 1 under ``taskset -c 0``); the CPU set (``tasks.runner.cpus.cpu_facts``: ``cpu_affinity`` "0-1",
    ``cpu_affinity_count``, ``cgroup_cpu_quota``, ``cpu_count_usable``) and TF's thread settings
    (``tasks.runner.cpus.thread_settings``: ``tf_intra_op_configured``, ...); ``load1_start``, ``load1_end``
    (1-min load average); ``other_cpu_s`` (CPU seconds other processes used on those CPUs) and
    ``other_cpu_share`` (that over ``wall_s x cpus``, 0..1); ``steal_share`` (likewise, steal time);
    ``own_cpu_share`` (this process);
    ``gpu_other_processes`` only where NVML answers and this process has GPUs (the most seen on one of them at
    start or end) with ``gpu_own_process``, how this process was told apart (:func:`gpu_other_processes`).
    Without psutil, ``{"error": ...}``.
    """

    def __init__(self) -> None:
        self._t0: float | None = None
        self._sys0: Any = None  # psutil's cpu_times records
        self._me0: Any = None
        self._load0 = 0.0
        self._gpu0: dict[str, Any] | None = None
        self._cpu_set: dict[str, Any] = {}  # tasks.runner.cpus.cpu_facts and thread_settings at start
        self._pinned: list[int] = []  # the affinity set when it is a strict subset of the host's CPUs
        self._per0: list[Any] = []
        self._paused = False
        # what the windows before the current one added up: wall s, and busy, own and steal CPU s
        self._done = {"wall": 0.0, "busy": 0.0, "own": 0.0, "steal": 0.0}
        self._cpus = 1

    def start(self) -> HostLoad:
        try:
            import psutil
        except ImportError:
            return self
        self._psutil = psutil
        self._cpu_set = {**cpus_mod.cpu_facts(psutil.cpu_count()), **cpus_mod.thread_settings()}
        allowed = cpus_mod.affinity() or []
        n = len(psutil.cpu_times(percpu=True))
        self._pinned = allowed if 0 < len(allowed) < n and max(allowed) < n else []
        self._cpus = len(self._pinned) or psutil.cpu_count() or 1
        self._load0 = os.getloadavg()[0]
        self._gpu0 = gpu_other_processes()
        self._open()
        return self

    def _open(self) -> None:
        psutil = self._psutil
        self._t0 = time.perf_counter()
        self._per0 = psutil.cpu_times(percpu=True)
        self._sys0, self._me0 = psutil.cpu_times(), psutil.Process().cpu_times()

    def _close(self) -> None:
        """Add the current window (since :meth:`_open`) to what is done."""
        psutil = self._psutil
        assert self._t0 is not None
        self._done["wall"] += max(time.perf_counter() - self._t0, 0.0)
        sys1, me1 = psutil.cpu_times(), psutil.Process().cpu_times()
        if self._pinned:  # only the CPUs this process may run on compete with it (taskset, a cpuset)
            per1 = psutil.cpu_times(percpu=True)
            sys0, sys1 = _sum_times([self._per0[i] for i in self._pinned]), _sum_times([per1[i] for i in self._pinned])
        else:
            sys0 = self._sys0

        def busy(t: Any) -> float:  # psutil's cpu_times record, or _sum_times'
            return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))

        self._done["busy"] += busy(sys1) - busy(sys0)
        self._done["own"] += (me1.user + me1.system) - (self._me0.user + self._me0.system)
        self._done["steal"] += max(0.0, getattr(sys1, "steal", 0.0) - getattr(sys0, "steal", 0.0))

    def pause(self) -> None:
        """Leave the window out until :meth:`resume`: a process that waits for its turn to measure
        (``tasks.runner.interleave``) is not measuring, and what another process does meanwhile is not load on
        its steps. A no-op when paused, or without psutil."""
        if self._t0 is not None and not self._paused:
            self._close()
            self._paused = True

    def resume(self) -> None:
        """Count the window again from now (after :meth:`pause`); a no-op when not paused."""
        if self._t0 is not None and self._paused:
            self._open()
            self._paused = False

    def result(self) -> dict[str, Any]:
        if self._t0 is None:
            return {"error": "psutil is not installed in the runner's interpreter: host load not recorded"}
        if not self._paused:
            self._close()
            self._paused = True
        done, cpus = self._done, self._cpus
        wall = max(done["wall"], 1e-9)
        own = done["own"]
        other = max(0.0, done["busy"] - own)
        out: dict[str, Any] = {
            "wall_s": wall,
            "cpus": cpus,
            **self._cpu_set,
            "load1_start": self._load0,
            "load1_end": os.getloadavg()[0],
            "other_cpu_s": other,
            "other_cpu_share": min(1.0, other / (wall * cpus)),
            "steal_share": min(1.0, done["steal"] / (wall * cpus)),
            "own_cpu_share": min(1.0, max(0.0, own) / (wall * cpus)),
        }
        gpu = [g for g in (self._gpu0, gpu_other_processes()) if g is not None]
        if gpu:
            out["gpu_other_processes"] = max(g["most"] for g in gpu)
            out["gpu_own_process"] = gpu[-1]["own"]
        return out


def _sum_times(rows: list[Any]) -> Any:
    """psutil per-CPU ``cpu_times`` rows summed field by field (a namespace with the same attributes)."""
    from types import SimpleNamespace

    return SimpleNamespace(**{f: sum(getattr(r, f, 0.0) for r in rows) for f in rows[0]._fields})


def rss_bytes() -> int | None:
    """This process's resident set now, bytes (``/proc/self/statm``'s resident pages x the page size); None where
    there is no ``/proc`` (not Linux)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
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


def load_model(model_path: str, spec: RunnerSpec) -> Loaded:
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


def _dataset(spec: RunnerSpec, sig: inputs_mod.Signature) -> tuple[Any, list[inputs_mod.Feed]]:
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


def _synthetic_loss(outputs: Any) -> Any:
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


class FedLog:
    """What each step of one model was fed, and whether it compiled, phase by phase (``Fed`` records).

    :meth:`add` takes one step's batch shapes as the step function returned them (input name -> an int array
    ``[replicas, rank]``, ``execution.Execution.step_function``) and whether its ``tf.function`` traced again
    (its ``experimental_get_tracing_count()`` rose). A step *compiled* when it retraced, or, with ``xla``, when
    its input shapes are ones this model's step had not run before in this process: XLA compiles one executable
    per input shapes (its compilation cache key), so a pipeline whose shapes change recompiles on every new
    shape, and that step's time is mostly compile time. :meth:`take` returns the phase's record
    (``tasks.runner.protocol.Fed``) and starts the next phase; shapes seen stay seen.

    Raises (from :meth:`add`):
        RunnerError: a batch of fewer examples than ``batch_size`` (a partial last batch of an ``input_fn``
            epoch) unless ``allow_partial`` is set (``Case.allow_partial_batches``), a larger one, or inputs
            whose batch dimensions differ (each names the step and the shapes).
    """

    def __init__(self, batch_size: int, *, xla: bool, allow_partial: bool, source: str) -> None:
        self.batch_size, self.xla, self.allow_partial, self.source = batch_size, xla, allow_partial, source
        self._seen: set[tuple[Any, ...]] = set()
        self._steps = 0  # steps fed in this process, all phases
        self._phase: list[tuple[tuple[Any, ...], dict[str, list[int]], int]] = []
        self._compiled: list[int] = []
        self._retraced: list[int] = []

    def add(self, shapes: dict[str, Any], retraced: bool) -> None:
        """Record one step (class docstring)."""
        import numpy as np

        per_input = {name: np.asarray(v, dtype=np.int64).reshape(len(v), -1) for name, v in shapes.items()}
        # the global batch: replicas' parts summed along the batch dimension, the other dimensions as fed
        fed = {n: [int(a[:, 0].sum()), *(int(x) for x in a[0, 1:])] if a.shape[1] else [] for n, a in per_input.items()}
        sizes = {n: f[0] for n, f in fed.items() if f}
        index = len(self._phase)
        if len(set(sizes.values())) > 1:
            raise RunnerError(
                f"step {self._steps} was fed inputs whose batch dimensions differ: {fed} (input name -> shape)"
            )
        examples = next(iter(sizes.values()), self.batch_size)
        if examples > self.batch_size:
            raise RunnerError(
                f"step {self._steps} was fed a batch of {examples} examples ({fed}), more than the case's "
                f"batch_size {self.batch_size}: {self.source} must yield batches of batch_size"
            )
        if examples < self.batch_size and not self.allow_partial:
            raise RunnerError(
                f"step {self._steps} was fed a batch of {examples} examples ({fed}), the case's batch_size is "
                f"{self.batch_size}: a partial batch (e.g. the last of an epoch of {self.source}) would make the "
                "step time and the throughput (batch_size / median) not what the case says. Batch with "
                "drop_remainder=True, or set allow_partial_batches: true in the case to measure them as fed"
            )
        key = tuple(sorted((n, tuple(map(tuple, a.tolist()))) for n, a in per_input.items()))
        if retraced or (self.xla and key not in self._seen):
            self._compiled.append(index)
        if retraced:
            self._retraced.append(index)
        self._seen.add(key)
        self._phase.append((key, fed, examples))
        self._steps += 1

    def take(self) -> dict[str, Any]:
        """The phase so far as a ``tasks.runner.protocol.Fed`` dict; the next phase starts empty."""
        distinct: dict[tuple[Any, ...], dict[str, Any]] = {}
        for i, (key, fed, examples) in enumerate(self._phase):
            d = distinct.setdefault(key, {"shapes": fed, "examples": examples, "steps": 0, "first_step": i})
            d["steps"] += 1
        out = {
            "steps": len(self._phase),
            "examples": sum(e for _, _, e in self._phase),
            "distinct": list(distinct.values()),
            "compiled_steps": self._compiled,
            "retraced_steps": self._retraced,
        }
        self._phase, self._compiled, self._retraced = [], [], []
        return out


@dataclass
class Step:
    """One timed step: ``step()`` runs it and returns its time in ms (our timer, ends when its result is on
    the host); ``inputs``: the feeds it takes (input name -> ``{"shape", "dtype", "min", "max"}``, batch
    dimension first); ``source``: ``synthetic`` or the ``input_fn`` reference; ``fed``: what each step was
    fed and which compiled (None: not recorded, a tflite step)."""

    run: Callable[[], float]
    inputs: dict[str, dict[str, Any]]
    source: str
    extra: dict[str, Any] = field(default_factory=dict)  # more for the result: execution, tflite
    fed: FedLog | None = None
    #: the offline scenario's loop, where the step allows one (infer): ``pipelined(n)`` runs n batches, each
    #: issued before the previous one's outputs are fetched, and returns per batch the interval between
    #: consecutive results (ms, our timer; they sum to the loop's wall time). None: batches back to back.
    pipelined: Callable[[int], list[float]] | None = None
    #: the outputs' agreement with the fp32 eager model, where the step computes another way (mixed precision,
    #: XLA): ``agree()`` gives ``tasks.runner.agreement.outputs_agreement``'s record; None: nothing to compare
    agree: Callable[[], dict[str, Any]] | None = None

    def __call__(self) -> float:
        return self.run()

    def take_fed(self) -> dict[str, Any] | None:
        """The phase's ``Fed`` record so far (:meth:`FedLog.take`); None when not recorded."""
        return None if self.fed is None else self.fed.take()


def _traced(fn: Any) -> Callable[[], bool]:
    """A check that says whether the ``tf.function`` ``fn`` traced again since the last check (its
    ``experimental_get_tracing_count()`` rose; the first check counts the first trace as not a retrace)."""
    last = [None]

    def check() -> bool:
        n = fn.experimental_get_tracing_count()
        rose = last[0] is not None and n > last[0]
        last[0] = n
        return rose

    return check


def build_step(spec: RunnerSpec, model_path: str | None = None) -> Step:
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
        m = _in_precision(load_model(model_path, spec), ex, model_path)
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
            spec.tflite_threads,
        )
        return Step(lite.run, inputs, source, extra={"tflite": lite.record})
    agree = _agreement_check(spec, m, ds, model_path)
    ds = ex.distribute(ds)
    fed = FedLog(spec.batch_size, xla=spec.xla, allow_partial=spec.allow_partial_batches, source=source)
    if spec.case_mode == "infer":
        infer_step = ex.step_function(lambda batch: m.forward(m.sig.pack(batch), False), ds, combine="concat")
        infer_traced = _traced(infer_step)

        def infer() -> float:
            t0 = time.perf_counter()
            out, shapes = infer_step()
            tf.nest.map_structure(lambda t: t.numpy(), out)  # the batch ends on the host
            elapsed = (time.perf_counter() - t0) * 1000.0
            fed.add({n: t.numpy() for n, t in shapes.items()}, infer_traced())  # after the timer
            return elapsed

        def pipelined(n: int) -> list[float]:
            intervals: list[float] = []
            last = time.perf_counter()
            pending = infer_step()
            for i in range(n):
                following = infer_step() if i + 1 < n else None  # issued before this one's result is fetched
                out, shapes = pending
                tf.nest.map_structure(lambda t: t.numpy(), out)
                now = time.perf_counter()
                intervals.append((now - last) * 1000.0)
                last = now
                fed.add({k: t.numpy() for k, t in shapes.items()}, infer_traced())
                pending = following
            return intervals

        return Step(
            infer, inputs, source, extra={"execution": ex.describe()}, fed=fed, pipelined=pipelined, agree=agree
        )

    if m.no_training:
        raise RunnerError(m.no_training)
    if not m.variables:
        raise RunnerError(
            f"model {model_path} has no trainable variables: nothing to train; measure it with mode: infer"
        )
    with ex.scope():
        optimizer = ex.optimizer(keras.optimizers.SGD(learning_rate=1e-4), m.variables)

    def compute(batch: Any) -> Any:  # one replica's step (all of it without a strategy); tasks.runner.execution
        with tf.GradientTape() as tape:
            loss = _synthetic_loss(m.forward(m.sig.pack(batch), True))
            scaled = ex.scaled(loss, optimizer)  # / replicas; x loss scale under mixed_float16
        grads = tape.gradient(scaled, m.variables)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, m.variables, strict=True) if g is not None])
        return loss

    train_step = ex.step_function(compute, ds)
    train_traced = _traced(train_step)

    def step() -> float:
        t0 = time.perf_counter()
        loss, shapes = train_step()
        value = float(loss.numpy())  # sync: the step ends when its output is on the host
        elapsed = (time.perf_counter() - t0) * 1000.0
        if value != value:  # NaN loss means the step computed garbage
            raise RunnerError("training step produced a NaN loss")
        fed.add({n: t.numpy() for n, t in shapes.items()}, train_traced())  # after the timer
        return elapsed

    return Step(step, inputs, source, extra={"execution": ex.describe()}, fed=fed, agree=agree)


def _agreement_check(spec: RunnerSpec, m: Loaded, ds: Any, model_path: str) -> Callable[[], dict[str, Any]] | None:
    """The step's agreement check (``Step.agree``, ``tasks.runner.agreement``): for a Keras model computed in
    mixed precision or under XLA without a distribution strategy, a function that loads the fp32 model from
    ``model_path``, gives it the weights ``m`` has then (a train case's steps updated them) and compares the two
    on the dataset's first ``AGREEMENT_BATCHES`` batches (a new iterator of ``ds``, taken then, so that nothing of
    the check runs before the cold step). None where the step computes the model as saved (fp32, no XLA), for a
    SavedModel (its graph is fixed) or under a strategy."""
    if m.kind != "keras" or spec.strategy != "none" or (spec.precision == "fp32" and not spec.xla):
        return None
    import tensorflow as tf

    from tasks.runner.agreement import AGREEMENT_BATCHES, outputs_agreement

    label = ", ".join([spec.precision] + (["XLA"] if spec.xla else ["eager"]))

    def agree() -> dict[str, Any]:
        batches = [m.sig.pack(b) for b in ds.take(AGREEMENT_BATCHES)]
        ref = load_model(model_path, spec) if spec.precision != "fp32" else m
        if ref is not m:
            ref.obj.set_weights(m.obj.get_weights())

        def forward(x: Any) -> Any:
            return m.forward(x, False)

        candidate = tf.function(forward, jit_compile=spec.xla, autograph=False)
        return outputs_agreement(
            lambda x: ref.forward(x, False),
            candidate,
            batches,
            reference_label="fp32, eager",
            candidate_label=label,
        )

    return agree


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


def _logical_gpus(tf: Any) -> list[str]:
    """TF's logical GPU devices in this process (``GPU:0``...): none for a cpu case, whose runner hides the GPUs
    with ``tf.config.set_visible_devices([], "GPU")`` while ``list_physical_devices`` still shows them."""
    return [d.name.split("device:", 1)[-1] for d in tf.config.list_logical_devices("GPU")]


def reset_device_peak() -> None:
    """Start the device-memory peak afresh (``tf.config.experimental.reset_memory_stats`` on each logical GPU),
    before a measured window, so its peak is the window's own, not the cold step's autotuning scratch or an
    earlier phase's. Nothing on a host or case without GPUs."""
    import tensorflow as tf

    for dev in _logical_gpus(tf):
        tf.config.experimental.reset_memory_stats(dev)


def device_peak_bytes() -> int | None:
    """The peak of TF's GPU allocator since :func:`reset_device_peak` (or process start), bytes, summed over this
    process's logical GPUs (``tf.config.experimental.get_memory_info(dev)["peak"]``: the model's tensors and
    workspace, not the allocator's reservation that NVML's memory used shows); None without a logical GPU."""
    import tensorflow as tf

    devices = _logical_gpus(tf)
    if not devices:
        return None
    return sum(int(tf.config.experimental.get_memory_info(dev)["peak"]) for dev in devices)


def cold_step(step: Callable[[], float], model_path: str, case_mode: str = "train") -> float:
    """The first (tracing/compiling) step, its failure re-raised naming the model and the step kind."""
    try:
        return step()
    except RunnerError:
        raise
    except Exception as e:  # noqa: BLE001
        kind = "inference" if case_mode == "infer" else "training"
        raise RunnerError(f"{kind} step failed for model {model_path}: {type(e).__name__}: {e}") from e


def latency_summary(times_ms: list[float], batch_size: int, examples: int | None = None) -> dict[str, float]:
    """Per-batch latency percentiles of ``times_ms`` (ms, our timer; nearest rank ``x(ceil(n p))``,
    numpy's ``inverted_cdf``, the order statistic whose interval ``tasks.analysis.percentiles`` gives):
    ``p50``, ``p90``, ``p99``, ``max``, and ``throughput_eps``: examples/s over all of them
    (``examples / total seconds``; ``examples`` defaults to ``batch_size x len(times_ms)``: the examples fed
    where partial batches were allowed, ``Fed.examples``).

    Raises:
        RunnerError: ``times_ms`` is empty.
    """
    import numpy as np

    if not times_ms:
        raise RunnerError("no timed batches to summarise")
    t = np.asarray(times_ms, dtype=float)
    p50, p90, p99 = (float(x) for x in np.percentile(t, [50, 90, 99], method="inverted_cdf"))
    return {
        "p50": p50,
        "p90": p90,
        "p99": p99,
        "max": float(t.max()),
        "throughput_eps": (batch_size * len(t) if examples is None else examples) / (float(t.sum()) / 1000.0),
    }


def thread_record() -> dict[str, Any]:
    """TF's thread pools in this process: as configured (``tasks.runner.cpus.thread_settings``) and as TF
    reports them after the model was built (``tf_intra_op_reported`` / ``tf_inter_op_reported``,
    ``tf.config.threading.get_*_op_parallelism_threads``; 0: TF's default, ``tf_default_threads`` threads),
    with the CPU set they run on (``tasks.runner.cpus.cpu_facts``)."""
    import tensorflow as tf

    return {
        **cpus_mod.thread_settings(),
        "tf_intra_op_reported": int(tf.config.threading.get_intra_op_parallelism_threads()),
        "tf_inter_op_reported": int(tf.config.threading.get_inter_op_parallelism_threads()),
        **cpus_mod.cpu_facts(),
    }


def case_record(spec: RunnerSpec, step: Step) -> dict[str, Any]:
    """What was measured, for the result: ``case_mode``, ``inputs`` (name -> shape with batch dimension,
    dtype, min, max), ``input_source`` (``synthetic`` or the ``input_fn``), ``safe_mode``, ``signature``,
    ``threads`` (:func:`thread_record`)."""
    return {
        "case_mode": spec.case_mode,
        "inputs": step.inputs,
        "input_source": step.source,
        "safe_mode": spec.safe_mode,
        "signature": spec.signature,
        "threads": thread_record(),
        **step.extra,
    }


@dataclass
class Started:
    """A single-model mode after its first step: the ``step``, its ``cold_ms`` (ms), where the wall time went
    so far (``phases``: s in ``import_tf``, ``load_model``, ``cold_step``) and ``t_start`` (our timer, after the
    TensorFlow import)."""

    spec: RunnerSpec
    step: Step
    cold_ms: float
    phases: dict[str, float]
    t_start: float
    fed: dict[str, Any] = field(default_factory=dict)  # phase -> tasks.runner.protocol.Fed (cold first)

    def end_phase(self, phase: str) -> None:
        """Close ``phase``: what its steps were fed and which compiled (``Step.take_fed``) go into ``fed``."""
        if (rec := self.step.take_fed()) is not None:
            self.fed[phase] = rec

    def record(self, wait: dict[str, Any] | None = None) -> dict[str, Any]:
        """The result fields every single-model mode shares (:func:`case_record`, the cold step, the spec's
        batch size, seed and determinism, and ``fed`` per phase); ``wait``, the steps' run-queue wait record
        (``tasks.runner.counters.Recorder.wait_record``: unavailable or not, threads lost), goes into
        ``threads["wait"]``."""
        case = case_record(self.spec, self.step)
        if wait is not None:
            case["threads"] = {**case["threads"], "wait": wait}
        return {
            **case,
            "cold_step_ms": self.cold_ms,
            "batch_size": self.spec.batch_size,
            "seed": self.spec.seed,
            "deterministic": self.spec.deterministic,
            "fed": self.fed,
        }


def start(spec: RunnerSpec, import_s: float) -> Started:
    """Load the model of ``spec``, build its step and run the cold step (``import_s``: s the TF import took).

    Raises:
        RunnerError: see :func:`build_step` and :func:`cold_step`.
    """
    t_start = time.perf_counter()
    phases = {"import_tf": import_s}  # where this process's wall time went (s, our timer)
    step = build_step(spec)
    phases["load_model"] = time.perf_counter() - t_start
    cold_ms = cold_step(step, spec.model_path, spec.case_mode)
    phases["cold_step"] = time.perf_counter() - t_start - phases["load_model"]
    started = Started(spec, step, cold_ms, phases, t_start)
    started.end_phase("cold")
    return started
