"""The sequential paired gate stops and is judged on one metric (issue 35, item 5).

On a busy round a gate stopped "the interval decides: stopping" at 32 pairs on its CPU-time look, then its verdict
was judged on wall time and said ``inconclusive (2.921 [0.704, 12.116])`` for a model 3-4x slower: the stop rule
judged the round's host load, the verdict the whole gate's, with the noise and CPU-fitness rules on top. Here the
stage's own stop loop (``profiled_run.paired_run``) runs on pairs a real runner measured beside two TensorFlow
training jobs (``bench/data/busy_samples.json``: a candidate x1.22 slower, wall time noisy, CPU time steady), with
each round's host load set so that the two choices differed, and then the verdict (``judge_noise``, ``decide``)."""

from __future__ import annotations

import pytest

from tasks.analysis import calibration
from tasks.analysis.verdict import decide, judge_noise
from tasks.records import Case, CompareInputs, PulledModel, Verdict, WarmupRecord
from tasks.stages.profiled_run import GateSetup, paired_run, read_paired
from tests.helpers.replay import ReplayPairs, blocks_of, recorded_process

CASE = Case(
    model="m", measured_steps=20, paired_blocks=160, paired_block_steps=1, paired_processes=1
)  # one process: the replayed rounds
OFFSET = calibration.Offset(sd=0.0, source="default")
NO_CAL = calibration.NoiseCalibration(sd_pair=None, n_gates=0)
#: the CPU scale of quiet gates of this case, low enough that the busy process's CPU time (scale 0.043) is unfit
QUIET_BUSY_QUIET = [0.02, 0.40, 0.02]  #: other processes' share of the CPU per round (the last one repeating)
CPU_CAL = calibration.NoiseCalibration(sd_pair=None, n_gates=0, cpu_sd_pair=0.02, cpu_gates=5)


def _gate(tmp_path, shares: list[float], calibrated: calibration.NoiseCalibration):
    """The recorded busy process's pairs through the stage's paired gate in rounds of 16, round i's host load
    reading ``shares[i]`` of the CPU taken by other processes (the last share repeating), then its verdict."""
    p = recorded_process("h3000", "tf")
    loads = [{**p["host_load"], "other_cpu_share": s, "wall_s": p["host_load"]["wall_s"] / 10} for s in shares]

    def pulled(v: str) -> PulledModel:
        return PulledModel(
            model="m",
            version=v,
            source_uri="x",
            local_path=str(tmp_path / v),
            format="keras",
            digest=v * 64,
            size_bytes=1,
        )

    warm = WarmupRecord(warmup_steps=1, steady=True, final_cv=0.01, cold_step_ms=1.0, step_times_ms=[1.0], wall_s=1.0)
    setup = GateSetup(offset=OFFSET, noise=calibrated)
    runner = ReplayPairs(blocks_of(p), loads)
    path, _ = paired_run(pulled("2"), pulled("1"), CASE, warm, tmp_path, runner, timeout_s=60, setup=setup, gpu=False)
    paired = read_paired(path)
    noise = judge_noise(CASE, None, paired, offset=OFFSET, calibrated=calibrated, gpu=False)
    b = [x for blk in paired.b for x in blk]
    d = decide(b, CASE, CompareInputs(), env_data={}, paired=paired, noise=noise.model_dump(mode="json"))
    return paired.gate, noise, d


@pytest.mark.parametrize(
    ("shares", "calibrated", "decided_on"),
    [
        # a busy second round (other processes took 40%) between quiet ones: busy by that round, quiet by the
        # gate's pairs so far
        (QUIET_BUSY_QUIET, NO_CAL, "wall"),
        # busy throughout, CPU time steady by the cap (0.10) but 2x the case's calibrated CPU scale: no metric fit
        ([0.62], CPU_CAL, None),
        # busy throughout, CPU time fit: the CPU-time look stops it and the CPU-time verdict stands
        ([0.62], NO_CAL, "cpu"),
    ],
)
def test_the_gate_stops_on_the_metric_its_verdict_is_judged_on(tmp_path, shares, calibrated, decided_on):
    gate, noise, d = _gate(tmp_path, shares, calibrated)
    looks, stopping = gate["look_pairs"], gate["stopping"]
    assert noise.metric == decided_on
    # the metric the last look was judged on is the one the verdict decided on ("none": no metric was fit)
    assert stopping[-1] == (decided_on or "none"), (looks, stopping, d.reason)
    assert d.evidence["metric"] == (decided_on or "wall")
    if looks[-1] < CASE.paired_blocks:  # it stopped early: only because the verdict's metric decided
        assert d.verdict != Verdict.INCONCLUSIVE, (looks, stopping, d.reason)
    if decided_on is None:  # nothing could decide: the gate measured on, and the verdict says why it is undecided
        assert looks[-1] == CASE.paired_blocks and set(stopping) == {"none"}
        assert d.verdict == Verdict.INCONCLUSIVE and d.reason.startswith("host busy: ")
    else:  # x1.22 slower: a regression, on the metric that stopped the gate
        assert d.verdict == Verdict.REGRESSION and 1.1 < d.ratio < 1.35, d.reason


def test_a_look_is_judged_on_the_host_load_of_the_pairs_so_far(tmp_path):
    """The load the verdict judges is the one the gate's last look judged: the rounds' loads weighted by their
    wall time (the gate's record keeps it), not the newest round's alone."""
    gate, noise, _ = _gate(tmp_path, QUIET_BUSY_QUIET, NO_CAL)
    rounds = gate["look_pairs"][-1] // CASE.paired_round_pairs
    assert rounds >= 3
    shares = [QUIET_BUSY_QUIET[min(i, 2)] for i in range(rounds)]  # each round's load over the same wall time
    expected = sum(shares) / rounds
    assert gate["host_load"]["other_cpu_share"] == pytest.approx(expected)
    assert noise.host_load == gate["host_load"] and not noise.busy
