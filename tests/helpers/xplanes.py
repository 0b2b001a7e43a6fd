"""Produce real TensorFlow profiles (``*.xplane.pb``) for tests and benchmarks.

TensorFlow runs only in a fresh subprocess (never imported here), exactly as the runner does it:
a tiny Keras model (Conv2D + Dense on 32x32x3, batch 8), a ``@tf.function`` train step pulling from a
prefetched ``tf.data`` iterator, warm-up steps, then K steps under ``tf.profiler.experimental.start``
... ``stop()`` with each step wrapped in ``Trace("train", step_num=i, _r=1)`` (or without a Trace when
``step_markers=False``: the "No step marker observed" case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_SCRIPT = r"""
import json, sys, time
import tensorflow as tf
steps, jobs = int(sys.argv[1]), json.loads(sys.argv[2])  # jobs: [[logdir, markers], ...]
tf.random.set_seed(0)
model = tf.keras.Sequential([
    tf.keras.Input((32, 32, 3)),
    tf.keras.layers.Conv2D(8, 3, activation="relu"),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(10),
])
opt = tf.keras.optimizers.SGD(0.01)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
x = tf.random.uniform((64, 32, 32, 3))
y = tf.random.uniform((64,), maxval=10, dtype=tf.int32)
it = iter(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8).prefetch(2))

@tf.function
def train_step(iterator):
    xb, yb = next(iterator)
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

for _ in range(3):
    train_step(it).numpy()
results = []
for logdir, markers in jobs:
    step_ms = []
    t_window = time.perf_counter()
    tf.profiler.experimental.start(logdir)
    try:
        for i in range(steps):
            t0 = time.perf_counter()
            if markers:
                with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    train_step(it).numpy()
            else:
                train_step(it).numpy()
            step_ms.append((time.perf_counter() - t0) * 1e3)
    finally:
        tf.profiler.experimental.stop()
    results.append({"step_ms": step_ms, "window_s": time.perf_counter() - t_window})
print("PERFWATCH_RESULT " + json.dumps(results))
"""


@dataclass(frozen=True)
class GeneratedProfile:
    """A profile written by a real TF run.

    logdir: the directory passed to ``tf.profiler.experimental.start``; xplane_paths: the
    ``plugins/profile/*/*.xplane.pb`` files found there; step_ms: the script's own per-step timer
    for the profiled steps (ms); window_s: wall time of the profiled window incl. profiler start/stop and
    writing the xplane (s; excludes interpreter start, TF import and warm-up); subprocess_s: wall time
    of the whole subprocess that made it (s; shared when one subprocess made several profiles).
    """

    logdir: Path
    xplane_paths: list[Path]
    step_ms: list[float]
    window_s: float
    subprocess_s: float


def make_profiles(
    logdirs: dict[str, tuple[str | Path, bool]], *, steps: int = 5, timeout_s: float = 180
) -> dict[str, GeneratedProfile]:
    """Profile ``steps`` steps of the tiny model once per entry ``name -> (logdir, step_markers)``, all in
    ONE fresh Python process (one TF import), sequentially (one profiler session at a time).

    Raises RuntimeError (with the subprocess's stderr tail) when the run fails or an xplane is missing.
    """
    jobs = [[str(Path(d)), bool(m)] for d, m in logdirs.values()]
    # oneDNN on: TF turns it on by default only on some x86 CPUs (not on an AVX2-only AMD EPYC), and
    # without it the CPU allocator records no memory events, so memory_profile would depend on the CPU.
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "TF_ENABLE_ONEDNN_OPTS": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(steps), json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    subprocess_s = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PERFWATCH_RESULT ")]
    out = {}
    for (name, (logdir, _)), result in zip(
        logdirs.items(), json.loads(lines[-1].split(" ", 1)[1]) if proc.returncode == 0 and lines else [], strict=False
    ):
        paths = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))
        if paths:
            out[name] = GeneratedProfile(Path(logdir), paths, result["step_ms"], result["window_s"], subprocess_s)
    if len(out) != len(logdirs):
        raise RuntimeError(f"profile run failed (rc={proc.returncode}, made {sorted(out)}):\n{proc.stderr[-3000:]}")
    return out


_CACHE: dict[str, GeneratedProfile] = {}


def session_profiles(tmp_path_factory) -> dict[str, GeneratedProfile]:
    """The shared profiles of this pytest session, made once (one subprocess) under pytest's tmp dir:
    ``"markers"`` (5 steps with step markers) and ``"no_markers"`` (same run without Trace/_r=1).
    Tests must treat them as read-only (copy before changing anything)."""
    if not _CACHE:
        base = tmp_path_factory.mktemp("xplanes")
        _CACHE.update(make_profiles({"markers": (base / "markers", True), "no_markers": (base / "no_markers", False)}))
    return _CACHE


if __name__ == "__main__":  # manual use: python tests/xplane_factory.py LOGDIR [--no-markers]
    print(make_profiles({"p": (sys.argv[1], "--no-markers" not in sys.argv)})["p"])
