"""The TFLite record's pure parts (``tasks.runner.tflite``): outputs paired by name or index, the interpreter's
I/O details and the label that says what the converted model is. No TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.runner import RunnerError
from tasks.runner.tflite import agreement, default_threads, describe, io_details, pair_outputs


def _heads(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(8, 3)).astype(np.float32) for _ in range(n)]


def test_twelve_outputs_pair_by_index_not_by_string_order():
    """Issue 26: a correct float32 conversion of a 12-output Keras model read max |diff| 5.02 and top-1 60.4%
    because the interpreter's ``output_<i>`` names were sorted as strings (output_10 before output_2)."""
    tf_out = _heads(12)
    # the interpreter's signature lists them as strings sort (output_0, output_1, output_10, output_11, ...)
    lite = {f"output_{i}": tf_out[i].copy() for i in sorted(range(12), key=str)}
    assert list(lite)[2] == "output_10"
    pairs = pair_outputs(tf_out, lite)
    assert [n for n, _, _ in pairs] == [f"output_{i}" for i in range(12)]
    a = agreement([[p[1] for p in pairs]], [[p[2] for p in pairs]], [p[0] for p in pairs])
    assert a["max_abs_diff"] == 0.0 and a["top1_agreement"] == 1.0
    assert [o["name"] for o in a["outputs"]] == [f"output_{i}" for i in range(12)]
    assert all(o["max_abs_diff"] == 0.0 and o["top1_agreement"] == 1.0 for o in a["outputs"])


def test_dict_outputs_pair_by_name():
    tf_out = dict(zip([f"out_{i}" for i in range(12)], _heads(12), strict=True))  # a SavedModel signature's
    lite = {k: tf_out[k] + 1e-7 for k in sorted(tf_out)}
    pairs = pair_outputs(tf_out, lite)
    assert [n for n, _, _ in pairs] == list(tf_out) and all(np.allclose(a, b, atol=1e-6) for _, a, b in pairs)
    with pytest.raises(RunnerError, match=r"outputs \['a', 'b'\] and the TFLite model's \['a', 'c'\] differ"):
        pair_outputs({"a": 1, "b": 2}, {"a": 1, "c": 2})


def test_one_output_and_refusals():
    x = np.zeros((2, 3))
    assert pair_outputs(x, {"Identity": x})[0][0] == "Identity"  # one output: any name
    with pytest.raises(RunnerError, match="gives 2 outputs, the TFLite model 1"):
        pair_outputs([x, x], {"output_0": x})
    with pytest.raises(RunnerError, match=r"are not output_0..output_1: cannot pair"):
        pair_outputs([x, x], {"logits": x, "probs": x})  # never guess an order


def _detail(dtype, shape, scales=(), zeros=()):
    return {
        "dtype": dtype,
        "shape": np.array(shape),
        "quantization_parameters": {"scales": np.array(scales), "zero_points": np.array(zeros)},
    }


def test_io_details_and_the_label_say_what_the_model_is():
    fio = io_details({"x": _detail(np.float32, [4, 16, 16, 3])})
    assert fio == {"x": {"dtype": "float32", "shape": [4, 16, 16, 3], "scale": None, "zero_point": None}}
    qio = io_details({"x": _detail(np.int8, [1, 8], [0.0235], [-128])})
    assert qio["x"]["dtype"] == "int8" and qio["x"]["scale"] == pytest.approx(0.0235) and qio["x"]["zero_point"] == -128
    # issue 26: an int8 case keeps float32 I/O: int8 weights and activations, float I/O
    assert describe("int8", fio, fio, {"float32": 4, "int8": 20, "int32": 2}) == (
        "int8: int8 weights and activations, float32 I/O (quantized and dequantized at the model's edges)"
    )
    assert describe("int8", qio, qio, {"int8": 20}) == "int8: int8 weights and activations, int8 I/O"
    assert describe("dynamic", fio, fio, {"float32": 9, "int8": 3}).startswith("dynamic: int8 weights, float32 act")
    assert describe("none", fio, fio, {"float32": 9}) == "none: float32 weights and activations, float32 I/O"
    assert describe("dynamic", fio, fio, {"float32": 9}) == (  # dynamic-range skips weights under 1024 elements
        "dynamic: float32 weights and activations, float32 I/O: nothing was quantized (no int8 tensor in the model)"
    )


def test_default_threads_are_the_cpus_this_process_may_use(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)  # as under taskset -c 0
    assert default_threads() == 1


def test_the_case_gives_the_thread_count_to_the_runner():
    from pydantic import ValidationError

    from tasks.records import Case
    from tasks.runner import RunnerSpec
    from tasks.stages.warmup import case_options

    case = Case(model="m", mode="tflite", tflite_threads=1)
    spec = RunnerSpec(mode="profile", model_path="m.keras", out_dir="out", **case_options(case))
    assert spec.tflite_threads == 1 and case.to_xcom()["tflite_threads"] == 1
    assert case_options(Case(model="m", mode="tflite"))["tflite_threads"] is None  # the runner's affinity decides
    with pytest.raises(ValidationError, match="tflite_threads=2 applies to mode 'tflite' only"):
        Case(model="m", tflite_threads=2)
    with pytest.raises(ValidationError, match="tflite_threads"):
        Case(model="m", mode="tflite", tflite_threads=0)
