"""Benchmark: how many processes the per-process figure gates need (issue 38, item 1), simulated.

The model is the fake runner's (``tests/helpers/fake_runner.py``): per-process log-normal noise on each figure (5% on
the cold step, 3% on memory), the version set up first paying 1.3x, the set-up order alternating from a random
start. Each series looks after every process from the third, as the paired gate does, with the product's own gates
(``tasks.analysis.metric_gates``: the cold step's order-covariate gate, memory's first-built gate) at tolerance 0.1,
and stops at the first decisive look. Checked against real runs: the real gates' figures in docs/verdicts.md.

Run: ``.venv/bin/python bench/figure_gate_power.py [--series 300]`` (seconds). Prints per figure and budget::

    figure_gate_power: figure=<name> factor=<x> budget=<K> decided=<share within K> mean_processes=<mean>

``--defaults``: a case that sets no tolerance instead (each figure at its default, ``metric_gates.DEFAULT_TOLERANCES``;
the gate going on for it only while it is undecided and looks past the default), step time deciding after 4 or 6
processes, a budget of 6, per-process noise of 8% and 15% (cold step) and 3% and 5% (memory): the real A/A gates'
log sd, ``bench/process_figures.py``'s noise line, was 0.04-0.13 quiet and 0.10-0.21 busy on the cold step (not
judged on a busy host) and at most 0.017 on memory (docs/verdicts.md)::

    figure_gate_power: defaults figure=<name> sd=<noise> factor=<x> step_stop=<K> regression=<share> pass=<share>
    undecided=<share> mean_processes=<mean>
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FIRST_COST = 1.3  #: what the version set up first pays (the fake runner's FIRST_COLD_COST)


def draw(r: random.Random, first: str, k: int, factor: float, sd: float) -> tuple[float, float, str]:
    """Process ``k``'s figure of A and of B (B ``factor`` times A's) and the version it set up first: the order
    alternating from ``first``, the first one paying :data:`FIRST_COST`, log-normal noise ``sd`` on each."""
    f = first if k % 2 == 0 else ("B" if first == "A" else "A")
    a = (FIRST_COST if f == "A" else 1.0) * math.exp(r.gauss(0, sd))
    return a, factor * (FIRST_COST if f == "B" else 1.0) * math.exp(r.gauss(0, sd)), f


def series(figure: str, factor: float, sd: float, budget: int, seed: int) -> int | None:
    """Processes at the first decisive look of one simulated gate, or None when undecided within ``budget``."""
    from tasks.analysis.metric_gates import first_built_gate, process_metric_gate

    r = random.Random(seed)
    first = r.choice("AB")
    a: list[float] = []
    b: list[float] = []
    b_first: list[bool] = []
    for k in range(budget):
        x, y, f = draw(r, first, k, factor, sd)
        a.append(x)
        b.append(y)
        b_first.append(f == "B")
        if k + 1 < 3:
            continue
        kw = {"metric": figure, "unit": "ms", "tolerance": 0.1, "confidence": 0.99}
        kw |= {"looks": list(range(3, k + 2)), "max_processes": budget}
        if figure == "model_rss_bytes":  # each process gives the figure of the version it set up first only
            firsts_a = [x for x, bf in zip(a, b_first, strict=True) if not bf]
            firsts_b = [y for y, bf in zip(b, b_first, strict=True) if bf]
            g = first_built_gate(firsts_a, firsts_b, **kw)
        else:
            g = process_metric_gate(a, b, b_first, **kw)
        if g.verdict != "inconclusive":
            return k + 1
    return None


def at_default(figure: str, factor: float, sd: float, step_stop: int, budget: int, seed: int) -> tuple[str, int]:
    """One simulated gate of a case that sets no tolerance: step time decides after ``step_stop`` processes, and the
    gate goes on for the figure as the product does (``metric_gates.undecided_gated``: while it is undecided and
    its estimate lies past its default tolerance), up to ``budget``. Returns the figure's verdict and the processes
    the gate ran."""
    from tasks.analysis.metric_gates import process_gates, undecided_gated

    r = random.Random(seed)
    first = r.choice("AB")
    procs = []
    a_f, b_f = (
        ("a_model_rss_bytes", "b_model_rss_bytes")
        if figure == "model_rss_bytes"
        else ("a_cold_step_ms", "b_cold_step_ms")
    )
    key = "model_memory" if figure == "model_rss_bytes" else "cold_step"
    for k in range(budget):
        x, y, f = draw(r, first, k, factor, sd)
        p = dict.fromkeys(("a_model_rss_bytes", "b_model_rss_bytes", "a_cold_step_ms", "b_cold_step_ms"))
        p[a_f], p[b_f] = 100.0 * x, 100.0 * y
        procs.append(SimpleNamespace(**p, first_built=f))
        if k + 1 < max(3, step_stop):
            continue
        g = process_gates(procs, {}, confidence=0.99, looks=list(range(3, k + 2)), max_processes=budget)
        if not undecided_gated(g, {}, busy=False):
            return str(g[key].verdict), k + 1
    return str(g[key].verdict), budget


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--series", type=int, default=300)
    p.add_argument("--defaults", action="store_true", help="a case with no tolerance set: the default tolerances")
    args = p.parse_args()
    n = args.series
    if args.defaults:
        for figure, sds, factors in (
            ("cold_step_ms", (0.08, 0.15), (1.0, 1.6, 2.0)),
            ("model_rss_bytes", (0.03, 0.05), (1.0, 1.3, 1.5, 2.0)),
        ):
            for sd, factor, stop in ((sd, f, st) for sd in sds for f in factors for st in (4, 6)):
                runs = [at_default(figure, factor, sd, stop, 6, s) for s in range(n)]
                share = {v: sum(x == v for x, _ in runs) / n for v in ("regression", "pass", "inconclusive")}
                print(
                    f"figure_gate_power: defaults figure={figure} sd={sd} factor={factor} step_stop={stop} "
                    f"regression={share['regression']:.3f} pass={share['pass']:.3f} "
                    f"undecided={share['inconclusive']:.3f} mean_processes={sum(k for _, k in runs) / n:.2f} series={n}"
                )
        return
    for figure, factor, sd, budgets in (("cold_step_ms", 1.6, 0.05, (6,)), ("model_rss_bytes", 1.3, 0.03, (6, 8))):
        for budget in budgets:
            ks = [series(figure, factor, sd, budget, s) for s in range(n)]
            done = [k for k in ks if k is not None]
            print(
                f"figure_gate_power: figure={figure} factor={factor} budget={budget} "
                f"decided={len(done) / n:.3f} mean_processes={sum(done) / max(1, len(done)):.2f} series={n}"
            )


if __name__ == "__main__":
    main()
