"""Progress of long phases: the runner emits it (``tasks.runner.progress``), its parents relay it
(``launch``, the paired ``session``), ``perfwatch run`` shows it (bars on a terminal, log lines otherwise)."""

from __future__ import annotations

import io
import json
import logging
import statistics
import sys
from pathlib import Path

import pytest

from tasks.runner import progress, protocol
from tasks.runner.driver import launch, run_rounds
from tasks.runner.protocol import EVENT_PREFIX, ProfileResult
from tasks.runner.spec import RunnerSpec


def emitted(stream: io.StringIO) -> list[dict]:
    return [protocol.parse_event(ln).fields() for ln in stream.getvalue().splitlines()]


def test_ticker_reports_every_tenth_with_the_running_median():
    out = io.StringIO()
    steps = [float(i % 7 + 1) for i in range(100)]
    ticker = progress.Ticker("measure", 100, every_s=3600, stream=out)
    for s in steps:
        ticker.tick(s)
    ticker.done()
    events = emitted(out)
    assert [e["n"] for e in events] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 100]
    assert all(e["of"] == 100 and e["phase"] == "measure" for e in events)
    assert events[2]["median_ms"] == statistics.median(steps[:30])
    assert events[-1].get("final") is True and "final" not in events[0]


def test_ticker_reports_after_a_silence_even_between_tenths():
    out = io.StringIO()
    ticker = progress.Ticker("warm-up", 1000, every_s=0.0, stream=out, open_ended=True, cv_max=0.05)
    for i in range(3):
        ticker.tick(5.0, cv=0.2 - i / 100)
    events = emitted(out)
    assert [e["n"] for e in events] == [1, 2, 3]  # a slow step: a line every time, not every 100 steps
    assert events[-1]["cv"] == pytest.approx(0.18) and events[-1]["cv_max"] == 0.05


def test_parse_and_describe():
    assert protocol.parse_event("epoch 1/3 ...") is None
    with pytest.raises(protocol.ProtocolError, match="malformed event line"):
        protocol.parse_event(EVENT_PREFIX + "{not json")
    round_line = EVENT_PREFIX + json.dumps(
        {"event": "round", "round": 0, "pairs": 0, "blocks": [], "host_load": {}, "wall_s": 0, "final": True}
    )
    assert not isinstance(protocol.parse_event(round_line), protocol.ProgressEvent)
    e = protocol.parse_event(
        EVENT_PREFIX + json.dumps({"event": "progress", "phase": "measure", "n": 50, "of": 100, "median_ms": 41.2})
    ).fields()
    assert progress.describe(e) == "measure: 50/100 steps, running median 41.20 ms"
    warm = {"phase": "warm-up", "n": 12, "of": 60, "median_ms": 3.0, "cv": 0.083, "cv_max": 0.05, "open_ended": True}
    assert (
        progress.describe(warm) == "warm-up: step 12 (at most 60), running median 3.00 ms, CV 8.3% (steady below 5.0%)"
    )
    assert (
        progress.describe({"phase": "paired", "round": 2, "n": 48, "of": 320})
        == "paired gate: round 2, 48 of at most 320 ABBA pairs"
    )


def test_reporting_swaps_the_reporter_and_a_failing_one_is_harmless(caplog):
    got = []
    with progress.reporting(got.append):
        progress.report({"phase": "profile", "n": 0, "of": 5})
    assert got == [{"phase": "profile", "n": 0, "of": 5}]
    with caplog.at_level(logging.INFO, logger="tasks.runner.progress"):
        progress.report({"phase": "measure", "n": 1, "of": 2})  # default: a log line
        with progress.reporting(lambda e: 1 / 0):
            progress.report({"phase": "measure", "n": 2, "of": 2})
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == ["measure: 1/2 steps"]


def test_rich_progress_draws_one_bar_per_phase():
    bar = progress.RichProgress()
    bar({"phase": "warm-up", "n": 5, "of": 60, "open_ended": True})
    bar({"phase": "warm-up", "n": 12, "of": 60, "open_ended": True, "final": True})  # steady before its most
    bar({"phase": "measure", "n": 50, "of": 100, "median_ms": 4.0})
    bars = {t.description.split(":")[0]: t for t in bar.progress.tasks}
    assert (bars["warm-up"].completed, bars["warm-up"].total) == (12, 12)
    assert (bars["measure"].completed, bars["measure"].total) == (50, 100)
    assert "running median 4.00 ms" in bars["measure"].description


def fake_runner(tmp_path: Path, body: str) -> str:
    """An interpreter stand-in for ``python -m tasks.runner SPEC``: runs ``body`` with ``spec`` (the spec
    dict) and ``out`` (its out_dir) set, then writes an ok result.json (the fake runner's record of the mode,
    its own events left out)."""
    script = tmp_path / "fake-python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import contextlib, io, json, sys, pathlib\n"
        "spec = json.loads(pathlib.Path(sys.argv[-1]).read_text())\n"
        "out = pathlib.Path(spec['out_dir'])\n"
        f"{body}\n"
        "from tests.helpers import fake_runner\n"
        "from tasks.runner.protocol import write_result\n"
        "from tasks.runner.spec import RunnerSpec\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    result = getattr(fake_runner, spec['mode'])(RunnerSpec.model_validate(spec))\n"
        "write_result(out / 'result.json', result)\n"
    )
    script.chmod(0o755)
    return str(script)


def test_launch_relays_progress_while_the_runner_runs(tmp_path):
    body = (
        "from tasks.runner import progress\n"
        "print('a line of TF chatter on stdout')\n"
        "progress.run_steps('measure', lambda: 2.0, 4)\n"
        "sys.stderr.write('stderr is kept\\n')"
    )
    spec = RunnerSpec(mode="profile", model_path="m", out_dir=str(tmp_path / "o"), batch_size=1)
    got = []
    with progress.reporting(got.append):
        assert isinstance(launch(spec, fake_runner(tmp_path, body)), ProfileResult)
    assert [(e["phase"], e["n"]) for e in got] == [
        ("measure", 1),
        ("measure", 2),
        ("measure", 3),
        ("measure", 4),
        ("measure", 4),
    ]
    assert "stderr is kept" in (tmp_path / "o" / "profile_stderr.log").read_text()


def test_paired_session_relays_progress_and_rounds(tmp_path):
    body = (
        "from tasks.runner import progress\n"
        "progress.run_steps('warm-up A', lambda: 1.0, 1)\n"
        f"print({EVENT_PREFIX!r} + json.dumps({{'event': 'round', 'round': 0, 'pairs': 2, 'blocks': [], "
        "'host_load': {}, 'wall_s': 0.1, 'final': True}), flush=True)"
    )
    spec = RunnerSpec(
        mode="paired",
        model_path="b",
        baseline_model_path="a",
        out_dir=str(tmp_path / "o"),
        batch_size=1,
        blocks=2,
        round_pairs=2,
    )
    got = []
    with progress.reporting(got.append):
        run_rounds(spec, fake_runner(tmp_path, body), on_round=lambda info: True)
    assert [e["phase"] for e in got] == ["warm-up A", "warm-up A", "paired"]
    assert (got[-1]["n"], got[-1]["of"], got[-1]["round"]) == (2, 2, 0)


def test_perfwatch_run_progress_off_a_terminal_is_one_line_per_stage():
    """Issue 35: off a terminal ``perfwatch run`` wrote ~60 lines a run (a start and an end line per stage, the
    runner's progress every 10%). A stage is one line now, when it ends: its duration and the last progress of
    each runner phase; any other record (a warning) is written as it comes."""
    from tasks.cli.stage_lines import progress_shown

    stream = io.StringIO()
    log = logging.getLogger("tasks.stages.pipeline")
    mark = {"stage_id": "profiled-run", "stage_number": 4, "stage_count": 7}
    with progress_shown(stream):
        log.info("profiled-run (stage 4 of 7): ...", extra={**mark, "stage_event": "start"})
        for n in range(10, 101, 10):
            progress.report({"phase": "measure", "n": n, "of": 100, "median_ms": 41.2})
        progress.report({"phase": "profile", "text": "5 steps under the TF profiler"})
        log.warning("waiting for a quieter host: other processes took 70%")
        log.info("profiled-run: done in 3.5 s", extra={**mark, "stage_event": "done", "stage_s": 3.5})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "WARNING tasks.stages.pipeline: waiting for a quieter host: other processes took 70%" in lines[0]
    assert lines[1].endswith(
        "profiled-run (stage 4 of 7): done in 3.5 s; measure: 100/100 steps, running median 41.20 ms; "
        "profile: 5 steps under the TF profiler"
    ), lines[1]
    progress.report({"phase": "measure", "n": 51, "of": 100})
    assert "51/100" not in stream.getvalue()  # the handler is gone after the run


@pytest.mark.slow  # the seven stages with the fake runner (fresh interpreters, xprof)
def test_perfwatch_run_into_a_log_writes_a_line_per_stage_and_the_answer_on_stdout(home, monkeypatch):
    """``perfwatch run`` with its output in files (a CI log): stderr holds one line per stage, stdout the run's
    figures and its verdict."""
    import re

    from typer.testing import CliRunner

    from tasks.cli.main import app
    from tests.helpers import fake_runner

    fake_runner.write_model(home / "models" / "tiny" / "1" / "model.keras")
    monkeypatch.setenv("PERFWATCH_RUNNER_COMMAND", fake_runner.command())
    res = CliRunner().invoke(
        app, ["run", "tiny", "--version", "1", "--batch-size", "4", "--measured-steps", "20", "--profiled-steps", "3"]
    )
    assert res.exit_code == 0, res.output
    stages = [ln for ln in res.stderr.splitlines() if re.match(r"^\d\d:\d\d:\d\d \S+ \(stage \d of 7\): done", ln)]
    assert [ln.split()[1] for ln in stages] == [
        "pull-model-version",
        "env-fingerprint",
        "warm-up",
        "profiled-run",
        "parse",
        "baseline-compare",
        "archive",
    ], res.stderr
    others = [ln for ln in res.stderr.splitlines() if ln not in stages and " INFO " in ln]
    assert others == [], res.stderr
    assert "measure: 20/20 steps" in stages[3]
    assert res.stdout.startswith("run 1: median") and "verdict no-baseline" in res.stdout


@pytest.mark.slow
def test_real_runner_reports_warmup_measure_and_profile(model_store, tmp_path):
    from tasks.records import Case
    from tasks.stages.profiled_run import profiled_run
    from tasks.stages.pull import pull_model_version
    from tasks.stages.warmup import warm_up

    case = Case(model="tiny", version="1", batch_size=4, measured_steps=20, profiled_steps=2, warmup_max_steps=15)
    pulled = pull_model_version(str(model_store), "tiny", "1", tmp_path)
    got = []
    with progress.reporting(got.append):
        warm = warm_up(pulled, case, tmp_path, sys.executable)
        profiled_run(pulled, case, warm, tmp_path, sys.executable)
    phases = [e["phase"] for e in got]
    assert phases[0] == "start" and "profile" in phases
    warm_events = [e for e in got if e["phase"] == "warm-up" and e.get("open_ended")]
    assert warm_events and warm_events[-1]["final"] and warm_events[-1]["of"] == 15
    assert any(e.get("cv") is not None for e in warm_events)  # once a full window is seen
    measure = [e for e in got if e["phase"] == "measure"]
    assert measure[-1]["n"] == 20 and measure[-1]["median_ms"] > 0
    assert [e["n"] for e in measure] == sorted(e["n"] for e in measure)
