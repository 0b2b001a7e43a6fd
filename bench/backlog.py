"""Benchmark: how often a server point is judged invalid (its queue grew through the run), by its rate over the
server's capacity, on a simulated server.

Run: ``.venv/bin/python bench/backlog.py`` (options: ``--seeds`` (40), ``--queries`` (299 and 1200)). About 10 s.

For each rate ``rho`` times the capacity (batches of 1 and 4, each batch taking 10 and 15 ms in turn, so the
capacity is the batch size over 12.5 ms), ``--seeds`` Poisson schedules are served by the runner's own loop
(``tasks.runner.loadgen.serve``) on a simulated clock, and each point is judged as the runner judges it
(``loadgen.backlog_growth``, ``loadgen.overload_reason``). Printed per row: the median and largest queue growth
(s of waiting per s of the run; ``rho - 1`` above capacity) and how many points were invalid. A simulated clock
has no host load; the real runs behind docs/models.md's figures are the product's (``perfwatch run ... --scenario
server``). The last line is one JSON object of the rows.
"""

from __future__ import annotations

import argparse
import json
import statistics

from tasks.runner import loadgen

RATES = (0.5, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.3, 2.0)
SERVICE_S = (0.010, 0.015)  # per batch, in turn


class SimClock:
    """A simulated monotonic clock: a step advances it by its service time (``SERVICE_S`` in turn), a sleep by what
    was asked; nothing really waits."""

    def __init__(self) -> None:
        self.t, self.k = 0.0, 0

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(0.0, s)

    def step(self) -> float:
        s = SERVICE_S[self.k % len(SERVICE_S)]
        self.k += 1
        self.t += s
        return s * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--queries", type=int, nargs="+", default=[299, 1200])
    args = ap.parse_args()
    rows = []
    for batch in (1, 4):
        capacity = batch / statistics.fmean(SERVICE_S)
        for rho in RATES:
            for n in args.queries:
                growth, invalid = [], 0
                for seed in range(args.seeds):
                    sim, qps = SimClock(), rho * capacity
                    trace = loadgen.serve(loadgen.poisson_arrivals(qps, n, seed), batch, sim.step, sim.clock,
                                          sim.sleep, qps)  # fmt: skip
                    growth.append(loadgen.backlog_growth(trace.arrivals_s, trace.queue_ms) or 0.0)
                    invalid += loadgen.overload_reason(trace) is not None
                row = {"batch": batch, "rho": rho, "queries": n, "growth_median": statistics.median(growth),
                       "growth_max": max(growth), "invalid": invalid, "seeds": args.seeds}  # fmt: skip
                rows.append(row)
                print(
                    f"batch {batch}  rho {rho:<4}  {n:>5} queries: growth median {row['growth_median']:.3f}, "
                    f"max {row['growth_max']:.3f}; invalid {invalid}/{args.seeds}"
                )
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
