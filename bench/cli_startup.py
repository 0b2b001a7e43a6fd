"""Benchmark: wall time of ``perfwatch --help`` as a user pays it (a fresh process each time).

Run: ``.venv/bin/python bench/cli_startup.py [-n 10] [--args "--help"]``. Runs the installed console script
(``.venv/bin/perfwatch``, else ``tasks.cli.main:main`` in this interpreter) N times as a real subprocess, output
discarded, and reports min / median / max wall seconds (``time.perf_counter`` around the whole process:
interpreter start, imports, help rendering, exit) with the host's 1-minute load average before and after
(``os.getloadavg``) and the CPU count, since the figure scales with what else runs.
Target: median under 1 s on an idle machine. Last line: ``cli_startup: median=<s> s load=<1-min load>``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.0


def command(args: list[str]) -> list[str]:
    """The ``perfwatch`` console script of this checkout's venv (or of the running interpreter's)."""
    script = Path(sys.executable).with_name("perfwatch")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from tasks.cli.main import main; main()", *args]


def main() -> None:
    """Print each run's wall time, the summary, then the machine-readable line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=10, help="timed runs (default 10)")
    parser.add_argument("--args", default="--help", help="perfwatch arguments, one shell-quoted string")
    opts = parser.parse_args()
    cmd = command(shlex.split(opts.args))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    load_before = os.getloadavg()[0]
    subprocess.run(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True
    )  # warm the page cache
    times = []
    for i in range(opts.n):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        times.append(time.perf_counter() - t)
        print(f"run {i + 1}: {times[-1]:.3f} s")
    load_after = os.getloadavg()[0]
    median = statistics.median(times)
    print(
        f"`{' '.join(Path(cmd[0]).name if j == 0 else c for j, c in enumerate(cmd))}`: n={opts.n} "
        f"min={min(times):.3f} s median={median:.3f} s max={max(times):.3f} s (target < {TARGET_S:.0f} s idle); "
        f"1-min load {load_before:.2f} -> {load_after:.2f} on {os.cpu_count()} CPUs"
    )
    print(f"cli_startup: median={median:.3f} s load={max(load_before, load_after):.2f}")


if __name__ == "__main__":
    main()
