"""Benchmark: how far two fresh processes of one model differ, and whether interleaving their steps helps.

Run: ``.venv/bin/python bench/process_offset.py [--pairs 8] [--experiment threads|interleave]`` (about 40 s a
process pair on the 2-core dev machine). A plain Keras child process (``--child``: demo_mobilenet's version 1
network, MobileNetV2 alpha 0.35 at 96x96x3, 10 classes, ``train_on_batch`` at batch 32, seeded weights and
data, 10 warm-up steps) times ``N`` steps on each ``go N`` line on stdin. Per process pair, the unit is
``log(median B / median A)`` over 40 steps each, two processes of the same environment (A/A):

* ``threads`` (the default): both processes started together, their steps interleaved in blocks of 5 (ABBA,
  BAAB, ...), with ``TF_NUM_INTRAOP_THREADS`` = ``TF_NUM_INTEROP_THREADS`` = 1 and = 2 alternating pair by pair;
* ``interleave``: 2 threads, the pair run one process after the other (``seq``) or both together and interleaved
  (``int``), alternating in random order.

It prints each unit with the 1-minute load, then per group the sd of the units (the between-process spread the
cross-environment gate must sample: ``tasks.records.ENVIRONMENT_PROCESS_PAIRS``). Measured 2026-12-04 (8 pairs,
load 1.2-2.2): ``threads`` sd 0.031 (1 thread) and 0.069 (2); ``interleave`` sd 0.056 (seq) and 0.078 (int),
so interleaving does not shrink the spread: it is each process's own offset, not the host's drift.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import subprocess
import sys
import time

STEPS, BLOCK = 40, 5


def child() -> None:
    """The measured process: warm up, say ``ready``, then time ``N`` steps per ``go N`` line (ms, one line)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    net = keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None, classes=10)
    net.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    x = np.random.default_rng(0).random((32, 96, 96, 3)).astype("float32")
    y = np.random.default_rng(1).integers(0, 10, 32)
    for _ in range(10):
        net.train_on_batch(x, y)
    print("ready", flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line.split()[1])):
            t0 = time.perf_counter()
            net.train_on_batch(x, y)
            times.append((time.perf_counter() - t0) * 1e3)
        print(" ".join(f"{t:.3f}" for t in times), flush=True)


def _start(threads: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TF_NUM_INTRAOP_THREADS": threads, "TF_NUM_INTEROP_THREADS": threads}
    return subprocess.Popen(
        [sys.executable, __file__, "--child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )


def _ready(p: subprocess.Popen[str]) -> None:
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"


def _block(p: subprocess.Popen[str], n: int) -> list[float]:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(f"go {n}\n")
    p.stdin.flush()
    return [float(t) for t in p.stdout.readline().split()]


def _stop(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        p.wait()


def interleaved(threads: str) -> float:
    """One A/A unit, both processes alive, blocks of :data:`BLOCK` steps in ABBA/BAAB order."""
    a, b = _start(threads), _start(threads)
    _ready(a)
    _ready(b)
    got: dict[str, list[float]] = {"a": [], "b": []}
    for i in range(STEPS // BLOCK // 2):
        for p in (a, b, b, a) if i % 2 == 0 else (b, a, a, b):
            got["a" if p is a else "b"] += _block(p, BLOCK)
    _stop(a, b)
    return math.log(statistics.median(got["b"]) / statistics.median(got["a"]))


def sequential(threads: str) -> float:
    """One A/A unit, one process after the other, :data:`STEPS` steps each."""
    medians = []
    for _ in range(2):
        p = _start(threads)
        _ready(p)
        medians.append(statistics.median(_block(p, STEPS)))
        _stop(p)
    return math.log(medians[1] / medians[0])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8, help="process pairs per group")
    ap.add_argument("--experiment", choices=("threads", "interleave"), default="threads")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child()
        return
    groups = {"1": lambda: interleaved("1"), "2": lambda: interleaved("2")}
    if args.experiment == "interleave":
        groups = {"seq": lambda: sequential("2"), "int": lambda: interleaved("2")}
    out: dict[str, list[float]] = {g: [] for g in groups}
    print(f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    for k in range(args.pairs):
        for g in random.sample(list(groups), len(groups)):
            out[g].append(groups[g]())
            print(f"{g} {k}: {out[g][-1]:+.4f}, load1 {os.getloadavg()[0]:.2f}", flush=True)
    print(
        "process_offset: "
        + " ".join(f"{g}_sd={statistics.stdev(v):.3f} {g}_mean={statistics.mean(v):+.3f}" for g, v in out.items())
    )


if __name__ == "__main__":
    main()
