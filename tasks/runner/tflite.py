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
* **Record** (:attr:`TfliteStep.record`): model size in bytes before (the ``.keras`` file or the
  SavedModel directory) and after (the ``.tflite`` flatbuffer, also written next to the runner's result),
  the conversion time (s), and the agreement with the TF model on the same inputs: max absolute difference
  over every floating output (in output units) and, for classifiers (a rank-2 output with more than one
  class), top-1 agreement (share of examples whose argmax matches, 0..1).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        return converter.convert()
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
    """The interpreter with its inputs resized to the batch once; ``__call__(batch)`` -> outputs by name."""

    def __init__(self, flatbuffer: bytes, batch: dict[str, Any], signature: str | None) -> None:
        import tensorflow as tf

        self.interp = tf.lite.Interpreter(model_content=flatbuffer)
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
        self.interp.allocate_tensors()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        for name, arr in batch.items():
            self.interp.set_tensor(self.inputs[self.rename[name]], arr)
        self.interp.invoke()
        return {n: self.interp.get_tensor(i) for n, i in self.outputs.items()}


def agreement(tf_outputs: list[list[Any]], lite_outputs: list[list[Any]]) -> dict[str, Any]:
    """TF vs TFLite on the same batches: per batch, the floating outputs of each in the same order.

    Returns ``{"max_abs_diff"`` (largest absolute difference of any element, output units; None when no
    output is floating)``, "top1_agreement"`` (share of examples whose argmax over the classes matches, over
    the rank-2 outputs with more than one class; None when none)``, "examples"}``.

    Raises:
        RunnerError: the two give different numbers or shapes of outputs.
    """
    import numpy as np

    diffs, same, total, examples = [], 0, 0, 0
    for ref, lite in zip(tf_outputs, lite_outputs, strict=True):
        if len(ref) != len(lite):
            raise RunnerError(f"TF gives {len(ref)} floating outputs, TFLite {len(lite)}: cannot compare them")
        for a, b in zip(ref, lite, strict=True):
            a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            if a.shape != b.shape:
                raise RunnerError(f"TF output shape {a.shape} differs from TFLite's {b.shape}")
            diffs.append(float(np.max(np.abs(a - b))) if a.size else 0.0)
            if a.ndim == 2 and a.shape[1] > 1:
                same += int(np.sum(np.argmax(a, axis=1) == np.argmax(b, axis=1)))
                total += a.shape[0]
        examples += int(next(iter(ref)).shape[0]) if ref else 0
    return {
        "max_abs_diff": max(diffs) if diffs else None,
        "top1_agreement": same / total if total else None,
        "examples": examples,
    }


def build(
    model_path: str,
    keras_model: Any | None,
    forward: Callable[[dict[str, Any]], Any],
    dataset: Any,
    quantization: str,
    signature: str,
    out_path: str | Path,
) -> TfliteStep:
    """Convert the model and return its timed step (module docstring).

    ``keras_model``: the loaded Keras model (None for a SavedModel, converted from ``model_path``);
    ``forward(batch)``: the TF model's inference on ``{input name: tensor}`` (for the agreement check);
    ``dataset``: the ``tf.data`` batches the step is fed (``{input name: tensor}``), of which the first
    ``POOL_BATCHES`` are cycled through and calibrate ``int8``; ``out_path``: where the ``.tflite`` file is written.

    Raises:
        RunnerError: the conversion failed (names the rejected op), or the TFLite model's inputs or
            outputs do not match the TF model's.
    """
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
    invoke = _Invoker(flat, batches[0], signature)

    def floats(outputs: Any) -> list[Any]:
        items = sorted(outputs.items()) if isinstance(outputs, dict) else list(enumerate(tf.nest.flatten(outputs)))
        return [np.asarray(v) for _, v in items if np.issubdtype(np.asarray(v).dtype, np.floating)]

    agree = agreement(
        [floats(forward({k: tf.constant(v) for k, v in b.items()})) for b in batches],
        [floats(invoke(b)) for b in batches],
    )
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
        "tflite_path": str(out),
        "conversion_s": conversion_s,
        "agreement": agree,
        "interpreter_inputs": {n: list(v.shape) for n, v in batches[0].items()},
    }
    return TfliteStep(step, record)
