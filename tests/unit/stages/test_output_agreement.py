"""Outputs agree (issue 38, item 3): a mixed-precision, XLA or tflite run's agreement with the fp32 eager model is
stored with the run, and a case's bound on it is judged beside step time by the compare stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.analysis.agreement import judge_agreement
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.store.reads import run_tool_tables
from tests.helpers.builders import make_records

AGREE = {
    "reference": "fp32, eager",
    "candidate": "mixed_float16, eager",
    "max_abs_diff": 0.031,
    "max_rel_diff": 0.012,
    "top1_agreement": 0.9375,
    "examples": 32,
}


def test_a_bound_is_broken_unchecked_or_kept():
    assert judge_agreement(AGREE, min_top1=None, max_rel_diff=None) is None  # no bound: recorded, not judged
    broken = judge_agreement(AGREE, min_top1=0.99, max_rel_diff=0.05)
    assert broken.failed and broken.broken == ["top-1 agreement 0.938 below the case's 0.99"]
    assert broken.text() == (
        "output agreement (mixed_float16, eager against fp32, eager; 32 examples): top-1 agreement 0.938 below the "
        "case's 0.99"
    )
    rel = judge_agreement(AGREE, min_top1=None, max_rel_diff=0.01)
    assert rel.broken == ["relative output difference 0.012 above the case's 0.01"]
    kept = judge_agreement(AGREE, min_top1=0.9, max_rel_diff=0.05)
    assert not kept.failed and kept.unchecked == []
    regressor = {**AGREE, "top1_agreement": None}  # no classifier output: the top-1 bound is said unchecked
    assert judge_agreement(regressor, min_top1=0.99, max_rel_diff=None).unchecked == [
        "min_top1_agreement 0.99 not checked: no classifier output (rank 2, 2+ classes)"
    ]
    absent = judge_agreement(None, min_top1=0.99, max_rel_diff=None, why_absent="fp32")
    assert not absent.failed and absent.unchecked == ["min_top1_agreement 0.99 not checked: fp32"]


def _mixed_run(tmp_path: Path, name: str, agreement: dict | None, **case):
    ctx, pulled, env, warm, run, parsed, _ = make_records(tmp_path, dag_run_id=name)
    ctx = ctx.model_copy(update={"case": ctx.case.model_copy(update=case)})
    if agreement is not None:
        samples = json.loads(Path(run.samples_path).read_text())
        Path(run.samples_path).write_text(json.dumps({**samples, "agreement": agreement}))
    return ctx, pulled, env, warm, run, parsed


def test_a_run_below_its_cases_bound_is_a_regression_on_agreement_and_stores_it(db_url, tmp_path):
    ctx, pulled, env, warm, run, parsed = _mixed_run(
        tmp_path, "mixed", AGREE, precision="mixed_float16", min_top1_agreement=0.99
    )
    v = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "w")
    assert v.verdict == "regression"  # its step time had nothing to compare with (no-baseline)
    assert v.reason == (  # the case's first run: no step-time reason to add
        "output agreement (mixed_float16, eager against fp32, eager; 32 examples): top-1 agreement 0.938 below the "
        "case's 0.99"
    )
    assert v.evidence["agreement"]["failed"] is True and v.evidence["agreement"]["bounds"] == {
        "min_top1_agreement": 0.99
    }
    # Great Expectations carries the bound: its limit expectation fails, and the Data Docs show the suite
    assert v.evidence["gx"]["agreement"] == {"success": False, "failures": 1}
    (failure,) = [f for f in v.evidence["gx_failures"] if "top1_agreement" in f["text"]]
    assert failure["is_limit"] is True and failure["kwargs"]["min_value"] == 0.99  # the case's bound, as GX ran it
    assert list((tmp_path / "w" / "gx").rglob("perfwatch_output_agreement*.html"))
    run_id = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, v).run_id
    assert run_tool_tables(db_url, run_id)["agreement"] == AGREE  # a mixed-precision run stores its agreement


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ({}, "the run computes the model as saved (fp32, no XLA): nothing to compare"),
        ({"xla": True, "strategy": "mirrored"}, "the runner does not compare outputs under a distribution strategy"),
    ],
)
def test_a_bound_the_run_could_not_check_is_said_never_passed(db_url, tmp_path, case, why):
    ctx, pulled, env, warm, run, parsed = _mixed_run(tmp_path, "fp32", None, max_output_rel_diff=0.01, **case)
    v = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "w")
    assert v.verdict == "no-baseline" and f"output agreement: max_output_rel_diff 0.01 not checked: {why}" in v.reason
    assert v.evidence["agreement"]["failed"] is False and v.evidence["agreement"]["agreement"] is None
    # GX does not pass it either: the bounded figure is missing, so its not-null expectation fails (no limit broken)
    assert v.evidence["gx"]["agreement"] == {"success": False, "failures": 1}
    (failure,) = [f for f in v.evidence["gx_failures"] if "max_rel_diff" in f["text"]]
    assert failure["is_limit"] is False, failure


def test_a_version_whose_agreement_fell_fails_its_gate_whatever_its_step_time(db_url, tmp_path):
    bound = {"precision": "mixed_float16", "min_top1_agreement": 0.9}
    ctx, pulled, env, warm, run, parsed = _mixed_run(tmp_path, "v1", AGREE, **bound)
    v1 = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "w1")
    assert v1.verdict == "no-baseline" and not v1.evidence["agreement"]["failed"]
    assert v1.evidence["gx"]["agreement"] == {"success": True, "failures": 0}  # kept: 0.9375 >= 0.9
    archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, v1)
    fell = {**AGREE, "top1_agreement": 0.5}
    ctx, pulled, env, warm, run, parsed = _mixed_run(tmp_path, "v2", fell, **bound)
    v2 = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "w2")
    assert v2.baseline_run_ids and v2.verdict == "regression"
    assert v2.reason.startswith(
        "output agreement (mixed_float16, eager against fp32, eager; 32 examples): top-1 agreement 0.500 below the "
        "case's 0.9; step time: "
    )
