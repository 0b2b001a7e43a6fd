"""Scenario cases (``Case.scenario``): each scenario and rate has its own case name (so its own history), the
names read back, what does not fit is refused by name, and the profiled run plans a server point from the
percentile's needs (``tasks.stages.profiled_run.scenario_options``)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.analysis import percentiles
from tasks.matrix import expand_entry
from tasks.records import Case, WarmupRecord, check_case_name
from tasks.runner import loadgen
from tasks.stages.params import case_param_schema
from tasks.stages.profiled_run import SEARCH_MAX_POINTS, measured_steps, scenario_options, server_queries


def infer(**kw) -> Case:
    return Case(model="m", mode="infer", batch_size=4, **kw)


def test_every_scenario_and_rate_is_its_own_case_and_its_name_reads_back():
    cases = [
        infer(),
        infer(scenario="offline"),
        infer(scenario="server", target_qps=50),
        infer(scenario="server", target_qps=12.5),
        infer(scenario="server", search_qps=True, latency_bound_ms=20),
        infer(scenario="server", search_qps=True, latency_bound_ms=20, latency_percentile=90),
    ]
    names = [c.name for c in cases]
    assert names == [
        "infer-bs4",  # single-stream is today's infer: the same name, the same history
        "infer-bs4-offline",
        "infer-bs4-server-q50",
        "infer-bs4-server-q12.5",
        "infer-bs4-server-search-b20ms",
        "infer-bs4-server-search-p90b20ms",
    ]
    for n in names:
        assert check_case_name(n) == n
    with pytest.raises(ValueError, match="not <mode>"):
        check_case_name("infer-bs4-server-fast")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"mode": "train", "scenario": "offline"}, "applies to modes 'infer' and 'tflite'"),
        ({"mode": "infer", "scenario": "server"}, "needs target_qps"),
        ({"mode": "infer", "target_qps": 5}, "applies to scenario 'server' only"),
        ({"mode": "infer", "scenario": "server", "search_qps": True}, "search_qps needs latency_bound_ms"),
        ({"mode": "infer", "scenario": "offline", "latency_bound_ms": 5}, "does not apply to scenario 'offline'"),
        ({"mode": "infer", "scenario": "server", "target_qps": 0}, "greater than or equal to 0.01"),
    ],
)
def test_what_does_not_fit_a_scenario_is_refused_by_name(kw, message):
    with pytest.raises(ValidationError, match=message):
        Case(model="m", **kw)


def test_the_scenario_fields_are_dag_params_and_a_matrix_axis():
    params = case_param_schema("dag")
    assert {"scenario", "target_qps", "search_qps", "latency_bound_ms", "latency_percentile"} <= set(params)
    assert params["scenario"]["enum"] == ["single-stream", "offline", "server"]
    cases = expand_entry({"model": "m", "mode": "infer", "matrix": {"scenario": ["single-stream", "offline"]}})
    assert [c.name for c in cases] == ["infer-bs16", "infer-bs16-offline"]


def test_a_server_point_issues_what_its_percentile_needs_and_a_search_starts_at_half_capacity():
    warm = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=9.0, step_times_ms=[8.0] * 5, wall_s=0)
    opts, _, _ = scenario_options(infer(scenario="server", target_qps=50, measured_steps=100), warm)
    assert opts["queries"] == percentiles.min_samples(99) == 299 and opts["target_qps"] == 50
    assert opts["upper_rank"] == percentiles.percentile_ci(list(range(299)), 99).high_rank
    opts, worst_s, steps = scenario_options(
        infer(scenario="server", search_qps=True, latency_bound_ms=30, measured_steps=400), warm
    )
    assert opts["target_qps"] == 0.5 * 4 / 0.008 and opts["search"] and opts["queries"] == 400
    points = SEARCH_MAX_POINTS + loadgen.CONFIRM_POINTS  # the bisection and its confirmation's re-measures
    assert opts["search_max_points"] == SEARCH_MAX_POINTS and steps == 400 * 2**10 * points
    lowest = 250 / 2 ** (SEARCH_MAX_POINTS - 1)
    assert worst_s == pytest.approx(
        sum(max(400 / (250 / 2**i), 2.0) for i in range(SEARCH_MAX_POINTS)) + loadgen.CONFIRM_POINTS * 400 / lowest
    )
    # a point lasts at least server_min_duration_s (1 s): its query counts and their upper-bound ranks
    assert opts["min_point_s"] == 1.0 and sorted(opts["upper_ranks"])[:3] == [400, 800, 1600]
    assert opts["upper_ranks"][800] == percentiles.percentile_ci(list(range(800)), 99).high_rank
    assert scenario_options(Case(model="m"), warm) == ({}, 0.0, 320)


def test_a_bound_raises_the_steps_to_what_its_percentile_needs_as_a_server_point_does():
    """The audit: a single-stream run of 100 batches with a 50 ms bound could only say "not estimable"; a bound
    asks for the batches its percentile's interval needs (299 for p99), as a server point issues them."""
    assert measured_steps(infer(measured_steps=100, latency_bound_ms=50)) == percentiles.min_samples(99) == 299
    assert measured_steps(infer(measured_steps=100, latency_bound_ms=50, latency_percentile=90)) == 100  # p90: 29
    assert measured_steps(infer(measured_steps=100)) == 100  # no bound, nothing to judge
    assert measured_steps(infer(measured_steps=100, scenario="offline")) == 100
    warm = WarmupRecord(warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=9.0, step_times_ms=[8.0] * 5, wall_s=0)
    assert scenario_options(infer(measured_steps=100, latency_bound_ms=50), warm)[2] == 299


def test_a_server_tail_gate_issues_the_per_query_samples_its_test_needs():
    from tasks.analysis.tail import min_arm_samples

    plain = infer(scenario="server", target_qps=50, measured_steps=100)
    gated = infer(scenario="server", target_qps=50, measured_steps=100, gate_percentile=99, paired=True)
    assert server_queries(plain) == 299
    assert server_queries(gated) == min_arm_samples(99, gated.confidence) == 528
