"""Load generation for the inference scenarios, as pure functions: arrivals, the server's batching, the QPS search.

perfwatch's ``scenario`` follows MLPerf Inference LoadGen's (mlcommons/inference ``loadgen/``, "MLPerf
Inference Rules", section "Scenarios"): **single-stream** (LoadGen: the next query is issued when the
previous one completed; the metric is a latency percentile), **offline** (LoadGen: every query is available
at the start; the metric is throughput, samples/s over the whole run) and **server** (LoadGen: queries arrive
one sample each as a Poisson process at the target QPS, and a run is valid when the latency percentile,
from a query's issue to its completion, queueing included, is within the model's bound; the metric is the
highest such QPS). Where perfwatch differs, and why:

* **Query count and duration.** LoadGen's server runs last at least 600 s and 270,336 queries (to bound a
  p99 within 0.05%); perfwatch issues ``queries`` per point, at least the fewest that support a two-sided
  interval of the stated percentile (``tasks.analysis.percentiles.min_samples``: 299 for p99 at 95%), so a
  point takes ``queries / qps`` seconds and a nightly run stays minutes, not hours. The interval says how
  much that costs in precision, instead of a point that the sample cannot support.
* **Validity.** LoadGen's early-stopping estimate is an upper bound on the percentile at a confidence;
  perfwatch judges a point by the upper bound of its distribution-free 95% interval (the ``upper_rank``-th
  smallest latency, the rank ``tasks.analysis.percentiles`` gives for ``queries`` samples): met when it is
  within ``latency_bound_ms``.
* **Batching.** A LoadGen server query is one sample; the system under test batches as it likes. Here the
  server has the case's ``batch_size`` fixed (one compiled step shape, never a recompile): when it is free
  it takes every query waiting, oldest first, up to ``batch_size`` (:func:`batch_end`), waiting for the
  next arrival only when none waits (no batching timeout, TF Serving's ``batch_timeout_micros`` 0). A batch
  of fewer queries still computes ``batch_size`` examples (padding), as a fixed-shape server does.
* **Timer.** Latency is ours: ``time.perf_counter`` (monotonic) from the query's scheduled arrival to the
  moment its batch's outputs are on the host; a server that wakes late counts the lateness as queueing.
* **Schedule.** LoadGen draws exponential gaps at the target QPS from a seeded ``std::mt19937``
  (``loadgen.cc``, ``ScheduleDistribution<TestScenario::Server>``) and leaves, as a TODO in ``GenerateQueries``,
  "scale the query timeline at the end so the QPS as scheduled is equal to the QPS as requested"; it reports
  the rate as scheduled ("scheduled samples per second", ``results.cc``). perfwatch does that scaling
  (:func:`poisson_arrivals`): the drawn arrivals are stretched so that the ``n``-th falls at ``n / qps``, so the
  rate issued is the rate asked to rounding. Unscaled, one seed's 299 arrivals at 50 q/s spanned 6.9 s
  (43.3 q/s issued), and since every nightly run of a case reuses its seed, every run offered 43, never 50.
  The scaled schedule is still a Poisson process, conditioned on its ``n``-th arrival at ``n / qps``: the
  ratios ``S_k / S_n`` of a Poisson process's arrival times are independent of ``S_n`` (they are the order
  statistics of ``n - 1`` uniforms), so scaling keeps the pattern of bursts and gaps and fixes the count in the
  window. Unlike LoadGen the first query arrives after one gap (LoadGen's at 0): ``n`` gaps span the window,
  so the issued rate is ``n / S_n`` (LoadGen's ``(n - 1) / S_{n-1}`` counts the same gaps).
* **Search.** LoadGen's users find the max QPS by hand or by script; :class:`QpsSearch` bisects on the rate,
  then re-measures the highest rate that met and the lowest that missed (``confirm``): a search on a busy host
  is not monotonic (a rate can miss below one that meets), and the analysis (``tasks.analysis.serving``) says
  so and reports as max QPS only a rate below which every measurement met.

No TensorFlow here: the runner's measuring loop (:func:`serve`) takes the step, the clock and the sleep as
arguments, so the tests drive the same code with a simulated clock.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

#: a query due within this many seconds counts as arrived (a clock's rounding must not spin the idle loop)
CLOCK_RESOLUTION_S = 1e-9

#: a server point is invalid when its queries' queueing delay grows by more than this many seconds per second of
#: the run (:func:`backlog_growth`): at a rate ``rho`` times the server's capacity the queue grows for the whole
#: run and a query arriving at ``t`` waits about ``(rho - 1) t``, so the limit flags a rate above 1.05x capacity
BACKLOG_GROWTH_LIMIT = 0.05
#: ... and when the later third's median queueing delay exceeds the first third's by more than this many median
#: service times (a stable queue's waits move by a batch or two between thirds; a short point's slope alone is noisy)
BACKLOG_FLOOR_SERVICES = 2.0

SCENARIOS = ("single-stream", "offline", "server")
"""The scenario names, LoadGen's (``TestScenario::SingleStream``, ``Offline``, ``Server``) in its spelling."""


def poisson_arrivals(qps: float, n: int, seed: int) -> list[float]:
    """``n`` arrival times (s from the start, increasing) of a Poisson process at ``qps`` queries/s, issued at
    exactly ``qps``: the cumulative sum of independent exponential gaps of mean ``1/qps``, drawn by numpy's
    ``default_rng(seed)`` (the same seed gives the same schedule), scaled so that the ``n``-th arrival is at
    ``n / qps`` s (module docstring, "Schedule": LoadGen's TODO; the process conditioned on ``n`` arrivals in
    that window). The first query arrives after one gap.

    Raises:
        ValueError: ``qps`` not a positive finite number, or ``n`` < 1.
    """
    import numpy as np

    if not (isinstance(qps, int | float) and math.isfinite(qps) and qps > 0):
        raise ValueError(f"target_qps {qps!r} must be a positive number of queries per second")
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"queries {n!r} must be a positive integer")
    times = np.cumsum(np.random.default_rng(seed).exponential(1.0 / qps, size=n))
    times *= (n / qps) / times[-1]
    return [float(t) for t in times]


def batch_end(arrivals: Sequence[float], first: int, now: float, batch_size: int) -> int:
    """The server's batching rule (module docstring): the end (exclusive) of the batch that starts at query
    ``first`` at time ``now`` (s, the arrivals' clock): every query ``first, first + 1, ...`` that has arrived
    by ``now``, at most ``batch_size`` of them, and at least query ``first`` (the caller waited for it).

    Raises:
        ValueError: ``first`` out of range, or ``batch_size`` < 1.
    """
    if not 0 <= first < len(arrivals):
        raise ValueError(f"first query {first} out of range of {len(arrivals)} arrivals")
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size} must be at least 1")
    arrived = bisect.bisect_right(arrivals, now, lo=first)  # arrivals are sorted
    return min(first + batch_size, max(first + 1, arrived))


@dataclass
class ServerTrace:
    """What one server point measured (ms and s on the caller's clock, ``time.perf_counter`` in the runner).

    Attributes:
        target_qps: the Poisson rate the arrivals were drawn at, queries/s.
        arrivals_s: each query's scheduled arrival, s from the start.
        latency_ms: per query, from its arrival to its batch's result (queueing included).
        queue_ms: per query, from its arrival to the start of its batch.
        service_ms: per batch, the step's own time (its timer: the batch pulled, run, outputs on the host).
        batch_queries: per batch, the queries it served (1..batch_size).
        done_s: per batch, when its result was on the host, s from the start (each of its queries' completion).
        duration_s: from the start to the last result.
    """

    target_qps: float
    arrivals_s: list[float]
    latency_ms: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    service_ms: list[float] = field(default_factory=list)
    batch_queries: list[int] = field(default_factory=list)
    done_s: list[float] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def served(self) -> int:
        """Queries served (all that were issued, once :func:`serve` returned)."""
        return len(self.latency_ms)

    @property
    def issued_qps(self) -> float:
        """The rate the schedule issued: queries / the last arrival (s), LoadGen's "scheduled samples per second";
        ``target_qps`` to rounding for a :func:`poisson_arrivals` schedule (it is scaled to it)."""
        return len(self.arrivals_s) / self.arrivals_s[-1]

    @property
    def achieved_qps(self) -> float:
        """Queries served per second: served / ``duration_s`` (LoadGen's "completed samples per second")."""
        return self.served / self.duration_s if self.duration_s > 0 else float("nan")


def serve(
    arrivals: Sequence[float],
    batch_size: int,
    step: Callable[[], float],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    target_qps: float,
) -> ServerTrace:
    """Serve ``arrivals`` (s from the start, increasing) in arrival order, ``batch_size`` at most per batch
    (:func:`batch_end`): sleep until the oldest query not yet served has arrived when none waits, run
    ``step()`` (returns its own time in ms) once per batch, and time every query from its arrival to the
    batch's end on ``clock`` (s, monotonic). The start is ``clock()`` on entry.

    Returns:
        A :class:`ServerTrace` with every query served.

    Raises:
        ValueError: ``arrivals`` empty or not increasing, or ``batch_size`` < 1.
    """
    if not arrivals:
        raise ValueError("no arrivals to serve")
    if any(b < a for a, b in zip(arrivals, arrivals[1:], strict=False)):
        raise ValueError("arrivals must be in increasing order (s from the start)")
    trace = ServerTrace(target_qps=target_qps, arrivals_s=list(arrivals))
    t0 = clock()
    i, n = 0, len(arrivals)
    while i < n:
        now = clock() - t0
        while arrivals[i] - now > CLOCK_RESOLUTION_S:  # none waits: idle until the next arrival (a sleep may end early)
            sleep(arrivals[i] - now)
            now = clock() - t0
        j = batch_end(arrivals, i, now, batch_size)
        service = step()
        done = clock() - t0
        trace.service_ms.append(service)
        trace.batch_queries.append(j - i)
        trace.done_s.append(done)
        for k in range(i, j):
            trace.latency_ms.append((done - arrivals[k]) * 1000.0)
            trace.queue_ms.append(max(0.0, now - arrivals[k]) * 1000.0)
        i = j
    trace.duration_s = clock() - t0
    return trace


def _thirds(arrivals_s: Sequence[float], queue_ms: Sequence[float]) -> tuple[float, float, float] | None:
    """The first and last thirds of the queries in arrival order: their median queueing delays (ms) and the
    difference of their median arrivals (s); None for fewer than 6 queries or thirds that arrived at one instant."""
    if len(arrivals_s) != len(queue_ms):
        raise ValueError(f"arrivals_s has {len(arrivals_s)} queries, queue_ms {len(queue_ms)}: one each expected")
    n = len(arrivals_s)
    if n < 6:
        return None
    order = sorted(range(n), key=lambda i: arrivals_s[i])
    first, last = order[: n // 3], order[n - n // 3 :]
    span = statistics.median(arrivals_s[i] for i in last) - statistics.median(arrivals_s[i] for i in first)
    if span <= 0:
        return None
    return statistics.median(queue_ms[i] for i in first), statistics.median(queue_ms[i] for i in last), span


def backlog_growth(arrivals_s: Sequence[float], queue_ms: Sequence[float]) -> float | None:
    """How fast a server point's queue grew: the slope of each query's queueing delay (``queue_ms``, converted to
    s) against its arrival (``arrivals_s``, s from the start), dimensionless (s of waiting gained per s of the
    run), by Tukey's three-group resistant line (Tukey 1977, *Exploratory Data Analysis*, ch. 10; Bartlett 1949):
    the queries in arrival order are cut into thirds, and the slope is the difference of the last and first
    thirds' median delays over the difference of their median arrivals. Medians, so a stall that delays one burst
    does not read as growth. A stable queue's slope is near 0; a rate ``rho`` times the capacity grows the
    queue for the whole run, ``rho - 1``.

    Returns:
        The slope, or None for fewer than 6 queries or thirds that arrived at one instant.

    Raises:
        ValueError: ``arrivals_s`` and ``queue_ms`` differ in length."""
    thirds = _thirds(arrivals_s, queue_ms)
    if thirds is None:
        return None
    early_ms, late_ms, span_s = thirds
    return (late_ms - early_ms) / 1000.0 / span_s


def overload_reason(trace: ServerTrace) -> str | None:
    """Why a server point is not a valid measurement (MLPerf LoadGen's "Result is: INVALID"), None when it is: its
    queue grew through the run (:func:`backlog_growth` above :data:`BACKLOG_GROWTH_LIMIT`, and the last third's
    median queueing delay above the first third's by more than :data:`BACKLOG_FLOOR_SERVICES` median service
    times). Such a rate is above what the server can serve: every percentile of its latencies grows with the run's
    length (a longer run, a longer queue), so they are no property of the model at that rate."""
    thirds = _thirds(trace.arrivals_s, trace.queue_ms)
    if thirds is None or not trace.service_ms:
        return None
    early_ms, late_ms, _ = thirds
    growth = backlog_growth(trace.arrivals_s, trace.queue_ms)
    assert growth is not None  # the same thirds
    service_ms = statistics.median(trace.service_ms)
    if growth <= BACKLOG_GROWTH_LIMIT or late_ms - early_ms <= BACKLOG_FLOOR_SERVICES * service_ms:
        return None
    return (
        f"the queue grew through the run: queueing delay rose {growth:.3f} s per s of the run (limit "
        f"{BACKLOG_GROWTH_LIMIT:g}), from a median {early_ms:.1f} ms in the first third of the queries to "
        f"{late_ms:.1f} ms in the last (median service {service_ms:.1f} ms a batch): the rate is above the server's "
        "capacity, so its latencies grow with the run's length and are not results"
    )


def point_queries(
    qps: float, queries: int, min_point_s: float, ranks: dict[int, int | None] | None
) -> tuple[int, int | None]:
    """How many queries a point at ``qps`` issues and the rank of its percentile's upper bound: the smallest
    ``n`` of ``ranks`` (query count -> upper-bound rank, from ``tasks.analysis.percentiles``) with ``n >=
    queries`` and ``n / qps >= min_point_s`` (a point lasts at least ``min_point_s`` seconds, so that a fast rate
    is not judged on a few milliseconds of the host's life; LoadGen's minimum duration, scaled down), else the
    largest there is. Without ``ranks``: ``(queries, None)``.
    """
    if not ranks:
        return queries, None
    need = max(queries, math.ceil(qps * min_point_s))
    fit = [n for n in sorted(ranks) if n >= need]
    n = fit[0] if fit else max(ranks)
    return n, ranks[n]


def bound_outcome(
    latency_ms: Sequence[float], upper_rank: int | None, bound_ms: float | None
) -> Literal["met", "missed", "not estimable"] | None:
    """Whether the ``upper_rank``-th smallest latency (1-based: the upper bound of the percentile's interval,
    ``tasks.analysis.percentiles``) is within ``bound_ms``: ``met`` or ``missed``; ``not estimable`` when the
    sample has no such rank (too short to bound the percentile: neither met nor missed, and a bound that every
    latency is within is no exception); None when there is no bound."""
    if bound_ms is None:
        return None
    if upper_rank is None or not 1 <= upper_rank <= len(latency_ms):
        return "not estimable"
    return "met" if sorted(latency_ms)[upper_rank - 1] <= bound_ms else "missed"


def upper_bound_met(latency_ms: Sequence[float], upper_rank: int | None, bound_ms: float | None) -> bool | None:
    """:func:`bound_outcome` as the search judges a rate: True when met; False when missed or not estimable (a
    sample too short to bound its percentile cannot show that a rate meets the bound); None without a bound."""
    outcome = bound_outcome(latency_ms, upper_rank, bound_ms)
    return None if outcome is None else outcome == "met"


def service_floor_missed(
    latency_ms: Sequence[float], queue_ms: Sequence[float], upper_rank: int | None, bound_ms: float | None
) -> bool:
    """Whether a point's latencies without their queueing (``latency - queue`` per query, ms: the batch's own
    service time) miss ``bound_ms`` at the percentile's upper-bound rank (:func:`bound_outcome` ``missed``): the
    latency a query would see at a rate so low that it never waits. Batches are padded to ``batch_size``, so the
    service time does not fall with the rate, and no rate can meet such a bound. False when it is met, not
    estimable, or there is no bound.

    Raises:
        ValueError: ``latency_ms`` and ``queue_ms`` differ in length."""
    if len(latency_ms) != len(queue_ms):
        raise ValueError(f"latency_ms has {len(latency_ms)} queries, queue_ms {len(queue_ms)}: one each expected")
    floor = [lat - q for lat, q in zip(latency_ms, queue_ms, strict=True)]
    return bound_outcome(floor, upper_rank, bound_ms) == "missed"


@dataclass
class QpsSearch:
    """Bisection on the rate for the highest QPS that meets the latency bound (module docstring).

    Start at ``start_qps``; while no rate has failed, multiply the rate by ``growth`` after each met point;
    while none has met, divide it by ``growth`` (at most ``max_points`` points in all); once one rate met and a
    higher one failed, try their midpoint, until the failed rate is within ``rel_tol`` of the met one
    (``(failed - met) / failed <= rel_tol``) or ``max_points`` points were tried. Then, with ``confirm``, the
    rates the bisection ended on are measured once more: the highest that met, then the lowest that failed
    (where there is one), so the answer rests on two measurements of each side of the bound, not on whether
    one stall fell into one point (at most :data:`CONFIRM_POINTS` more points). While none has met, a failed
    point recorded ``unreachable`` (its queries' latencies without their queueing missed the bound too:
    :func:`service_floor_missed`) ends the search: a lower rate removes only queueing, so no rate can meet the
    bound (a search halving to its last point spent ``queries / rate`` s at each lower rate to learn nothing:
    299 queries at 0.78 q/s alone took 6.4 min). :meth:`next_qps` gives the next
    rate (None: done), :meth:`record` takes its outcome; :attr:`best` is the highest rate of the bisection that
    met (None: none did). The bisection assumes a rate that fails makes every higher one fail (latency grows with
    load); on a busy host it need not, which is why the confirmation exists and why the analysis
    (``tasks.analysis.serving.search_findings``) checks the points for it.

    Raises (construction):
        ValueError: ``start_qps`` not positive, ``growth`` <= 1, ``rel_tol`` not in (0, 1), ``max_points`` < 1.
    """

    start_qps: float
    max_points: int = 8
    rel_tol: float = 0.05
    growth: float = 2.0
    confirm: bool = True
    points: list[tuple[float, bool]] = field(default_factory=list)
    #: a failed point's latencies missed the bound without their queueing: no rate can meet it
    unreachable: bool = False
    #: the rates to re-measure once the bisection is done, and those still to measure (None: not started)
    _planned: list[float] = field(default_factory=list, init=False, repr=False)
    _confirming: list[float] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_qps) and self.start_qps > 0):
            raise ValueError(f"start_qps {self.start_qps!r} must be a positive number of queries per second")
        if not self.growth > 1:
            raise ValueError(f"growth {self.growth!r} must be above 1")
        if not 0 < self.rel_tol < 1:
            raise ValueError(f"rel_tol {self.rel_tol!r} must be strictly between 0 and 1")
        if self.max_points < 1:
            raise ValueError(f"max_points {self.max_points!r} must be at least 1")

    @property
    def _bisection(self) -> list[tuple[float, bool]]:
        """The points of the bisection, without the confirmations."""
        return self.points[: len(self.points) - self.confirmed]

    @property
    def confirmed(self) -> int:
        """Points measured as confirmations (re-measures of the bisection's final rates)."""
        if self._confirming is None:
            return 0
        return len(self._planned) - len(self._confirming)

    @property
    def best(self) -> float | None:
        """The highest rate of the bisection that met the bound (queries/s), None when none did."""
        met = [q for q, ok in self._bisection if ok]
        return max(met) if met else None

    @property
    def lowest_failed(self) -> float | None:
        """The lowest rate of the bisection that failed the bound (queries/s), None when none did."""
        failed = [q for q, ok in self._bisection if not ok]
        return min(failed) if failed else None

    def _bisect_next(self) -> float | None:
        if not self.points:
            return self.start_qps
        if len(self.points) >= self.max_points:
            return None
        lo, hi = self.best, self.lowest_failed
        if hi is None:
            assert lo is not None
            return lo * self.growth
        if lo is None:
            return None if self.unreachable else hi / self.growth
        if (hi - lo) / hi <= self.rel_tol:
            return None
        return (lo + hi) / 2.0

    def next_qps(self) -> float | None:
        """The next rate to try (queries/s), or None when the search is done (class docstring)."""
        if self._confirming is None:
            if (q := self._bisect_next()) is not None:
                return q
            if not self.confirm or self.best is None:
                return None
            self._planned = [self.best] + ([self.lowest_failed] if self.lowest_failed is not None else [])
            self._confirming = list(self._planned)
        return self._confirming[0] if self._confirming else None

    def record(self, qps: float, met: bool, unreachable: bool = False) -> None:
        """The outcome of the point at ``qps`` (met: the percentile's upper bound was within the bound;
        ``unreachable``: it missed even without queueing, :func:`service_floor_missed`)."""
        self.points.append((float(qps), bool(met)))
        self.unreachable = self.unreachable or (not met and unreachable)
        if self._confirming:
            self._confirming.pop(0)


#: most points a confirmation adds to a search (:class:`QpsSearch`: the highest met rate and the lowest failed)
CONFIRM_POINTS = 2
