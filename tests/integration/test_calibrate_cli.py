"""``perfwatch calibrate``: A/A gates run on purpose, archived but never a baseline, and what they calibrate."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from tasks.cli.main import app


def test_calibrate_rejects_bad_options(home, monkeypatch):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{home / 'pw.db'}")
    r = CliRunner().invoke(app, ["calibrate", "tiny", "--pairs", "1"])
    assert r.exit_code == 2 and "--pairs" in r.output
    r = CliRunner().invoke(app, ["calibrate", "tiny", "--gates", "0"])
    assert r.exit_code == 2 and "--gates" in r.output


@pytest.mark.slow
def test_calibrate_runs_aa_gates_through_the_stages(model_store, home, monkeypatch):
    from tasks.store import Baseline, Run, RunComparison, session_scope

    url = f"sqlite:///{home / 'pw.db'}"
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", url)
    r = CliRunner().invoke(
        app,
        [
            "calibrate",
            "tiny",
            "--version",
            "1",
            "--gates",
            "1",
            "--pairs",
            "32",
            "--measured-steps",
            "5",
            "--batch-size",
            "4",
            "--format",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout[r.stdout.index("[") : r.stdout.rindex("]") + 1])
    # a budget of 32 pairs is whole processes of 32 // 6 = 5 pairs (issue 36: the process is the unit), at least 3
    assert len(rows) == 1 and rows[0]["pairs"] in (15, 20, 25, 30) and rows[0]["gate_sd"] > 0
    assert rows[0]["host_busy"] in (True, False) and 0 <= rows[0]["other_cpu_share"] <= 1
    assert "process offset sd" in r.stdout and "gate noise" in r.stdout
    with session_scope(url) as s:
        run = s.scalars(select(Run)).one()
        comp = s.scalars(select(RunComparison)).one()
        assert (run.trigger, run.status, comp.method) == ("calibrate", "success", "paired-abba")
        assert comp.evidence["paired"]["baseline_version"] == "1"  # A is the same version: an A/A gate
        assert comp.evidence["paired"]["baseline_digest"] is not None
        assert s.scalars(select(Baseline)).all() == []  # never a baseline
