"""Benchmark: the nightly as the DAG judges it, on real processes: a release's paired gate, change points, and the
paired gate that confirms a tentative slowdown before it alerts (issue 36, item 4 and its nightly target).

Run: ``.venv/bin/python bench/nightly.py [--trials 200] [--nights quiet|busy|mixed]`` (minutes on the 2-core dev
machine), after ``bench/processes.py --collect`` wrote ``bench/data/processes_samples.json``.

**Data**: the A/A paired processes of ``bench/data/processes_samples.json`` (``bench/gates.py``'s CNN against
itself, each a fresh runner process of 40 ABBA pairs, per load level: ``0`` nothing added, ``busy1`` one busy
loop per core). A process is both a night's run (its 80 steps of one version: the A and B steps) and a process
of a gate (its 40 pairs).

**A series** (as ``bench/changes.py``): 30-60 nights. A new version is released every ``--release-every`` nights
(default 7; the first at a random night), so a series holds several releases. Scenarios, ``--trials`` series each:

* ``none``: every release is as fast as the one before (false alarms: any alert);
* ``step5`` (``--step``): the release nearest ``AFTER_STEP`` nights before the end is 5% slower, and every
  version after it keeps the slowdown (detection: an alert on its night or within the next 4, "within 5 nights").

**A night**, judged as the DAG judges it:

1. *Its run.* The night's load level (``--nights``: ``quiet``, ``busy``, or ``mixed``: either, equally likely);
   a random process of that level, its 80 steps resampled with replacement, their median times the night's true
   factor (1, or 1.05 from the slower release on): one value of the nightly series (``--metric``: wall or CPU
   time; default the product's choice, ``calibration.history_metric`` on the drawn processes' medians: CPU time
   on both levels of the 2026-12-04 samples, whose quiet wall-time medians spread 9.4% with one
   process 4.5 sd out: the bench prints both metrics' spread).
2. *The release gate.* When the night's version is not the accepted baseline's, the run gets the paired gate
   (``RunContext.pairs_with``): up to ``K`` (``Case.paired_processes``, 6) processes drawn from the night's level,
   side B slowed by the true ratio of the two versions, looked at and judged by the product's functions
   (``bench/processes.py``'s ``gate``: ``verdict.process_look_decides``, ``judge_noise``, ``decide``).
   ``regression`` alerts; ``pass`` or ``improvement`` makes the version the baseline (``auto_accept``);
   ``inconclusive`` leaves the old baseline, so the next night gates the version again. A night of the
   baseline's own version is accepted (its history verdict is not modelled here).
3. *The trend.* On the series so far, ``changes.detect_change_points`` with the product's defaults: a change point
   newly confirmed alerts (``changes.alerts``, with the creep guard as ``bench/changes.py`` runs it); each
   tentative slowdown gets the paired gate ``changes.confirm_choice`` plans (the version before the point beside
   the newest, at the night's level; none when both are one version), whose ``regression`` alerts
   (``changes.confirm_outcome``). The confirming gate's own run does not join the series here.

**Figures** per scenario: the share of series with any alert (``none``: false alarms; ``step5``: an alert before
the step counts as a false alarm of that series, shown apart), the share of ``step5`` series alerted within 5
nights of the step and the median delay, what alerted (release gate, confirming gate, change point, creep), and
the **cost per case per night**: runner processes and their wall time (s, from the processes' own ``wall_s``:
start, model loads, warm-up and steps), the nightly run plus every gate that night, mean over all nights. Last
line::

    nightly: nights=<kind> metric=<m> false_alarm=<pct>% detect_step5=<pct>% median_delay=<n> processes_per_night=<x>
    wall_s_per_night=<s> load1=<mean load of the processes>

Targets (issue 36): a 5% step found within 5 nights in >= 80% of series (moonshot 90%), <= 1% false alarms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import processes as bench_processes  # noqa: E402  (bench/processes.py)

from tasks.analysis.calibration import history_metric  # noqa: E402
from tasks.analysis.changes import (  # noqa: E402
    CREEP_RUNS,
    CREEP_WINDOW_DAYS,
    alerts,
    confirm_choice,
    confirm_outcome,
    confirmed,
    creep_guard,
    detect_change_points,
    unseen,
)
from tasks.records import Case  # noqa: E402

DATA = bench_processes.DATA
LEVELS = {"quiet": ("0",), "busy": ("busy1",), "mixed": ("0", "busy1")}
AFTER_STEP = 12
STEP = 0.05


def load(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The A/A processes of ``path`` per load level (``bench/processes.py --collect``'s file)."""
    data = json.loads(path.read_text())
    out: dict[str, list[dict[str, Any]]] = {}
    for p in data["processes"]:
        if p.get("variant", "A/A") == "A/A":
            out.setdefault(p["level"], []).append(p)
    return out


def _median(p: dict[str, Any], metric: str) -> float:
    keys = ("a_ms", "b_ms") if metric == "wall" else ("a_cpu_ms", "b_cpu_ms")
    return float(np.median([x for k in keys for x in p[k]]))


def night_value(rng: np.random.Generator, p: dict[str, Any], metric: str, factor: float) -> float:
    """One nightly run's median (ms): the process's steps of one version (A and B of an A/A process) resampled."""
    keys = ("a_ms", "b_ms") if metric == "wall" else ("a_cpu_ms", "b_cpu_ms")
    steps = np.asarray([x for k in keys for x in p[k]], float)
    return float(np.median(steps[rng.integers(0, len(steps), len(steps))])) * factor


def one_series(
    rng: np.random.Generator,
    procs: dict[str, list[dict[str, Any]]],
    levels: tuple[str, ...],
    scenario: str,
    *,
    metric: str,
    release_every: int,
    case: Case,
) -> dict[str, Any]:
    """One nightly series checked night by night (module docstring): the first alert's night and cause, the
    step's night (None in ``none``), and the processes and runner wall time spent per night."""
    n = int(rng.integers(30, 61))
    first = int(rng.integers(0, release_every))
    releases = list(range(first, n, release_every))
    version = [sum(r <= i for r in releases) for i in range(n)]  # 0 before the first release
    step_at = None
    if scenario == "step5":
        step_at = min(releases, key=lambda r: abs(r - (n - AFTER_STEP)))
    factor = {v: (1 + STEP) if step_at is not None and v >= version[step_at] else 1.0 for v in range(len(releases) + 1)}
    series_metric = "median_step_ms" if metric == "wall" else "median_cpu_ms"
    k = case.paired_processes

    def gate(level: str, a: int, b: int) -> dict[str, Any]:
        drawn = [procs[level][j] for j in rng.integers(0, len(procs[level]), k)]
        return bench_processes.gate(drawn, case, factor[b] / factor[a])

    values: list[float] = []
    accepted = 0
    prev: list = []
    spent_procs: list[int] = []
    spent_wall: list[float] = []
    first_alert: int | None = None
    cause = None
    for i in range(n):
        level = levels[int(rng.integers(len(levels)))]
        p = procs[level][int(rng.integers(len(procs[level])))]
        values.append(night_value(rng, p, metric, factor[version[i]]))
        n_procs, wall = 1, float(p["wall_s"])
        why = []
        if version[i] != accepted:  # the release gate: the night's version against the accepted baseline's
            g = gate(level, accepted, version[i])
            n_procs, wall = n_procs + g["k"], wall + g["wall_s"]
            if g["verdict"] == "regression":
                why.append("release gate")
            elif g["verdict"] in ("pass", "improvement"):
                accepted = version[i]
        else:
            accepted = version[i]
        ids = list(range(i + 1))
        points = detect_change_points(values, ids, metric=series_metric)
        now = confirmed(points)
        new = unseen(now, prev)
        prev = now
        creep = None
        if i + 1 >= CREEP_WINDOW_DAYS + CREEP_RUNS:
            creep = creep_guard(
                values[i + 1 - CREEP_RUNS :],
                values[i + 1 - CREEP_WINDOW_DAYS - CREEP_RUNS : i + 1 - CREEP_WINDOW_DAYS],
                metric=series_metric,
            )
        said = alerts(new, creep)
        if said:
            why.append("change point" if new else "creep")
        for cp in points:
            choice = confirm_choice(
                cp,
                before_version=str(version[cp.index - 1] + 1),
                before_key="k",
                version=str(version[i] + 1),
                key="k",
                cross_environment=False,
            )
            if choice is None or choice.kind is None:
                continue
            g = gate(level, version[cp.index - 1], version[i])
            n_procs, wall = n_procs + g["k"], wall + g["wall_s"]
            alert, _ = confirm_outcome(f"run {cp.run_id}", g["verdict"], g["ratio"], g["low"], g["high"], i)
            if alert:
                why.append("confirming gate")
        spent_procs.append(n_procs)
        spent_wall.append(wall)
        if why and first_alert is None:
            first_alert, cause = i, why[0]
    return {
        "n": n,
        "step_at": step_at,
        "first_alert": first_alert,
        "cause": cause,
        "procs_per_night": statistics.mean(spent_procs),
        "wall_per_night": statistics.mean(spent_wall),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trials", type=int, default=200, help="series per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nights", choices=tuple(LEVELS), default="quiet")
    ap.add_argument("--metric", choices=("wall", "cpu"), help="default: wall for quiet nights, else cpu")
    ap.add_argument("--release-every", type=int, default=7, help="nights between releases")
    ap.add_argument("--k", type=int, default=6, help="processes per gate at most (Case.paired_processes)")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args(argv)
    if not args.data.is_file():
        ap.error(f"{args.data}: no such samples file (bench/processes.py --collect writes it)")
    procs = load(args.data)
    levels = LEVELS[args.nights]
    missing = [lv for lv in levels if len(procs.get(lv, [])) < args.k]
    if missing:
        ap.error(f"{args.data}: fewer than {args.k} A/A processes at level(s) {missing}")
    used = [p for lv in levels for p in procs[lv]]
    rule = history_metric(  # the product's choice of the series' metric, on these processes' medians
        [("1", _median(p, "wall"), _median(p, "cpu")) for p in used], gpu=False, candidate_cpu=True, baselines_cpu=True
    )
    metric = args.metric or ("cpu" if rule.metric == "cpu" else "wall")
    pairs = len(procs[levels[0]][0]["a_ms"])
    case = Case(model="bench", paired_processes=args.k, paired_blocks=args.k * pairs, paired_block_steps=1)
    load1 = statistics.mean(p["load1"] for p in used)
    print(
        f"data: {args.data.name}, levels {', '.join(f'{lv} ({len(procs[lv])} processes)' for lv in levels)}, "
        f"load1 {min(p['load1'] for p in used):.1f}-{max(p['load1'] for p in used):.1f} (mean {load1:.2f}), "
        f"metric {metric}; a release every {args.release_every} nights, gates of at most K = {args.k} processes of "
        f"{pairs} pairs; {args.trials} series per scenario, seed {args.seed}; load average now "
        f"{os.getloadavg()[0]:.2f}\nthe product's rule on these processes' medians (calibration.history_metric): "
        f"{rule.reason}"
    )
    for m in ("wall", "cpu"):  # the drift between processes the series sees, and its tails
        logs = np.log([_median(p, m) for p in used])
        z = np.abs(logs - logs.mean()) / logs.std()
        print(f"  {m}: sd of the log medians {logs.std():.3f}, the farthest process {z.max():.1f} sd from the mean")
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    res: dict[str, list[dict[str, Any]]] = {}
    for scenario in ("none", "step5"):
        res[scenario] = [
            one_series(rng, procs, levels, scenario, metric=metric, release_every=args.release_every, case=case)
            for _ in range(args.trials)
        ]
    none, step = res["none"], res["step5"]
    false_alarm = sum(r["first_alert"] is not None for r in none) / len(none)
    early = sum(r["first_alert"] is not None and r["first_alert"] < r["step_at"] for r in step) / len(step)
    delays = [
        r["first_alert"] - r["step_at"] + 1
        for r in step
        if r["first_alert"] is not None and r["first_alert"] >= r["step_at"]
    ]
    within5 = sum(d <= 5 for d in delays) / len(step)
    causes = Counter(r["cause"] for r in none if r["cause"])
    step_causes = Counter(r["cause"] for r in step if r["cause"])
    procs_night = statistics.mean(r["procs_per_night"] for r in none + step)
    wall_night = statistics.mean(r["wall_per_night"] for r in none + step)
    one = statistics.median(p["wall_s"] for p in used)
    print(f"none : any alert {false_alarm:.1%} of {len(none)} series")
    print(
        f"step5: alerted within 5 nights of the step {within5:.1%}, at all after it "
        f"{len(delays) / len(step):.1%} (median delay {statistics.median(delays) if delays else math.nan:.0f} "
        f"nights); alerted before the step {early:.1%}"
    )
    print(
        "first alerts by cause: none "
        + (", ".join(f"{c} {n}" for c, n in causes.most_common()) or "-")
        + "; step5 "
        + (", ".join(f"{c} {n}" for c, n in step_causes.most_common()) or "-")
    )
    print(
        f"cost per case per night: {procs_night:.2f} runner processes, {wall_night:.0f} s of runner wall time "
        f"(a night without a gate: 1 process, median {one:.1f} s)"
    )
    print(f"took {time.perf_counter() - t0:.0f} s; load average at end: {os.getloadavg()[0]:.2f}")
    print(
        f"nightly: nights={args.nights} metric={metric} false_alarm={100 * false_alarm:.1f}% "
        f"detect_step5={100 * within5:.1f}% median_delay={statistics.median(delays) if delays else math.nan:.0f} "
        f"processes_per_night={procs_night:.2f} wall_s_per_night={wall_night:.0f} load1={load1:.2f}"
    )


if __name__ == "__main__":
    main()
