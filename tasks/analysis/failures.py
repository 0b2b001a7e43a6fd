"""Failures that name their cause: a TensorFlow / Keras / runner error text -> (kind, cause, hint).

TensorFlow's messages put the words a user needs far from their first line: an op that XLA cannot compile
stops at ``InvalidArgumentError: Graph execution error:`` and names the op some hundred characters later
(``Detected unsupported operations when trying to compile graph ... on XLA_CPU_JIT: ResizeArea (No
registered 'ResizeArea' OpKernel for XLA_CPU_JIT devices ...)``); Keras names an unregistered custom class
after a page of config (``... Exception encountered: Could not locate class 'Scale'. Make sure custom
classes ...``). :func:`explain` reads the whole text and returns the cause in one line with what to do;
:func:`with_cause` puts that line first and keeps the full message under it, which is how a failed run's
error is stored (``tasks.stages.pipeline``), so every reader that shows a stored error's first line
(``perfwatch failures``, ``perfwatch runs``, the alert, the run page) shows the cause.

The patterns are those of real messages of TensorFlow 2.21 / Keras 3 captured from the runner
(``tests/data/tf_errors``). A text none of them matches gets no cause (None): its own first line stays first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: what kind of failure a :class:`Cause` is
Kind = Literal[
    "xla-unsupported",
    "xla-compile",
    "custom-class",
    "string-input",
    "unsafe-code",
    "gpu-oom",
    "gpu-dnn-library",
    "xla-gpu-toolchain",
    "cuda-error",
]


@dataclass(frozen=True)
class Cause:
    """Why a run failed, in the user's terms.

    Attributes:
        kind: the failure's kind (:data:`Kind`).
        cause: what failed, short (the op, the class, the input), e.g. ``XLA unsupported: op ResizeArea could
            not compile on XLA_CPU_JIT (node functional_1/resizing_1/resize/ResizeArea)``.
        hint: what to do about it, one sentence.
    """

    kind: Kind
    cause: str
    hint: str

    def line(self) -> str:
        """The one line shown first: ``cause: <cause>. <hint>``."""
        return f"{CAUSE_PREFIX}{self.cause}. {self.hint[:1].upper()}{self.hint[1:]}"


#: the marker of a cause line (:meth:`Cause.line`); a text whose first line has it already carries its cause
CAUSE_PREFIX = "cause: "

#: where a stored failed run's error keeps the errors of its earlier attempts (``tasks.store.writes.record_failure``)
EARLIER_ATTEMPT = "\n\n--- an earlier attempt failed at"

# "No registered 'ResizeArea' OpKernel for XLA_CPU_JIT devices compatible with node {{node a/b/ResizeArea}}"
_XLA_OP = re.compile(r"No registered '(?P<op>[^']+)' OpKernel for (?P<device>XLA_\w+?_JIT) devices(?P<rest>[^\n]*)")
_NODE = re.compile(r"\{\{node (?P<node>[^}]+)\}\}")
# "Detected unsupported operations when trying to compile graph g[] on XLA_CPU_JIT: A (...), B (...)"
_XLA_UNSUPPORTED = re.compile(
    r"Detected unsupported operations when trying to compile graph \S+ on (?P<device>XLA_\w+)"
)
# other compile failures: the line that says so ("\ttf2xla conversion failed while converting __inference_...")
_XLA_COMPILE = re.compile(r"^.*tf2xla conversion failed.*$", re.MULTILINE)
# Keras 3: "Could not locate class 'Scale'. Make sure custom classes ..." (also "function"); tf.keras / Keras 2:
# "Unknown layer: 'Scale'. Please ensure you are using a `keras.utils.custom_object_scope` ..."
_KERAS_CLASS = re.compile(r"Could not locate (?P<what>class|function) '(?P<name>[^']+)'")
_KERAS2_CLASS = re.compile(
    r"Unknown (?P<what>layer|object|activation|loss|metric|initializer|regularizer)s?: '?(?P<name>[\w.>-]+)'?"
)
_REGISTERED = re.compile(r"'registered_name': '(?P<reg>[^']+)'")
# the runner's own refusal (tasks.runner.inputs.resolve) and the message of runners before it
_STRING_INPUT = re.compile(
    r"input '(?P<name>[^']+)'(?:: unknown dtype '(?:string|str|bytes|object)'| is a string input)"
)
_UNSAFE = re.compile(r"Requested the deserialization of a `?(?P<what>Lambda|\w+)`? (?:layer|object)")

#: what to do about an unregistered custom class (the runner's PERFWATCH_RUNNER_IMPORTS, tasks.runner.process)
# GPU failures, in the words TensorFlow and XLA raise them (tensorflow/core/common_runtime/bfc_allocator.cc,
# stream_executor's dnn.h, xla/service/gpu/llvm_gpu_backend), not captured here: this machine has no TF GPU runner
# "OOM when allocating tensor with shape[32,64,112,112] and type float on /job:.../device:GPU:0 by allocator GPU_0_bfc"
_GPU_OOM = re.compile(
    r"OOM when allocating tensor with shape\s*(?P<shape>\[[^\]]*\])(?: and type (?P<dtype>\w+))?"
    r"(?: on (?P<device>\S+))?"
)
# "DNN library is not found.", "Failed to get convolution algorithm. This is probably because cuDNN failed to
# initialize", "Loaded runtime CuDNN library: 8.1.0 but source was compiled with: 8.6.0"
_DNN = re.compile(
    r"DNN library is not found|cuDNN failed to initialize"
    r"|Loaded runtime CuDNN library: [\d.]*\d but source was compiled with: [\d.]*\d"
)
# "libdevice not found at ./libdevice.10.bc", "Couldn't find ptxas" / "Can't find ptxas binary", "ptxas exited"
_XLA_GPU_TOOLS = re.compile(r"libdevice not found at \S+|Can't find libdevice directory \S+|\S*ptxas[^\n]{0,120}")
# "CUDA_ERROR_OUT_OF_MEMORY: out of memory", "failed call to cuInit: CUDA_ERROR_NO_DEVICE"
_CUDA_ERROR = re.compile(r"CUDA_ERROR_[A-Z_]+(?::[^\n]{0,120})?")

_IMPORTS_HINT = (
    "register it: decorate {name} with @keras.saving.register_keras_serializable() in a module the runner "
    "imports before it loads the model (PERFWATCH_RUNNER_IMPORTS=package.module, importable in the runner's "
    "interpreter); perfwatch passes Keras no custom_objects"
)


def explain(text: str | None) -> Cause | None:
    """The cause of the failure described by ``text`` (an exception's message, with or without its traceback),
    or None when no known pattern matches (module docstring).

    Kinds, first match wins:

    * ``xla-unsupported``: ``No registered '<op>' OpKernel for XLA_<dev>_JIT devices`` (every op named, in
      order, without repeats; the first node named);
    * ``xla-compile``: another XLA compilation failure (the line that says so, cut at 200 characters);
    * ``custom-class``: Keras could not locate a class or function (its name; the registered name when the
      config has one) — ``Could not locate class 'X'`` (Keras 3) or ``Unknown layer: 'X'`` (Keras 2);
    * ``unsafe-code``: Keras's ``safe_mode`` refused a ``Lambda`` layer (arbitrary code);
    * ``string-input``: the runner refused to make up synthetic strings for a string input;
    * ``gpu-oom``: the GPU allocator ran out of memory (the shape, type and device it was allocating);
    * ``gpu-dnn-library``: cuDNN is missing or another version than TensorFlow's build (``DNN library is not
      found``, ``cuDNN failed to initialize``, a runtime/compiled-with mismatch);
    * ``xla-gpu-toolchain``: XLA on the GPU could not find ``libdevice`` or ``ptxas`` (the CUDA compiler wheel);
    * ``cuda-error``: another ``CUDA_ERROR_*`` of the driver (the code).
    """
    if not text:
        return None
    if gpu := _gpu_cause(text):
        return gpu
    ops = list(dict.fromkeys(m["op"] for m in _XLA_OP.finditer(text)))
    if ops:
        first = _XLA_OP.search(text)
        assert first is not None
        node = _NODE.search(first["rest"])
        where = f" (node {node['node']})" if node else ""
        names = ", ".join(ops)
        s = "s" if len(ops) > 1 else ""
        return Cause(
            "xla-unsupported",
            f"XLA unsupported: op{s} {names} could not compile on {first['device']}{where}",
            f"XLA has no {first['device']} kernel for {names}: run this case with xla: false (or exclude xla for "
            "this model from the matrix), or change the model so that it does not use it",
        )
    unsupported = _XLA_UNSUPPORTED.search(text)
    compile_line = _XLA_COMPILE.search(text)
    if unsupported or compile_line:
        what = (
            f"unsupported operations on {unsupported['device']}"
            if unsupported
            else _short(compile_line[0] if compile_line else "")
        )
        return Cause(
            "xla-compile",
            f"XLA could not compile the step: {what}",
            "run this case with xla: false (or exclude xla for this model from the matrix); the full message "
            "below names the node",
        )
    found = _KERAS_CLASS.search(text) or _KERAS2_CLASS.search(text)
    if found:
        reg = _REGISTERED.search(text, found.end())
        registered = f" (registered name {reg['reg']!r})" if reg and reg["reg"] != found["name"] else ""
        what = "function" if found["what"] == "function" else "class"
        return Cause(
            "custom-class",
            f"custom {what} {found['name']!r}{registered} is not registered in the runner",
            _IMPORTS_HINT.format(name=found["name"]),
        )
    unsafe = _UNSAFE.search(text)
    if unsafe:
        return Cause(
            "unsafe-code",
            f"Keras safe_mode refused a {unsafe['what']} layer (it runs arbitrary Python code)",
            "if you trust this model's code, set safe_mode: false in its case (perfwatch run --no-safe-mode)",
        )
    string = _STRING_INPUT.search(text)
    if string:
        return Cause(
            "string-input",
            f"string input: give an input_fn (input {string['name']!r} takes strings)",
            "synthetic strings mean nothing: set input_fn: package.module:function in the case, returning a "
            "tf.data.Dataset of real batches",
        )
    return None


def _gpu_cause(text: str) -> Cause | None:
    """The GPU failure kinds of :func:`explain`, or None."""
    if oom := _GPU_OOM.search(text):
        what = f"tensor {oom['shape']}" + (f" of {oom['dtype']}" if oom["dtype"] else "")
        where = f" on {oom['device'].rsplit('/', 1)[-1]}" if oom["device"] else ""
        return Cause(
            "gpu-oom",
            f"GPU out of memory allocating a {what}{where}",
            "lower the case's batch_size, or measure on a GPU with more memory; another process on the GPU "
            "(perfwatch's host load names it) takes memory too",
        )
    if dnn := _DNN.search(text):
        return Cause(
            "gpu-dnn-library",
            f"cuDNN could not be used: {_short(dnn[0])}",
            "install the cuDNN that this TensorFlow was built with in the runner's environment (make gpu-runner "
            "installs the locked nvidia-cudnn wheel; docs/gpu.md)",
        )
    if tools := _XLA_GPU_TOOLS.search(text):
        return Cause(
            "xla-gpu-toolchain",
            f"XLA on the GPU could not find its CUDA tools: {_short(tools[0])}",
            "install nvidia-cuda-nvcc (ptxas, libdevice) in the runner's environment (tensorflow[and-cuda] pulls "
            "it in; make gpu-runner), or set XLA_FLAGS=--xla_gpu_cuda_data_dir=<the CUDA directory>",
        )
    if err := _CUDA_ERROR.search(text):
        return Cause(
            "cuda-error",
            f"the CUDA driver failed: {_short(err[0])}",
            "check the driver and the GPU (nvidia-smi; bench/gpu_check.py), and that the runner's CUDA wheels "
            "suit the driver (its CUDA version is the fingerprint's gpu.cuda_driver_version)",
        )
    return None


def _short(line: str, limit: int = 200) -> str:
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def headline(text: str | None) -> str:
    """The one line to show for an error ``text``: its first line when that is already a cause line, else
    the cause line of :func:`explain`, else the text's first line (``(no error text)`` when empty). Of a
    stored error only the newest attempt is read (the text before :data:`EARLIER_ATTEMPT`)."""
    stripped = (text or "").split(EARLIER_ATTEMPT, 1)[0].strip()
    if not stripped:
        return "(no error text)"
    first = stripped.splitlines()[0]
    if first.startswith(CAUSE_PREFIX):
        return first
    cause = explain(stripped)
    return cause.line() if cause else first


def with_cause(text: str) -> str:
    """``text`` with its cause line (:meth:`Cause.line`) put first, the full text kept below it; ``text``
    unchanged when it has no known cause or already starts with a cause line."""
    if text.lstrip().startswith(CAUSE_PREFIX):
        return text
    cause = explain(text.split(EARLIER_ATTEMPT, 1)[0])
    return f"{cause.line()}\n{text}" if cause else text
