"""``Case.input_fn`` pipelines for tests, imported by the runner in its own interpreter (the runner's working
directory is the checkout, so ``tests.helpers.pipelines:NAME`` imports there)."""

from __future__ import annotations


def shrinking_batches(batch_size: int):
    """Batches of zeros for the ``tiny`` test model (``tests.helpers.models``: 16x16x3 images), batch ``i``
    holding ``batch_size - i % batch_size`` examples: the first is full, every later one of the first
    ``batch_size`` is a partial batch of a size not fed before, so an XLA step compiles on each (as a
    variable-length pipeline without bucketing makes it do)."""
    import tensorflow as tf

    def batch(i):
        return tf.zeros(tf.stack([batch_size - i % batch_size, 16, 16, 3]))

    return tf.data.Dataset.range(10_000).map(batch)
