"""The paired gate across fresh processes (issue 36 item 1), run by the profiled-run stage with the fake runner
(``tests.helpers.fake_runner``: each process draws its own steps and, with ``PERFWATCH_FAKE_PROCESS_SD``, its own
offset between its two model copies)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from tasks.analysis import calibration
from tasks.analysis.metric_gates import DEFAULT_TOLERANCES
from tasks.analysis.verdict import decide, judge_noise
from tasks.records import Case, CompareInputs, PulledModel, WarmupRecord
from tasks.runner.driver import RunnerProcess
from tasks.runner.protocol import PairedGate, read_result
from tasks.stages.profiled_run import paired_run, read_paired, start_batches
from tests.helpers import fake_runner

pytestmark = pytest.mark.slow  # fresh interpreters
NO_CAL = calibration.NoiseCalibration(sd_pair=None, n_gates=0)


def _pulled(path: Path, version: str) -> PulledModel:
    return PulledModel(
        model="m",
        version=version,
        source_uri=str(path),
        local_path=str(path),
        format="keras",
        digest=version * 8,
        size_bytes=1,
    )


def _setup(tmp_path: Path, factor: float) -> tuple[PulledModel, PulledModel, WarmupRecord]:
    a = fake_runner.write_model(tmp_path / "store" / "1" / "model.keras", 1.0)
    b = fake_runner.write_model(tmp_path / "store" / "2" / "model.keras", factor)
    warm = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=5.0, step_times_ms=[1.0] * 3, wall_s=1)
    return _pulled(b.parent, "2"), _pulled(a.parent, "1"), warm


def _runner(**env: str) -> RunnerProcess:
    return RunnerProcess(shlex.split(fake_runner.command()), env={**os.environ, **env})


def test_a_gate_runs_fresh_processes_and_decides_across_them(tmp_path):
    """An A/A gate whose processes each carry their own offset between the copies (sd 0.02): every process is
    its own runner process (its own result, spec and steps), the file keeps them in order, and the verdict's
    interval is across them, with K and the spreads."""
    b, a, warm = _setup(tmp_path, 1.0)
    case = Case(model="m", measured_steps=10, paired_blocks=120, paired_block_steps=1, paired_processes=6)
    path, wall = paired_run(b, a, case, warm, tmp_path / "wd", _runner(PERFWATCH_FAKE_PROCESS_SD="0.02"), gpu=False)
    gate = read_result(path, PairedGate)
    k = len(gate.processes)
    assert 3 <= k <= 6 and gate.gate["look_processes"] == list(range(3, k + 1))
    assert [len(p.blocks) for p in gate.processes] == [20] * k and wall > 0
    for i in range(k):  # each process wrote its own spec and result in paired/p<i>
        spec = json.loads(next((tmp_path / "wd" / "paired" / f"p{i}").glob("*spec*.json")).read_text())
        assert spec["process"] == i and spec["processes"] == 6 and spec["blocks"] == 20
    firsts = {p.blocks[0].a_ms[0] for p in gate.processes}
    assert len(firsts) == k  # each process drew its own steps
    paired = read_paired(path)
    assert paired.process == [i for i in range(k) for _ in range(20)] and paired.layout["processes"] == k
    d = decide([1.0] * 10, case, CompareInputs(), env_data={}, paired=paired)
    spread = d.evidence["processes"]
    assert spread["processes"] == k and spread["between_sd"] > 0.005  # the fake's offsets are seen between
    assert d.verdict in ("pass", "inconclusive") and d.ci_low <= 1.0 <= d.ci_high, d.reason


def test_a_slower_candidate_stops_at_the_first_look_across_processes(tmp_path):
    b, a, warm = _setup(tmp_path, 1.5)
    case = Case(model="m", measured_steps=10, paired_blocks=120, paired_block_steps=1, paired_processes=6)
    path, _ = paired_run(b, a, case, warm, tmp_path / "wd", _runner(PERFWATCH_FAKE_NOISE_CV="0.01"), gpu=False)
    paired = read_paired(path)
    assert paired.layout["processes"] == 3 and paired.gate["stopping"] == ["wall"]
    d = decide([1.5] * 10, case, CompareInputs(), env_data={}, paired=paired)
    assert d.verdict == "regression" and d.ratio == pytest.approx(1.5, rel=0.02)
    assert d.evidence["paired"]["spent"] == {
        "pairs": 60,
        "max_pairs": 120,
        "timed_steps": 120,
        "wall_s": pytest.approx(paired.layout["pairs_wall_s"]),
        "processes": 3,
    }


def _spans(path: Path) -> list[tuple[float, float, str]]:
    """The fake runner's ``PERFWATCH_FAKE_BLOCK_LOG``: (start, end, process) of each process's timed pairs, by start."""
    return sorted((float(a), float(b), name) for name, a, b in (r.split() for r in path.read_text().splitlines()))


def test_processes_start_two_at_a_time_and_measure_one_at_a_time(tmp_path):
    """A x1.5 candidate decides at the first look (3 processes): processes start in twos (``start_batches``: p1 is
    started before p0 measures), their pairs never overlap (each fake step sleeps its time and logs its pairs'
    span, ``PERFWATCH_FAKE_BLOCK_LOG``), and p3, started beside p2, is told to stop: it measured nothing and left
    no directory; the gate's wall time is its own elapsed time (the fake's processes report none of their
    start-up)."""
    spans = tmp_path / "pairs.log"
    b, a, warm = _setup(tmp_path, 1.5)
    case = Case(model="m", measured_steps=10, paired_blocks=120, paired_block_steps=1, paired_processes=6)
    env = {"PERFWATCH_FAKE_NOISE_CV": "0.01", "PERFWATCH_FAKE_STEP_MS": "5", "PERFWATCH_FAKE_TAKE_TIME": "1"}
    runner = _runner(**env, PERFWATCH_FAKE_BLOCK_LOG=str(spans))
    path, wall = paired_run(b, a, case, warm, tmp_path / "wd", runner, gpu=False)
    gate = read_result(path, PairedGate)
    assert len(gate.processes) == 3 and gate.gate["stopping"] == ["wall"]
    assert gate.gate["start_batches"] == [2, 2, 2]
    rows = _spans(spans)
    assert [name for _, _, name in rows] == ["p0", "p1", "p2"]  # p3 timed no pair
    assert all(rows[i][1] <= rows[i + 1][0] for i in range(2)), rows  # one process measures at a time
    paired_dir = tmp_path / "wd" / "paired"
    assert sorted(d.name for d in paired_dir.iterdir() if d.is_dir()) == ["p0", "p1", "p2"]
    assert (paired_dir / "p1" / "paired_spec.json").stat().st_mtime < rows[0][0]  # p1 started before p0 measured
    assert wall == gate.wall_s > gate.pairs_wall_s > 0


def test_where_a_gpu_may_carry_the_steps_processes_start_one_at_a_time(tmp_path):
    """``gpu`` True or None (unsure): TensorFlow maps nearly all of a GPU's memory into the first process, so no
    process starts before the one before it has exited (its spec is written after that one's last pair)."""
    spans = tmp_path / "pairs.log"
    b, a, warm = _setup(tmp_path, 1.5)
    case = Case(model="m", measured_steps=10, paired_blocks=120, paired_block_steps=1, paired_processes=6)
    env = {"PERFWATCH_FAKE_NOISE_CV": "0.01", "PERFWATCH_FAKE_STEP_MS": "5", "PERFWATCH_FAKE_TAKE_TIME": "1"}
    path, _ = paired_run(b, a, case, warm, tmp_path / "wd", _runner(**env, PERFWATCH_FAKE_BLOCK_LOG=str(spans)))
    gate = read_result(path, PairedGate)
    assert gate.gate["start_batches"] == [1] * 6
    rows = _spans(spans)
    for (_, end, _), (_, _, name) in zip(rows, rows[1:], strict=False):
        assert end <= (tmp_path / "wd" / "paired" / name / "paired_spec.json").stat().st_mtime, rows


def test_start_batches():
    assert start_batches(6, False) == [[0, 1], [2, 3], [4, 5]]
    assert start_batches(1, False) == [[0]] and start_batches(5, False)[-1] == [4]
    assert start_batches(3, True) == start_batches(3, None) == [[0], [1], [2]]
    with pytest.raises(ValueError, match="max_processes = 0"):
        start_batches(0, False)


def test_a_busy_host_gate_across_processes_stops_on_cpu_time(tmp_path):
    """Every process reports a busy host; wall time is noisy, CPU time steady and unchanged: the looks are judged
    on CPU time and the gate passes on it."""
    b, a, warm = _setup(tmp_path, 1.0)
    case = Case(model="m", measured_steps=10, paired_blocks=240, paired_block_steps=1, paired_processes=6)
    env = {
        "PERFWATCH_FAKE_OTHER_CPU_SHARE": "0.6",
        "PERFWATCH_FAKE_WALL_NOISE_CV": "0.3",
        "PERFWATCH_FAKE_NOISE_CV": "0.005",
    }
    path, _ = paired_run(b, a, case, warm, tmp_path / "wd", _runner(**env), gpu=False)
    paired = read_paired(path)
    assert set(paired.gate["stopping"]) == {"cpu"} and paired.host_load["other_cpu_share"] == pytest.approx(0.6)
    noise = judge_noise(
        case, None, paired, offset=calibration.Offset(sd=0.0, source="default"), calibrated=NO_CAL, gpu=False
    )
    d = decide([1.0] * 10, case, CompareInputs(), env_data={}, paired=paired, noise=noise.model_dump(mode="json"))
    assert d.verdict == "pass" and d.evidence["metric"] == "cpu", d.reason
    # the spread reported is the deciding metric's (CPU time, steady here), wall time's beside it
    assert d.evidence["processes"]["metric"] == "cpu" and d.evidence["processes_wall"]["metric"] == "wall"
    assert d.evidence["processes"]["within_sd"] < d.evidence["processes_wall"]["within_sd"]


@pytest.mark.parametrize(
    ("key", "grown", "field", "words"),
    [
        ("cold_step", {"cold_factor": 1.6}, "cold_step_tolerance", "the cold step (tracing, compilation, one step)"),
        ("model_memory", {"memory_factor": 1.3}, "memory_tolerance", "the model's resident memory"),
    ],
)
def test_a_version_that_only_grows_a_per_process_figure_is_a_regression_on_it(
    db_url, tmp_path, key, grown, field, words
):
    """Issue 38 item 1: the candidate steps as fast as the baseline and its cold step (tracing, compilation) takes
    1.6x as long, or its resident memory is 1.3x; the version set up first in each process pays 1.3x more (the fake
    draws the order per process). With the case's tolerance the gate is a regression named as that figure's (the
    gate goes on until the figure decides); without one the figure is recorded beside a pass."""
    from tasks.stages.compare import baseline_compare
    from tests.helpers.builders import make_records

    factor = next(iter(grown.values()))
    a = fake_runner.write_model(tmp_path / "store" / "1" / "model.keras", 1.0)
    b = fake_runner.write_model(tmp_path / "store" / "2" / "model.keras", 1.0, **grown)
    warm = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=5.0, step_times_ms=[1.0] * 3, wall_s=1)
    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand", median=1.0)
    for tolerance in (0.1, None):
        gate = {"paired_blocks": 160, "paired_block_steps": 1, "paired_processes": 8, field: tolerance}
        case = ctx.case.model_copy(update={"measured_steps": 10, **gate})
        wd = tmp_path / f"wd-{tolerance}"
        runner = _runner(PERFWATCH_FAKE_NOISE_CV="0.01")
        path, _ = paired_run(_pulled(b.parent, "2"), _pulled(a.parent, "1"), case, warm, wd, runner, gpu=False)
        cand = run.model_copy(update={"paired_path": str(path), "baseline_model": _pulled(a.parent, "1")})
        v = baseline_compare(db_url, case, env, cand, parsed, wd / "work")
        figure = v.evidence[key]
        assert figure["processes"] >= 3 and figure["ci_low"] < factor < figure["ci_high"], figure
        if tolerance is not None:  # the gate goes on past step time's decision until the figure decides
            assert figure["verdict"] == "regression", figure
            looks = read_paired(path).gate["look_processes"]
            assert figure["processes"] == looks[-1] and figure["reason"].startswith(f"{figure['metric']} ratio")
            assert f"{looks[-1]} processes at the gate's look {len(looks)}" in figure["reason"]
            # GX carries the figure's threshold: its own expectation fails, and Data Docs show it
            assert v.evidence["gx"]["gated_figures"] == {"success": False, "failures": 1}
            assert list((wd / "work" / "gx").rglob("perfwatch_gated_figures*.html"))
            assert v.verdict == "regression" and v.ratio == pytest.approx(1.0, abs=0.05)
            assert v.reason.startswith(f"regression on {words}") and "; step time: " in v.reason
        else:  # judged at its default; the gate went on only for the figure that grew (it looked past it)
            default = DEFAULT_TOLERANCES[field]
            assert figure["tolerance"] == default and figure["gated"] is False, figure
            assert f"default tolerance {default:.0%}: " in figure["reason"]
            waited = [keys for keys in read_paired(path).gate["waited_for"].values() for keys in keys]
            assert set(waited) <= {key}, waited
            # GX carries its threshold at the default, failing exactly when the figure is a regression there
            failed = figure["verdict"] == "regression"
            assert v.evidence["gx"]["gated_figures"] == {"success": not failed, "failures": int(failed)}
            if failed:  # decided where step time stopped: a regression named by the figure, as with a tolerance
                assert v.verdict == "regression" and v.reason.startswith(f"regression on {words}"), v.reason
            else:  # undecided there: in the evidence, not the reason
                assert figure["verdict"] == "inconclusive" and v.verdict == "pass", figure
                assert words not in (v.reason or ""), v.reason


def test_a_version_that_doubles_its_memory_is_a_regression_with_no_tolerance_set(db_url, tmp_path):
    """Issue 38: a case that sets no memory tolerance is still judged, at the default (25%). Both versions step
    alike, so step time decides first; memory, undecided there and looking past its default, keeps the gate going
    until it decides: a doubled resident memory is a regression named as memory's."""
    from tasks.stages.compare import baseline_compare
    from tests.helpers.builders import make_records

    a = fake_runner.write_model(tmp_path / "store" / "1" / "model.keras", 1.0)
    b = fake_runner.write_model(tmp_path / "store" / "2" / "model.keras", 1.0, memory_factor=2.0)
    warm = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=5.0, step_times_ms=[1.0] * 3, wall_s=1)
    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand", median=1.0)
    gate = {"paired_blocks": 120, "paired_block_steps": 1, "paired_processes": 6}
    case = ctx.case.model_copy(update={"measured_steps": 10, **gate})
    assert case.memory_tolerance is None and case.cold_step_tolerance is None
    runner = _runner(PERFWATCH_FAKE_NOISE_CV="0.01")
    path, _ = paired_run(_pulled(b.parent, "2"), _pulled(a.parent, "1"), case, warm, tmp_path / "wd", runner, gpu=False)
    g = read_paired(path).gate
    # step time decided before memory did, and the gate went on for memory, which looked past its default
    assert any(keys == ["model_memory"] for keys in g["waited_for"].values()), g
    assert g["look_processes"][-1] <= 6 and g["stopping"][-1] == "wall", g
    cand = run.model_copy(update={"paired_path": str(path), "baseline_model": _pulled(a.parent, "1")})
    v = baseline_compare(db_url, case, env, cand, parsed, tmp_path / "wd" / "work")
    memory = v.evidence["model_memory"]
    assert memory["verdict"] == "regression" and memory["gated"] is False, memory["reason"]
    assert memory["processes"] == g["look_processes"][-1]
    assert "default tolerance 25%: regression" in memory["reason"]
    assert v.verdict == "regression" and v.reason.startswith("regression on the model's resident memory"), v.reason
    assert "; step time: " in v.reason and v.evidence["step_verdict"] == "pass"


def test_a_step_time_regression_leads_and_a_memory_one_is_said_beside_it(db_url, tmp_path):
    from tasks.stages.compare import baseline_compare
    from tests.helpers.builders import make_records

    a = fake_runner.write_model(tmp_path / "store" / "1" / "model.keras", 1.0)
    b = fake_runner.write_model(tmp_path / "store" / "2" / "model.keras", 1.5, memory_factor=1.3)
    warm = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=5.0, step_times_ms=[1.0] * 3, wall_s=1)
    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand", median=1.5)
    gate = {"paired_blocks": 160, "paired_block_steps": 1, "paired_processes": 8, "memory_tolerance": 0.1}
    case = ctx.case.model_copy(update={"measured_steps": 10, **gate})
    runner = _runner(PERFWATCH_FAKE_NOISE_CV="0.01")
    path, _ = paired_run(_pulled(b.parent, "2"), _pulled(a.parent, "1"), case, warm, tmp_path / "wd", runner, gpu=False)
    cand = run.model_copy(update={"paired_path": str(path), "baseline_model": _pulled(a.parent, "1")})
    v = baseline_compare(db_url, case, env, cand, parsed, tmp_path / "wd" / "work")
    assert v.verdict == "regression" and v.ratio == pytest.approx(1.5, rel=0.05)
    assert v.reason.startswith("paired-abba") and "; also a regression on the model's resident memory" in v.reason
    # the parent alternates the version each process sets up first, so the 3 processes of an early stop hold both
    firsts = [p.first_built for p in read_result(path, PairedGate).processes]
    assert len(firsts) >= 3 and all(x != y for x, y in zip(firsts, firsts[1:], strict=False)), firsts


def test_a_gated_figure_a_one_process_gate_cannot_judge_is_said_not_passed(db_url, tmp_path):
    """Issue 38 item 1: a metric that could not be measured says so and never passes silently. A one-process gate
    gives the cold step and memory one figure per version, no interval: a case that gates memory hears why."""
    from tasks.stages.compare import baseline_compare
    from tests.helpers.builders import make_records

    b, a, warm = _setup(tmp_path, 1.0)
    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand", median=1.0)
    gate = {"paired_blocks": 40, "paired_block_steps": 1, "paired_processes": 1, "memory_tolerance": 0.2}
    case = ctx.case.model_copy(update={"measured_steps": 10, **gate})
    path, _ = paired_run(b, a, case, warm, tmp_path / "wd", _runner(PERFWATCH_FAKE_NOISE_CV="0.01"), gpu=False)
    cand = run.model_copy(update={"paired_path": str(path), "baseline_model": a})
    v = baseline_compare(db_url, case, env, cand, parsed, tmp_path / "wd" / "work")
    said = "the model's resident memory (load, build, cold step) not judged (memory_tolerance is set)"
    assert said in v.reason and "this paired gate ran one process" in v.reason, v.reason
    # a figure at its default that one process cannot measure is not said: only a tolerance the case set is
    assert v.evidence["model_memory"]["measured"] is False and "cold_step" not in v.evidence
