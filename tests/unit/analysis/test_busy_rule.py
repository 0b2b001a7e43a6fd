"""Deciding on a busy host (issue 23): which metric decides, the busy-host verdict rule that refuses what load
can fake, the sign-flip randomisation check of every paired verdict, and HostBusy only for what no metric
could decide."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tasks.analysis import calibration, stats
from tasks.analysis.calibration import NoiseCalibration, assess_noise, choose_metric, gpu_in_use
from tasks.analysis.verdict import (
    PairedBlocks,
    busy_lines,
    busy_verdict_from_ci,
    cpu_comparison,
    decide,
    judge_noise,
    look_decides,
    randomisation_check,
)
from tasks.records import (
    ArchiveRecord,
    Case,
    CompareInputs,
    CompareRecord,
    EnvRecord,
    ProfiledRun,
    RunContext,
    RunState,
)
from tasks.stages import pipeline
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.stages.profiled_run import read_paired
from tests.helpers.builders import _paired_file, make_records

QUIET = {"wall_s": 10.0, "cpus": 2, "load1_start": 2.0, "load1_end": 2.1, "other_cpu_share": 0.02, "steal_share": 0.0}
LOADED = {**QUIET, "other_cpu_share": 0.62, "load1_start": 8.0, "load1_end": 9.0}
CASE = Case(model="m", measured_steps=10, paired_blocks=64, paired_block_steps=1)
OFFSET = calibration.Offset(sd=0.0, source="default")
NO_CAL = NoiseCalibration(sd_pair=None, n_gates=0)
B = calibration.CPU_BIAS_BOUND  #: the most load moved a CPU-time ratio (bench/busy.py)


def _pairs(n, wall_ratio, cpu_ratio, *, wall_sd=0.25, cpu_sd=0.03, seed=0, host_load=LOADED):
    """A fixed gate (no sequential design) of ``n`` one-step pairs: wall time noisy as under load, CPU time
    steady."""
    rng = np.random.default_rng(seed)
    a = 10.0 * rng.lognormal(0, wall_sd, n)
    b = wall_ratio * 10.0 * rng.lognormal(0, wall_sd, n)
    ac = 18.0 * rng.lognormal(0, cpu_sd, n)
    bc = cpu_ratio * 18.0 * rng.lognormal(0, cpu_sd, n)
    return PairedBlocks(
        a=[[x] for x in a],
        b=[[x] for x in b],
        layout={"blocks": n, "block_steps": 1, "timed_steps": 2 * n, "wall_s": 1.0, "orders": ""},
        gate=None,
        host_load=host_load,
        a_cpu=[[x] for x in ac],
        b_cpu=[[x] for x in bc],
    )


def _decide(paired, noise):
    return decide(
        [x for blk in paired.b for x in blk],
        CASE,
        CompareInputs(),
        env_data={},
        paired=paired,
        noise=noise.model_dump(mode="json"),
    )


# ------------------------------------------------------------------------------------- which metric decides


def test_a_quiet_host_decides_on_wall_time():
    n = choose_metric(assess_noise(QUIET), cpu_sd=0.03, cpu_pairs=64, calibration=NO_CAL, gpu=False)
    assert (n.busy, n.metric, n.decided_on) == (False, "wall", "wall")
    paired = _pairs(64, 1.7, 1.7, wall_sd=0.03, host_load=QUIET)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    d = _decide(paired, noise)
    assert d.verdict == "regression" and d.evidence["metric"] == "wall" and "CPU time" not in d.reason


def test_a_busy_host_with_steady_cpu_time_decides_on_it():
    n = choose_metric(assess_noise(LOADED), cpu_sd=0.03, cpu_pairs=64, calibration=NO_CAL, gpu=False)
    assert (n.busy, n.metric, n.decided_on) == (True, "cpu", None)
    assert n.cpu_bound == calibration.MAX_CPU_SCALE and n.cpu_sd_low < n.cpu_sd
    paired = _pairs(64, 1.7, 1.7)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    assert noise.busy and noise.metric == "cpu" and noise.decided_on == "cpu"
    d = _decide(paired, noise)
    assert d.verdict == "regression" and d.evidence["metric"] == "cpu"
    assert d.reason.startswith("decided on CPU time: host busy (other processes took 62%")
    assert f"tolerance 5% on CPU time, less the CPU bias bound {B:.1%}" in d.reason  # the tolerance, in its metric
    assert d.ratio == pytest.approx(1.7, rel=0.03) and d.ci_low > 1 + B
    assert d.evidence["verdict_statistics"]["metric"] == "wall"
    assert d.evidence["randomisation"]["rejected"] and d.evidence["cpu"]["randomisation"]["p"] < 0.005


def test_a_busy_gpu_case_stays_inconclusive_and_says_so():
    n = choose_metric(assess_noise(LOADED), cpu_sd=0.03, cpu_pairs=64, calibration=NO_CAL, gpu=True)
    assert n.metric is None and "a GPU case: CPU time is not the work" in n.metric_reason
    unsure = choose_metric(assess_noise(LOADED), cpu_sd=0.03, cpu_pairs=64, calibration=NO_CAL, gpu=None)
    assert unsure.metric is None and "may use a GPU" in unsure.metric_reason
    paired = _pairs(64, 1.7, 1.7)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=True)
    d = _decide(paired, noise)
    assert d.verdict == "inconclusive" and d.reason.startswith("host busy: ") and noise.decided_on is None
    assert d.evidence["metric"] == "wall"


def test_the_gpu_question_comes_from_the_run_and_the_fingerprint():
    assert gpu_in_use(None, None) is False and gpu_in_use(None, 1 << 20) is True
    assert gpu_in_use({"gpu": {"count": 0}}, None) is False and gpu_in_use({"gpu": {"count": 1}}, None) is True
    assert gpu_in_use({"gpu": {"count": "unknown: NVMLError"}}, None) is None and gpu_in_use({}, None) is None


def test_a_busy_host_with_noisy_cpu_time_or_steal_stays_undecided():
    noisy = choose_metric(assess_noise(LOADED), cpu_sd=0.20, cpu_pairs=64, calibration=NO_CAL, gpu=False)
    assert noisy.metric is None and "CPU time is noisy too" in noisy.metric_reason
    # with a calibration of the CPU scale the bound is 1.5x it: 0.20 against 0.05 is busy, against 0.15 not
    cal = NoiseCalibration(sd_pair=None, n_gates=0, cpu_sd_pair=0.05, cpu_gates=4)
    assert choose_metric(assess_noise(LOADED), cpu_sd=0.20, cpu_pairs=64, calibration=cal, gpu=False).metric is None
    cal = cal.model_copy(update={"cpu_sd_pair": 0.15})
    assert choose_metric(assess_noise(LOADED), cpu_sd=0.20, cpu_pairs=64, calibration=cal, gpu=False).metric == "cpu"
    stolen = choose_metric(
        assess_noise({**LOADED, "steal_share": 0.2}), cpu_sd=0.03, cpu_pairs=64, calibration=NO_CAL, gpu=False
    )
    assert stolen.metric is None and "stole 20%" in stolen.metric_reason
    # the case's steal bound (Case.max_steal_share) is the one CPU time is held to as well
    allowed = choose_metric(
        assess_noise({**LOADED, "steal_share": 0.2}, max_steal_share=0.3),
        cpu_sd=0.03,
        cpu_pairs=64,
        calibration=NO_CAL,
        gpu=False,
    )
    assert allowed.metric == "cpu" and "steal 20%" in allowed.metric_reason
    absent = choose_metric(assess_noise(LOADED), cpu_sd=None, cpu_pairs=None, calibration=NO_CAL, gpu=False)
    assert absent.metric is None and "no per-step CPU time" in absent.metric_reason
    paired = _pairs(64, 1.7, 1.7, cpu_sd=0.4)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    assert noise.metric is None and noise.decided_on is None and _decide(paired, noise).verdict == "inconclusive"


def test_the_cpu_scale_is_calibrated_from_stored_gates_that_recorded_it():
    gates = [{"details": {"scale_log_ratio": 0.07, "cpu_scale_log_ratio": s}, "host_busy": True} for s in (0.04, 0.06)]
    assert calibration.calibrated_noise(gates).cpu_sd_pair is None  # fewer than MIN_NOISE_GATES
    gates.append({"details": {"cpu_scale_log_ratio": 0.05}, "host_busy": False})
    cal = calibration.calibrated_noise(gates)
    assert cal.cpu_sd_pair == pytest.approx(0.05) and cal.cpu_gates == 3 and cal.sd_pair is None


# ------------------------------------------------------------------ what load can fake is refused on a busy host


def test_the_busy_rule_is_the_quiet_rule_with_the_bias_bound_taken_off_each_line():
    change, band = busy_lines(0.05)
    assert change == pytest.approx(1 + B) and band == pytest.approx(1.05 / (1 + B))
    assert busy_verdict_from_ci(0.99, 1.01, 0.05) == "pass"  # within the tolerance whatever load did
    assert busy_verdict_from_ci(1 / band + 1e-3, band - 1e-3, 0.05) == "pass"
    assert busy_verdict_from_ci(0.5, band - 1e-3, 0.05) == "pass"  # no slowdown beyond the tolerance can hide
    assert busy_verdict_from_ci(change + 1e-3, change + 0.1, 0.05) == "regression"
    assert busy_verdict_from_ci(1 / change - 0.1, 1 / change - 1e-3, 0.05) == "improvement"
    # above 1 but not past what load can fake, and not within the band: a quiet host's regression, not here
    assert stats.verdict_from_ci(1.001, band + 0.03, 0.05) == "regression"
    assert busy_verdict_from_ci(1.001, band + 0.03, 0.05) == "inconclusive"
    assert busy_verdict_from_ci(0.5, 2.0, 0.05) == "inconclusive"
    # a tolerance no larger than the bias bound: nothing can pass
    assert busy_verdict_from_ci(0.999, 1.001, B) == "inconclusive"


def test_a_regression_faked_by_load_on_wall_time_is_refused():
    """An A/A gate under load: wall time biased +12% (a quiet host's regression), CPU time unmoved: the busy
    host decides on CPU time, and it passes; the wall-time regression is kept only as the statistics' verdict."""
    paired = _pairs(200, 1.12, 1.0, wall_sd=0.05, cpu_sd=0.01, seed=4)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    d = _decide(paired, noise)
    stat = d.evidence["verdict_statistics"]
    assert (stat["verdict"], stat["metric"]) == ("regression", "wall")
    assert d.verdict == "pass" and d.evidence["metric"] == "cpu" and noise.decided_on == "cpu"


def test_a_cpu_ratio_moved_by_load_within_the_bias_bound_is_no_regression():
    """CPU time steady (sd 0.01) at 1 + B/2: significantly above 1, as load can move an unchanged model's CPU
    time, but within the bias bound: a busy host never calls that a regression."""
    paired = _pairs(200, 1.0, 1 + B / 2, cpu_sd=0.01, seed=3)
    res, _ = cpu_comparison(paired, CASE, OFFSET)
    assert 1 < res.ci_low < 1 + B
    assert res.verdict != "regression"


@pytest.mark.parametrize("ratio", [1.10, 1.2])
def test_a_busy_host_never_passes_a_slowdown_beyond_the_tolerance(ratio):
    paired = _pairs(200, ratio, ratio, cpu_sd=0.01, seed=4)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    d = _decide(paired, noise)
    assert d.verdict == "regression" and noise.decided_on == "cpu"
    assert busy_verdict_from_ci(1.08, 1.12, 0.05) != "pass"


def test_a_busy_cpu_improvement_stands():
    paired = _pairs(64, 0.6, 0.6)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    d = _decide(paired, noise)
    assert noise.decided_on == "cpu" and d.verdict == "improvement" and d.evidence["metric"] == "cpu"


# ------------------------------------------------------------------------------------- the randomisation check


def test_a_clear_regression_passes_the_randomisation_check():
    rng = np.random.default_rng(0)
    d = rng.normal(math.log(1.15), 0.03, 64)
    verdict, test = randomisation_check(d, "regression", 0.05, 0.99)
    assert verdict == "regression" and test["rejected"] and test["reachable"]
    assert test["null_log_ratio"] == 0.0 and test["alternative"] == "greater" and test["resamples"] == 9999
    assert test["p"] <= 1e-3 and test["level"] == pytest.approx(0.005)
    # on a busy host the lines are the bias bound (a change) and the tolerance less it (a pass)
    _, busy = randomisation_check(d, "regression", 0.05, 0.99, busy=True)
    assert busy["null_log_ratio"] == pytest.approx(math.log(1 + B)) and busy["rejected"]
    _, busy = randomisation_check(rng.normal(0, 0.01, 64), "pass", 0.05, 0.99, busy=True)
    assert busy["null_log_ratio"] == pytest.approx(math.log(1.05 / (1 + B))) and busy["alternative"] == "less"
    _, ok = randomisation_check(rng.normal(0, 0.01, 64), "pass", 0.05, 0.99)
    assert ok["null_log_ratio"] == pytest.approx(math.log(1.05)) and ok["alternative"] == "less" and ok["rejected"]


def test_a_tiny_gate_whose_interval_decides_but_randomisation_does_not_is_inconclusive():
    """8 pairs, one slightly faster: the t interval says regression, but 2 of the 256 sign patterns reach the
    observed mean (p = 0.0078 > 0.005): the verdict becomes inconclusive and says why."""
    d = [0.2] * 7 + [-0.01]
    a = [[10.0]] * 8
    b = [[10.0 * math.exp(x)] for x in d]
    assert stats.compare_paired(a, b).verdict == "regression"
    paired = PairedBlocks(a=a, b=b, layout={"blocks": 8, "block_steps": 1}, host_load=QUIET)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    dec = _decide(paired, noise)
    r = dec.evidence["randomisation"]
    assert dec.verdict == "inconclusive" and r["p"] == pytest.approx(2 / 256) and r["resamples"] == 256
    assert "randomisation test of the regression does not confirm it" in dec.reason
    # fewer than 8 pairs cannot reach 99% by sign flips at all: recorded, and the interval alone decides
    short = PairedBlocks(a=a[:6], b=[[12.0]] * 6, layout={"blocks": 6, "block_steps": 1}, host_load=QUIET)
    dec = _decide(short, judge_noise(CASE, None, short, offset=OFFSET, calibrated=NO_CAL, gpu=False))
    assert dec.verdict == "regression" and dec.evidence["randomisation"]["reachable"] is False


def test_every_paired_verdict_records_its_randomisation_test():
    for ratio in (1.0, 1.3):
        paired = _pairs(64, ratio, ratio, wall_sd=0.03, host_load=QUIET)
        d = _decide(paired, judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False))
        assert set(d.evidence["randomisation"]) >= {"p", "null_log_ratio", "resamples"}


# ------------------------------------------------------------------------------------------------ the retry rule


def _state(noise):
    return RunState(
        ctx=RunContext(dag_id="d", dag_run_id="r", case=Case(model="m", measured_steps=10)),
        env=EnvRecord.model_construct(comparability_key="k1"),
        run=ProfiledRun.model_construct(noise=noise, paired_path="/x/paired/result.json"),
    )


def test_host_busy_only_when_no_metric_is_fit():
    decided = judge_noise(CASE, None, _pairs(64, 1.7, 1.7), offset=OFFSET, calibrated=NO_CAL, gpu=False)
    undecided = judge_noise(CASE, None, _pairs(64, 1.7, 1.7), offset=OFFSET, calibrated=NO_CAL, gpu=True)
    # CPU time fit but its interval undecided (64 pairs of a x1.03 with noisy CPU time): not measured again
    gate = _pairs(64, 1.03, 1.03, cpu_sd=0.06)
    open_gate = judge_noise(CASE, None, gate, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    assert open_gate.decided_on == "cpu" and _decide(gate, open_gate).verdict == "inconclusive"
    assert pipeline.busy_reason(_state(open_gate.model_dump(mode="json"))) is None
    assert pipeline.busy_reason(_state(decided.model_dump(mode="json"))) is None
    pipeline.raise_on_host_busy(_state(decided.model_dump(mode="json")))  # decided on CPU time: stays decided
    with pytest.raises(pipeline.HostBusy, match="host busy: other processes took 62%.*measuring again later"):
        pipeline.raise_on_host_busy(_state(undecided.model_dump(mode="json")))
    after = _state(decided.model_dump(mode="json")).model_copy(
        update={
            "verdict": CompareRecord.model_construct(verdict="regression", evidence={"noise": decided.model_dump()}),
            "archived": ArchiveRecord.model_construct(run_id=7),
        }
    )
    assert pipeline.busy_reason(after) is None


# ------------------------------------------------------------------------ the stage: hand-written paired results


@pytest.fixture
def baseline(db_url, tmp_path):
    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="base"))
    return db_url


def test_baseline_compare_decides_a_busy_gate_on_cpu_time(baseline, tmp_path):
    """A x1.7 candidate on a host where other processes took 62%: wall time noisy (sd 0.25), CPU time steady.
    The profiled run's judgement says CPU time decides; baseline-compare says regression on CPU time, GX's
    threshold fails on it as on a quiet regression, and the gate is not measured again."""
    ctx, pulled, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand")
    case = ctx.case.model_copy(update={"paired_blocks": 64, "paired_block_steps": 1})
    path = _paired_file(tmp_path / "paired.json", 1.7, sd=0.25, cpu_ratio=1.7, cpu_sd=0.03, host_load=LOADED)
    paired = read_paired(path)
    assert paired.a_cpu is not None and len(paired.a_cpu) == len(paired.a)
    gpu = calibration.gpu_in_use(env.data, run.peak_device_bytes)
    noise = judge_noise(case, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=gpu).model_dump(mode="json")
    assert gpu is False and noise["busy"] and noise["decided_on"] == "cpu"
    run = run.model_copy(update={"paired_path": path, "baseline_model": pulled, "noise": noise})
    v = baseline_compare(baseline, case, env, run, parsed, tmp_path / "cand" / "work")
    assert v.verdict == "regression" and v.evidence["metric"] == "cpu"
    assert v.reason.startswith("decided on CPU time: host busy (other processes took 62%")
    assert v.evidence["paired"]["host_busy"] is True  # never used to calibrate the wall noise or the offset
    assert v.evidence["paired"]["details"]["cpu_scale_log_ratio"] > 0  # what calibrates the CPU scale
    assert v.evidence["gx"]["verdict"] == {"success": False, "failures": 1}
    assert pipeline.busy_reason(_state(noise)) is None
    # a x1.2 candidate without CPU time: busy, nothing fit, inconclusive, measured again (a x1.7 one's wall interval
    # lies beyond what load can fake: test_processes.py's test_a_busy_host_with_no_fit_metric_still_decides...)
    plain = _paired_file(tmp_path / "plain.json", 1.2, sd=0.25, host_load=LOADED)
    noise = judge_noise(case, None, read_paired(plain), offset=OFFSET, calibrated=NO_CAL, gpu=gpu)
    assert noise.decided_on is None and "no per-step CPU time" in noise.metric_reason
    run = run.model_copy(update={"paired_path": plain, "noise": noise.model_dump(mode="json")})
    v = baseline_compare(baseline, case, env, run, parsed, tmp_path / "cand" / "work2")
    assert v.verdict == "inconclusive" and v.evidence["metric"] == "wall" and v.gx_success


# ------------------------------------------------------------------- when a sequential gate stops on a busy host


def test_a_busy_gate_stops_on_cpu_time_not_on_wall_time():
    """Looks at 32 and 48 pairs: wall time faked a regression (x1.3, steady), CPU time unchanged but still
    open at 32 pairs. On a quiet round the wall look stops the gate; on a busy one the CPU look decides; where no
    metric is fit (a GPU case, no CPU time, CPU time noisy too: what the verdict would leave undecided) no look
    stops it (issue 35: the stop rule is the verdict's, ``verdict.deciding_metric``)."""
    from tasks.analysis import sequential

    design = sequential.Design(max_pairs=320, tolerance=0.05, confidence=0.99, offset_sd=0.0)
    rng = np.random.default_rng(1)
    wall = list(rng.normal(math.log(1.3), 0.02, 64))
    cpu = list(rng.normal(0.0, 0.06, 64))  # fit (scale within 0.10), but undecided at 32 pairs
    kw = {"case": CASE, "calibrated": NO_CAL}
    assert look_decides(wall, cpu, [32], design, host_load=QUIET, gpu=False, **kw) == (True, "wall")
    assert look_decides(wall, cpu, [32], design, host_load=LOADED, gpu=False, **kw) == (False, "cpu")
    assert look_decides(wall, None, [32], design, host_load=LOADED, gpu=False, **kw) == (False, "none")
    assert look_decides(wall, cpu, [32], design, host_load=LOADED, gpu=True, **kw) == (False, "none")
    noisy = list(rng.normal(0.0, 0.2, 64))  # CPU time noisy too: no metric fit
    assert look_decides(wall, noisy, [32], design, host_load=LOADED, gpu=False, **kw) == (False, "none")
    steady = list(rng.normal(0.0, 0.01, 64))
    assert look_decides(wall, steady, [32, 48], design, host_load=LOADED, gpu=False, **kw) == (True, "cpu")
    # the wall-time analysis of a gate that CPU time stopped allows its earlier decided looks
    with pytest.raises(ValueError, match="already decided"):
        sequential.analyse(wall, [32, 48], design)
    assert sequential.analyse(wall, [32, 48], design, strict=False).final.pairs == 48


def test_a_gate_that_cpu_time_stopped_says_so_in_its_evidence():
    """Wall time noisy and open at 48 pairs, CPU time decided there: the stored gate says it stopped on its
    CPU-time look, and the wall-time analysis does not refuse the looks it left open."""
    from tasks.analysis import sequential

    design = sequential.Design(max_pairs=320, tolerance=0.05, confidence=0.99, offset_sd=0.0)
    paired = _pairs(48, 1.3, 1.3, wall_sd=0.4, cpu_sd=0.02, seed=2)
    paired = PairedBlocks(
        **{
            **paired.__dict__,
            "gate": {
                "design": design.model_dump(mode="json"),
                "look_pairs": [32, 48],
                "stopping": ["cpu", "cpu"],
                "offset": OFFSET.model_dump(mode="json"),
                "calibrated_noise": None,
            },
        }
    )
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=NO_CAL, gpu=False)
    d = _decide(paired, noise)
    seq = d.evidence["paired"]["sequential"]
    assert d.verdict == "regression" and d.evidence["metric"] == "cpu"
    assert seq["looks"][-1]["verdict"] == "inconclusive"  # wall time (sd 0.4 per step) was still open
    assert seq["stopping"] == ["cpu", "cpu"] and seq["stopped"] == "decided on CPU time"
