"""Benchmark: change points and the creep guard on nightly series built from this machine's real noise.

Run: ``.venv/bin/python bench/changes.py [--trials 400] [--seed 0]`` (a few minutes on the 2-core machine), or on
the per-process samples of both metrics: ``.venv/bin/python bench/changes.py --data busy [--metric wall|cpu|both]
[--nights quiet|mixed] [--samples PATH]`` (about twice as long with both metrics).

Data:

* ``--data detection`` (the default): the real per-process step times (wall time) in
  ``bench/data/detection_samples.json`` (collected by ``bench/detection.py --collect``: MobileNetV2 α=0.35,
  batch 16, each process a fresh runner): the 12 ``history`` processes (100 measured steps each) and the baseline
  (A) side of the 6 quiet ``paired`` processes (256 steps each; the B side shares A's process and is left out): 18
  independent processes whose medians differ by about 8% (the run-to-run drift a nightly series sees). The
  paired processes that ``bench/detection.py --collect-load`` added beside 1 and 3 busy processes per core
  (``load_level`` 1, 3: levels ``busy1``, ``busy3``) count only with ``--nights mixed``. Wall time only.
* ``--data busy``: the ``history`` processes of ``bench/data/busy_samples.json`` (``bench/busy.py --collect``:
  ``bench/gates.py``'s CNN, 100 measured steps per fresh runner process, per load level ``0``, ``busy1``,
  ``busy3``, ``tf`` (other TensorFlow jobs) and ``0-end``), each step's wall time (``wall_ms``) and the process's
  CPU time (``cpu_ms``, all threads, user + system): the two metrics of the same steps.

``--nights quiet`` (default) draws each night from the quiet processes only (levels ``0`` and ``0-end``),
``--nights mixed`` from the processes of every load level (each process equally likely): nights on a shared
host, some of them busy. ``--metric`` chooses the series: ``wall`` (median step time, the default of
``detection``), ``cpu`` (median CPU time per step) or ``both`` (the default of ``busy``): the same nights, the
same steps resampled, judged once on each metric, so the two columns differ only in the metric. The rule the
product applies to such a history (``tasks.analysis.calibration.history_metric`` on the drawn pool's process
medians, as if each were an accepted run of one version) is printed with them.

A **night** is one run: a process drawn at random, its steps resampled with replacement (100 of
them, as collected) and their median taken — the between-process drift and the within-process
noise of a median, both real. A **series** is 30–60 nights (drawn uniformly). Scenarios, each
``--trials`` series:

* ``none``: no change (false alarms);
* ``step3`` / ``step5`` / ``step10``: every night from night ``N - 12`` on is slower by 3/5/10% (both metrics by
  the same factor);
* ``creep``: from night 10 on, every night is 0.5% slower than the one before (compounded).

Each series is checked **night by night as the product does** (``tasks.services.trend``): on night n
the change points of the first n runs (``tasks.analysis.changes.detect_change_points`` with the
product's defaults) that are confirmed (``DEFAULT_MIN_RUNS_AFTER`` runs after them) and that the first n-1
runs did not have confirmed (``confirmed``, ``unseen``, as ``new_change_points``), and
the creep guard (``creep_guard``) of the newest ``CREEP_RUNS`` runs against the ``CREEP_RUNS`` runs up
to ``CREEP_WINDOW_DAYS`` nights earlier (every run accepted: a creep passes every nightly verdict);
``alerts`` says whether that night alerts.

Figures, per metric: false alarm = share of ``none`` series with any alert; detect_step5 = share of ``step5``
series where a slower change point within 2 runs of the step is first reported at most 5 nights after
it (the step's own run is night 1); median_delay = median nights to that report among the ``step5``
series that got one in the 12 nights; detect_creep = share of ``creep`` series with any alert by
their last night; and the load levels the nights came from. Targets (issue 16, issue 23): false alarms <= 1% per
series, a 5% step found within 5 nights in >= 90% of series. Last line (the default)::

    changes: false_alarm=<pct>% detect_step5=<pct>% median_delay=<nights> detect_creep=<pct>%

and with ``--data busy`` (or ``--nights mixed``) the data, the nights and each metric's keys prefixed::

    changes: data=busy nights=mixed wall_false_alarm=<pct>% wall_detect_step5=<pct>% ... cpu_detect_creep=<pct>%
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.analysis.calibration import history_metric  # noqa: E402
from tasks.analysis.changes import (  # noqa: E402
    CREEP_RUNS,
    CREEP_WINDOW_DAYS,
    SAME_CHANGE_RUNS,
    alerts,
    confirmed,
    creep_guard,
    detect_change_points,
    unseen,
)

DATA = ROOT / "bench" / "data" / "detection_samples.json"
BUSY_DATA = ROOT / "bench" / "data" / "busy_samples.json"
QUIET_LEVELS = ("0", "0-end")
#: the series each metric gives (tasks.analysis.changes.METRICS names)
SERIES = {"wall": "median_step_ms", "cpu": "median_cpu_ms"}
STEPS_PER_NIGHT = 100
AFTER_STEP = 12  # nights after a step's start in a step series
CREEP_START = 10
CREEP_PER_NIGHT = 0.005
SCENARIOS = {
    "none": ("none", 0.0),
    "step3": ("step", 0.03),
    "step5": ("step", 0.05),
    "step10": ("step", 0.10),
    "creep": ("creep", CREEP_PER_NIGHT),
}


@dataclass(frozen=True)
class Process:
    """One runner process: its load level, 1-minute load at its start, and per metric its steps (ms, step order;
    the metrics of one process have the same steps)."""

    level: str
    load1: float | None
    steps: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.steps.values())))


def detection_processes(path: Path = DATA) -> list[Process]:
    """The independent processes of ``detection_samples.json`` (wall time): the ``history`` ones and the A side of
    the ``paired`` ones, those collected under load (``load_level`` 1, 3) as levels ``busy1``, ``busy3``."""
    d = json.loads(path.read_text())
    out = [Process("0", p.get("load1"), {"wall": np.asarray(p["steps_ms"], float)}) for p in d["history"]]
    for p in d["paired"]:
        level = f"busy{p['load_level']}" if p.get("load_level") else "0"
        out.append(
            Process(level, p.get("load1"), {"wall": np.asarray([t for b in p["blocks"] for t in b["a_ms"]], float)})
        )
    return out


def busy_processes(path: Path = BUSY_DATA) -> list[Process]:
    """The ``history`` processes of ``busy_samples.json`` (``bench/busy.py --collect``): wall and CPU time per step."""
    d = json.loads(path.read_text())
    out = []
    for i, p in enumerate(d["history"]):
        wall, cpu = np.asarray(p["wall_ms"], float), np.asarray(p["cpu_ms"], float)
        if len(wall) != len(cpu) or not len(wall):
            raise ValueError(f"{path}: history[{i}] has {len(wall)} wall and {len(cpu)} CPU steps: expected the same")
        out.append(Process(str(p["level"]), p.get("load1"), {"wall": wall, "cpu": cpu}))
    return out


def pool(procs: list[Process], nights: str) -> list[Process]:
    """The processes nights are drawn from: the quiet ones (``quiet``) or all (``mixed``)."""
    return [p for p in procs if p.level in QUIET_LEVELS] if nights == "quiet" else list(procs)


def night(rng: np.random.Generator, procs: list[Process], metrics: list[str]) -> tuple[dict[str, float], str]:
    """One nightly run: a random process, its steps resampled (the same steps for every metric); per metric the
    median (ms), and the process's load level."""
    p = procs[rng.integers(len(procs))]
    idx = rng.choice(len(p), size=STEPS_PER_NIGHT, replace=True)
    return {m: float(np.median(p.steps[m][idx])) for m in metrics}, p.level


def series(
    rng: np.random.Generator, procs: list[Process], kind: str, size: float, metrics: list[str]
) -> tuple[dict[str, np.ndarray], int, list[str]]:
    """A nightly series of 30–60 nights per metric (ms) with the scenario's change, the change's first night, and
    each night's load level."""
    n = int(rng.integers(30, 61))
    drawn = [night(rng, procs, metrics) for _ in range(n)]
    x = {m: np.array([v[m] for v, _ in drawn]) for m in metrics}
    start = n
    for m in metrics:
        if kind == "step":
            start = n - AFTER_STEP
            x[m][start:] *= 1 + size
        elif kind == "creep":
            start = CREEP_START
            x[m][start:] *= (1 + size) ** np.arange(1, n - start + 1)
    return x, start, [level for _, level in drawn]


def check_nightly(x: np.ndarray, start: int, metric: str = "median_step_ms") -> dict:
    """Run the nightly trend check on every prefix; return the first alert night and the first night a
    slower change point near ``start`` was reported (1 = the step's own run), or None."""
    ids = list(range(len(x)))
    prev: list = []
    first_alert = first_found = None
    for n in range(1, len(x) + 1):
        now = confirmed(detect_change_points(x[:n], ids[:n], metric=metric))
        new = unseen(now, prev)
        prev = now
        creep = None
        if n >= CREEP_WINDOW_DAYS + CREEP_RUNS:
            creep = creep_guard(
                x[n - CREEP_RUNS : n].tolist(),
                x[n - CREEP_WINDOW_DAYS - CREEP_RUNS : n - CREEP_WINDOW_DAYS].tolist(),
                metric=metric,
            )
        if alerts(new, creep) and first_alert is None:
            first_alert = n
        if (
            first_found is None
            and n > start
            and any(cp.slower and abs(cp.index - start) <= SAME_CHANGE_RUNS for cp in new)
        ):
            first_found = n - start
    return {"first_alert": first_alert, "found_after": first_found}


def describe(procs: list[Process], metrics: list[str], source: str) -> list[str]:
    """What the nights are drawn from: per metric the process medians and their drift, per load level the
    processes and their mean 1-minute load, and the product's rule on them."""
    lines = [f"data: {len(procs)} processes from {source}"]
    for m in metrics:
        meds = np.array([np.median(p.steps[m]) for p in procs])
        sd = np.std(np.log(meds), ddof=1) if len(meds) > 1 else math.nan
        lines.append(
            f"  {m:>4}: process medians {meds.min():.1f}–{meds.max():.1f} ms, sd of log medians {sd:.3f} "
            "(between processes)"
        )
    for level, n in Counter(p.level for p in procs).items():
        loads = [p.load1 for p in procs if p.level == level and p.load1 is not None]
        lines.append(
            f"  level {level}: {n} processes, 1-min load at start {np.mean(loads):.1f}"
            if loads
            else f"  level {level}: {n} processes"
        )
    if all("cpu" in p.steps for p in procs):
        rule = history_metric(
            [("1", float(np.median(p.steps["wall"])), float(np.median(p.steps["cpu"]))) for p in procs],
            gpu=False,
            candidate_cpu=True,
            baselines_cpu=True,
        )
        lines.append(f"  the product's rule (calibration.history_metric) on these processes' medians: {rule.reason}")
    return lines


def summary(res: dict[str, list[dict]]) -> dict[str, float]:
    """The machine-readable figures of one metric's scenarios (module docstring)."""
    step5 = res["step5"]
    delays = [r["found_after"] for r in step5 if r["found_after"] is not None]
    return {
        "false_alarm": 100 * float(np.mean([r["first_alert"] is not None for r in res["none"]])),
        "detect_step5": 100 * float(np.mean([r["found_after"] is not None and r["found_after"] <= 5 for r in step5])),
        "median_delay": float(np.median(delays)) if delays else float("nan"),
        "detect_creep": 100 * float(np.mean([r["first_alert"] is not None for r in res["creep"]])),
    }


def _keys(fig: dict[str, float], prefix: str = "") -> str:
    return (
        f"{prefix}false_alarm={fig['false_alarm']:.1f}% {prefix}detect_step5={fig['detect_step5']:.1f}% "
        f"{prefix}median_delay={fig['median_delay']:.0f} {prefix}detect_creep={fig['detect_creep']:.1f}%"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trials", type=int, default=400, help="series per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--data", choices=("detection", "busy"), default="detection", help="which samples (default detection)"
    )
    ap.add_argument("--samples", type=Path, help="the samples file (default: bench/data/ of --data)")
    ap.add_argument("--metric", choices=("wall", "cpu", "both"), help="series (default: wall; both with --data busy)")
    ap.add_argument(
        "--nights", choices=("quiet", "mixed"), default="quiet", help="quiet processes only, or every load level"
    )
    args = ap.parse_args(argv)
    metric = args.metric or ("both" if args.data == "busy" else "wall")
    if args.data == "detection" and metric != "wall":
        ap.error("--data detection has wall time only: --metric cpu/both needs --data busy")
    path = args.samples or (BUSY_DATA if args.data == "busy" else DATA)
    if not path.is_file():
        ap.error(
            f"{path}: no such samples file" + (" (bench/busy.py --collect writes it)" if args.data == "busy" else "")
        )
    procs = pool((busy_processes if args.data == "busy" else detection_processes)(path), args.nights)
    if len(procs) < 2:
        ap.error(f"{path}: {len(procs)} process(es) for --nights {args.nights}: need at least 2")
    metrics = ["wall", "cpu"] if metric == "both" else [metric]
    source = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print("\n".join(describe(procs, metrics, f"{source}, nights {args.nights}")))
    print(
        f"load average at start: {os.getloadavg()[0]:.2f} (1 min); {args.trials} series per scenario, seed {args.seed}"
    )
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    res: dict[str, dict[str, list[dict]]] = {m: {} for m in metrics}
    levels: Counter[str] = Counter()
    for name, (kind, size) in SCENARIOS.items():
        for m in metrics:
            res[m][name] = []
        for _ in range(args.trials):
            x, start, drawn = series(rng, procs, kind, size, metrics)
            levels.update(drawn)
            for m in metrics:
                res[m][name].append({**check_nightly(x[m], start, SERIES[m]), "n": len(x[m])})
        for m in metrics:
            r = res[m][name]
            alarm = np.mean([t["first_alert"] is not None for t in r])
            found = [t["found_after"] for t in r if t["found_after"] is not None]
            line = f"{m:>4} {name:>7}: any alert {100 * alarm:5.1f}%"
            if kind == "step":
                within5 = np.mean([t["found_after"] is not None and t["found_after"] <= 5 for t in r])
                line += (
                    f" | change point at the step within 5 nights {100 * within5:5.1f}%, within {AFTER_STEP} "
                    f"{100 * len(found) / len(r):5.1f}%, median delay "
                    + (f"{np.median(found):.0f}" if found else "—")
                    + " nights"
                )
            print(line, flush=True)
    total = sum(levels.values())
    print("nights by load level: " + ", ".join(f"{lv} {100 * n / total:.0f}%" for lv, n in sorted(levels.items())))
    print(f"took {time.perf_counter() - t0:.0f} s; load average at end: {os.getloadavg()[0]:.2f}")
    figs = {m: summary(res[m]) for m in metrics}
    if args.data == "detection" and args.nights == "quiet":
        print(f"changes: {_keys(figs['wall'])}")
    else:
        print(f"changes: data={args.data} nights={args.nights} " + " ".join(_keys(figs[m], f"{m}_") for m in metrics))


if __name__ == "__main__":
    main()
