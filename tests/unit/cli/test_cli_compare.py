"""``perfwatch compare MODEL --from V --to V`` on a store filled without TensorFlow."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tasks.cli.main import app
from tasks.settings import Settings
from tasks.store import migrate
from tests.helpers.builders import CAND_OPS, CPU_ONLY, INPUT_BOUND, archive


@pytest.fixture
def store(home, tmp_path) -> dict[str, int]:
    url = Settings.from_env().database_url
    migrate(url)
    return {
        "from": archive(url, tmp_path, "v1", version="1", findings=[CPU_ONLY]),
        "to": archive(url, tmp_path, "v2", version="2", ops=CAND_OPS, findings=[INPUT_BOUND], avg_ms=11.6, median=12.0),
    }


def invoke(*args: str):
    return CliRunner().invoke(app, ["compare", *args])


def test_json_lists_grown_ops_share_and_findings(store):
    res = invoke("m", "--from", "1", "--to", "2", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [(h["side"], h["run_id"], h["version"]) for h in out["headline"]] == [
        ("from", store["from"], "1"),
        ("to", store["to"], "2"),
    ]
    assert out["headline"][1]["median_step_ms"] == pytest.approx(12.0)
    conv = out["ops"][0]
    assert (conv["op_name"], conv["status"]) == ("conv", "both")
    # op shares of each window scaled to the measured medians 10.0 -> 12.0 ms (conv: 20/36 -> 120/135 of them)
    delta = 120 / 135 * 12_000 - 20 / 36 * 10_000
    assert conv["delta_us_per_step"] == pytest.approx(delta)
    assert conv["share_of_change"] == pytest.approx(delta / 2000.0)
    assert [o["status"] for o in out["ops"]] == ["both", "appeared", "vanished", "both"]
    assert out["step_time_change_us"] == pytest.approx(2000.0)
    assert sum(o["delta_us_per_step"] for o in out["ops"]) == pytest.approx(2000.0)
    assert out["categories"][0]["category"] == "convolution"
    assert [(f["side"], f["code"]) for f in out["findings"]] == [("from", "cpu_only"), ("to", "input_bound")]


def test_top_limits_the_ops(store):
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json", "--top", "2").stdout)
    assert [o["op_name"] for o in out["ops"]] == ["conv", "bn"]


def test_table_and_csv_forms(store):
    table = invoke("m", "--from", "1", "--to", "2")
    assert table.exit_code == 0, table.output
    assert "median step time v1" in table.stdout and "x1.200 (+20.0%; two processes' medians)" in table.stdout
    assert "ops whose self-time per step grew most" in table.stdout and "input_bound" in table.stdout
    csv = invoke("m", "--from", "1", "--to", "2", "--format", "csv").stdout
    assert [ln for ln in csv.splitlines() if ln.startswith("# ")] == [
        "# headline",
        "# ops",
        "# categories",
        "# findings",
    ]


def test_missing_version_exits_1_with_reason(store):
    res = invoke("m", "--from", "1", "--to", "3")
    assert res.exit_code == 1
    assert "no successful run of m version 3" in res.stderr


def test_byte_identical_versions_are_called_drift_not_a_change(store, tmp_path):
    import hashlib

    from tasks.stages.archive import archive_run
    from tests.helpers.builders import records

    assert "byte-identical" not in invoke("m", "--from", "1", "--to", "2").stdout
    ctx, pulled, *rest = records(tmp_path, "v3", version="3", median=13.5)
    pulled = pulled.model_copy(update={"digest": hashlib.sha256(b"1").hexdigest()})  # v1's bytes, republished
    archive_run(Settings.from_env().database_url, str(tmp_path / "archive"), ctx, pulled, *rest)
    res = invoke("m", "--from", "1", "--to", "3")
    assert res.exit_code == 0, res.output
    assert "note: v1 and v3 are byte-identical (same sha256): the x1.350 is drift" in res.stdout
    assert "perfwatch run MODEL --version 3 --paired" in res.stdout
    assert json.loads(invoke("m", "--from", "1", "--to", "3", "--format", "json").stdout)["identical_bytes"] is True


KERAS_A, KERAS_B = "keras3.15.1-1a2b3c4d", "keras3.15.1-9f8e7d6c"


def test_keras_application_versions_are_compared_and_gated(home, tmp_path):
    """A keras.applications case's versions (keras<Keras version>-<8 hex>) have their own history: compare and
    gate look them up as written (they used to refuse anything but an integer)."""
    url = Settings.from_env().database_url
    migrate(url)
    archive(url, tmp_path, "k1", version=KERAS_A)
    archive(url, tmp_path, "k2", version=KERAS_B, median=12.0)
    res = invoke("m", "--from", KERAS_A, "--to", KERAS_B, "--format", "json")
    assert res.exit_code == 0, res.output
    assert [h["version"] for h in json.loads(res.stdout)["headline"]] == [KERAS_A, KERAS_B]
    gate = CliRunner().invoke(app, ["gate", "m", KERAS_B])
    assert gate.exit_code == 0, gate.output
    # stored no-baseline: found, and not a PASS (issue 35: PASS is never said of a version that was not compared)
    assert f"gate m {KERAS_B}: NO BASELINE (a first version: nothing to compare with)" in gate.stdout
    bad = invoke("m", "--from", "keras3.15.1", "--to", KERAS_B)
    assert bad.exit_code == 1 and "keras<Keras version>-<8 hex>" in bad.stderr


def test_stored_version_forms():
    from tasks.records import stored_version

    assert stored_version("0003") == "3" and stored_version("latest") == "latest"
    assert stored_version(f" {KERAS_A} ") == KERAS_A
    for bad in ("keras3.15.1-1A2B3C4D", "keras-1a2b3c4d", "v3", "keras3.15.1-1a2b3c4"):
        with pytest.raises(ValueError, match="keras3.15.1-1a2b3c4d"):
            stored_version(bad)


def test_compare_and_gate_answer_with_the_same_run_of_a_version_with_several_runs(home, tmp_path):
    """The audit: v1; v2 unpaired (run 2, inconclusive); v2 --paired (run 3, regression); v2 unpaired again (run
    4). ``gate m 2`` answers with run 3 (the newest paired ABBA verdict); ``compare --from 1 --to 2`` compared with
    run 4 and quoted its verdict. Both now take gate's rule, and compare says which run and why; a newer paired
    gate replaces run 3 in both; where the answering run failed, compare takes the newest successful run and says
    so."""
    import datetime as dt

    from tasks.stages.archive import archive_run
    from tests.helpers.builders import T0, records

    url = Settings.from_env().database_url
    migrate(url)
    v1 = archive(url, tmp_path, "v1", version="1")

    def v2(name: str, verdict: str, method: str, ratio: float, median: float, day: int) -> int:
        ctx, pulled, env, warm, run, parse, comp = records(tmp_path, name, version="2", ops=CAND_OPS, median=median)
        ctx = ctx.model_copy(update={"started_at": T0 + dt.timedelta(days=day)})
        comp = comp.model_copy(
            update={
                "verdict": verdict, "method": method, "ratio": ratio, "ci_low": ratio - 0.05,
                "ci_high": ratio + 0.05, "baseline_run_ids": [v1], "evidence": {"reason": f"{verdict} ({method})"},
            }
        )  # fmt: skip
        return archive_run(url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id

    v2(name="a", verdict="inconclusive", method="history-lookback", ratio=1.5, median=15.0, day=1)
    paired = v2(name="b", verdict="regression", method="paired-abba", ratio=1.4, median=13.88, day=2)
    adhoc = v2(name="c", verdict="inconclusive", method="history-lookback", ratio=1.45, median=14.5, day=3)
    gate = CliRunner().invoke(app, ["gate", "m", "2"])
    assert gate.exit_code == 1 and f"answered by run {paired}: the newest paired ABBA gate" in gate.output
    res = invoke("m", "--from", "1", "--to", "2")
    assert res.exit_code == 0, res.output
    assert f"-> v2 (run {paired}) 13.880 ms: x1.388" in res.stdout
    assert (
        f"v2: run {paired}, as `perfwatch gate m 2` answers: the newest paired ABBA gate of the version; the newer "
        f"run {adhoc} (inconclusive, history-lookback) is not a paired gate and does not override it" in res.stdout
    )
    assert f"verdict of run {paired}: regression, step-time ratio 1.400" in res.stdout
    assert f"run {adhoc}: inconclusive" not in res.stdout and f"verdict of run {adhoc}" not in res.stdout
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json").stdout)
    assert out["headline"][1]["run_id"] == paired and out["verdict_figure"]["verdict"]["run_id"] == paired
    assert (
        out["selection"][0] == f"v1: run {v1}, as `perfwatch gate m 1` answers: the newest run (the version "
        "has no paired ABBA gate of this case)"
    )
    later = v2(name="d", verdict="pass", method="paired-abba", ratio=1.01, median=10.1, day=4)
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json").stdout)
    assert out["headline"][1]["run_id"] == later  # a newer paired gate answers, in both
    assert CliRunner().invoke(app, ["gate", "m", "2"]).exit_code == 0
    from tasks.store.writes import record_failure

    ctx = records(tmp_path, "e", version="1")[0]
    ctx = ctx.model_copy(update={"started_at": dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)})  # after v1's run
    failed = record_failure(url, ctx, "warm-up", "RunnerError: out of memory")  # v1's newest run: gate answers with it
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json").stdout)
    assert out["headline"][0]["run_id"] == v1
    assert out["selection"][0] == (
        f"v1: run {v1}, its newest successful run (`perfwatch gate m 1` answers with run {failed}, which failed at "
        "warm-up: it has no numbers to compare)"
    )


def _archive_in(url, tmp_path, name, version, data, median=10.0, batch_size=16):
    """Archive a run of m ``version`` fingerprinted as ``data`` (case train-bs<batch_size>)."""
    from tasks.stages.archive import archive_run
    from tests.helpers.builders import env_record, records

    ctx, pulled, _, warm, run, parse, comp = records(tmp_path, name, version=version, median=median)
    ctx = ctx.model_copy(update={"case": ctx.case.model_copy(update={"batch_size": batch_size})})
    return archive_run(url, str(tmp_path / "archive"), ctx, pulled, env_record(data), warm, run, parse, comp).run_id


def test_versions_measured_in_different_environments_are_compared_within_one_or_warned(home, tmp_path):
    """``compare --from 1 --to 2`` of runs whose comparability keys differ compared them silently: it compares
    v1's run in v2's environment where there is one (saying so), else warns naming the fields old -> new."""
    from tests.helpers.builders import BASELINE_FINGERPRINT, CANDIDATE_FINGERPRINT

    url = Settings.from_env().database_url
    migrate(url)
    _archive_in(url, tmp_path, "a", "1", BASELINE_FINGERPRINT)
    b = _archive_in(url, tmp_path, "b", "2", CANDIDATE_FINGERPRINT, median=12.0)
    res = invoke("m", "--from", "1", "--to", "2")
    assert res.exit_code == 0, res.output
    first = res.stdout.splitlines()[0]
    assert first.startswith("WARNING: runs 1 (v1) and 2 (v2) were measured in different environments"), first
    assert "gpu.driver_version 535.104.05 -> 535.129.03; tensorflow.build.cudnn_version 8.6 -> 8.9" in first
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json").stdout)
    assert out["warnings"] and "different environments" in out["warnings"][0]
    same = _archive_in(url, tmp_path, "c", "1", CANDIDATE_FINGERPRINT, median=11.0)  # v1 again, in v2's environment
    _archive_in(url, tmp_path, "d", "1", BASELINE_FINGERPRINT)  # and a newer v1 run back in the old one
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json").stdout)
    assert out["warnings"] == []
    assert [h["run_id"] for h in out["headline"]] == [same, b]
    assert out["selection"][0].startswith(f"v1: run {same}, its newest successful run in the environment of v2's")


def test_without_case_the_newest_common_case_is_compared_and_the_others_are_named(home, tmp_path):
    """v2's newest case that v1 lacks made ``compare`` refuse; it compares the newest case both have and names
    the cases left out."""
    from tests.helpers.builders import BASELINE_FINGERPRINT as FP

    url = Settings.from_env().database_url
    migrate(url)
    _archive_in(url, tmp_path, "a16", "1", FP, batch_size=16)
    _archive_in(url, tmp_path, "a64", "1", FP, batch_size=64)
    _archive_in(url, tmp_path, "b16", "2", FP, batch_size=16)
    _archive_in(url, tmp_path, "b32", "2", FP, batch_size=32)  # v2's newest case: v1 has none
    res = invoke("m", "--from", "1", "--to", "2")
    assert res.exit_code == 0, res.output
    assert "case train-bs16 compared" in res.stdout
    assert "left out: train-bs32 (v2 only), train-bs64 (v1 only)" in res.stdout


def _capped_run(url, tmp_path, name: str, version: str, scope: str, kept: range, us: float, median: float) -> int:
    """A run whose op table is at xprof's cap, as the demo's MobileNetV2 gives it: 499 ops and the Host IDLE row
    (``idle_time_us``, stored in ``run_tables`` 'framework_op_stats'), the ops named under the model's scope
    ``scope``; ``kept``: which of the model's 600 layer ops made the cut (the others had less self-time)."""
    from pathlib import Path

    from tasks.stages.archive import archive_run
    from tests.helpers.builders import op, records

    ops = [op(f"{scope}/block_{i}/conv/Conv2D", "Conv2D", us + i) for i in kept]
    assert len(ops) == 499
    rec = records(tmp_path, name, version=version, ops=ops, median=median)
    parsed = Path(rec[5].parsed_path)
    parsed.write_text(json.dumps({**json.loads(parsed.read_text()), "idle_time_us": {"Host": 1.0e6}}))
    return archive_run(url, str(tmp_path / "archive"), *rec).run_id


def test_ops_below_xprofs_cut_are_not_called_appeared_or_vanished(home, tmp_path):
    """Issue 35: right after "Op scope ... matched", compare said "98 ops appeared, 98 vanished": both tables held
    xprof's 500 rows, so an op missing from one was below that table's cut, not new or gone. Such ops are
    ``below-cut``, said with the cut, and appeared / vanished stay for ops missing from a complete table."""
    url = Settings.from_env().database_url
    migrate(url)
    _capped_run(url, tmp_path, "v1", "1", "mobilenetv2_0.35_96_1", range(0, 499), 100.0, 10.0)
    _capped_run(url, tmp_path, "v2", "2", "mobilenetv2_0.75_96_1", range(101, 600), 300.0, 20.0)
    res = invoke("m", "--from", "1", "--to", "2")
    assert res.exit_code == 0, res.output
    assert "Op scope 'mobilenetv2_0.75_96_1' of the candidate matched to 'mobilenetv2_0.35_96_1'" in res.stdout
    assert "ops appeared" not in res.stdout, res.stdout
    assert (
        "202 ops are in one run's op table only: xprof keeps a profile's 500 largest ops, and the op tables of run 1 "
        "(v1) and run 2 (v2) are at that cap"
    ) in res.stdout
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json", "--top", "0").stdout)
    assert (out["n_appeared"], out["n_vanished"], out["n_below_cut"]) == (0, 0, 202)
    status = {o["op_name"].split("/")[1]: o["status"] for o in out["ops"]}
    assert status["block_0"] == status["block_599"] == "below-cut" and status["block_300"] == "both"
    assert sum(o["delta_us_per_step"] for o in out["ops"]) == pytest.approx(10_000.0)  # still adds up
