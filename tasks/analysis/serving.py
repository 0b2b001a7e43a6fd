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
* **server**: the schedule issued its target rate (the runner scales the Poisson draw to it,
  ``tasks.runner.loadgen.poisson_arrivals``; within :data:`SCHEDULE_TOLERANCE`), achieved QPS matches the
  target when the rate is under capacity, every query was served, every query's latency (queueing included)
  is at least its batch's service time, and Little's law holds (:func:`littles_law_check`: the time-average
  number of queries in the system, from the arrival and completion timestamps, equals the achieved rate times
  the mean latency).
* **validity**: a server point whose queue grew through the run (the runner's ``tasks.runner.loadgen.
  overload_reason``: its queueing delay rose faster than ``BACKLOG_GROWTH_LIMIT`` s per s of the run) is
  ``invalid``, as MLPerf LoadGen's "Result is: INVALID": its rate is above the server's capacity, so its latency
  percentiles grow with the run's length and are not reported as results (:func:`point_summary`), its bound's
  outcome is ``invalid`` (not met), and a search never reports it as its max.
* **search**: a QPS search's points are checked for what would make its max QPS a guess
  (:func:`search_findings`): a rate that missed below one that met (non-monotonic), a re-measure that
  disagreed with the first measure of a rate, and a change of the host's load between points; its max QPS is
  the highest rate below which every measurement met (:func:`consistent_max`), stated as the rate issued.
* **precision**: a mixed-precision case really computed in its type (the compute dtypes the runner read from
  the model's layers' dtype policies).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.analysis import percentiles
from tasks.analysis.calibration import DEFAULT_MAX_OTHER_CPU_SHARE
from tasks.analysis.findings import WARNING, Finding
from tasks.records import throughput_def

#: a single-stream run's median per-batch latency may differ from its mean by this fraction before
#: "examples/s at the median" (batch_size / median) is said to disagree with the throughput over all batches
SKEW_TOLERANCE = 0.25
#: an offline run's per-batch intervals must cover its measured phase's wall time within this fraction
WALL_TOLERANCE = 0.05
#: relative deviation of the schedule's issued rate from its target: the runner scales the arrivals to the
#: target (``loadgen.poisson_arrivals``), so they differ by float rounding only (1e-15); a schedule drawn but
#: not scaled misses by ``1/sqrt(n)`` (about 6% at 299 queries), far outside this
SCHEDULE_TOLERANCE = 1e-6
#: the achieved rate may fall below the target by the drain after the last arrival (the last latency over the
#: point's duration) and this much more: the timer reads around the serving loop, microseconds of a >= 1 s point
ACHIEVED_SLACK = 0.01
#: Little's law: the time-average number in the system from the timestamps may differ from achieved rate x mean
#: latency by this fraction. Both are computed over the same window [0, duration] that every query arrives and
#: completes in, where L = lambda W holds exactly (the integral of N(t) is the sum of the sojourn times); they
#: differ by float rounding (1e-12) unless a latency disagrees with its query's arrival and its batch's completion
#: (another clock origin, a query counted in the wrong batch, a completion outside the window). 0.1% is 10 us of a
#: 10 ms mean latency, below the 2 decimals of ms any figure is printed with.
LITTLE_TOLERANCE = 1e-3
#: a search's points saw a change of the host's load when the other processes' share of its CPU time differs by
#: this much between two points: as much as the whole share a measurement may give others and still count as
#: quiet (``calibration.DEFAULT_MAX_OTHER_CPU_SHARE``)
HOST_LOAD_CHANGE = DEFAULT_MAX_OTHER_CPU_SHARE
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


def littles_law_check(point: dict[str, Any]) -> dict[str, Any] | None:
    """Little's law on one server point (``L = lambda W``; Little 1961): the time-average number of queries in
    the system over the point, ``L = (1/T) * integral of N(t) dt`` on ``[0, T]`` (``T``: ``duration_s``), with
    ``N(t)`` counted from the timestamps (each query in the system from its scheduled arrival, ``arrivals_s``,
    to its batch's completion, ``done_s``), against the achieved rate times the mean latency (``achieved_qps x
    mean(latency_ms)``), within :data:`LITTLE_TOLERANCE` (why so tight: there). None for a point stored without
    its timestamps (a runner before they were kept)."""
    arrivals, done = point.get("arrivals_s") or [], point.get("done_s") or []
    lat, batches = point["latency_ms"], point["batch_queries"]
    if not arrivals or len(done) != len(batches) or len(arrivals) != len(lat):
        return None
    departures = [d for d, count in zip(done, batches, strict=True) for _ in range(count)]
    window = float(point["duration_s"])
    events = sorted([(float(a), 1) for a in arrivals] + [(float(d), -1) for d in departures])
    area, inside, last = 0.0, 0, 0.0
    for t, change in events:  # the integral of N(t) over [0, window], N stepping at each arrival and completion
        t = min(max(t, 0.0), window)
        area += inside * (t - last)
        inside, last = inside + change, t
    area += inside * (window - last)
    in_system = area / window if window > 0 else float("nan")
    product = float(point["achieved_qps"]) * statistics.fmean(lat) / 1000.0
    ratio = in_system / product if product > 0 else float("nan")
    return _check(
        "littles_law",
        abs(ratio - 1.0) <= LITTLE_TOLERANCE,
        f"time-average {in_system:.4f} queries in the system (from {len(arrivals)} arrivals and {len(done)} batch "
        f"completions over {window:.3f} s) against achieved {point['achieved_qps']:.2f}/s x mean latency "
        f"{statistics.fmean(lat):.3f} ms = {product:.4f} (ratio {ratio:.6f}; within {LITTLE_TOLERANCE:.1%} expected)",
    )


def server_checks(point: dict[str, Any], batch_size: int) -> list[dict[str, Any]]:
    """One server point (``tasks.runner.protocol.ServerPoint`` as a dict) checked (module docstring)."""
    n = len(point["latency_ms"])
    issued = sum(point["batch_queries"])
    target = point["target_qps"]
    service = point["service_ms"]
    capacity = capacity_qps(batch_size, statistics.median(service))
    checks = [
        _check(
            "queries_served", issued == n and n > 0, f"{n} queries issued, {issued} served in {len(service)} batches"
        ),
        _check(
            "issued_rate",
            abs(point["issued_qps"] / target - 1.0) <= SCHEDULE_TOLERANCE,
            f"the schedule issued {point['issued_qps']:.2f}/s against target {target:.2f}/s (the arrivals are "
            f"scaled to the target: within {SCHEDULE_TOLERANCE:g} expected)",
        ),
    ]
    if target <= UNDER_CAPACITY * capacity:  # the server keeps up: it ends a last latency after the last arrival
        last = max(point["latency_ms"]) / 1000.0
        slack = ACHIEVED_SLACK + last / max(point["duration_s"], 1e-9)
        checks.append(
            _check(
                "achieved_rate",
                abs(point["achieved_qps"] / target - 1.0) <= slack,
                f"achieved {point['achieved_qps']:.2f}/s against target {target:.2f}/s under capacity "
                f"{capacity:.1f}/s (tolerance ±{slack:.1%}: the drain after the last arrival and "
                f"{ACHIEVED_SLACK:.0%})",
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
    if (little := littles_law_check(point)) is not None:
        checks.append(little)
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


def outcome(upper_ms: float | None, bound_ms: float | None, invalid: str | None = None) -> str | None:
    """A latency bound's outcome from the percentile's upper bound (ms): ``met`` (within ``bound_ms``),
    ``missed``, ``not estimable`` (the sample is too short to bound the percentile from above: it can show
    neither), or ``invalid`` (a server point whose queue grew through the run, ``invalid`` its reason: no
    percentile of it is a result); None without a bound. As the runner's ``loadgen.bound_outcome``."""
    if bound_ms is None:
        return None
    if invalid is not None:
        return "invalid"
    if upper_ms is None:
        return "not estimable"
    return "met" if upper_ms <= bound_ms else "missed"


def point_summary(point: dict[str, Any], percentile: float, bound_ms: float | None, batch_size: int) -> dict[str, Any]:
    """One server point as reported: rate asked (``target_qps``), issued (the schedule's rate, LoadGen's
    "scheduled samples per second") and achieved (queries served per second), queries, duration (s), the
    per-query latency percentiles (p50/p90/p99 and ``percentile``, ms, with their 95% intervals and n:
    ``percentiles.latency_cis``), queueing p50/p99 (ms), ``outcome`` (:func:`outcome` of the percentile's upper
    bound ``upper_ms`` against ``bound_ms``) and ``met`` (the outcome is ``met``; None without a bound),
    ``floor_upper_ms`` (the same upper bound of the latencies without their queueing, ``latency - queue`` per
    query: what a query sees at a rate low enough never to wait; None when not estimable), the host's load over
    the point, the point's checks, ``backlog_growth`` (s of queueing gained per s of the run, the runner's
    ``loadgen.backlog_growth``; None where not recorded) and ``invalid`` (why the point is not a valid measurement,
    the runner's ``loadgen.overload_reason``; None: valid, or stored before validity was judged)."""
    lat = point["latency_ms"]
    qs = sorted({50.0, 90.0, 99.0, float(percentile)})
    cis = percentiles.latency_cis(lat, qs)
    key = f"p{percentile:g}"
    upper = cis[key]["high"]
    floor = [a - b for a, b in zip(lat, point["queue_ms"], strict=True)]
    floor_upper = percentiles.latency_cis(floor, [float(percentile)])[key]["high"] if floor else None
    load = point.get("host_load") or {}
    invalid = point.get("invalid")
    result = outcome(upper, bound_ms, invalid)
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
        "floor_upper_ms": floor_upper,
        "outcome": result,
        "met": None if result is None else result == "met",
        "backlog_growth": point.get("backlog_growth"),
        "invalid": invalid,
        "host_load": {k: load.get(k) for k in ("load1_start", "load1_end", "other_cpu_share", "steal_share")},
        "checks": server_checks(point, batch_size),
    }


def consistent_max(points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The point a QPS search reports as its max (``point_summary`` records): the highest rate (``target_qps``)
    at which, and below which, every measurement met the bound: a rate measured twice must have met twice, and
    a rate that missed below one that met caps the max under it (the search is not monotonic there, and the
    higher rate's meeting is no evidence that the ones between would). Of a rate measured twice, its measurement
    with the higher upper bound (the less favourable). None when no rate qualifies."""
    best: dict[str, Any] | None = None
    for q in sorted({p["target_qps"] for p in points}):
        at = [p for p in points if p["target_qps"] == q]
        if not all(p["met"] for p in at):
            break
        best = max(at, key=lambda p: p["upper_ms"] if p["upper_ms"] is not None else math.inf)
    return best


def _pct(share: Any) -> str:
    return "?" if share is None else f"{100 * share:.0f}%"


def search_findings(points: Sequence[Mapping[str, Any]], percentile: float) -> list[Finding]:
    """What makes a QPS search's max a guess, from its points (``point_summary`` records, in the order measured),
    each a warning (``tasks.analysis.findings.Finding``):

    * ``search_non_monotonic``: a rate missed the bound below a rate that met it (latency did not grow with the
      rate: the host changed between the points, or one point caught a stall); names each such pair.
    * ``search_unconfirmed``: a rate measured twice (the search's confirmation, ``loadgen.QpsSearch.confirm``)
      met once and missed once.
    * ``search_host_load_changed``: the other processes' share of the host's CPU time differed between points by
      :data:`HOST_LOAD_CHANGE` or more (the points were measured on different hosts, in effect).

    Empty for a search of one point or without a bound."""
    key = f"p{percentile:g}"
    judged = [p for p in points if p.get("met") is not None]
    out: list[Finding] = []

    def upper(p: Mapping[str, Any]) -> str:
        return "not estimable" if p["upper_ms"] is None else f"{p['upper_ms']:.2f} ms"

    inversions = [
        (lo, hi) for lo in judged if not lo["met"] for hi in judged if hi["met"] and hi["target_qps"] > lo["target_qps"]
    ]
    if inversions:
        pairs = "; ".join(
            f"{lo['issued_qps']:.4g} q/s missed ({key} upper bound {upper(lo)}) below {hi['issued_qps']:.4g} q/s "
            f"that met ({upper(hi)})"
            for lo, hi in inversions[:3]
        )
        out.append(
            Finding(
                code="search_non_monotonic",
                severity=WARNING,
                message=f"QPS search not monotonic: {pairs}{'; ...' if len(inversions) > 3 else ''}. Latency did not "
                "grow with the rate, so the host changed between points or a stall fell into one; the max QPS is "
                "the highest rate below which every rate met",
                figure="rates that missed below a rate that met",
                value=float(len({id(lo) for lo, _ in inversions})),
            )
        )
    twice = {q for q in {p["target_qps"] for p in judged} if len([p for p in judged if p["target_qps"] == q]) > 1}
    for q in sorted(twice):
        at = [p for p in judged if p["target_qps"] == q]
        if len({bool(p["met"]) for p in at}) > 1:
            out.append(
                Finding(
                    code="search_unconfirmed",
                    severity=WARNING,
                    message=f"QPS search: {at[0]['issued_qps']:.4g} q/s re-measured disagreed with itself ("
                    + ", then ".join(f"{'met' if p['met'] else 'missed'} at {key} upper bound {upper(p)}" for p in at)
                    + "): the outcome at this rate is the host's, not the model's",
                    figure="re-measured rate, q/s",
                    value=float(q),
                )
            )
    shares = [x for p in points if isinstance(x := (p.get("host_load") or {}).get("other_cpu_share"), int | float)]
    if len(points) > 1 and shares and max(shares) - min(shares) >= HOST_LOAD_CHANGE:
        loads = [x for p in points if isinstance(x := (p.get("host_load") or {}).get("load1_start"), int | float)]
        load_text = f", 1-minute load {min(loads):.1f}-{max(loads):.1f}" if loads else ""
        out.append(
            Finding(
                code="search_host_load_changed",
                severity=WARNING,
                message=f"host load changed during the QPS search: other processes took {_pct(min(shares))}-"
                f"{_pct(max(shares))} of the CPU time between points{load_text}; rates measured at different "
                "loads are not comparable, so the max QPS may be the load's",
                figure="spread of the other processes' CPU share between points",
                value=max(shares) - min(shares),
                threshold=HOST_LOAD_CHANGE,
            )
        )
    return out


#: the reported point's fields a server summary repeats at its top level
SHOWN_KEYS = ("target_qps", "issued_qps", "achieved_qps", "queries", "latency", "outcome", "met", "upper_ms", "invalid")


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
        queries served/s at the reported point), ``outcome`` (:func:`outcome`: single-stream the per-batch
        percentile's upper bound against the bound, server the reported point's; None without a bound), ``met``
        (the outcome is ``met``), ``upper_ms`` and ``upper_needs`` (the upper bound, ms, and the samples a
        two-sided interval of the percentile needs), ``checks`` (module docstring); server adds ``points`` (every
        rate tried, :func:`point_summary`), the reported point's fields (``target_qps``, ``issued_qps``,
        ``achieved_qps``, ``queries``, ``latency``, ``invalid``: in a search its max, :func:`consistent_max`, else
        the only or last point; ``point_index``: its index in ``points``) and, in a search, ``max_qps`` (the max's
        issued rate, q/s; None: no rate met it), ``max_qps_target`` (its nominal rate) and ``findings``
        (:func:`search_findings`, as dicts).

    Raises:
        ValueError: a server record without points.
    """
    scenario = serving["scenario"]
    key = f"p{percentile:g}"
    out: dict[str, Any] = {
        "scenario": scenario,
        "percentile": percentile,
        "latency_bound_ms": bound_ms,
        "upper_needs": percentiles.min_samples(percentile),
        "compute_dtypes": list(compute_dtypes) if compute_dtypes is not None else None,
    }
    checks = precision_checks(precision, compute_dtypes)
    if scenario == "server":
        points = [point_summary(p, percentile, bound_ms, batch_size) for p in serving.get("points") or []]
        if not points:
            raise ValueError("a server run's record holds no points (expected the runner's serve_points)")
        search = bool(serving.get("search"))
        best = consistent_max(points) if search else None
        shown = best if best is not None else points[-1]
        out |= {
            "points": points,
            "point_index": points.index(shown),  # which of the points is reported (its raw latencies: the store's)
            "search": search,
            "max_qps": best["issued_qps"] if best is not None else None,
            "max_qps_target": best["target_qps"] if best is not None else None,
            "findings": [f.model_dump(mode="json") for f in search_findings(points, percentile)] if search else [],
            **{k: shown[k] for k in SHOWN_KEYS},
            "throughput_eps": shown["achieved_qps"],
        }
        checks += shown["checks"]
    elif scenario == "offline":
        out |= {"throughput_eps": serving["examples"] / serving["wall_s"], "met": None, "outcome": None}
        checks += offline_checks(serving, measured_ms)
    else:
        ci = (latency.get("ci") or {}).get(key)
        if ci is None and bound_ms is not None:  # the percentile is not among the run's three: compute it
            ci = percentiles.percentile_ci(measured_ms, percentile).as_dict()
        upper = (ci or {}).get("high")
        result = outcome(upper, bound_ms)
        out |= {
            "throughput_eps": latency["throughput_eps"],
            "outcome": result,
            "met": None if result is None else result == "met",
            "upper_ms": upper,
            "n": len(measured_ms),
        }
        checks += single_stream_checks(latency, batch_size)
    out["checks"] = checks
    out["consistent"] = all(c["ok"] for c in checks)
    return out


def offered_text(s: Mapping[str, Any]) -> str:
    """The rate a server point or summary offered: ``50 q/s offered (issued 50)``, the nominal rate and what the
    schedule issued (they differ in a run whose arrivals were not scaled to the target); the nominal alone for a
    summary without the issued rate."""
    issued = s.get("issued_qps")
    return f"{s['target_qps']:.4g} q/s offered" + ("" if issued is None else f" (issued {issued:.4g})")


def run_throughput_eps(summary: Mapping[str, Any] | None, per_batch_eps: float) -> float:
    """A run's one throughput figure (``runs.throughput_eps``: what `perfwatch run`, `runs`, `history`, the plugin's
    pages and ``/metrics`` give), examples/s: a server run's queries served per second at its reported point (its
    queries/s achieved, one query one example), an offline run's examples over its measured wall time (LoadGen's
    samples per second), from its scenario ``summary`` (:func:`summarize`); a single-stream, train or tflite run's
    ``per_batch_eps``, the examples of a step over the median step time (the stage's figure, ms timer). Which of
    them it is: ``tasks.records.throughput_def`` (stored as ``runs.throughput_def``)."""
    if throughput_def(summary) != "median_step":  # the rule of which figure it is, and its stored name
        return float((summary or {})["throughput_eps"])
    return per_batch_eps


def throughput_name(scenario: str | None) -> str:
    """What :func:`run_throughput_eps` is of a run of ``scenario``: ``queries/s achieved`` (server), ``examples/s
    over the run`` (offline), else ``examples/s at the median`` (a step's examples over the median step)."""
    return {"server": "queries/s achieved", "offline": "examples/s over the run"}.get(
        scenario or "", "examples/s at the median"
    )


def server_throughput_text(s: Mapping[str, Any], service_eps: float | None = None, service_note: str = "") -> str:
    """A server run's headline throughput, from its ``serving`` summary (:func:`summarize`): the rate it
    achieved at its reported point (queries served over the time to the last result), in queries/s and
    examples/s (one query is one example, LoadGen's sample; padding is no example), with the rate offered and
    issued: the run's throughput (:func:`run_throughput_eps`). ``service_eps``, where given, is labelled as what it
    is: the batches' service rate at the median batch (``batch_size`` / median service time), not what the server
    delivered; `perfwatch run` no longer shows it (a second "throughput" of the same run). ``service_note``
    follows the text.

    E.g. ``86.1 queries/s achieved (86.1 examples/s) at 100 q/s offered (issued 100)``; a search adds which point
    (``..., the max QPS``).
    """
    achieved = float(s["achieved_qps"])
    which = ""
    if s.get("search"):
        which = ", the max QPS" if s.get("max_qps") is not None else ", the last rate tried (none met the bound)"
    text = f"{achieved:.1f} queries/s achieved ({achieved:.1f} examples/s) at {offered_text(s)}{which}"
    if service_eps is not None:
        text += f"; service rate {service_eps:.1f} examples/s at the median batch"
    return text + service_note


def bound_text(s: Mapping[str, Any], unit: str = "samples") -> str:
    """A bound's outcome in words (:func:`outcome`): ``p99's 95% upper bound met within 50 ms``, ``... missed
    within 50 ms``, or ``p99's 95% upper bound within 50 ms: not estimable (needs 299 batches)``; empty
    without a bound."""
    if s.get("latency_bound_ms") is None or s.get("outcome") is None:
        return ""
    key = f"p{s['percentile']:g}"
    bound = f"within {s['latency_bound_ms']:g} ms"
    if s["outcome"] == "invalid":
        return f"{key}'s 95% upper bound {bound}: not judged, the point is invalid ({s.get('invalid')})"
    if s["outcome"] == "not estimable":
        have = f", have {s['n']}" if s.get("n") is not None else ""
        needs = s.get("upper_needs") or percentiles.min_samples(s["percentile"])
        return f"{key}'s 95% upper bound {bound}: not estimable (needs {needs} {unit}{have})"
    return f"{key}'s 95% upper bound {s['outcome']} {bound}"


def max_qps_text(s: Mapping[str, Any]) -> str | None:
    """A search's answer in one sentence (:func:`summarize`'s server summary), None for a run that is no search:
    ``max QPS 473 q/s (issued; nominal 473) with p99's 95% upper bound within 50 ms: p99 per query 40.07 ms
    [38.1, 42.9] (95%, n=299)``, or ``none of the 8 rates tried (...)``, and the search's warnings in a word."""
    if not s.get("search"):
        return None
    key = f"p{s['percentile']:g}"
    bound = f" within {s['latency_bound_ms']:g} ms" if s.get("latency_bound_ms") is not None else ""
    points = s.get("points") or []
    if s.get("max_qps") is None:
        lowest = min(points, key=lambda p: p["target_qps"]) if points else None
        text = f"max QPS with {key}'s 95% upper bound{bound}: none of the {len(points)} rates tried"
        if lowest is not None and lowest.get("invalid"):
            text += f" (at the lowest, {lowest['issued_qps']:.4g} q/s, the queue grew through the run: invalid)"
        elif lowest is not None:
            r = percentiles.PercentileCI(**lowest["latency"][key])
            text += f" (at the lowest, {lowest['issued_qps']:.4g} q/s, {r.text(name=key + ' per query')})"
            floor = lowest.get("floor_upper_ms")
            if floor is not None and s.get("latency_bound_ms") is not None and floor > s["latency_bound_ms"]:
                text += (
                    f"; no rate can meet it: without queueing, {key} per query's 95% upper bound is {floor:.2f} ms "
                    "(the batch's own service time), so the search stopped"
                )
    else:
        r = percentiles.PercentileCI(**s["latency"][key])
        text = (
            f"max QPS {s['max_qps']:.4g} q/s issued (nominal {s.get('max_qps_target', s['max_qps']):.4g}) with "
            f"{key}'s 95% upper "
            f"bound{bound}: {r.text(name=key + ' per query')}, achieved {s['achieved_qps']:.4g} q/s"
        )
    codes = [f["code"] for f in s.get("findings") or []]
    return text + (f"; unstable search: {', '.join(codes)}" if codes else "")


def serving_text(s: dict[str, Any]) -> list[str]:
    """A ``serving`` summary (:func:`summarize`) in lines for ``perfwatch run``."""
    key = f"p{s['percentile']:g}"
    bound = f" within {s['latency_bound_ms']:g} ms" if s.get("latency_bound_ms") is not None else ""
    lines = []
    if s["scenario"] == "server":
        for p in s["points"]:
            head = (
                f"server {offered_text(p)}: achieved {p['achieved_qps']:.4g}, {p['queries']} queries, "
                f"{p['duration_s']:.1f} s, load {p['host_load'].get('load1_start') or 0:.1f}, others "
                f"{_pct(p['host_load'].get('other_cpu_share'))} of the CPU: "
            )
            if p.get("invalid"):
                lines.append(f"{head}INVALID, {p['invalid']}")
                continue
            r = percentiles.PercentileCI(**p["latency"][key])
            verdict = {None: "", "met": " met", "missed": " missed", "not estimable": " could not judge"}[
                p.get("outcome", None if p["met"] is None else ("met" if p["met"] else "missed"))
            ]
            verdict += f" the bound{bound}" if verdict else ""
            lines.append(f"{head}per query {r.text()}{verdict}")
        if (answer := max_qps_text(s)) is not None:
            lines.append(answer)
        for f in s.get("findings") or []:
            lines.append(f"finding {f['code']}: {f['message']}")
    else:
        met = bound_text(s, "batches")
        lines.append(f"{s['scenario']}: {_own_throughput(s)}" + (f"; {met}" if met else ""))
    bad = [c for c in s["checks"] if not c["ok"]]
    lines.append(
        "numbers agree: " + ", ".join(c["check"] for c in s["checks"])
        if not bad
        else "numbers DISAGREE: " + "; ".join(f"{c['check']}: {c['detail']}" for c in bad)
    )
    if s.get("compute_dtypes"):
        lines.append(f"compute dtypes of the layers: {', '.join(s['compute_dtypes'])}")
    return lines


def summary_line(s: Mapping[str, Any], batch_size: int | None = None) -> str:
    """The scenario's figures in one plain line, for the measure task's log (what a DAG user reads besides the
    XCom dict) and under ``perfwatch runs``: a server search ``server search (batch 4): max QPS 473 q/s issued
    ...`` (:func:`max_qps_text`), a server rate ``server (batch 4) at 50 q/s offered (issued 50): achieved 49.8
    q/s; p99 per query 12.3 ms [...] (95%, n=320)``, single-stream and offline their throughput (and the bound's
    outcome). ``batch_size``: said when given."""
    key = f"p{s['percentile']:g}"
    batch = f" (batch {batch_size})" if batch_size is not None else ""
    if s["scenario"] == "server":
        if (answer := max_qps_text(s)) is not None:
            return f"server search{batch}: {answer}"
        if s.get("invalid"):
            return f"server{batch} at {offered_text(s)}: achieved {s['achieved_qps']:.4g} q/s; INVALID, {s['invalid']}"
        r = percentiles.PercentileCI(**s["latency"][key])
        met = bound_text(s, "queries")
        return (
            f"server{batch} at {offered_text(s)}: achieved {s['achieved_qps']:.4g} q/s; "
            f"{r.text(name=key + ' per query')}" + (f"; {met}" if met else "")
        )
    met = bound_text(s, "batches")
    return f"{s['scenario']}{batch}: {_own_throughput(s)}" + (f"; {met}" if met else "")


def _own_throughput(s: Mapping[str, Any]) -> str:
    """A single-stream or offline summary's own throughput, named: offline's is the run's throughput (``examples/s
    over the run``); single-stream's ``examples/s over all batches`` (examples over the batches' summed time) is
    not the run's throughput (its examples at the median batch, :func:`run_throughput_eps`) and says so."""
    if s["scenario"] == "offline":
        return f"{s['throughput_eps']:.1f} examples/s over the run"
    return f"{s['throughput_eps']:.1f} examples/s over all batches (the run's throughput is at the median batch)"
