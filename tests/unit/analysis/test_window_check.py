"""The profiled window checked against the measured steps it stands for (``cross_check``, ``window_band``) and
the ``unrepresentative_window`` finding, on step times with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tasks.analysis.diagnose import diagnose_window
from tasks.analysis.profile import (
    MIN_CHECK_MEASURED_STEPS,
    PROFILER_OVERHEAD_ALLOWANCE,
    cross_check,
    window_band,
)

RNG = np.random.default_rng(7)
#: 320 measured steps around 30 ms with 5% step-to-step noise (log scale)
MEASURED = list(30.0 * np.exp(RNG.normal(0.0, 0.05, 320)))
MED = float(np.median(MEASURED))


def test_window_band_is_the_order_statistic_prediction_interval():
    lo, hi = window_band(MEASURED, 5, 0.99)
    p_lo, p_hi = stats.beta.ppf(0.005, 3, 3), stats.beta.ppf(0.995, 3, 3)
    assert (p_lo, p_hi) == (pytest.approx(0.0828, abs=1e-3), pytest.approx(0.9172, abs=1e-3))
    assert (lo, hi) == (pytest.approx(np.quantile(MEASURED, p_lo)), pytest.approx(np.quantile(MEASURED, p_hi)))
    # even windows: lower end from the n/2-th order statistic, upper from the (n/2+1)-th
    lo4, hi4 = window_band(MEASURED, 4, 0.99)
    assert lo4 == pytest.approx(np.quantile(MEASURED, stats.beta.ppf(0.005, 2, 3)))
    assert hi4 == pytest.approx(np.quantile(MEASURED, stats.beta.ppf(0.995, 3, 2)))


def test_window_band_covers_windows_drawn_like_the_measured_steps():
    rng = np.random.default_rng(11)
    measured = 20.0 * np.exp(rng.normal(0.0, 0.2, 5000))
    lo, hi = window_band(measured, 5, 0.99)
    windows = np.median(20.0 * np.exp(rng.normal(0.0, 0.2, (20_000, 5))), axis=1)
    outside = float(np.mean((windows < lo) | (windows > hi)))
    assert outside < 0.015  # nominal 1%


def test_a_window_like_the_measured_steps_is_representative():
    c = cross_check(MEASURED, [30.5, 29.8, 31.0, 30.2, 29.9], [30.4, 29.9, 31.1, 30.1, 29.8], profiler_avg_step_ms=30.3)
    assert c.representative is True and c.window_inside and c.profiler_inside
    assert c.overhead_ratio == pytest.approx(30.2 / MED)
    assert c.measured_steps == 320 and c.window_steps == c.profiler_steps == 5
    assert c.profiler_vs_timer == pytest.approx(30.1 / 30.2) and c.profiler_avg_step_ms == 30.3
    assert "representative" in c.message and "OUTSIDE" not in c.message
    assert diagnose_window(c) == []


@pytest.mark.parametrize("factor", [3.57, 0.49])
def test_a_window_far_from_the_measured_median_is_flagged_with_its_numbers(factor):
    # the windows ran 0.49-3.57x the measured median; the old check compared xprof with the runner
    # over the same steps and agreed (+0.01%)
    window = [MED * factor * f for f in (0.99, 1.0, 1.01, 1.0, 1.02)]
    c = cross_check(MEASURED, window, window)
    assert c.representative is False and c.window_inside is False and c.profiler_inside is False
    assert c.overhead_ratio == pytest.approx(factor, rel=0.02)
    assert c.profiler_vs_timer == pytest.approx(1.0)
    assert "OUTSIDE" in c.message and "NOT representative" in c.message
    [f] = diagnose_window(c)
    assert (f.code, f.severity, f.figure) == ("unrepresentative_window", "warning", "cross_check.overhead_ratio")
    assert f.value == pytest.approx(factor, rel=0.02)
    assert f.threshold == pytest.approx((c.band_high_ms if factor > 1 else c.band_low_ms) / MED)
    assert f"{f.value:.2f}x the measured median" in f.message and ("above" if factor > 1 else "below") in f.message


def test_profiler_overhead_within_the_allowance_is_not_a_flag():
    tight = [30.0 + 0.01 * i for i in range(100)]  # a quiet host: 30.00-30.99 ms
    ok = cross_check(tight, [30.5 * (1 + PROFILER_OVERHEAD_ALLOWANCE * 0.9)] * 5)
    assert ok.representative is True and ok.band_high_ms > 30.9 * (1 + PROFILER_OVERHEAD_ALLOWANCE * 0.99)
    too_slow = cross_check(tight, [31.0 * (1 + PROFILER_OVERHEAD_ALLOWANCE) * 1.05] * 5)
    assert too_slow.representative is False
    # the allowance is upwards only: a window faster than the measured steps gets none
    assert cross_check(tight, [29.5] * 5).representative is False


def test_xprof_steps_outside_the_band_flag_the_window_even_when_the_timer_agrees():
    runner = [30.0, 30.2, 29.9, 30.1, 30.0]
    merged = [60.1, 60.3, 0.0]  # xprof split the window into two double steps (0: a step it could not time)
    c = cross_check(MEASURED, runner, merged)
    assert c.window_inside is True and c.profiler_inside is False and c.representative is False
    assert c.profiler_steps == 2 and c.profiler_vs_timer == pytest.approx(60.2 / 30.0)
    [f] = diagnose_window(c)
    assert f.figure == "cross_check.profiler_ratio" and "(xprof)" in f.message


def test_no_xprof_steps_checks_the_runner_window_alone():
    c = cross_check(MEASURED, [30.0] * 5, [])
    assert c.representative is True and c.profiler_median_ms is None and c.profiler_inside is None
    assert "no per-step times" in c.message


def test_too_few_measured_steps_is_not_checked():
    c = cross_check(MEASURED[: MIN_CHECK_MEASURED_STEPS - 1], [300.0] * 5)
    assert c.representative is None and c.band_low_ms is None and "not checked" in c.message
    assert diagnose_window(c) == []
    assert cross_check(MEASURED[:MIN_CHECK_MEASURED_STEPS], [300.0] * 5).representative is False


@pytest.mark.parametrize(
    "measured, window, match",
    [
        ([], [30.0], "measured_step_ms is empty"),
        (MEASURED, [], "runner_profiled_step_ms is empty"),
        (MEASURED, [30.0, float("nan")], r"runner_profiled_step_ms\[1\] = nan"),
        ([30.0, 0.0] * 20, [30.0], r"measured_step_ms\[1\] = 0.0"),
    ],
)
def test_bad_step_times_are_named(measured, window, match):
    with pytest.raises(ValueError, match=match):
        cross_check(measured, window)


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="overhead_allowance"):
        cross_check(MEASURED, [30.0], overhead_allowance=-0.1)
    with pytest.raises(ValueError, match="n = 0"):
        window_band(MEASURED, 0)
    with pytest.raises(ValueError, match="confidence"):
        window_band(MEASURED, 5, 1.0)
