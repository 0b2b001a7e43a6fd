"""The inference scenarios' figures and their self-consistency (pure functions over the runner's records).

The runner measures (``tasks.runner.loadgen``: MLPerf LoadGen's single-stream, offline and server
scenarios, scaled down); this module plans a server run (how many queries a point needs, the rank of the
percentile's upper bound, the search's first rate), summarises what came back with distribution-free
percentile intervals (``tasks.analysis.percentiles``), and checks that the numbers agree with themselves:

* **single-stream**: one batch at a time, so ``throughput x median latency ~ batch_size`` (examples/s over
  all batches is ``batch_size / mean``; the check holds the median within :data:`SKEW_TOLERANCE` of the
  mean, else "examples/s at the median" misstates the throughput).
* **offline**: throughput is examples over the whole measured phase; the per-batch intervals between results
  must add up to that phase (within :data:`WALL_TOLERANCE`), and a model's offline throughput must not fall
  below its single-stream one by more than noise (:func:`offline_vs_single_stream`).
* **server**: the schedule's rate is the target within Poisson tolerance (the n-th arrival of a Poisson
  process is Gamma(n, qps): ``n / T_n`` has relative sd ``1/sqrt(n)``; :func:`poisson_tolerance`), achieved QPS
  matches the target when the rate is under capacity, every query was served, and every query's latency
  (queueing included) is at least its batch's service time.
* **precision**: a mixed-precision case really computed in its type (the compute dtypes the runner read from
  the model's layers' dtype policies).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.analysis import percentiles

#: a single-stream run's median per-batch latency may differ from its mean by this fraction before
#: "examples/s at the median" (batch_size / median) is said to disagree with the throughput over all batches
SKEW_TOLERANCE = 0.25
#: an offline run's per-batch intervals must cover its measured phase's wall time within this fraction
WALL_TOLERANCE = 0.05
#: normal quantile of the Poisson-rate checks: two-sided 99.9% (an unchanged generator fails 1 run in 1,000)
POISSON_Z = 3.29
#: a server rate below this fraction of the capacity (batch_size / median service time) is "under capacity"
UNDER_CAPACITY = 0.8
#: an offline throughput may read this fraction below the single-stream one of the same model (host noise)
OFFLINE_NOISE = 0.10
#: timer slack, ms: a latency and the service time inside it are read from one clock at different moments
TIMER_SLACK_MS = 0.05
#: the compute dtype each mixed precision must show in the model's layers
PRECISION_DTYPE = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


def queries_per_point(
    measured_steps: int, percentile: float, confidence: float = percentiles.DEFAULT_CONFIDENCE
) -> int:
    """Queries a server point issues: ``measured_steps``, but at least the fewest that support a two-sided
    interval of ``percentile`` at ``confidence`` (``percentiles.min_samples``: 299 for p99 at 95%).

    Raises:
        ValueError: ``measured_steps`` < 1, or ``percentile``/``confidence`` out of range.
    """
    if measured_steps < 1:
        raise ValueError(f"measured_steps {measured_steps} must be at least 1")
    return max(measured_steps, percentiles.min_samples(percentile, confidence))


def upper_rank(n: int, percentile: float, confidence: float = percentiles.DEFAULT_CONFIDENCE) -> int | None:
    """The 1-based rank, among ``n`` sorted samples, of the upper bound of ``percentile``'s interval
    (``percentiles.percentile_ci``: the ranks depend on ``n`` alone, so the runner can judge a point without
    scipy); None when ``n`` is too short to bound it.

    Raises:
        ValueError: ``n`` < 1, or ``percentile``/``confidence`` out of range.
    """
    if n < 1:
        raise ValueError(f"n {n} must be at least 1")
    return percentiles.percentile_ci(list(range(n)), percentile, confidence).high_rank


def capacity_qps(batch_size: int, step_ms: float) -> float:
    """The most queries/s a server of ``batch_size`` can take when a batch costs ``step_ms`` (ms): full
    batches back to back, ``batch_size / (step_ms / 1000)``.

    Raises:
        ValueError: ``step_ms`` not positive or ``batch_size`` < 1.
    """
    if not (step_ms > 0 and batch_size >= 1):
        raise ValueError(f"capacity needs a positive step time (got {step_ms} ms) and batch_size >= 1")
    return batch_size / (step_ms / 1000.0)


def poisson_tolerance(n: int, z: float = POISSON_Z) -> float:
    """Relative tolerance of a rate measured over ``n`` Poisson arrivals: ``z / sqrt(n)`` (module docstring).

    Raises:
        ValueError: ``n`` < 1.
    """
    if n < 1:
        raise ValueError(f"n {n} must be at least 1")
    return z / math.sqrt(n)


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"check": name, "ok": bool(ok), "detail": detail}


def single_stream_checks(latency: dict[str, Any], batch_size: int) -> list[dict[str, Any]]:
    """``latency`` (``p50`` ms, ``throughput_eps`` examples/s over all batches): ``throughput x p50 / 1000 /
    batch_size`` (the median over the mean) within :data:`SKEW_TOLERANCE` of 1."""
    ratio = latency["throughput_eps"] * latency["p50"] / 1000.0 / batch_size
    return [
        _check(
            "throughput_x_latency",
            abs(ratio - 1.0) <= SKEW_TOLERANCE,
            f"throughput {latency['throughput_eps']:.1f} examples/s x median {latency['p50']:.3f} ms = "
            f"{ratio * batch_size:.2f} examples per batch of {batch_size} (median/mean {ratio:.3f}; within "
            f"{SKEW_TOLERANCE:.0%} expected)",
        )
    ]


def offline_checks(serving: dict[str, Any], intervals_ms: Sequence[float]) -> list[dict[str, Any]]:
    """An offline run's intervals (ms, one per batch) against its measured phase (``wall_s``, ``examples``):
    they must cover the phase within :data:`WALL_TOLERANCE`."""
    total = sum(intervals_ms) / 1000.0
    wall = serving["wall_s"]
    return [
        _check(
            "intervals_cover_run",
            wall > 0 and abs(total / wall - 1.0) <= WALL_TOLERANCE,
            f"{len(intervals_ms)} batch intervals add up to {total:.3f} s of a {wall:.3f} s run "
            f"({serving['examples'] / wall:.1f} examples/s over the run)",
        )
    ]


def offline_vs_single_stream(
    offline_eps: float, single_stream_eps: float, noise: float = OFFLINE_NOISE
) -> dict[str, Any]:
    """Offline's throughput (examples/s) is at least single-stream's of the same model and batch, less
    ``noise`` (a fraction): every query available at once can only help throughput."""
    return _check(
        "offline_at_least_single_stream",
        offline_eps >= single_stream_eps * (1.0 - noise),
        f"offline {offline_eps:.1f} examples/s against single-stream {single_stream_eps:.1f} "
        f"(at least {1 - noise:.0%} of it expected)",
    )


def server_checks(point: dict[str, Any], batch_size: int) -> list[dict[str, Any]]:
    """One server point (``tasks.runner.protocol.ServerPoint`` as a dict) checked (module docstring)."""
    n = len(point["latency_ms"])
    issued = sum(point["batch_queries"])
    tol = poisson_tolerance(n)
    target = point["target_qps"]
    service = point["service_ms"]
    capacity = capacity_qps(batch_size, statistics.median(service))
    checks = [
        _check(
            "queries_served", issued == n and n > 0, f"{n} queries issued, {issued} served in {len(service)} batches"
        ),
        _check(
            "issued_rate",
            abs(point["issued_qps"] / target - 1.0) <= tol,
            f"the schedule's rate {point['issued_qps']:.2f}/s against target {target:.2f}/s "
            f"(Poisson tolerance ±{tol:.1%} for {n} arrivals)",
        ),
    ]
    if target <= UNDER_CAPACITY * capacity:  # the server keeps up: it ends a last latency after the last arrival
        last = max(point["latency_ms"]) / 1000.0
        slack = tol + last / max(point["duration_s"], 1e-9)
        checks.append(
            _check(
                "achieved_rate",
                abs(point["achieved_qps"] / target - 1.0) <= slack,
                f"achieved {point['achieved_qps']:.2f}/s against target {target:.2f}/s under capacity "
                f"{capacity:.1f}/s (tolerance ±{slack:.1%})",
            )
        )
    short = []
    k = 0
    for b, count in enumerate(point["batch_queries"]):
        for lat, queued in zip(point["latency_ms"][k : k + count], point["queue_ms"][k : k + count], strict=True):
            if lat < service[b] - TIMER_SLACK_MS or queued < 0 or lat < queued:
                short.append((k, lat, service[b]))
        k += count
    checks.append(
        _check(
            "latency_at_least_service",
            not short,
            "every query's latency covers its queueing and its batch's service time"
            if not short
            else f"{len(short)} queries read less latency than their batch's service, e.g. (query, ms, ms) {short[:3]}",
        )
    )
    return checks


def precision_checks(precision: str, compute_dtypes: Sequence[str] | None) -> list[dict[str, Any]]:
    """A mixed-precision case's layers computed in its type (``float16``/``bfloat16`` among
    ``compute_dtypes``, read by the runner from the layers' dtype policies); none for fp32, or where the
    runner read none (a SavedModel, tflite)."""
    want = PRECISION_DTYPE.get(precision)
    if want is None or compute_dtypes is None:
        return []
    return [
        _check(
            "compute_dtype",
            want in compute_dtypes,
            f"precision {precision}: the model's layers computed in {list(compute_dtypes)} ({want} expected)",
        )
    ]


def point_summary(point: dict[str, Any], percentile: float, bound_ms: float | None, batch_size: int) -> dict[str, Any]:
    """One server point as reported: rate asked, issued and achieved (queries/s), queries, duration (s), the
    per-query latency percentiles (p50/p90/p99 and ``percentile``, ms, with their 95% intervals and n:
    ``percentiles.latency_cis``), queueing p50/p99 (ms), whether the percentile's upper bound is within
    ``bound_ms`` (``met``; None without a bound), the host's load over the point, and the point's checks."""
    lat = point["latency_ms"]
    qs = sorted({50.0, 90.0, 99.0, float(percentile)})
    cis = percentiles.latency_cis(lat, qs)
    key = f"p{percentile:g}"
    upper = cis[key]["high"]
    load = point.get("host_load") or {}
    return {
        "target_qps": point["target_qps"],
        "issued_qps": point["issued_qps"],
        "achieved_qps": point["achieved_qps"],
        "queries": len(lat),
        "batches": len(point["service_ms"]),
        "duration_s": point["duration_s"],
        "latency": cis,
        "queue_p50_ms": percentiles.percentile_ci(point["queue_ms"], 50).point,
        "queue_p99_ms": percentiles.percentile_ci(point["queue_ms"], 99).point,
        "service_p50_ms": statistics.median(point["service_ms"]),
        "upper_ms": upper,
        "met": None if bound_ms is None else (upper is not None and upper <= bound_ms),
        "host_load": {k: load.get(k) for k in ("load1_start", "load1_end", "other_cpu_share", "steal_share")},
        "checks": server_checks(point, batch_size),
    }


def summarize(
    serving: dict[str, Any],
    latency: dict[str, Any],
    measured_ms: Sequence[float],
    *,
    batch_size: int,
    percentile: float,
    bound_ms: float | None,
    precision: str = "fp32",
    compute_dtypes: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The scenario's figures of one infer/tflite run (what ``ProfiledRun.latency_ms["serving"]`` keeps).

    Args:
        serving: the runner's ``Serving`` record as a dict (scenario, wall_s, examples, points, search).
        latency: the run's per-batch summary with its intervals (``percentiles.with_intervals``).
        measured_ms: the measured per-batch times (ms; offline: the intervals between results).
        batch_size, percentile, bound_ms: the case's (``latency_percentile``, ``latency_bound_ms``).
        precision, compute_dtypes: the case's precision and the compute dtypes the runner read.

    Returns:
        ``scenario``, ``percentile``, ``latency_bound_ms``, ``compute_dtypes``, ``throughput_eps``
        (single-stream: examples over the batches' time; offline: examples over the whole run; server:
        queries served/s at the reported point), ``met`` (single-stream: the per-batch percentile's upper
        bound within the bound; server: the reported point's; None without a bound), ``checks``
        (module docstring); server adds ``points`` (every rate tried, :func:`point_summary`), the
        reported point's fields (the highest rate that met the bound in a search, else the only or last
        point) and, in a search, ``max_qps`` (None: no rate met it).

    Raises:
        ValueError: a server record without points.
    """
    scenario = serving["scenario"]
    out: dict[str, Any] = {
        "scenario": scenario,
        "percentile": percentile,
        "latency_bound_ms": bound_ms,
        "compute_dtypes": list(compute_dtypes) if compute_dtypes is not None else None,
    }
    checks = precision_checks(precision, compute_dtypes)
    if scenario == "server":
        points = [point_summary(p, percentile, bound_ms, batch_size) for p in serving.get("points") or []]
        if not points:
            raise ValueError("a server run's record holds no points (expected the runner's serve_points)")
        met = [p for p in points if p["met"]]
        shown = max(met, key=lambda p: p["target_qps"]) if serving.get("search") and met else points[-1]
        out |= {
            "points": points,
            "search": bool(serving.get("search")),
            "max_qps": max(p["target_qps"] for p in met) if serving.get("search") and met else None,
            **{k: shown[k] for k in ("target_qps", "issued_qps", "achieved_qps", "queries", "latency", "met")},
            "throughput_eps": shown["achieved_qps"],
        }
        checks += shown["checks"]
    elif scenario == "offline":
        out |= {"throughput_eps": serving["examples"] / serving["wall_s"], "met": None}
        checks += offline_checks(serving, measured_ms)
    else:
        upper = (latency.get("ci") or {}).get(f"p{percentile:g}", {}).get("high")
        if upper is None and bound_ms is not None:  # the percentile is not among the run's three: compute it
            upper = percentiles.percentile_ci(measured_ms, percentile).high
        out |= {
            "throughput_eps": latency["throughput_eps"],
            "met": None if bound_ms is None else (upper is not None and upper <= bound_ms),
        }
        checks += single_stream_checks(latency, batch_size)
    out["checks"] = checks
    out["consistent"] = all(c["ok"] for c in checks)
    return out


def server_throughput_text(s: Mapping[str, Any], service_eps: float | None = None, service_note: str = "") -> str:
    """A server run's headline throughput, from its ``serving`` summary (:func:`summarize`): the rate it
    achieved at its reported point (queries served over the time to the last result), in queries/s and
    examples/s (one query is one example, LoadGen's sample; padding is no example), with the rate offered; and
    ``service_eps``, where given, labelled as what it is: the batches' service rate at the median batch
    (``batch_size`` / median service time, what the run's step times give), not what the server delivered.
    ``service_note`` follows it.

    E.g. ``86.1 queries/s achieved (86.1 examples/s) at 100 q/s offered; service rate 1946.6 examples/s at
    the median batch``; a search adds which point (``at 120 q/s offered, the highest rate that met the bound``).
    """
    achieved = float(s["achieved_qps"])
    which = ""
    if s.get("search"):
        which = ", the highest rate that met the bound" if s.get("max_qps") is not None else ", the last rate tried"
    text = f"{achieved:.1f} queries/s achieved ({achieved:.1f} examples/s) at {s['target_qps']:.4g} q/s offered{which}"
    if service_eps is not None:
        text += f"; service rate {service_eps:.1f} examples/s at the median batch{service_note}"
    return text


def serving_text(s: dict[str, Any]) -> list[str]:
    """A ``serving`` summary (:func:`summarize`) in lines for ``perfwatch run``."""
    key = f"p{s['percentile']:g}"
    bound = f" within {s['latency_bound_ms']:g} ms" if s.get("latency_bound_ms") is not None else ""
    lines = []
    if s["scenario"] == "server":
        for p in s["points"]:
            r = percentiles.PercentileCI(**p["latency"][key])
            verdict = "" if p["met"] is None else (" met" if p["met"] else " missed") + f" the bound{bound}"
            lines.append(
                f"server {p['target_qps']:.4g} q/s (achieved {p['achieved_qps']:.4g}, {p['queries']} queries, "
                f"{p['duration_s']:.1f} s, load {p['host_load'].get('load1_start') or 0:.1f}): per query "
                f"{r.text()}{verdict}"
            )
        if s.get("search"):
            lines.append(
                f"max QPS with {key}'s 95% upper bound{bound}: "
                + (f"{s['max_qps']:.4g} q/s" if s["max_qps"] is not None else "none of the rates tried")
            )
    else:
        met = (
            "" if s.get("met") is None else (f"; {key}'s 95% upper bound" + (" met" if s["met"] else " missed") + bound)
        )
        lines.append(f"{s['scenario']}: {s['throughput_eps']:.1f} examples/s{met}")
    bad = [c for c in s["checks"] if not c["ok"]]
    lines.append(
        "numbers agree: " + ", ".join(c["check"] for c in s["checks"])
        if not bad
        else "numbers DISAGREE: " + "; ".join(f"{c['check']}: {c['detail']}" for c in bad)
    )
    if s.get("compute_dtypes"):
        lines.append(f"compute dtypes of the layers: {', '.join(s['compute_dtypes'])}")
    return lines
