"""A server run's data-quality expectations count what the scenario issues (issue 27's audit): its step samples
are batches, as many as the arrivals' bunching made them, and its queries are validated on their own."""

from __future__ import annotations

import math

import pytest

from tasks.stages.compare import MeasurementRejected, baseline_compare
from tasks.stages.profiled_run import server_queries
from tests.helpers.builders import server_points, server_run_records


def test_a_fixed_rate_run_whose_queries_share_batches_is_validated_not_rejected(db_url, tmp_path):
    """320 queries at 300 q/s, 8-12 ms a batch of up to 4: queues form, so fewer batches than queries (and than
    measured_steps); main rejected this run ("expect_table_row_count ... min_value=320 ... observed" the batches)."""
    points = server_points([(300.0, 0.008)], n=320)
    batches = len(points[0]["service_ms"])
    assert batches < 320  # the case this test is about
    ctx, _, env, _, run, parsed, _ = server_run_records(tmp_path, "fixed", points, measured_steps=320)
    verdict = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "fixed" / "work")
    assert verdict.verdict == "no-baseline"
    assert verdict.evidence["gx"]["step_times"] == {"success": True, "failures": 0}
    assert verdict.evidence["gx"]["query_latencies"] == {"success": True, "failures": 0}
    assert server_queries(ctx.case) == 320 and batches >= math.ceil(320 / ctx.case.batch_size)


def test_a_point_with_fewer_queries_than_the_case_issues_is_rejected_by_name(db_url, tmp_path):
    """The case issues 299 queries a point at least (p99 at 95%); a result holding 200 lost some: the per-query
    suite names its column and what it observed, and the run is not judged."""
    points = server_points([(50.0, 0.004)], n=200)
    ctx, _, env, _, run, parsed, _ = server_run_records(tmp_path, "short", points)
    assert server_queries(ctx.case) == 299
    with pytest.raises(
        MeasurementRejected, match=r"expect_table_row_count_to_be_between \(min_value=299\).*observed 200"
    ):
        baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "short" / "work")
