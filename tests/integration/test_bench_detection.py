"""bench/detection.py's method: trials no longer than the data, bootstrap blocks longer than and not aligned
with the statistic's batches, the gate stopping where the product's runner would, and the verdict being the
product's ``decide``. The bench's analysis itself (minutes) is not run here."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from tasks.analysis import calibration, sequential
from tests.helpers import ROOT as ROOT_DIR

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("bench_detection", ROOT_DIR / "bench" / "detection.py")
detection = sys.modules.setdefault("bench_detection", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(detection)


def _process(n: int, ratio: float = 1.0, seed: int = 0, host_load=None):
    rng = np.random.default_rng(seed)
    a = 50.0 * np.exp(rng.normal(0, 0.1, n))
    b = a * ratio * np.exp(rng.normal(0, 0.1, n))
    return detection.Process(a=a, b=b, load_class="quiet", host_load=host_load)


FRESH = detection.Setup(
    offset=calibration.Offset(sd=0.0, source="store", n_gates=5),
    noise=calibration.NoiseCalibration(sd_pair=0.14, n_gates=5),
)


def test_trials_are_no_longer_than_the_shortest_process():
    procs = [_process(256), _process(200, seed=1)]
    case = detection.trial_case(procs)
    assert case.paired_blocks == 200
    assert detection.trial_case([_process(400)]).paired_blocks == detection.PRODUCT_BUDGET
    with pytest.raises(ValueError, match="longer than its process"):
        detection.bootstrap_pairs(procs[1], 201, np.random.default_rng(0), centred=False)


def test_bootstrap_blocks_are_longer_than_and_not_aligned_with_the_batches():
    assert detection.BOOT_BLOCK > sequential.MAX_BATCH_PAIRS
    assert all(detection.BOOT_BLOCK % m for m in range(2, sequential.MAX_BATCH_PAIRS + 1))
    p = detection.Process(a=np.arange(1.0, 257.0), b=np.arange(1.0, 257.0), load_class="quiet", host_load=None)
    a, b = detection.bootstrap_pairs(p, 200, np.random.default_rng(3), centred=False)
    assert a.size == 200 and np.array_equal(a, b)
    runs = np.split(a, np.flatnonzero(np.diff(a) != 1) + 1)  # consecutive pairs stay together
    assert all(r.size == detection.BOOT_BLOCK for r in runs[:-1]) and runs[-1].size == 200 % detection.BOOT_BLOCK


def test_centring_divides_b_by_the_process_mean_ratio():
    p = _process(256, ratio=1.2)
    a, b = detection.bootstrap_pairs(p, 256, np.random.default_rng(0), centred=True)
    raw_a, raw_b = detection.bootstrap_pairs(p, 256, np.random.default_rng(0), centred=False)
    assert np.allclose(b, raw_b * np.exp(-p.log_centre)) and np.array_equal(a, raw_a)


def test_the_gate_stops_where_the_runner_would_and_decide_judges_it():
    procs = [_process(320, ratio=1.5, seed=4)]
    case = detection.trial_case(procs)
    slow = detection.judge(procs[0].a, procs[0].b, case, FRESH, None)
    assert slow["verdict"] == "regression" and slow["pairs"] < case.paired_blocks  # a x1.5 stops early
    design = sequential.Design(
        confidence=case.confidence,
        tolerance=case.tolerance,
        max_pairs=case.paired_blocks,
        round_pairs=case.paired_round_pairs,
        offset_sd=0.0,
    )
    d = np.log(procs[0].b / procs[0].a)
    n, looks, stopping = detection.stop_point(d, case, design)
    assert n == slow["pairs"] == looks[-1] and looks[0] == sequential.MIN_LOOK_PAIRS
    assert set(stopping) == {"wall"}  # a quiet host: the wall-time look, as the verdict
    g = sequential.analyse(d[:n], looks, design)  # the product accepts it: no decisive look before the last
    assert g.stopped == "decided" and g.final.pairs == n
    same = _process(320, seed=5)
    aa = detection.judge(same.a, same.b, case, FRESH, None)
    assert aa["verdict"] != "regression" and aa["paired"]["sequential"]["stopped"] in ("decided", "budget")


def test_a_busy_host_load_makes_the_final_verdict_inconclusive():
    """A x1.2 change on a busy host with no metric fit is undecided; a x1.5 one lies beyond what load can fake on
    wall time (``verdict.gross_verdict_from_ci``) and the bench judges it as the product does: a regression."""
    busy = {"other_cpu_share": 0.9, "steal_share": 0.0, "cpus": 2, "load1_start": 6.0, "load1_end": 7.0}
    p = _process(320, ratio=1.2, seed=4)
    r = detection.judge(p.a, p.b, detection.trial_case([p]), FRESH, busy)
    assert (r["verdict"], r["statistics"]) == ("inconclusive", "regression")
    p = _process(320, ratio=1.5, seed=4)
    r = detection.judge(p.a, p.b, detection.trial_case([p]), FRESH, busy)
    assert (r["verdict"], r["statistics"]) == ("regression", "regression")
