"""The cross-environment gate in the real runner (issue 36 item 2): the wide test model (two 64-channel
convolutions) with TensorFlow's oneDNN kernels off on one side and on on the other, each side in its own
fresh TensorFlow processes, judged as the product judges it (the noise rule, then ``decide``).

What this test checks is the real parts: each side's process really runs in its environment (the fingerprint of
each side records it: ``tensorflow.onednn_enabled``), the reason names the variable and the field, and the runner
records each side's feed. It does not assert the verdict: the smallest gate that shows the mechanics (3 process
pairs of 60 steps a side) cannot decide on a shared 2-core host, and on a busy one the busy-host rule judges CPU
time, which oneDNN's threading hardly moves (CI at load 7.8: CPU-time ratio x1.020 [0.965, 1.078] where quiet
wall time read x1.8). How the gate decides is tested with the fake runner (tests/unit/stages/
test_environment_gate.py); its real figures are in docs/verdicts.md, "Across environments". This test took
330 s when it ran 6 pairs of 400 steps a side to decide, and failed on a busy CI host."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tasks.analysis import calibration
from tasks.analysis.verdict import decide, judge_noise
from tasks.records import Case, CompareInputs, PulledModel, Verdict, WarmupRecord
from tasks.runner.driver import RunnerProcess
from tasks.runner.protocol import EnvironmentGate, read_result
from tasks.stages.profiled_run import gate_fed, paired_run, read_paired

pytestmark = pytest.mark.slow

#: steps per side and process: ~2 s of the wide model's ~5 ms steps, so a process averages over the host's load,
#: in blocks of BLOCK (the noise rule judges the scale of block medians: single steps' CPU time reads 0.14 here)
STEPS, BLOCK = 60, 10
WARM = WarmupRecord(warmup_steps=20, steady=True, final_cv=0.01, cold_step_ms=5.0, step_times_ms=[5.0] * 3, wall_s=1)


def _pulled(model: Path) -> PulledModel:
    return PulledModel(
        model="wide", version="1", source_uri=str(model), local_path=str(model), format="keras", digest="w" * 8,
        size_bytes=1,
    )  # fmt: skip


def _gate(tmp_path: Path, model: Path, a: str, b: str, processes: int):
    case = Case(
        model="wide",
        measured_steps=10,
        paired_blocks=processes * STEPS // BLOCK,
        paired_block_steps=BLOCK,
        paired_processes=processes,
        baseline_env={"TF_ENABLE_ONEDNN_OPTS": a},
    )
    runner = RunnerProcess([sys.executable, "-m", "tasks.runner"], env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": b})
    pulled = _pulled(model)
    path, _ = paired_run(pulled, pulled, case, WARM, tmp_path / "wd", runner, gpu=False)
    paired = read_paired(path)
    noise = judge_noise(
        case,
        paired.host_load,
        paired,
        offset=calibration.Offset(sd=0.0, source="default"),
        calibrated=calibration.NoiseCalibration(sd_pair=None, n_gates=0),
        gpu=False,
    )
    d = decide([5.0] * 10, case, CompareInputs(), env_data={}, paired=paired, noise=noise.model_dump(mode="json"))
    print(f"{a} -> {b}: {d.verdict} {d.ratio:.3f} [{d.ci_low:.3f}, {d.ci_high:.3f}] on {d.evidence.get('metric')}")
    print(d.reason)
    return path, d


def test_each_side_runs_in_its_own_environment_and_the_reason_names_what_differs(model_files, tmp_path):
    """A: oneDNN on, B: off: each side's fingerprint records its own setting, the verdict's reason names the
    variable and the fingerprint field it changed, and each side was fed every step it timed."""
    path, d = _gate(tmp_path, model_files["wide"], "1", "0", 3)
    assert d.verdict in set(Verdict) and d.ratio > 0, d.reason
    assert "env TF_ENABLE_ONEDNN_OPTS 1 -> 0" in d.reason and "tensorflow.onednn_enabled True -> False" in d.reason
    g = read_result(path, EnvironmentGate)
    assert g.environments["A"]["fingerprint_id"] != g.environments["B"]["fingerprint_id"]
    assert len(g.processes) == 2 * 3 and {p.side for p in g.processes} == {"A", "B"}
    fed = gate_fed(path)  # the real runner records each side's feed
    assert fed.fed["paired"].steps == STEPS and fed.a_fed["paired"].steps == STEPS
