"""The warm-up rule of tasks.runner.steady (rolling coefficient of variation)."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.runner.steady import SteadyDetector, SteadyResult, steady_state_index


def warmup_then_flat(n_warm=10, n_flat=40, cv=0.01, seed=0):
    rng = np.random.default_rng(seed)
    warm = 100.0 * np.exp(-np.arange(n_warm) / 3.0) + 20.0  # tracing / cache warm-up decays
    return [*warm, *(20.0 * np.exp(rng.normal(0, cv, n_flat)))]


def test_steady_after_warmup():
    r = steady_state_index(warmup_then_flat(), window=5, cv_max=0.05)
    assert r.steady and 6 <= r.warmup_steps <= 11
    assert r.final_cv < 0.05 and "steady after" in r.reason


def test_min_steps_are_always_discarded():
    r = steady_state_index([20.0] * 30, window=5, cv_max=0.05, min_steps=3)
    assert r.steady and r.warmup_steps == 3 and r.final_cv == 0.0 and r.n_steps == 8


def test_never_steady_stops_at_max_steps():
    rng = np.random.default_rng(1)
    times = 20.0 * np.exp(rng.normal(0, 0.5, 200))
    r = steady_state_index(times, window=5, cv_max=0.01, max_steps=60)
    assert not r.steady and r.warmup_steps == 60 and r.n_steps == 60
    assert "max_steps=60" in r.reason and r.final_cv > 0.01


def test_too_short_sequence_is_not_steady():
    r = steady_state_index([20.0, 20.0, 20.0], window=5)
    assert not r.steady and r.final_cv is None and r.warmup_steps == 3


def test_streaming_detector_matches_batch_rule():
    times = warmup_then_flat(seed=3)
    det = SteadyDetector(window=5, cv_max=0.05, min_steps=3, max_steps=100)
    n = 0
    while not det.add(times[n]):
        n += 1
    assert det.add(999.0) is True  # ignored once done
    assert det.result() == steady_state_index(times, window=5, cv_max=0.05)
    assert SteadyResult.model_validate_json(det.result().model_dump_json()) == det.result()


@pytest.mark.parametrize(
    ("bad", "match"), [(float("nan"), r"\[4\] = nan"), (0.0, r"\[4\] = 0\.0"), (-3.0, r"\[4\] = -3\.0")]
)
def test_bad_step_times_raise_with_value_and_index(bad, match):
    with pytest.raises(ValueError, match=match):
        steady_state_index([20.0, 20.0, 20.0, 20.0, bad, 20.0])
    det = SteadyDetector()
    for _ in range(4):
        det.add(20.0)
    with pytest.raises(ValueError, match=match):
        det.add(bad)


@pytest.mark.parametrize(
    "kwargs", [{"window": 1}, {"cv_max": 0.0}, {"min_steps": -1}, {"window": 5, "min_steps": 3, "max_steps": 7}]
)
def test_bad_rule_parameters(kwargs):
    with pytest.raises(ValueError):
        SteadyDetector(**kwargs)
