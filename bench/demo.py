"""Benchmark: how long ``make demo`` takes, quiet and beside a background load (issue 36's demo targets: <= 4 min
quiet, <= 10 min on a busy host).

Run: ``.venv/bin/python bench/demo.py [--busy N]`` from the checkout: ``make demo`` as the README gives it, beside
``N`` single-threaded busy loops per core (``bench/gates.py``'s ``BackgroundLoad``, started ``LOAD_RAMP_S`` s before
and stopped after; 0: nothing added). The store under ``PERFWATCH_HOME`` is kept, so a second run is a second
``make demo`` (version 1 judged against the first run's). Prints the exit code, the wall time and the 1-minute
load at the start and end. Last line::

    demo: busy_per_core=<N> rc=<code> wall_s=<s> load1=<start>-<end>
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gates import BackgroundLoad  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LOAD_RAMP_S = 20


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--busy", type=int, default=0, help="busy loops per core beside the demo")
    ap.add_argument("--log", type=Path, default=Path("/tmp/perfwatch-bench-demo.log"), help="make demo's output")
    args = ap.parse_args(argv)
    n = args.busy * (os.cpu_count() or 1)
    with BackgroundLoad(n):
        if n:
            time.sleep(LOAD_RAMP_S)
        load0, t = os.getloadavg()[0], time.time()
        with args.log.open("w") as out:
            rc = subprocess.run(["make", "demo"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
        wall, load1 = time.time() - t, os.getloadavg()[0]
    print(f"make demo: exit {rc} in {wall:.0f} s beside {n} busy loops; output in {args.log}")
    print(f"demo: busy_per_core={args.busy} rc={rc} wall_s={wall:.0f} load1={load0:.1f}-{load1:.1f}")


if __name__ == "__main__":
    main()
