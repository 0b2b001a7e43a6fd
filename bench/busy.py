"""Benchmark: what load does to each metric a gate or the nightly history could decide on (issue 23, item 2).

Run: ``.venv/bin/python bench/busy.py --collect`` (real runner processes under loads the bench starts itself,
about 40 min on the 2-core dev machine; writes ``bench/data/busy_samples.json``), then
``.venv/bin/python bench/busy.py`` (the tables, from the committed samples, seconds; ``--trials N`` adds N
resampled gates per cell, table 3). ``--loads``, ``--reps``, ``--heads``, ``--pairs``, ``--history`` narrow or
widen the collection; ``--append`` adds to the samples file (``--heads 10``: A/A processes, the base against
itself).

**Models.** ``bench/gates.py``'s CNN (32x32x3, three convolutions, a 512-wide dense layer, batch 32, tens of ms
per training step here) as A, and variants that differ only in the width of the classifier head (300, 500,
1000 and 3000 classes against 10: about x1.03, x1.05, x1.10 and x1.3 more step time) as B. Built in a
subprocess; TensorFlow is never imported here.

**Load levels** (started and stopped by the bench, by process id): ``0`` (nothing added), ``busy1`` and
``busy3`` (``bench/gates.py``'s ``BackgroundLoad``: 1 and 3 single-threaded numpy loops per core), ``tf``
(its ``TFJobs``: ``TF_JOBS`` = 2 other TensorFlow training processes, default threading, each training a CNN
like the bench's in a loop: they contend for memory bandwidth and caches and spin TF's thread pools, unlike the
busy loops). The quiet level runs first and again last (``0`` and ``0-end``): the two together are the quiet
truth, and their difference shows the drift of the host itself over the collection.

**Paired processes.** Per load level, ``--reps`` runner processes per variant (the runner's ``paired`` mode,
A = the base, B = the variant, ``--pairs`` ABBA pairs of 1-step blocks, the order drawn per quadruple, as a
gate measures), each step's wall time (our timer), the process's CPU time (all threads, user + system) and
run-queue wait (schedstat) kept.

**History processes.** Per load level, ``--history`` separate runner processes of the base model (mode
``profile``, 10 warm-up steps, 100 measured steps, no profiler window), as the nightly runs measure: each
step's wall and CPU time.

**Tables** (every figure computed by the product's own functions: ``tasks.analysis.stats.compare_paired`` at
95%, ``stats.noise_scale``):

1. *Paired ratios per metric and load.* For each variant and load level, the wall-time ratio and the CPU-time
   ratio (pooled over the level's processes, 95% interval), their bias against the **quiet truth** (the
   wall-time ratio of the quiet processes: what a user waits for) and, for CPU time, against the quiet
   CPU-time ratio (what load alone moves), the robust pair scale of each metric (the gate's noise), and the
   level's mean 1-minute load and share of the CPU other processes took (the runner's ``HostLoad``).
   Also the exponent ``k = log(CPU ratio) / log(wall ratio)`` on the quiet host: how much more a change
   moves the CPU-time ratio than the wall time (CPU time sums the work of all threads).
2. *History drift per metric and load.* For the base model's separate processes: the between-process sd of
   the log median (the drift the history prior must absorb) per metric and load level, and how far each
   level's median moved from the quiet one (what a busy night does to a nightly series).

3. *Resampled gates* (``--trials``): per cell, gates built by a moving-block bootstrap (37-pair blocks) of a
   process's pairs, both metrics of the same pairs, looked at and stopped as the product does
   (``verdict.look_decides`` on the process's host load) and judged by ``verdict.judge_noise`` and
   ``verdict.decide``: verdict shares (the regression share is the false-alarm rate of A/A cells, the detection
   rate of the others), the share decided on CPU time, median pairs. The budget is the processes' length
   (``--pairs``, under the product's 320), and a trial is no longer than its process. Resampled: check it
   against real gates (``bench/gates.py``).

Last lines (machine-readable)::

    busy: cpu_load_bias_max=<pct>% wall_load_bias_max=<pct>% cpu_over_wall_k_max=<k> ...
    busy: history_drift wall=<sd> cpu=<sd> steadier=<wall|cpu>

(``cpu_load_bias_max``: the largest |CPU ratio at a load / quiet CPU ratio - 1| over variants and loads;
``wall_load_bias_max`` the same for wall time against the quiet truth.)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gates import (  # noqa: E402
    BASE_HEAD,
    BATCH,
    MODEL_SCRIPT,
    TF_JOBS,
    BackgroundLoad,
    TFJobs,
    loadavg,
    run_paired,
)

from tasks.analysis import stats  # noqa: E402

DATA = ROOT / "bench" / "data" / "busy_samples.json"
DEFAULT_HEADS = (300, 500, 1000, 3000)
DEFAULT_LOADS = ("0", "busy1", "busy3", "tf", "0-end")
RAMP_S = 8.0  #: seconds between starting a load and the first process
WARMUP_STEPS = 20  #: warm-up steps per version of a paired process (what gates.run_paired runs)
HISTORY_STEPS = 100


def load_for(level: str, cpus: int) -> BackgroundLoad:
    """The background load of a level name: ``0``/``0-end`` nothing, ``busyN`` N numpy loops per core,
    ``tf`` :data:`TF_JOBS` TensorFlow jobs. Raises ValueError for another name."""
    if level in ("0", "0-end"):
        return BackgroundLoad(0)
    if level.startswith("busy") and level[4:].isdigit():
        return BackgroundLoad(int(level[4:]) * cpus)
    if level == "tf":
        return TFJobs(TF_JOBS)
    raise ValueError(f"load level {level!r}: expected 0, 0-end, busy<N> or tf")


# ------------------------------------------------------------------------------------------- collecting


def build(store: Path, heads: Sequence[int]) -> dict[str, Path]:
    """Write the base (``h<BASE_HEAD>``) and each variant ``h<head>`` under ``store``; name -> model path."""
    out = {}
    for head in [BASE_HEAD, *heads]:
        path = store / f"h{head}.keras"
        subprocess.run(
            [sys.executable, "-c", MODEL_SCRIPT, str(head), str(path)],
            check=True,
            capture_output=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        out[f"h{head}"] = path
    return out


def paired_process(base: Path, variant: Path, pairs: int, work: Path) -> dict[str, Any]:
    """One runner process in paired mode (A = ``base``, B = ``variant``, 1-step blocks): its pairs as lists."""
    load1 = os.getloadavg()[0]
    t = time.time()
    r = run_paired(base, variant, pairs, work, sys.executable)
    return {
        "load1": load1,
        "loadavg_end": loadavg(),
        "wall_s": round(time.time() - t, 1),
        "host_load": r.host_load,
        "order": [b.order for b in r.blocks],
        **{k: [getattr(b, k)[0] if getattr(b, k) else None for b in r.blocks] for k in _PAIR_KEYS},
    }


_PAIR_KEYS = ("a_ms", "b_ms", "a_cpu_ms", "b_cpu_ms", "a_wait_ms", "b_wait_ms")


def history_process(model: Path, work: Path) -> dict[str, Any]:
    """One runner process in profile mode (no profiler window): per-step wall and CPU time of its steps."""
    from tasks.runner import RunnerSpec, launch

    load1 = os.getloadavg()[0]
    r = launch(
        RunnerSpec(
            mode="profile",
            model_path=str(model),
            out_dir=str(work),
            batch_size=BATCH,
            warmup_steps=10,
            measured_steps=HISTORY_STEPS,
            profiled_steps=0,
        ),
        sys.executable,
    )
    return {
        "load1": load1,
        "loadavg_end": loadavg(),
        "host_load": r.host_load,
        "wall_ms": r.measured_step_times_ms,
        "cpu_ms": r.measured_cpu_ms,
    }


def collect(
    path: Path, loads: Sequence[str], heads: Sequence[int], reps: int, pairs: int, history: int, *, append: bool = False
) -> dict:
    """Run every process (module docstring) and write the samples to ``path`` (JSON); returns them. ``append``:
    add the processes to those already in ``path`` (its ``meta`` gains a ``collections`` entry)."""
    cpus = os.cpu_count() or 1
    t0 = time.time()
    data: dict[str, Any] = {
        "meta": {
            "model": "bench/gates.py CNN 32x32x3 batch 32, classifier head widths (A: 10)",
            "heads": list(heads),
            "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpus": cpus,
            "pairs": pairs,
            "reps": reps,
            "warmup_steps": WARMUP_STEPS,
            "history_steps": HISTORY_STEPS,
            "tf_jobs": TF_JOBS,
        },
        "paired": [],
        "history": [],
    }
    if append:
        old = json.loads(path.read_text())
        old["meta"].setdefault("collections", []).append(data["meta"])
        data = {**old, "meta": old["meta"]}
    with tempfile.TemporaryDirectory(prefix="pw-busy-") as tmp:
        models = build(Path(tmp), heads)
        base = models[f"h{BASE_HEAD}"]
        for level in loads:
            with load_for(level, cpus):
                time.sleep(RAMP_S if level not in ("0", "0-end") else 0.0)
                print(f"\nload {level}: /proc/loadavg {loadavg()}", flush=True)
                for rep in range(reps):
                    for head in heads:
                        name = "A/A" if head == BASE_HEAD else f"h{head}"  # the base against itself
                        model = models[f"h{head}"]
                        p = paired_process(base, model, pairs, Path(tmp) / f"p-{level}-h{head}-{rep}")
                        p.update(level=level, variant=name, rep=rep, at_s=round(time.time() - t0, 1))
                        data["paired"].append(p)
                        print(f"  {_paired_line(p)}", flush=True)
                for i in range(history):
                    h = history_process(base, Path(tmp) / f"h-{level}-{i}")
                    h.update(level=level, rep=i, at_s=round(time.time() - t0, 1))
                    data["history"].append(h)
                    print(
                        f"  history[{i}]: wall median {statistics.median(h['wall_ms']):.2f} ms, CPU median "
                        f"{statistics.median(h['cpu_ms']):.2f} ms; load1 {h['load1']:.2f} -> {h['loadavg_end']}",
                        flush=True,
                    )
            path.write_text(json.dumps(data, separators=(",", ":")))
    (data["meta"]["collections"][-1] if append else data["meta"])["collect_s"] = round(time.time() - t0, 1)
    path.write_text(json.dumps(data, separators=(",", ":")))
    return data


def _paired_line(p: dict[str, Any]) -> str:
    w = _ratio(p["a_ms"], p["b_ms"])
    c = _ratio(p["a_cpu_ms"], p["b_cpu_ms"])
    other = (p.get("host_load") or {}).get("other_cpu_share")
    return (
        f"{p['variant']} rep {p['rep']}: wall x{w.ratio:.3f}, CPU x{c.ratio:.3f}; {p['wall_s']:.0f} s; load1 "
        f"{p['load1']:.2f}; other processes' CPU share {other if other is None else f'{other:.2f}'}"
    )


# ------------------------------------------------------------------------------------------- analysis


def _ratio(a: Sequence[float], b: Sequence[float]) -> stats.Comparison:
    """``stats.compare_paired`` at 95% over 1-step blocks (the product's paired estimator)."""
    return stats.compare_paired(list(a), list(b), tolerance=0.05, confidence=0.95)


def _scale(a: Sequence[float], b: Sequence[float]) -> float:
    return stats.noise_scale(np.log(np.asarray(b, float)) - np.log(np.asarray(a, float)))


def _pool(procs: Sequence[dict[str, Any]], a: str, b: str) -> tuple[list[float], list[float]]:
    return [x for p in procs for x in p[a]], [x for p in procs for x in p[b]]


def _quiet(level: str) -> bool:
    return level in ("0", "0-end")


def paired_table(data: dict[str, Any]) -> tuple[list[str], dict[str, float]]:
    """Table 1 (module docstring) as lines, and the summary figures."""
    procs = data["paired"]
    variants = list(dict.fromkeys(p["variant"] for p in procs))
    levels = list(dict.fromkeys(p["level"] for p in procs))
    lines = [
        "| variant | load | 1-min load | other CPU share | wall ratio (95% CI) | wall bias vs quiet truth | "
        "CPU ratio (95% CI) | CPU bias vs quiet CPU | CPU vs quiet truth | pair scale wall / CPU | procs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worst = {"cpu_load_bias_max": 0.0, "wall_load_bias_max": 0.0, "cpu_over_wall_k_max": 0.0, "cpu_scale_max": 0.0}
    for v in variants:
        quiet = [p for p in procs if p["variant"] == v and _quiet(p["level"])]
        if not quiet:
            continue
        truth = _ratio(*_pool(quiet, "a_ms", "b_ms"))
        qcpu = _ratio(*_pool(quiet, "a_cpu_ms", "b_cpu_ms"))
        k = math.log(qcpu.ratio) / math.log(truth.ratio) if abs(math.log(truth.ratio)) > 0.005 else math.nan
        if not math.isnan(k):
            worst["cpu_over_wall_k_max"] = max(worst["cpu_over_wall_k_max"], k)
        for level in levels:
            cell = [p for p in procs if p["variant"] == v and p["level"] == level]
            if not cell:
                continue
            w = _ratio(*_pool(cell, "a_ms", "b_ms"))
            c = _ratio(*_pool(cell, "a_cpu_ms", "b_cpu_ms"))
            sw = statistics.median(_scale(p["a_ms"], p["b_ms"]) for p in cell)
            sc = statistics.median(_scale(p["a_cpu_ms"], p["b_cpu_ms"]) for p in cell)
            wb, cb, ct = w.ratio / truth.ratio - 1, c.ratio / qcpu.ratio - 1, c.ratio / truth.ratio - 1
            if not _quiet(level):
                worst["cpu_load_bias_max"] = max(worst["cpu_load_bias_max"], abs(cb))
                worst["wall_load_bias_max"] = max(worst["wall_load_bias_max"], abs(wb))
            worst["cpu_scale_max"] = max(worst["cpu_scale_max"], sc)
            other = [s for p in cell if (s := (p.get("host_load") or {}).get("other_cpu_share")) is not None]
            lines.append(
                f"| {v} | {level} | {statistics.fmean(p['load1'] for p in cell):.1f} | "
                + (f"{statistics.fmean(other):.2f}" if other else "-")
                + f" | x{w.ratio:.3f} [{w.ci_low:.3f}, {w.ci_high:.3f}] | {wb:+.1%} | x{c.ratio:.3f} "
                f"[{c.ci_low:.3f}, {c.ci_high:.3f}] | {cb:+.1%} | {ct:+.1%} | {sw:.3f} / {sc:.3f} | {len(cell)} |"
            )
        lines.append(f"|  | quiet: k = log CPU / log wall = {k:.2f} |  |  |  |  |  |  |  |  |  |")
    return lines, worst


def history_table(data: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Table 2 (module docstring) as lines, and the summary figures."""
    hist = data.get("history") or []
    levels = list(dict.fromkeys(h["level"] for h in hist))
    lines = [
        "| load | processes | wall median (ms) | CPU median (ms) | between-process sd wall / CPU (log) | "
        "median vs quiet wall / CPU | 1-min load |",
        "|---|---|---|---|---|---|---|",
    ]
    quiet = [h for h in hist if _quiet(h["level"])]
    qw = statistics.median(math.log(statistics.median(h["wall_ms"])) for h in quiet) if quiet else math.nan
    qc = statistics.median(math.log(statistics.median(h["cpu_ms"])) for h in quiet) if quiet else math.nan
    for level in levels:
        cell = [h for h in hist if h["level"] == level]
        lw = [math.log(statistics.median(h["wall_ms"])) for h in cell]
        lc = [math.log(statistics.median(h["cpu_ms"])) for h in cell]
        sd = f"{statistics.stdev(lw):.3f} / {statistics.stdev(lc):.3f}" if len(cell) > 1 else "-"
        lines.append(
            f"| {level} | {len(cell)} | {math.exp(statistics.fmean(lw)):.2f} | {math.exp(statistics.fmean(lc)):.2f} "
            f"| {sd} | {math.exp(statistics.fmean(lw) - qw) - 1:+.1%} / {math.exp(statistics.fmean(lc) - qc) - 1:+.1%} "
            f"| {statistics.fmean(h['load1'] for h in cell):.1f} |"
        )
    # the drift a nightly series sees when nights differ in load: sd of the log medians over all processes
    allw = [math.log(statistics.median(h["wall_ms"])) for h in hist]
    allc = [math.log(statistics.median(h["cpu_ms"])) for h in hist]
    out: dict[str, Any] = {}
    if len(hist) > 1:
        out = {"wall": statistics.stdev(allw), "cpu": statistics.stdev(allc)}
        out["steadier"] = "cpu" if out["cpu"] < out["wall"] else "wall"
        lines.append(f"| all levels | {len(hist)} | | | {out['wall']:.3f} / {out['cpu']:.3f} | | |")
    return lines, out


BOOT_BLOCK = 37  #: pairs per bootstrap block, as bench/detection.py (> the 16-pair batches, a multiple of none)


def replay_gate(p: dict[str, Any], rng: np.random.Generator, case: Any) -> dict[str, Any]:
    """One resampled gate from paired process ``p`` as the product decides it: ``case.paired_blocks`` pairs drawn
    by a moving-block bootstrap of ``p``'s pairs (wall and CPU time of the same pairs), looked at in rounds of
    ``case.paired_round_pairs`` with the product's stopping rule (``verdict.look_decides`` on the process's host
    load, no GPU: the verdict's own metric rule), then ``verdict.judge_noise`` and ``verdict.decide`` on what was
    measured up to the stop, as
    ``tasks.stages.profiled_run`` and baseline-compare do (a fresh store: default offset, no noise calibration).
    Returns the final verdict, the metric that decided and the pairs spent."""
    from tasks.analysis import calibration, sequential
    from tasks.analysis.verdict import PairedBlocks, decide, judge_noise, look_decides
    from tasks.records import CompareInputs
    from tasks.stages.profiled_run import gate_design

    n = case.paired_blocks
    a, b = np.asarray(p["a_ms"], float), np.asarray(p["b_ms"], float)
    ac, bc = np.asarray(p["a_cpu_ms"], float), np.asarray(p["b_cpu_ms"], float)
    starts = rng.integers(a.size - BOOT_BLOCK + 1, size=-(-n // BOOT_BLOCK))
    idx = (starts[:, None] + np.arange(BOOT_BLOCK)).ravel()[:n]
    a, b, ac, bc = a[idx], b[idx], ac[idx], bc[idx]
    offset = calibration.Offset(sd=calibration.DEFAULT_PAIRED_OFFSET_SD, source="default")
    cal = calibration.NoiseCalibration(sd_pair=None, n_gates=0)
    design = gate_design(case, offset.sd)
    dw, dc = np.log(b / a), np.log(bc / ac)
    looks: list[int] = []
    stopping: list[str] = []
    end = 0
    for end in range(case.paired_round_pairs, n + case.paired_round_pairs, case.paired_round_pairs):
        end = min(end, n)
        if end < sequential.MIN_LOOK_PAIRS and end < n:
            continue
        looks.append(end)
        decided, metric = look_decides(
            dw[:end],
            dc[:end],
            looks,
            design,
            case=case,
            host_load=p["host_load"],
            calibrated=cal,
            gpu=False,
        )
        stopping.append(metric)
        if decided or end >= n:
            break
    gate = {
        "design": design.model_dump(mode="json"),
        "look_pairs": looks,
        "stopping": stopping,
        "offset": offset.model_dump(mode="json"),
        "calibrated_noise": None,
    }
    paired = PairedBlocks(
        a=[[x] for x in a[:end]],
        b=[[x] for x in b[:end]],
        layout={"blocks": end, "block_steps": 1, "timed_steps": 2 * end, "wall_s": None, "orders": ""},
        gate=gate,
        host_load=p["host_load"],
        a_cpu=[[x] for x in ac[:end]],
        b_cpu=[[x] for x in bc[:end]],
    )
    noise = judge_noise(case, p["host_load"], paired, offset=offset, calibrated=cal, gpu=False)
    d = decide(
        list(b[:end]),
        case,
        CompareInputs(),
        env_data={},
        paired=paired,
        baseline_version="1",
        baseline_digest="x",
        noise=noise.model_dump(mode="json"),
    )
    return {"verdict": str(d.verdict), "metric": d.evidence.get("metric"), "pairs": end, "ratio": d.ratio}


def replay_table(data: dict[str, Any], trials: int, seed: int) -> tuple[list[str], dict[str, float]]:
    """Resampled gates per (variant, load level) cell (:func:`replay_gate`, ``trials`` each, the process drawn
    at random from the cell's): verdict counts, the regression (detection / false-alarm) rate, the share
    decided on CPU time and the median pairs. The budget is the collected pairs per process (``meta.pairs``),
    at most the product's 320."""
    from tasks.records import Case

    rng = np.random.default_rng(seed)
    pairs = min(320, min(len(p["a_ms"]) for p in data["paired"]))
    case = Case(model="bench", paired_blocks=pairs)
    variants = list(dict.fromkeys(p["variant"] for p in data["paired"]))
    variants = sorted(variants, key=lambda v: (v != "A/A", v))
    levels = list(dict.fromkeys(p["level"] for p in data["paired"]))
    lines = [
        f"resampled gates: {trials} per cell, budget {pairs} pairs (the collected processes' length), seed {seed}",
        "| variant | load | regression | pass | inconclusive | improvement | on CPU time | pairs median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    worst = {"false_alarm_max": 0.0}
    for v in variants:
        for level in levels:
            cell = [p for p in data["paired"] if p["variant"] == v and p["level"] == level]
            if not cell:
                continue
            out = [replay_gate(cell[int(rng.integers(len(cell)))], rng, case) for _ in range(trials)]
            share = {k: sum(o["verdict"] == k for o in out) / trials for k in ("regression", "pass", "inconclusive")}
            share["improvement"] = sum(o["verdict"] == "improvement" for o in out) / trials
            cpu = sum(o["metric"] == "cpu" for o in out) / trials
            if v == "A/A":
                worst["false_alarm_max"] = max(worst["false_alarm_max"], share["regression"])
            lines.append(
                f"| {v} | {level} | {share['regression']:.0%} | {share['pass']:.0%} | {share['inconclusive']:.0%} | "
                f"{share['improvement']:.0%} | {cpu:.0%} | {statistics.median(o['pairs'] for o in out):.0f} |"
            )
    return lines, worst


def main(argv: Sequence[str] | None = None) -> None:
    """Collect (``--collect``) and/or print the tables (module docstring); last lines machine-readable."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collect", action="store_true", help="run the processes first (about 40 min)")
    parser.add_argument("--data", type=Path, default=DATA, help=f"samples file (default {DATA.relative_to(ROOT)})")
    parser.add_argument("--loads", default=",".join(DEFAULT_LOADS), help="levels (default 0,busy1,busy3,tf,0-end)")
    parser.add_argument("--heads", default=",".join(map(str, DEFAULT_HEADS)), help="variant head widths")
    parser.add_argument("--reps", type=int, default=2, help="paired processes per variant and level (default 2)")
    parser.add_argument("--pairs", type=int, default=160, help="ABBA pairs per paired process (default 160)")
    parser.add_argument("--history", type=int, default=4, help="history processes per level (default 4)")
    parser.add_argument("--append", action="store_true", help="add the collected processes to --data's")
    parser.add_argument("--trials", type=int, default=0, help="resampled gates per cell (default 0: none)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resampled gates (default 0)")
    args = parser.parse_args(argv)
    if args.collect:
        loads = [x.strip() for x in args.loads.split(",") if x.strip()]
        for level in loads:
            load_for(level, 1)  # a bad level name fails before anything runs
        heads = [int(x) for x in args.heads.split(",") if x.strip()]
        print(
            f"bench/busy.py --collect {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}: {os.cpu_count()} "
            f"CPUs, loads {loads}, heads {heads}, {args.reps} reps x {args.pairs} pairs, {args.history} history "
            f"processes per level; /proc/loadavg {loadavg()}",
            flush=True,
        )
        data = collect(args.data, loads, heads, args.reps, args.pairs, args.history, append=args.append)
    else:
        data = json.loads(args.data.read_text())
    meta = data["meta"]
    print(
        f"\nsamples: {args.data.name}, collected {meta['collected_at']} on {meta['cpus']} CPUs in "
        f"{meta.get('collect_s', '?')} s; {meta['pairs']} pairs per paired process"
    )
    lines, worst = paired_table(data)
    print("\n".join(lines))
    hlines, drift = history_table(data)
    print()
    print("\n".join(hlines))
    print(
        f"busy: cpu_load_bias_max={100 * worst['cpu_load_bias_max']:.1f}% "
        f"wall_load_bias_max={100 * worst['wall_load_bias_max']:.1f}% "
        f"cpu_over_wall_k_max={worst['cpu_over_wall_k_max']:.2f} cpu_scale_max={worst['cpu_scale_max']:.3f}"
    )
    if drift:
        print(f"busy: history_drift wall={drift['wall']:.3f} cpu={drift['cpu']:.3f} steadier={drift['steadier']}")
    if args.trials:
        rlines, rworst = replay_table(data, args.trials, args.seed)
        print()
        print("\n".join(rlines))
        print(f"busy: resampled false_alarm_max={100 * rworst['false_alarm_max']:.1f}% trials={args.trials}")


if __name__ == "__main__":
    main()
