"""Benchmark: what a paired gate spends, measured on real gates: processes as the unit against one process.

Run: ``.venv/bin/python bench/relay.py [--gates 6] [--busy 0]`` (about 30 s a gate pair on the 2-core dev machine
when quiet). The gates are the product's own (``tasks.stages.profiled_run.paired_run`` with the real runner, this
interpreter), on ``bench/gates.py``'s CNN (batch 32, about 15 ms a step) against itself (A/A), alternating:

* ``processes``: ``Case.paired_processes`` 6 and 240 pairs at most (40 ABBA pairs per process), the processes
  started two at a time and measuring one at a time (``profiled_run._relay_batch``), looked at from the third on;
* ``one``: ``paired_processes`` 1 with 320 pairs at most in one process (the design before processes were the
  unit; its sequential gate looks every 16 pairs from the 32nd).

Each gate's wall time is our timer around the stage call (everything: start-ups, warm-ups, pairs); each is judged
by ``verdict.decide`` as baseline-compare would. ``--busy N`` adds N single-threaded busy loops per core
(``bench/gates.py``'s ``BackgroundLoad``) for the whole run. Printed per gate: the design, verdict, processes,
wall s, the 1-minute load; last line::

    relay: gates=<n> busy=<N> processes_median_s=<s> one_median_s=<s> ratio=<x> processes_median_k=<k>
    verdicts_processes=<v,...> verdicts_one=<v,...> load1=<min>-<max>
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from busy import build  # noqa: E402
from gates import BASE_HEAD, BATCH, BackgroundLoad  # noqa: E402

from tasks.analysis.verdict import decide  # noqa: E402
from tasks.records import Case, CompareInputs, PulledModel, WarmupRecord  # noqa: E402
from tasks.runner import RunnerProcess  # noqa: E402
from tasks.stages.profiled_run import paired_run, read_paired  # noqa: E402

DESIGNS = {
    "processes": {"paired_processes": 6, "paired_blocks": 240},
    "one": {"paired_processes": 1, "paired_blocks": 320},
}


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
    path, _ = paired_run(
        _pulled(model, "2"), _pulled(model, "1"), case, warm, work, RunnerProcess.for_python(sys.executable), gpu=False
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
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="perfwatch-bench-relay-"))
    (work / "store").mkdir(parents=True, exist_ok=True)
    model = build(work / "store", [])[f"h{BASE_HEAD}"]
    cpus = os.cpu_count() or 1
    print(
        f"work {work}; {cpus} CPUs; load average at start {os.getloadavg()[0]:.2f}; busy {args.busy}/core", flush=True
    )
    out: dict[str, list[dict[str, Any]]] = {d: [] for d in DESIGNS}
    with BackgroundLoad(args.busy * cpus):
        if args.busy:
            time.sleep(10)
        for i in range(args.gates):
            for design in DESIGNS if i % 2 == 0 else reversed(DESIGNS):
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
    print(
        f"relay: gates={args.gates} busy={args.busy} processes_median_s={med['processes']:.1f} "
        f"one_median_s={med['one']:.1f} ratio={med['processes'] / med['one']:.2f} "
        f"processes_median_k={statistics.median(int(r['k']) for r in out['processes']):g} "
        f"verdicts_processes={','.join(str(r['verdict']) for r in out['processes'])} "
        f"verdicts_one={','.join(str(r['verdict']) for r in out['one'])} load1={min(loads):.1f}-{max(loads):.1f}"
    )


if __name__ == "__main__":
    main()
