"""Failures that name their cause (issue 26): TensorFlow's and Keras's real messages, captured once from the
runner (``tests/data/tf_errors``, TF 2.21 / Keras 3.15), mapped to the op XLA refused, the missing custom
class, a string input without an input_fn; the cause line put first, the full message kept
(``tests/unit/stages/test_failure_record.py``: stored so, and shown by ``perfwatch failures`` and the alert)."""

from __future__ import annotations

import pytest

from tasks.analysis import failures
from tests.helpers import ROOT

DATA = ROOT / "tests" / "data" / "tf_errors"


def _text(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


@pytest.mark.parametrize("name", ["xla_unsupported_train", "xla_unsupported_infer"])
def test_an_op_xla_cannot_compile_is_named_with_xla_unsupported(name):
    text = _text(name)
    assert text.splitlines()[0].endswith("InvalidArgumentError: Graph execution error:")  # where main stopped
    c = failures.explain(text)
    assert c is not None and c.kind == "xla-unsupported"
    assert c.cause == (
        "XLA unsupported: op ResizeArea could not compile on XLA_CPU_JIT "
        "(node functional_1/resizing_1/resize/ResizeArea)"
    )
    assert "xla: false" in c.hint
    assert failures.headline(text) == c.line() and c.line().startswith("cause: XLA unsupported: op ResizeArea")


def test_another_xla_compile_failure_says_could_not_compile():
    # the same message without its op-kernel sentence: an XLA failure that names no op
    text = _text("xla_unsupported_train").replace("No registered", "Without")
    c = failures.explain(text)
    assert c is not None and c.kind == "xla-compile"
    assert c.cause == "XLA could not compile the step: unsupported operations on XLA_CPU_JIT"
    text = "\n".join(line for line in text.splitlines() if "Detected unsupported" not in line)
    c = failures.explain(text)
    assert c is not None and c.cause.startswith("XLA could not compile the step: tf2xla conversion failed while")


def test_a_lambda_refused_by_safe_mode_says_how_to_trust_it():
    c = failures.explain(_text("lambda_safe_mode"))
    assert c is not None and c.kind == "unsafe-code" and "safe_mode: false" in c.hint


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        (
            "custom_layer_registered_elsewhere",
            "custom class 'Scale' (registered name 'mylayers>Scale') is not registered in the runner",
        ),
        ("custom_layer_unregistered", "custom class 'Unregistered' is not registered in the runner"),
    ],
)
def test_an_unregistered_custom_layer_is_named_first_with_what_to_do(name, cause):
    text = _text(name)
    assert "Could not locate class" not in text.splitlines()[0]  # Keras names it after a page of config
    c = failures.explain(text)
    assert c is not None and (c.kind, c.cause) == ("custom-class", cause)
    assert "register_keras_serializable" in c.hint and "PERFWATCH_RUNNER_IMPORTS" in c.hint
    assert "custom_objects" in c.hint


def test_keras_2s_unknown_layer_is_named_too():
    text = "ValueError: Unknown layer: 'Scale'. Please ensure you are using a `keras.utils.custom_object_scope`"
    c = failures.explain(text)
    assert c is not None and c.cause == "custom class 'Scale' is not registered in the runner"


def test_a_string_input_says_give_an_input_fn():
    for text in (  # the refusal of a runner before issue 26, and today's (tasks.runner.inputs.resolve)
        "RunnerError: warm-up: runner (warmup) failed: input 'text': unknown dtype 'string'",
        "RunnerError: runner (warmup) failed: input 'text' is a string input (string); string input: give an input_fn",
    ):
        c = failures.explain(text)
        assert c is not None and c.kind == "string-input"
        assert c.cause == "string input: give an input_fn (input 'text' takes strings)"


def test_unknown_errors_keep_their_first_line_and_the_cause_goes_first_once():
    assert failures.explain("ValueError: batch_size must be > 0\nTraceback ...") is None
    assert (
        failures.headline("ValueError: batch_size must be > 0\nTraceback ...") == "ValueError: batch_size must be > 0"
    )
    assert failures.headline("") == "(no error text)"
    text = "RunnerError: warm-up: runner (warmup) failed: " + _text("xla_unsupported_train")
    stored = failures.with_cause(text)
    first, rest = stored.split("\n", 1)
    assert first.startswith("cause: XLA unsupported: op ResizeArea") and rest == text  # full message kept
    assert failures.with_cause(stored) == stored
    # a retry that failed otherwise: the earlier attempt's cause is not this attempt's
    retried = "RunnerError: warm-up timed out" + failures.EARLIER_ATTEMPT + " 2026-01-01: " + stored
    assert failures.headline(retried) == "RunnerError: warm-up timed out"


@pytest.mark.parametrize(
    ("text", "kind", "cause"),
    [
        (
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: Graph execution error:\n\n"
            "Detected at node functional_1/conv1/Conv2D defined at (most recent call last):\n...\n"
            "OOM when allocating tensor with shape[256,64,112,112] and type float on "
            "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n\t [[{{node functional_1/conv1}}]]",
            "gpu-oom",
            "GPU out of memory allocating a tensor [256,64,112,112] of float on device:GPU:0",
        ),
        (
            "tensorflow.python.framework.errors_impl.UnimplementedError: Graph execution error:\n...\n"
            "DNN library is not found.\n\t [[{{node functional_1/conv1/convolution}}]]",
            "gpu-dnn-library",
            "cuDNN could not be used: DNN library is not found",
        ),
        (
            "E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:535] Loaded runtime CuDNN library: 9.1.0 but "
            "source was compiled with: 9.3.0.  CuDNN library needs to have matching major version and equal or "
            "higher minor version.",
            "gpu-dnn-library",
            "cuDNN could not be used: Loaded runtime CuDNN library: 9.1.0 but source was compiled with: 9.3.0",
        ),
        (
            "tensorflow.python.framework.errors_impl.InternalError: libdevice not found at ./libdevice.10.bc "
            "[Op:__inference_train_step_812]",
            "xla-gpu-toolchain",
            "XLA on the GPU could not find its CUDA tools: libdevice not found at ./libdevice.10.bc",
        ),
        (
            "E tensorflow/stream_executor/cuda/cuda_driver.cc:271] failed call to cuInit: CUDA_ERROR_NO_DEVICE: "
            "no CUDA-capable device is detected",
            "cuda-error",
            "the CUDA driver failed: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
        ),
    ],
)
def test_gpu_failures_name_their_cause(text, kind, cause):
    """Issue 39: GPU failures (out of memory, cuDNN missing or of another version, XLA's CUDA tools, a CUDA driver
    error) got no cause line; their own first line ("Graph execution error:") was all a reader saw."""
    c = failures.explain(text)
    assert c is not None and (c.kind, c.cause) == (kind, cause)
    assert failures.headline(text) == c.line()
