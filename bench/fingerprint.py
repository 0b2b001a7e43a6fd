"""Benchmark: cost of one env fingerprint, excluding the TensorFlow import.

Run: ``.venv/bin/python bench/fingerprint.py [-n N]``. Imports TensorFlow first (untimed, reported),
then times N ``take_fingerprint()`` calls. Last line: ``fingerprint: <median ms> ms``. Budget: < 2000 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.stages.fingerprint import take_fingerprint  # noqa: E402

BUDGET_MS = 2000.0


def main() -> None:
    """Print import time, per-call min/median/max in milliseconds, then the machine-readable line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=20, help="timed fingerprints (default 20)")
    n = parser.parse_args().n
    t0 = time.perf_counter()
    try:
        import tensorflow  # noqa: F401  (untimed: the fingerprint reuses the loaded module)
    except ImportError as exc:
        print(f"tensorflow not importable ({exc}); timing without it")
    print(f"tensorflow import (untimed): {(time.perf_counter() - t0) * 1e3:.0f} ms")
    t0 = time.perf_counter()
    take_fingerprint()  # first call also pays lazy imports inside TF submodules and pynvml
    print(f"first fingerprint: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fp = take_fingerprint()
        times.append((time.perf_counter() - t) * 1e3)
    median = statistics.median(times)
    print(f"n={n} min={min(times):.1f} ms median={median:.1f} ms max={max(times):.1f} ms "
          f"budget={BUDGET_MS:.0f} ms {'OK' if median < BUDGET_MS else 'OVER BUDGET'}")
    print(f"comparability_key={fp.comparability_key} gpu.nvml={fp.data['gpu']['nvml']}")
    print(f"fingerprint: {median:.1f} ms")


if __name__ == "__main__":
    main()
