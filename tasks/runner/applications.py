"""Standard models by name: ``keras.applications`` constructors behind the lowercase names the benchmarking
guide writes (``resnet50``, ``efficientnetb0``, ``mobilenet_v3_small``, ``mobilenetv2``...).

The name table is made from the module's own attributes (:func:`name_table` over ``dir(keras.applications)``:
every public callable whose name starts with a capital, e.g. ``ResNet50``), never from a list kept here, so a
Keras that adds or drops an architecture changes the table by itself. A name is matched case-, ``_``- and
``-``-insensitively (``mobilenet_v3_small`` and ``MobileNetV3Small`` are one key); an unknown name is refused
listing the close matches (:func:`resolve`).

:func:`build` runs in the runner (the pull stage's ``build`` mode, ``tasks.runner.modes.build``): it calls the
constructor with ``weights=None`` (random weights from ``keras.utils.set_random_seed(seed)``: nothing is
downloaded, so the model's outputs mean nothing and any accuracy-like figure of it, such as the TFLite
top-1 agreement, compares two random functions, not a trained classifier), and hashes the architecture's
config (:func:`config_sha256`: ``model.get_config()`` as canonical JSON, built under a fresh
``keras.backend.clear_session()``: Keras numbers unnamed layers per process, so without it a second build of one
architecture in a process hashed to another version; with it every build hashes as a fresh process's first, the
versions stored before it included). The pull stage records that
digest as it records a stored model file's sha256, and the version :func:`version_string` makes of it with
the Keras version (``keras3.15.1-1a2b3c4d``): a change of architecture or of Keras is a new version.

Only :func:`build` and :func:`constructors` import Keras; the rest is plain Python (the unit tests use it).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from tasks.runner.protocol import RunnerError

#: the ``Case.backbone`` value that names this source of models
BACKBONE = "keras.applications"
#: longest version string the store keeps (``model_versions.version`` is String(32))
MAX_VERSION_CHARS = 32


def key(name: str) -> str:
    """The table key of a model name: lowercase, without ``_`` and ``-`` (``mobilenet_v3_small`` ->
    ``mobilenetv3small``, ``ResNet50`` -> ``resnet50``)."""
    return name.lower().replace("_", "").replace("-", "")


def name_table(attributes: Iterable[str], is_constructor: Any = None) -> dict[str, str]:
    """Key (:func:`key`) -> constructor name, for every attribute of ``keras.applications`` that names a model:
    public, starting with a capital letter (the submodules ``resnet``, ``imagenet_utils`` are lowercase), and
    for which ``is_constructor(name)`` (default: always) is true. E.g. ``["ResNet50", "resnet", "MobileNetV2"]``
    -> ``{"resnet50": "ResNet50", "mobilenetv2": "MobileNetV2"}``.

    Raises:
        RunnerError: two constructors share a key (names both): the lowercase name would be ambiguous.
    """
    table: dict[str, str] = {}
    for name in sorted(attributes):
        if not name[:1].isupper() or (is_constructor is not None and not is_constructor(name)):
            continue
        k = key(name)
        if k in table and table[k] != name:
            raise RunnerError(f"keras.applications has both {table[k]} and {name}: the name {k!r} is ambiguous")
        table[k] = name
    return table


def resolve(name: str, table: dict[str, str]) -> str:
    """The constructor name (``ResNet50``) that model name ``name`` (``resnet50``, ``ResNet50``,
    ``mobilenet_v3_small``) means in ``table`` (:func:`name_table`).

    Raises:
        RunnerError: no such model: the message names ``name`` and lists up to 5 close matches (in lowercase,
            as the guide writes them), or every name when none is close.
    """
    k = key(name)
    if k in table:
        return table[k]
    close = difflib.get_close_matches(k, list(table), n=5, cutoff=0.6)
    choices = close or sorted(table)
    what = "close matches" if close else "the models there are"
    raise RunnerError(
        f"unknown keras.applications model {name!r}; {what}: {', '.join(table[c].lower() for c in choices)}"
    )


def constructors() -> dict[str, str]:
    """:func:`name_table` of this interpreter's ``keras.applications`` (imports Keras)."""
    import keras

    apps = keras.applications
    return name_table(dir(apps), lambda n: callable(getattr(apps, n)))


def config_sha256(config: Any) -> str:
    """sha256 (hex) of ``config`` (a Keras ``get_config()`` dict) as canonical JSON: keys sorted, no spaces,
    values JSON cannot hold (a dtype object, a tuple) written as ``str`` / lists, so equal architectures
    hash equally in any process."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def version_string(keras_version: str, config_digest: str) -> str:
    """The version a built application is recorded under, as a model store version is: ``keras<Keras
    version>-<first 8 hex digits of the config's sha256>``, e.g. ``keras3.15.1-1a2b3c4d``; at most
    ``MAX_VERSION_CHARS`` characters (a longer Keras version, a dev build's, is cut before the hash).

    Raises:
        RunnerError: ``config_digest`` is not a hex digest of at least 8 digits.
    """
    if len(config_digest) < 8 or any(c not in "0123456789abcdef" for c in config_digest):
        raise RunnerError(f"config digest {config_digest!r}: expected the hex sha256 of the architecture's config")
    suffix = "-" + config_digest[:8]
    return ("keras" + keras_version)[: MAX_VERSION_CHARS - len(suffix)] + suffix


#: The input shape (one example, batch left out) Keras documents for each constructor that, given no
#: ``input_shape``, builds a model without a static one (``(None, None, 3)``), which no step can be fed: the
#: MobileNetV3 page (keras.io/api/applications/mobilenet/) documents ``(224, 224, 3)``. Every other constructor
#: fixes its documented default itself (``imagenet_utils.obtain_input_shape``'s ``default_size`` with the top).
DOCUMENTED_INPUT_SHAPES: dict[str, tuple[int, int, int]] = {
    "MobileNetV3Small": (224, 224, 3),
    "MobileNetV3Large": (224, 224, 3),
}


def call_shape(constructor: str, input_shape: list[int] | None) -> list[int] | None:
    """The ``input_shape`` :func:`build` passes to ``constructor`` (and :func:`describe_call` records): the one
    given, else :data:`DOCUMENTED_INPUT_SHAPES`' entry, else None (the constructor's own default).
    ``call_shape("MobileNetV3Small", None)`` is ``[224, 224, 3]``."""
    if input_shape is not None:
        return list(input_shape)
    documented = DOCUMENTED_INPUT_SHAPES.get(constructor)
    return list(documented) if documented else None


def describe_call(constructor: str, input_shape: list[int] | None, classes: int | None, seed: int) -> str:
    """The constructor call in words, as the run records its source: ``keras.applications.ResNet50(
    input_shape=(96, 96, 3), classes=10, weights=None), random weights (seed 0), nothing downloaded``;
    ``input_shape`` is the one asked for (None: the call's, :func:`call_shape`, with ``(Keras's documented
    default)`` after it where that is :data:`DOCUMENTED_INPUT_SHAPES`')."""
    args = []
    if input_shape is None and (documented := call_shape(constructor, None)) is not None:
        args.append(f"input_shape={tuple(documented)} (Keras's documented default)")
    elif input_shape is not None:
        args.append(f"input_shape={tuple(input_shape)}")
    if classes is not None:
        args.append(f"classes={classes}")
    args.append("weights=None")
    return f"{BACKBONE}.{constructor}({', '.join(args)}), random weights (seed {seed}), nothing downloaded"


def first_kernel(layers: Iterable[Any]) -> tuple[str, list[int]] | None:
    """The first layer of ``layers`` (a Keras model's ``layers``, in order) with a convolution kernel (rank 3 to 5:
    ``(..., in_channels, out_channels)``): ``(its name, the kernel's shape)``; None when there is none (a model
    that starts with a Dense layer, an embedding)."""
    for layer in layers:
        kernel = getattr(layer, "kernel", None)
        shape = getattr(kernel, "shape", None)
        if shape is not None and 3 <= len(shape) <= 5:
            return str(layer.name), [int(d) for d in shape]
    return None


def stem_mismatch(
    input_shape: list[int | None], kernel: tuple[str, list[int]] | None, channels_last: bool = True
) -> str | None:
    """Why a built image model is not the one asked for, None when it is: its first convolution's kernel
    (:func:`first_kernel`: ``(name, shape)``) must read as many input channels as the model's input has
    (``input_shape``, one example, batch left out: the last dimension, or the first with ``channels_last``
    False). Keras 3.11's EfficientNets built a 1-channel ``stem_conv`` behind their ``Rescaling`` layer for 3-channel
    inputs, without an error (keras-team/keras#21529): a model with a third of its stem's work, whose step time
    is no EfficientNet's. None too where the model has no convolution or its input channels are unknown."""
    if kernel is None or not input_shape:
        return None
    channels = input_shape[-1] if channels_last else input_shape[0]
    name, shape = kernel
    if channels is None or shape[-2] == channels:
        return None
    return (
        f"its first convolution {name!r} reads {shape[-2]} input channel(s) (kernel {tuple(shape)}) where the "
        f"model's input has {channels}: the builder did not build the architecture asked for"
    )


def weights_sha256(weights: Iterable[Any]) -> str:
    """sha256 (hex) of a model's weights (``model.get_weights()``: numpy arrays, in order), each array's dtype,
    shape and bytes: the digest of the weights the run measured, beside the config's (:func:`config_sha256`)."""
    h = hashlib.sha256()
    for w in weights:
        h.update(f"{w.dtype.str}{tuple(w.shape)}".encode())
        h.update(w.tobytes())  # C order whatever the array's layout
    return h.hexdigest()


def build(name: str, input_shape: list[int] | None, classes: int | None, seed: int) -> tuple[Any, str]:
    """Build ``keras.applications.<constructor of name>`` with random weights (``weights=None``, after
    ``keras.utils.set_random_seed(seed)``); ``input_shape`` (one example, without the batch dimension) and
    ``classes`` are passed when given, else the documented defaults (:func:`call_shape`: 224 x 224 x 3 for
    most, the constructor's own or :data:`DOCUMENTED_INPUT_SHAPES`'; 1000 classes). Returns ``(model,
    constructor name)``.

    Raises:
        RunnerError: an unknown name (:func:`resolve`), the constructor refuses the arguments (its
            message, e.g. an input smaller than the architecture accepts), or it built another model than the
            architecture asked for (:func:`stem_mismatch`: names the layer, its kernel and the Keras version).
    """
    import keras

    constructor = resolve(name, constructors())
    kwargs: dict[str, Any] = {"weights": None}
    if (shape := call_shape(constructor, input_shape)) is not None:
        kwargs["input_shape"] = tuple(shape)
    if classes is not None:
        kwargs["classes"] = classes
    # a fresh Keras state: layers without an explicit name are numbered per process (``re_lu_3`` after three
    # others), and the numbers enter get_config(), so a second build in one process hashed to another version
    # (5d4db9ee, then 644130b4); after clear_session() every build is named as the first one in a fresh process
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    try:
        model = getattr(keras.applications, constructor)(**kwargs)
    except (ValueError, TypeError) as e:
        raise RunnerError(f"{describe_call(constructor, input_shape, classes, seed)} failed: {e}") from e
    channels_last = keras.backend.image_data_format() == "channels_last"
    built = [None if d is None else int(d) for d in list(model.input_shape)[1:]]
    if (why := stem_mismatch(built, first_kernel(model.layers), channels_last)) is not None:
        raise RunnerError(
            f"refused: {describe_call(constructor, input_shape, classes, seed)} under Keras {keras.__version__}: {why}"
        )
    return model, constructor
