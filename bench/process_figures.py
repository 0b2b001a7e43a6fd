"""Benchmark: the A/A noise of the per-process figures a paired gate gates beside step time (issue 38, item 1):
each version's cold step (ms) and resident memory (bytes: what its load, build and cold step added).

Run: ``.venv/bin/python bench/process_figures.py --collect [--home DIR] [--gates 4]`` (about 2 min a gate on the
2-core dev machine: ``perfwatch calibrate demo_mobilenet --version 1``, real A/A paired gates of up to 6 fresh
processes each, into a fresh perfwatch home), then ``.venv/bin/python bench/process_figures.py [--home DIR ...]``
(seconds) to read one or more such homes.

Printed per gate: its processes, the host (other processes' share of the CPU over the pairs, the 1-min load at the
start), and each figure's gate as the compare stage records it (``tasks.analysis.metric_gates``: ln(B/A) per
process with the set-up order taken out, its 99% repeated interval at the gate's last look and what being set up
first cost), recomputed from the gate's archived ``paired/result.json`` at tolerances 0.5 (cold step) and 0.2
(memory). Last line::

    process_figures: gates=<n> processes=<n> cold_ci=<widest [low, high]> memory_ci=<widest [low, high]>
    cold_false=<regressions at 0.5> memory_false=<regressions at 0.2> load1=<mean>
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the tolerances each figure is judged at here: what the docs suggest for a case
TOLERANCES = {"cold_step_tolerance": 0.5, "memory_tolerance": 0.2}
FIGURES = ("cold_step_ms", "model_rss_bytes")


def collect(home: Path, gates: int) -> None:
    """A/A gates of demo_mobilenet v1 into ``home`` (module docstring)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PERFWATCH_HOME": str(home)}
    env.pop("PERFWATCH_DATABASE_URL", None)
    exe = str(ROOT / ".venv" / "bin" / "perfwatch")
    subprocess.run([exe, "demo", "build-store"], env=env, check=True, capture_output=True)
    (home / "load1_start.txt").write_text(f"{os.getloadavg()[0]:.2f}\n")
    subprocess.run([exe, "calibrate", "demo_mobilenet", "--version", "1", "--gates", str(gates)], env=env, check=True)


def analyse(homes: list[Path]) -> None:
    """Print every gate's figures (module docstring)."""
    from tasks.analysis.metric_gates import process_gates
    from tasks.runner.protocol import PairedGateSamples, read_view

    widest: dict[str, tuple[float, float]] = {}
    false = dict.fromkeys(FIGURES, 0)
    n_gates = n_procs = 0
    loads = []
    for home in homes:
        if (home / "load1_start.txt").exists():
            loads.append(float((home / "load1_start.txt").read_text()))
        for path in sorted(home.glob("archive/*/*/paired/result.json")):
            g = read_view(path, PairedGateSamples)
            n_gates, n_procs = n_gates + 1, n_procs + len(g.processes)
            share = g.host_load.get("other_cpu_share")
            k = len(g.processes)
            print(f"{path.parts[-3][:9]} ({home.name}): {k} processes, other processes' CPU share {share}")
            gates = process_gates(  # as the compare stage computes them: the repeated interval of the gate's last look
                g.processes,
                TOLERANCES,
                confidence=0.99,
                looks=g.gate.get("look_processes") or None,
                max_processes=(g.gate.get("design") or {}).get("max_processes"),
            )
            for gate in gates.values():
                print(f"  {gate.reason}")
                false[gate.metric] += gate.verdict == "regression"
                if gate.ci_low is not None and gate.ci_high is not None:
                    lo, hi = widest.get(gate.metric, (1.0, 1.0))
                    widest[gate.metric] = (min(lo, gate.ci_low), max(hi, gate.ci_high))
            if len(gates) < len(FIGURES):
                print(f"  not recorded by its processes: {sorted(set(FIGURES) - {x.metric for x in gates.values()})}")

    def span(m: str) -> str:
        return f"[{widest[m][0]:.3f},{widest[m][1]:.3f}]" if m in widest else "none"

    load = f"{statistics.mean(loads):.2f}" if loads else "unrecorded"
    print(
        f"process_figures: gates={n_gates} processes={n_procs} cold_ci={span('cold_step_ms')} "
        f"memory_ci={span('model_rss_bytes')} cold_false={false['cold_step_ms']} "
        f"memory_false={false['model_rss_bytes']} load1={load}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collect", action="store_true")
    p.add_argument("--home", type=Path, action="append", help="a perfwatch home holding A/A gates (repeatable)")
    p.add_argument("--gates", type=int, default=4)
    a = p.parse_args()
    homes = a.home or [ROOT / "bench" / "data" / "process_figures"]
    if a.collect:
        collect(homes[0], a.gates)
    analyse(homes)


if __name__ == "__main__":
    main()
