"""Great Expectations suites of tasks.stages.expectations (GX Core 1.x, ephemeral contexts)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tasks.stages.expectations import (
    GxOutcome,
    render_data_docs,
    step_time_expectations,
    validate_op_table,
    validate_step_times,
)

STEPS = list(10.0 * np.exp(np.random.default_rng(0).normal(0, 0.05, 50)))


def failed(outcome: GxOutcome) -> set[str]:
    return {f.expectation for f in outcome.failures}


def test_step_times_pass_under_limit():
    o = validate_step_times(STEPS, min_rows=50, median_limit_ms=12.0)
    assert o.success and o.failures == []
    assert o.result_json["statistics"]["evaluated_expectations"] == 5
    json.dumps(o.model_dump(mode="json"))  # XCom-safe


def test_median_over_limit_fails_naming_expectation_and_value():
    slow = [s * 1.5 for s in STEPS]
    o = validate_step_times(slow, min_rows=50, median_limit_ms=12.0)
    assert not o.success
    assert failed(o) == {"expect_column_median_to_be_between", "expect_column_values_to_be_between"}
    med = next(f for f in o.failures if f.expectation == "expect_column_median_to_be_between")
    assert med.column == "step_time_ms" and med.kwargs["max_value"] == 12.0 and med.is_limit
    assert med.observed_value == pytest.approx(float(np.median(slow)))
    assert "expect_column_median_to_be_between" in med.text and f"{med.observed_value!r}" in med.text


def test_limit_is_a_suite_parameter():
    exps = step_time_expectations(50, with_limit=True)
    assert [e.max_value for e in exps[-2:]] == [{"$PARAMETER": "median_limit_ms"}] * 2
    assert validate_step_times(STEPS, min_rows=50, median_limit_ms=9.0).success is False  # same suite, new limit


def test_mostly_tolerates_a_few_slow_steps():
    steps = [10.0] * 46 + [50.0] * 4  # 8% slow outliers, median unchanged
    assert validate_step_times(steps, min_rows=50, median_limit_ms=12.0, mostly=0.9).success
    o = validate_step_times(steps, min_rows=50, median_limit_ms=12.0, mostly=0.95)
    assert failed(o) == {"expect_column_values_to_be_between"} and "4 of 50" in o.failures[0].text


def test_no_baseline_skips_limits_but_checks_data():
    o = validate_step_times([10.0, None, -1.0, float("nan")], min_rows=50, median_limit_ms=None)
    assert o.result_json["statistics"]["evaluated_expectations"] == 3
    assert failed(o) == {"expect_table_row_count_to_be_between", "expect_column_values_to_not_be_null",
                         "expect_column_values_to_be_between"}
    rows = next(f for f in o.failures if f.expectation == "expect_table_row_count_to_be_between")
    assert rows.observed_value == 4 and "observed 4" in rows.text
    assert not any(f.is_limit for f in o.failures)


@pytest.mark.parametrize(("kwargs", "match"), [({"min_rows": -1, "median_limit_ms": None}, "min_rows"),
                                               ({"min_rows": 5, "median_limit_ms": 0.0}, "median_limit_ms"),
                                               ({"min_rows": 5, "median_limit_ms": 1.0, "mostly": 0}, "mostly")])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        validate_step_times(STEPS, **kwargs)


def op_table(**over):
    d = {"op_name": ["conv", "matmul"], "op_type": ["Conv2D", "MatMul"], "total_self_time_us": [120.0, 80.0],
         "occurrences": [16, 16]}
    return pd.DataFrame({**d, **over})


def test_op_table():
    assert validate_op_table(op_table()).success
    o = validate_op_table(op_table(total_self_time_us=[120.0, -5.0]))
    assert [(f.expectation, f.column) for f in o.failures] == [("expect_column_values_to_be_between",
                                                                "total_self_time_us")]
    assert "-5.0" in o.failures[0].text
    assert "expect_table_row_count_to_be_between" in failed(validate_op_table(op_table().iloc[:0]))
    missing = validate_op_table(op_table().drop(columns=["occurrences"]))
    assert {(f.expectation, f.column) for f in missing.failures} == {("expect_column_to_exist", "occurrences")}


def test_render_data_docs_only_under_target(tmp_path):
    ok = validate_step_times(STEPS, min_rows=50, median_limit_ms=12.0)
    bad = validate_op_table(op_table(total_self_time_us=[1.0, -1.0]))
    index = render_data_docs({"nightly step times": ok, "ops": bad.result_json}, tmp_path / "docs")
    assert index == (tmp_path / "docs" / "index.html").resolve() and index.is_file()
    pages = sorted(p.relative_to(tmp_path / "docs").parts[:3] for p in (tmp_path / "docs").rglob("*.html")
                   if p.name != "index.html")
    assert pages == [("validations", "perfwatch_op_table", "ops"),
                     ("validations", "perfwatch_step_times", "nightly_step_times")]
    assert [p.name for p in tmp_path.iterdir()] == ["docs"]
    page = next((tmp_path / "docs" / "validations" / "perfwatch_op_table").rglob("*.html")).read_text()
    assert "total_self_time_us" in page and "Failed" in page
    with pytest.raises(ValueError, match="outcomes"):
        render_data_docs({}, tmp_path)
    with pytest.raises(ValueError, match=r"outcomes\['x'\]"):
        render_data_docs({"x": 42}, tmp_path)
