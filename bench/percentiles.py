"""Benchmark: do perfwatch's percentile intervals cover the true percentile as often as they say?

Run: ``.venv/bin/python bench/percentiles.py`` (1,000 simulated runs per sample size, n = 320, 1000 and
5000: about 10 s on the 2-core dev machine), ``--reps N`` and ``--ns 320,1000`` to change the grid,
``--sigma`` for the spread of the latencies.

What it does: draws ``--reps`` simulated runs of n per-batch latencies from a known distribution (lognormal,
median 10 ms, log-sd ``--sigma`` 0.25 by default: right-skewed like measured step times), and for each run
takes the p50, p90 and p99 with their stated two-sided 95% interval exactly as perfwatch does
(``tasks.analysis.percentiles.percentile_ci``: order statistics, the shortest pair of binomial ranks whose exact
level is >= 95%). It prints, per n and percentile, how often the interval held the true percentile (target for
an exact 95% method: 93-97% over 1,000 runs; the binomial ranks are discrete, so the exact level, also printed,
is a little above 95%), the mean interval width relative to the true value, and whether n supports a two-sided
interval at all. Where it does not (``--ns 100``: a p99 needs 299), the run reports only its lower bound, and
the coverage printed is that of [low, inf), marked ``(one-sided)``. Then the minimum n per percentile at 95%
and 99% (``min_samples``).

Last line (machine-readable): ``percentiles: p50_cover_n320=..% ... min_n_p99=299 reps=1000 seconds=..``.
The host load (``/proc/loadavg``) is printed before and after: only the run time depends on it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PERCENTILES = (50, 90, 99)


def loadavg() -> str:
    """``/proc/loadavg``'s first three fields (1, 5, 15-minute load), or ``os.getloadavg`` where it is absent."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        import os

        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000, help="simulated runs per sample size (default 1000)")
    ap.add_argument("--ns", default="320,1000,5000", help="sample sizes, comma-separated (default 320,1000,5000)")
    ap.add_argument("--sigma", type=float, default=0.25, help="log-sd of the lognormal latencies (default 0.25)")
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    import numpy as np
    from scipy import stats

    from tasks.analysis.percentiles import min_samples, percentile_ci

    ns = [int(x) for x in args.ns.split(",")]
    rng = np.random.default_rng(args.seed)
    mu = math.log(10.0)  # median 10 ms
    truth = {q: math.exp(mu + args.sigma * float(stats.norm.ppf(q / 100))) for q in PERCENTILES}
    print(
        f"/proc/loadavg {loadavg()}; lognormal latencies, median 10 ms, log-sd {args.sigma}; true "
        + ", ".join(f"p{q} {t:.3f} ms" for q, t in truth.items())
        + f"; {args.reps} runs per n; stated level 95% two-sided",
        flush=True,
    )
    t0 = time.perf_counter()
    summary: dict[str, str] = {}
    for n in ns:
        hits = dict.fromkeys(PERCENTILES, 0)
        widths: dict[int, list[float]] = {q: [] for q in PERCENTILES}
        first: dict[int, object] = {}
        for _ in range(args.reps):
            x = rng.lognormal(mu, args.sigma, n)
            for q in PERCENTILES:
                r = percentile_ci(x, q)
                first.setdefault(q, r)
                low = -math.inf if r.low is None else r.low
                high = math.inf if r.high is None else r.high
                hits[q] += low <= truth[q] <= high
                if r.estimable:
                    widths[q].append((high - low) / truth[q])
        for q in PERCENTILES:
            r = first[q]
            cover = hits[q] / args.reps
            se = math.sqrt(0.95 * 0.05 / args.reps)
            if r.estimable:  # type: ignore[attr-defined]
                what = (
                    f"ranks {r.low_rank}..{r.high_rank} of {n}, exact level {r.coverage:.2%}, "  # type: ignore[attr-defined]
                    f"mean width {np.mean(widths[q]):.2%} of the true value"
                )
            else:
                what = (
                    f"not estimable (needs n >= {r.min_n}): lower bound only, rank {r.low_rank}; "  # type: ignore[attr-defined]
                    f"the max bounds p{q} with {r.max_bound_confidence:.0%} confidence; the sample bounds up to "  # type: ignore[attr-defined]
                    f"p{r.supported_percentile:.2f}"  # type: ignore[attr-defined]
                )
            print(f"n={n:5d} p{q}: coverage {cover:.1%} (+-{1.96 * se:.1%} at 95% over {args.reps} runs); {what}")
            summary[f"p{q}_cover_n{n}"] = f"{100 * cover:.1f}%" + ("" if r.estimable else "(one-sided)")  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - t0
    print("minimum n for a two-sided interval (distribution-free: x(1)..x(n) reaches the level):")
    for level in (0.95, 0.99):
        print(f"  at {level:.0%}: " + ", ".join(f"p{q:g} {min_samples(q, level)}" for q in (50, 90, 95, 99, 99.9)))
    print(f"simulation {elapsed:.1f} s; /proc/loadavg {loadavg()}")
    print(
        "percentiles: "
        + " ".join(f"{k}={v}" for k, v in summary.items())
        + f" min_n_p50={min_samples(50)} min_n_p90={min_samples(90)} min_n_p99={min_samples(99)} "
        f"reps={args.reps} seconds={elapsed:.0f}"
    )


if __name__ == "__main__":
    main()
