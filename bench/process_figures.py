"""Benchmark: the A/A noise of the per-process figures a paired gate judges beside step time (issue 38, item 1),
and so the default tolerances they are judged at: each version's cold step (ms) and resident memory (bytes: what
its load, build and cold step added).

Run: ``.venv/bin/python bench/process_figures.py --collect [--home DIR] [--gates 4] [--busy N]`` (about 2-5 min a
gate on the 2-core dev machine: ``perfwatch calibrate demo_mobilenet --version 1``, real A/A paired gates of up to 6
fresh processes each, into a fresh perfwatch home; ``--busy N`` runs N single-threaded numpy loops per core beside
them, ``bench/gates.py``'s ``BackgroundLoad``), then ``.venv/bin/python bench/process_figures.py [--home DIR ...]``
(seconds) to read one or more such homes.

Printed per gate: its processes, the looks at which it went on for a figure after step time had decided
(``waited_for``), the host (other processes' share of the CPU over the pairs, the 1-min load at the start), each
figure's per-process noise (:func:`noise`), and each figure's gate as the compare stage records it
(``tasks.analysis.metric_gates``: its 99% repeated interval at the gate's last look), recomputed from the gate's
archived ``paired/result.json`` at the product's default tolerances (``DEFAULT_TOLERANCES``: what a case that sets
none is judged at). Last line::

    process_figures: gates=<n> processes=<n> cold_ci=<widest [low, high]> memory_ci=<widest [low, high]>
    cold_false=<regressions at the default> memory_false=<regressions at the default> cold_pass=<passes>
    memory_pass=<passes> waited=<gates that went on for a figure> load1=<mean>
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
sys.path.insert(0, str(ROOT / "bench"))

FIGURES = ("cold_step_ms", "model_rss_bytes")


def collect(home: Path, gates: int, busy: int) -> None:
    """A/A gates of demo_mobilenet v1 into ``home``, ``busy`` numpy loops per core beside them (module docstring)."""
    from gates import BackgroundLoad

    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PERFWATCH_HOME": str(home)}
    env.pop("PERFWATCH_DATABASE_URL", None)
    exe = str(ROOT / ".venv" / "bin" / "perfwatch")
    subprocess.run([exe, "demo", "build-store"], env=env, check=True, capture_output=True)
    load = BackgroundLoad(busy * (os.cpu_count() or 1)).start()
    try:
        (home / "load1_start.txt").write_text(f"{os.getloadavg()[0]:.2f}\n")
        cmd = [exe, "calibrate", "demo_mobilenet", "--version", "1", "--gates", str(gates)]
        subprocess.run(cmd, env=env, check=True)
        (home / "load1_end.txt").write_text(f"{os.getloadavg()[0]:.2f}\n")
    finally:
        load.stop()


def noise(procs: list) -> str:
    """Each figure's per-process noise in one gate, the sd of its log (what ``figure_gate_power.py --defaults``
    simulates): the cold step's from the residuals of the order fit (ln(B/A) on the set-up order, K - 2 degrees of
    freedom) over sqrt(2), one figure's share of a difference of two; memory's within each side's processes that set
    it up first."""
    import numpy as np

    held = [p for p in procs if p.first_built and (p.a_cold_step_ms or 0) > 0 and (p.b_cold_step_ms or 0) > 0]
    out = []
    if len(held) > 2:
        d = np.log([p.b_cold_step_ms / p.a_cold_step_ms for p in held])
        x = np.c_[np.ones(len(held)), [1.0 if p.first_built == "B" else -1.0 for p in held]]
        r = d - x @ np.linalg.lstsq(x, d, rcond=None)[0]
        out.append(f"cold step {float(np.sqrt((r**2).sum() / (len(d) - 2) / 2)):.3f}")
    for who, field in (("A", "a_model_rss_bytes"), ("B", "b_model_rss_bytes")):
        v = [np.log(getattr(p, field)) for p in procs if p.first_built == who and (getattr(p, field) or 0) > 0]
        if len(v) > 1:
            out.append(f"memory set up first, {who} {float(np.std(v, ddof=1)):.3f}")
    return ", ".join(out) or "too few processes"


def analyse(homes: list[Path]) -> None:
    """Print every gate's figures (module docstring)."""
    from tasks.analysis.metric_gates import DEFAULT_TOLERANCES, process_gates
    from tasks.runner.protocol import PairedGateSamples, read_view

    widest: dict[str, tuple[float, float]] = {}
    false = dict.fromkeys(FIGURES, 0)
    passed = dict.fromkeys(FIGURES, 0)
    n_gates = n_procs = waited = 0
    loads = []
    for home in homes:
        for name in ("load1_start.txt", "load1_end.txt"):
            if (home / name).exists():
                loads.append(float((home / name).read_text()))
        for path in sorted(home.glob("archive/*/*/paired/result.json")):
            g = read_view(path, PairedGateSamples)
            n_gates, n_procs = n_gates + 1, n_procs + len(g.processes)
            share = g.host_load.get("other_cpu_share")
            k, went_on = len(g.processes), g.gate.get("waited_for") or {}
            waited += bool(went_on)
            print(
                f"{path.parts[-3][:9]} ({home.name}): {k} processes (looks {g.gate.get('look_processes')}, went on for "
                f"{went_on or 'nothing'} after step time decided), other processes' CPU share {share}"
            )
            gates = process_gates(  # as the compare stage computes them: the repeated interval of the gate's last look
                g.processes,
                {},  # no tolerance set: each figure at its default (DEFAULT_TOLERANCES)
                confidence=0.99,
                looks=g.gate.get("look_processes") or None,
                max_processes=(g.gate.get("design") or {}).get("max_processes"),
            )
            for gate in gates.values():
                print(f"  {gate.reason}")
                false[gate.metric] += gate.verdict == "regression"
                passed[gate.metric] += gate.verdict == "pass"
                if gate.ci_low is not None and gate.ci_high is not None:
                    lo, hi = widest.get(gate.metric, (1.0, 1.0))
                    widest[gate.metric] = (min(lo, gate.ci_low), max(hi, gate.ci_high))
            if len(gates) < len(FIGURES):
                print(f"  not recorded by its processes: {sorted(set(FIGURES) - {x.metric for x in gates.values()})}")
            print(f"  per-process noise (log sd): {noise(g.processes)}")

    def span(m: str) -> str:
        return f"[{widest[m][0]:.3f},{widest[m][1]:.3f}]" if m in widest else "none"

    load = f"{statistics.mean(loads):.2f}" if loads else "unrecorded"
    print(
        f"process_figures: gates={n_gates} processes={n_procs} cold_ci={span('cold_step_ms')} "
        f"memory_ci={span('model_rss_bytes')} cold_false={false['cold_step_ms']} "
        f"memory_false={false['model_rss_bytes']} cold_pass={passed['cold_step_ms']} "
        f"memory_pass={passed['model_rss_bytes']} waited={waited} load1={load}"
    )
    print(f"process_figures: default tolerances {DEFAULT_TOLERANCES}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collect", action="store_true")
    p.add_argument("--home", type=Path, action="append", help="a perfwatch home holding A/A gates (repeatable)")
    p.add_argument("--gates", type=int, default=4)
    p.add_argument("--busy", type=int, default=0, help="numpy loops per core beside the gates (--collect)")
    a = p.parse_args()
    homes = a.home or [ROOT / "bench" / "data" / "process_figures"]
    if a.collect:
        collect(homes[0], a.gates, a.busy)
    analyse(homes)


if __name__ == "__main__":
    main()
