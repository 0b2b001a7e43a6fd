"""Percentile confidence intervals from order statistics (tasks.analysis.percentiles)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tasks.analysis.percentiles import (
    floored,
    latency_cis,
    latency_text,
    min_samples,
    percentile_ci,
    with_intervals,
)


def test_median_of_ten_has_the_textbook_ranks():
    # Conover's table: the 95% interval of the median of 10 is x(2)..x(9); P(2 <= B <= 8), B ~ Bin(10, 1/2),
    # is 1 - 2 (1 + 10) / 1024; rank 3 would leave P(B < 3) = 56/1024 > 2.5% below
    r = percentile_ci([7.0, 1.0, 3.0, 10.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0], 50)
    assert (r.low_rank, r.high_rank, r.low, r.high) == (2, 9, 2.0, 9.0)
    assert r.point == 5.0 and r.n == 10 and r.estimable
    assert r.coverage == pytest.approx(1 - 22 / 1024)


def test_median_of_twenty_and_p90_of_hundred():
    r = percentile_ci(range(1, 21), 50)
    assert (r.low_rank, r.high_rank) == (6, 15)  # Conover's table again (symmetric tails)
    r = percentile_ci(np.arange(1.0, 101.0), 90)
    # by hand: x(85)..x(97) holds P(85 <= B <= 96) = F(96) - F(84) >= 95%, B ~ Bin(100, 0.9), and no pair
    # 11 ranks apart reaches 95% (the equal-tailed one, x(84)..x(96), is 12 apart too, at 95.8%)
    bd = stats.binom(100, 0.9)
    assert (r.low_rank, r.high_rank, r.point) == (85, 97, 90.0)
    assert r.coverage == pytest.approx(bd.cdf(96) - bd.cdf(84)) and r.coverage >= 0.95
    assert max(bd.cdf(lo + 10) - bd.cdf(lo - 1) for lo in range(1, 90)) < 0.95


def test_agrees_with_scipy_where_tails_are_symmetric_and_is_never_wider_in_level():
    x = np.random.default_rng(3).lognormal(0, 0.5, 1000)
    for n in (10, 20):  # the median of an even n: the shortest pair is scipy's equal-tailed one
        ci = stats.quantile_test(x[:n], q=1.0, p=0.5).confidence_interval(0.95)
        r = percentile_ci(x[:n], 50)
        assert (r.low, r.high) == (ci.low, ci.high)
    for q in (50, 90, 99):
        r = percentile_ci(x, q)
        ci = stats.quantile_test(x, q=1.0, p=q / 100).confidence_interval(0.95)
        xs = np.sort(x)
        bd = stats.binom(1000, q / 100)
        scipy_level = bd.cdf(int(np.searchsorted(xs, ci.high))) - bd.cdf(int(np.searchsorted(xs, ci.low)))
        assert 0.95 <= r.coverage <= scipy_level + 1e-12
        assert r.low <= r.point <= r.high
        assert r.point == np.percentile(x, q, method="inverted_cdf")  # nearest rank, as the runner's
    # p99 of 1000: ranks 983..996 at 95.7% where scipy's equal tails take 983..997 at 97.6%
    assert (percentile_ci(x, 99).low_rank, percentile_ci(x, 99).high_rank) == (983, 996)


def test_too_short_for_p99_says_what_it_supports():
    r = percentile_ci(np.arange(1.0, 101.0), 99)  # p99 of 100 samples at 95%: no upper bound
    assert not r.estimable and r.high is None and r.high_rank is None
    assert r.low == 97.0 and r.min_n == 299  # the one-sided lower bound: P(B < 97) <= 2.5%
    assert r.max_bound_confidence == pytest.approx(1 - 0.99**100)  # ~63%
    p = r.supported_percentile / 100  # the highest percentile 100 samples bound two-sidedly at 95%: p97.0
    assert p**100 + (1 - p) ** 100 == pytest.approx(0.05) and round(r.supported_percentile, 1) == 97.0
    text = r.text()
    assert "not estimable from 100 samples" in text and "needs 299" in text and "p97.0" in text
    assert percentile_ci(np.arange(1.0, 300.0), 99).estimable  # 299 samples: x(289)..x(299)
    assert not percentile_ci(np.arange(1.0, 299.0), 99).estimable


@pytest.mark.parametrize(
    ("n", "confidence", "reach"),
    [(100, "63.3%", "p97.0"), (291, "94.6%", "p98.9"), (298, "94.9%", "p98.9"), (30, "26.0%", "p90.4")],
)
def test_what_a_short_sample_supports_is_rounded_down_never_up(n, confidence, reach):
    # 291 samples: the max bounds p99 with 1 - 0.99**291 = 94.63% confidence and they reach p98.976; rounded to
    # nearest these read "95%" and "p99.0", the very level and percentile the sample falls short of
    r = percentile_ci(np.arange(1.0, n + 1.0), 99)
    assert not r.estimable
    text = r.text()
    assert f"the max bounds it with {confidence} confidence; {n} samples bound up to {reach}" in text, text
    assert float(confidence[:-1]) <= 100 * r.max_bound_confidence < float(confidence[:-1]) + 0.1
    assert float(reach[1:]) <= r.supported_percentile < float(reach[1:]) + 0.1
    assert r.reach_text() == reach


def test_floored_rounds_down_and_keeps_exact_values():
    assert [floored(x) for x in (94.6316, 98.9758, 97.0, 96.99999999999999, 0.1 + 0.2, 63.39)] == [
        "94.6",
        "98.9",
        "97.0",
        "97.0",
        "0.3",
        "63.3",
    ]
    assert floored(99.9049, 2) == "99.90"


def test_min_samples():
    # the smallest n with 1 - p**n - (1-p)**n >= 95%: p99: 0.99**299 = 0.0495, 0.99**298 = 0.0500
    assert [min_samples(q) for q in (50, 90, 99)] == [6, 29, 299]
    assert min_samples(99, 0.99) == 459
    for q, c in ((50, 0.95), (99, 0.95), (99.9, 0.9)):
        n = min_samples(q, c)
        assert percentile_ci(np.arange(float(n)), q, c).estimable
        assert not percentile_ci(np.arange(float(n - 1)), q, c).estimable


def test_coverage_by_simulation():
    # 200 lognormal samples of 400: the stated 95% intervals cover the true quantiles about 95% of the time
    rng = np.random.default_rng(20261201)
    reps, n = 200, 400
    truth = {q: float(np.exp(stats.norm.ppf(q / 100) * 0.5)) for q in (50, 90, 99)}
    hits = dict.fromkeys(truth, 0)
    for _ in range(reps):
        x = rng.lognormal(0.0, 0.5, n)
        for q, t in truth.items():
            r = percentile_ci(x, q)
            hits[q] += r.low <= t <= r.high
    for q in truth:
        assert 0.90 <= hits[q] / reps <= 1.0, (q, hits[q])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="no samples"):
        percentile_ci([], 50)
    with pytest.raises(ValueError, match="percentile 100"):
        percentile_ci([1.0], 100)
    with pytest.raises(ValueError, match="confidence 1.5"):
        percentile_ci([1.0], 50, 1.5)
    with pytest.raises(ValueError, match="finite"):
        percentile_ci([1.0, float("nan")], 50)


def test_latency_cis_keys():
    got = latency_cis(np.arange(1.0, 1001.0))
    assert list(got) == ["p50", "p90", "p99"] and got["p99"]["n"] == 1000 and got["p99"]["estimable"]


def test_latency_text_gives_each_interval_or_what_the_sample_supports():
    x = list(np.arange(1.0, 101.0))
    summary = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0, "throughput_eps": 1.0}
    text = latency_text(with_intervals(summary, x))
    assert text.startswith("p50 50.00 ms [41.00, 61.00], p90 90.00 ms [85.00, 97.00], p99 not estimable from 100")
    assert text.endswith("(95% intervals, n=100 batches)")
    assert latency_text(summary) == "p50 50.00 ms, p90 90.00 ms, p99 99.00 ms (no interval recorded)"  # older runs
