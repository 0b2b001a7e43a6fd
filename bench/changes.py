"""Benchmark: change points and the creep guard on nightly series built from this machine's real noise.

Run: ``.venv/bin/python bench/changes.py [--trials 400] [--seed 0]`` (a few minutes on the 2-core machine).

Data: the real per-process step times in ``bench/data/detection_samples.json`` (collected by
``bench/detection.py --collect``: MobileNetV2 α=0.35, batch 16, each process a fresh runner). The
processes used are the 12 ``history`` processes (100 measured steps each) and the baseline (A) side of
the 6 ``paired`` processes (256 steps each; the B side shares A's process and is left out): 18
independent processes whose medians differ by about 8% (the run-to-run drift a nightly series sees).

A **night** is one run: a process drawn at random, its steps resampled with replacement (100 of
them, as collected) and their median taken — the between-process drift and the within-process
noise of a median, both real. A **series** is 30–60 nights (drawn uniformly). Scenarios, each
``--trials`` series:

* ``none``: no change (false alarms);
* ``step3`` / ``step5`` / ``step10``: every night from night ``N - 12`` on is slower by 3/5/10%;
* ``creep``: from night 10 on, every night is 0.5% slower than the one before (compounded).

Each series is checked **night by night as the product does** (``tasks.services.trend``): on night n
the change points of the first n runs (``tasks.analysis.changes.detect_change_points`` with the
product's defaults) that the first n-1 runs did not have (``unseen``, as ``new_change_points``), and
the creep guard (``creep_guard``) of the newest ``CREEP_RUNS`` runs against the ``CREEP_RUNS`` runs up
to ``CREEP_WINDOW_DAYS`` nights earlier (every run accepted: a creep passes every nightly verdict);
``alerts`` says whether that night alerts.

Figures: false alarm = share of ``none`` series with any alert; detect_step5 = share of ``step5``
series where a slower change point within 2 runs of the step is first reported at most 5 nights after
it (the step's own run is night 1); median_delay = median nights to that report among the ``step5``
series that got one in the 12 nights; detect_creep = share of ``creep`` series with any alert by
their last night. Targets (issue 16): false alarms <= 1% per series, a 5% step found within 5 nights
in >= 90% of series. Last line::

    changes: false_alarm=<pct>% detect_step5=<pct>% median_delay=<nights> detect_creep=<pct>%
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.analysis.changes import (  # noqa: E402
    CREEP_RUNS,
    CREEP_WINDOW_DAYS,
    SAME_CHANGE_RUNS,
    alerts,
    creep_guard,
    detect_change_points,
    unseen,
)

DATA = ROOT / "bench" / "data" / "detection_samples.json"
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


def processes(path: Path = DATA) -> list[np.ndarray]:
    """The independent processes' step times (ms): the ``history`` ones and the A side of the ``paired`` ones."""
    d = json.loads(path.read_text())
    out = [np.asarray(p["steps_ms"], float) for p in d["history"]]
    out += [np.asarray([t for b in p["blocks"] for t in b["a_ms"]], float) for p in d["paired"]]
    return out


def night(rng: np.random.Generator, procs: list[np.ndarray]) -> float:
    """One nightly run's median step time (ms): a random process, its steps resampled."""
    p = procs[rng.integers(len(procs))]
    return float(np.median(rng.choice(p, size=STEPS_PER_NIGHT, replace=True)))


def series(rng: np.random.Generator, procs: list[np.ndarray], kind: str, size: float) -> tuple[np.ndarray, int]:
    """A nightly series (ms) of 30–60 nights with the scenario's change, and the change's first night."""
    n = int(rng.integers(30, 61))
    x = np.array([night(rng, procs) for _ in range(n)])
    start = n
    if kind == "step":
        start = n - AFTER_STEP
        x[start:] *= 1 + size
    elif kind == "creep":
        start = CREEP_START
        x[start:] *= (1 + size) ** np.arange(1, n - start + 1)
    return x, start


def check_nightly(x: np.ndarray, start: int) -> dict:
    """Run the nightly trend check on every prefix; return the first alert night and the first night a
    slower change point near ``start`` was reported (1 = the step's own run), or None."""
    ids = list(range(len(x)))
    prev: list = []
    first_alert = first_found = None
    for n in range(1, len(x) + 1):
        now = detect_change_points(x[:n], ids[:n])
        new = unseen(now, prev)
        prev = now
        creep = None
        if n >= CREEP_WINDOW_DAYS + CREEP_RUNS:
            creep = creep_guard(
                x[n - CREEP_RUNS : n].tolist(), x[n - CREEP_WINDOW_DAYS - CREEP_RUNS : n - CREEP_WINDOW_DAYS].tolist()
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400, help="series per scenario")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    procs = processes()
    meds = np.array([np.median(p) for p in procs])
    print(
        f"data: {len(procs)} processes from {DATA.relative_to(ROOT)}; process medians {meds.min():.1f}–"
        f"{meds.max():.1f} ms, sd of log medians {np.std(np.log(meds), ddof=1):.3f}"
    )
    print(
        f"load average at start: {os.getloadavg()[0]:.2f} (1 min); {args.trials} series per scenario, seed {args.seed}"
    )
    t0 = time.perf_counter()
    res: dict[str, list[dict]] = {}
    for name, (kind, size) in SCENARIOS.items():
        res[name] = []
        for _ in range(args.trials):
            x, start = series(rng, procs, kind, size)
            res[name].append({**check_nightly(x, start), "n": len(x)})
        alarm = np.mean([r["first_alert"] is not None for r in res[name]])
        found = [r["found_after"] for r in res[name] if r["found_after"] is not None]
        line = f"{name:>7}: any alert {100 * alarm:5.1f}%"
        if kind == "step":
            within5 = np.mean([r["found_after"] is not None and r["found_after"] <= 5 for r in res[name]])
            line += (
                f" | change point at the step within 5 nights {100 * within5:5.1f}%, within {AFTER_STEP} "
                f"{100 * len(found) / len(res[name]):5.1f}%, median delay "
                + (f"{np.median(found):.0f}" if found else "—")
                + " nights"
            )
        print(line, flush=True)
    false_alarm = 100 * np.mean([r["first_alert"] is not None for r in res["none"]])
    step5 = res["step5"]
    detect5 = 100 * np.mean([r["found_after"] is not None and r["found_after"] <= 5 for r in step5])
    delays = [r["found_after"] for r in step5 if r["found_after"] is not None]
    creep = 100 * np.mean([r["first_alert"] is not None for r in res["creep"]])
    print(f"took {time.perf_counter() - t0:.0f} s; load average at end: {os.getloadavg()[0]:.2f}")
    print(
        f"changes: false_alarm={false_alarm:.1f}% detect_step5={detect5:.1f}% "
        f"median_delay={np.median(delays) if delays else float('nan'):.0f} detect_creep={creep:.1f}%"
    )


if __name__ == "__main__":
    main()
