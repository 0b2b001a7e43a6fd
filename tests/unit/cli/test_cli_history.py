"""perfwatch history / regressions / failures / env-changes / gate / query, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tasks.cli.main import app
from tests.helpers.builders import add_failure, add_run


@pytest.fixture
def releases(db_url, tmp_path) -> dict[str, int]:
    """m: v1 first run, v2 pass, v3 regression, v4 inconclusive, v5 env-changed, v6 improvement, v7 failed."""
    ids = {"1": add_run(db_url, tmp_path, "v1", version="1", verdict="no-baseline", day=0)}
    ids["2"] = add_run(db_url, tmp_path, "v2", version="2", verdict="pass", day=1, baseline=ids["1"], ratio=1.0)
    ids["3"] = add_run(
        db_url, tmp_path, "v3", version="3", verdict="regression", median=13, day=2, baseline=ids["2"], ratio=1.3
    )
    ids["4"] = add_run(
        db_url, tmp_path, "v4", version="4", verdict="inconclusive", day=3, baseline=ids["2"], ratio=1.04
    )
    ids["5"] = add_run(
        db_url,
        tmp_path,
        "v5",
        version="5",
        verdict="env-changed",
        day=4,
        fp="e",
        env_data={"tf": {"version": "2.21"}},
        baseline=ids["2"],
        ratio=1.0,
    )
    ids["6"] = add_run(
        db_url,
        tmp_path,
        "v6",
        version="6",
        verdict="improvement",
        median=8,
        day=5,
        fp="e",
        baseline=ids["5"],
        ratio=0.8,
    )
    return ids


@pytest.mark.parametrize(("version", "code"), [("1", 0), ("2", 0), ("3", 1), ("4", 2), ("5", 2), ("6", 0), ("99", 2)])
def test_gate_exit_code_per_verdict(cli, releases, version, code):
    res = cli("gate", "m", version)
    assert res.exit_code == code, res.output
    word = {0: "PASS", 1: "REGRESSION", 2: "INCONCLUSIVE"}[code] if version != "99" else "no runs of version 99"
    if version == "1":  # the first version: no-baseline passes the gate (not --strict) but is never called PASS
        word = "NO BASELINE (a first version: nothing to compare with)"
    if version == "5":  # stored without the fields that differ: the headline still says what undecided it
        word = "ENV-CHANGED (the comparability key differs from the baseline's)"
    assert f"gate m v{version}: {word} (exit {code})" in res.output


def test_gate_failed_run_says_failed_with_its_stage_and_error_and_strict_refuses_no_baseline(
    cli, releases, db_url, tmp_path
):
    """A failed run exits 2 as an undecided one does, and the headline says FAILED with the stage and the error's
    first line (it said INCONCLUSIVE)."""
    assert cli("gate", "m", "1", "--strict").exit_code == 2
    ctx_fail = add_failure(db_url, tmp_path, "v7fail", day=6)
    from sqlalchemy import update

    from tasks.store import Run, session_scope

    with session_scope(db_url) as s:  # a failure after the pull of version 7 was requested
        s.execute(update(Run).where(Run.id == ctx_fail).values(version_requested="7"))
    res = cli("gate", "m", "7")
    assert res.exit_code == 2 and "failed at warm-up" in res.output
    assert "gate m v7: FAILED (warm-up: RunnerError: training step failed) (exit 2)" in res.output
    assert "INCONCLUSIVE" not in res.output
    add_run(db_url, tmp_path, "v7b", version="7", verdict="inconclusive", batch_size=32, day=6)  # a second case
    res = cli("gate", "m", "7")
    assert res.exit_code == 2 and ": FAILED (warm-up: RunnerError: training step failed) and INCONCLUSIVE (exit 2)" in (
        res.output
    )


def test_gate_of_an_env_changed_run_names_the_fields_that_differ_old_to_new(cli, db_url, tmp_path):
    """The headline of a gate answered by an env-changed run said INCONCLUSIVE: it says ENV-CHANGED and which
    comparability fields differ from the baseline's environment, old -> new (``absent`` where one side lacks
    the field), and the reason line says the same."""
    import copy

    from tasks.stages.archive import archive_run
    from tasks.stages.compare import baseline_compare
    from tests.helpers.builders import BASELINE_FINGERPRINT, CANDIDATE_FINGERPRINT, env_record, records

    candidate = copy.deepcopy(CANDIDATE_FINGERPRINT)
    del candidate["tensorflow"]["build"]["cudnn_version"]
    for name, version, fp, median in (("a", "1", BASELINE_FINGERPRINT, 10.0), ("b", "2", candidate, 12.0)):
        ctx, pulled, _, warm, run, parse, _ = records(tmp_path, name, version=version, median=median)
        env = env_record(fp)
        comp = baseline_compare(db_url, ctx.case, env, run, parse, tmp_path / name / "work")
        archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, comp)
    res = cli("gate", "m", "2")
    assert res.exit_code == 2, res.output
    changes = "gpu.driver_version 535.104.05 -> 535.129.03; tensorflow.build.cudnn_version 8.6 -> absent"
    assert f"gate m v2: ENV-CHANGED ({changes}) (exit 2)" in res.output
    assert f"why: the environment changed: {changes}" in res.output
    assert "INCONCLUSIVE" not in res.output


def test_gate_regression_in_any_case_wins(cli, db_url, tmp_path):
    add_run(db_url, tmp_path, "a", version="2", verdict="inconclusive", batch_size=16)
    add_run(db_url, tmp_path, "b", version="2", verdict="regression", batch_size=32, ratio=1.5)
    assert cli("gate", "m", "2").exit_code == 1
    assert cli("gate", "m", "2", "--case", "train-bs16").exit_code == 2


def test_gate_reads_the_newest_run_of_the_version(cli, db_url, tmp_path):
    add_run(db_url, tmp_path, "old", version="2", verdict="regression", day=0, ratio=1.5)
    add_run(db_url, tmp_path, "new", version="2", verdict="pass", day=1, ratio=1.0)
    assert cli("gate", "m", "2").exit_code == 0


def test_gate_answers_with_the_newest_paired_verdict_not_a_later_unpaired_run(cli, db_url, tmp_path):
    """A release gate's paired ABBA verdict answers for its version: one later ad-hoc unpaired run (two processes'
    medians, inconclusive) does not turn a regression into inconclusive, nor does an A/A calibration gate; a newer
    paired gate does replace it."""
    base = add_run(db_url, tmp_path, "v1", version="1", verdict="no-baseline", day=0)
    paired = add_run(
        db_url, tmp_path, "gate", version="2", verdict="regression", day=1, baseline=base, ratio=2.0,
        method="paired-abba", reason="the interval lies above the regression line",
    )  # fmt: skip
    adhoc = add_run(
        db_url, tmp_path, "adhoc", version="2", verdict="inconclusive", day=2, baseline=base, ratio=1.9,
        method="history-lookback", reason="the interval straddles the regression line",
    )  # fmt: skip
    add_run(  # an A/A gate of version 2 against itself (perfwatch calibrate) says nothing about it against v1
        db_url, tmp_path, "aa", version="2", verdict="pass", day=2, ratio=1.0, method="paired-abba", trigger="calibrate"
    )
    res = cli("gate", "m", "2")
    assert res.exit_code == 1, res.output
    assert f"run {paired} regression: step-time ratio 2.000" in res.output
    assert f"answered by run {paired}: the newest paired ABBA gate of the version; the newer run {adhoc} " in (
        res.output
    )
    (row,) = json.loads(cli("gate", "m", "2", "--format", "json").stdout)
    assert (row["run_id"], row["decided_by"], row["newest_run_id"]) == (paired, "paired", adhoc)
    assert row["decision"]["reason"] == "the interval lies above the regression line"
    assert row["decision"]["text"].startswith("regression: step-time ratio 2.000")
    later = add_run(
        db_url, tmp_path, "gate2", version="2", verdict="pass", day=3, baseline=base, ratio=1.0, method="paired-abba"
    )
    res = cli("gate", "m", "2")
    assert res.exit_code == 0 and f"answered by run {later}: the newest paired ABBA gate of the version, and " in (
        res.output
    )


def test_gate_without_a_paired_verdict_answers_with_the_newest_run(cli, db_url, tmp_path):
    add_run(db_url, tmp_path, "a", version="2", verdict="regression", day=0, ratio=1.5, method="history-lookback")
    newest = add_run(db_url, tmp_path, "b", version="2", verdict="inconclusive", day=1, method="history-lookback")
    res = cli("gate", "m", "2", "--format", "csv")
    assert res.exit_code == 2 and f"answered by run {newest}: the newest run (the version has no paired" in res.output
    assert "decided_by" in res.stdout.splitlines()[0] and "decision" in res.stdout.splitlines()[0]


def test_history_lists_runs_and_draws_the_plot(cli, releases, tmp_path):
    res = cli("history", "m", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["version"] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert [r["env_changed"] for r in rows] == [0, 0, 0, 0, 1, 0]
    png = tmp_path / "plots" / "m.png"
    res = cli("history", "m", "--plot", png)
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(png).shape[1] > 500


def test_history_with_last_marks_its_oldest_run_as_the_whole_history_does(cli, releases):
    """v5 is the first run in a new environment (and comparability key); the newest two runs start with it, so its
    previous run lies before the window: it is still marked (history.sql flags it against that run, migration 0011,
    and the key it changed from is read from the store), as in the whole history."""
    res = cli("history", "m", "--last", "2", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["version"] for r in rows] == ["5", "6"]
    assert [(r["env_changed"], r["fingerprint_changed"], r["version_changed"]) for r in rows] == [(1, 1, 1), (0, 0, 1)]
    whole = {r["run_id"]: r for r in json.loads(cli("history", "m", "--format", "json").stdout)}
    for r in rows:
        assert {k: r[k] for k in ("env_changed", "fingerprint_changed", "version_changed")} == {
            k: whole[r["run_id"]][k] for k in ("env_changed", "fingerprint_changed", "version_changed")
        }


def test_history_of_an_unknown_model_says_which_exist(cli, releases):
    res = cli("history", "nobody")
    assert res.exit_code == 1 and "unknown model 'nobody'; models: m" in res.output


def test_regressions_failures_env_changes(cli, releases, db_url, tmp_path):
    add_failure(db_url, tmp_path, "boom", day=2, error="RuntimeError: out of memory\nTraceback ...")
    res = cli("regressions", "--since", "2026-03-01", "--format", "csv")
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stdout.splitlines() if ln]
    assert lines[0].startswith("run_id,") and len(lines) == 2 and lines[1].startswith(f"{releases['3']},")
    res = cli("failures", "--since", "2026-03-01", "--format", "json")
    (row,) = json.loads(res.stdout)
    assert (row["failed_stage"], row["reason"]) == ("warm-up", "RuntimeError: out of memory") and "error" not in row
    res = cli("env-changes", "--since", "2026-03-01", "--format", "markdown")
    assert res.exit_code == 0 and "tf.version" in res.stdout
    assert cli("regressions", "--since", "yesterday-ish").exit_code == 1


def test_query_runs_any_named_query(cli, releases):
    res = cli(
        "query",
        "top_op_regressions",
        "-p",
        f"run_a={releases['1']}",
        "-p",
        f"run_b={releases['3']}",
        "-p",
        "limit=5",
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)[0]["op_name"] == "conv"
    assert "version_compare" in cli("query", "--format", "csv").stdout
    assert cli("query", "runs", "-p", "colour=red").exit_code == 1


def test_cli_errors_never_show_the_password(monkeypatch):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", "postgresql+psycopg://perf:s3cret@127.0.0.1:1/perfwatch")
    res = CliRunner().invoke(app, ["gate", "m", "1"])
    assert res.exit_code == 3  # the store cannot be used (tests/unit/cli/test_store_errors.py)
    assert "s3cret" not in res.output and "perf:***@127.0.0.1:1" in res.output
    res = CliRunner().invoke(app, ["history", "m"])
    assert res.exit_code == 3 and "s3cret" not in res.output


def test_a_read_on_a_path_without_a_store_says_there_is_none_and_a_first_run_says_it_made_one(
    tmp_path, monkeypatch, capsys
):
    """A mistyped PERFWATCH_HOME must not look like a store without runs: a read says there is no store there (exit
    3) and makes none; a command that writes runs makes it and says so, once."""
    from typer.testing import CliRunner

    from tasks.cli.main import app

    for var in ("PERFWATCH_DATABASE_URL", "PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PERFWATCH_HOME", str(tmp_path / "perfwach"))
    read = CliRunner().invoke(app, ["runs"])
    assert read.exit_code == 3, read.output
    assert f"no store at SQLite file {tmp_path / 'perfwach' / 'perfwatch.db'}" in read.output
    assert f"PERFWATCH_HOME={tmp_path / 'perfwach'}" in read.output
    assert not (tmp_path / "perfwach").exists()
    from tasks.cli.context import settings

    settings(create=True)  # what `perfwatch run`, `ingest` and `calibrate` open the store with
    made = capsys.readouterr().err
    assert f"no perfwatch store was at {tmp_path / 'perfwach' / 'perfwatch.db'}" in made, made
    assert f"PERFWATCH_HOME={tmp_path / 'perfwach'}" in made
    first = CliRunner().invoke(app, ["runs"])
    assert first.exit_code == 0 and "no store" not in first.output, first.output


def test_gate_never_says_pass_for_a_case_it_did_not_compare(cli, db_url, tmp_path):
    """Issue 35: a ``no-baseline`` answer is a pass only for a first version of its case (exit 0, headline NO
    BASELINE, and only beside the compared cases PASS); with an earlier version measured but no baseline accepted
    it is NOT COMPARED (exit 2), naming that version and the paired gate; never the advice to accept the run."""
    add_run(db_url, tmp_path, "a1", version="1", verdict="pass", batch_size=16, ratio=1.0)
    add_run(db_url, tmp_path, "b1", version="1", verdict="no-baseline", batch_size=32)
    res = cli("gate", "m", "1")
    assert res.exit_code == 0, res.output
    assert "gate m v1: PASS (1 case) and NO BASELINE (1 case: a first version, not compared) (exit 0)" in res.output
    assert cli("gate", "m", "1", "--strict").exit_code == 2
    reason = "not made the case's baseline automatically (if it is sound after all: perfwatch baseline accept RUN_ID)"
    b2 = add_run(db_url, tmp_path, "b2", version="2", verdict="no-baseline", batch_size=32, day=1, reason=reason)
    res = cli("gate", "m", "2")
    assert res.exit_code == 2, res.output
    assert "gate m v2: NOT COMPARED (no baseline is accepted, and an earlier version was measured" in res.output
    assert f"run {b2} no-baseline: not compared: no baseline is accepted, and version 1 of this case was" in res.output
    assert "perfwatch run m --version 2 --paired" in res.output
    assert "PASS" not in res.output and "baseline accept" not in res.output
