"""The nightly history on the steadier metric (issue 23, item 5): the rule that chooses wall or CPU time from
the drift of each between processes, and the history verdict judged on the chosen metric, quiet and busy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.analysis import calibration
from tasks.analysis.calibration import HISTORY_CPU_MARGIN, MIN_CALIBRATION_DF, NoiseCalibration, history_metric
from tasks.analysis.verdict import PairedBlocks, busy_lines, busy_verdict_from_ci, decide, judge_noise
from tasks.records import Case, CompareInputs, Verdict

QUIET = {"wall_s": 10.0, "cpus": 2, "load1_start": 2.0, "load1_end": 2.1, "other_cpu_share": 0.02, "steal_share": 0.0}
LOADED = {**QUIET, "other_cpu_share": 0.62, "load1_start": 8.0, "load1_end": 9.0}
CASE = Case(model="m", measured_steps=60)
OFFSET = calibration.Offset(sd=0.0, source="default")
NO_CAL = NoiseCalibration(sd_pair=None, n_gates=0)
WALL_MS, CPU_MS = 10.0, 18.0  # the levels of a run's median wall and CPU time per step


def _runs(n=12, *, wall_sd=0.10, cpu_sd=0.02, seed=0, versions=("1",), cpu=True):
    """``(version, median wall ms, median CPU ms)`` of ``n`` accepted runs per version, drifting between processes
    by ``wall_sd`` / ``cpu_sd`` (log scale); version k is k times as slow."""
    rng = np.random.default_rng(seed)
    return [
        (
            v,
            k * WALL_MS * math.exp(rng.normal(0, wall_sd)),
            k * CPU_MS * math.exp(rng.normal(0, cpu_sd)) if cpu else None,
        )
        for k, v in enumerate(versions, start=1)
        for _ in range(n)
    ]


def _rule(runs, *, gpu=False, candidate_cpu=True, baselines_cpu=True):
    return history_metric(runs, gpu=gpu, candidate_cpu=candidate_cpu, baselines_cpu=baselines_cpu)


# ------------------------------------------------------------------------------------------------ the rule


def test_cpu_time_is_chosen_when_it_drifts_clearly_less_with_enough_history():
    runs = _runs(8, versions=("1", "2"))
    hm = _rule(runs)
    assert hm.metric == "cpu" and hm.runs == 16 and hm.wall_df == hm.cpu_df == 14
    # the estimates are estimate_between_sd's, per metric, over the same runs
    assert (hm.wall_sd, hm.wall_df) == calibration.estimate_between_sd((v, w) for v, w, _ in runs)
    assert (hm.cpu_sd, hm.cpu_df) == calibration.estimate_between_sd((v, c) for v, _, c in runs)
    assert hm.cpu_sd < HISTORY_CPU_MARGIN * hm.wall_sd
    assert hm.reason.startswith("CPU time: it drifts less") and f"{hm.cpu_sd:.3f} against {hm.wall_sd:.3f}" in hm.reason


def test_wall_time_when_cpu_time_is_not_steadier_by_the_margin():
    runs = _runs(30, wall_sd=0.05, cpu_sd=0.045, seed=3)
    hm = _rule(runs)
    assert hm.cpu_sd is not None and hm.wall_sd is not None
    assert HISTORY_CPU_MARGIN * hm.wall_sd <= hm.cpu_sd  # steadier, but not by the margin
    assert hm.metric == "wall" and "does not drift clearly less than wall time" in hm.reason


def test_a_cpu_series_that_load_biases_night_by_night_is_refused():
    """CPU time steady within a night but shifted by that night's load (a biased metric): its drift between
    processes shows the bias, and the rule keeps wall time."""
    runs = [(v, w, c * (1.25 if i % 3 == 0 else 1.0)) for i, (v, w, c) in enumerate(_runs(15, wall_sd=0.06))]
    hm = _rule(runs)
    assert hm.metric == "wall" and hm.cpu_sd is not None and hm.wall_sd is not None and hm.cpu_sd > hm.wall_sd
    assert "does not drift clearly less" in hm.reason
    assert _rule(_runs(15, wall_sd=0.06)).metric == "cpu"  # the same runs unbiased: CPU time


def test_too_little_history_keeps_wall_time():
    few = _runs(MIN_CALIBRATION_DF)  # df = n - 1 = 4
    hm = _rule(few)
    assert (hm.metric, hm.wall_sd, hm.cpu_sd, hm.cpu_df) == ("wall", None, None, MIN_CALIBRATION_DF - 1)
    assert "too little history" in hm.reason
    assert _rule(_runs(MIN_CALIBRATION_DF + 1)).metric == "cpu"  # one more run: df 5 suffices


def test_runs_without_cpu_time_take_no_part_in_the_estimates():
    old = _runs(20, cpu=False, seed=5)  # stored before CPU time was recorded
    hm = _rule(old + _runs(4))
    assert hm.metric == "wall" and hm.runs == 4 and "too little history" in hm.reason


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"gpu": True}, "a GPU case: CPU time is not the work"),
        ({"gpu": None}, "may use a GPU"),
        ({"candidate_cpu": False}, "the candidate recorded no CPU time"),
        ({"baselines_cpu": False}, "a baseline run recorded no CPU time"),
    ],
)
def test_wall_time_on_a_gpu_or_without_cpu_time(kw, says):
    hm = _rule(_runs(12), **kw)
    assert hm.metric == "wall" and hm.reason.startswith("wall time: ") and says in hm.reason
    assert hm.cpu_sd is not None  # the figures are still there to read


# ------------------------------------------------------------------------------------------------ the verdict


def _steps(level, sd, n, rng):
    return list(level * np.exp(rng.normal(0, sd, n)))


def _inputs(*, seed=0, baselines=10, cpu=True, wall_sd=0.12, cpu_sd=0.006):
    """The store's facts for a case whose runs drift ``wall_sd`` in wall time between processes and ``cpu_sd`` in
    CPU time (log scale): 12 accepted runs for calibration, the newest ``baselines`` of them the lookback."""
    rng = np.random.default_rng(seed)
    runs = _runs(12, wall_sd=wall_sd, cpu_sd=cpu_sd, seed=seed + 1)
    ids = list(range(1, baselines + 1))
    samples = {i: _steps(runs[i - 1][1], 0.10, 60, rng) for i in ids}
    cpu_samples = {i: _steps(runs[i - 1][2], 0.03, 60, rng) for i in ids} if cpu else {}
    return CompareInputs(
        same_env=ids,
        samples=samples,
        cpu_samples=cpu_samples,
        calibration_runs=[
            (v, float(np.median(samples[i + 1])) if i < baselines else w) for i, (v, w, _) in enumerate(runs)
        ],
        calibration_cpu_ms=[
            (float(np.median(cpu_samples[i + 1])) if i < baselines else c) if cpu else None
            for i, (_, _, c) in enumerate(runs)
        ],
    )


def _candidate(cpu_ratio, *, wall_ratio=1.0, seed=9, wall_drift=1.15):
    """A candidate run whose process drifted ``wall_drift`` in wall time (a slow night) and whose CPU time per step
    is ``cpu_ratio`` x the baselines' level."""
    rng = np.random.default_rng(seed)
    return _steps(WALL_MS * wall_ratio * wall_drift, 0.10, 60, rng), _steps(CPU_MS * cpu_ratio, 0.03, 60, rng)


def _noise(host_load):
    return judge_noise(CASE, host_load, None, offset=OFFSET, calibrated=NO_CAL).model_dump(mode="json")


def test_the_history_decides_on_cpu_time_with_its_own_prior():
    inputs = _inputs()
    wall, cpu = _candidate(1.0)
    d = decide(wall, CASE, inputs, env_data={}, noise=_noise(QUIET), measured_cpu=cpu, gpu=False)
    ev = d.evidence
    assert ev["metric"] == "cpu" and ev["history_metric"]["metric"] == "cpu"
    assert d.verdict == Verdict.PASS and d.method == "history-lookback"
    assert d.reason.startswith("on CPU time (") and "median CPU-time ratio" in d.reason
    assert "the tolerance is on CPU time" in d.reason
    assert ev["prior"]["source"] == "store" and ev["prior"]["between_sd"] == pytest.approx(
        ev["history_metric"]["cpu_sd"]
    )
    assert d.ratio == pytest.approx(ev["candidate_median_cpu_ms"] / ev["baseline_median_cpu_ms"], rel=0.02)
    assert d.limit == pytest.approx(ev["baseline_median_cpu_ms"] * (1 + CASE.tolerance))
    # the same run judged on wall time: the drift between processes keeps it undecided
    w = decide(wall, CASE, inputs, env_data={}, noise=_noise(QUIET), measured_cpu=cpu, gpu=None)
    assert w.evidence["metric"] == "wall" and w.evidence["history_metric"]["metric"] == "wall"
    assert w.verdict == Verdict.INCONCLUSIVE and "median step-time ratio" in w.reason
    assert w.evidence["prior"]["between_sd"] > 5 * ev["prior"]["between_sd"]


def test_a_cpu_time_slowdown_is_a_regression_on_cpu_time():
    wall, cpu = _candidate(1.25, wall_ratio=1.0, wall_drift=0.95)
    d = decide(wall, CASE, _inputs(), env_data={}, noise=_noise(QUIET), measured_cpu=cpu, gpu=False)
    assert d.verdict == Verdict.REGRESSION and d.evidence["metric"] == "cpu"
    assert d.ci_low is not None and d.ci_low > 1 + CASE.tolerance and "median CPU-time ratio 1.2" in d.reason


def test_without_cpu_time_for_a_baseline_the_history_stays_on_wall_time():
    inputs = _inputs()
    wall, cpu = _candidate(1.0)
    gone = inputs.model_copy(update={"cpu_samples": {k: v for k, v in inputs.cpu_samples.items() if k != 3}})
    d = decide(wall, CASE, gone, env_data={}, noise=_noise(QUIET), measured_cpu=cpu, gpu=False)
    assert (
        d.evidence["metric"] == "wall"
        and "a baseline run recorded no CPU time" in d.evidence["history_metric"]["reason"]
    )
    d = decide(wall, CASE, inputs, env_data={}, noise=_noise(QUIET), measured_cpu=cpu[:-1], gpu=False)  # one short
    assert (
        d.evidence["metric"] == "wall"
        and "the candidate recorded no CPU time" in d.evidence["history_metric"]["reason"]
    )


@pytest.mark.parametrize("cpu_ratio", [0.97, 1.0, 1.03, 1.10])
def test_a_busy_host_judges_cpu_time_history_by_the_busy_rule(cpu_ratio):
    wall, cpu = _candidate(cpu_ratio)
    noise = _noise(LOADED)
    assert noise["busy"]
    d = decide(wall, CASE, _inputs(), env_data={}, noise=noise, measured_cpu=cpu, gpu=False)
    assert d.evidence["metric"] == "cpu" and d.verdict == busy_verdict_from_ci(d.ci_low, d.ci_high, CASE.tolerance)
    assert "other processes took 62%" in d.reason and "less the CPU bias bound" in d.reason
    assert cpu_ratio < 1.10 or d.verdict != Verdict.PASS  # a x1.10 never passes on a busy host
    assert d.evidence["verdict_statistics"]["metric"] == "cpu"
    if cpu_ratio == 1.0:
        assert d.evidence["verdict_statistics"]["verdict"] == Verdict.PASS  # the statistics alone said pass


def test_a_busy_host_stands_on_a_cpu_time_regression_beyond_tolerance_and_bias():
    wall, cpu = _candidate(1.35)
    d = decide(wall, CASE, _inputs(), env_data={}, noise=_noise(LOADED), measured_cpu=cpu, gpu=False)
    change, band = busy_lines(CASE.tolerance)
    assert d.verdict == Verdict.REGRESSION and d.ci_low is not None and d.ci_low > change
    assert d.reason.startswith("decided on CPU time: host busy (") and "CPU-time ratio" in d.reason
    assert d.limit == pytest.approx(d.evidence["baseline_median_cpu_ms"] * band)  # CPU ms at the pass line


def test_a_busy_host_with_steal_or_on_wall_time_stays_undecided():
    wall, cpu = _candidate(1.35)
    stolen = _noise({**LOADED, "steal_share": 0.2})
    d = decide(wall, CASE, _inputs(), env_data={}, noise=stolen, measured_cpu=cpu, gpu=False)
    assert d.verdict == Verdict.INCONCLUSIVE and "hypervisor stole 20%" in d.reason
    assert d.evidence["verdict_statistics"]["verdict"] == Verdict.REGRESSION
    w = decide(wall, CASE, _inputs(), env_data={}, noise=_noise(LOADED), measured_cpu=None, gpu=False)
    assert w.evidence["metric"] == "wall" and w.verdict == Verdict.INCONCLUSIVE


def test_a_paired_gate_still_overrides_the_cpu_time_history():
    rng = np.random.default_rng(4)
    n = 40
    paired = PairedBlocks(
        a=[[x] for x in _steps(WALL_MS, 0.05, n, rng)],
        b=[[x] for x in _steps(WALL_MS, 0.05, n, rng)],
        layout={"blocks": n, "block_steps": 1, "timed_steps": 2 * n, "wall_s": 1.0, "orders": ""},
        host_load=QUIET,
    )
    case = CASE.model_copy(update={"paired_blocks": n, "paired_block_steps": 1})
    wall, cpu = _candidate(1.25)
    noise = judge_noise(case, QUIET, paired, offset=OFFSET, calibrated=NO_CAL).model_dump(mode="json")
    d = decide(wall, case, _inputs(), env_data={}, paired=paired, noise=noise, measured_cpu=cpu, gpu=False)
    assert d.method == "paired-abba" and d.evidence["metric"] == "wall"
    assert d.evidence["history"]["metric"] == "cpu" and d.evidence["history"]["verdict"] == Verdict.REGRESSION


def test_calibration_cpu_medians_must_align_with_the_calibration_runs():
    with pytest.raises(ValueError, match="calibration_cpu_ms has 1 medians for 2 calibration_runs"):
        CompareInputs(calibration_runs=[("1", 10.0), ("1", 11.0)], calibration_cpu_ms=[18.0])
