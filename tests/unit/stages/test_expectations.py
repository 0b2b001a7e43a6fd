"""Great Expectations suites of tasks.stages.expectations (GX Core 1.x, ephemeral contexts)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tasks.analysis.stats import verdict_from_ci
from tasks.stages.expectations import (
    GatedFigure,
    GxOutcome,
    render_data_docs,
    step_time_expectations,
    validate_gated_figures,
    validate_op_table,
    validate_step_times,
    validate_verdict,
    verdict_expectations,
)

STEPS = list(10.0 * np.exp(np.random.default_rng(0).normal(0, 0.05, 50)))


def failed(outcome: GxOutcome) -> set[str]:
    return {f.expectation for f in outcome.failures}


def test_step_times_pass_their_data_quality_suite():
    o = validate_step_times(STEPS, min_rows=50)
    assert o.success and o.failures == []
    assert o.result_json["statistics"]["evaluated_expectations"] == 3
    json.dumps(o.model_dump(mode="json"))  # XCom-safe


def test_no_per_step_threshold_can_fail_the_samples():
    """A fraction of single steps over a line is not a test of a median: steps that are all 50% slower, or
    a quarter of them 5x slower (load spikes), are still sound data; only the result table judges speed."""
    assert validate_step_times([s * 1.5 for s in STEPS], min_rows=50).success
    assert validate_step_times(STEPS[:37] + [s * 5 for s in STEPS[37:]], min_rows=50).success
    assert not any("median" in type(e).__name__.lower() for e in step_time_expectations(50))


def test_bad_samples_fail_naming_expectation_and_value():
    o = validate_step_times([10.0, None, -1.0, float("nan")], min_rows=50)
    assert o.result_json["statistics"]["evaluated_expectations"] == 3
    assert failed(o) == {
        "expect_table_row_count_to_be_between",
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_between",
    }
    rows = next(f for f in o.failures if f.expectation == "expect_table_row_count_to_be_between")
    assert rows.observed_value == 4 and "observed 4" in rows.text
    assert not any(f.is_limit for f in o.failures)


def test_bad_arguments():
    with pytest.raises(ValueError, match="min_rows"):
        validate_step_times(STEPS, min_rows=-1)
    with pytest.raises(ValueError, match="tolerance"):
        validate_verdict(1.0, 0.9, 1.1, tolerance=0.0)


@pytest.mark.parametrize(
    ("low", "high", "busy"),
    [
        (0.97, 1.03, False),
        (1.01, 1.04, False),
        (1.01, 1.08, False),
        (1.06, 1.10, False),
        (0.90, 0.99, False),
        (0.97, 1.07, False),
        (0.93, 1.03, False),
        (1.00, 1.08, False),
        (1.01, 1.08, True),
        (1.30, 1.50, True),
    ],
)
def test_threshold_expectation_fails_exactly_for_a_regression(low, high, busy):
    """GX enforces the threshold on the interval: it fails where (and only where) the verdict rule says
    regression and the host was quiet; a busy host's interval is not tested (the verdict is inconclusive)."""
    ratio = (low * high) ** 0.5
    o = validate_verdict(ratio, low, high, tolerance=0.05, host_busy=busy)
    regression = verdict_from_ci(low, high, 0.05) == "regression" and not busy
    assert o.success is (not regression)
    if regression:
        (f,) = o.failures
        assert f.is_limit and f.column == "ci_high" and f.kwargs["max_value"] == pytest.approx(1.05)
        assert f"[{high}]" in f.text


@pytest.mark.slow  # 40 Great Expectations validations
def test_threshold_agrees_with_the_verdict_rule_on_random_intervals():
    rng = np.random.default_rng(9)
    for _ in range(40):
        low = float(np.exp(rng.normal(0.0, 0.06)))
        high = low * float(np.exp(abs(rng.normal(0.0, 0.06))))
        o = validate_verdict(low, low, high, tolerance=0.05)
        assert o.success is (verdict_from_ci(low, high, 0.05) != "regression"), (low, high)


def test_threshold_is_a_suite_parameter():
    exps = verdict_expectations()
    (limit,) = [e for e in exps if (e.meta or {}).get("perfwatch") == "limit"]
    assert limit.max_value == {"$PARAMETER": "threshold_ratio"}
    assert not validate_verdict(1.07, 1.02, 1.09, tolerance=0.05).success
    assert validate_verdict(1.07, 1.02, 1.09, tolerance=0.10).success  # same suite, another threshold


def test_unsound_result_table_is_a_data_quality_failure():
    o = validate_verdict(1.0, 1.02, 1.05, tolerance=0.05)  # ratio below its own interval
    assert failed(o) == {"expect_column_pair_values_a_to_be_greater_than_b"}
    assert not any(f.is_limit for f in o.failures)
    o = validate_verdict(float("nan"), 0.9, 1.1, tolerance=0.05)
    assert "expect_column_values_to_not_be_null" in failed(o)


def op_table(**over):
    d = {
        "op_name": ["conv", "matmul"],
        "op_type": ["Conv2D", "MatMul"],
        "total_self_time_us": [120.0, 80.0],
        "occurrences": [16, 16],
    }
    return pd.DataFrame({**d, **over})


def test_op_table():
    assert validate_op_table(op_table()).success
    o = validate_op_table(op_table(total_self_time_us=[120.0, -5.0]))
    assert [(f.expectation, f.column) for f in o.failures] == [
        ("expect_column_values_to_be_between", "total_self_time_us")
    ]
    assert "-5.0" in o.failures[0].text
    assert "expect_table_row_count_to_be_between" in failed(validate_op_table(op_table().iloc[:0]))
    missing = validate_op_table(op_table().drop(columns=["occurrences"]))
    assert {(f.expectation, f.column) for f in missing.failures} == {("expect_column_to_exist", "occurrences")}


def test_render_data_docs_only_under_target(tmp_path):
    ok = validate_step_times(STEPS, min_rows=50)
    bad = validate_op_table(op_table(total_self_time_us=[1.0, -1.0]))
    verdict = validate_verdict(1.07, 1.02, 1.09, tolerance=0.05)
    index = render_data_docs({"nightly step times": ok, "ops": bad.result_json, "verdict": verdict}, tmp_path / "docs")
    assert index == (tmp_path / "docs" / "index.html").resolve() and index.is_file()
    pages = sorted(
        (p.relative_to(tmp_path / "docs").parts[1], p.stem)  # validations/<suite>/<run>/<time>/<name>
        for p in (tmp_path / "docs" / "validations").rglob("*.html")
    )
    assert pages == [
        ("perfwatch_op_table", "ops"),
        ("perfwatch_step_times", "nightly_step_times"),
        ("perfwatch_verdict", "verdict"),
    ]
    page = next((tmp_path / "docs" / "validations" / "perfwatch_verdict").rglob("*.html")).read_text()
    assert "ci_high" in page and "Failed" in page
    assert [p.name for p in tmp_path.iterdir()] == ["docs"]
    page = next((tmp_path / "docs" / "validations" / "perfwatch_op_table").rglob("*.html")).read_text()
    assert "total_self_time_us" in page and "Failed" in page
    with pytest.raises(ValueError, match="outcomes"):
        render_data_docs({}, tmp_path)
    with pytest.raises(ValueError, match=r"outcomes\['x'\]"):
        render_data_docs({"x": 42}, tmp_path)


def test_baseline_compare_logs_no_great_expectations_chatter_at_info(db_url, tmp_path, caplog):
    """Issue 35: at INFO, the level an Airflow task logs at, GX said "Created temporary directory ... for
    ephemeral docs site" and "Loading 'datasources' -> []" for every data context of a baseline_compare; its
    warnings would still show, its chatter not."""
    import logging

    from tasks.stages.compare import baseline_compare
    from tests.helpers.builders import make_records

    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="gx")
    caplog.set_level(logging.INFO)
    baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "gx" / "work")
    chatter = [r.getMessage() for r in caplog.records if r.name.startswith("great_expectations")]
    assert chatter == []
    assert logging.getLogger("great_expectations").isEnabledFor(logging.WARNING)


@pytest.mark.slow  # a fresh interpreter importing GX (seconds)
def test_importing_great_expectations_through_the_stage_logs_nothing_at_info():
    """GX's import logged 214 lines at INFO ("Skipping registering function ... because it is a closure"): the
    level is set on GX's logger before GX is imported."""
    import subprocess
    import sys

    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(name)s %(message)s')\n"
        "from tasks.stages import expectations\n"
        "expectations.validate_op_table(__import__('pandas').DataFrame({'op_name': ['a'], 'op_type': ['A'], "
        "'total_self_time_us': [1.0], 'occurrences': [1]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert [ln for ln in out.stdout.splitlines() if ln.startswith("great_expectations")] == []


def test_each_gated_figure_has_its_own_threshold_which_fails_exactly_for_its_regression():
    """Issue 38 item 1: "Great Expectations suites carry the thresholds, so Data Docs show every metric's check".
    One row per figure the case gates; each figure's threshold is its own expectation (its own suite parameter),
    failing where the verdict rule says regression on it and the figure is judged (a wall-time figure on a busy
    host is not), so the failure names the figure."""
    cases = [  # (ci_low, ci_high, tolerance, judged)
        (0.8, 1.4, 0.5, True),  # undecided
        (1.1, 1.8, 0.5, True),  # regression
        (1.1, 1.8, 0.5, False),  # regression, but not judged here
        (1.05, 1.15, 0.2, True),  # larger, within the band
        (1.25, 1.4, 0.2, True),  # regression
    ]
    for i, (low, high, tol, judged) in enumerate(cases):
        rows = [
            GatedFigure(
                figure="cold_step_ms", ratio=(low * high) ** 0.5, ci_low=low, ci_high=high, tolerance=tol, judged=judged
            ),
            GatedFigure(figure="model_rss_bytes", ratio=1.0, ci_low=0.95, ci_high=1.05, tolerance=0.2, judged=True),
        ]
        o = validate_gated_figures(rows)
        regression = verdict_from_ci(low, high, tol) == "regression" and judged
        assert o.success is (not regression), (i, [f.text for f in o.failures])
        if regression:
            (f,) = o.failures
            assert f.is_limit and f.kwargs["max_value"] == pytest.approx(1 + tol)
            assert "cold_step_ms" in json.dumps(f.kwargs["row_condition"])
    names = [r.get("expectation_config", {}).get("meta", {}).get("figure") for r in o.result_json["results"]]
    assert {"cold_step_ms", "model_rss_bytes"} <= set(names)  # Data Docs list each figure's check
    with pytest.raises(ValueError, match="each figure once"):
        validate_gated_figures(rows + rows[:1])
    with pytest.raises(ValueError, match="at least one"):
        validate_gated_figures([])
