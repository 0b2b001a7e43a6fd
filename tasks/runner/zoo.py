"""Model builders for the demo and the tests: the demo's model store, and a zoo of small models of the
kinds users bring.

* :func:`build_store` — the demo's store: two versions of a real ``keras.applications`` model.
  Version 1 is MobileNetV2 (α=0.35) at 96×96×3, 10 classes, random weights; version 2 is the same
  network at width α=0.75 — a release about 2× slower per training step (paired gates on the 2-core dev
  machine: ×1.74–1.76 by wall time quiet and at 1-min load 1.5–3, up to ×2.1 at load 3; ×1.90–2.07 by CPU
  time; docs/getting-started.md).
* :func:`build_zoo` — one tiny model of each kind in :data:`ZOO` (each builds in a few seconds and
  trains a step in milliseconds on a 2-core CPU), written as version 1 of model ``zoo_<kind>``:
  an image CNN with dynamic spatial dims, a BERT-like encoder fed by a dict, an SSD-like detector with
  dict outputs, an LSTM, an export-only SavedModel and a Keras model with a ``Lambda`` layer; plus the
  TFRecord files of encoded images that the example input pipelines read
  (:func:`write_images`, :mod:`tasks.runner.input_fns`).

Building imports TensorFlow, so it runs in its own process (``perfwatch demo build-store``,
``perfwatch demo build-zoo``), never in an Airflow worker.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.runner.input_fns import IMAGE_SIDE  # side (px) of the detector's images and the example pipeline's

DEMO_MODEL = "demo_mobilenet"
DEMO_VERSIONS = {1: 0.35, 2: 0.75}  # version -> MobileNetV2 width multiplier α
INPUT_SHAPE = (96, 96, 3)

#: Token vocabulary and sequence length of the BERT-like encoder.
BERT_VOCAB, BERT_SEQ = 1000, 16


def _save_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` next to ``path``, then move it into place: a half-written model is never a version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name.replace(".", ".tmp.", 1) if "." in path.name else path.name + ".tmp")
    if tmp.is_dir():
        shutil.rmtree(tmp)
    write(tmp)
    if path.is_dir():
        shutil.rmtree(path)
    tmp.replace(path)


def build_store(store: str | Path, model: str = DEMO_MODEL, *, force: bool = False) -> list[Path]:
    """Write ``<store>/<model>/<v>/model.keras`` for each demo version; existing files are kept
    unless ``force``. Returns the model files."""
    out = []
    for version, alpha in DEMO_VERSIONS.items():
        path = Path(store) / model / str(version) / "model.keras"
        if force or not path.exists():
            import keras

            keras.utils.set_random_seed(version)
            net = keras.applications.MobileNetV2(input_shape=INPUT_SHAPE, alpha=alpha, weights=None, classes=10)
            _save_atomic(path, net.save)
        out.append(path)
    return out


# ------------------------------------------------------------------------------------------- the zoo


def _cnn() -> Any:
    """Image classifier with dynamic spatial dims: ``image`` (None, None, 3) float32 -> 10 logits."""
    import keras

    inp = keras.Input((None, None, 3), name="image")
    x = keras.layers.Conv2D(8, 3, activation="relu")(inp)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(10)(x), name="zoo_cnn")


def _bert() -> Any:
    """BERT-like encoder: dict inputs ``input_ids`` and ``attention_mask`` (BERT_SEQ int32 each; ids in
    ``[0, BERT_VOCAB)``, mask 0/1), token + position embeddings, 2 encoder layers (2-head self-attention
    with the mask, feed-forward, residuals, layer norm), first-token pooling -> 2 logits."""
    import keras

    ids = keras.Input((BERT_SEQ,), dtype="int32", name="input_ids")
    mask = keras.Input((BERT_SEQ,), dtype="int32", name="attention_mask")
    width = 32
    tokens = keras.layers.Embedding(BERT_VOCAB, width, name="token_embedding")(ids)
    positions = keras.layers.Embedding(BERT_SEQ, width, name="position_embedding")(keras.ops.arange(BERT_SEQ)[None, :])
    x = keras.layers.LayerNormalization()(tokens + positions)
    attend = keras.ops.cast(mask[:, None, :], "bool")  # (batch, 1, seq): every query sees the unmasked keys
    for i in range(2):
        att = keras.layers.MultiHeadAttention(num_heads=2, key_dim=width // 2, name=f"attention_{i}")(
            x, x, attention_mask=attend
        )
        x = keras.layers.LayerNormalization()(x + att)
        ff = keras.layers.Dense(width)(keras.layers.Dense(2 * width, activation="gelu")(x))
        x = keras.layers.LayerNormalization()(x + ff)
    logits = keras.layers.Dense(2)(x[:, 0, :])
    return keras.Model({"input_ids": ids, "attention_mask": mask}, logits, name="zoo_bert")


def _ssd() -> Any:
    """SSD-like detector: ``image`` (IMAGE_SIDE, IMAGE_SIDE, 3) -> dict ``boxes`` (batch, anchors, 4) and
    ``scores`` (batch, anchors, 5 classes, sigmoid), from two feature maps (8×8 and 4×4, 3 anchors each:
    240 anchors)."""
    import keras

    inp = keras.Input((IMAGE_SIDE, IMAGE_SIDE, 3), name="image")
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu")(inp)
    f1 = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)  # 8x8
    f2 = keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(f1)  # 4x4
    anchors, classes = 3, 5
    boxes, scores = [], []
    for f in (f1, f2):
        boxes.append(keras.layers.Reshape((-1, 4))(keras.layers.Conv2D(anchors * 4, 3, padding="same")(f)))
        scores.append(keras.layers.Reshape((-1, classes))(keras.layers.Conv2D(anchors * classes, 3, padding="same")(f)))
    out = {
        "boxes": keras.layers.Concatenate(axis=1, name="boxes")(boxes),
        "scores": keras.layers.Activation("sigmoid", name="scores")(keras.layers.Concatenate(axis=1)(scores)),
    }
    return keras.Model(inp, out, name="zoo_ssd")


def _lstm() -> Any:
    """Sequence model: ``sequence`` (20 steps, 8 features) -> LSTM(16) -> 3 outputs. The LSTM runs a loop
    inside the training step, where xprof finds no steps although the step markers are there."""
    import keras

    inp = keras.Input((20, 8), name="sequence")
    return keras.Model(inp, keras.layers.Dense(3)(keras.layers.LSTM(16)(inp)), name="zoo_lstm")


def _lambda() -> Any:
    """A Keras model with a ``Lambda`` layer (Python code in the file): loads only with ``safe_mode: false``.
    ``features`` (8,) -> Dense(16) -> Lambda(x * 2) -> Dense(1)."""
    import keras

    inp = keras.Input((8,), name="features")
    x = keras.layers.Dense(16, activation="relu")(inp)
    x = keras.layers.Lambda(lambda t: t * 2.0, name="double")(x)
    return keras.Model(inp, keras.layers.Dense(1)(x), name="zoo_lambda")


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo.

    Attributes:
        build: returns the Keras model (imports Keras).
        layout: ``keras`` (``<version>/model.keras``) or ``export`` (``model.export``: a SavedModel with a
            ``serve`` endpoint and a ``serving_default`` signature, no training function).
        modes: the Case modes it runs in (an export-only SavedModel cannot train).
        case: Case fields it needs beyond the model name (e.g. ``inputs`` for a ``None`` dim or an integer
            input no ``Embedding`` consumes, ``safe_mode``), as given to ``tasks.records.Case``.
        about: one line for listings.
    """

    build: Callable[[], Any]
    layout: str
    modes: tuple[str, ...]
    about: str
    case: dict[str, Any] = field(default_factory=dict)


#: model name -> its builder and the Case fields it needs. The image CNN may also be fed by the example
#: pipelines: ``input_fn: tasks.runner.input_fns:images_fast`` (or ``images_slow``) instead of ``inputs``.
ZOO: dict[str, ZooModel] = {
    "zoo_cnn": ZooModel(
        _cnn,
        "keras",
        ("train", "infer"),
        "image CNN, dynamic spatial dims (None, None, 3)",
        {"inputs": {"image": {"shape": [IMAGE_SIDE, IMAGE_SIDE, 3]}}},
    ),
    "zoo_bert": ZooModel(
        _bert,
        "keras",
        ("train", "infer"),
        f"BERT-like encoder, dict inputs input_ids + attention_mask ({BERT_SEQ} tokens, vocab {BERT_VOCAB}), 2 layers",
        {"inputs": {"attention_mask": {"min": 0, "max": 2}}},
    ),
    "zoo_ssd": ZooModel(_ssd, "keras", ("train", "infer"), "SSD-like detector, dict outputs boxes + scores"),
    "zoo_lstm": ZooModel(_lstm, "keras", ("train", "infer"), "LSTM(16) over 20 steps of 8 features"),
    "zoo_export": ZooModel(
        _cnn,
        "export",
        ("infer",),
        "the image CNN as an export-only SavedModel (model.export: inference only)",
        {"inputs": {"image": {"shape": [IMAGE_SIDE, IMAGE_SIDE, 3]}}},
    ),
    "zoo_lambda": ZooModel(
        _lambda, "keras", ("train", "infer"), "Keras model with a Lambda layer (trusted code)", {"safe_mode": False}
    ),
}


def zoo_cases() -> list[dict[str, Any]]:
    """The zoo as benchmark cases (``tasks.records.Case`` fields, plain values; version 1, as
    :func:`build_zoo` writes it): each model in each of its
    modes with the fields it needs, then the image CNN fed by each example pipeline
    (:mod:`tasks.runner.input_fns`). ``perfwatch demo build-zoo`` writes them as a YAML config."""
    cases = [
        {"model": name, "version": "1", "mode": mode, **copy.deepcopy(z.case)}
        for name, z in ZOO.items()
        for mode in z.modes
    ]
    cases += [
        {"model": "zoo_cnn", "version": "1", "mode": "train", "input_fn": f"tasks.runner.input_fns:{fn}"}
        for fn in ("images_fast", "images_slow")
    ]
    return cases


def zoo_model_path(store: str | Path, name: str) -> Path:
    """Where :func:`build_zoo` writes model ``name`` (version 1): ``<store>/<name>/1/model.keras``, or the
    SavedModel directory ``<store>/<name>/1`` for an ``export`` layout."""
    version_dir = Path(store) / name / "1"
    return version_dir if ZOO[name].layout == "export" else version_dir / "model.keras"


def build_zoo(
    store: str | Path, names: list[str] | None = None, *, force: bool = False, seed: int = 0
) -> dict[str, Path]:
    """Write version 1 of each zoo model (``names``; default all of :data:`ZOO`) into the model store
    ``store`` (TF-Serving layout); existing versions are kept unless ``force``. Weights are random
    (``keras.utils.set_random_seed(seed)``). Returns name -> the model file or SavedModel directory.

    Raises:
        KeyError: a name that is not in :data:`ZOO` (names the ones there are).
    """
    unknown = sorted(set(names or ()) - set(ZOO))
    if unknown:
        raise KeyError(f"unknown zoo model(s) {unknown}; the zoo has {sorted(ZOO)}")
    out = {}
    for name in names or list(ZOO):
        spec, path = ZOO[name], zoo_model_path(store, name)
        if force or not path.exists():
            import keras

            keras.utils.set_random_seed(seed)
            model = spec.build()
            if spec.layout == "export":
                # the version dir itself is the SavedModel: build it beside, then move it into place
                def export(tmp: Path, m: Any = model) -> None:
                    m.export(str(tmp), verbose=False)

                _save_atomic(path, export)
            else:
                _save_atomic(path, model.save)
        out[name] = path
    return out


def write_images(
    directory: str | Path,
    *,
    shards: int = 4,
    per_shard: int = 64,
    side: int = IMAGE_SIDE,
    classes: int = 10,
    seed: int = 0,
    force: bool = False,
) -> list[Path]:
    """Write ``shards`` TFRecord files ``images-<i>-of-<shards>.tfrecord`` into ``directory``, each holding
    ``per_shard`` ``tf.train.Example`` records: ``image`` (PNG bytes of a ``side`` × ``side`` × 3 uint8
    image: a smooth colour gradient plus noise, so PNG decoding does real work) and ``label`` (int64 in
    ``[0, classes)``). Default: 4 × 64 images of 32 × 32 px, about 3 KiB each. Existing files are kept
    unless ``force``. Returns the files. The example pipelines (:mod:`tasks.runner.input_fns`) read them.
    """
    import numpy as np
    import tensorflow as tf

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 160, side, dtype=np.float32)
    out = []
    for s in range(shards):
        path = d / f"images-{s:02d}-of-{shards:02d}.tfrecord"
        out.append(path)
        if path.exists() and not force:
            continue
        tmp = path.with_suffix(".tmp")
        with tf.io.TFRecordWriter(str(tmp)) as w:
            for _ in range(per_shard):
                base = ramp[:, None, None] + ramp[None, :, None] * rng.uniform(0, 0.5, size=3)
                img = np.clip(base + rng.normal(0, 24, size=(side, side, 3)), 0, 255).astype(np.uint8)
                feature = {
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tf.io.encode_png(img).numpy()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(classes))])),
                }
                w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
        tmp.replace(path)
    return out
