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
