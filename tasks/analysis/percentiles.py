"""Percentiles with their confidence: distribution-free intervals from order statistics.

A percentile perfwatch reports (an infer/tflite run's per-batch latency p50/p90/p99, the sweep's p99
step time) is one order statistic of the run's measured steps. Its sampling error is known without any
assumption on the distribution (continuous, i.i.d. samples): for the true p-quantile ``q`` of a
sample of ``n`` and its order statistics ``x(1) <= ... <= x(n)``, the number ``B`` of samples at or
below ``q`` is Binomial(n, p), and ``x(l) <= q < x(u)`` exactly when ``l <= B < u``. So

    P(x(l) <= q <= x(u)) >= P(l <= B <= u - 1) = F(u - 1) - F(l - 1),     F: the Binomial(n, p) CDF

(Conover, *Practical Nonparametric Statistics*, 3rd ed., 1999, sec. 3.2, "confidence interval for a
quantile"; Hahn & Meeker, *Statistical Intervals*, 1991, sec. 5.2), computed with ``scipy.stats.binom``.

Which ranks: of the pairs ``1 <= l < u <= n`` whose exact level ``F(u-1) - F(l-1)`` is at least the stated
one, the shortest in ranks (Zielinski & Zielinski, "Best exact nonparametric confidence intervals for
quantiles", *Statistics* 39, 2005), then the one whose level is nearest the stated one, then the one
with the most equal tails. ``scipy.stats.quantile_test(...).confidence_interval`` gives the
equal-tailed pair instead (each tail at most alpha/2); it is valid too but, the binomial being discrete,
often much above its level: for p99 of 1,000 samples at 95% its ranks 983..997 hold 97.6%, these
983..996 hold 95.7% (``bench/percentiles.py`` checks the coverage by simulation; the tests check
that both agree where the tails are symmetric). Neither tail exceeds alpha, so each bound alone is a
one-sided bound at >= 1 - alpha: the sweep's knee reads the upper one.

A sample too short for a percentile says so. A two-sided interval exists only when the widest pair,
``x(1)..x(n)``, reaches the level: ``1 - p**n - (1-p)**n >= 1 - alpha``; for p99 at 95% that is
n >= 299 (:func:`min_samples`). Below it the percentile is *not estimable*, and what the sample does
support is reported instead, after MLPerf's early stopping (LoadGen's early-stopping criterion,
mlcommons/inference ``loadgen/early_stopping.cc``: the percentile a short run can still vouch for): the
one-sided lower bound (the equal-tailed rank, at 1 - alpha/2), the confidence that the maximum bounds
the percentile (``1 - p**n``), and the highest percentile that this sample can bound at the level.

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
        low, high: the interval's bounds ``x(low_rank)``, ``x(high_rank)``. When not ``estimable``, the
            one-sided bounds at ``1 - (1-confidence)/2`` that the sample has (equal-tailed ranks), and None
            for a bound it is too short for (the p99's ``high`` under 299 samples at 95%).
        low_rank, high_rank: their 1-based ranks in the sorted sample; None as the bounds.
        confidence: the stated two-sided level (0.95).
        coverage: the interval's exact level for a continuous distribution, ``F(u-1) - F(l-1)`` with
            a missing bound taken as unbounded (>= ``confidence`` when ``estimable``).
        estimable: both bounds exist: the sample supports a two-sided interval at ``confidence``.
        min_n: the fewest samples that support a two-sided interval of this percentile at this level.
        max_bound_confidence: the confidence that the sample's maximum is at or above the true
            percentile, ``1 - p**n`` (what "p99 <= max" is worth when ``high`` is None).
        supported_percentile: the highest percentile a two-sided interval from this many samples reaches
            at ``confidence`` (root of ``p**n + (1-p)**n = 1 - confidence``; 97.0 for 100 samples at 95%);
            None when not even the median's.
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
    supported_percentile: float | None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain JSON object (what the run's ``latency_ms.ci`` keeps)."""
        return asdict(self)

    def text(self, unit: str = "ms", name: str | None = None) -> str:
        """One line, e.g. ``p99 12.31 ms [11.9, 13.0] (95%, n=1000)``, or for a short sample
        ``p99 not estimable from 100 samples at 95% (needs 299): p99 >= 11.90 ms; the max bounds it
        with 63.3% confidence; 100 samples bound up to p97.0``. The confidence and the percentile the sample
        reaches are rounded down (:func:`floored`): 291 samples say 94.6% and p98.9, never 95% and p99.0,
        which would claim what they do not support."""
        label = name or f"p{self.percentile:g}"
        level = level_text(self.confidence)

        def v(x: float) -> str:
            return f"{x:.2f} {unit}"

        if self.estimable:
            return f"{label} {v(self.point)} [{self.low:.2f}, {self.high:.2f}] ({level}, n={self.n})"
        parts = [f"{label} not estimable from {self.n} samples at {level} (needs {self.min_n})"]
        if self.low is not None:
            parts.append(f"{label} >= {v(self.low)}")
        if self.high is None:
            reach = (
                f"; {self.n} samples bound up to {self.reach_text()}" if self.supported_percentile is not None else ""
            )
            parts.append(f"the max bounds it with {floored(100 * self.max_bound_confidence)}% confidence{reach}")
        else:
            parts.append(f"{label} <= {v(self.high)}")
        return ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if parts[2:] else "")

    def reach_text(self) -> str:
        """The highest percentile this sample bounds two-sidedly at its level, rounded down
        (:func:`floored`): ``p97.0`` for 100 samples at 95% (97.05), ``p98.9`` for 291 (98.976); ``none``
        where not even the median's."""
        return "none" if self.supported_percentile is None else f"p{floored(self.supported_percentile)}"


def floored(x: float, digits: int = 1) -> str:
    """``x`` rounded *down* to ``digits`` decimals, as text (94.63 -> ``94.6``, 98.976 -> ``98.9``): what a
    short sample supports (a confidence in %, the highest percentile it bounds) is never printed above what it
    is; rounding to nearest made 291 samples' 94.6% and p98.98 read "95%" and "p99.0", the very level and
    percentile they fall short of. The 1e-9 absorbs float error (97.0 stays ``97.0``)."""
    scale = 10**digits
    return f"{math.floor(x * scale + 1e-9) / scale:.{digits}f}"


def level_text(confidence: float) -> str:
    """A level as text: ``95%``, ``99.5%`` (never rounded up to ``100%``)."""
    return f"{round(100 * confidence, 4):g}%"


def _check(percentile: float, confidence: float) -> tuple[float, float]:
    if not (isinstance(percentile, int | float) and 0 < percentile < 100):
        raise ValueError(f"percentile {percentile!r} must be a number strictly between 0 and 100 (99: p99)")
    if not (isinstance(confidence, int | float) and 0 < confidence < 1):
        raise ValueError(f"confidence {confidence!r} must be strictly between 0 and 1 (0.95: 95%)")
    return percentile / 100.0, 1.0 - confidence


def _widest_level(p: float, n: int) -> float:
    """The exact level of ``x(1)..x(n)``, the widest two-sided interval a sample of n has."""
    return 1.0 - p**n - (1.0 - p) ** n


def min_samples(percentile: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The fewest samples that support a two-sided distribution-free interval of ``percentile`` at
    ``confidence``: the smallest n with ``1 - p**n - (1-p)**n >= confidence`` (299 for p99 at 95%, 6
    for p50, 29 for p90; 459 for p99 at 99%, 2,995 for p99.9 at 95%).

    Raises:
        ValueError: ``percentile`` not in (0, 100) or ``confidence`` not in (0, 1).
    """
    p, alpha = _check(percentile, confidence)
    worst = max(p, 1.0 - p)
    n = max(2, math.floor(math.log(alpha) / math.log(worst)))  # worst**n <= alpha is necessary
    while n > 2 and _widest_level(p, n - 1) >= confidence - 1e-12:  # the logarithm's rounding
        n -= 1
    while _widest_level(p, n) < confidence - 1e-12:
        n += 1
    return n


def _supported_percentile(n: int, alpha: float) -> float | None:
    """The highest percentile (>= 50) that a two-sided interval from n samples reaches at level 1 - alpha:
    the root of ``p**n + (1-p)**n = alpha`` (``scipy.optimize.brentq``); None when not even the median's."""
    from scipy.optimize import brentq

    def f(p: float) -> float:  # decreasing on [0.5, 1)
        return p**n + (1.0 - p) ** n - alpha

    if f(0.5) > 0:
        return None
    return 100.0 * float(brentq(f, 0.5, 1.0 - 1e-15, xtol=1e-12))


def percentile_ci(samples: Sequence[float], percentile: float, confidence: float = DEFAULT_CONFIDENCE) -> PercentileCI:
    """The nearest-rank ``percentile`` of ``samples`` with its two-sided distribution-free interval at
    ``confidence`` (module docstring: Conover 1999 sec. 3.2; the shortest exact pair of ranks).

    Args:
        samples: the measured values (any unit; perfwatch's are ms per step or per batch), in any order.
        percentile: 0 < percentile < 100 (50, 90, 99).
        confidence: the two-sided level, 0 < confidence < 1.

    Returns:
        A :class:`PercentileCI`. E.g. the median of 10 samples at 95%: ranks 2 and 9 (level
        1 - 22/1024 = 97.9%); p99 of 1,000: ranks 983 and 996 (95.7%); p99 of 100: not estimable, the
        lower bound x(97) only.

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
    cdf = bd.cdf(np.arange(n + 1))  # cdf[k] = P(B <= k)
    below = cdf[:n]  # P(B < l) = F(l - 1) for l = 1..n
    j = np.searchsorted(cdf, below + confidence - 1e-12)  # per l: the smallest u - 1 reaching the level
    ok = j <= n - 1  # u <= n: the pair has an upper bound
    l_rank: int | None
    u_rank: int | None
    if ok.any():
        ls, us = np.arange(1, n + 1)[ok], j[ok] + 1
        level = cdf[us - 1] - below[ok]
        tails = np.abs(below[ok] - (1.0 - cdf[us - 1]))
        best = int(np.lexsort((tails, level, us - ls))[0])  # shortest, then the level nearest, then balanced
        l_rank, u_rank = int(ls[best]), int(us[best])
    else:  # not estimable: the one-sided bounds at 1 - alpha/2 that exist (equal tails, as scipy's)
        lo, hi = int(bd.ppf(alpha / 2)), int(bd.isf(alpha / 2)) + 1
        l_rank = lo if lo >= 1 else None
        u_rank = hi if hi <= n else None
    coverage = float((cdf[u_rank - 1] if u_rank is not None else 1.0) - (cdf[l_rank - 1] if l_rank else 0.0))
    point_rank = min(n, max(1, math.ceil(n * p - 1e-9)))  # nearest rank; the guard keeps ceil(100 x .99) at 99
    return PercentileCI(
        percentile=float(percentile),
        n=n,
        point=float(x[point_rank - 1]),
        low=None if l_rank is None else float(x[l_rank - 1]),
        high=None if u_rank is None else float(x[u_rank - 1]),
        low_rank=l_rank,
        high_rank=u_rank,
        confidence=float(confidence),
        coverage=min(1.0, max(0.0, coverage)),
        estimable=bool(ok.any()),
        min_n=min_samples(percentile, confidence),
        max_bound_confidence=float(1.0 - p**n),
        supported_percentile=_supported_percentile(n, alpha),
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
