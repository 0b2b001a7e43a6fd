"""The cross-environment gate (issue 36 item 2), run by the profiled-run stage with the fake runner
(``tests.helpers.fake_runner``): side A's runner gets ``Case.baseline_env`` over B's environment, so
``PERFWATCH_FAKE_STEP_MS`` there makes the baseline environment faster or slower than this run's."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from pydantic import ValidationError

from tasks.analysis import calibration
from tasks.analysis.verdict import decide, judge_noise
from tasks.records import (
    ENVIRONMENT_PROCESS_PAIRS,
    PAIRED_PROCESSES,
    Case,
    CompareInputs,
    PulledModel,
    RunContext,
    WarmupRecord,
)
from tasks.runner.driver import RunnerProcess
from tasks.runner.protocol import EnvironmentGate, read_result
from tasks.stages.profiled_run import GateSetup, baseline_runner, gate_fed, paired_run, read_paired
from tests.helpers import fake_runner

pytestmark = pytest.mark.slow  # fresh interpreters


def _pulled(tmp_path: Path, where: str = "store") -> PulledModel:
    """Version 1 of the fake model in ``<tmp_path>/<where>`` (the fake seeds its noise by the model's path: a copy
    elsewhere draws its own steps, as two real processes do)."""
    path = fake_runner.write_model(tmp_path / where / "1" / "model.keras", 1.0).parent
    return PulledModel(
        model="m", version="1", source_uri=str(path), local_path=str(path), format="keras", digest="1" * 8, size_bytes=1
    )


WARM = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=5.0, step_times_ms=[1.0] * 3, wall_s=1)


def _runner(**env: str) -> RunnerProcess:
    return RunnerProcess(shlex.split(fake_runner.command()), env={**os.environ, **env})


def _case(**kw: object) -> Case:
    fields: dict[str, object] = {"paired_blocks": 120, "paired_block_steps": 2, "paired_processes": 6, **kw}
    return Case(model="m", measured_steps=10, **fields)


def test_a_slower_environment_is_a_regression_that_names_what_differs(tmp_path):
    """A (the baseline environment) steps in 1.0 ms, B (this run's) in 1.5: each side runs in its own fresh
    processes, one of each per pair, and the gate across the pairs finds x1.5 and names the setting."""
    pulled, copy = _pulled(tmp_path), _pulled(tmp_path, "baseline")
    case = _case(baseline_env={"PERFWATCH_FAKE_STEP_MS": "1.0"})
    runner = _runner(PERFWATCH_FAKE_STEP_MS="1.5", PERFWATCH_FAKE_NOISE_CV="0.01")
    path, wall = paired_run(pulled, copy, case, WARM, tmp_path / "wd", runner, gpu=False)
    g = read_result(path, EnvironmentGate)
    k = len({p.pair for p in g.processes})
    assert k == 3 and wall > 0 and g.gate["stopping"] == ["wall"]  # decided at the first look
    assert sorted((p.pair, p.side) for p in g.processes) == [(i, s) for i in range(3) for s in "AB"]
    assert [p.side for p in g.processes[:2]] == list(g.gate["orders"][0])  # the drawn order is the order run
    assert all(len(p.result.measured_step_times_ms) == 40 and not p.result.profiled_step_times_ms for p in g.processes)
    for side in "AB":  # each side's own fingerprint, and its own out dir
        assert g.environments[side]["fingerprint_id"] and (tmp_path / "wd" / "paired" / f"p0{side}").is_dir()
    assert g.environments["A"]["env"] == {"PERFWATCH_FAKE_STEP_MS": "1.0"}
    assert {"field": "env PERFWATCH_FAKE_STEP_MS", "old": "1.0", "new": "1.5", "configured": True} in g.environments[
        "differs"
    ]
    paired = read_paired(path)
    assert paired.layout["processes"] == 3 and paired.process == [i for i in range(3) for _ in range(20)]
    assert len(paired.a[0]) == 2  # the steps cut into blocks of paired_block_steps
    d = decide([1.5] * 10, case, CompareInputs(), env_data={}, paired=paired)
    assert d.verdict == "regression" and d.ratio == pytest.approx(1.5, rel=0.03), d.reason
    assert "env PERFWATCH_FAKE_STEP_MS 1.0 -> 1.5" in d.reason and "cross-environment" in d.reason
    assert d.evidence["processes"]["processes"] == 3
    assert gate_fed(path).fed == {}  # the fake records no feed (the real runner's: tests/tf/test_environment_gate.py)


def test_the_two_processes_of_a_pair_time_their_blocks_in_turn(tmp_path, monkeypatch):
    """Both processes of a pair start together and time their blocks one at a time, in the pair's drawn order
    (``gate.block_orders``): no block of one side overlaps a block of the other (each fake step sleeps its
    time, and logs its block's span, ``PERFWATCH_FAKE_BLOCK_LOG``)."""
    spans = tmp_path / "blocks.log"
    pulled, copy = _pulled(tmp_path), _pulled(tmp_path, "baseline")
    case = _case(baseline_env={"PERFWATCH_FAKE_STEP_MS": "3.0"}, paired_blocks=24)  # 4 blocks of 2 steps a side
    runner = _runner(PERFWATCH_FAKE_STEP_MS="6.0", PERFWATCH_FAKE_TAKE_TIME="1", PERFWATCH_FAKE_BLOCK_LOG=str(spans))
    path, _ = paired_run(pulled, copy, case, WARM, tmp_path / "wd", runner, gpu=False)
    g = read_result(path, EnvironmentGate)
    # the fake's steps sleep their time here, so a busy host may need a look more than the first (3 pairs) to decide
    assert g.gate["interleaved"] and len(g.gate["block_orders"]) == len(g.gate["orders"]) >= 3
    rows = [line.split() for line in spans.read_text().splitlines()]
    for k, order in enumerate(g.gate["block_orders"]):
        pair = sorted((float(start), float(end), name[-1]) for name, start, end in rows if name[:-1] == f"p{k}")
        assert "".join(side for _, _, side in pair) == order and len(order) == 8
        assert all(pair[i][1] <= pair[i + 1][0] for i in range(len(pair) - 1)), pair  # one block at a time
        assert order[0] == g.gate["orders"][k][0]


def test_an_identical_environment_gate_is_not_a_regression(tmp_path):
    pulled, copy = _pulled(tmp_path), _pulled(tmp_path, "baseline")
    case = _case(baseline_env={"PERFWATCH_FAKE_NOISE_CV": "0.02"})  # the same value on both sides
    path, _ = paired_run(pulled, copy, case, WARM, tmp_path / "wd", _runner(PERFWATCH_FAKE_NOISE_CV="0.02"), gpu=False)
    d = decide([1.0] * 10, case, CompareInputs(), env_data={}, paired=read_paired(path))
    assert d.verdict in ("pass", "inconclusive") and d.ci_low <= 1.0 <= d.ci_high, d.reason
    assert "A and B differ in runner" not in d.reason  # the same runner command on both sides


def test_the_baseline_runner_is_side_a_command_with_its_env_over_b():
    b = RunnerProcess(["/b/python", "-m", "tasks.runner"], env={"X": "b", "Y": "y"})
    a = baseline_runner(_case(baseline_runner="/a/python -m tasks.runner", baseline_env={"X": "a"}), b)
    assert a.command == ("/a/python", "-m", "tasks.runner") and a.env == {"X": "a", "Y": "y"}
    assert baseline_runner(_case(baseline_env={"X": "a"}), b).command == b.command


def test_cross_environment_case_fields():
    """``--baseline-env KEY=VALUE`` (repeated) reaches the Case as a mapping; bad names and too few processes
    are refused by name; a cross-environment case is paired with its own version, baseline or not."""
    c = Case(model="m", baseline_env=["TF_NUM_INTRAOP_THREADS=1", "A_B=x=y"])
    assert c.baseline_env == {"TF_NUM_INTRAOP_THREADS": "1", "A_B": "x=y"} and c.cross_environment
    assert not Case(model="m", baseline_env=[]).cross_environment
    with pytest.raises(ValidationError, match="not KEY=VALUE"):
        Case(model="m", baseline_env=["TF_NUM_INTRAOP_THREADS"])
    with pytest.raises(ValidationError, match="not an environment variable name"):
        Case(model="m", baseline_env={"1X": "1"})
    with pytest.raises(ValidationError, match="cross-environment gate"):
        Case(model="m", baseline_runner="/x/python -m tasks.runner", paired_processes=1)
    # unset, a cross-environment gate takes more process pairs than a same-environment gate takes processes
    assert (c.paired_processes, Case(model="m").paired_processes) == (ENVIRONMENT_PROCESS_PAIRS, PAIRED_PROCESSES)
    assert Case(model="m", baseline_env={"X": "1"}, paired_processes=5).paired_processes == 5
    ctx = RunContext(dag_id="d", dag_run_id="r", trigger="scheduled", case=Case(model="m", baseline_env={"X": "1"}))
    assert ctx.wants_paired and ctx.pairs_with("1", None)


def test_perfwatch_run_with_a_baseline_env_gates_the_two_environments(home, cli, monkeypatch):
    """``perfwatch run m --baseline-env KEY=VALUE``, with no baseline in the store: the run is paired with its own
    version in the baseline environment (x2 faster there), the gate is a regression (exit 1) naming the variable,
    and the run is not accepted as a baseline."""
    fake_runner.write_model(home / "models" / "m" / "1" / "model.keras", 1.0)
    monkeypatch.setenv("PERFWATCH_RUNNER_COMMAND", fake_runner.command())
    monkeypatch.setenv("PERFWATCH_FAKE_NOISE_CV", "0.01")
    res = cli(
        "run", "m", "--version", "1", "--measured-steps", "20", "--paired-blocks", "60", "--paired-processes", "3",
        "--baseline-env", "PERFWATCH_FAKE_STEP_MS=0.5", "--baseline-env", "PERFWATCH_FAKE_CPU_RATIO=1.0",
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "regression" in res.stdout and "env PERFWATCH_FAKE_STEP_MS 0.5 -> unset" in res.output, res.output


def test_the_verdict_judges_the_metric_its_looks_judged(tmp_path):
    """A store's calibrated gate noise (here a tight 0.002, of block pairs inside one process) is not the scale of
    a pair of processes in two environments: the looks leave it out, and so does the verdict's noise rule
    (``judge_noise``), so a quiet cross-environment gate is judged on the wall time its looks stopped on, not
    read as noisy (hence busy) at the end."""
    pulled, copy = _pulled(tmp_path), _pulled(tmp_path, "baseline")
    case = _case(baseline_env={"PERFWATCH_FAKE_STEP_MS": "1.0"})
    runner = _runner(PERFWATCH_FAKE_STEP_MS="1.5", PERFWATCH_FAKE_NOISE_CV="0.02")
    tight = calibration.NoiseCalibration(sd_pair=0.002, n_gates=10)
    setup = GateSetup(noise=tight)
    path, _ = paired_run(pulled, copy, case, WARM, tmp_path / "wd", runner, setup=setup, gpu=False)
    paired = read_paired(path)
    assert paired.gate["stopping"][-1] == "wall"
    noise = judge_noise(case, None, paired, offset=setup.offset, calibrated=tight, gpu=False)
    assert not noise.busy and noise.metric == "wall", noise.reason
    d = decide([1.5] * 10, case, CompareInputs(), env_data={}, paired=paired, noise=noise.model_dump(mode="json"))
    assert d.verdict == "regression", d.reason


def test_where_a_gpu_may_carry_the_steps_the_two_sides_run_one_after_the_other(tmp_path):
    """``gpu`` None (unsure) or True: the two processes of a pair would hold one GPU together (TensorFlow maps
    nearly all of its memory into the first), so they run one after the other, in a drawn order, not interleaved."""
    pulled, copy = _pulled(tmp_path), _pulled(tmp_path, "baseline")
    case = _case(baseline_env={"PERFWATCH_FAKE_STEP_MS": "1.0"})
    runner = _runner(PERFWATCH_FAKE_STEP_MS="1.5", PERFWATCH_FAKE_NOISE_CV="0.01")
    path, _ = paired_run(pulled, copy, case, WARM, tmp_path / "wd", runner, gpu=None)
    g = read_result(path, EnvironmentGate)
    assert not g.gate["interleaved"] and g.gate["block_orders"] == [] and len(g.gate["orders"]) >= 3
    assert {p.pair for p in g.processes} == set(range(len(g.gate["orders"])))


def test_an_environment_that_only_grows_the_process_memory_is_a_regression_on_it(home, cli, monkeypatch):
    """Issue 38 item 1 across environments: "will this TensorFlow (or CUDA, or allocator) grow my model's memory?".
    This run's environment steps as fast as the baseline environment, and each process's peak resident memory is
    1.3x (``PERFWATCH_FAKE_RSS_FACTOR``). With ``--memory-tolerance 0.2`` the cross-environment gate goes on past
    step time's decision until memory decides (process pairs as units, the paired t interval), and the run is a
    ``regression`` headed by the process's memory, exit 1."""
    fake_runner.write_model(home / "models" / "m" / "1" / "model.keras", 1.0)
    monkeypatch.setenv("PERFWATCH_RUNNER_COMMAND", fake_runner.command())
    monkeypatch.setenv("PERFWATCH_FAKE_NOISE_CV", "0.01")
    monkeypatch.setenv("PERFWATCH_FAKE_RSS_FACTOR", "1.3")
    res = cli(
        "run", "m", "--version", "1", "--measured-steps", "20", "--paired-blocks", "120", "--paired-processes", "6",
        "--baseline-env", "PERFWATCH_FAKE_RSS_FACTOR=1.0", "--memory-tolerance", "0.2",
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    out = res.stdout
    assert "verdict regression on the process's peak resident memory (the runtime, the model and its steps): " in out
    figure = re.search(
        r"peak_rss_bytes ratio ([\d.]+) \[([\d.]+), ([\d.]+)\] at 99% \(\d process pairs at the gate's look \d+", out
    )
    assert figure and float(figure[2]) < 1.3 < float(figure[3]) and 1.0 < float(figure[2]), out
    assert "  step time: step-time ratio 1.0" in out and "(pass)" in out, out
    assert "env PERFWATCH_FAKE_RSS_FACTOR 1.0 -> 1.3" in res.output
    assert "\nprocess memory: peak_rss_bytes ratio " in out  # the figure's own line, as a same-environment gate's
