"""Example input pipelines for ``Case.input_fn``: real ``tf.data`` pipelines over TFRecord files of
PNG-encoded images, so that step time includes reading and decoding, and xprof's input-pipeline analysis
has something to say.

A Case names one as ``input_fn: "tasks.runner.input_fns:images_fast"``; the runner imports it in its
own interpreter and calls it with the keyword arguments it accepts among ``batch_size`` and ``seed``.
Each returns an endless ``tf.data.Dataset`` of model-ready batches: float32 images of shape
``(batch_size, 32, 32, 3)``, values in [0, 1] — the input of the zoo's image CNN (``zoo_cnn``, whose
spatial dims are dynamic: the pipeline decides them), or of any model taking one such image input.

* :func:`images_fast`: the tf.data guide's recipe —
  ``TFRecordDataset(...).map(parse, num_parallel_calls=AUTOTUNE).batch(...).prefetch(AUTOTUNE)``,
  decoding in TF's own kernels, in parallel, overlapped with the step.
* :func:`images_slow`: a deliberately slow pipeline — each record parsed and decoded in Python
  (``tf.py_function``: eager TF calls under the GIL, one record at a time), no parallel map, no
  prefetch (tf.data's default rewrites, which would add both, are off): the step waits for its input,
  and the run is diagnosed input-bound.

Where the files are: ``PERFWATCH_IMAGES`` when set (a directory), else ``<PERFWATCH_HOME>/data/images``
(``PERFWATCH_HOME`` defaults to ``~/.perfwatch``, as in ``tasks.settings``); the runner inherits the
environment of the stage that starts it. ``perfwatch demo build-zoo`` writes them there
(``tasks.runner.zoo.write_images``: 4 files of 64 records, ``image`` PNG bytes + ``label`` int64).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

IMAGE_SIDE = 32  # pixels; tasks.runner.zoo.IMAGE_SIDE writes images of this side
SHUFFLE_RECORDS = 64


def images_dir() -> Path:
    """The directory the pipelines read (module docstring): ``$PERFWATCH_IMAGES``, else
    ``$PERFWATCH_HOME/data/images``, else ``~/.perfwatch/data/images``."""
    if os.environ.get("PERFWATCH_IMAGES"):
        return Path(os.environ["PERFWATCH_IMAGES"]).expanduser()
    home = os.environ.get("PERFWATCH_HOME") or Path.home() / ".perfwatch"
    return Path(home).expanduser() / "data" / "images"


def image_files() -> list[str]:
    """The ``*.tfrecord`` files of :func:`images_dir`, sorted.

    Raises:
        FileNotFoundError: none there (names the directory and how to write them).
    """
    d = images_dir()
    files = sorted(str(p) for p in d.glob("*.tfrecord"))
    if not files:
        raise FileNotFoundError(
            f"no *.tfrecord files in {d} (PERFWATCH_IMAGES, else <PERFWATCH_HOME>/data/images); "
            "write the example images with `perfwatch demo build-zoo`"
        )
    return files


def _features() -> dict[str, Any]:
    import tensorflow as tf

    return {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}


def parse_image(record: Any) -> Any:
    """One serialized ``tf.train.Example`` -> its image as float32 ``(32, 32, 3)`` in [0, 1] (PNG decoded
    by ``tf.io.decode_png``). Raises ``tf.errors.InvalidArgumentError`` on a record of another size."""
    import tensorflow as tf

    ex = tf.io.parse_single_example(record, _features())
    img = tf.io.decode_png(ex["image"], channels=3)
    return tf.ensure_shape(tf.image.convert_image_dtype(img, tf.float32), (IMAGE_SIDE, IMAGE_SIDE, 3))


def images_fast(batch_size: int, seed: int = 0) -> Any:
    """The fast pipeline: records read from all files in parallel, shuffled (``SHUFFLE_RECORDS``, ``seed``),
    parsed and decoded by a parallel ``map`` (``AUTOTUNE``), batched (``drop_remainder``), prefetched;
    repeats forever. Yields float32 ``(batch_size, 32, 32, 3)``."""
    import tensorflow as tf

    auto = tf.data.AUTOTUNE
    return (
        tf.data.TFRecordDataset(image_files(), num_parallel_reads=auto)
        .shuffle(SHUFFLE_RECORDS, seed=seed)
        .repeat()
        .map(parse_image, num_parallel_calls=auto)
        .batch(batch_size, drop_remainder=True)
        .prefetch(auto)
    )


def images_slow(batch_size: int) -> Any:
    """The deliberately slow pipeline: files read one after another, each record parsed and decoded in
    Python through ``tf.py_function`` (:func:`parse_image` run eagerly, one record at a time, under the GIL),
    a sequential ``map``, no prefetch; repeats forever. Yields what :func:`images_fast` yields, slowly."""
    import tensorflow as tf

    def decode(record: Any) -> Any:
        return tf.py_function(lambda r: parse_image(r), [record], tf.float32)

    # tf.data's default rewrites would fuse map + batch into a background MapAndBatch and inject a prefetch:
    # parallelism this pipeline must not have, and a hang at exit (the fused iterator's destructor waits for an
    # in-flight py_function call that waits for the GIL the destroying thread holds).
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_optimization.inject_prefetch = False
    return (
        tf.data.TFRecordDataset(image_files())
        .repeat()
        .map(lambda r: tf.ensure_shape(decode(r), (IMAGE_SIDE, IMAGE_SIDE, 3)))
        .batch(batch_size, drop_remainder=True)
        .with_options(options)
    )
