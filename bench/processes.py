"""Benchmark: the A/A false-alarm rate and coverage of the paired gate across processes (issue 36 item 1).

Run: ``.venv/bin/python bench/processes.py --collect`` (real runner processes, A/A: ``bench/gates.py``'s CNN
against itself, ``--procs`` processes of ``--pairs`` ABBA pairs per load level; about 25 s a process on the
2-core dev machine when quiet; writes ``--data``), then ``.venv/bin/python bench/processes.py`` (the tables,
from the samples, seconds; ``--trials`` resampled gates per level).

**Load levels** (``--loads``): ``0`` (nothing added) and ``busyN`` (``bench/gates.py``'s ``BackgroundLoad``: N
single-threaded numpy loops per core, started and stopped by the bench by process id). The host is shared:
each process's 1-minute load and the share of the CPU other processes took (the runner's ``HostLoad``) are kept
and printed.

**Tables**, per level, every figure by the product's own functions:

1. *One process as the unit of nothing* (the design before issue 36): each process's pairs as one fixed gate
   (``stats.compare_paired`` at 99%, no offset): the share of A/A processes whose interval excludes 1.0
   (``regression`` or ``improvement``), and the spread of the processes' own ratios.
2. *Real gates across processes*: consecutive groups of ``--k`` processes in collection order, each looked at
   after every process from the third on and stopped at the first decisive look as the product's gate does
   (``verdict.process_look_decides`` on the process's host load), then judged by ``verdict.judge_noise`` and
   ``verdict.decide``.
3. *Resampled gates across processes* (``--trials``): the same, each gate drawing ``--k`` of the level's
   processes at random with replacement (the process is the unit resampled, as a cluster bootstrap does).
   Regression share (false alarms), share of intervals that hold 1.0 (coverage), median processes spent,
   and the median between-process sd, within-process sd and design effect.

Last line (machine-readable)::

    processes: level=<name> load1=<mean> procs=<n> one_process_false=<pct>% real_gates=<n> real_regressions=<n>
    resampled=<n> false_alarm=<pct>% coverage=<pct>% median_k=<k> between_sd=<sd> within_sd=<sd> deff=<x> ...

(one group of fields per level, separated by `` | ``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gates import BackgroundLoad, loadavg, run_paired  # noqa: E402

from tasks.analysis import calibration, processes, stats  # noqa: E402
from tasks.analysis.verdict import PairedBlocks, decide, judge_noise, process_look_decides  # noqa: E402
from tasks.records import Case, CompareInputs, Verdict  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "processes_samples.json"
LOAD_RAMP_S = 10


# ------------------------------------------------------------------------------------------- collecting


def collect(loads: Sequence[str], procs: int, pairs: int, out: Path, work: Path) -> None:
    """Run ``procs`` A/A paired processes of ``pairs`` pairs per load level and write their pairs to ``out``."""
    from busy import build

    cpus = os.cpu_count() or 1
    (work / "store").mkdir(parents=True, exist_ok=True)
    models = build(work / "store", [])
    base = next(iter(models.values()))
    data: dict[str, Any] = {"meta": {"pairs": pairs, "procs": procs, "cpus": cpus, "model": str(base.name)}}
    data["processes"] = []
    t0 = time.time()
    for level in loads:
        n = int(level[4:]) * cpus if level.startswith("busy") else 0
        with BackgroundLoad(n):
            if n:
                time.sleep(LOAD_RAMP_S)
            for rep in range(procs):
                load1 = os.getloadavg()[0]
                t = time.time()
                r = run_paired(base, base, pairs, work / f"{level}-{rep}", sys.executable)
                rec = {
                    "level": level,
                    "rep": rep,
                    "load1": load1,
                    "loadavg_end": loadavg(),
                    "wall_s": round(time.time() - t, 1),
                    "host_load": r.host_load,
                    "a_ms": [b.a_ms[0] for b in r.blocks],
                    "b_ms": [b.b_ms[0] for b in r.blocks],
                    "a_cpu_ms": [b.a_cpu_ms[0] if b.a_cpu_ms else None for b in r.blocks],
                    "b_cpu_ms": [b.b_cpu_ms[0] if b.b_cpu_ms else None for b in r.blocks],
                }
                data["processes"].append(rec)
                d = [math.log(b / a) for a, b in zip(rec["a_ms"], rec["b_ms"], strict=True)]
                print(
                    f"{level} process {rep}: x{math.exp(statistics.mean(d)):.4f}, load1 {load1:.2f}, "
                    f"other CPU {r.host_load.get('other_cpu_share', float('nan')):.0%}, {rec['wall_s']} s",
                    flush=True,
                )
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(data))
    data["meta"]["collect_s"] = round(time.time() - t0, 1)
    out.write_text(json.dumps(data))


# ------------------------------------------------------------------------------------------- the gates


def _blocks(procs: Sequence[dict[str, Any]]) -> PairedBlocks:
    a, b, ac, bc, index = [], [], [], [], []
    for k, p in enumerate(procs):
        a += [[x] for x in p["a_ms"]]
        b += [[x] for x in p["b_ms"]]
        ac += [[x] for x in p["a_cpu_ms"]]
        bc += [[x] for x in p["b_cpu_ms"]]
        index += [k] * len(p["a_ms"])
    cpu = all(x[0] for x in ac + bc)
    return PairedBlocks(
        a=a,
        b=b,
        layout={"blocks": len(a), "block_steps": 1, "timed_steps": 2 * len(a), "wall_s": 0.0, "orders": ""},
        a_cpu=ac if cpu else None,
        b_cpu=bc if cpu else None,
        process=index,
    )


def _unit(p: dict[str, Any], a: str, b: str) -> processes.Unit | None:
    if not all(p[a]) or not all(p[b]):
        return None
    return processes.unit_from_pairs([math.log(y / x) for x, y in zip(p[a], p[b], strict=True)])


def gate(procs: Sequence[dict[str, Any]], case: Case) -> dict[str, Any]:
    """One gate over ``procs`` as the product runs it (looks after each process from the third on, stops at the
    first decisive one; then ``judge_noise`` and ``decide``): verdict, ratio, interval, processes spent, spread."""
    design = processes.ProcessDesign(
        confidence=case.confidence,
        tolerance=case.tolerance,
        max_processes=len(procs),
        pairs_per_process=len(procs[0]["a_ms"]),
    )
    wall = [_unit(p, "a_ms", "b_ms") for p in procs]
    cpu = [_unit(p, "a_cpu_ms", "b_cpu_ms") for p in procs]
    looks: list[int] = []
    stopping: list[str] = []
    for k in range(len(procs)):
        if k + 1 < processes.MIN_LOOK_PROCESSES:
            continue
        looks.append(k + 1)
        decided, metric = process_look_decides(
            [u for u in wall if u is not None],
            cpu,
            looks,
            design,
            d_wall=[math.log(b / a) for p in procs[: k + 1] for a, b in zip(p["a_ms"], p["b_ms"], strict=True)],
            d_cpu=[math.log(b / a) for p in procs[: k + 1] for a, b in zip(p["a_cpu_ms"], p["b_cpu_ms"], strict=True)]
            if all(p.get("a_cpu_ms") for p in procs[: k + 1])
            else None,
            case=case,
            host_load=calibration.combined_load([p["host_load"] for p in procs[: k + 1]]),
            calibrated=None,
            gpu=False,
        )
        stopping.append(metric)
        if decided:
            break
    used = procs[: looks[-1]]
    blocks = _blocks(used)
    paired = PairedBlocks(
        **{
            **blocks.__dict__,
            "gate": {"design": design.model_dump(mode="json"), "look_processes": looks, "stopping": stopping},
            "host_load": max((p["host_load"] for p in used), key=lambda h: h.get("other_cpu_share", 0.0)),
        }
    )
    offset = calibration.Offset(sd=0.0, source="default")
    noise = judge_noise(
        case, None, paired, offset=offset, calibrated=calibration.NoiseCalibration(sd_pair=None, n_gates=0), gpu=False
    )
    d = decide(
        [x for blk in paired.b for x in blk],
        case,
        CompareInputs(),
        env_data={},
        paired=paired,
        noise=noise.model_dump(mode="json"),
    )
    sp = d.evidence["processes"]
    return {
        "verdict": d.verdict,
        "ratio": d.ratio,
        "low": d.ci_low,
        "high": d.ci_high,
        "k": looks[-1],
        "metric": d.evidence.get("metric"),
        "between_sd": sp["between_sd"],
        "within_sd": sp["within_sd"],
        "deff": sp["design_effect"],
    }


def one_process(p: dict[str, Any], case: Case) -> str:
    """The process alone as the one-process design's fixed gate (``stats.compare_paired``, no offset)."""
    return stats.compare_paired(
        [[x] for x in p["a_ms"]], [[x] for x in p["b_ms"]], tolerance=case.tolerance, confidence=case.confidence
    ).verdict


def level_report(level: str, procs: list[dict[str, Any]], k: int, trials: int, seed: int) -> tuple[list[str], str]:
    case = Case(model="bench", paired_processes=k, paired_blocks=k * len(procs[0]["a_ms"]), paired_block_steps=1)
    load1 = statistics.mean(p["load1"] for p in procs)
    other = statistics.mean(p["host_load"].get("other_cpu_share", 0.0) for p in procs)
    ratios = [
        math.exp(statistics.mean(math.log(b / a) for a, b in zip(p["a_ms"], p["b_ms"], strict=True))) for p in procs
    ]
    singles = [one_process(p, case) for p in procs]
    false_one = sum(v in (Verdict.REGRESSION, Verdict.IMPROVEMENT) for v in singles) / len(singles)
    real = [gate(procs[i : i + k], case) for i in range(0, len(procs) - k + 1, k)]
    rng = np.random.default_rng(seed)
    res = [gate([procs[j] for j in rng.integers(0, len(procs), k)], case) for _ in range(trials)]
    fa = sum(r["verdict"] == Verdict.REGRESSION for r in res) / max(len(res), 1)
    cover = sum(r["low"] <= 1.0 <= r["high"] for r in res) / max(len(res), 1)
    med = {
        key: statistics.median(r[key] for r in res if r[key] is not None)
        for key in ("k", "between_sd", "within_sd", "deff")
    }
    shares = {
        v: sum(r["verdict"] == v for r in res) / max(len(res), 1)
        for v in ("pass", "inconclusive", "regression", "improvement")
    }
    log_sd = statistics.stdev(math.log(r) for r in ratios)
    real_text = ", ".join(
        f"{r['verdict']} x{r['ratio']:.4f} [{r['low']:.4f}, {r['high']:.4f}] K={r['k']} ({r['metric']})" for r in real
    )
    lines = [
        f"== level {level}: {len(procs)} A/A processes of {len(procs[0]['a_ms'])} pairs, mean load1 {load1:.2f} "
        f"on {os.cpu_count()} CPUs, other processes {other:.0%} of the CPU",
        f"  1. one process each: ratios x{min(ratios):.4f} .. x{max(ratios):.4f} (sd of log {log_sd:.4f}); "
        f"interval excludes 1.0 in {false_one:.0%} of processes",
        f"  2. real gates of K = {k}: {real_text}",
        f"  3. {len(res)} resampled gates of at most K = {k}: "
        + ", ".join(f"{v} {x:.1%}" for v, x in shares.items())
        + f"; coverage of 1.0 {cover:.1%}; median processes {med['k']:.0f}; median between-process sd "
        f"{med['between_sd']:.4f}, within-process sd {med['within_sd']:.4f}, design effect {med['deff']:.2f}",
    ]
    summary = (
        f"level={level} load1={load1:.2f} procs={len(procs)} one_process_false={100 * false_one:.1f}% "
        f"real_gates={len(real)} real_regressions={sum(r['verdict'] == 'regression' for r in real)} "
        f"resampled={len(res)} false_alarm={100 * fa:.2f}% coverage={100 * cover:.1f}% median_k={med['k']:.0f} "
        f"between_sd={med['between_sd']:.4f} within_sd={med['within_sd']:.4f} deff={med['deff']:.2f}"
    )
    return lines, summary


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collect", action="store_true", help="run the real processes first (minutes)")
    ap.add_argument("--loads", nargs="+", default=["0", "busy1"], help="load levels: 0, busyN")
    ap.add_argument("--procs", type=int, default=18, help="A/A processes per level")
    ap.add_argument("--pairs", type=int, default=40, help="ABBA pairs per process")
    ap.add_argument("--k", type=int, default=6, help="processes per gate at most (Case.paired_processes)")
    ap.add_argument("--trials", type=int, default=1000, help="resampled gates per level")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--work", type=Path, default=Path("/tmp/perfwatch-bench-processes"))
    args = ap.parse_args(argv)
    if args.collect:
        collect(args.loads, args.procs, args.pairs, args.data, args.work)
    data = json.loads(args.data.read_text())
    summaries = []
    for level in dict.fromkeys(p["level"] for p in data["processes"]):
        procs = [p for p in data["processes"] if p["level"] == level]
        if len(procs) < args.k:
            print(f"== level {level}: {len(procs)} processes, fewer than K = {args.k}: skipped")
            continue
        lines, summary = level_report(level, procs, args.k, args.trials, args.seed)
        print("\n".join(lines), flush=True)
        summaries.append(summary)
    print("processes: " + " | ".join(summaries))


if __name__ == "__main__":
    main()
