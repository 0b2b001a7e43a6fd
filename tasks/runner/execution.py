"""How a measured step executes: precision, XLA and distribution strategy (the runner's side of the
``Case`` fields ``precision``, ``xla`` and ``strategy``; TensorFlow runs here only).

* **precision** — ``fp32``, ``mixed_float16`` or ``mixed_bfloat16``: the Keras dtype policy the loaded
  model *computes* in. A loaded ``.keras`` model keeps the per-layer policy it was saved with (a global
  ``keras.config.set_dtype_policy`` does not reach it), so :func:`with_precision` rebuilds the model from
  its layers' configs with the policy replaced (``keras.models.clone_model``, recursively) and copies the
  weights: variables stay float32, layer ``compute_dtype`` becomes float16 / bfloat16. ``mixed_float16``
  trains through a ``keras.optimizers.LossScaleOptimizer`` (dynamic loss scaling, so small float16
  gradients do not underflow). A SavedModel's graph has its dtypes fixed: any precision but ``fp32`` is
  refused for it.
* **xla** — the step's computation is compiled with ``tf.function(jit_compile=True)``. The batch is pulled
  from its ``tf.data`` iterator *outside* the compiled part (``IteratorGetNext`` cannot be compiled).
  With ``RunnerSpec.xla_cache_dir`` (the warm-up and profiled-run stages give the case's
  ``<work_dir>/xla_cache``), XLA's persistent compilation cache (``TF_XLA_FLAGS
  --tf_xla_persistent_cache_directory``) keeps what the warm-up process compiled, so the profiled run and
  the paired gate of the same DAG run load it instead of compiling again (on the 2-core dev machine the
  demo model's XLA training cold step took 16.5-19.9 s on a quiet host, 5.6-8.1 s without XLA: ``bench/matrix.py``).
  The executable is the same, so step times are
  not changed by it; only the cold step is shorter (the warm-up's cold step, the one stored as the run's
  cold-start time, always starts from an empty cache unless the warm-up itself is retried).
* **strategy** — ``none`` (TF's default strategy, one device) or ``mirrored``:
  ``tf.distribute.MirroredStrategy`` over every visible GPU, else over every logical CPU device. The model
  and optimizer are built in the strategy's scope, the dataset is distributed (``batch_size`` is the
  *global* batch, split evenly over the replicas), each replica computes its part, the Keras optimizer
  all-reduces the gradients (sum), and the loss returned is the mean over replicas.
  On a CPU-only host, ``PERFWATCH_CPU_LOGICAL_DEVICES=N`` (read by :func:`configure_devices` before TF
  initialises its runtime) splits the CPU into N logical devices so the mirrored path is real there. A
  ``mirrored`` case that finds one device is refused (:func:`check_mirrored_devices`), never run as one
  replica under the mirrored name.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from tasks.runner.spec import RunnerError

#: environment variable: split the first physical CPU into this many logical devices (>= 1) before TF
#: initialises; unset: TF's default (one CPU device)
CPU_DEVICES_ENV = "PERFWATCH_CPU_LOGICAL_DEVICES"

#: Keras dtype policy name of each ``precision`` value
POLICIES = {"fp32": "float32", "mixed_float16": "mixed_float16", "mixed_bfloat16": "mixed_bfloat16"}


def configure_devices(environ: Mapping[str, str] | None = None) -> int | None:
    """Split the first physical CPU into ``PERFWATCH_CPU_LOGICAL_DEVICES`` logical devices.

    Must run before TensorFlow initialises its runtime (before the first op or device listing of
    logical devices); the runner calls it first thing. Returns the number of logical CPU devices made,
    or ``None`` when the variable is unset or empty (TF's default: one CPU device).

    Raises:
        RunnerError: the value is not an integer >= 1 (names the variable and the value), or TF's
            runtime was already initialised (TF's own message).
    """
    raw = (os.environ if environ is None else environ).get(CPU_DEVICES_ENV, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise RunnerError(f"{CPU_DEVICES_ENV}={raw!r}: expected a whole number of logical CPU devices >= 1")
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as e:
        raise RunnerError(f"{CPU_DEVICES_ENV}={n}: TensorFlow was already initialised: {e}") from e
    return n


#: the TF_XLA_FLAGS flag of XLA's persistent compilation cache (tensorflow/compiler/jit/flags.cc)
XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def configure_xla_cache(cache_dir: str | None, environ: dict[str, str] | None = None) -> str | None:
    """Point XLA's persistent compilation cache at ``cache_dir`` (created if absent) by adding
    ``--tf_xla_persistent_cache_directory=<cache_dir>`` to ``TF_XLA_FLAGS`` in ``environ`` (default: this
    process's environment), keeping any flags already there.

    Must run before TensorFlow reads its XLA flags (before ``import tensorflow``). Does nothing and
    returns ``None`` when ``cache_dir`` is ``None`` or ``TF_XLA_FLAGS`` already names a cache directory (the
    user's own choice wins). Returns the directory used.
    """
    env = os.environ if environ is None else environ
    flags = env.get("TF_XLA_FLAGS", "")
    if cache_dir is None or XLA_CACHE_FLAG in flags:
        return None
    os.makedirs(cache_dir, exist_ok=True)
    env["TF_XLA_FLAGS"] = f"{flags} {XLA_CACHE_FLAG}={cache_dir}".strip()
    return cache_dir


#: CUDA's JIT cache size, bytes: its documented maximum (CUDA_CACHE_MAXSIZE, 4 GiB; the default is 256 MiB, which
#: one large model's kernels for a new architecture can overflow, so every process would JIT them again)
CUDA_CACHE_MAXSIZE = 4 * 2**30


def configure_cuda_cache(environ: dict[str, str] | None = None) -> str:
    """Keep CUDA's JIT cache (PTX compiled for this GPU) across runner processes on this host: point
    ``CUDA_CACHE_PATH`` at ``<PERFWATCH_HOME>/cuda-cache`` (default ``~/.perfwatch/cuda-cache``, created) and
    ``CUDA_CACHE_MAXSIZE`` at :data:`CUDA_CACHE_MAXSIZE` in ``environ`` (default this process's), so a fresh
    process on a GPU newer than the wheel's prebuilt kernels (Hopper and later) does not JIT-compile every kernel
    again in its cold step. Must run before CUDA initialises (before ``import tensorflow``). A value the user set
    wins. Returns the cache directory (the user's, or ours)."""
    env = os.environ if environ is None else environ
    if "CUDA_CACHE_PATH" not in env:
        home = env.get("PERFWATCH_HOME") or os.path.join(os.path.expanduser("~"), ".perfwatch")
        env["CUDA_CACHE_PATH"] = os.path.join(home, "cuda-cache")
    env.setdefault("CUDA_CACHE_MAXSIZE", str(CUDA_CACHE_MAXSIZE))
    os.makedirs(env["CUDA_CACHE_PATH"], exist_ok=True)
    return env["CUDA_CACHE_PATH"]


def cache_entries(path: str) -> int:
    """Files under ``path`` (CUDA's cache is a tree of files), 0 for a missing directory."""
    return sum(len(files) for _, _, files in os.walk(path))


def with_precision(model: Any, precision: str) -> Any:
    """``model`` (a loaded Keras model) computing in ``precision``'s dtype policy.

    Returns ``model`` itself when every layer already has that policy, else a rebuilt model: each layer
    re-created from its config with ``dtype`` replaced (nested models included), the weights copied
    (float32 variables; ``get_weights``/``set_weights``). Input layers keep their dtypes.

    Raises:
        RunnerError: ``precision`` is unknown, or the model cannot be rebuilt from its config (a
            subclassed model without ``get_config``: names the model and Keras's error).
    """
    import keras

    if precision not in POLICIES:
        raise RunnerError(f"precision {precision!r}: expected one of {sorted(POLICIES)}")
    policy = POLICIES[precision]
    layers = [la for la in _all_layers(model) if not isinstance(la, keras.layers.InputLayer)]
    if all(la.dtype_policy.name == policy for la in layers):
        return model

    def clone(layer: Any) -> Any:
        if isinstance(layer, keras.layers.InputLayer):
            return layer
        config = layer.get_config()
        if isinstance(layer, keras.layers.Layer):  # a keras.ops node (``x + attention(x)``) has no dtype policy:
            config = {**config, "dtype": policy}  # it computes in its inputs' dtype, so it is cloned as it is
        return layer.__class__.from_config(config)

    try:
        rebuilt = keras.models.clone_model(model, clone_function=clone, recursive=True)
        rebuilt.set_weights(model.get_weights())
    except Exception as e:  # noqa: BLE001 - re-raised naming the model and the precision
        raise RunnerError(
            f"cannot rebuild model {model.name!r} in precision {precision} ({policy}): {type(e).__name__}: {e}"
        ) from e
    return rebuilt


def _all_layers(model: Any) -> list[Any]:
    out = []
    for layer in getattr(model, "layers", []):
        out.append(layer)
        if hasattr(layer, "layers"):
            out.extend(_all_layers(layer))
    return out


def check_mirrored_devices(devices: list[str]) -> None:
    """Refuse ``strategy mirrored`` over fewer than two ``devices`` (TF logical device names): one replica is
    no mirroring, and its run would carry the case's ``mirrored`` name while it measures one device.

    Raises:
        RunnerError: one device or none (names it and how to get more).
    """
    if len(devices) < 2:
        raise RunnerError(
            f"strategy mirrored found {len(devices)} device ({', '.join(devices) or 'none'}): one replica is not "
            f"mirrored. Make several GPUs visible, or on a CPU host set {CPU_DEVICES_ENV}=N (N >= 2 logical CPU "
            "devices), or plan the case with strategy none"
        )


class Execution:
    """The execution options of one runner process (module docstring), applied in this order::

        ex = Execution(precision, xla, strategy)
        with ex.scope():                       # model and optimizer variables live on ex's devices
            model = ex.prepare_model(loaded)   # precision
            opt = ex.optimizer(keras.optimizers.SGD(1e-4), model.trainable_variables)
        step = ex.step_function(compute, ex.distribute(dataset))   # XLA, strategy
        loss = step()                          # one step; a scalar tensor

    ``compute(batch) -> loss`` runs once per replica on its slice of the batch; it must take gradients
    of ``ex.scaled(loss, opt)`` (the loss-scaled loss under ``mixed_float16``, the loss divided by the
    replica count, so the optimizer's all-reduced sum is a mean) and apply them with ``opt``.

    Attributes:
        precision, xla, strategy_name: the options as given.
        strategy: the ``tf.distribute.Strategy`` (TF's default one for ``none``).
        replicas: replicas in sync (1 for ``none``).
        devices: the devices the strategy mirrors over (``[]`` for ``none``: TF's placement).

    Raises:
        RunnerError: unknown option values, ``mirrored`` over one device (:func:`check_mirrored_devices`), or
            ``xla`` with ``mirrored`` over more than one device.
    """

    def __init__(self, precision: str = "fp32", xla: bool = False, strategy: str = "none") -> None:
        import tensorflow as tf

        if precision not in POLICIES:
            raise RunnerError(f"precision {precision!r}: expected one of {sorted(POLICIES)}")
        if strategy not in ("none", "mirrored"):
            raise RunnerError(f"strategy {strategy!r}: expected 'none' or 'mirrored'")
        self.precision, self.xla, self.strategy_name = precision, bool(xla), strategy
        self.devices: list[str] = []
        if strategy == "mirrored":
            gpus = tf.config.list_logical_devices("GPU")
            self.devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
            check_mirrored_devices(self.devices)
            self.strategy = tf.distribute.MirroredStrategy(devices=self.devices)
        else:
            self.strategy = tf.distribute.get_strategy()
        self.replicas = int(self.strategy.num_replicas_in_sync)
        self.compute_dtypes: list[str] | None = None  # set by prepare_model
        self.optimizer_class: str | None = None  # set by optimizer
        if self.xla and self.replicas > 1:
            # XLA compiles a step for one device: a mirrored step reaching variables on several devices fails
            # ("Trying to access resource ... located in device ... from device ..."); Keras turns XLA off
            # under tf.distribute for the same reason.
            raise RunnerError(
                f"xla with strategy mirrored over {self.replicas} devices ({', '.join(self.devices)}) "
                "is not supported: XLA compiles a step for one device. Exclude this combination "
                "from the matrix, or run mirrored without xla"
            )

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """The strategy's scope: build the model and the optimizer inside it."""
        scope: contextlib.AbstractContextManager[Any] = self.strategy.scope()
        return scope

    def prepare_model(self, model: Any) -> Any:
        """``model`` computing in this precision (:func:`with_precision`); records the compute dtypes its
        layers now have (``compute_dtypes``, e.g. ``["bfloat16"]``)."""
        import keras

        model = with_precision(model, self.precision)
        self.compute_dtypes = sorted(
            {la.compute_dtype for la in _all_layers(model) if not isinstance(la, keras.layers.InputLayer)}
        )
        return model

    def check_graph_model(self, what: str) -> None:
        """Refuse a precision other than ``fp32`` for a model whose dtypes are fixed in its graph (a
        SavedModel), naming it.

        Raises:
            RunnerError: precision is not ``fp32``.
        """
        if self.precision != "fp32":
            raise RunnerError(
                f"precision {self.precision} needs a Keras model (.keras); {what} is a SavedModel "
                "whose graph fixes its dtypes: use precision fp32 for it"
            )

    def optimizer(self, inner: Any, variables: list[Any]) -> Any:
        """``inner`` (a Keras optimizer), wrapped in a ``LossScaleOptimizer`` for ``mixed_float16``, built for
        ``variables`` (inside :meth:`scope`, so its slots are mirrored like the model's variables)."""
        import keras

        opt = keras.optimizers.LossScaleOptimizer(inner) if self.precision == "mixed_float16" else inner
        opt.build(variables)
        self.optimizer_class = type(opt).__name__
        return opt

    def scaled(self, loss: Any, optimizer: Any | None = None) -> Any:
        """The loss to take gradients of: divided by the replica count, then loss-scaled when ``optimizer``
        is a ``LossScaleOptimizer`` (its ``apply_gradients`` unscales)."""
        import keras

        loss = loss / self.replicas if self.replicas > 1 else loss
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            return optimizer.scale_loss(loss)
        return loss

    def distribute(self, dataset: Any) -> Any:
        """``dataset`` (global batches) split over the replicas (unchanged for ``none``)."""
        if self.strategy_name == "mirrored":
            return self.strategy.experimental_distribute_dataset(dataset)
        return dataset

    def step_function(self, compute: Callable[[Any], Any], dataset: Any, combine: str = "mean") -> Callable[[], Any]:
        """A function running one step: pull the next batch from ``dataset`` (made with :meth:`distribute`),
        run ``compute`` on it (XLA-compiled with ``xla``; once per replica under ``mirrored``) and return
        ``(its result, the batch's shapes)``. Under ``mirrored`` the replicas' results are combined:
        ``combine="mean"`` (a scalar loss: the mean over replicas) or ``"concat"`` (outputs: every replica's
        part, gathered along the batch). The shapes have the batch's structure, each an int32 tensor
        ``[replicas, rank]``: the shape of each replica's part (one row without a strategy), computed in the
        same graph call, so what was fed is known per step (``tasks.runner.measure.FedLog``).

        Raises:
            RunnerError: ``combine`` is neither ``mean`` nor ``concat``.
        """
        import tensorflow as tf

        if combine not in ("mean", "concat"):
            raise RunnerError(f"combine {combine!r}: expected 'mean' or 'concat'")
        strategy, mirrored = self.strategy, self.strategy_name == "mirrored"

        def on_batch(batch: Any) -> Any:  # as Keras's trainer does: XLA compiles the cross-replica step
            if not mirrored:
                return compute(batch)
            per_replica = strategy.run(compute, args=(batch,))
            if combine == "concat":
                return tf.nest.map_structure(lambda v: strategy.gather(v, axis=0), per_replica)
            return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

        body = tf.function(on_batch, jit_compile=True) if self.xla else on_batch
        iterator = iter(dataset)

        def shapes(t: Any) -> Any:  # [replicas, rank]: each replica's part of the batch
            return tf.stack([tf.shape(part) for part in strategy.experimental_local_results(t)])

        def step() -> Any:
            batch = next(iterator)
            return body(batch), tf.nest.map_structure(shapes, batch)

        traced: Callable[[], Any] = tf.function(step)  # called, not a decorator: TensorFlow ships no types
        return traced

    def describe(self) -> dict[str, Any]:
        """The options as recorded in the runner's result: ``precision``, ``policy`` (Keras name), ``xla``,
        ``strategy``, ``replicas``, ``devices``, and what was actually built: ``compute_dtypes`` (of the
        model's layers; None for a SavedModel) and ``optimizer`` (class name; None for inference)."""
        return {
            "precision": self.precision,
            "policy": POLICIES[self.precision],
            "xla": self.xla,
            "strategy": self.strategy_name,
            "replicas": self.replicas,
            "devices": self.devices,
            "compute_dtypes": self.compute_dtypes,
            "optimizer": self.optimizer_class,
        }
