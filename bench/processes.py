"""Benchmark: the paired gate across processes on real runner processes: false alarms, coverage, sensitivity
and cost (issue 36 item 1 and its targets).

Run: ``.venv/bin/python bench/processes.py --collect`` (real runner processes: ``bench/gates.py``'s CNN against
itself, and with ``--heads 500`` also against its variant ``h500``, about x1.05 quiet; ``--procs`` processes of
``--pairs`` ABBA pairs per load level and variant, the variants alternating process by process; about 5 s a
process on the 2-core dev machine when quiet, 10 s beside one busy loop per core; writes ``--data``, or adds to it
with ``--append``), then ``.venv/bin/python bench/processes.py`` (the tables, from the samples: about a minute per
level with ``--trials`` 1000).

**Load levels** (``--loads``): ``0`` (nothing added) and ``busyN`` (``bench/gates.py``'s ``BackgroundLoad``: N
single-threaded numpy loops per core, started and stopped by the bench by process id). The host is shared:
each process's 1-minute load and the share of the CPU other processes took (the runner's ``HostLoad``) are kept
and printed.

**Tables**, per level and variant, every figure by the product's own functions:

1. *One process as the unit of nothing* (the design before issue 36): each process's pairs as one fixed gate
   (``stats.compare_paired`` at 99%, no offset): the share of processes whose interval excludes 1.0, and the
   spread of the processes' own ratios.
2. *Real gates across processes*: the processes in collection order spent as a run of real gates would spend
   them: each gate takes the next processes, looks after every one from the third on and stops at the first
   decisive look as the product's gate does (``verdict.process_look_decides`` on the processes' host load), then
   is judged by ``verdict.judge_noise`` and ``verdict.decide``; a gate starts only while ``--k`` processes
   remain. Verdict counts, processes and runner wall time spent, beside the estimated wall time of one process
   of 320 pairs (the one-process design: ``one_process_cost_s``).
3. *Resampled gates across processes* (``--trials``): the same, each gate drawing ``--k`` of the level's
   processes at random with replacement (the process is the unit resampled, as a cluster bootstrap does).
   Verdict shares (A/A: ``regression`` is a false alarm), share of A/A intervals that hold 1.0 (coverage), median
   processes and wall time spent, and the median between-process sd, within-process sd and design effect.
4. *Sensitivity* (A/A only, ``--shifts``): resampled gates with side B's wall and CPU times multiplied by each
   shift (a known slowdown on real noise): the share judged ``regression``. The real variant's own tables (2, 3)
   check it against real A/B processes.

Last line (machine-readable)::

    processes: level=<name> variant=aa load1=<mean> procs=<n> one_process_false=<pct>% real_gates=<n>
    real_regressions=<n> resampled=<n> regression=<pct>% coverage=<pct>% caught_x1.03=<pct>% caught_x1.05=<pct>%
    median_k=<k> median_wall_s=<s> one_process_320_s=<s> | level=... variant=h500 ...

(one group of fields per level and variant, separated by `` | ``).
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

from gates import BASE_HEAD, BackgroundLoad, loadavg, run_paired  # noqa: E402

from tasks.analysis import calibration, processes, stats  # noqa: E402
from tasks.analysis.verdict import PairedBlocks, decide, judge_noise, process_look_decides  # noqa: E402
from tasks.records import Case, CompareInputs, Verdict  # noqa: E402

#: the samples (collected 2026-12-04); ``processes_samples_2026-12-01.json``: the first collection, 18 A/A processes
#: per level on a host already at load 5-9 before the bench added any
DATA = Path(__file__).resolve().parent / "data" / "processes_samples.json"
LOAD_RAMP_S = 10


# ------------------------------------------------------------------------------------------- collecting


def collect(
    loads: Sequence[str], procs: int, pairs: int, out: Path, work: Path, heads: Sequence[int] = (), *, append: bool
) -> None:
    """Run ``procs`` paired processes of ``pairs`` pairs per load level and variant and write their pairs to ``out``.

    Variants: the base against itself (``A/A``) and, per ``heads``, the base (A) against the variant ``h<head>``
    (B, ``bench/busy.py``'s models: ``h500`` is about x1.05 quiet). Within a level the variants alternate
    process by process, so the host's drift reaches each alike. ``append``: add to ``out``'s processes (the
    file's ``meta`` keeps each collection's settings under ``collections``)."""
    from busy import build

    cpus = os.cpu_count() or 1
    (work / "store").mkdir(parents=True, exist_ok=True)
    models = build(work / "store", list(heads))
    base = models[f"h{BASE_HEAD}"]
    variants = {"A/A": base, **{f"h{h}": models[f"h{h}"] for h in heads}}
    meta = {"pairs": pairs, "procs": procs, "cpus": cpus, "model": str(base.name), "variants": list(variants)}
    if append and out.exists():
        data: dict[str, Any] = json.loads(out.read_text())
        data["meta"].setdefault("collections", []).append(
            {**meta, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        )
    else:
        data = {"meta": {**meta, "collections": [meta]}, "processes": []}
    t0 = time.time()
    for level in loads:
        n = int(level[4:]) * cpus if level.startswith("busy") else 0
        with BackgroundLoad(n):
            if n:
                time.sleep(LOAD_RAMP_S)
            for rep in range(procs):
                for name, model in variants.items():
                    load1 = os.getloadavg()[0]
                    t = time.time()
                    r = run_paired(base, model, pairs, work / f"{level}-{name.replace('/', '')}-{rep}", sys.executable)
                    rec = {
                        "level": level,
                        "variant": name,
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
                        f"{level} {name} process {rep}: x{math.exp(statistics.mean(d)):.4f}, load1 {load1:.2f}, "
                        f"other CPU {r.host_load.get('other_cpu_share', float('nan')):.0%}, {rec['wall_s']} s",
                        flush=True,
                    )
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(json.dumps(data))
    data["meta"]["collect_s"] = round(data["meta"].get("collect_s", 0.0) + time.time() - t0, 1)
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


def _shifted(p: dict[str, Any], shift: float) -> dict[str, Any]:
    """The process with side B's wall and CPU times multiplied by ``shift`` (a known slowdown on real noise)."""
    if shift == 1.0:
        return p
    return {
        **p,
        "b_ms": [x * shift for x in p["b_ms"]],
        "b_cpu_ms": [x * shift if x else x for x in p["b_cpu_ms"]],
    }


def gate(procs: Sequence[dict[str, Any]], case: Case, shift: float = 1.0) -> dict[str, Any]:
    """One gate over ``procs`` as the product runs it (looks after each process from the third on, stops at the
    first decisive one; then ``judge_noise`` and ``decide``): verdict, ratio, interval, processes spent, spread,
    and what it spent (processes, pairs, the processes' wall s). ``shift``: side B slowed by that factor."""
    procs = [_shifted(p, shift) for p in procs]
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
        "pairs": sum(len(p["a_ms"]) for p in used),
        "wall_s": sum(p["wall_s"] for p in used),
        "metric": d.evidence.get("metric"),
        "between_sd": sp["between_sd"],
        "within_sd": sp["within_sd"],
        "deff": sp["design_effect"],
    }


def real_gates(procs: Sequence[dict[str, Any]], case: Case, k: int) -> list[dict[str, Any]]:
    """Gates over the processes in collection order, as a run of real gates would have spent them: each gate
    takes the next processes until it stops (3 to ``k``); a gate starts only while ``k`` processes remain, so
    every gate had its whole budget."""
    out, i = [], 0
    while i + k <= len(procs):
        r = gate(procs[i : i + k], case)
        out.append(r)
        i += r["k"]
    return out


def one_process(p: dict[str, Any], case: Case) -> str:
    """The process alone as the one-process design's fixed gate (``stats.compare_paired``, no offset)."""
    return stats.compare_paired(
        [[x] for x in p["a_ms"]], [[x] for x in p["b_ms"]], tolerance=case.tolerance, confidence=case.confidence
    ).verdict


def _pair_s(p: dict[str, Any]) -> float:
    return statistics.mean(a + b for a, b in zip(p["a_ms"], p["b_ms"], strict=True)) / 1000


def start_up_s(procs: Sequence[dict[str, Any]]) -> float:
    """The median start-up of these processes (s): each one's wall time less its pairs' step times (TensorFlow's
    import, both model loads, warm-up, writing the result)."""
    return statistics.median(p["wall_s"] - len(p["a_ms"]) * _pair_s(p) for p in procs)


def one_process_cost_s(procs: Sequence[dict[str, Any]], pairs: int) -> float:
    """The wall time (s) of one process timing ``pairs`` pairs (the design before issue 36: 320 pairs in one
    process), estimated, not measured, from these processes: the median of each process's own start-up plus
    ``pairs`` times its mean pair time (A's and B's step)."""
    return statistics.median(p["wall_s"] - len(p["a_ms"]) * _pair_s(p) + pairs * _pair_s(p) for p in procs)


def _resampled(procs: list[dict[str, Any]], case: Case, k: int, trials: int, seed: int, shift: float) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [gate([procs[j] for j in rng.integers(0, len(procs), k)], case, shift) for _ in range(trials)]


def _share(res: Sequence[dict[str, Any]], verdict: str) -> float:
    return sum(r["verdict"] == verdict for r in res) / max(len(res), 1)


def level_report(
    level: str, variant: str, procs: list[dict[str, Any]], k: int, trials: int, seed: int, shifts: Sequence[float]
) -> tuple[list[str], str]:
    """The tables of one (load level, variant): ``A/A`` gives false alarms and coverage and, with each of
    ``shifts`` applied to side B of the resampled gates, the share caught; a real variant its share caught."""
    case = Case(model="bench", paired_processes=k, paired_blocks=k * len(procs[0]["a_ms"]), paired_block_steps=1)
    load1 = statistics.mean(p["load1"] for p in procs)
    load_range = f"{min(p['load1'] for p in procs):.1f}-{max(p['load1'] for p in procs):.1f}"
    other = statistics.mean(p["host_load"].get("other_cpu_share", 0.0) for p in procs)
    ratios = [
        math.exp(statistics.mean(math.log(b / a) for a, b in zip(p["a_ms"], p["b_ms"], strict=True))) for p in procs
    ]
    singles = [one_process(p, case) for p in procs]
    aa = variant == "A/A"
    false_one = sum(v in (Verdict.REGRESSION, Verdict.IMPROVEMENT) for v in singles) / len(singles)
    real = real_gates(procs, case, k)
    res = _resampled(procs, case, k, trials, seed, 1.0)
    cover = sum(r["low"] <= 1.0 <= r["high"] for r in res) / max(len(res), 1)
    med = {
        key: statistics.median(r[key] for r in res if r[key] is not None)
        for key in ("k", "between_sd", "within_sd", "deff", "wall_s")
    }
    shares = {v: _share(res, v) for v in ("pass", "inconclusive", "regression", "improvement")}
    log_sd = statistics.stdev(math.log(r) for r in ratios)
    real_text = ", ".join(
        f"{r['verdict']} x{r['ratio']:.4f} [{r['low']:.4f}, {r['high']:.4f}] K={r['k']} ({r['metric']})" for r in real
    )
    real_wall = statistics.median(r["wall_s"] for r in real) if real else float("nan")
    before_s = one_process_cost_s(procs, 320)
    lines = [
        f"== level {level}, {variant}: {len(procs)} processes of {len(procs[0]['a_ms'])} pairs, load1 {load_range} "
        f"(mean {load1:.2f}) on {os.cpu_count()} CPUs, other processes {other:.0%} of the CPU; a process took "
        f"{statistics.median(p['wall_s'] for p in procs):.1f} s (median), {start_up_s(procs):.1f} s of it start-up",
        f"  1. one process each: ratios x{min(ratios):.4f} .. x{max(ratios):.4f} (sd of log {log_sd:.4f}); "
        f"interval excludes 1.0 in {false_one:.0%} of processes",
        f"  2. {len(real)} real gates of at most K = {k} (processes in collection order): "
        + ", ".join(
            f"{v} {sum(r['verdict'] == v for r in real)}" for v in ("pass", "inconclusive", "regression", "improvement")
        )
        + f"; median {statistics.median(r['k'] for r in real) if real else float('nan'):.0f} processes, "
        f"{real_wall:.0f} s of runner wall time (one process of 320 pairs, the design before: about {before_s:.0f} s, "
        "estimated from these processes)",
        f"     {real_text}",
        f"  3. {len(res)} resampled gates of at most K = {k}: "
        + ", ".join(f"{v} {x:.1%}" for v, x in shares.items())
        + (f"; coverage of 1.0 {cover:.1%}" if aa else "")
        + f"; median processes {med['k']:.0f} ({med['wall_s']:.0f} s); median between-process sd "
        f"{med['between_sd']:.4f}, within-process sd {med['within_sd']:.4f}, design effect {med['deff']:.2f}",
    ]
    caught: dict[float, float] = {}
    if aa:
        for j, shift in enumerate(shifts):
            sres = _resampled(procs, case, k, trials, seed + 1 + j, shift)
            caught[shift] = _share(sres, "regression")
            lines.append(
                f"  4. x{shift:g} on side B of {len(sres)} resampled gates: regression {caught[shift]:.1%}, pass "
                f"{_share(sres, 'pass'):.1%}; median processes {statistics.median(r['k'] for r in sres):.0f} "
                f"({statistics.median(r['wall_s'] for r in sres):.0f} s)"
            )
    tag = "aa" if aa else variant
    summary = (
        f"level={level} variant={tag} load1={load1:.2f} procs={len(procs)} one_process_false={100 * false_one:.1f}% "
        f"real_gates={len(real)} real_regressions={sum(r['verdict'] == 'regression' for r in real)} "
        f"resampled={len(res)} regression={100 * shares['regression']:.2f}% "
        + (f"coverage={100 * cover:.1f}% " if aa else "")
        + " ".join(f"caught_x{s:g}={100 * c:.1f}%" for s, c in caught.items())
        + f" median_k={med['k']:.0f} median_wall_s={med['wall_s']:.0f} one_process_320_s={before_s:.0f}"
    )
    return lines, summary


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collect", action="store_true", help="run the real processes first (minutes)")
    ap.add_argument("--loads", nargs="+", default=["0", "busy1"], help="load levels: 0, busyN")
    ap.add_argument("--procs", type=int, default=18, help="processes per level and variant")
    ap.add_argument("--heads", default="", help="variant head widths beside A/A, e.g. 500 (about x1.05)")
    ap.add_argument("--append", action="store_true", help="add to --data's processes")
    ap.add_argument("--shifts", default="1.03,1.05", help="slowdowns applied to side B of resampled A/A gates")
    ap.add_argument("--pairs", type=int, default=40, help="ABBA pairs per process")
    ap.add_argument("--k", type=int, default=6, help="processes per gate at most (Case.paired_processes)")
    ap.add_argument("--trials", type=int, default=1000, help="resampled gates per level")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--work", type=Path, default=Path("/tmp/perfwatch-bench-processes"))
    args = ap.parse_args(argv)
    if args.collect:
        heads = [int(x) for x in args.heads.split(",") if x.strip()]
        collect(args.loads, args.procs, args.pairs, args.data, args.work, heads, append=args.append)
    data = json.loads(args.data.read_text())
    summaries = []
    shifts = [float(x) for x in args.shifts.split(",") if x.strip()]
    cells = dict.fromkeys((p["level"], p.get("variant", "A/A")) for p in data["processes"])
    for level, variant in cells:
        procs = [p for p in data["processes"] if p["level"] == level and p.get("variant", "A/A") == variant]
        if len(procs) < args.k:
            print(f"== level {level}, {variant}: {len(procs)} processes, fewer than K = {args.k}: skipped")
            continue
        lines, summary = level_report(level, variant, procs, args.k, args.trials, args.seed, shifts)
        print("\n".join(lines), flush=True)
        summaries.append(summary)
    print("processes: " + " | ".join(summaries))


if __name__ == "__main__":
    main()
