"""Baselines only from sound measurements (issue 26): a run whose verdict would make it the case's baseline is
not accepted by itself when its host was busy, its warm-up never got steady or its timed steps compiled; the
verdict's reason, its evidence and ``perfwatch run`` say so, and ``perfwatch baseline accept`` still can."""

from __future__ import annotations

from sqlalchemy import select

from tasks.analysis.calibration import assess_noise
from tasks.analysis.soundness import measurement_findings
from tasks.records import ArchiveRecord, RunState
from tasks.stages import pipeline
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.store import session_scope
from tasks.store.schema import Baseline
from tests.helpers.builders import QUIET_HOST_LOAD, make_records

QUIET = QUIET_HOST_LOAD
BUSY = assess_noise({**QUIET, "other_cpu_share": 0.83}).model_dump(mode="json")
CALM = assess_noise(QUIET).model_dump(mode="json")


def _active(db_url: str) -> list[int]:
    with session_scope(db_url) as s:
        return list(s.scalars(select(Baseline.run_id).where(Baseline.superseded_at.is_(None))).all())


def _unsound_findings() -> list[dict]:
    fed = {
        "measured": {
            "steps": 10,
            "examples": 160,
            "compiled_steps": list(range(10)),
            "retraced_steps": [],
            "distinct": [{"shapes": {"x": [16, i]}, "examples": 16, "steps": 1, "first_step": i} for i in range(10)],
        }
    }
    found = measurement_findings(
        fed, batch_size=16, xla=True, steady=False, warmup_steps=60, final_cv=0.31, cv_max=0.05
    )
    return [f.model_dump(mode="json") for f in found]


def test_an_unsound_first_run_is_not_made_the_baseline_and_says_why(db_url, tmp_path):
    """Issue 26: a run measured while other processes took up to 83% of the CPU became the case's first baseline
    without a word; so did a run whose every measured step recompiled (verdict no-baseline)."""
    archive = str(tmp_path / "archive")
    ctx, pulled, env, warm, run, parsed, _ = make_records(tmp_path, dag_run_id="busy")
    busy = run.model_copy(update={"noise": BUSY})
    v = baseline_compare(db_url, ctx.case, env, busy, parsed, tmp_path / "w1")
    assert v.verdict == "no-baseline" and len(v.baseline_refused) == 1
    assert v.baseline_refused[0].startswith("host busy: other processes took 83%")
    assert v.reason.startswith("not made the case's baseline automatically, although no-baseline would make it one")
    assert "perfwatch baseline accept RUN_ID" in v.reason and v.evidence["baseline_refused"] == v.baseline_refused
    archive_run(db_url, archive, ctx, pulled, env, warm, busy, parsed, v)
    assert _active(db_url) == []

    ctx, pulled, env, warm, run, parsed, _ = make_records(tmp_path, dag_run_id="compiled")
    unsound = run.model_copy(update={"noise": CALM, "findings": _unsound_findings()})
    v = baseline_compare(db_url, ctx.case, env, unsound, parsed, tmp_path / "w2")
    assert [r.split(":")[0] for r in v.baseline_refused] == ["recompiled_timed_steps", "warmup_not_steady"]
    assert v.evidence["measurement_findings"] == unsound.findings
    archive_run(db_url, archive, ctx, pulled, env, warm, unsound, parsed, v)
    assert _active(db_url) == []

    ctx, pulled, env, warm, run, parsed, _ = make_records(tmp_path, dag_run_id="sound")
    sound = run.model_copy(update={"noise": CALM})
    v = baseline_compare(db_url, ctx.case, env, sound, parsed, tmp_path / "w3")
    assert v.verdict == "no-baseline" and v.baseline_refused == [] and "baseline_refused" not in v.evidence
    stored = archive_run(db_url, archive, ctx, pulled, env, warm, sound, parsed, v)
    assert _active(db_url) == [stored.run_id]


def test_perfwatch_run_shows_the_refusal_and_the_measurements_warnings(home, cli, monkeypatch, tmp_path):
    (home / "models" / "m" / "1").mkdir(parents=True)
    (home / "models" / "m" / "1" / "model.keras").write_bytes(b"not read: run_case is replaced")
    ctx, pulled, env, warm, run, parsed, comp = make_records(tmp_path)
    partial = {"code": "partial_batches", "severity": "warning", "message": "2 of 10 measured steps were fed 6"}
    run = run.model_copy(update={"findings": [*_unsound_findings(), partial]})
    refused = ["recompiled_timed_steps: 10 of 10 measured steps compiled"]
    comp = comp.model_copy(
        update={"reason": "not made the case's baseline automatically: " + refused[0], "baseline_refused": refused}
    )
    state = RunState(
        ctx=ctx,
        pulled=pulled,
        env=env,
        warmup=warm,
        run=run,
        parsed=parsed,
        verdict=comp,
        archived=ArchiveRecord(run_id=7, archive_uri=str(tmp_path / "a"), verdict="no-baseline"),
    )
    monkeypatch.setattr(pipeline, "run_case", lambda ctx, settings=None: state)
    res = cli("run", "m", "--version", "1")
    assert res.exit_code == 0, res.output
    assert "  why: not made the case's baseline automatically: recompiled_timed_steps: 10 of 10" in res.output
    assert "finding warmup_not_steady: The warm-up did not reach steady state in 60 steps" in res.output
    assert "finding partial_batches: 2 of 10 measured steps were fed 6" in res.output
    assert "finding recompiled_timed_steps" not in res.output  # said once, in the reason


def test_make_demo_accepts_a_refused_version_1_explicitly_and_says_why(db_url, cli, tmp_path):
    """``make demo`` on a busy host: its version 1 is not made the baseline by itself, so ``perfwatch demo
    baseline`` says why and accepts it as a user would (accepted by ``make demo``), and says so when it was."""
    archive = str(tmp_path / "archive")
    ctx, pulled, env, warm, run, parsed, _ = make_records(tmp_path, dag_run_id="busy", model="demo_mobilenet")
    busy = run.model_copy(update={"noise": BUSY})
    v = baseline_compare(db_url, ctx.case, env, busy, parsed, tmp_path / "w1")
    stored = archive_run(db_url, archive, ctx, pulled, env, warm, busy, parsed, v)
    assert _active(db_url) == []
    res = cli("demo", "baseline", "--model", "demo_mobilenet")
    assert res.exit_code == 0, res.output
    assert f"version 1's run {stored.run_id} was not made the baseline by itself (host busy: other" in res.output
    assert f"perfwatch baseline accept {stored.run_id}" in res.output
    assert _active(db_url) == [stored.run_id]
    with session_scope(db_url) as s:
        b = s.scalars(select(Baseline)).one()
        assert b.accepted_by == "make demo" and "host busy: other processes took 83%" in b.reason
    res = cli("demo", "baseline", "--model", "demo_mobilenet")
    assert res.exit_code == 0 and f"version 1's run {stored.run_id} is its case's baseline" in res.output
    assert cli("demo", "baseline", "--model", "other").exit_code == 1

    # a second `make demo` on a busy host: its version 1 run is judged against the first and refused; the first
    # stays the baseline (nothing accepted), and version 2's gate pairs with it
    ctx2, pulled2, env2, warm2, _, parsed2, _ = make_records(tmp_path, dag_run_id="busy2", model="demo_mobilenet")
    v2 = baseline_compare(db_url, ctx2.case, env2, busy, parsed2, tmp_path / "w2")
    again = archive_run(db_url, archive, ctx2, pulled2, env2, warm2, busy, parsed2, v2)
    res = cli("demo", "baseline", "--model", "demo_mobilenet")
    assert res.exit_code == 0, res.output
    assert f"version 1's newest run {again.run_id} was not made the baseline (" in res.output
    assert f"its case's baseline stays version 1's run {stored.run_id}" in res.output
    assert _active(db_url) == [stored.run_id]
