"""Benchmark: which op moved over the nights (issue 38, item 5) on a store built by the real stages.

Run: ``.venv/bin/python bench/op_changes.py --collect [--home DIR] [--v1 12] [--v2 6]`` (about 40 s a run on the
2-core dev machine), then ``.venv/bin/python bench/op_changes.py [--home DIR] [--trials 400]`` (seconds).

**Collect.** A fresh perfwatch home (``--home``, default ``bench/data/op_changes``; its ``perfwatch.db`` is the
store) gets the demo's model store (``perfwatch demo build-store``), then ``--v1`` runs of ``demo_mobilenet``
version 1 and ``--v2`` of version 2, each ``perfwatch run demo_mobilenet --version V --no-paired``: the seven
stages in a fresh process, as a nightly run without a release gate (version 2 is the demo's heavier model:
MobileNetV2 α=0.75 against α=0.35, every op grows). The host's 1-minute load average before each run is written
beside it (``runs.jsonl`` in the home).

**Real series.** ``perfwatch changes demo_mobilenet --ops`` as a user runs it: the op change points
(``tasks.services.op_changes``) of the version-1 runs alone (any is a false alarm) and of the whole series (the
ops that moved at the version-2 boundary).

**Resampled series.** Per-op figures need more series than one store holds, so ``--trials`` series of 30 nights
are drawn from the real runs (each night one real run's whole op table, with replacement, so the ops keep
their correlation within a run): ``none`` (all nights from version 1: false alarms = series with a confirmed op
change point; listed = with any, tentative and transient ones included) and ``step`` (nights from version 2 from
night 20 on: detection = the watched ops with a confirmed slower change point within 2 runs of night 20, by night
25). The pool is small (the runs of one store), so the resampled figures say how the rule behaves on this
machine's real op noise, and the real series above say what a user sees. Last line::

    op_changes: runs=<v1>+<v2> basis=<median_cpu_ms|median_step_ms> real_false=<n> real_moved=<k>/<watched>
    false_alarm=<pct>% listed=<pct>% detect=<pct>% load1=<mean>
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "demo_mobilenet"
NIGHTS, STEP_AT, WITHIN = 30, 20, 5


def collect(home: Path, v1: int, v2: int) -> None:
    """Build the store in ``home`` by the real stages (module docstring)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PERFWATCH_HOME": str(home)}
    env.pop("PERFWATCH_DATABASE_URL", None)
    exe = str(ROOT / ".venv" / "bin" / "perfwatch")
    subprocess.run([exe, "demo", "build-store"], env=env, check=True, capture_output=True)
    with (home / "runs.jsonl").open("a") as log:
        for version, n in (("1", v1), ("2", v2)):
            for i in range(n):
                load1 = os.getloadavg()[0]
                t0 = time.perf_counter()
                res = subprocess.run(
                    [exe, "run", MODEL, "--version", version, "--no-paired"], env=env, capture_output=True, text=True
                )
                wall = time.perf_counter() - t0
                line = {"version": version, "i": i, "rc": res.returncode, "load1": load1, "wall_s": round(wall, 1)}
                log.write(json.dumps(line) + "\n")
                log.flush()
                print(json.dumps(line), flush=True)


def analyse(home: Path, trials: int, seed: int, pvalues: list[float]) -> None:
    """Print the real and the resampled figures (module docstring)."""
    from tasks.analysis import changes
    from tasks.services.op_changes import op_change_table, op_series

    url = f"sqlite:///{home / 'perfwatch.db'}"
    loads = [json.loads(x) for x in (home / "runs.jsonl").read_text().splitlines() if x.strip()]
    load1 = statistics.mean(x["load1"] for x in loads) if loads else float("nan")
    print(
        f"store {url}: {len(loads)} runs collected, 1-min load before them: mean {load1:.2f}, "
        f"max {max((x['load1'] for x in loads), default=float('nan')):.2f}; load now {os.getloadavg()[0]:.2f}"
    )
    series = op_series(url, MODEL)
    ((case, s),) = series.items()
    versions = [r.version for r in s.runs]
    n1 = versions.count("1")
    print(f"case {case}: {len(s.runs)} runs with op tables ({n1} of version 1)")

    table, _ = op_change_table(url, MODEL, runs_before=s.runs[n1 - 1].started_at if n1 else None)
    real_false = len(table)
    print(f"real, version 1 only: {real_false} op change point(s)")
    if real_false:
        print(table[["op_name", "run_id", "ratio", "p_value", "status"]].to_string())
    table, _ = op_change_table(url, MODEL)
    watched = changes.watched_ops(s.per_run)
    first_v2 = s.runs[n1].run_id if n1 < len(s.runs) else None
    moved = table[(table["run_id"] == first_v2)] if first_v2 else table.iloc[0:0]
    print(
        f"real, the whole series: {len(table)} op change point(s), {moved['op_name'].nunique()} of "
        f"{len(watched)} watched ops at the first version-2 run ({first_v2})"
    )
    print(table[["op_name", "run_id", "version", "before_us", "after_us", "ratio", "status"]].to_string())

    v1 = [t for t, v in zip(s.per_run, versions, strict=True) if v == "1"]
    v2 = [t for t, v in zip(s.per_run, versions, strict=True) if v == "2"]
    if s.basis == "median_cpu_ms":  # each basis's op spread over the v1 runs, and what v2 read on each
        wall = [
            {k: x * r.median_step_ms / r.median_cpu_ms for k, x in t.items()}
            for t, r in zip(s.per_run, s.runs, strict=True)
        ]
        for basis, tables in (("CPU time", s.per_run), ("wall time", wall)):
            t1 = [t for t, v in zip(tables, versions, strict=True) if v == "1"]
            t2 = [t for t, v in zip(tables, versions, strict=True) if v == "2"]
            sds = [statistics.stdev(math.log(t[k]) for t in t1) for k in watched if all(k in t for t in t1)]
            ratios = [
                math.exp(statistics.mean(math.log(t[k]) for t in t2) - statistics.mean(math.log(t[k]) for t in t1))
                for k in watched
                if all(k in t for t in t1 + t2)
            ]
            print(
                f"split from {basis}: a watched op's sd of log over the v1 runs, median {statistics.median(sds):.3f}"
                + (f"; v2/v1 per op, median x{statistics.median(ratios):.2f}" if ratios else "")
            )
    for pvalue in pvalues or [None]:
        fa, li, det = resampled(v1, v2, trials, seed, pvalue)
        at = "the product's default" if pvalue is None else f"{pvalue:g} per op"
        print(
            f"resampled at {at}, {trials} series of {NIGHTS} nights: a confirmed op change point in {fa:.1f}% of the "
            f"no-change series (any listed: {li:.1f}%); {det:.1f}% of the watched ops found slower within {WITHIN} "
            "nights of a version-2 step"
        )
    print(
        f"op_changes: runs={n1}+{len(v2)} basis={s.basis} real_false={real_false} "
        f"real_moved={moved['op_name'].nunique()}/{len(watched)} false_alarm={fa:.1f}% listed={li:.1f}% "
        f"detect={det:.1f}% load1={load1:.2f}"
    )


def resampled(
    v1: list[dict], v2: list[dict], trials: int, seed: int, pvalue: float | None
) -> tuple[float, float, float]:
    """The resampled series (module docstring) at Otava's ``pvalue`` per op (None: the product's default): the % of
    no-change series with a confirmed op point, with any, and the % of watched ops found after a version-2 step."""
    from tasks.analysis import changes

    rng = random.Random(seed)
    false = listed = hits = watched_n = 0
    for _ in range(trials):
        nights = [rng.choice(v1) for _ in range(NIGHTS)]
        found = changes.op_change_points(nights, list(range(NIGHTS)), max_pvalue=pvalue)
        false += bool(changes.confirmed([f.point for f in found]))
        listed += bool(found)
        if v2:
            nights = [rng.choice(v1) for _ in range(STEP_AT)] + [rng.choice(v2) for _ in range(WITHIN)]
            ops = changes.watched_ops(nights)
            found = changes.op_change_points(nights, list(range(len(nights))), max_pvalue=pvalue)
            got = {
                f.op
                for f in found
                if f.point.slower and abs(f.point.index - STEP_AT) <= 2 and f.point.status == "confirmed"
            }
            hits += len(got)
            watched_n += len(ops)
    det = 100 * hits / watched_n if watched_n else float("nan")
    return 100 * false / trials, 100 * listed / trials, det


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collect", action="store_true")
    p.add_argument("--home", type=Path, default=ROOT / "bench" / "data" / "op_changes")
    p.add_argument("--v1", type=int, default=12)
    p.add_argument("--v2", type=int, default=6)
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-pvalue",
        type=float,
        action="append",
        help="Otava's threshold per op to resample at (repeatable; default: the product's, 2e-5 / the ops watched)",
    )
    a = p.parse_args()
    if a.collect:
        collect(a.home, a.v1, a.v2)
    else:
        analyse(a.home, a.trials, a.seed, a.max_pvalue or [])


if __name__ == "__main__":
    main()
