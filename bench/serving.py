"""Benchmark: inference as a serving team measures it, for the two smallest zoo models, through the product.

Run: ``.venv/bin/python bench/serving.py`` (options: ``--models``, ``--batch-size`` (4), ``--bound-ms`` (the
latency bound, 50 ms), ``--start-qps`` (the search's first rate, 200 q/s), ``--telemetry-interval-ms`` (1000),
``--measured-steps`` (320: batches of single-stream and offline, queries per server point)). 76 s on the 2-core
dev machine at load 5-6.6 (2026-12-02).

What it does, in a temporary ``PERFWATCH_HOME``: builds the zoo's ``zoo_lambda`` (161 parameters) and ``zoo_cnn``
(898 parameters, fed 32x32x3 images), the two smallest of ``tasks.runner.zoo`` (in a subprocess: TensorFlow is
never imported here), and for each runs the measuring stages as the product runs them (``pull_model_version``,
one ``warm_up`` process per model, then one ``profiled_run`` process per scenario, which reuses that warm-up as
a nightly run reuses a stored one): the case in ``mode: infer`` at ``--batch-size``

* ``single-stream`` with ``latency_bound_ms``: per-batch latency p99 with its distribution-free 95% interval
  (``tasks.analysis.percentiles``), whether its upper bound is within the bound, examples/s;
* ``offline``: examples/s over the whole measured phase (batches back to back, each issued before the
  previous result is fetched);
* ``server`` with ``search_qps``: Poisson arrivals at each rate (``tasks.runner.loadgen``, the schedule scaled to
  issue the rate), every point tried with the rate it issued and achieved, the max QPS (the issued rate of the
  highest rate below which every measured rate's per-query p99 upper bound, arrival to result, queueing included,
  is within the bound; the search re-measures its final rates), the p99 with its interval there, and what made
  the search unstable (non-monotonic points, a re-measure that disagreed, a change of the host's load).

Why these settings: the search starts at ``--start-qps`` (200 q/s), not at half the warm-up's capacity: from
2,492 q/s an earlier run halved 8 times to 19.5 q/s and met nowhere, so zoo_lambda had no max QPS; from a rate a
CPU host serves, the search doubles up to the bound and brackets it. Every case samples telemetry once a second
(``telemetry_interval_ms: 1000``, as docs/models.md advises for server cases on a busy CPU host): at the default
100 ms the sampler thread, holding the GIL when the OS takes its CPU away, stalled the serving loop and put
zoo_lambda's p99 near 100 ms at every rate.

Beside each figure: how long its stage took (wall s, the runner process's start and TensorFlow's import
included) and the host's load over its measurement (1-minute load average at start and the share of CPU time
other processes took, ``tasks.runner.measure.HostLoad``). Each run's self-consistency checks
(``tasks.analysis.serving``) are printed, and offline's throughput is checked against single-stream's. The
last line is one JSON object: per model the figures, and the bench's wall time.

Last run: docs/models.md ("Models, inputs and modes") has its table, with the host's load beside each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: the two smallest zoo models by parameter count, and the Case fields each needs
MODELS: dict[str, dict[str, Any]] = {
    "zoo_lambda": {"safe_mode": False},
    "zoo_cnn": {"inputs": {"image": {"shape": [32, 32, 3]}}},
}


def loadavg() -> str:
    """``/proc/loadavg``'s first three fields (1, 5, 15-minute load), or ``os.getloadavg`` where it is absent."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def load_of(host_load: dict[str, Any]) -> str:
    """A ``HostLoad`` record in words: 1-minute load at start and other processes' CPU share."""
    return f"load {host_load.get('load1_start', float('nan')):.1f}, others {host_load.get('other_cpu_share', 0):.0%}"


def ci_text(d: dict[str, Any]) -> str:
    """One percentile's interval record (``PercentileCI`` fields) in words."""
    from tasks.analysis.percentiles import PercentileCI

    return PercentileCI(**d).text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models", default=",".join(MODELS), help=f"zoo models, comma-separated (default {','.join(MODELS)})"
    )
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--bound-ms", type=float, default=50.0, help="the latency bound of p99, ms (default 50)")
    ap.add_argument("--start-qps", type=float, default=200.0, help="the QPS search's first rate, q/s (default 200)")
    ap.add_argument(
        "--telemetry-interval-ms", type=int, default=1000, help="telemetry sampling period, ms (default 1000)"
    )
    ap.add_argument("--measured-steps", type=int, default=320)
    args = ap.parse_args()

    t_bench = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="perfwatch-serving-"))
    os.environ["PERFWATCH_HOME"] = str(home)
    names = [m for m in args.models.split(",") if m]
    store = home / "models"
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", f"from tasks.runner.zoo import build_zoo; build_zoo({str(store)!r}, {names!r})"],
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    print(f"built {', '.join(names)} in {time.perf_counter() - t0:.1f} s; /proc/loadavg {loadavg()}")

    from tasks.analysis.serving import offline_vs_single_stream
    from tasks.records import Case
    from tasks.stages.profiled_run import profiled_run
    from tasks.stages.pull import pull_model_version
    from tasks.stages.warmup import warm_up

    summary: dict[str, Any] = {
        "bound_ms": args.bound_ms,
        "batch_size": args.batch_size,
        "start_qps": args.start_qps,
        "telemetry_interval_ms": args.telemetry_interval_ms,
        "loadavg_start": loadavg(),
        "models": {},
    }
    for name in names:
        base = {"model": name, "version": "1", "mode": "infer", "batch_size": args.batch_size, **MODELS[name]}
        base |= {
            "measured_steps": args.measured_steps,
            "profiled_steps": 1,
            "telemetry_interval_ms": args.telemetry_interval_ms,
        }
        cases = {
            "single-stream": Case(**base, latency_bound_ms=args.bound_ms),
            "offline": Case(**base, scenario="offline"),
            "server": Case(
                **base,
                scenario="server",
                search_qps=True,
                target_qps=args.start_qps,
                latency_bound_ms=args.bound_ms,
            ),
        }
        work = home / "work" / name
        pulled = pull_model_version(str(store), name, "1", work)
        t0 = time.perf_counter()
        warm = warm_up(pulled, cases["single-stream"], work / "warmup", sys.executable)
        warm_s = time.perf_counter() - t0
        print(f"\n{name}: warm-up {warm.warmup_steps} steps in {warm_s:.1f} s (steady {warm.steady})")
        out: dict[str, Any] = {"warmup_s": round(warm_s, 1)}
        for scenario, case in cases.items():
            t0 = time.perf_counter()
            run = profiled_run(pulled, case, warm, work / scenario, sys.executable)
            took = time.perf_counter() - t0
            assert run.latency_ms is not None
            s = run.latency_ms["serving"]
            samples = json.loads(Path(run.samples_path).read_text())
            load = samples["host_load"]
            row: dict[str, Any] = {
                "case": case.name,
                "seconds": round(took, 1),
                "load1": round(load.get("load1_start", float("nan")), 2),
                "other_cpu_share": round(load.get("other_cpu_share", 0.0), 3),
                "throughput_eps": round(s["throughput_eps"], 1),
                "consistent": s["consistent"],
            }
            if scenario == "single-stream":
                p99 = run.latency_ms["ci"]["p99"]
                row |= {
                    "p99_ms": p99["point"],
                    "p99_low_ms": p99["low"],
                    "p99_high_ms": p99["high"],
                    "outcome": s.get("outcome"),
                }
                print(
                    f"  single-stream {case.name}: per batch {ci_text(p99)}; {s['throughput_eps']:.1f} examples/s; "
                    f"upper bound within {args.bound_ms:g} ms: {s.get('outcome')} ({took:.1f} s, {load_of(load)})"
                )
            elif scenario == "offline":
                print(
                    f"  offline {case.name}: {s['throughput_eps']:.1f} examples/s over the run "
                    f"({took:.1f} s, {load_of(load)})"
                )
            else:
                for p in s["points"]:
                    print(
                        f"    point {p['target_qps']:8.1f} q/s (issued {p['issued_qps']:8.1f}): achieved "
                        f"{p['achieved_qps']:8.1f}, {ci_text(p['latency']['p99'])}, {p.get('outcome')} "
                        f"({p['duration_s']:.2f} s, load {p['host_load'].get('load1_start') or 0:.1f}, others "
                        f"{p['host_load'].get('other_cpu_share') or 0:.0%})"
                    )
                p99 = s["latency"]["p99"]
                row |= {
                    "max_qps": s["max_qps"],
                    "achieved_qps": round(s["achieved_qps"], 1),
                    "p99_ms": p99["point"],
                    "p99_low_ms": p99["low"],
                    "p99_high_ms": p99["high"],
                    "n": p99["n"],
                    "points": [[round(p["issued_qps"], 1), p.get("outcome")] for p in s["points"]],
                    "findings": [f["code"] for f in s.get("findings") or []],
                }
                at = f"{s['max_qps']:.1f} q/s issued" if s["max_qps"] is not None else "none of the rates"
                print(
                    f"  server {case.name}: max QPS with p99's upper bound within {args.bound_ms:g} ms: {at}; there "
                    f"per query {ci_text(p99)}, achieved {s['achieved_qps']:.1f} q/s ({len(s['points'])} points, "
                    f"{took:.1f} s, {load_of(load)})"
                )
                for f in s.get("findings") or []:
                    print(f"    finding {f['code']}: {f['message']}")
            bad = [c for c in s["checks"] if not c["ok"]]
            print(
                "    checks: "
                + (
                    "all agree (" + ", ".join(c["check"] for c in s["checks"]) + ")"
                    if not bad
                    else "; ".join(f"FAILED {c['check']}: {c['detail']}" for c in bad)
                )
            )
            out[scenario] = row
        cross = offline_vs_single_stream(out["offline"]["throughput_eps"], out["single-stream"]["throughput_eps"])
        print(f"  {cross['check']}: {'ok' if cross['ok'] else 'FAILED'}: {cross['detail']}")
        out["offline_at_least_single_stream"] = cross["ok"]
        summary["models"][name] = out
    summary["seconds"] = round(time.perf_counter() - t_bench, 1)
    summary["loadavg_end"] = loadavg()
    print(f"\nbench {summary['seconds']:.0f} s; /proc/loadavg {loadavg()}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
