"""Percentiles with their confidence: distribution-free intervals from order statistics.

A percentile perfwatch reports (an infer/tflite run's per-batch latency p50/p90/p99, the sweep's p99
step time) is one order statistic of the run's measured steps. Its sampling error is known without any
assumption on the distribution (continuous, i.i.d. samples): for the true p-quantile ``q`` of a
sample of ``n`` and its order statistics ``x(1) <= ... <= x(n)``, the number ``B`` of samples at or
below ``q`` is Binomial(n, p), and ``x(l) <= q < x(u)`` exactly when ``l <= B < u``. So

    P(x(l) <= q <= x(u)) >= P(l <= B <= u - 1) = F(u - 1) - F(l - 1),     F: the Binomial(n, p) CDF

(Conover, *Practical Nonparametric Statistics*, 3rd ed., 1999, sec. 3.2, "confidence interval for a
quantile"; Hahn & Meeker, *Statistical Intervals*, 1991, sec. 5.2). The ranks are equal-tailed: ``l``
the largest with ``P(B < l) <= alpha/2``, ``u`` the smallest with ``P(B >= u) <= alpha/2``. The values
are ``scipy.stats.quantile_test(...).confidence_interval`` (two-sided), which computes exactly these
ranks; the ranks and the exact coverage are recomputed here with ``scipy.stats.binom`` to be reported.

A sample too short for a percentile says so. The upper bound exists only when ``p**n <= alpha/2``
(even the maximum is below the true p-quantile with probability ``p**n``), the lower one only when
``(1-p)**n <= alpha/2``: for p99 at 95% that is n >= 368 (:func:`min_samples`). Below it the interval
is *not estimable*, and what the sample does support is reported instead, after MLPerf's early
stopping (LoadGen's "early stopping" criterion, mlcommons/inference ``loadgen/early_stopping.cc``:
the percentile a short run can still vouch for): the confidence that the maximum bounds the
percentile (``1 - p**n``), and the highest percentile whose upper bound the sample has at the level
(``(alpha/2)**(1/n)``; p96.4 from 100 samples at 95%).

The point is the nearest-rank percentile ``x(ceil(n p))``, the one ``sql/queries/sweep.sql`` and the
runner's ``latency_summary`` (numpy's ``inverted_cdf``) give.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_CONFIDENCE = 0.95
"""Two-sided level of every percentile interval perfwatch reports."""


@dataclass(frozen=True)
class PercentileCI:
    """One percentile of a sample with its distribution-free confidence interval.

    Attributes:
        percentile: the percentile, 0 < percentile < 100 (99: p99).
        n: the number of samples it rests on.
        point: the nearest-rank percentile ``x(ceil(n p))`` (the sample's unit, e.g. ms).
        low, high: the interval's bounds ``x(low_rank)``, ``x(high_rank)``; None where the sample is too
            short for that bound at ``confidence``.
        low_rank, high_rank: their 1-based ranks in the sorted sample; None as the bounds.
        confidence: the stated two-sided level (0.95).
        coverage: the interval's exact level for a continuous distribution, ``F(u-1) - F(l-1)`` with
            a missing bound taken as unbounded (>= ``confidence`` when ``estimable``).
        estimable: both bounds exist: the sample supports a two-sided interval at ``confidence``.
        min_n: the fewest samples that support a two-sided interval of this percentile at this level.
        max_bound_confidence: the confidence that the sample's maximum is at or above the true
            percentile, ``1 - p**n`` (what "p99 <= max" is worth when ``high`` is None).
        supported_percentile: the highest percentile whose upper bound this sample has at
            ``confidence`` (``100 (alpha/2)**(1/n)``).
    """

    percentile: float
    n: int
    point: float
    low: float | None
    high: float | None
    low_rank: int | None
    high_rank: int | None
    confidence: float
    coverage: float
    estimable: bool
    min_n: int
    max_bound_confidence: float
    supported_percentile: float

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain JSON object (what the run's ``latency_ms.ci`` keeps)."""
        return asdict(self)

    def text(self, unit: str = "ms", name: str | None = None) -> str:
        """One line, e.g. ``p99 12.31 ms [11.9, 13.0] (95%, n=1000)``, or for a short sample
        ``p99 not estimable from 100 samples at 95% (needs 368): p99 >= 11.9 ms; max 13.0 ms bounds it
        with 63% confidence; the sample bounds up to p96.4``."""
        label = name or f"p{self.percentile:g}"
        level = f"{self.confidence:.0%}"

        def v(x: float) -> str:
            return f"{x:.2f} {unit}"

        if self.estimable:
            return f"{label} {v(self.point)} [{self.low:.2f}, {self.high:.2f}] ({level}, n={self.n})"
        parts = [f"{label} not estimable from {self.n} samples at {level} (needs {self.min_n})"]
        if self.low is not None:
            parts.append(f"{label} >= {v(self.low)}")
        if self.high is None:
            parts.append(
                f"the max bounds it with {self.max_bound_confidence:.0%} confidence; the sample bounds up "
                f"to p{self.supported_percentile:.1f}"
            )
        else:
            parts.append(f"{label} <= {v(self.high)}")
        return ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if parts[2:] else "")


def _check(percentile: float, confidence: float) -> tuple[float, float]:
    if not (isinstance(percentile, int | float) and 0 < percentile < 100):
        raise ValueError(f"percentile {percentile!r} must be a number strictly between 0 and 100 (99: p99)")
    if not (isinstance(confidence, int | float) and 0 < confidence < 1):
        raise ValueError(f"confidence {confidence!r} must be strictly between 0 and 1 (0.95: 95%)")
    return percentile / 100.0, 1.0 - confidence


def min_samples(percentile: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The fewest samples that support a two-sided distribution-free interval of ``percentile`` at
    ``confidence``: the smallest n with ``max(p, 1-p)**n <= (1-confidence)/2`` (368 for p99 at 95%, 6
    for p50, 36 for p90; 528 for p99 at 99%, 3,688 for p99.9 at 95%).

    Raises:
        ValueError: ``percentile`` not in (0, 100) or ``confidence`` not in (0, 1).
    """
    p, alpha = _check(percentile, confidence)
    worst = max(p, 1.0 - p)
    n = max(1, math.ceil(math.log(alpha / 2) / math.log(worst)))
    while n > 1 and worst ** (n - 1) <= alpha / 2:  # the logarithms' rounding, either way
        n -= 1
    while worst**n > alpha / 2:
        n += 1
    return n


def percentile_ci(
    samples: Sequence[float], percentile: float, confidence: float = DEFAULT_CONFIDENCE
) -> PercentileCI:
    """The nearest-rank ``percentile`` of ``samples`` with its two-sided distribution-free interval at
    ``confidence`` (module docstring: Conover 1999 sec. 3.2; ``scipy.stats.quantile_test``).

    Args:
        samples: the measured values (any unit; perfwatch's are ms per step or per batch), in any order.
        percentile: 0 < percentile < 100 (50, 90, 99).
        confidence: the two-sided level, 0 < confidence < 1.

    Returns:
        A :class:`PercentileCI`. E.g. the median of 10 samples at 95%: ranks 2 and 9 (coverage
        1 - 22/1024 = 97.9%); p99 of 100 samples: low rank 97, no upper bound (not estimable).

    Raises:
        ValueError: ``samples`` empty or not all finite; ``percentile`` or ``confidence`` out of range.
    """
    import numpy as np
    from scipy import stats

    p, alpha = _check(percentile, confidence)
    x = np.sort(np.asarray(samples, dtype=float))
    n = int(x.size)
    if n == 0:
        raise ValueError("no samples to take a percentile of")
    if not np.isfinite(x).all():
        raise ValueError(f"samples must be finite numbers; got {x[~np.isfinite(x)][:5].tolist()}")
    bd = stats.binom(n, p)
    l_rank = int(bd.ppf(alpha / 2))  # largest l with P(B < l) <= alpha/2; 0: no lower bound
    u_rank = int(bd.isf(alpha / 2)) + 1  # smallest u with P(B >= u) <= alpha/2; n + 1: no upper bound
    ci = stats.quantile_test(x, q=float(x[0]), p=p).confidence_interval(confidence)
    low = None if math.isnan(ci.low) else float(ci.low)
    high = None if math.isnan(ci.high) else float(ci.high)
    if (low is None) != (l_rank < 1) or (high is None) != (u_rank > n):  # scipy's ranks are these ranks
        raise AssertionError(f"scipy's interval {ci} disagrees with ranks {l_rank}, {u_rank} of n={n}")
    coverage = float(bd.cdf(min(u_rank, n + 1) - 1) - (bd.cdf(l_rank - 1) if l_rank >= 1 else 0.0))
    point_rank = min(n, max(1, math.ceil(n * p - 1e-9)))  # nearest rank; the guard keeps ceil(100 x .99) at 99
    return PercentileCI(
        percentile=float(percentile),
        n=n,
        point=float(x[point_rank - 1]),
        low=low,
        high=high,
        low_rank=l_rank if low is not None else None,
        high_rank=u_rank if high is not None else None,
        confidence=float(confidence),
        coverage=min(1.0, coverage),
        estimable=low is not None and high is not None,
        min_n=min_samples(percentile, confidence),
        max_bound_confidence=float(1.0 - p**n),
        supported_percentile=float(100.0 * (alpha / 2) ** (1.0 / n)),
    )


LATENCY_PERCENTILES = (50, 90, 99)
"""The per-batch latency percentiles an infer/tflite run reports (``p50``, ``p90``, ``p99``)."""


def latency_cis(
    samples: Sequence[float], percentiles: Sequence[float] = LATENCY_PERCENTILES, confidence: float = DEFAULT_CONFIDENCE
) -> dict[str, dict[str, Any]]:
    """:func:`percentile_ci` of each of ``percentiles`` of ``samples`` as plain dicts keyed ``p50``,
    ``p90``, ``p99``: what an infer/tflite run keeps as ``latency_ms["ci"]`` (ms, our timer).

    Raises:
        ValueError: as :func:`percentile_ci`.
    """
    return {f"p{q:g}": percentile_ci(samples, q, confidence).as_dict() for q in percentiles}


def with_intervals(
    summary: dict[str, float], samples: Sequence[float], confidence: float = DEFAULT_CONFIDENCE
) -> dict[str, Any]:
    """An infer/tflite run's latency summary (``p50``/``p90``/``p99``/``max`` ms and ``throughput_eps``
    examples/s, from ``tasks.runner.measure.latency_summary``) with ``n`` (the measured batches it rests
    on), ``confidence`` and ``ci``: :func:`latency_cis` of ``samples`` (the same per-batch times, ms).
    The run record's ``latency_ms`` and the ``run_tables`` row ``inputs`` keep this.

    Raises:
        ValueError: as :func:`percentile_ci`.
    """
    return {**summary, "n": len(samples), "confidence": confidence, "ci": latency_cis(samples, confidence=confidence)}


def latency_text(latency: dict[str, Any], unit: str = "ms") -> str:
    """The percentiles of a ``latency_ms`` record (:func:`with_intervals`) on one line, each with its
    interval or what the sample supports (:meth:`PercentileCI.text`), e.g. ``p50 4.10 ms [4.05, 4.16],
    p90 ... (95%, n=1000 batches)``; a record without ``ci`` (stored before intervals were kept) gives
    its points with "no interval"."""
    ci = latency.get("ci")
    if not ci:
        return ", ".join(f"{k} {latency[k]:.2f} {unit}" for k in ("p50", "p90", "p99") if k in latency) + (
            " (no interval recorded)"
        )
    parts = []
    for key, d in ci.items():
        r = PercentileCI(**d)
        if r.estimable:
            parts.append(f"{key} {r.point:.2f} {unit} [{r.low:.2f}, {r.high:.2f}]")
        else:
            parts.append(r.text(unit))
    n, level = next(iter(ci.values()))["n"], next(iter(ci.values()))["confidence"]
    return ", ".join(parts) + f" ({level:.0%} intervals, n={n} batches)"
