"""Behaviour of tasks.analysis.stats on synthetic lognormal step times (ms)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.analysis.stats import (
    Comparison,
    compare_paired,
    compare_to_history,
    fixed_threshold_verdict,
    median_ratio_ci,
    verdict_from_ci,
)


def run_ms(rng, n, level=0.0, cv=0.1, base_ms=20.0):
    """One process: per-step lognormal noise around exp(level) * base_ms."""
    return base_ms * np.exp(level + rng.normal(0.0, cv, n))


def history_case(rng, effect, *, k=5, n=50, drift=0.1, cv=0.1):
    """K baseline runs and one candidate run, each with its own process-level drift."""
    base = [run_ms(rng, n, rng.normal(0, drift), cv) for _ in range(k)]
    return run_ms(rng, n, math.log(effect) + rng.normal(0, drift), cv), base


def abba_case(rng, effect, *, blocks=8, steps=50, cv=0.05, block_sd=0.01):
    """A and B blocks in one process: shared process level, per-block jitter."""
    level = rng.normal(0, 0.1)
    a = [run_ms(rng, steps, level + rng.normal(0, block_sd), cv) for _ in range(blocks)]
    b = [run_ms(rng, steps, level + math.log(effect) + rng.normal(0, block_sd), cv) for _ in range(blocks)]
    return a, b


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.99, 1.03, "pass"),  # inside the ±5% band
        (1.01, 1.04, "pass"),  # significant but within tolerance
        (1.01, 1.08, "regression"),  # above 1, reaches past 1.05
        (1.06, 1.10, "regression"),
        (0.90, 0.99, "improvement"),
        (0.97, 1.07, "inconclusive"),  # holds 1, reaches past the tolerance threshold
        (0.93, 1.03, "pass"),  # holds 1 but lies below 1.05: not slower than the tolerance allows
        (0.93, 1.05, "pass"),  # the threshold itself is within tolerance
        (1.00, 1.08, "inconclusive"),  # touching 1 is not lying above it
    ],
)
def test_verdict_rule(low, high, expected):
    assert verdict_from_ci(low, high, 0.05) == expected


def test_median_ratio_ci_recovers_ratio():
    rng = np.random.default_rng(0)
    base, cand = run_ms(rng, 400), run_ms(rng, 400) * 1.2
    est = median_ratio_ci(cand, base, confidence=0.99, n_resamples=2000, seed=1)
    assert est.low < 1.2 < est.high and est.high - est.low < 0.1
    assert est.method == "percentile-bootstrap" and est.confidence == 0.99
    assert est == median_ratio_ci(cand, base, confidence=0.99, n_resamples=2000, seed=1)  # seeded


@pytest.mark.slow  # a Monte Carlo of history comparisons (bootstrap)
def test_history_no_change_false_alarms_low_where_fixed_rule_fails():
    rng = np.random.default_rng(11)
    ours = fixed = 0
    for _ in range(200):  # drift sd 0.1 as measured on the 2-core CPU, 3x the default prior; K=5
        cand, base = history_case(rng, 1.0)
        ours += compare_to_history(cand, base, n_resamples=300).verdict == "regression"
        fixed += fixed_threshold_verdict(cand, base[-1]).verdict == "regression"
    assert ours / 200 <= 0.02
    assert fixed / 200 >= 0.10  # the naive 110% rule raises many false alarms


def test_history_detects_10pct_slowdown_with_low_drift():
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(40):
        cand, base = history_case(rng, 1.10, k=10, n=50, drift=0.01, cv=0.07)
        c = compare_to_history(cand, base, prior_between_sd=0.01, n_resamples=300)
        hits += c.verdict == "regression"
    assert hits / 40 >= 0.9
    assert c.method == "history-lookback" and c.n_candidate == 50 and c.n_baseline == 10


def test_history_inconclusive_reports_needed_steps():
    rng = np.random.default_rng(2)
    cand, base = history_case(rng, 1.0, k=20, n=200, drift=0.0, cv=0.02)
    cand = run_ms(rng, 6, cv=0.4)  # very noisy, short candidate
    c = compare_to_history(cand, base, prior_between_sd=0.005, prior_df=1)
    assert c.verdict == "inconclusive"
    assert c.needed_samples is not None and c.needed_samples > 6
    assert f"{c.needed_samples} candidate steps" in c.reason


def test_history_drift_dominated_says_more_steps_cannot_help():
    rng = np.random.default_rng(3)
    cand, base = history_case(rng, 1.0, k=3, drift=0.1)
    c = compare_to_history(cand, base, prior_between_sd=0.1)
    assert c.verdict == "inconclusive" and c.needed_samples is None
    assert "paired" in c.reason and c.details["between_run_sd"] > 0.05


def test_paired_no_change_false_alarms():
    rng = np.random.default_rng(21)
    alarms = sum(compare_paired(*abba_case(rng, 1.0)).verdict == "regression" for _ in range(200))
    assert alarms / 200 <= 0.02


def test_paired_detects_5pct_slowdown_with_small_noise():
    rng = np.random.default_rng(22)
    verdicts = [compare_paired(*abba_case(rng, 1.05)).verdict for _ in range(200)]
    assert verdicts.count("regression") / 200 >= 0.95
    a, b = abba_case(rng, 1.05)
    c = compare_paired([float(np.median(x)) for x in a], [float(np.median(x)) for x in b])  # block medians
    assert c.method == "paired-abba" and 1.03 < c.ratio < 1.07 and c.ci_low > 1


def test_paired_pass_and_improvement():
    rng = np.random.default_rng(23)
    assert compare_paired(*abba_case(rng, 1.0, blocks=12, cv=0.02, block_sd=0.002)).verdict == "pass"
    assert compare_paired(*abba_case(rng, 0.9)).verdict == "improvement"


def test_paired_inconclusive_on_noisy_few_blocks():
    rng = np.random.default_rng(24)
    a, b = abba_case(rng, 1.0, blocks=3, steps=5, cv=0.3, block_sd=0.1)
    c = compare_paired(a, b)
    assert c.verdict == "inconclusive" and c.needed_samples > 3
    assert "blocks per version" in c.reason


def test_comparison_round_trips_json():
    rng = np.random.default_rng(4)
    c = compare_paired(*abba_case(rng, 1.05))
    assert Comparison.model_validate_json(c.model_dump_json()) == c
    assert {
        "verdict",
        "method",
        "ratio",
        "ci_low",
        "ci_high",
        "confidence",
        "tolerance",
        "n_candidate",
        "n_baseline",
        "needed_samples",
        "reason",
    } <= set(c.model_dump())


def test_fixed_threshold_rule():
    base = np.full(10, 10.0)
    assert fixed_threshold_verdict(base * 1.09, base).verdict == "pass"
    r = fixed_threshold_verdict(base * 1.11, base)
    assert r.verdict == "regression" and r.ci_low is None and "1.110" in r.reason


GOOD = [10.0, 11.0, 10.5, 10.2, 9.9, 10.1]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: median_ratio_ci([], GOOD), r"candidate_ms: 0 step times"),
        (lambda: median_ratio_ci(GOOD[:4], GOOD), r"candidate_ms: 4 step times, need at least 5"),
        (lambda: median_ratio_ci(GOOD, [*GOOD[:3], float("nan"), 1.0]), r"baseline_ms\[3\] = nan"),
        (lambda: compare_to_history([*GOOD, -2.0], [GOOD]), r"candidate_ms\[6\] = -2\.0"),
        (lambda: compare_to_history(GOOD, [GOOD, [*GOOD, 0.0]]), r"baseline_runs\[1\]\[6\] = 0\.0"),
        (lambda: compare_to_history(GOOD, []), r"baseline_runs: 0 runs"),
        (lambda: compare_paired([10.0], [11.0]), r"a_blocks: 1 blocks, need at least 2"),
        (lambda: compare_paired([10.0, 11.0], [11.0, 12.0, 13.0]), r"must pair up"),
        (lambda: compare_paired([10.0, [1.0, float("inf")]], [11.0, 12.0]), r"a_blocks\[1\]\[1\] = inf"),
        (lambda: compare_paired([10.0, 11.0], [11.0, []]), r"b_blocks\[1\]: 0 step times"),
        (lambda: compare_paired([10.0, 11.0], [11.0, 12.0], tolerance=0), r"tolerance"),
        (lambda: fixed_threshold_verdict(GOOD, GOOD, limit=0), r"limit"),
    ],
)
def test_bad_input_raises_naming_it(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_paired_offset_widens_the_interval_by_the_known_process_offset():
    from scipy import stats as sps

    a = [[10.0, 10.0]] * 8
    b = [[10.5, 10.5]] * 8  # no block-to-block noise: the interval is the offset alone (df infinite)
    res = compare_paired(a, b, offset_sd=0.03)
    half = np.log(res.ci_high) - np.log(res.ratio)
    assert half == pytest.approx(sps.norm.ppf(0.995) * 0.03)
    assert compare_paired(a, b).ci_low == pytest.approx(res.ratio)  # no offset, no noise: a point
    with pytest.raises(ValueError, match="offset_sd"):
        compare_paired(a, b, offset_sd=-1.0)


def test_paired_variance_keeps_the_correlation_of_neighbouring_pairs():
    """Pair log ratios that drift slowly (a residue of the host's drift that ABBA did not cancel) are
    not independent: the batch means (16 pairs) see the drift, sd(d)/sqrt(n) does not."""
    rng = np.random.default_rng(31)
    n = 320
    drift = 0.04 * np.sin(2 * np.pi * np.arange(n) / 160 + 0.3)  # two slow waves, mean ~0
    a = 100.0 * np.exp(rng.normal(0, 0.05, n))
    b = a * np.exp(drift + rng.normal(0, 0.05, n))
    c = compare_paired(a, b)
    iid_se = c.details["sd_log_ratio"] / math.sqrt(n)
    assert c.details["batch_pairs"] == 16 and c.details["df"] == pytest.approx(n // 16 - 1)
    assert c.details["se_log_ratio"] > 1.5 * iid_se
    # the same ratios in shuffled order carry no drift: batch means agree with sd/sqrt(n) (within noise)
    perm = rng.permutation(n)
    s = compare_paired(a[perm], b[perm])
    assert 0.6 * iid_se < s.details["se_log_ratio"] < 1.4 * iid_se
    # few pairs: batches shrink to keep at least 8 of them
    assert compare_paired(a[:40], b[:40]).details["batch_pairs"] == 5
    assert compare_paired(a[:10], b[:10]).details["batch_pairs"] == 1
