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
Kind = Literal["xla-unsupported", "xla-compile", "custom-class", "string-input", "unsafe-code"]


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
    * ``string-input``: the runner refused to make up synthetic strings for a string input.
    """
    if not text:
        return None
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
