"""The gate of a per-process figure (the cold step) across a paired gate's processes, the set-up order taken out
(tasks.analysis.metric_gates, issue 38 item 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.analysis.metric_gates import process_metric_gate


def cold_steps(k: int, factor: float, seed: int, first_cost: float = 1.3, sd: float = 0.05):
    """k processes' (A, B, B set up first) cold steps, ms: 4000 x factor for B, x first_cost for the first."""
    rng = np.random.default_rng(seed)
    b_first = [bool(x) for x in rng.integers(0, 2, k)]
    b_first[0], b_first[1] = True, False  # both orders
    a = [4000.0 * (first_cost if not f else 1.0) * math.exp(rng.normal(0, sd)) for f in b_first]
    b = [4000.0 * factor * (first_cost if f else 1.0) * math.exp(rng.normal(0, sd)) for f in b_first]
    return a, b, b_first


def gate(a, b, first, tolerance=0.25):
    return process_metric_gate(a, b, first, metric="cold_step_ms", unit="ms", tolerance=tolerance, confidence=0.99)


def test_a_slower_cold_step_is_a_regression_with_the_order_taken_out():
    g = gate(*cold_steps(6, 1.6, 1))
    assert g.verdict == "regression" and g.processes == 6
    assert g.ci_low < 1.6 < g.ci_high and 1.2 < g.order_ratio < 1.4
    assert g.reason.startswith("cold_step_ms ratio 1.") and "the version set up first paid x1." in g.reason


def test_an_equal_cold_step_passes_although_the_first_version_pays_more():
    passed = [gate(*cold_steps(6, 1.0, s)).verdict for s in range(20)]
    assert "regression" not in passed and passed.count("pass") >= 15
    # ignoring the order would read the first-built's costs as the versions' difference: its spread is far wider
    a, b, first = cold_steps(6, 1.0, 1)
    naive = np.log(np.asarray(b) / np.asarray(a))
    assert np.std(naive, ddof=1) > 0.1 and gate(a, b, first).verdict == "pass"


def test_one_order_or_too_few_processes_decide_nothing_and_say_why():
    a, b, _ = cold_steps(6, 1.6, 2)
    one = gate(a, b, [True] * 6)
    assert one.verdict == "inconclusive" and one.ratio is None and "set up B (the candidate) first" in one.reason
    two = gate(a[:2], b[:2], [True, False])
    assert two.verdict == "inconclusive" and "2 processes give no interval" in two.reason


def test_bad_figures_are_named():
    with pytest.raises(ValueError, match="cold_step_ms of the candidate in process 1 = 0.0"):
        gate([1.0, 1.0], [1.0, 0.0], [True, False])
    with pytest.raises(ValueError, match="expected one each per process"):
        gate([1.0], [1.0, 2.0], [True])
