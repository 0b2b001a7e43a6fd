"""Profile a few steps of your own training loop, for ``perfwatch ingest``. TensorFlow only, no Airflow.

Copy-free use in any job whose environment has perfwatch (or just this file) importable::

    from tasks.runner.jobprofile import StepProfiler

    with StepProfiler(logdir="logs/train") as prof:     # reads PERFWATCH_PROFILE_STEPS
        for i, batch in enumerate(dataset):
            with prof.step(i):
                loss = train_step(batch)
                float(loss)                               # end the step on the host

Run the job with ``PERFWATCH_PROFILE_STEPS=10:15`` and steps 10 to 15 (inclusive, as Keras'
``profile_batch``) are profiled: the TF profiler starts just before step 10 and stops after step 15,
and every step runs inside ``tf.profiler.experimental.Trace("train", step_num=i, _r=1)`` — the step
marker xprof needs to report step time (without ``_r=1`` it says "No step marker observed" and zero).
Without the variable nothing is profiled and ``step()`` costs nothing. The profile lands in the
standard TensorBoard layout, ``<logdir>/plugins/profile/<timestamp>/<host>.xplane.pb``; then::

    perfwatch ingest logs --model recsys --version 7

stores it as a run marked ``source: external`` (xprof's step time) beside perfwatch's own runs.
With ``model.fit``, :func:`keras_callback` does the same per training batch and writes where the Keras
TensorBoard callback does (``<log_dir>/train/plugins/profile/...``): Keras' own ``profile_batch``
marks batches without ``_r=1``, so xprof finds no steps in its profiles.

``PERFWATCH_PROFILE_LOGDIR`` overrides ``logdir``. One profiler session per process: when another
one is running (``tf.profiler.experimental.start`` raises), profiling is skipped with a warning and
the job goes on; the session is always stopped (``close``, or leaving the ``with`` block).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

STEPS_ENV = "PERFWATCH_PROFILE_STEPS"
LOGDIR_ENV = "PERFWATCH_PROFILE_LOGDIR"
DEFAULT_LOGDIR = "perfwatch-profile"


def parse_steps(raw: str) -> tuple[int, int]:
    """``"N:M"`` -> ``(N, M)``: the first and last step to profile (inclusive), ``0 <= N <= M``.

    Raises:
        ValueError: anything else (names the variable and the expected form).
    """
    first, sep, last = raw.strip().partition(":")
    try:
        n, m = int(first), int(last)
    except ValueError:
        n = m = -1
    if not sep or n < 0 or m < n:
        raise ValueError(f"{STEPS_ENV}={raw!r}: expected FIRST:LAST step numbers with 0 <= FIRST <= LAST, e.g. 10:15")
    return n, m


class StepProfiler:
    """Profiles the steps ``first..last`` (inclusive) of a training loop with step markers.

    Args:
        logdir: TensorBoard log directory (``PERFWATCH_PROFILE_LOGDIR`` wins; default ``perfwatch-profile``).
        steps: ``(first, last)`` or ``"first:last"``; default ``PERFWATCH_PROFILE_STEPS``; unset: disabled.
        name: the step marker's name (xprof groups steps by it).
        env: where to read the variables (default ``os.environ``).

    Raises:
        ValueError: a malformed steps value.
    """

    def __init__(
        self,
        logdir: str | os.PathLike[str] | None = None,
        steps: tuple[int, int] | str | None = None,
        *,
        name: str = "train",
        env: Mapping[str, str] | None = None,
    ):
        env = os.environ if env is None else env
        raw = steps if steps is not None else env.get(STEPS_ENV)
        if isinstance(raw, str):
            raw = parse_steps(raw) if raw.strip() else None
        self.steps: tuple[int, int] | None = raw
        self.logdir = str(env.get(LOGDIR_ENV) or logdir or DEFAULT_LOGDIR)
        self.name = name
        self.active = False
        self.done = False

    @property
    def enabled(self) -> bool:
        """Whether any step will be profiled."""
        return self.steps is not None

    def _start(self) -> None:
        import tensorflow as tf

        try:
            tf.profiler.experimental.start(self.logdir)
        except Exception as e:  # noqa: BLE001 - "Another profiler is running" and friends must not stop the job
            log.warning("perfwatch: profiling skipped, the TF profiler did not start: %s: %s", type(e).__name__, e)
            self.done = True
            return
        self.active = True

    def close(self) -> None:
        """Stop the profiler session if this profiler started one (writes the profile)."""
        if self.active:
            import tensorflow as tf

            self.active = False
            self.done = True
            tf.profiler.experimental.stop()

    @contextlib.contextmanager
    def step(self, i: int) -> Iterator[None]:
        """Run step ``i`` inside the context: profiled (with its step marker) when ``first <= i <= last``."""
        if self.steps is None or self.done or not self.steps[0] <= i <= self.steps[1]:
            yield
            return
        if not self.active:
            self._start()
        if not self.active:
            yield
            return
        import tensorflow as tf

        try:
            with tf.profiler.experimental.Trace(self.name, step_num=i, _r=1):
                yield
        finally:
            if i >= self.steps[1]:
                self.close()

    def __enter__(self) -> StepProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def keras_callback(
    log_dir: str | os.PathLike[str],
    steps: tuple[int, int] | str | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Any:
    """A ``keras.callbacks.Callback`` that profiles training batches ``first..last`` (counted over all
    epochs from 0; default ``PERFWATCH_PROFILE_STEPS``) with step markers into ``<log_dir>/train`` (the
    Keras TensorBoard callback's layout; use the same ``log_dir`` for both). Keep ``steps_per_execution``
    at 1 so that one batch is one step."""
    import keras

    prof = StepProfiler(logdir=os.path.join(os.fspath(log_dir), "train"), steps=steps, env=env)

    class PerfwatchProfileCallback(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped: Callback is Any
        def __init__(self) -> None:
            super().__init__()
            self.profiler, self.step_num = prof, 0
            self._ctx: contextlib.AbstractContextManager[None] | None = None

        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            self._ctx = self.profiler.step(self.step_num)
            self._ctx.__enter__()

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if self._ctx is not None:
                self._ctx.__exit__(None, None, None)
                self._ctx = None
            self.step_num += 1

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            self.profiler.close()

    return PerfwatchProfileCallback()
