"""Benchmark the parse stage on the demo model, profiled by the real runner.

Run: ``.venv/bin/python bench/parse.py [--batch-size 16] [--measured-steps 50] [--profiled-steps 5]
[--repeats 3] [--store DIR]``.

1. Builds the demo model store (``tasks.runner.zoo.build_store``: MobileNetV2 α=0.35, 96×96, ``demo_mobilenet``
   v1) in a subprocess (it imports TensorFlow), under ``--store`` (kept, so a rerun skips it) or a
   temporary directory.
2. Runs the real runner (``tasks.runner.launch``, profile mode, fresh process) with the default Case's
   step counts: warm-up steps, measured steps (profiler off), then a profiled window with step markers.
3. Parses the xplane with ``tasks.stages.parse.parse_profile`` (all tools) once cold and ``--repeats`` times warm,
   and once per tool.

Reports parse time per MiB of xplane (ms/MB, 1 MB = 2**20 bytes) and as a share of the profiled run's wall
time, where that wall time is the runner's ``wall_s``: the whole runner process work (model load,
warm-up, measured steps, profiled window incl. writing the xplane) EXCLUDING interpreter start and the
TensorFlow import. The share of the profiled window alone is printed too. Last line:
``parse: <ms per MB> ms/MB, <pct>% of profiled-run wall time`` (warm median parse; target < 20%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.runner import RunnerSpec, launch  # noqa: E402
from tasks.runner.zoo import DEMO_MODEL  # noqa: E402
from tasks.stages.parse import ALL_TOOLS, parse_profile  # noqa: E402


def _build_demo_store(store: Path) -> Path:
    """Build the demo store in a fresh process (TensorFlow never runs in this one); return v1's file."""
    code = "import sys; from tasks.runner.zoo import build_store; print(build_store(sys.argv[1])[0])"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(store)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900
    )
    if proc.returncode != 0:
        raise SystemExit(f"building the demo store failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=16, help="examples per step (default 16, the Case default)")
    ap.add_argument("--warmup-steps", type=int, default=10, help="warm-up steps before measuring (default 10)")
    ap.add_argument("--measured-steps", type=int, default=50, help="measured steps (default 50, the Case default)")
    ap.add_argument("--profiled-steps", type=int, default=5, help="profiled steps (default 5, the Case default)")
    ap.add_argument("--repeats", type=int, default=3, help="timed warm parses (default 3)")
    ap.add_argument("--store", type=Path, default=None, help="demo model store dir (kept; default: temporary)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfwatch-bench-") as tmp:
        store = args.store or Path(tmp) / "models"
        t0 = time.perf_counter()
        model_file = _build_demo_store(store)
        build_s = time.perf_counter() - t0
        spec = RunnerSpec(
            mode="profile",
            model_path=str(model_file),
            out_dir=str(Path(tmp) / "run"),
            batch_size=args.batch_size,
            warmup_steps=args.warmup_steps,
            measured_steps=args.measured_steps,
            profiled_steps=args.profiled_steps,
        )
        t0 = time.perf_counter()
        result = launch(spec, sys.executable).model_dump(mode="json")
        process_s = time.perf_counter() - t0
        logdir = result["profile_dir"]
        t0 = time.perf_counter()
        parsed = parse_profile(logdir)
        cold_s = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            parse_profile(logdir)
            times.append(time.perf_counter() - t0)
        per_tool = {}
        for tool in ALL_TOOLS:
            t0 = time.perf_counter()
            parse_profile(logdir, tools=[tool])
            per_tool[tool] = time.perf_counter() - t0
    wall_s, window_s = result["wall_s"], result["profiled_window_s"]
    parse_s = statistics.median(times)
    mb = parsed.xplane_bytes / 2**20
    print(
        f"model: {DEMO_MODEL} v1 ({model_file.name}), batch {args.batch_size}, {args.warmup_steps} warm-up + "
        f"{args.measured_steps} measured + {args.profiled_steps} profiled steps (store built in {build_s:.1f} s)"
    )
    print(
        f"profile: {parsed.xplane_bytes} bytes xplane ({mb:.3f} MiB), {len(parsed.op_stats)} ops, "
        f"avg step {parsed.avg_step_time_ms:.2f} ms (xprof), median measured step "
        f"{statistics.median(result['measured_step_times_ms']):.2f} ms (runner timer)"
    )
    print(
        f"runner: wall_s {wall_s:.2f} s (process work excl. interpreter start and TF import), profiled window "
        f"{window_s:.2f} s, whole subprocess {process_s:.1f} s"
    )
    print(
        f"parse (all tools): cold {cold_s * 1e3:.1f} ms, warm median {parse_s * 1e3:.1f} ms "
        f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}, n={len(times)}); "
        f"{100 * parse_s / window_s:.1f}% of the profiled window"
    )
    print("per tool (one parse each): " + ", ".join(f"{t} {s * 1e3:.1f} ms" for t, s in per_tool.items()))
    print(f"parse: {parse_s * 1e3 / mb:.1f} ms/MB, {100 * parse_s / wall_s:.1f}% of profiled-run wall time")


if __name__ == "__main__":
    main()
