"""Benchmark the parse stage on a freshly made profile of a small model.

Run: ``.venv/bin/python bench/parse.py [--steps N] [--repeats R]``. Makes a profile with
tests/xplane_factory.py (TF in a subprocess), parses it R times with tasks.parse.parse_profile and prints
parse time per MB of xplane and as a share of the profiled run's wall time (the profiled window as
timed inside the subprocess: profiler start .. stop incl. writing the xplane; no interpreter start,
TF import or warm-up). Last line: ``parse: <ms per MB> ms/MB, <pct>% of profiled-run wall time``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.parse import ALL_TOOLS, parse_profile  # noqa: E402
from tests.xplane_factory import make_profiles  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50, help="profiled steps (default 50)")
    ap.add_argument("--repeats", type=int, default=5, help="timed parses (default 5)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfwatch-bench-") as tmp:
        prof = make_profiles({"bench": (Path(tmp) / "logdir", True)}, steps=args.steps)["bench"]
        t0 = time.perf_counter()
        parsed = parse_profile(prof.logdir)
        cold_s = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            parse_profile(prof.logdir)
            times.append(time.perf_counter() - t0)
        per_tool = {}
        for tool in ALL_TOOLS:
            t0 = time.perf_counter()
            parse_profile(prof.logdir, tools=[tool])
            per_tool[tool] = time.perf_counter() - t0
    parse_s = statistics.median(times)
    mb = parsed.xplane_bytes / 2**20
    print(f"profile: {args.steps} steps, {parsed.xplane_bytes} bytes xplane ({mb:.3f} MiB), "
          f"{len(parsed.op_stats)} ops, avg step {parsed.avg_step_time_ms:.3f} ms (xprof), "
          f"{statistics.fmean(prof.step_ms):.3f} ms (runner timer)")
    print(f"profiled window: {prof.window_s * 1e3:.1f} ms wall; whole subprocess {prof.subprocess_s:.1f} s")
    print(f"parse (all tools): cold {cold_s * 1e3:.1f} ms, warm median {parse_s * 1e3:.1f} ms "
          f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}, n={len(times)})")
    print("per tool (one parse each): " + ", ".join(f"{t} {s * 1e3:.1f} ms" for t, s in per_tool.items()))
    print(f"parse: {parse_s * 1e3 / mb:.1f} ms/MB, {100 * parse_s / prof.window_s:.1f}% of profiled-run wall time")


if __name__ == "__main__":
    main()
