"""Benchmark: the demo model's benchmark matrix, end to end through the product, and its fixed cost per case.

Run: ``.venv/bin/python bench/matrix.py`` (the 8 cases of ``config/perfwatch.yaml``'s demo_mobilenet entry with
the config's own step counts, 100 measured + 5 profiled, on two "nights"). Options: ``--config`` another config,
``--cases N`` only the first N cases (at most 8 are run), ``--measured-steps``/``--profiled-steps`` other step counts,
``--version`` (default 1, the lighter MobileNetV2), ``--nights N`` (default 2), ``--cases-json FILE`` each case's
wall and stage times as JSON lines (what ``bench/fleet.py`` schedules).

What it does, in a fresh store under a temporary ``PERFWATCH_HOME`` (SQLite):

1. Builds the demo model store (``perfwatch demo build-store`` in a subprocess: TensorFlow is never imported here).
2. Expands the config's matrix (``tasks.stages.pipeline.load_config``) and runs each case through the seven
   stage functions of ``tasks.stages.pipeline`` in order, as ``run_case`` and each DAG task do (one case after
   the other; a failing case is reported and the next one runs), timing each stage (wall s). It does this once
   per night, in the same store: night 1 is a first night (every warm-up process runs, every XLA case compiles
   in its warm-up and loads the compiled step in its profiled run), night 2 a night on which nothing changed
   (the same model bytes and environment: each case's warm-up is reused, ``Case.warmup_reuse_days``, and only
   the profiled-run process starts).
3. Reads back from the store what each run recorded: the measured and profiled step times (``step_samples``),
   median step time (train) or p99 latency (infer/tflite: the per-batch times are the measured steps),
   throughput (examples/s at the median) and the telemetry summary (``telemetry_samples``: host CPU %
   and peak RSS, GPU utilization and power where NVML is present; "absent" when the run has none).

Per case it prints the figures, the stage times and the share of its wall time spent in timed or profiled
steps; per night, where all the wall time went (``breakdown``: the steps, and inside each runner process its
start and imports, TensorFlow's import, model load, cold step, warm-up steps, the measuring loop's and the
profiler's own cost, read from the runner's ``phases_s``; the other stages) and
``night N: cases=<n> ok=<n> wall=<s> s overhead=<pct>%``. Overhead = 1 - (sum of measured and profiled step
times) / (wall of all stages of all cases). Last line, for the last night (a nightly run of an unchanged
matrix), with the first night's overhead beside it::

    matrix: cases=<n> ok=<n> wall=<s> s overhead=<pct>% first_night_overhead=<pct>%

Last run (2026-11-30, v1, 320 measured + 5 profiled steps, 1-min load 1.1-1.8, 2 CPUs, 33 min):
``matrix: cases=8 ok=8 wall=930 s overhead=28.8% first_night_overhead=40.6%``; with ``--measured-steps 100``
(load 0.8-1.6, 17 min): ``overhead=50.4% first_night_overhead=67.1%``. What dominates the rest: TensorFlow's
import in each runner process (about 12 s), then the cold steps (an XLA training case's is 16.5-19.9 s, trace and
compile, against 5.6-8.1 s without XLA).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
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
        rows = c.execute(
            text(
                "SELECT device, COUNT(*), AVG(utilization_pct), MAX(memory_bytes), AVG(power_w) "
                "FROM telemetry_samples WHERE run_id = :r GROUP BY device ORDER BY device"
            ),
            {"r": run_id},
        ).all()
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


def _phases(path: Path) -> dict[str, float]:
    """A runner result's ``phases_s`` plus ``process`` (its ``wall_s`` from import to result: the rest of the
    stage's wall is the interpreter's start and module imports), from ``result.json``; {} when absent."""
    if not path.exists():
        return {}
    r = json.loads(path.read_text())
    return {**(r.get("phases_s") or {}), "runner_wall": float(r.get("wall_s") or 0.0)}


def run_one(case: Any, settings: Any, night: int) -> dict[str, Any]:
    """Run one case through the seven stage functions; returns its figures (or its error) and where its
    wall time went: per stage (s), and inside the warm-up and profiled-run processes (``phases_s``)."""
    from tasks.records import RunContext
    from tasks.stages import pipeline
    from tasks.stages.registry import STAGES

    ctx = RunContext(
        dag_id="bench_matrix",
        dag_run_id=f"night{night}__" + dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f"),
        trigger="test",
        case=case,
    )
    stages: dict[str, float] = {}
    procs: dict[str, dict[str, float]] = {}
    bundle: dict[str, Any] = {"ctx": ctx.to_xcom()}
    t_case = time.perf_counter()
    error = None
    for stage in STAGES:
        name = stage.id
        t0 = time.perf_counter()
        try:
            bundle = pipeline.run_stage(bundle, name, settings).to_xcom()
        except Exception as e:  # noqa: BLE001 - a failing case is a figure of the bench, not its end
            error = f"{name}: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
            break
        finally:
            stages[name] = time.perf_counter() - t0
        if name == "warm-up" and not bundle["warmup"].get("reused_from_run_id"):
            procs["warm-up"] = _phases(pipeline.work_dir(settings, ctx, create=False) / "warmup" / "result.json")
        if name == "profiled-run":
            procs["profiled-run"] = _phases(Path(bundle["run"]["samples_path"]))
    out = {
        "case": case.name,
        "mode": case.mode,
        "wall_s": time.perf_counter() - t_case,
        "stages": stages,
        "procs": procs,
        "error": error,
        "steps_s": 0.0,
        "measured_s": 0.0,
        "profiled_s": 0.0,
        "warmup_reused": bool((bundle.get("warmup") or {}).get("reused_from_run_id")),
    }
    if error is None:
        run_id = bundle["archived"]["run_id"]
        steps = _steps(settings.database_url, run_id)
        measured = steps.get("measured", [])
        out.update(
            run_id=run_id,
            median_ms=statistics.median(measured),
            p99_ms=_p99(measured),
            throughput_eps=bundle["run"]["throughput_eps"],
            verdict=bundle["verdict"]["verdict"],
            measured_s=sum(measured) / 1000,
            profiled_s=sum(steps.get("profiled", [])) / 1000,
            steps_s=(sum(measured) + sum(steps.get("profiled", []))) / 1000,
            telemetry=_telemetry(settings.database_url, run_id),
        )
    return out


def breakdown(results: list[dict[str, Any]]) -> dict[str, float]:
    """Where the wall time of all cases went (s): the timed and profiled steps (step times, our timer); per
    runner process (warm-up, profiled run) its start (interpreter and module imports: the stage's wall minus
    the runner's own), TensorFlow's import, model load, cold step (trace/compile), warm-up steps, and in the
    profiled run the measuring loop's own cost (loop wall minus step times: telemetry, the timer) and the
    profiler's (window wall minus its steps: profiler start/stop, the XSpace written); the other stages
    (pull, fingerprint, parse, baseline-compare, archive), and the stage glue around the runner (store reads)."""
    out: dict[str, float] = {"timed and profiled steps": sum(r["measured_s"] + r["profiled_s"] for r in results)}

    def add(key: str, v: float) -> None:
        out[key] = out.get(key, 0.0) + v

    for r in results:
        for stage, wall in r["stages"].items():
            ph = r["procs"].get(stage)
            if stage not in ("warm-up", "profiled-run"):
                add("other stages", wall)
                continue
            if not ph:  # a reused warm-up (no process), or a failed one
                add(f"{stage}: no runner process (reused)" if r["warmup_reused"] else f"{stage}: failed", wall)
                continue
            ends = wall - ph["runner_wall"] - ph.get("import_tf", 0.0)
            add(f"{stage}: process start, imports, stage glue", ends)
            for k in ("import_tf", "load_model", "cold_step", "warmup_steps"):
                add(f"{stage}: {k}", ph.get(k, 0.0))
            if stage == "profiled-run":
                add("profiled-run: measuring loop beyond step times", ph.get("measured_steps", 0.0) - r["measured_s"])
                add("profiled-run: profiler start/stop, XSpace write", ph.get("profiled_window", 0.0) - r["profiled_s"])
            rest = ph["runner_wall"] - sum(
                ph.get(k, 0.0) for k in ("load_model", "cold_step", "warmup_steps", "measured_steps", "profiled_window")
            )
            add(f"{stage}: rest of the process", rest)
    return out


def _print_case(r: dict[str, Any]) -> None:
    stages = " ".join(f"{k}={v:.1f}" for k, v in r["stages"].items())
    if r["error"]:
        print(f"  {r['case']:<30} FAILED after {r['wall_s']:.1f} s: {r['error']}\n    stages (s): {stages}", flush=True)
        return
    figure = (
        f"p99 latency {r['p99_ms']:.2f} ms (median {r['median_ms']:.2f} ms)"
        if r["mode"] != "train"
        else f"median step {r['median_ms']:.2f} ms (p99 {r['p99_ms']:.2f} ms)"
    )
    reused = ", warm-up reused" if r["warmup_reused"] else ""
    print(
        f"  {r['case']:<30} run {r['run_id']}: {figure}, {r['throughput_eps']:.1f} examples/s, verdict "
        f"{r['verdict']}; wall {r['wall_s']:.1f} s, steps {r['steps_s']:.1f} s "
        f"({100 * r['steps_s'] / r['wall_s']:.0f}%){reused}\n    stages (s): {stages}\n"
        f"    telemetry: {r['telemetry']}",
        flush=True,
    )


def night(n: int, cases: list[Any], settings: Any, cases_json: Path | None = None) -> tuple[int, int, float, float]:
    """Run every case once (night ``n``), print per case and the breakdown; returns (cases, ok, wall s,
    overhead %). With ``cases_json``, appends one JSON line per case as it ends: ``night``, ``case``, ``mode``,
    ``wall_s``, ``stages`` (s per stage id), ``steps_s``, ``warmup_reused``, ``error`` and ``load`` (1-min load
    at its end), the per-case durations ``bench/fleet.py`` schedules."""
    print(f"night {n}: host load at start {_loadavg()}", flush=True)
    results = []
    for case in cases:
        results.append(run_one(case, settings, n))
        _print_case(results[-1])
        if cases_json is not None:
            r = results[-1]
            keep = ("case", "mode", "wall_s", "stages", "steps_s", "warmup_reused", "error")
            line = {"night": n, **{k: r[k] for k in keep}, "load": float(_loadavg().split()[0])}
            with cases_json.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
    wall = sum(r["wall_s"] for r in results)
    steps = sum(r["steps_s"] for r in results)
    overhead = 100 * (1 - steps / wall) if wall > 0 else float("nan")
    parts = breakdown(results)
    print(f"night {n}: where the {wall:.1f} s went (s, % of wall):")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"    {k:<58} {v:8.1f}  {100 * v / wall:5.1f}%")
    ok = sum(1 for r in results if r["error"] is None)
    print(
        f"night {n}: cases={len(results)} ok={ok} wall={wall:.0f} s overhead={overhead:.1f}%; host load at end "
        f"{_loadavg()}",
        flush=True,
    )
    return len(results), ok, wall, overhead


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "perfwatch.yaml")
    ap.add_argument("--model", default="demo_mobilenet", help="the config entry whose matrix runs")
    ap.add_argument("--cases", type=int, default=MAX_CASES, help=f"run the first N cases (at most {MAX_CASES})")
    ap.add_argument("--measured-steps", type=int, default=None, help="default: the config's (320 for the demo)")
    ap.add_argument("--profiled-steps", type=int, default=None, help="default: the config's")
    ap.add_argument("--version", default="1")
    ap.add_argument(
        "--nights",
        type=int,
        default=2,
        help="run the matrix this many times in one store (default 2: a first night, then a night "
        "on which nothing changed)",
    )
    ap.add_argument(
        "--cases-json",
        type=Path,
        default=None,
        help="append each case's wall and stage times to this file as it ends (JSON lines; bench/fleet.py reads it)",
    )
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
    overrides: dict[str, Any] = {"version": args.version}
    overrides.update(
        {
            k: v
            for k, v in (("measured_steps", args.measured_steps), ("profiled_steps", args.profiled_steps))
            if v is not None
        }
    )
    cases = [c for c in load_config(args.config, overrides=overrides) if c.model == args.model]
    cases = cases[: min(args.cases, MAX_CASES)]
    if not cases:
        print(f"no case of model {args.model!r} in {args.config}", file=sys.stderr)
        return 2
    print(
        f"host load at start: {_loadavg()}; {os.cpu_count()} CPUs; store {home}; {len(cases)} cases of "
        f"{args.model} v{args.version}, {cases[0].measured_steps} measured + {cases[0].profiled_steps} profiled "
        f"steps each, {args.nights} night(s)",
        flush=True,
    )
    t0 = time.perf_counter()
    subprocess.run(
        [str(Path(sys.executable).parent / "perfwatch"), "demo", "build-store"],
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
    )
    print(f"model store built in {time.perf_counter() - t0:.1f} s (not counted below)", flush=True)
    nights = [night(n, cases, settings, args.cases_json) for n in range(1, args.nights + 1)]
    n_cases, ok, wall, overhead = nights[-1]
    first = f" first_night_overhead={nights[0][3]:.1f}%" if len(nights) > 1 else ""
    print(f"matrix: cases={n_cases} ok={ok} wall={wall:.0f} s overhead={overhead:.1f}%{first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
