"""``perfwatch run`` exits as ``perfwatch gate`` does (issue 25): 0 pass/improvement/no-baseline, 1 regression,
2 undecided (inconclusive, env-changed), with the reason, so that a CI script never reads a verdict that
decided nothing as a pass."""

from __future__ import annotations

import pytest

from tasks.cli.history import GATE_CODES
from tasks.records import ArchiveRecord, RunState, Verdict
from tasks.stages import pipeline
from tests.helpers.builders import make_records


@pytest.mark.parametrize(
    ("verdict", "code"),
    [("pass", 0), ("improvement", 0), ("no-baseline", 0), ("regression", 1), ("inconclusive", 2), ("env-changed", 2)],
)
def test_run_exits_with_the_gates_code_for_its_verdict(verdict, code, home, cli, monkeypatch, tmp_path):
    (home / "models" / "m" / "1").mkdir(parents=True)
    (home / "models" / "m" / "1" / "model.keras").write_bytes(b"not read: run_case is replaced")
    ctx, pulled, env, warm, run, parsed, comp = make_records(tmp_path)
    reason = "host busy: other processes took 70% of the host's CPU time" if verdict == "inconclusive" else None
    comp = comp.model_copy(
        update={
            "verdict": Verdict(verdict),
            "ratio": 1.3,
            "ci_low": 1.2,
            "ci_high": 1.4,
            "method": "paired-abba",
            "reason": reason,
        }
    )
    state = RunState(
        ctx=ctx,
        pulled=pulled,
        env=env,
        warmup=warm,
        run=run,
        parsed=parsed,
        verdict=comp,
        archived=ArchiveRecord(run_id=7, archive_uri=str(tmp_path / "archive"), verdict=verdict),
    )
    monkeypatch.setattr(pipeline, "run_case", lambda ctx, settings=None: state)
    res = cli("run", "m", "--version", "1")
    assert res.exit_code == code == GATE_CODES[verdict], res.output
    assert f"verdict {verdict}: step-time ratio 1.300 [1.200, 1.400]\n  how: paired ABBA gate" in res.stdout
    # the answer and why the exit status, on stdout with the figures (issue 35: a CI log of stdout keeps it)
    if verdict == "inconclusive":
        assert "exit 2: verdict inconclusive is undecided (host busy: other processes took 70%" in res.stdout
    if verdict == "regression":
        assert "m v1 (train-bs16) regressed (paired-abba): step-time ratio 1.300" in res.stdout, res.output
    assert res.stderr == "" or "regress" not in res.stderr and "undecided" not in res.stderr


def test_run_exits_2_when_a_stage_fails(home, cli, monkeypatch):
    """A failed stage is undecided for CI, as gate's failed run: exit 2 with the error, never 0 or 1."""
    (home / "models" / "m" / "1").mkdir(parents=True)
    (home / "models" / "m" / "1" / "model.keras").write_bytes(b"not read: run_case is replaced")

    def fail(ctx, settings=None):
        raise RuntimeError("warm-up: the training step raised")

    monkeypatch.setattr(pipeline, "run_case", fail)
    res = cli("run", "m", "--version", "1")
    assert res.exit_code == 2, res.output
    assert "error: RuntimeError: warm-up: the training step raised" in res.output


@pytest.mark.parametrize("command", ["run", "gate"])
def test_run_and_gate_help_say_the_same_exit_codes(command):
    from typer.testing import CliRunner

    from tasks.cli.history import EXIT_CODES_HELP
    from tasks.cli.main import app

    out = " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output.split())
    assert EXIT_CODES_HELP in out
    for code, words in ((0, "0 pass, improvement"), (1, "1 regression"), (2, "2 undecided or failed")):
        assert words in out, code


def test_run_says_why_its_median_and_p50_differ(home, cli, monkeypatch, tmp_path):
    """An infer run prints the stored median (interpolated) in its headline and nearest-rank percentiles in its
    latency line; with an even count of batches the two differ, and the line says why."""
    from tasks.analysis.percentiles import with_intervals

    (home / "models" / "m" / "1").mkdir(parents=True)
    (home / "models" / "m" / "1" / "model.keras").write_bytes(b"not read: run_case is replaced")
    ctx, pulled, env, warm, run, parsed, comp = make_records(tmp_path)
    batches = [1.0 + 0.01 * i for i in range(100)]  # median 1.495 (interpolated), p50 1.49 (nearest rank)
    summary = {"p50": 1.49, "p90": 1.89, "p99": 1.98, "max": 1.99, "throughput_eps": 10_000.0}
    run = run.model_copy(update={"median_step_ms": 1.495, "latency_ms": with_intervals(summary, batches)})
    state = RunState(
        ctx=ctx, pulled=pulled, env=env, warmup=warm, run=run, parsed=parsed, verdict=comp,
        archived=ArchiveRecord(run_id=7, archive_uri=str(tmp_path / "archive"), verdict="no-baseline"),
    )  # fmt: skip
    monkeypatch.setattr(pipeline, "run_case", lambda ctx, settings=None: state)
    res = cli("run", "m", "--version", "1", "--mode", "infer")
    assert res.exit_code == 0, res.output
    assert "run 7: median 1.50 ms" in res.output and "latency per batch of 16: p50 1.49 ms" in res.output
    assert "(percentiles by nearest rank: p50 is a measured batch and may differ from the median above" in (
        " ".join(res.output.split())
    )
