"""A slower version never passes the gate because the first run was not accepted (issue 35, item 2).

A new model's first run, measured on a busy host, is rightly not made the baseline. Then ``perfwatch run M
--version 2 --paired`` found nothing to pair with and said ``no-baseline``, exit 0, ``perfwatch gate M 2`` said
``PASS``, and the advice was to accept the slow candidate as the baseline. Here, end to end with the fake runner
(``tests.helpers.fake_runner``: the runner protocol without TensorFlow; version 2 is 4.4x slower): through the
CLI and through the DAG's release trigger (``publish.release_cases`` -> the DAG's tasks, in this process), a
paired gate with no accepted baseline pairs with the newest earlier version measured, and a version that was not
compared is never ``PASS``.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tasks.cli.main import app
from tasks.settings import Settings
from tests.helpers import fake_runner

pytestmark = pytest.mark.slow  # each test starts fake runner processes (seconds each)

#: a small case: the fake's steps are figures, a round of the paired gate is instant
SMALL = ["--batch-size", "4", "--measured-steps", "20", "--profiled-steps", "3", "--warmup-max-steps", "20"]
BUSY = "0.6"  #: other processes' share of the CPU the fake reports: a busy host (bound 25%)


@pytest.fixture
def store(home, monkeypatch):
    """Model m: version 1, and version 2 4.4x slower; the fake runner configured; a quiet host."""
    for version, factor in ((1, 1.0), (2, 4.4)):
        fake_runner.write_model(home / "models" / "m" / str(version) / "model.keras", factor)
    monkeypatch.setenv("PERFWATCH_RUNNER_COMMAND", fake_runner.command())
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{home / 'pw.db'}")
    monkeypatch.delenv("PERFWATCH_FAKE_OTHER_CPU_SHARE", raising=False)
    return home / "models"


def _cli(*args: str):
    res = CliRunner().invoke(app, list(args))
    return res, res.stdout + res.stderr


def _busy_first_run(monkeypatch) -> None:
    monkeypatch.setenv("PERFWATCH_FAKE_OTHER_CPU_SHARE", BUSY)
    res, out = _cli("run", "m", "--version", "1", *SMALL)
    monkeypatch.delenv("PERFWATCH_FAKE_OTHER_CPU_SHARE")
    assert res.exit_code == 0 and "verdict no-baseline" in out and "not made the case's baseline" in out, out


def test_a_paired_run_pairs_with_the_first_version_nobody_accepted(store, monkeypatch):
    _busy_first_run(monkeypatch)
    res, out = _cli("run", "m", "--version", "2", "--paired", *SMALL)
    assert res.exit_code == 1, out
    assert "verdict regression: step-time ratio 4." in out and "paired ABBA" in out and "baseline (v1)" in out
    assert "vs version 1 (no baseline accepted)" in out
    res, out = _cli("gate", "m", "2")
    assert res.exit_code == 1 and "gate m v2: REGRESSION (exit 1)" in out, out


def test_a_version_not_compared_is_never_a_pass_and_the_candidate_is_never_advised_as_its_baseline(store, monkeypatch):
    """An unpaired run of version 2 (a quiet host: it would have become the baseline) compares with nothing: it is
    not made the baseline, its run and the gate exit 2 and say which version was measured and how to compare."""
    _busy_first_run(monkeypatch)
    res, out = _cli("run", "m", "--version", "2", *SMALL)
    assert res.exit_code == 2, out
    assert "not compared: no baseline is accepted, and version 1 of this case was measured (run 1)" in out
    assert "perfwatch run m --version 2 --paired" in out and "baseline accept 2" not in out
    res, out = _cli("gate", "m", "2")
    assert res.exit_code == 2, out
    assert "gate m v2: NOT COMPARED (" in out and "PASS" not in out
    assert "version 1 of this case was measured (run 1)" in out and "perfwatch run m --version 2 --paired" in out
    assert "baseline accept" not in out  # neither the candidate (run 2) nor any run as the gate's own baseline
    from tasks.store.reads import acceptances

    assert acceptances([1, 2], str(Settings.from_env().database_url)) == {}  # neither became the baseline
    # the paired gate then compares the two
    res, out = _cli("run", "m", "--version", "2", "--paired", *SMALL)
    assert res.exit_code == 1 and "verdict regression" in out, out
    assert _cli("gate", "m", "2")[0].exit_code == 1


def test_a_first_version_is_no_baseline_never_pass_and_paired_says_it_had_nothing_to_pair_with(store):
    res, out = _cli("run", "m", "--version", "1", "--paired", *SMALL)
    assert res.exit_code == 2, out
    assert "no paired gate: nothing to pair with (no baseline is accepted and no version of m before 1" in out
    res, out = _cli("gate", "m", "1")
    assert res.exit_code == 0 and "gate m v1: NO BASELINE (a first version: nothing to compare with) (exit 0)" in out
    assert "PASS" not in out
    res, out = _cli("gate", "m", "1", "--strict")
    assert res.exit_code == 2 and "PASS" not in out, out


def test_the_dags_release_trigger_gates_against_the_first_version_nobody_accepted(store, home, monkeypatch):
    """What the DAG's tasks do for a release Asset event (plan -> pull -> measure -> parse -> compare -> archive,
    then the archive task's outcome), in this process: the busy first release is not the baseline, and it goes red
    after archiving as not compared (issue 35 item 2: a release gate that compared nothing must not look passed);
    the release of version 2 is paired with version 1 and goes red as a regression."""
    from tasks.records import Verdict
    from tasks.services.publish import model_asset, release_cases
    from tasks.stages.pipeline import (
        NotCompared,
        RegressionDetected,
        as_state,
        measure_case,
        raise_on_outcome,
        run_stage,
    )

    uri = model_asset("m")[0]

    def release(version: str):
        (state,) = release_cases("perfwatch_profile", f"asset__v{version}", [(uri, {"model": "m", "version": version})])
        state = run_stage(state, "pull-model-version", Settings.from_env())
        state = measure_case(state, retry_left=False)
        for stage in ("parse", "baseline-compare", "archive"):
            state = run_stage(state, stage)
        return as_state(state)

    monkeypatch.setenv("PERFWATCH_FAKE_OTHER_CPU_SHARE", BUSY)
    first = release("1")
    monkeypatch.delenv("PERFWATCH_FAKE_OTHER_CPU_SHARE")
    assert first.verdict is not None and first.verdict.verdict == Verdict.NO_BASELINE
    assert first.verdict.baseline_refused and "nothing to pair with" in (first.verdict.reason or "")
    assert first.archived is not None and first.verdict.evidence["uncompared"]["version"] is None
    with pytest.raises(NotCompared) as caught:  # after archiving, as for a regression
        raise_on_outcome(first)
    assert str(caught.value) == (
        f"m v1 ({first.ctx.case.name}): release gate not compared, no paired gate: nothing to pair with (no baseline "
        "is accepted and no version of m before 1 was measured in this case: a first version); archived as run "
        f"{first.archived.run_id}"
    )
    second = release("2")
    v = second.verdict
    assert v is not None and (v.verdict, v.method) == (Verdict.REGRESSION, "paired-abba")
    assert v.evidence["paired"]["baseline_version"] == "1" and v.ratio == pytest.approx(4.4, rel=0.05)
    with pytest.raises(RegressionDetected, match=r"vs version 1 \(no baseline accepted\)"):
        raise_on_outcome(second)
    res, out = _cli("gate", "m", "2")
    assert res.exit_code == 1 and "gate m v2: REGRESSION (exit 1)" in out, out


def test_a_nightly_first_run_compared_with_nothing_stays_green(store):
    """The nightly (scheduled) first run of a model has nothing to compare with either, but it is no gate: its DAG
    run stays green (only a release gate that compared nothing goes red)."""
    from tasks.records import Case, RunContext, Verdict
    from tasks.stages.pipeline import raise_on_outcome, run_case

    ctx = RunContext(
        dag_id="perfwatch_profile",
        dag_run_id="scheduled__1",
        trigger="scheduled",
        case=Case(model="m", version="1", batch_size=4, measured_steps=20, profiled_steps=3, warmup_max_steps=20),
    )
    state = run_case(ctx)
    assert state.verdict is not None and state.verdict.verdict == Verdict.NO_BASELINE
    assert state.archived is not None
    raise_on_outcome(state)  # green


def test_a_paired_gate_pairs_with_a_published_version_never_measured(store):
    """A new team's release: version 1 published and never run, version 2 4.4x slower. `run --paired` said "nothing
    to pair with ... a first version" (exit 2) and `gate` "NO BASELINE (a first version)", exit 0, though version 1
    was in the model store: a paired gate measures both versions itself, so it pairs with the newest earlier
    version in the store when no version was measured."""
    res, out = _cli("run", "m", "--version", "2", "--paired", *SMALL)
    assert res.exit_code == 1, out
    assert "verdict regression: step-time ratio 4." in out and "vs version 1 (no baseline accepted)" in out
    res, out = _cli("gate", "m", "2")
    assert res.exit_code == 1 and "gate m v2: REGRESSION (exit 1)" in out, out
