"""One verdict, one story, everywhere (issue 25): a stored paired regression rendered through ``perfwatch run``,
``gate``, ``runs``, ``history``, the run and model pages, the alert and the metrics says the same verdict, reason,
ratio and interval; ``compare`` marks the verdict's figure and says why its medians' ratio differs; the run page
says which xplane file was judged; ``runs`` lists an infer run's latency percentiles with their intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tasks.records import RunState, Verdict, VerdictStory, judged_profiles
from tasks.services import alerts
from tasks.services.story import figure_text, story_dict, story_html, story_labels, story_line, story_lines
from tasks.stages import pipeline
from tasks.stages.archive import archive_run
from tasks.store.reads import verdict_stories
from tests.helpers.builders import make_records

REASON = "paired gate: step-time ratio 2.523 [2.410, 2.640] lies above the regression line 1.050"
RATIO, INTERVAL = "2.523", "[2.410, 2.640]"
PAIRED = {
    "verdict": "regression",
    "method": "paired-abba",
    "ratio": 2.523,
    "ci_low": 2.41,
    "ci_high": 2.64,
    "confidence": 0.99,
    "tolerance": 0.05,
    "n_candidate": 48,
    "baseline_version": "1",
    "spent": {"pairs": 48, "max_pairs": 100, "timed_steps": 192, "wall_s": 4.0},
    "sequential": {"design": {"max_pairs": 100}, "looks": [], "stopped": "decided"},
}


def _store(db_url: str, tmp: Path) -> tuple[int, int, RunState]:
    """v1 (no-baseline, median 10 ms) and v2: a paired regression x2.523 [2.410, 2.640] whose medians are
    10 -> 37.87 ms (x3.787, two processes), profiled on its second try (two xplane sessions, the newest parsed)."""
    archive = str(tmp / "archive")
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp, dag_run_id="v1")
    base = archive_run(db_url, archive, ctx, pulled, env, warm, run, parse, comp).run_id
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp, dag_run_id="v2", verdict="regression", median=37.87)
    retry = Path(run.profile_dir) / "plugins" / "profile" / "2026_01_02"  # the second try's session: judged
    retry.mkdir(parents=True)
    (retry / "host.xplane.pb").write_bytes(b"xplane-bytes, second try")
    parsed = json.loads(Path(parse.parsed_path).read_text())
    parsed["xplane_paths"] = [str(retry / "host.xplane.pb")]
    Path(parse.parsed_path).write_text(json.dumps(parsed))
    pulled = pulled.model_copy(update={"version": "2", "digest": "b" * 64})
    ctx = ctx.model_copy(update={"case": ctx.case.model_copy(update={"version": "2"})})
    comp = comp.model_copy(
        update={
            "verdict": Verdict.REGRESSION,
            "method": "paired-abba",
            "baseline_run_ids": [base],
            "ratio": 2.523,
            "ci_low": 2.41,
            "ci_high": 2.64,
            "reason": REASON,
            "evidence": {"gx": {}, "paired": PAIRED, "metric": "wall", "reason": REASON},
        }
    )
    archived = archive_run(db_url, archive, ctx, pulled, env, warm, run, parse, comp)
    state = RunState(
        ctx=ctx, pulled=pulled, env=env, warmup=warm, run=run, parsed=parse, verdict=comp, archived=archived
    )
    return base, archived.run_id, state


def _says_it(text: str) -> None:
    assert "regression" in text and REASON in text and RATIO in text and INTERVAL in text, text


def test_one_story_is_told_the_same_by_every_command_page_alert_and_metric(db_url, tmp_path, cli, monkeypatch):
    base, reg, state = _store(db_url, tmp_path)
    story = verdict_stories([reg], db_url)[reg]
    # from the store and from the CompareRecord `perfwatch run` holds: one record, equal
    judged = judged_profiles(json.loads(Path(state.parsed.parsed_path).read_text())["xplane_paths"])
    assert judged == ["plugins/profile/2026_01_02/host.xplane.pb"]
    assert story == VerdictStory.from_compare(state.verdict, run_id=reg, baseline_version="1", profile=judged)
    assert (story.verdict, story.method, story.pairs, story.max_pairs, story.sequential) == (
        "regression",
        "paired-abba",
        48,
        100,
        True,
    )
    assert (story.baseline_run_id, story.baseline_version, story.confidence, story.threshold) == (
        base,
        "1",
        0.99,
        1.05,
    )
    assert figure_text(story) == "step-time ratio 2.523 [2.410, 2.640] at 99%"
    for text in (story_line(story), "\n".join(story_lines(story)), story_html(story)):
        _says_it(text)
    d = story_dict(story)
    assert (d["verdict"], d["reason"], d["ratio"], d["ci_low"], d["ci_high"]) == (
        "regression",
        REASON,
        2.523,
        2.41,
        2.64,
    )

    # perfwatch run (its stages replaced by the finished state): the story's lines, exit 1
    monkeypatch.setenv("PERFWATCH_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "models" / "m" / "2").mkdir(parents=True)
    (tmp_path / "home" / "models" / "m" / "2" / "model.keras").write_bytes(b"not read")
    monkeypatch.setattr(pipeline, "run_case", lambda ctx, settings=None: state)
    res = cli("run", "m", "--version", "2")
    assert res.exit_code == 1, res.output
    assert "\n".join(story_lines(story)) in res.output
    # gate, runs (table and JSON), history: the story on one line
    gate = cli("gate", "m", "2")
    assert gate.exit_code == 1 and story_line(story) in gate.output, gate.output
    assert f"  run {reg} {story_line(story)}" in cli("runs").output
    rows = {r["run_id"]: r for r in json.loads(cli("runs", "--format", "json").stdout)}
    assert rows[reg]["decision"] == d and rows[base]["decision"]["verdict"] == "no-baseline"
    assert f"  run {reg} {story_line(story)}" in cli("history", "m").output
    assert json.loads(cli("history", "m", "--format", "json").stdout)[-1]["decision"] == d
    # the run and model pages: the same fragment
    from plugins.perfwatch import pages
    from plugins.perfwatch.auth import airflow_user

    app = FastAPI()
    app.include_router(pages.router)
    app.dependency_overrides[airflow_user] = _admin  # the pages' login is not what these tests check
    client = TestClient(app)
    run_page = client.get(f"/runs/{reg}")
    assert run_page.status_code == 200 and story_html(story) in run_page.text
    model_page = client.get("/models/m")
    assert model_page.status_code == 200
    assert story_html(story, heading=f"train-bs16: run {reg}", level=3) in model_page.text
    # the alert and the metrics
    (note,) = alerts.dag_run_notes(db_url, "d", "v2")
    _says_it(alerts.note_text(note, None))
    assert story_line(story) in alerts.note_text(note, None)
    from plugins.perfwatch.metrics import StoreCollector

    families = {f.name: f for f in StoreCollector(db_url).collect()}
    (info,) = [s for s in families["perfwatch_latest_decision_info"].samples if s.labels["ratio"] == RATIO]
    assert {k: info.labels[k] for k in story_labels(story)} == story_labels(story)
    assert (info.labels["verdict"], info.labels["reason"], info.labels["interval"]) == ("regression", REASON, INTERVAL)
    bounds = {s.labels["bound"]: s.value for s in families["perfwatch_latest_ratio"].samples}
    assert bounds == {"estimate": 2.523, "low": 2.41, "high": 2.64}


def _admin():
    """An Airflow admin of the simple auth manager (may read every DAG): the pages' user in these tests."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return SimpleAuthManagerUser(username="admin", role="admin")


def test_the_run_page_says_which_xplane_was_judged(db_url, tmp_path, monkeypatch):
    _, reg, _ = _store(db_url, tmp_path)
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    from plugins.perfwatch import pages
    from plugins.perfwatch.auth import airflow_user

    app = FastAPI()
    app.include_router(pages.router)
    app.dependency_overrides[airflow_user] = _admin  # the pages' login is not what these tests check
    page = TestClient(app).get(f"/runs/{reg}").text
    profile = page[page.index("id='profile'") :]
    items = [li.split("</li>")[0] for li in profile.split("<li>")[1:]]
    assert len(items) == 2  # one xplane per try of the profiled run
    (judged,) = [li for li in items if "judged: the profile the parse stage read" in li]
    assert "2026_01_02/host.xplane.pb" in judged
    (other,) = [li for li in items if li != judged]
    assert "2026_01_01/host.xplane.pb" in other and "an earlier try's profile, not judged" in other


def test_compare_marks_the_verdicts_figure_and_agrees_with_gate(db_url, tmp_path, cli):
    _, reg, _ = _store(db_url, tmp_path)
    out = cli("compare", "m", "--from", "1", "--to", "2")
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert "x3.787 (+278.7%; two processes' medians)" in lines[0]
    assert lines[1] == (
        f"verdict of run {reg}: regression, step-time ratio 2.523 [2.410, 2.640] at 99% against baseline run "
        f"{reg - 1} (v1) (paired ABBA sequential gate: both versions in one process, 48 pairs of at most 100) "
        "<- the verdict's figure"
    )
    assert lines[2].startswith("why x3.787 differs from the verdict's 2.523: the verdict's paired gate timed both")
    gate = cli("gate", "m", "2").output
    assert "step-time ratio 2.523 [2.410, 2.640]" in gate and "3.787" not in gate  # the same figure as compare's
    figure = json.loads(cli("compare", "m", "--from", "1", "--to", "2", "--format", "json").stdout)["verdict_figure"]
    assert figure["medians_ratio"] == pytest.approx(3.787) and figure["verdict"]["ratio"] == 2.523


def test_compare_says_when_its_figures_agree(db_url, tmp_path, cli):
    """A history verdict whose ratio is the medians' own: no explanation needed, and compare says they agree."""
    from sqlalchemy import update

    from tasks.store import RunComparison, session_scope

    _, reg, _ = _store(db_url, tmp_path)
    with session_scope(db_url) as s:
        s.execute(
            update(RunComparison)
            .where(RunComparison.run_id == reg)
            .values(method="history-lookback", ratio=3.787, ci_low=3.5, ci_high=4.0, evidence={"reason": "slower"})
        )
    lines = cli("compare", "m", "--from", "1", "--to", "2").stdout.splitlines()
    assert lines[2] == "the verdict's ratio and the medians' x3.787 agree"


def test_a_run_accepted_after_its_advice_tells_who_accepted_it_everywhere(db_url, tmp_path):
    """A run whose verdict advised accepting it as the baseline (not made one by itself: a busy host) names its own
    id in that advice until someone accepts it; then every form of its story says who accepted it and when, not the
    stale advice (the pages and the CLI alike: ``tasks.services.story.reason_text``)."""
    from tasks.cli.baseline import accept_run

    advice = " (if it is sound after all: perfwatch baseline accept RUN_ID --by NAME --reason WHY)"
    why = "not made the case's baseline automatically, although no-baseline would make it one: host busy" + advice
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp_path, dag_run_id="v1")
    comp = comp.model_copy(update={"evidence": {**comp.evidence, "reason": why}, "baseline_refused": ["host busy"]})
    rid = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id
    (story,) = verdict_stories([rid], db_url).values()
    assert f"perfwatch baseline accept {rid} --by NAME" in story_line(story) and "RUN_ID" not in story_line(story)
    accept_run(db_url, rid, "make demo", "the demo's baseline")
    (story,) = verdict_stories([rid], db_url).values()
    for told in (story_line(story), "\n".join(story_lines(story)), story_dict(story)["reason"], story_html(story)):
        assert "accepted as the baseline by make demo on " in told and "if it is sound after all" not in told, told
    assert story.reason == why  # what was stored stays as it was: only what is shown changes


def test_a_cross_environment_gate_is_not_told_as_both_versions_in_one_process():
    """A real two-TensorFlow-version gate's story read "paired ABBA sequential gate: both versions in one process,
    318 pairs of at most 318" and its cost "in 6 processes, each loading both versions": each side ran in its own
    processes. The story and the cost now say what ran."""
    from tasks.records import VerdictStory

    spent = {"pairs": 318, "max_pairs": 318, "timed_steps": 636, "wall_s": 65.6, "processes": 6}

    def method_text(spent: dict) -> str | None:
        evidence = {"paired": {"spent": spent, "sequential": {"design": {"kind": "processes"}}}}
        story = VerdictStory.from_evidence(
            run_id=1,
            verdict="inconclusive",
            method="paired-abba",
            metric="wall",
            ratio=0.999,
            ci_low=0.82,
            ci_high=1.218,
            evidence=evidence,
            baseline_run_id=None,
        )
        return story.method_text

    assert method_text({**spent, "environments": True}) == (
        "cross-environment gate: each environment in its own fresh processes, alternating in random order, "
        "6 process pairs, 318 step pairs of at most 318"
    )
    assert method_text(spent) == (
        "paired ABBA sequential gate: both versions in each of 6 processes, 318 pairs of at most 318"
    )


@pytest.mark.parametrize("step_verdict", ["pass", "regression"])
def test_a_regression_another_figure_made_is_headed_by_that_figure_everywhere(step_verdict):
    """Issue 38 item 1: "a gate's headline says which metric failed". A paired gate whose step time passed and whose
    memory regressed read "verdict regression: step-time ratio 1.000 [0.978, 1.024]" in `run`, `gate`, the pages
    and the alert: the figure that failed was only in the reason. The headline names it; where step time regressed
    too it leads and the other figure is said beside it."""
    memory = "the model's resident memory (load, build, cold step): model_rss_bytes ratio 1.287 [1.153, 1.437] at 99%"
    figure = {"metric": "model_rss_bytes", "ratio": 1.287, "ci_low": 1.153, "ci_high": 1.437, "verdict": "regression"}
    evidence = {"reason": "r", "regressed_on": [memory], "step_verdict": step_verdict, "model_memory": figure}
    ratio = 1.0 if step_verdict == "pass" else 1.5
    run = {
        "run_id": 1,
        "verdict": "regression",
        "method": "paired-abba",
        "metric": "wall",
        "ratio": ratio,
        "ci_low": ratio - 0.02,
        "ci_high": ratio + 0.02,
        "baseline_run_id": None,
    }
    story = VerdictStory.from_evidence(**run, evidence=evidence)
    lines, line, page = story_lines(story), story_line(story), story_html(story)
    if step_verdict == "pass":
        assert lines[0] == f"verdict regression on {memory}"
        assert lines[1] == "  step time: step-time ratio 1.000 [0.980, 1.020] (pass)"
        assert line.startswith(f"regression on {memory}; step time: step-time ratio 1.000")
        assert "<dt>regression on</dt><dd>the model&#x27;s resident memory" in page
    else:
        assert lines[0] == "verdict regression: step-time ratio 1.500 [1.480, 1.520]"
        assert lines[1] == f"  also a regression on {memory}"
        assert line.startswith("regression: step-time ratio 1.500 [1.480, 1.520]; also a regression on the model")
        assert "<dt>also a regression on</dt>" in page
    assert story_dict(story)["regressed_on"] == [memory]
    # JSON readers get the figure itself, not only its words
    assert story_dict(story)["figures"]["model_memory"]["ci_low"] == 1.153 and "cold_step" not in story.figures
    # measured, and judged at its default (the evidence has no "gated": the case set no tolerance)
    assert story.figures["model_memory"]["measured"] is True
    assert story.figures["model_memory"]["tolerance_from"] == "default"
    told = VerdictStory.from_evidence(**run, evidence={**evidence, "model_memory": {**figure, "gated": True}})
    assert told.figures["model_memory"]["tolerance_from"] == "case"
