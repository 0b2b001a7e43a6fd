"""Which op moved over the nights: the pure per-op change-point functions (tasks.analysis.changes, issue 38 item 5)
and one run's op times per step (tasks.analysis.attribution.op_times)."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.analysis import changes
from tasks.analysis.attribution import op_times
from tasks.records import RunOps
from tests.helpers.builders import op

CONV, RELU, BN = ("Host", "Conv2D", "m/conv"), ("Host", "Relu", "m/relu"), ("Host", "FusedBatchNormV3", "m/bn")


def nights(n: int, seed: int, *, conv_from: int | None = None, factor: float = 1.3, sd: float = 0.04) -> list[dict]:
    """``n`` runs' op times (µs/step): conv 400, relu 100, bn 50, each with its own lognormal noise; conv x``factor``
    from run ``conv_from`` on."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        conv = 400.0 * (factor if conv_from is not None and i >= conv_from else 1.0)
        out.append({k: v * float(np.exp(rng.normal(0, sd))) for k, v in ((CONV, conv), (RELU, 100.0), (BN, 50.0))})
    return out


def test_the_op_that_moved_is_found_at_its_run_and_the_others_are_not():
    runs = nights(24, 1, conv_from=16)
    found = changes.op_change_points(runs, list(range(100, 124)))
    (f,) = found
    assert f.op == CONV and f.point.metric == changes.OP_METRIC and f.point.slower
    assert f.point.run_id == 116 and f.point.status == "confirmed" and f.runs == 24 and f.missing == 0
    assert f.point.ci_low < 1.3 < f.point.ci_high and 380 < f.point.before < 420


def test_flat_op_series_have_no_change_points():
    assert all(changes.op_change_points(nights(30, s, sd=0.08), list(range(30))) == [] for s in range(5))


def test_watched_ops_are_the_largest_ones_including_one_that_grew_at_the_end():
    runs = nights(20, 2)
    for r in runs[-4:]:
        r[("Host", "MatMul", "m/new")] = 900.0  # appeared in the newest runs and is now the largest
    assert changes.watched_ops(runs, 2) == [("Host", "MatMul", "m/new"), CONV]
    assert changes.watched_ops([], 3) == []
    with pytest.raises(ValueError, match="top = 0"):
        changes.watched_ops(runs, 0)


def test_an_op_missing_from_some_runs_is_left_out_of_its_series_not_read_as_zero():
    runs = nights(24, 3, conv_from=16)
    for i in (3, 9):
        del runs[i][CONV]
    (f,) = changes.op_change_points(runs, list(range(24)))
    assert f.op == CONV and f.missing == 2 and f.runs == 22 and f.point.run_id == 16


def test_a_tentative_op_change_waits_for_its_runs():
    (f,) = changes.op_change_points(nights(20, 4, conv_from=18, factor=1.5), list(range(20)))
    assert f.point.status == "tentative" and f.point.runs_to_confirm == 1


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="3 op tables but 2 run ids"):
        changes.op_change_points(nights(3, 0), [1, 2])


def ops_of(conv_us: float, relu_us: float, scope: str = "m") -> RunOps:
    return RunOps(
        run_id=7,
        ops=[op(f"{scope}/conv", "Conv2D", conv_us), op(f"{scope}/relu", "Relu", relu_us), op("IDLE", "IDLE", 1e6)],
        profiled_steps=5,
        profiler_avg_step_ms=1.0,
        measured_median_ms=2.0,
    )


def test_op_times_scale_the_window_shares_to_the_measured_median():
    times, scaled = op_times(ops_of(750.0, 250.0))  # 150 + 50 µs/step in the window, measured 2 ms
    assert scaled and times[("Host", "Conv2D", "m/conv")] == pytest.approx(1500.0)
    assert times[("Host", "Relu", "m/relu")] == pytest.approx(500.0) and ("Host", "IDLE", "IDLE") not in times
    renamed, _ = op_times(ops_of(750.0, 250.0, scope="m_1"), rename={"m_1": "m"})
    assert list(renamed.index) == list(times.index)
    raw, scaled = op_times(ops_of(750.0, 250.0).model_copy(update={"measured_median_ms": None}))
    assert not scaled and raw[("Host", "Conv2D", "m/conv")] == pytest.approx(150.0)
    with pytest.raises(ValueError, match="run 7 records no profiled_steps"):
        op_times(ops_of(1.0, 1.0).model_copy(update={"profiled_steps": None}))
