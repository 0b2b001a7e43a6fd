"""The seven stages end to end with the fake runner (``tests.helpers.fake_runner``): no TensorFlow, seconds.

The fake speaks the runner protocol through the runner command setting (``PERFWATCH_RUNNER_COMMAND``), so the
pipeline, the driver and every reader of the runner's results run as in production; only the measurement is
made up (a base step time x each version's factor) and the profile is a committed real XSpace.
"""

from __future__ import annotations

import sys

import pytest

from tasks.records import Case, RunContext
from tests.helpers import fake_runner

SMALL = {
    "batch_size": 4,
    "measured_steps": 20,
    "profiled_steps": 3,
    "warmup_max_steps": 20,
    "paired_blocks": 64,
    "paired_block_steps": 1,
}


@pytest.fixture
def fake_store(home, monkeypatch):
    """A model store of fake models (tiny/1 at the base speed, tiny/2 1.5x slower) and the fake runner configured."""
    for version, factor in ((1, 1.0), (2, 1.5)):
        fake_runner.write_model(home / "models" / "tiny" / str(version) / "model.keras", factor)
    monkeypatch.setenv("PERFWATCH_RUNNER_COMMAND", fake_runner.command())
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{home / 'pw.db'}")
    return home / "models"


def test_seven_stages_with_the_fake_runner_a_release_gate_sees_the_regression(fake_store, home):
    from tasks.stages.pipeline import run_case

    tf_before = "tensorflow" in sys.modules
    first = run_case(
        RunContext(dag_id="d", dag_run_id="v1", trigger="release", case=Case(model="tiny", version="1", **SMALL))
    )
    assert first.verdict is not None and first.run is not None and first.parsed is not None
    assert first.verdict.verdict == "no-baseline" and first.run.paired_path is None
    assert first.parsed.avg_step_time_ms is not None and first.parsed.avg_step_time_ms > 0  # the real profile
    assert first.archived is not None and first.archived.run_id >= 1
    second = run_case(
        RunContext(dag_id="d", dag_run_id="v2", trigger="release", case=Case(model="tiny", version="2", **SMALL))
    )
    v = second.verdict
    assert v is not None
    assert (v.verdict, v.method) == ("regression", "paired-abba")
    assert v.ratio == pytest.approx(1.5, rel=0.05)
    assert v.evidence["paired"]["baseline_version"] == "1"
    assert not tf_before and "tensorflow" not in sys.modules and "keras" not in sys.modules


@pytest.mark.slow
def test_infer_and_tflite_latency_percentiles_reach_perfwatch_runs_end_to_end(fake_store, home):
    """The fake runner's infer and tflite modes report their batches' latency as the real runner does
    (``latency_ms``, ``tasks.runner.measure.latency_summary``), so ``perfwatch runs`` shows each run's p50/p90/p99
    with intervals and n, in the table (the p99 column, the line under it) and in json (``latency_*``), through
    the real stages; a train run has none."""
    import json

    from typer.testing import CliRunner

    from tasks.cli.main import app
    from tasks.stages.pipeline import run_case

    ids = {}
    for mode, steps in (("infer", 320), ("tflite", 40), ("train", 20)):
        case = Case(model="tiny", version="1", mode=mode, **{**SMALL, "measured_steps": steps})
        state = run_case(RunContext(dag_id="d", dag_run_id=f"lat-{mode}", trigger="manual", case=case))
        assert state.run is not None and state.archived is not None
        ids[mode] = state.archived.run_id
        if mode != "train":
            lat = state.run.latency_ms
            assert lat is not None and lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"] and lat["n"] == steps
    assert state.run.latency_ms is None  # train
    rows = {r["run_id"]: r for r in json.loads(CliRunner().invoke(app, ["runs", "--format", "json"]).stdout)}
    infer, tflite, train = rows[ids["infer"]], rows[ids["tflite"]], rows[ids["train"]]
    assert infer["latency_n"] == 320 and infer["latency_p99_estimable"] is True
    assert infer["latency_p50_low_ms"] <= infer["latency_p50_ms"] <= infer["latency_p50_high_ms"]
    assert infer["latency_p99_ms"] is not None and infer["latency_p99_high_ms"] is not None
    assert tflite["latency_n"] == 40 and tflite["latency_p99_ms"] is None  # 40 batches cannot bound a p99
    assert tflite["latency_p99_low_ms"] is not None and tflite["latency_p50_ms"] is not None
    assert train["latency_n"] is None and train["latency_p50_ms"] is None
    table = CliRunner().invoke(app, ["runs"], env={"COLUMNS": "400"}).stdout  # a wide terminal: a cell a line
    head = " ".join(ln for ln in table.split("┡")[0].splitlines() if ln.startswith("┃"))
    assert "p99" in head and "latency" in head, table
    assert "] n=320" in table and "(n=40, no" in table  # the p99 column: with its interval, or its bound only
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"  run {ids['infer']} latency per batch: p50 ")]
    assert "(95% intervals, n=320 batches)" in line and ", p99 " in line
    assert f"  run {ids['tflite']} latency per batch: p50 " in table
    assert f"  run {ids['train']} latency" not in table
