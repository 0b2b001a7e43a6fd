"""``case_mode == "tflite"``: the model converted by ``tf.lite.TFLiteConverter`` and timed in the TFLite
interpreter (runner side; TensorFlow runs here only).

* **Conversion** (:func:`convert`): a ``.keras`` model through ``TFLiteConverter.from_keras_model``, a
  SavedModel through ``from_saved_model`` (its ``signature``), with the case's ``quantization``:
  ``none`` (float32), ``dynamic`` (dynamic-range: int8 weights, float activations;
  ``optimizations=[Optimize.DEFAULT]``) or ``int8`` (full integer: int8 weights and activations, ops
  restricted to ``TFLITE_BUILTINS_INT8``, activation ranges calibrated on a representative dataset of
  single examples drawn from the case's input spec, the very synthetic or ``input_fn`` batches the
  step is fed; the model keeps float32 inputs and outputs, quantized at its edges). A conversion failure
  is a :class:`~tasks.runner.spec.RunnerError` naming the op(s) the converter rejected.
* **Timing**: one step is one interpreter invocation on one batch (inputs set, ``invoke()``, every output
  copied out), timed by our timer (ms); the interpreter's input tensors are resized to the batch once,
  before the first step. The measured steps are these invocations (latency percentiles p50/p90/p99 ms
  and throughput examples/s come from them, as for ``infer``). There is no TF profiler window: xprof
  cannot see inside the TFLite interpreter, so a tflite run has no xplane (``PROFILE_ABSENT_REASON``).
* **Threads**: the interpreter is given ``num_threads`` explicitly: the case's ``tflite_threads``, else the
  CPUs this process may run on (:func:`default_threads`, ``os.sched_getaffinity``: a ``taskset`` or a
  cgroup cpuset narrows it). TFLite applies its XNNPACK delegate by default on CPU; whether it did is read
  back from the interpreter's nodes after allocation (a ``DELEGATE`` node replaces the ops it took).
* **Record** (:attr:`TfliteStep.record`): model size in bytes before (the ``.keras`` file or the
  SavedModel directory) and after (the ``.tflite`` flatbuffer, also written next to the runner's result; its
  ``tflite_path`` is relative to that directory, so the stages on other hosts find it; the archive stage keeps it
  with the run), the conversion time (s), the interpreter's inputs and outputs
  as converted (dtype, shape, quantization scale and zero point) and the dtypes of all its tensors, a
  ``label`` saying what the model is (an ``int8`` conversion keeps float32 inputs and outputs: "int8
  weights and activations, float32 I/O"), ``num_threads`` and ``xnnpack``, and the agreement with the TF
  model on the same inputs: outputs paired by name (a SavedModel signature's or a Keras model's dict keys)
  or by index (a Keras model's list of outputs, which TFLite names ``output_<index>``), never by sorting
  names as strings (``output_10`` before ``output_2``); max absolute difference over every floating output
  (in output units), the relative one and, for classifiers (a rank-2 output with more than one class), top-1
  agreement (share of examples whose argmax matches, 0..1), also per output (``tasks.runner.agreement``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.runner.agreement import agreement
from tasks.runner.spec import RunnerError

#: why a tflite run has no xplane (recorded in the runner's result as ``profile_absent_reason``)
PROFILE_ABSENT_REASON = (
    "tflite run: the TFLite interpreter runs outside TensorFlow's runtime, so the TF "
    "profiler has nothing to trace; no xprof profile exists for it"
)
#: distinct batches the steps cycle through (and the agreement check compares)
POOL_BATCHES = 4
#: single examples the int8 calibration (representative dataset) draws at most
CALIBRATION_EXAMPLES = 64


def default_threads() -> int:
    """The interpreter's thread count when the case gives none: the CPUs this process may run on
    (``len(os.sched_getaffinity(0))``, narrowed by ``taskset`` or a cgroup cpuset; ``os.cpu_count()``
    where the platform has no affinity call)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def io_details(details: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The interpreter's input or output tensors as converted, from a signature runner's
    ``get_input_details()`` / ``get_output_details()``: name -> ``{"dtype"`` (numpy name)``, "shape"``
    (as allocated, batch first)``, "scale", "zero_point"}`` (the tensor's quantization: real = scale x
    (q - zero_point); a list per channel where there are several; None for a tensor that is not quantized)."""
    out = {}
    for name, d in details.items():
        q = d.get("quantization_parameters") or {}
        scales = [float(x) for x in q.get("scales", [])]
        zeros = [int(x) for x in q.get("zero_points", [])]
        dtype = d["dtype"]
        out[name] = {
            "dtype": getattr(dtype, "__name__", str(dtype)),
            "shape": [int(x) for x in d["shape"]],
            "scale": (scales[0] if len(scales) == 1 else scales) if scales else None,
            "zero_point": (zeros[0] if len(zeros) == 1 else zeros) if scales else None,
        }
    return out


def describe(
    quantization: str,
    inputs: Mapping[str, Mapping[str, Any]],
    outputs: Mapping[str, Mapping[str, Any]],
    tensor_dtypes: Mapping[str, int],
) -> str:
    """What the converted model is, in words, from what the interpreter holds rather than from the option
    asked for: ``quantization`` (none, dynamic, int8), the inputs and outputs of :func:`io_details` and the
    count of the interpreter's tensors per dtype, e.g. ``"int8: int8 weights and activations, float32 I/O
    (quantized and dequantized at the model's edges)"``; says so where the tensors contradict the option
    (no int8 tensor in a quantized model, int8 tensors in an unquantized one)."""
    io = sorted({d["dtype"] for d in (*inputs.values(), *outputs.values())})
    io_text = f"{'/'.join(io) or 'no'} I/O"
    has_int8 = tensor_dtypes.get("int8", 0) > 0
    if quantization == "none" or not has_int8:
        text = f"float32 weights and activations, {io_text}"
        if quantization != "none":  # e.g. dynamic-range leaves weights under 1024 elements in float32
            text += ": nothing was quantized (no int8 tensor in the model)"
        elif has_int8:
            text += f"; {tensor_dtypes['int8']} int8 tensors in the model"
    elif quantization == "dynamic":
        text = f"int8 weights, float32 activations (dynamic-range), {io_text}"
    else:
        edges = " (quantized and dequantized at the model's edges)" if "int8" not in io and "uint8" not in io else ""
        text = f"int8 weights and activations, {io_text}{edges}"
    return f"{quantization}: {text}"


def pair_outputs(tf_outputs: Any, lite_outputs: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """The TF model's outputs and the interpreter's, paired: ``[(name, tf value, tflite value)]`` in the TF
    model's order. A dict of outputs (a SavedModel signature's, a Keras model's dict) pairs by name; a list
    or tuple of outputs (a Keras model's, or one tensor) by index, the interpreter's ``output_<index>``
    names read as numbers (``output_10`` is the eleventh output, not the third); one output with one.

    Raises:
        RunnerError: the two give different numbers of outputs, different names, or names that are not
            ``output_<index>`` for a list of outputs (names both sides).
    """
    lite = dict(lite_outputs)
    if isinstance(tf_outputs, Mapping):
        if set(tf_outputs) != set(lite):
            raise RunnerError(
                f"the TF model's outputs {sorted(tf_outputs)} and the TFLite model's {sorted(lite)} differ: "
                "cannot pair them by name"
            )
        return [(str(k), tf_outputs[k], lite[k]) for k in tf_outputs]
    seq = list(tf_outputs) if isinstance(tf_outputs, list | tuple) else [tf_outputs]
    if len(seq) != len(lite):
        raise RunnerError(f"the TF model gives {len(seq)} outputs, the TFLite model {len(lite)}: cannot pair them")
    if len(seq) == 1:
        ((name, value),) = lite.items()
        return [(name, seq[0], value)]
    by_index = {int(m.group(1)): n for n in lite if (m := re.fullmatch(r"output_(\d+)", n))}
    if sorted(by_index) != list(range(len(seq))):
        raise RunnerError(
            f"the TFLite model's outputs {sorted(lite)} are not output_0..output_{len(seq) - 1}: cannot pair "
            f"them with the TF model's {len(seq)} outputs by index"
        )
    return [(by_index[i], seq[i], lite[by_index[i]]) for i in range(len(seq))]


def size_bytes(path: str | Path) -> int:
    """Bytes of a model on disk: the file, or every file under a SavedModel directory."""
    p = Path(path)
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def rejected_ops(message: str) -> list[str]:
    """The op names a TFLite converter error message names (``'tf.Foo' op is neither a custom op nor a flex
    op``, and ``tf.Foo(tensor<...>) -> ...`` in its "Details" list of unsupported ops), in order, without
    repeats."""
    found = re.findall(r"'((?:tf|tfl|mhlo|stablehlo)\.[A-Za-z0-9_]+)' op", message)
    found += re.findall(r"\b((?:tf|tfl)\.[A-Z][A-Za-z0-9_]*)\(tensor", message)
    return list(dict.fromkeys(found))


def convert(
    model_path: str | Path,
    keras_model: Any | None,
    quantization: str,
    signature: str,
    representative: Callable[[], Iterator[dict[str, Any]]] | None,
) -> bytes:
    """The TFLite flatbuffer of the model (module docstring): ``keras_model`` when given (a loaded Keras
    model), else the SavedModel at ``model_path`` (its ``signature``); ``representative`` yields
    ``{input name: one-example array}`` (needed for ``int8``).

    Raises:
        RunnerError: unknown ``quantization``, ``int8`` without ``representative``, or the converter failed
            (names the quantization, the op(s) it rejected when its message names any, and its message).
    """
    import tensorflow as tf

    if quantization not in ("none", "dynamic", "int8"):
        raise RunnerError(f"quantization {quantization!r}: expected none, dynamic or int8")
    if keras_model is not None:
        converter = tf.lite.TFLiteConverter.from_keras_model(keras_model)
    else:
        converter = tf.lite.TFLiteConverter.from_saved_model(str(model_path), signature_keys=[signature])
    if quantization != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "int8":
        if representative is None:
            raise RunnerError("int8 quantization needs a representative dataset")
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    try:
        flat: bytes = converter.convert()
        return flat
    except Exception as e:  # noqa: BLE001 - ConverterError and kin, re-raised naming the ops
        msg = str(e)
        ops = rejected_ops(msg)
        named = f"the converter rejected op(s) {', '.join(ops)}" if ops else "the converter named no op"
        lines = [ln for ln in msg.splitlines() if ln.strip()]
        raise RunnerError(
            f"TFLite conversion (quantization {quantization}) of model {model_path} failed: {named}: "
            f"{type(e).__name__}: {' | '.join(lines[:6])[:1500]}"
        ) from e


@dataclass
class TfliteStep:
    """A converted model ready to time: ``run()`` is one interpreter invocation on the next batch (ms, our
    timer); ``record``: sizes, conversion time and agreement (module docstring)."""

    run: Callable[[], float]
    record: dict[str, Any] = field(default_factory=dict)


class _Invoker:
    """The interpreter (``num_threads`` threads) with its inputs resized to the batch once;
    ``__call__(batch)`` -> outputs by signature name. ``xnnpack``: whether the XNNPACK delegate took any
    node (None: this TFLite cannot tell); ``input_details`` / ``output_details``: :func:`io_details`."""

    def __init__(self, flatbuffer: bytes, batch: dict[str, Any], signature: str | None, num_threads: int) -> None:
        import tensorflow as tf

        self.interp = tf.lite.Interpreter(model_content=flatbuffer, num_threads=num_threads)
        keys = list(self.interp.get_signature_list())
        key = signature if signature in keys else (keys[0] if keys else None)
        runner = self.interp.get_signature_runner(key)
        ins, outs = runner.get_input_details(), runner.get_output_details()
        del runner  # it holds views of the interpreter's tensors, which forbid resizing them
        if set(ins) == set(batch):
            self.rename = {n: n for n in ins}
        elif len(ins) == len(batch) == 1:  # one input: the converter may have named it otherwise
            self.rename = {next(iter(batch)): next(iter(ins))}
        else:
            raise RunnerError(f"the TFLite model's inputs {sorted(ins)} do not match the model's {sorted(batch)}")
        self.inputs = {n: ins[n]["index"] for n in ins}
        self.outputs = {n: outs[n]["index"] for n in outs}
        for name, arr in batch.items():
            self.interp.resize_tensor_input(self.inputs[self.rename[name]], list(arr.shape))
        self.interp.allocate_tensors()  # applies the default delegates (XNNPACK on CPU)
        runner = self.interp.get_signature_runner(key)
        self.input_details = io_details(runner.get_input_details())  # as allocated: the batch's shapes
        self.output_details = io_details(runner.get_output_details())
        del runner
        dtypes: dict[str, int] = {}
        for t in self.interp.get_tensor_details():
            name = getattr(t["dtype"], "__name__", str(t["dtype"]))
            dtypes[name] = dtypes.get(name, 0) + 1
        self.tensor_dtypes = dict(sorted(dtypes.items()))
        ops = getattr(self.interp, "_get_ops_details", None)  # private, but the only view of the nodes
        self.xnnpack = None if ops is None else any(op.get("op_name") == "DELEGATE" for op in ops())

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        for name, arr in batch.items():
            self.interp.set_tensor(self.inputs[self.rename[name]], arr)
        self.interp.invoke()
        return {n: self.interp.get_tensor(i) for n, i in self.outputs.items()}


def build(
    model_path: str,
    keras_model: Any | None,
    forward: Callable[[dict[str, Any]], Any],
    dataset: Any,
    quantization: str,
    signature: str,
    out_path: str | Path,
    num_threads: int | None = None,
) -> TfliteStep:
    """Convert the model and return its timed step (module docstring).

    ``keras_model``: the loaded Keras model (None for a SavedModel, converted from ``model_path``);
    ``forward(batch)``: the TF model's inference on ``{input name: tensor}`` (for the agreement check);
    ``dataset``: the ``tf.data`` batches the step is fed (``{input name: tensor}``), of which the first
    ``POOL_BATCHES`` are cycled through and calibrate ``int8``; ``out_path``: where the ``.tflite`` file is written;
    ``num_threads``: the interpreter's threads (None: :func:`default_threads`).

    Raises:
        RunnerError: the conversion failed (names the rejected op), the TFLite model's inputs or outputs do
            not match the TF model's (:func:`pair_outputs`), or ``num_threads`` is below 1.
    """
    if num_threads is not None and num_threads < 1:
        raise RunnerError(f"tflite_threads {num_threads}: expected at least 1 interpreter thread")
    threads = num_threads if num_threads is not None else default_threads()
    import numpy as np
    import tensorflow as tf

    batches = [{k: v.numpy() for k, v in b.items()} for b in dataset.take(POOL_BATCHES)]

    def representative() -> Iterator[dict[str, Any]]:
        n = 0
        for b in batches:
            for i in range(len(next(iter(b.values())))):
                if n >= CALIBRATION_EXAMPLES:
                    return
                n += 1
                yield {k: v[i : i + 1] for k, v in b.items()}

    t0 = time.perf_counter()
    flat = convert(model_path, keras_model, quantization, signature, representative)
    conversion_s = time.perf_counter() - t0
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(flat)
    invoke = _Invoker(flat, batches[0], signature, threads)

    refs, lites, names = [], [], None
    for b in batches:
        pairs = pair_outputs(forward({k: tf.constant(v) for k, v in b.items()}), invoke(b))
        floating = [
            (n, np.asarray(a), np.asarray(c)) for n, a, c in pairs if np.issubdtype(np.asarray(a).dtype, np.floating)
        ]
        refs.append([a for _, a, _ in floating])
        lites.append([c for _, _, c in floating])
        names = [n for n, _, _ in floating]
    agree = agreement(refs, lites, names)
    cycle = [0]

    def step() -> float:
        b = batches[cycle[0] % len(batches)]
        cycle[0] += 1
        t = time.perf_counter()
        invoke(b)
        return (time.perf_counter() - t) * 1000.0

    record = {
        "quantization": quantization,
        "size_bytes_before": size_bytes(model_path),
        "size_bytes_after": len(flat),
        "tflite_path": out.name,  # relative to the runner's out_dir (where its result.json lies): hosts move it
        "conversion_s": conversion_s,
        "agreement": agree,
        "interpreter_inputs": {n: list(v.shape) for n, v in batches[0].items()},
        "inputs": invoke.input_details,
        "outputs": invoke.output_details,
        "tensor_dtypes": invoke.tensor_dtypes,
        "label": describe(quantization, invoke.input_details, invoke.output_details, invoke.tensor_dtypes),
        "num_threads": threads,
        "num_threads_source": "case" if num_threads is not None else "affinity",
        "xnnpack": invoke.xnnpack,
    }
    return TfliteStep(step, record)
