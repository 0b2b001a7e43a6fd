"""Benchmark: the demo model's benchmark matrix, end to end through the product, and its fixed cost per case.

Run: ``.venv/bin/python bench/matrix.py`` (the 8 cases of ``config/perfwatch.yaml``'s demo_mobilenet entry,
``--measured-steps 30``: 26 min on the 2-core dev machine at load 6-9; 30-140 s per case without XLA, 7.5-11 min
with XLA, whose training step compiles for about 2 min on this CPU and then runs 3-7x slower than without). Options: ``--config`` another config, ``--cases N``
only the first N cases (at most 8 are run), ``--measured-steps``, ``--profiled-steps``, ``--version``
(default 1, the lighter MobileNetV2).

What it does, in a fresh store under a temporary ``PERFWATCH_HOME`` (SQLite):

1. Builds the demo model store (``perfwatch demo build-store`` in a subprocess: TensorFlow is never imported here).
2. Expands the config's matrix (``tasks.stages.pipeline.load_config``) and runs each case through the seven
   stage functions of ``tasks.stages.pipeline`` in order, as ``run_case`` and each DAG task do (one case after
   the other; a failing case is reported and the next one runs), timing each stage (wall s).
3. Reads back from the store what each run recorded: the measured and profiled step times (``step_samples``),
   median step time (train) or p99 latency (infer/tflite: the per-batch times are the measured steps),
   throughput (examples/s at the median) and the telemetry summary (``telemetry_samples``: host CPU %
   and peak RSS, GPU utilization and power where NVML is present; "absent" when the run has none).

Per case it prints the figures, the stage times and the share of its wall time spent in timed or profiled
steps. Overhead = 1 - (sum of measured and profiled step times) / (wall of all stages of all cases): what a
matrix multiplies beyond the steps it times (warm-up steps, process starts, TF import, model load, tracing,
xprof parsing, GX, the store). The stage that takes most of the non-step time is named. Last line::

    matrix: cases=<n> ok=<n> wall=<s> s overhead=<pct>%
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MAX_CASES = 8


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _p99(values: list[float]) -> float | None:
    """Nearest-rank p99 (as ``sql/queries/sweep.sql``)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = -(-99 * len(ordered) // 100)  # ceil(0.99 n), 1-based
    return ordered[rank - 1]


def _telemetry(url: str, run_id: int) -> str:
    """A one-line summary of the run's telemetry samples, or ``absent``."""
    from sqlalchemy import inspect, text

    from tasks.store import get_engine

    engine = get_engine(url)
    if "telemetry_samples" not in inspect(engine).get_table_names():
        return "absent (no telemetry table in this store)"
    with engine.connect() as c:
        rows = c.execute(text("SELECT device, COUNT(*), AVG(utilization_pct), MAX(memory_bytes), AVG(power_w) "
                              "FROM telemetry_samples WHERE run_id = :r GROUP BY device ORDER BY device"),
                         {"r": run_id}).all()
    if not rows:
        return "absent (the run stored no telemetry samples)"
    parts = []
    for device, n, util, mem, power in rows:
        part = f"{device}: {n} samples"
        if util is not None:
            part += f", mean util {util:.0f}%"
        if mem is not None:
            part += f", peak mem {mem / 2**20:.0f} MiB"
        if power is not None:
            part += f", mean power {power:.1f} W"
        parts.append(part)
    return "; ".join(parts)


def _steps(url: str, run_id: int) -> dict[str, list[float]]:
    from sqlalchemy import select

    from tasks.store import session_scope
    from tasks.store.schema import StepSample

    with session_scope(url) as s:
        rows = s.execute(select(StepSample.phase, StepSample.step_time_ms).where(StepSample.run_id == run_id)).all()
    out: dict[str, list[float]] = {}
    for phase, ms in rows:
        out.setdefault(phase, []).append(ms)
    return out


def run_one(case: Any, settings: Any) -> dict[str, Any]:
    """Run one case through the seven stage functions; returns its figures (or its error)."""
    from tasks.records import RunContext
    from tasks.stages import pipeline

    ctx = RunContext(dag_id="bench_matrix", dag_run_id=dt.datetime.now(dt.UTC).strftime("bench__%Y%m%dT%H%M%S%f"),
                     trigger="test", case=case)
    stages: dict[str, float] = {}
    bundle: dict[str, Any] = {"ctx": ctx.to_xcom()}
    t_case = time.perf_counter()
    error = None
    for name, stage in zip(pipeline.STAGES, (pipeline.pull, pipeline.fingerprint, pipeline.warmup, pipeline.profile,
                                             pipeline.parse, pipeline.compare, pipeline.archive), strict=True):
        t0 = time.perf_counter()
        try:
            bundle = stage(bundle, settings)
        except Exception as e:  # noqa: BLE001 - a failing case is a figure of the bench, not its end
            error = f"{name}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
            break
        finally:
            stages[name] = time.perf_counter() - t0
    out = {"case": case.name, "mode": case.mode, "wall_s": time.perf_counter() - t_case, "stages": stages,
           "error": error, "steps_s": 0.0}
    if error is None:
        run_id = bundle["archived"]["run_id"]
        steps = _steps(settings.database_url, run_id)
        measured = steps.get("measured", [])
        out.update(run_id=run_id, median_ms=statistics.median(measured), p99_ms=_p99(measured),
                   throughput_eps=bundle["run"]["throughput_eps"], verdict=bundle["verdict"]["verdict"],
                   steps_s=(sum(measured) + sum(steps.get("profiled", []))) / 1000,
                   telemetry=_telemetry(settings.database_url, run_id))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "perfwatch.yaml")
    ap.add_argument("--model", default="demo_mobilenet", help="the config entry whose matrix runs")
    ap.add_argument("--cases", type=int, default=MAX_CASES, help=f"run the first N cases (at most {MAX_CASES})")
    ap.add_argument("--measured-steps", type=int, default=30)
    ap.add_argument("--profiled-steps", type=int, default=3)
    ap.add_argument("--version", default="1")
    args = ap.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="perfwatch-bench-matrix-"))
    os.environ["PERFWATCH_HOME"] = str(home)
    for var in ("PERFWATCH_DATABASE_URL", "PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK"):
        os.environ.pop(var, None)
    from tasks.settings import Settings
    from tasks.stages.pipeline import load_config
    from tasks.store import migrate

    settings = Settings.from_env()
    migrate(settings.database_url)
    overrides = {"version": args.version, "measured_steps": args.measured_steps, "profiled_steps": args.profiled_steps}
    cases = [c for c in load_config(args.config, overrides=overrides) if c.model == args.model]
    cases = cases[:min(args.cases, MAX_CASES)]
    if not cases:
        print(f"no case of model {args.model!r} in {args.config}", file=sys.stderr)
        return 2
    print(f"host load at start: {_loadavg()}; store {home}; {len(cases)} cases of {args.model} v{args.version}, "
          f"{args.measured_steps} measured + {args.profiled_steps} profiled steps each", flush=True)
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "perfwatch"), "demo", "build-store"], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    build_s = time.perf_counter() - t0
    print(f"model store built in {build_s:.1f} s (not counted below)", flush=True)

    results = []
    for case in cases:
        r = run_one(case, settings)
        results.append(r)
        stages = " ".join(f"{k}={v:.1f}" for k, v in r["stages"].items())
        if r["error"]:
            print(f"{r['case']:<32} FAILED after {r['wall_s']:.1f} s: {r['error']}\n    stages (s): {stages}", flush=True)
            continue
        figure = (f"p99 latency {r['p99_ms']:.2f} ms (median {r['median_ms']:.2f} ms)" if r["mode"] != "train"
                  else f"median step {r['median_ms']:.2f} ms (p99 {r['p99_ms']:.2f} ms)")
        print(f"{r['case']:<32} run {r['run_id']}: {figure}, {r['throughput_eps']:.1f} examples/s, verdict "
              f"{r['verdict']}; wall {r['wall_s']:.1f} s, steps {r['steps_s']:.1f} s "
              f"({100 * r['steps_s'] / r['wall_s']:.0f}%)\n    stages (s): {stages}\n    telemetry: {r['telemetry']}",
              flush=True)

    wall = sum(r["wall_s"] for r in results)
    steps = sum(r["steps_s"] for r in results)
    overhead = 100 * (1 - steps / wall) if wall > 0 else float("nan")
    per_stage: dict[str, float] = {}
    for r in results:
        for k, v in r["stages"].items():
            per_stage[k] = per_stage.get(k, 0.0) + v
    ranked = sorted(per_stage.items(), key=lambda kv: -kv[1])
    print("stage totals (s): " + ", ".join(f"{k} {v:.1f}" for k, v in ranked))
    print(f"steps timed or profiled: {steps:.1f} s of {wall:.1f} s; the stages that take longest: "
          + ", ".join(f"{k} ({v:.1f} s)" for k, v in ranked[:2]))
    print(f"host load at end: {_loadavg()}")
    ok = sum(1 for r in results if r["error"] is None)
    print(f"matrix: cases={len(results)} ok={ok} wall={wall:.0f} s overhead={overhead:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
