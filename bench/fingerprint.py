"""Benchmark: what the env-fingerprint stage pays, as the stage pays it.

Run: ``.venv/bin/python bench/fingerprint.py [-n 5] [--python PATH]``. Times N calls of
``tasks.stages.fingerprint.take_fingerprint_in`` (the stage's own call): each starts a fresh
``python -m tasks.runner.probe`` in the runner interpreter (``--python``, default this one), so the
wall time includes interpreter start, imports, reading TensorFlow's facts from its package (its
framework library loaded for the C++ settings; ``import tensorflow`` is never run), NVML, host and
package facts, and the JSON hand-back. Also times, once, what importing TensorFlow would add (a fresh
``python -c "import tensorflow"``), the cost the probe used to pay. Reports min / median / max in
ms and the 1-minute load average before and after (``os.getloadavg``): the figures scale with it.
Budget: median < 5000 ms. Last line: ``fingerprint: <median ms> ms load=<1-min load>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.stages.fingerprint import take_fingerprint_in  # noqa: E402

BUDGET_MS = 5000.0


def main() -> None:
    """Print each stage call's wall time, the TF import for reference, then the machine-readable line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5, help="timed fingerprints (default 5)")
    parser.add_argument("--python", default=sys.executable, help="runner interpreter (default: this one)")
    parser.add_argument(
        "--no-import-reference",
        action="store_true",
        help="skip timing `import tensorflow` (15-30 s on the 2-core dev machine)",
    )
    opts = parser.parse_args()
    load_before = os.getloadavg()[0]
    times = []
    for i in range(opts.n):
        t = time.perf_counter()
        fp = take_fingerprint_in(opts.python, timeout_s=600)
        times.append((time.perf_counter() - t) * 1e3)
        print(f"fingerprint {i + 1}: {times[-1]:.0f} ms (subprocess, whole stage call)")
    if not opts.no_import_reference:
        t = time.perf_counter()
        subprocess.run(
            [opts.python, "-c", "import tensorflow"],
            check=True,
            capture_output=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        print(
            f"reference: a fresh `import tensorflow` takes {(time.perf_counter() - t) * 1e3:.0f} ms "
            "(what the probe no longer pays)"
        )
    load_after = os.getloadavg()[0]
    median = statistics.median(times)
    print(
        f"n={opts.n} min={min(times):.0f} ms median={median:.0f} ms max={max(times):.0f} ms "
        f"budget={BUDGET_MS:.0f} ms {'OK' if median < BUDGET_MS else 'OVER BUDGET'}; "
        f"1-min load {load_before:.2f} -> {load_after:.2f} on {os.cpu_count()} CPUs"
    )
    print(
        f"comparability_key={fp.comparability_key} tensorflow={fp.data['tensorflow']['version']} "
        f"gpu.nvml={fp.data['gpu']['nvml']}"
    )
    print(f"fingerprint: {median:.0f} ms load={max(load_before, load_after):.2f}")


if __name__ == "__main__":
    main()
