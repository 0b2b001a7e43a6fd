"""Explaining step-time changes from the store: per-run tables read back, op attribution in the verdict,
the regression message, and the two-version comparison behind ``perfwatch compare``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tasks.analysis import attribution
from tasks.analysis.attribution import top_ops_text
from tasks.analysis.profile import OP_STATS_COLUMNS, STEP_COLUMNS, cross_check
from tasks.cli.compare import ComparisonUnavailable, compare_versions
from tasks.runner.protocol import SCHEMA_VERSION
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.stages.parse import parse_run
from tasks.stages.pipeline import RegressionDetected, raise_on_regression
from tasks.store.reads import op_table, run_findings, run_ops, run_tool_tables, step_breakdown_table
from tasks.store.writes import RUN_TABLE_GROUPS, group_tables, record_failure
from tests.helpers.builders import CAND_OPS, CPU_ONLY, INPUT_BOUND, archive, make_records, op, records


def attribute_against_run(db_url, run_id, parsed_tables, steps, measured_ms, **kw):
    """The evidence baseline-compare builds: the stored run's ops read back, then attributed."""
    return attribution.attribute_against_run(run_ops(db_url, run_id), run_id, parsed_tables, steps, measured_ms, **kw)


def window(ratio: float, median: float = 10.0) -> dict[str, Any]:
    """A stored window check (``tasks.analysis.profile.cross_check``): a 5-step window at ``ratio`` x a
    measured median of ``median`` ms."""
    return cross_check([median * (1 + 0.002 * (i - 20)) for i in range(41)], [median * ratio] * 5).model_dump(
        mode="json"
    )


# ------------------------------------------------------------------------------------- attribution


def _scaled(per_step: dict[str, float], measured_ms: float) -> dict[str, float]:
    total = sum(per_step.values())
    return {k: v / total * measured_ms * 1e3 for k, v in per_step.items()}


# per profiled step: baseline conv 20, relu 10, dense 6 µs; candidate conv 120, relu 10, bn 5 µs
BASE_PER_STEP = {"conv": 20.0, "relu": 10.0, "dense": 6.0}
CAND_PER_STEP = {"conv": 120.0, "relu": 10.0, "bn": 5.0}


def test_attribute_against_run_names_ops_and_their_share(db_url, tmp_path):
    base = archive(db_url, tmp_path, "base", avg_ms=11.5, check=window(1.0))  # measured median 10.0 ms
    # twice the profiled steps, same per-step cost for relu: normalised to µs per step
    cand = [op("conv", "Conv2D", 1200.0), op("relu", "Relu", 100.0), op("bn", "FusedBatchNormV3", 50.0)]
    ev = attribute_against_run(db_url, base, {"op_stats": cand, "cross_check": window(1.0, 12.0)}, 10, 12.0)
    json.dumps(ev)  # JSON-safe for the store and XCom
    assert ev["available"] and ev["baseline_run_id"] == base
    assert (ev["baseline_profiled_steps"], ev["candidate_profiled_steps"]) == (5, 10)
    assert ev["step_time_change_source"] == "measured_median" and ev["baseline_run_measured_ms"] == 10.0
    assert ev["step_time_change_us"] == pytest.approx(2000.0)  # 10.0 -> 12.0 ms measured
    assert ev["op_self_time_change_us"] == pytest.approx(100.0 + 5.0 - 6.0)  # the windows, unscaled
    b, c = _scaled(BASE_PER_STEP, 10.0), _scaled(CAND_PER_STEP, 12.0)
    top = ev["top_ops"][0]
    assert (top["op_name"], top["category"], top["status"]) == ("conv", "convolution", "both")
    assert top["baseline_us_per_step"] == pytest.approx(b["conv"]) and top["candidate_us_per_step"] == pytest.approx(
        c["conv"]
    )
    assert top["delta_us_per_step"] == pytest.approx(c["conv"] - b["conv"])
    assert top["baseline_window_us_per_step"] == pytest.approx(20.0)
    assert top["share_of_change"] == pytest.approx((c["conv"] - b["conv"]) / 2000.0)
    assert [o["op_name"] for o in ev["grew_most"]] == ["conv", "bn"]
    assert [o["op_name"] for o in ev["shrank_most"]] == ["relu", "dense"]
    assert sum(x["delta_us_per_step"] for x in ev["categories"]) == pytest.approx(2000.0)  # adds up
    assert ev["top_share"] == pytest.approx(1.0)  # all four ops: the whole change
    assert (ev["n_appeared"], ev["appeared"], ev["n_vanished"], ev["vanished"]) == (1, ["bn"], 1, ["dense"])
    assert ev["warnings"] == [] and ev["baseline_window"]["representative"] is True
    assert "conv" in ev["summary"] and "+2000.0 µs/step" in ev["summary"]
    assert top_ops_text(ev).startswith(f"top ops: conv (+{c['conv'] - b['conv']:.1f} µs/step, ")


def test_attribution_adds_up_to_the_measured_change_and_warns_of_unrepresentative_windows(db_url, tmp_path):
    # the case: a x2.04 slowdown explained from windows at 3.57x (baseline) and 0.49x (candidate)
    # their measured medians; unscaled the windows say the candidate got faster
    base = archive(
        db_url,
        tmp_path,
        "base",
        ops=[op("conv", "Conv2D", 5 * 0.6 * 3.57 * 10_000), op("dense", "MatMul", 5 * 0.4 * 3.57 * 10_000)],
        check=window(3.57),
    )
    cand = [op("conv", "Conv2D", 5 * 0.6 * 0.49 * 20_400), op("dense", "MatMul", 5 * 0.4 * 0.49 * 20_400)]
    ev = attribute_against_run(
        db_url,
        base,
        {"op_stats": cand, "cross_check": window(0.49, 20.4)},
        5,
        20.4,
    )
    assert ev["op_self_time_change_us"] < -20_000
    assert ev["step_time_change_us"] == pytest.approx((20.4 - 10.0) * 1e3)  # the two runs' measured medians
    assert sum(x["delta_us_per_step"] for x in ev["categories"]) == pytest.approx(ev["step_time_change_us"])
    assert [o["op_name"] for o in ev["grew_most"]] == ["conv", "dense"] and ev["shrank_most"] == []
    assert ev["grew_most"][0]["relative_change"] == pytest.approx(1.04)
    assert ev["metric"] == "wall" and ev["change_basis"] == (
        f"wall time: the measured median step times (profiler off) of the baseline run {base}, 10.000 ms, and the "
        "candidate, 20.400 ms, each split by its own profiled window's op self-time shares"
    )
    assert [w.split(" is not representative")[0] for w in ev["warnings"]] == [
        f"the profiled window of the baseline run {base}",
        "the profiled window of the candidate",
    ]
    assert "3.57x its measured median" in ev["warnings"][0] and "0.49x" in ev["warnings"][1]
    assert (ev["baseline_window"]["representative"], ev["candidate_window"]["representative"]) == (False, False)
    assert "warning: the profiled window of the baseline run" in top_ops_text(ev)


def test_attribution_without_measured_medians_uses_op_self_time(db_url, tmp_path):
    base = archive(db_url, tmp_path, "base")
    ev = attribute_against_run(db_url, base, {"op_stats": CAND_OPS}, 5, None)
    assert ev["step_time_change_source"] == "op_self_time"
    assert ev["step_time_change_us"] == pytest.approx(ev["op_self_time_change_us"]) == pytest.approx(99.0)
    assert any("no measured median step time was given for the candidate" in w for w in ev["warnings"])
    assert any(
        w.endswith("was not checked against its measured steps (no window check stored)") for w in ev["warnings"]
    )


def test_attribution_unavailable_is_stated_not_raised(db_url, tmp_path):
    base = archive(db_url, tmp_path, "base")
    empty = archive(db_url, tmp_path, "empty", ops=[])
    assert attribute_against_run(db_url, 999, {"op_stats": CAND_OPS}, 5, 11.0) == {
        "available": False,
        "baseline_run_id": 999,
        "reason": "baseline run 999 is not in the store",
    }
    assert "no op_stats rows" in attribute_against_run(db_url, empty, {"op_stats": CAND_OPS}, 5, 11.0)["reason"]
    no_cand = attribute_against_run(db_url, base, {"op_stats": []}, 5, 11.0)
    assert not no_cand["available"] and "candidate" in no_cand["reason"]
    assert top_ops_text(no_cand).startswith("no op attribution (the candidate")
    assert top_ops_text(None) == "no op attribution"
    with pytest.raises(ValueError, match="candidate_steps"):
        attribute_against_run(db_url, base, {"op_stats": CAND_OPS}, 0, 11.0)


def test_verdict_evidence_carries_attribution_and_regression_names_top_ops(db_url, tmp_path):
    ctx, pulled, env, warm, run, parse, _ = records(tmp_path, "first")
    first = baseline_compare(db_url, ctx.case, env, run, parse, tmp_path / "first" / "work")
    assert first.verdict == "no-baseline" and "attribution" not in first.evidence
    base = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, first).run_id

    ctx, pulled, env, warm, run, parse, _ = records(
        tmp_path, "second", version="2", ops=CAND_OPS, avg_ms=31.5, median=30.0
    )
    verdict = baseline_compare(db_url, ctx.case, env, run, parse, tmp_path / "second" / "work")
    assert verdict.verdict == "regression"
    attribution = verdict.evidence["attribution"]
    assert attribution["available"] and attribution["baseline_run_id"] == base
    # the op deltas add up to the change of the two runs' measured medians (wall time), never to a change made of
    # the verdict's ratio at the candidate's median (a baseline no run measured)
    change = (run.median_step_ms - 10.0) * 1e3
    assert attribution["step_time_change_us"] == pytest.approx(change)
    assert sum(c["delta_us_per_step"] for c in attribution["categories"]) == pytest.approx(change)
    assert attribution["change_basis"].startswith(
        f"wall time: the measured median step times (profiler off) of the baseline run {base}, 10.000 ms"
    )
    conv, bn = attribution["grew_most"][:2]
    assert (conv["op_name"], bn["op_name"], bn["status"]) == ("conv", "bn", "appeared")
    archived = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, verdict)
    bundle = {
        "ctx": ctx.to_xcom(),
        "pulled": pulled.to_xcom(),
        "verdict": verdict.to_xcom(),
        "archived": archived.to_xcom(),
    }
    expected = (
        f"top ops: conv ({conv['delta_us_per_step']:+.1f} µs/step, {conv['relative_change']:+.0%}, "
        f"{conv['share_of_change']:.0%} of the change), bn ({bn['delta_us_per_step']:+.1f} µs/step, appeared"
    )
    with pytest.raises(RegressionDetected, match=re.escape(expected)):
        raise_on_regression(bundle)


# ------------------------------------------------------------------------------------- two versions


def test_compare_versions_latest_successful_runs(db_url, tmp_path):
    archive(db_url, tmp_path, "v1-old", version="1", ops=[op("conv", "Conv2D", 1.0)])
    v1 = archive(db_url, tmp_path, "v1-new", version="1", findings=[CPU_ONLY], check=window(3.0))
    v2 = archive(
        db_url,
        tmp_path,
        "v2",
        version="2",
        ops=CAND_OPS,
        findings=[CPU_ONLY, INPUT_BOUND],
        avg_ms=11.6,
        median=12.0,
        check=window(1.0, 12.0),
    )
    failed_ctx = records(tmp_path, "v2-failed", version="2")[0]
    record_failure(db_url, failed_ctx, "warm-up", "RunnerError: boom")  # newest v2 run, but failed

    vc = compare_versions(db_url, "m", "1", "2")
    h = vc.headline.set_index("side")
    assert (h.loc["from", "run_id"], h.loc["to", "run_id"]) == (v1, v2)
    assert (h.loc["from", "version"], h.loc["to", "version"], h.loc["to", "case"]) == ("1", "2", "train-bs16")
    assert h.loc["to", "median_step_ms"] == pytest.approx(12.0)
    # op shares of each window x its run's measured median (10.0 -> 12.0 ms): the deltas add up to +2000 µs
    b, c = _scaled(BASE_PER_STEP, 10.0), _scaled(CAND_PER_STEP, 12.0)
    assert list(vc.ops["op_name"]) == ["conv", "bn", "dense", "relu"]  # grew most first
    assert vc.ops["delta_us_per_step"].sum() == pytest.approx(2000.0)
    assert vc.ops.loc[0, "delta_us_per_step"] == pytest.approx(c["conv"] - b["conv"])
    assert vc.ops.loc[0, "share_of_change"] == pytest.approx((c["conv"] - b["conv"]) / 2000.0)
    assert vc.attribution.step_time_change_us == pytest.approx(2000.0)
    assert vc.attribution.step_time_change_source == "measured_median"
    cats = vc.categories.set_index("category")["delta_us_per_step"]
    assert cats["convolution"] == pytest.approx(c["conv"] - b["conv"]) and cats["matmul"] == pytest.approx(-b["dense"])
    [warning] = vc.attribution.warnings  # the from-run's window ran 3x its measured median
    assert warning.startswith(f"the profiled window of run {v1} (v1) is not representative")
    assert f"Warning: {warning}" in vc.attribution.summary
    assert list(zip(vc.findings["side"], vc.findings["code"], strict=True)) == [
        ("from", "cpu_only"),
        ("to", "cpu_only"),
        ("to", "input_bound"),
    ]
    out = vc.to_dict()
    json.dumps(out)
    assert out["headline"][1]["run_id"] == v2 and out["ops"][0]["op_name"] == "conv"


def test_compare_versions_says_what_is_missing(db_url, tmp_path):
    archive(db_url, tmp_path, "v1", version="1")
    with pytest.raises(ComparisonUnavailable, match="no model 'nope'.*'m'"):
        compare_versions(db_url, "nope", "1", "2")
    with pytest.raises(ComparisonUnavailable, match="no successful run of m version 2"):
        compare_versions(db_url, "m", "1", "2")
    with pytest.raises(ComparisonUnavailable, match="version 1 in case train-bs8"):
        compare_versions(db_url, "m", "2", "1", case="train-bs8")


# ------------------------------------------------------------------------------------- store round trip


@pytest.mark.slow
def test_every_tool_table_of_a_real_profile_is_queryable_per_run(db_url, tmp_path, tmp_path_factory):
    from tests.helpers.xplanes import session_profiles

    prof = session_profiles(tmp_path_factory)["markers"]
    ctx, pulled, env, warm, run, _, comp = make_records(tmp_path, dag_run_id="real")
    shutil.rmtree(run.profile_dir)
    shutil.copytree(prof.logdir, run.profile_dir)
    Path(run.samples_path).write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "measured_step_times_ms": [10.0 + i * 0.01 for i in range(10)],
                "profiled_step_times_ms": prof.step_ms,
            }
        )
    )
    parsed = parse_run(run, tmp_path / "real" / "work")
    tables = json.loads(Path(parsed.parsed_path).read_text())
    run_id = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, comp).run_id

    ops = op_table(db_url, run_id)
    assert len(ops) == parsed.n_ops > 0 and list(ops.columns) == OP_STATS_COLUMNS
    expected = sorted((r["op_name"], r["total_self_time_us"]) for r in tables["op_stats"])
    assert sorted(zip(ops["op_name"], ops["total_self_time_us"], strict=True)) == expected

    steps = step_breakdown_table(db_url, run_id)
    assert len(steps) == len(tables["step_breakdown"]) > 0
    assert set(steps.columns) == set(STEP_COLUMNS.values())
    assert list(steps["step_time_ms"]) == pytest.approx([r["step_time_ms"] for r in tables["step_breakdown"]])

    stored = run_tool_tables(db_url, run_id)
    assert set(stored) == set(RUN_TABLE_GROUPS) | {"parse"}
    assert stored == json.loads(json.dumps(group_tables(tables)))  # every field of every tool, as parsed
    for tool, fields in RUN_TABLE_GROUPS.items():
        assert set(stored[tool]) == set(fields), tool
    assert stored["overview_page"]["avg_step_time_ms"] == pytest.approx(parsed.avg_step_time_ms)
    assert stored["cross_check"]["cross_check"]["overhead_ratio"] == pytest.approx(parsed.cross_check_ratio)
    assert [f"{f['code']}: {f['message']}" for f in run_findings(db_url, run_id)] == parsed.findings


def test_top_ops_text_says_when_scopes_were_renamed():
    att = {
        "available": True,
        "scope_renames": {"net_0.75": "net_0.35"},
        "grew_most": [
            {
                "op_name": "net_0.35/conv",
                "delta_us_per_step": 12.0,
                "relative_change": 0.5,
                "share_of_change": 0.25,
                "status": "both",
            }
        ],
    }
    assert top_ops_text(att) == (
        "top ops: net_0.35/conv (+12.0 µs/step, +50%, 25% of the change) "
        "(this run's op scope 'net_0.75' is shown under the baseline's 'net_0.35')"
    )
    assert top_ops_text(None) == "no op attribution"
