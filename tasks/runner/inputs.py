"""What the runner feeds a model: its declared inputs, the Case's ``inputs`` options, synthetic batches,
and the user's own ``input_fn`` pipeline. Runs in the runner process only (TensorFlow is imported here).

A model declares its inputs (:class:`Declared`): a Keras model through ``model.input`` (one tensor, a
list, or a dict keyed by input name: fed back in that very structure, so a model with named dict
inputs gets a dict), a SavedModel through its signature's keyword arguments (always by name). The
Case may add, per input name (``tasks.records.InputSpec``): ``shape`` (one example, no batch
dimension), ``dtype``, ``min``/``max``. :func:`resolve` turns both into concrete :class:`Feed` s:

* a ``None`` dimension (other than the batch) that the Case does not give is an error naming the input
  and the dimension -- never a silent 1;
* integer inputs draw uniformly from ``[min, max)``: the Case's, else ``[0, input_dim)`` of the
  ``Embedding`` layers that consume the input (the smallest vocabulary when several do), else an error
  asking for ``min``/``max``; floating inputs draw standard-normal values, or uniform ``[min, max)``
  when the Case gives a range; ``bool`` inputs draw 0/1; string inputs need an ``input_fn``;
* a name in the Case's ``inputs`` that the model does not declare is an error listing the model's input
  names.

``input_fn`` (:func:`user_dataset`): ``"package.module:function"`` importable in the runner's interpreter,
called with those of ``batch_size`` and ``seed`` it accepts, returning a ``tf.data.Dataset`` whose
elements are model-ready batches of ``batch_size`` examples: one tensor (a one-input model: Keras, or a
SavedModel signature of one argument), a tuple in
the model's input order (``Signature.names``; a SavedModel's inputs in name order), or a dict keyed by
input name. Labels are not used (the
training loss is synthetic): ``(x, y)`` pairs are NOT accepted -- map them away with
``.map(lambda x, y: x)``. The dataset is repeated, so a finite pipeline cycles; nothing else (no cache,
no prefetch) is added, so the step time includes the pipeline as written.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks.runner.spec import RunnerError


@dataclass(frozen=True)
class Declared:
    """One input as the model declares it: ``name``; ``shape`` of one batch with the batch dimension
    first (``None`` where the model leaves it open, e.g. ``(None, None, None, 3)``); ``dtype`` (numpy/TF
    name, e.g. ``float32``); ``vocab``: the smallest ``input_dim`` of the ``Embedding`` layers consuming
    it (None: none does)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str
    vocab: int | None = None


@dataclass(frozen=True)
class Feed:
    """One input as it is fed: ``name``; ``shape`` of one batch (batch dimension first, every dimension
    known); ``dtype``; ``low``/``high``: the synthetic values' range ``[low, high)`` (None: standard normal
    for floating inputs; 0/1 for bool)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    low: float | None = None
    high: float | None = None

    def record(self) -> dict[str, Any]:
        """JSON-safe ``{"shape", "dtype", "min", "max"}`` as stored with the run."""
        return {"shape": list(self.shape), "dtype": self.dtype, "min": self.low, "max": self.high}


@dataclass(frozen=True)
class Signature:
    """A model's inputs and how they are passed: ``inputs`` in the model's order; ``structure``:
    ``single`` (one tensor), ``list`` (a positional list/tuple in ``inputs`` order) or ``dict`` (by name)."""

    inputs: tuple[Declared, ...]
    structure: str

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.inputs]

    def pack(self, batch: dict[str, Any]) -> Any:
        """``batch`` (input name -> tensor) in the structure the model is called with."""
        if self.structure == "dict":
            return dict(batch)
        xs = [batch[n] for n in self.names]
        return xs[0] if self.structure == "single" else xs


def _vocab_of(model: Any, tensor: Any) -> int | None:
    """The smallest ``input_dim`` of the Keras ``Embedding`` layers that take ``tensor`` directly."""
    import keras

    dims = []
    for layer in getattr(model, "layers", []):
        if isinstance(layer, keras.layers.Embedding):
            for node in getattr(layer, "_inbound_nodes", []):
                if any(t is tensor for t in getattr(node, "input_tensors", [])):
                    dims.append(int(layer.input_dim))
    return min(dims) if dims else None


def keras_signature(model: Any) -> Signature:
    """The inputs of a loaded Keras model (functional or Sequential) in the structure of ``model.input``.

    Raises:
        RunnerError: the model declares no inputs (a subclassed model never called), naming the model.
    """
    try:
        struct = model.input
    except (AttributeError, ValueError) as e:
        # a loaded Sequential model raises "has never been called" for .input but keeps its keras.Input in .inputs
        if len(declared := list(getattr(model, "inputs", None) or [])) == 1:
            struct = declared[0]
        elif declared:
            struct = declared
        else:
            raise RunnerError(
                f"Keras model {model.name!r} declares no inputs ({e}); perfwatch needs a functional "
                "or Sequential model built with keras.Input"
            ) from e
    if isinstance(struct, dict):
        pairs, kind = list(struct.items()), "dict"
    elif isinstance(struct, (list, tuple)):
        pairs, kind = [(t.name, t) for t in struct], "list"
    else:
        pairs, kind = [(struct.name, struct)], "single"
    return Signature(
        tuple(
            Declared(name=str(n), shape=tuple(t.shape), dtype=str(t.dtype), vocab=_vocab_of(model, t)) for n, t in pairs
        ),
        kind,
    )


def function_signature(fn: Any) -> Signature:
    """The inputs of a SavedModel signature (a concrete function taking keyword arguments), by name."""
    spec = fn.structured_input_signature[1]
    return Signature(
        tuple(Declared(name=n, shape=tuple(spec[n].shape), dtype=spec[n].dtype.name) for n in sorted(spec)), "dict"
    )


def resolve(sig: Signature, options: dict[str, dict[str, Any]] | None, batch_size: int) -> list[Feed]:
    """Concrete feeds of ``batch_size`` examples for ``sig``'s inputs, with the Case's ``options``
    (name -> ``{"shape", "dtype", "min", "max"}``, ``tasks.records.InputSpec``) applied (module docstring).

    Raises:
        RunnerError: ``options`` names an input the model does not have (lists the model's input names);
            a shape of the wrong rank or one that contradicts a fixed dimension of the model; a ``None``
            dimension not given (names the input and the dimension); an integer input without a range
            (asks for ``min``/``max``); a string input (needs an ``input_fn``).
    """
    import numpy as np

    options = options or {}
    unknown = sorted(set(options) - set(sig.names))
    if unknown:
        raise RunnerError(f"inputs {unknown} are not inputs of the model; its inputs are {sig.names}")
    feeds = []
    for d in sig.inputs:
        opt = options.get(d.name) or {}
        declared = d.shape[1:]
        shape = tuple(opt["shape"]) if opt.get("shape") is not None else declared
        if len(shape) != len(declared):
            raise RunnerError(
                f"input {d.name!r}: shape {list(shape)} has {len(shape)} dimensions, the model's "
                f"{_show(d.shape)} has {len(declared)} besides the batch"
            )
        for i, (given, fixed) in enumerate(zip(shape, declared, strict=True), start=1):
            if given is None:
                raise RunnerError(
                    f"input {d.name!r} has an unknown dimension {i} (shape {_show(d.shape)}): give "
                    f"its shape without the batch dimension in the case's inputs, e.g. "
                    f"inputs: {{{d.name}: {{shape: {_example(declared)}}}}}"
                )
            if fixed is not None and given != fixed:
                raise RunnerError(
                    f"input {d.name!r}: shape {list(shape)} contradicts the model's {_show(d.shape)} at dimension {i}"
                )
        dtype = opt.get("dtype") or d.dtype
        if dtype in STRING_DTYPES:  # TF's tf.string is "string": numpy has no dtype of that name
            raise _string_input(d.name, dtype)
        try:
            dt = np.dtype(dtype)
        except TypeError as e:
            raise RunnerError(f"input {d.name!r}: unknown dtype {dtype!r}") from e
        low, high = opt.get("min"), opt.get("max")
        if np.issubdtype(dt, np.integer):
            if low is None and high is None and d.vocab is not None:
                low, high = 0, d.vocab
            if low is None or high is None:
                raise RunnerError(
                    f"input {d.name!r} is {dt.name} and no Embedding layer consumes it to tell its "
                    f"range: give the range of its values in the case's inputs, e.g. "
                    f"inputs: {{{d.name}: {{min: 0, max: 30522}}}} (values drawn from [min, max))"
                )
        elif dt.kind in "OSU":
            raise _string_input(d.name, dtype)
        known = tuple(s for s in shape if s is not None)  # every dimension is given (checked above)
        feeds.append(Feed(name=d.name, shape=(batch_size, *known), dtype=dt.name, low=low, high=high))
    return feeds


#: dtype names of string inputs: TF's (``tf.string.name``) and numpy's
STRING_DTYPES = frozenset({"string", "str", "bytes", "object"})


def _string_input(name: str, dtype: str) -> RunnerError:
    return RunnerError(
        f"input {name!r} is a string input ({dtype}); string input: give an input_fn. Synthetic strings mean "
        "nothing: give the case an input_fn that yields real ones"
    )


def _show(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("None" if s is None else str(s) for s in shape) + ")"


def _example(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("224" if s is None else str(s) for s in shape) + "]"


def synthetic(feeds: list[Feed], examples: int, seed: int) -> dict[str, Any]:
    """``examples`` synthetic examples of every feed (name -> numpy array, examples first): values as the
    module docstring says, from ``numpy.random.default_rng(seed)``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for f in feeds:
        size, dt = (examples, *f.shape[1:]), np.dtype(f.dtype)
        if dt == np.bool_:
            out[f.name] = rng.integers(0, 2, size=size).astype(dt)
        elif np.issubdtype(dt, np.integer):
            assert f.low is not None and f.high is not None  # resolve() refuses an integer input without them
            out[f.name] = rng.integers(int(f.low), int(f.high), size=size).astype(dt)
        elif f.low is not None and f.high is not None:
            out[f.name] = rng.uniform(f.low, f.high, size=size).astype(dt)
        else:
            out[f.name] = rng.standard_normal(size).astype(dt)
    return out


def user_dataset(ref: str, sig: Signature, batch_size: int, seed: int) -> tuple[Any, list[Feed]]:
    """The dataset of ``input_fn`` ``ref`` (module docstring), repeated, with elements turned into
    ``{input name: tensor}``, and the feeds its first batch shows (shape with batch dimension, dtype).
    The first batch is read once here, before any timed step.

    Raises:
        RunnerError: ``ref`` is not ``module:function``, the module does not import, the attribute is
            missing or not callable, the function raises, returns no ``tf.data.Dataset``, yields elements
            that do not match the model's inputs (a tuple for a one-input model, wrong names or count),
            or a batch of another size than ``batch_size``.
    """
    import tensorflow as tf

    mod_name, _, fn_name = ref.partition(":")
    if not mod_name or not fn_name:
        raise RunnerError(f"input_fn {ref!r}: expected 'package.module:function'")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's module
        raise RunnerError(
            f"input_fn {ref!r}: cannot import module {mod_name!r} in the runner's interpreter: {type(e).__name__}: {e}"
        ) from e
    fn = getattr(mod, fn_name, None)
    if fn is None or not callable(fn):
        raise RunnerError(
            f"input_fn {ref!r}: module {mod_name!r} has no callable {fn_name!r}"
            + ("" if fn is None else f" (it is a {type(fn).__name__})")
        )
    accepted: Mapping[str, inspect.Parameter]
    try:
        accepted = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        accepted = {}
    kwargs = {k: v for k, v in (("batch_size", batch_size), ("seed", seed)) if k in accepted}
    try:
        ds = fn(**kwargs)
    except Exception as e:  # noqa: BLE001
        raise RunnerError(f"input_fn {ref!r} failed: {type(e).__name__}: {e}") from e
    if not isinstance(ds, tf.data.Dataset):
        raise RunnerError(
            f"input_fn {ref!r} returned a {type(ds).__name__}; expected a tf.data.Dataset of model-ready batches"
        )
    spec = ds.element_spec
    if isinstance(spec, dict):
        if set(spec) != set(sig.names):
            raise RunnerError(
                f"input_fn {ref!r} yields dicts with keys {sorted(spec)}; the model's inputs are {sig.names}"
            )
        to_dict = None
    elif isinstance(spec, (tuple, list)):
        if len(spec) != len(sig.names) or sig.structure == "single":
            raise RunnerError(
                f"input_fn {ref!r} yields tuples of {len(spec)}; the model takes {len(sig.names)} "
                f"input(s) {sig.names} (labels are not used: map (x, y) pairs to x)"
            )
        names = sig.names

        def to_dict(*xs: Any) -> dict[str, Any]:
            return dict(zip(names, xs, strict=True))
    elif len(sig.names) == 1:  # a one-input model, Keras (single) or a SavedModel signature (by name)
        name = sig.names[0]

        def to_dict(x: Any) -> dict[str, Any]:
            return {name: x}
    else:
        raise RunnerError(
            f"input_fn {ref!r} yields one tensor; the model takes inputs {sig.names} (yield a dict by name)"
        )
    ds = ds if to_dict is None else ds.map(to_dict)
    first = next(iter(ds))
    sizes = {n: int(t.shape[0]) if t.shape.rank else None for n, t in first.items()}
    if any(s != batch_size for s in sizes.values()):
        raise RunnerError(
            f"input_fn {ref!r}: its batches hold {sizes} examples per input; the case's batch_size is {batch_size}"
        )
    feeds = [Feed(name=n, shape=tuple(int(x) for x in first[n].shape), dtype=first[n].dtype.name) for n in sig.names]
    return ds.repeat(), feeds
