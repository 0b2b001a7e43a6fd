"""An environment change judged with a paired gate (issue 36 item 3, ``verdict.judge_change``), at the stage level.

The case's accepted runs are in environment A; the candidate runs in environment B (a driver and cuDNN upgrade)
with no accepted run there yet, so baseline-compare judges the change. Two paired paths:

* a cross-environment gate (``Case.baseline_env``: side A run in the old environment, by the fake runner) judges
  the change itself, whatever the interval across the change says;
* a paired gate of two versions inside the new environment is combined with the interval across the change:
  ``regression`` when either says so, undecided (``env-changed``) when either is.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import numpy as np
import pytest

from tasks.records import PulledModel, Verdict, WarmupRecord
from tasks.runner.driver import RunnerProcess
from tasks.stages.compare import baseline_compare
from tasks.stages.profiled_run import paired_run
from tests.helpers import fake_runner
from tests.helpers.builders import (
    BASELINE_FINGERPRINT,
    CANDIDATE_FINGERPRINT,
    _paired_file,
    archive_with_env,
    env_record,
    make_records,
)

CHANGES = "gpu.driver_version 535.104.05 -> 535.129.03; tensorflow.build.cudnn_version 8.6 -> 8.9"
#: log offsets of eight processes' medians from the version's speed (sd 0.049: a realistic host's drift)
DRIFT = [0.0, 0.06, -0.05, 0.03, -0.07, 0.04, -0.02, 0.01]


def process(seed: int, speed: float, offset: float, step_sd: float = 0.05) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(10.0 * speed * np.exp(offset + rng.normal(0.0, step_sd, 100)))


def old_environment(db_url: str, tmp_path: Path, scale: float, step_sd: float = 0.05) -> None:
    """Eight accepted runs in environment A, their drift ``scale`` x :data:`DRIFT`."""
    for i, o in enumerate(DRIFT):
        archive_with_env(db_url, tmp_path, f"a{i}", BASELINE_FINGERPRINT, steps=process(i, 1.0, scale * o, step_sd))


def judge(db_url: str, tmp_path: Path, speed: float, paired_path: str, step_sd: float = 0.05, **case_kw):
    """baseline_compare of a candidate in environment B whose measured steps run at ``speed`` x A's, with the
    paired result at ``paired_path``."""
    ctx, pulled, _, _, run, parsed, _ = make_records(
        tmp_path, dag_run_id="cand", steps=process(99, speed, 0.0, step_sd)
    )
    case = ctx.case.model_copy(update=case_kw)
    run = run.model_copy(update={"paired_path": paired_path, "baseline_model": pulled})
    return baseline_compare(db_url, case, env_record(CANDIDATE_FINGERPRINT), run, parsed, tmp_path / "cand" / "work")


def version_gate(tmp_path: Path, ratio: float) -> str:
    """A paired gate of two versions inside environment B (as the profiled-run stage leaves it) at ``ratio``."""
    return _paired_file(tmp_path / f"paired-{ratio}.json", ratio, budget=64, sd=0.03, seed=1)


VERSION_GATE = {"paired_blocks": 64, "paired_block_steps": 1}


def test_a_version_gate_that_passes_is_a_regression_when_the_interval_across_the_change_is_one(db_url, tmp_path):
    """The interval across the change finds B 20% slower; the versions' gate (inside B) passes: regression, with
    the interval's figures, the gate's verdict kept beside them."""
    old_environment(db_url, tmp_path, 1.0)
    v = judge(db_url, tmp_path, 1.20, version_gate(tmp_path, 1.0), **VERSION_GATE)
    assert v.verdict == Verdict.REGRESSION and v.method == "cross-environment", v.reason
    assert v.ci_low > 1.0
    assert v.evidence["env_change"] == {
        "by": "interval across the change and the paired gate",
        "verdict_statistics": Verdict.REGRESSION,
        "verdict": Verdict.REGRESSION,
    }
    assert v.evidence["verdict_paired"]["verdict"] == Verdict.PASS
    assert v.evidence["verdict_paired"]["method"] == "paired-abba"
    assert v.reason.startswith(f"the environment changed: {CHANGES}; regression: ")
    assert "The paired gate of the versions said pass" in v.reason


def test_a_version_gate_that_passes_is_undecided_when_the_interval_across_the_change_is(db_url, tmp_path):
    """Unchanged speed at a drift the interval cannot judge: the gate's pass does not judge the change (it compared
    two versions inside B, not A with B): env-changed, never the baseline by itself."""
    old_environment(db_url, tmp_path, 1.0)
    v = judge(db_url, tmp_path, 1.0, version_gate(tmp_path, 1.0), **VERSION_GATE)
    assert v.verdict == Verdict.ENV_CHANGED, v.reason
    assert v.evidence["env_change"]["verdict"] == Verdict.INCONCLUSIVE
    assert v.evidence["verdict_paired"]["verdict"] == Verdict.PASS
    assert v.reason.startswith(f"the environment changed: {CHANGES}; env-changed: ")
    assert "perfwatch baseline accept RUN_ID" in v.reason


def test_a_version_gate_that_finds_a_regression_wins_over_a_passing_interval(db_url, tmp_path):
    """A quiet host: the interval across the change passes; the versions' gate finds x1.3: regression, on the
    gate's figures (nothing kept beside them: the gate decided)."""
    old_environment(db_url, tmp_path, 0.2, step_sd=0.02)
    v = judge(db_url, tmp_path, 1.0, version_gate(tmp_path, 1.3), step_sd=0.02, **VERSION_GATE)
    assert v.verdict == Verdict.REGRESSION and v.method == "paired-abba", v.reason
    assert v.ratio == pytest.approx(1.3, rel=0.05)
    assert v.evidence["env_change"]["verdict"] == Verdict.PASS and "verdict_paired" not in v.evidence
    assert v.reason.startswith(f"the environment changed: {CHANGES}; regression: ")


WARM = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=5.0, step_times_ms=[1.0] * 3, wall_s=1)


def _pulled(tmp_path: Path, where: str) -> PulledModel:
    path = fake_runner.write_model(tmp_path / where / "1" / "model.keras", 1.0).parent
    return PulledModel(
        model="m", version="1", source_uri=str(path), local_path=str(path), format="keras", digest="1" * 8, size_bytes=1
    )


@pytest.mark.slow  # the fake runner's fresh processes
def test_a_cross_environment_gate_judges_the_change_over_the_interval(db_url, tmp_path):
    """A quiet host whose interval across the change passes B (its measured steps as fast as A's runs); the
    cross-environment gate runs A's environment beside B's (the fake: A steps in 1.0 ms, B in 1.5) and finds
    x1.5: the gate judges the change, a regression."""
    old_environment(db_url, tmp_path, 0.2, step_sd=0.02)
    gate = {"paired_blocks": 120, "paired_block_steps": 2, "paired_processes": 6}
    ctx, *_ = make_records(tmp_path / "plan", dag_run_id="plan")
    case = ctx.case.model_copy(update={**gate, "measured_steps": 10, "baseline_env": {"PERFWATCH_FAKE_STEP_MS": "1.0"}})
    runner = RunnerProcess(
        shlex.split(fake_runner.command()),
        env={**os.environ, "PERFWATCH_FAKE_STEP_MS": "1.5", "PERFWATCH_FAKE_NOISE_CV": "0.01"},
    )
    path, _ = paired_run(
        _pulled(tmp_path, "store"), _pulled(tmp_path, "baseline"), case, WARM, tmp_path / "wd", runner, gpu=False
    )
    v = judge(db_url, tmp_path, 1.0, path, step_sd=0.02, **gate, baseline_env={"PERFWATCH_FAKE_STEP_MS": "1.0"})
    assert v.verdict == Verdict.REGRESSION and v.ratio == pytest.approx(1.5, rel=0.05), v.reason
    assert v.evidence["env_change"] == {
        "by": "cross-environment gate",
        "verdict_statistics": Verdict.PASS,
        "verdict": Verdict.PASS,
    }
    assert "verdict_paired" not in v.evidence
    assert v.reason.startswith(f"the environment changed: {CHANGES}; regression: ")
