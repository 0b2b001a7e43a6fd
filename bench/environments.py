"""Benchmark: real cross-environment gates through the command line, as a user runs them (issue 36, item 2).

Run: ``.venv/bin/python bench/environments.py [--gates 3] [--measured-steps 50] [--paired-blocks 400]`` (up to
10 minutes a gate on the 2-core dev machine). In a fresh ``PERFWATCH_HOME`` (SQLite, the demo's model store:
``perfwatch demo build-store``) it runs, ``--gates`` times each and alternating:

* ``threads``: ``TF_NUM_INTRAOP_THREADS=2 perfwatch run demo_mobilenet --version 1 --baseline-env
  TF_NUM_INTRAOP_THREADS=1``: side A (the baseline environment) with one intra-op thread, side B (the run's own)
  with two: two environments that differ in speed, where a gate must decide (on a quiet host wall time shows
  the second thread; on a busy one the busy-host rule judges CPU time, which a thread count hardly moves);
* ``onednn``: ``TF_ENABLE_ONEDNN_OPTS=1`` against ``=0`` on side A (TensorFlow's oneDNN kernels off): a larger
  difference on this CPU;
* ``onednn-off``: the same the other way round: side B (the run's own) slower, a regression to decide;
* ``identical``: the ``threads`` gate with ``--baseline-env TF_NUM_INTRAOP_THREADS=2``: two environments that
  are one, where a gate must not find a change (``pass``, or ``inconclusive`` when the spread is too wide to decide);
* ``identical1``: the same with one intra-op thread on both sides (processes of one thread spread less);
* ``threads-all``: intra-op and inter-op threads both 1 (A) against both 2 (B): a speed difference on this host
  (one intra-op thread alone hardly differs from two here).

Each gate is the product's: ``Case.paired_processes`` (a cross-environment gate's default: 40) process pairs at
most, each side in its own fresh runner process, both processes of a pair started together and their measured
blocks interleaved in a randomized order (``tasks.runner.interleave``), looked at from the third pair on. Printed
per gate: the verdict, ratio and interval as ``perfwatch runs --format json`` reads them from the store, the metric
that decided, the process pairs spent, the wall time of the whole ``perfwatch run`` and the 1-minute load at its
start and end. Last line::

    environments: threads=<verdict>,... identical=<verdict>,... wall_s_median=<s> load1=<start>-<end>
"""

from __future__ import annotations

import argparse
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
PERFWATCH = str(Path(sys.executable).with_name("perfwatch"))
MODEL = "demo_mobilenet"
#: kind -> (the variable, or several joined by commas, side A's value, side B's value: each variable gets it)
KINDS = {
    "threads": ("TF_NUM_INTRAOP_THREADS", "1", "2"),
    "onednn": ("TF_ENABLE_ONEDNN_OPTS", "0", "1"),
    "onednn-off": ("TF_ENABLE_ONEDNN_OPTS", "1", "0"),
    "identical": ("TF_NUM_INTRAOP_THREADS", "2", "2"),
    "identical1": ("TF_NUM_INTRAOP_THREADS", "1", "1"),
    "threads-all": ("TF_NUM_INTRAOP_THREADS,TF_NUM_INTEROP_THREADS", "1", "2"),
}


def one_gate(home: Path, var: str, a: str, b: str, steps: int, blocks: int) -> dict[str, Any]:
    """One cross-environment gate by the CLI: side A with ``var=a``, side B (the run's own environment) with
    ``var=b`` (``var``: one name, or several joined by commas, each set so); its verdict as the store has it
    (``perfwatch runs --format json``), the wall s and the load."""
    names = var.split(",")
    env = {**os.environ, "PERFWATCH_HOME": str(home), **dict.fromkeys(names, b)}
    load0, t = os.getloadavg()[0], time.time()
    run = subprocess.run(
        [
            PERFWATCH,
            "run",
            MODEL,
            "--version",
            "1",
            "--measured-steps",
            str(steps),
            "--paired-blocks",
            str(blocks),
            *[x for name in names for x in ("--baseline-env", f"{name}={a}")],
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.time() - t
    rows = subprocess.run(
        [PERFWATCH, "runs", "--model", MODEL, "--last", "1", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    row = json.loads(rows.stdout)[-1]
    story = row.get("decision") or {}
    return {
        "rc": run.returncode,
        "verdict": row.get("verdict"),
        "ratio": story.get("ratio"),
        "low": story.get("ci_low"),
        "high": story.get("ci_high"),
        "metric": story.get("metric"),
        "processes": story.get("processes"),
        "reason": story.get("reason"),
        "wall_s": round(wall, 1),
        "load1": (round(load0, 2), round(os.getloadavg()[0], 2)),
        "tail": run.stdout[-600:] + run.stderr[-600:] if run.returncode not in (0, 1, 2) else "",
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gates", type=int, default=3, help="gates per kind")
    ap.add_argument("--measured-steps", type=int, default=50, help="the run's own measured steps (not the gate's)")
    ap.add_argument(
        "--paired-blocks",
        type=int,
        default=400,
        help="the gate's budget of steps per side: paired_blocks // 40 steps in each process (default 10)",
    )
    ap.add_argument("--home", type=Path, help="PERFWATCH_HOME to use (default: a fresh temporary one)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"which gates, of {', '.join(KINDS)}")
    args = ap.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="perfwatch-bench-env-"))
    env = {**os.environ, "PERFWATCH_HOME": str(home)}
    subprocess.run([PERFWATCH, "demo", "build-store"], env=env, check=True, capture_output=True)
    print(f"PERFWATCH_HOME={home}; {os.cpu_count()} CPUs; load average at start {os.getloadavg()[0]:.2f}", flush=True)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if unknown := [k for k in kinds if k not in KINDS]:
        ap.error(f"--kinds {unknown}: expected some of {', '.join(KINDS)}")
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(args.gates):
        for kind in kinds:
            var, a, b = KINDS[kind]
            r = one_gate(home, var, a, b, args.measured_steps, args.paired_blocks)
            out[kind].append(r)
            fig = (
                f"x{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
                if None not in (r["ratio"], r["low"], r["high"])
                else "no interval"
            )
            print(
                f"{kind} {i + 1}: A {var}={a}, B {var}={b}: {r['verdict']} {fig} on {r['metric']}, "
                f"{r['processes']} process pairs, {r['wall_s']} s, load1 {r['load1'][0]}-{r['load1'][1]} "
                f"(exit {r['rc']})\n  {r['reason']}{r['tail']}",
                flush=True,
            )
    loads = [x for rs in out.values() for r in rs for x in r["load1"]]
    print(
        "environments: "
        + " ".join(f"{k}={','.join(str(r['verdict']) for r in rs)}" for k, rs in out.items())
        + f" wall_s_median={statistics.median(r['wall_s'] for rs in out.values() for r in rs):.0f}"
        + f" load1={min(loads):.1f}-{max(loads):.1f}"
    )


if __name__ == "__main__":
    main()
