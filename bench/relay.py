"""Benchmark: what a paired gate spends, measured on real gates: processes as the unit against one process.

Run: ``.venv/bin/python bench/relay.py [--gates 6] [--busy 0] [--designs processes,one]`` (about 30 s a gate
pair on the 2-core dev machine when quiet). The gates are the product's own
(``tasks.stages.profiled_run.paired_run`` with the real runner, this interpreter), on ``bench/gates.py``'s CNN
(batch 32, about 15 ms a step) against itself (A/A), alternating:

* ``processes``: ``Case.paired_processes`` 6 and 240 pairs at most (40 ABBA pairs per process), the processes
  started two at a time (``profiled_run.start_batches``) and measuring one at a time
  (``profiled_run._relay_batch``), looked at from the third on;
* ``one``: ``paired_processes`` 1 with 320 pairs at most in one process (the design before processes were the
  unit; its sequential gate looks every 16 pairs from the 32nd);
* ``threes`` (only with ``--designs``): ``processes`` with its first three processes started together (the first
  look needs three), then two at a time: an alternative batching, measured and not kept (2026-12-04, 8 gates
  each, load 0.5-3.4: median 35.7 s against 34.8 s two at a time; gates often run 5-6 processes here, and three
  start-ups on two cores cost more than the one they save).

Each gate's wall time is our timer around the stage call (everything: start-ups, warm-ups, pairs); each is judged
by ``verdict.decide`` as baseline-compare would. ``--busy N`` adds N single-threaded busy loops per core
(``bench/gates.py``'s ``BackgroundLoad``) for the whole run. Printed per gate: the design, verdict, processes,
wall s, the 1-minute load; last line::

    relay: gates=<n> busy=<N> <design>_median_s=<s>... <design>_ratio=<x (over one)>... <design>_median_k=<k>...
    verdicts_<design>=<v,...>... load1=<min>-<max>
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from busy import build  # noqa: E402
from gates import BASE_HEAD, BATCH, BackgroundLoad  # noqa: E402

from tasks.analysis.verdict import decide  # noqa: E402
from tasks.records import Case, CompareInputs, PulledModel, WarmupRecord  # noqa: E402
from tasks.runner import RunnerProcess  # noqa: E402
from tasks.stages import profiled_run  # noqa: E402
from tasks.stages.profiled_run import paired_run, read_paired  # noqa: E402

DESIGNS = {
    "processes": {"paired_processes": 6, "paired_blocks": 240},
    "one": {"paired_processes": 1, "paired_blocks": 320},
    "threes": {"paired_processes": 6, "paired_blocks": 240},
}


def _threes(max_processes: int, gpu: bool | None) -> list[list[int]]:
    """The ``threes`` design's batches: the first three processes together (the first look needs three), then two
    at a time: the alternative to ``profiled_run.start_batches`` measured on this host and not kept."""
    first = min(3, max_processes)
    return [list(range(first))] + [list(range(k, min(k + 2, max_processes))) for k in range(first, max_processes, 2)]


def _pulled(path: Path, version: str) -> PulledModel:
    return PulledModel(
        model="cnn",
        version=version,
        source_uri=str(path),
        local_path=str(path),
        format="keras",
        digest=version * 8,
        size_bytes=1,
    )


def one_gate(design: str, model: Path, work: Path) -> dict[str, Any]:
    """One A/A gate of ``design`` on ``model``: its verdict, processes, wall s (our timer) and the load."""
    case = Case(model="cnn", batch_size=BATCH, measured_steps=40, max_steal_share=1.0, **DESIGNS[design])
    warm = WarmupRecord(warmup_steps=20, steady=True, final_cv=0.01, cold_step_ms=50.0, step_times_ms=[15.0], wall_s=1)
    load0, t = os.getloadavg()[0], time.perf_counter()
    with mock.patch.object(profiled_run, "start_batches", _threes) if design == "threes" else contextlib.nullcontext():
        path, _ = paired_run(
            _pulled(model, "2"),
            _pulled(model, "1"),
            case,
            warm,
            work,
            RunnerProcess.for_python(sys.executable),
            gpu=False,
        )
    wall = time.perf_counter() - t
    paired = read_paired(path)
    d = decide([sum(x) / len(x) for x in paired.b], case, CompareInputs(), env_data={}, paired=paired)
    k = paired.layout.get("processes") or 1
    return {"verdict": d.verdict, "k": k, "wall_s": wall, "load1": (load0, os.getloadavg()[0]), "ratio": d.ratio}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gates", type=int, default=6, help="gates per design")
    ap.add_argument("--busy", type=int, default=0, help="busy loops per core for the whole run")
    ap.add_argument("--work", type=Path, help="work directory (default: a fresh temporary one)")
    ap.add_argument("--designs", default="processes,one", help=f"which designs, of {', '.join(DESIGNS)}")
    args = ap.parse_args(argv)
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown or not designs:
        ap.error(f"--designs {args.designs!r}: expected some of {', '.join(DESIGNS)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="perfwatch-bench-relay-"))
    (work / "store").mkdir(parents=True, exist_ok=True)
    model = build(work / "store", [])[f"h{BASE_HEAD}"]
    cpus = os.cpu_count() or 1
    print(
        f"work {work}; {cpus} CPUs; load average at start {os.getloadavg()[0]:.2f}; busy {args.busy}/core", flush=True
    )
    out: dict[str, list[dict[str, Any]]] = {d: [] for d in designs}
    with BackgroundLoad(args.busy * cpus):
        if args.busy:
            time.sleep(10)
        for i in range(args.gates):
            for design in designs if i % 2 == 0 else reversed(designs):
                r = one_gate(design, model, work / f"{design}-{i}")
                out[design].append(r)
                load0, load1 = r["load1"]
                print(
                    f"{design} {i + 1}: {r['verdict']} x{r['ratio']:.3f}, {r['k']} processes, {r['wall_s']:.1f} s, "
                    f"load1 {load0:.2f}-{load1:.2f}",
                    flush=True,
                )
    med = {d: statistics.median(float(r["wall_s"]) for r in rs) for d, rs in out.items()}
    loads = [x for rs in out.values() for r in rs for x in r["load1"]]
    figures = " ".join(f"{d}_median_s={m:.1f}" for d, m in med.items())
    ratios = " ".join(f"{d}_ratio={m / med['one']:.2f}" for d, m in med.items() if d != "one" and "one" in med)
    ks = " ".join(f"{d}_median_k={statistics.median(int(r['k']) for r in rs):g}" for d, rs in out.items() if d != "one")
    verdicts = " ".join(f"verdicts_{d}={','.join(str(r['verdict']) for r in rs)}" for d, rs in out.items())
    print(
        f"relay: gates={args.gates} busy={args.busy} {figures} {ratios} {ks} {verdicts} "
        f"load1={min(loads):.1f}-{max(loads):.1f}"
    )


if __name__ == "__main__":
    main()
