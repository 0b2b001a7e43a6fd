"""Numbers that agree with themselves (``tasks.analysis.serving``): per scenario, a record whose throughput,
latency, batch size and rate fit passes its checks, and one where they do not fails them."""

from __future__ import annotations

import pytest

from tasks.analysis import percentiles, serving
from tests.helpers import builders


def server_point(qps: float, service_s: float = 0.004, batch_size: int = 2, n: int = 400, seed: int = 0) -> dict:
    """A server point as the runner writes it (``ServerPoint`` fields), each batch ``service_s`` on a simulated
    clock (``tests.helpers.builders.server_point``)."""
    return builders.server_point(qps, service_s, batch_size=batch_size, n=n, seed=seed, spread=1.0)


def failed(checks: list[dict]) -> set[str]:
    return {c["check"] for c in checks if not c["ok"]}


def test_single_stream_throughput_times_median_latency_is_the_batch():
    times = [10.0, 10.5, 9.5, 10.2, 9.8] * 20
    lat = percentiles.with_intervals({"p50": 10.0, "throughput_eps": 8 * len(times) / (sum(times) / 1000)}, times)
    assert failed(serving.single_stream_checks(lat, 8)) == set()
    skewed = {"p50": 10.0, "throughput_eps": 8 / 0.030}  # a mean 3x the median: examples/s at the median misleads
    assert failed(serving.single_stream_checks(skewed, 8)) == {"throughput_x_latency"}
    assert failed(serving.single_stream_checks(lat, 4)) == {"throughput_x_latency"}  # the wrong batch size


def test_offline_intervals_cover_the_run_and_offline_is_not_slower_than_single_stream():
    intervals = [5.0] * 100
    assert failed(serving.offline_checks({"wall_s": 0.505, "examples": 800}, intervals)) == set()
    assert failed(serving.offline_checks({"wall_s": 1.0, "examples": 800}, intervals)) == {"intervals_cover_run"}
    assert serving.offline_vs_single_stream(1580.0, 1600.0)["ok"]
    assert not serving.offline_vs_single_stream(1200.0, 1600.0)["ok"]


def test_a_server_under_capacity_achieves_its_target_and_every_latency_covers_its_service():
    point = server_point(200.0)  # capacity 2 / 4 ms = 500 q/s
    checks = serving.server_checks(point, 2)
    names = {c["check"] for c in checks}
    assert names == {"queries_served", "issued_rate", "achieved_rate", "latency_at_least_service", "littles_law"}
    assert failed(checks) == set()


def test_a_server_record_that_disagrees_with_itself_fails_its_checks():
    point = server_point(200.0)
    assert failed(serving.server_checks({**point, "target_qps": 400.0}, 2)) >= {"issued_rate", "achieved_rate"}
    short = {**point, "latency_ms": [x - 3.0 for x in point["latency_ms"]]}  # less than the 4 ms service
    assert failed(serving.server_checks(short, 2)) == {"latency_at_least_service", "littles_law"}
    lost = {**point, "batch_queries": point["batch_queries"][:-1], "service_ms": point["service_ms"][:-1]}
    assert "queries_served" in failed(serving.server_checks(lost, 2))


def test_over_capacity_the_achieved_rate_is_not_held_to_the_target():
    point = server_point(900.0)  # capacity 500 q/s: the queue grows
    assert point["achieved_qps"] < 600
    checks = serving.server_checks(point, 2)
    assert "achieved_rate" not in {c["check"] for c in checks} and failed(checks) == set()


def test_a_mixed_precision_case_must_have_computed_in_its_type():
    assert failed(serving.precision_checks("mixed_float16", ["float16", "float32"])) == set()
    assert failed(serving.precision_checks("mixed_bfloat16", ["float32"])) == {"compute_dtype"}
    assert serving.precision_checks("fp32", ["float32"]) == [] == serving.precision_checks("mixed_float16", None)


def test_a_point_needs_the_queries_of_its_percentile_and_its_rank_is_the_intervals():
    assert serving.queries_per_point(100, 99) == percentiles.min_samples(99) == 299
    assert serving.queries_per_point(1000, 99) == 1000
    assert serving.upper_rank(320, 99) == percentiles.percentile_ci(list(range(320)), 99).high_rank
    assert serving.upper_rank(100, 99) is None  # too short to bound p99
    assert serving.capacity_qps(4, 8.0) == 500.0


def test_an_overloaded_server_point_is_invalid_and_its_percentiles_are_no_result():
    """900 q/s against a capacity of 500: the queue grows for the whole run, so its p99 grows with the run's
    length. With a bound every latency is within, the point would read ``met``; it reads ``invalid`` instead, its
    percentiles are not printed as results, and a search does not take it as its max."""
    from tasks.cli.figures import latency_lead, p99_cell, serving_texts

    over = server_point(900.0)
    record = {"scenario": "server", "wall_s": over["duration_s"], "examples": 0, "points": [over]}
    s = serving.summarize(record, {}, [], batch_size=2, percentile=99, bound_ms=1e6)
    assert s["outcome"] == "invalid" and s["met"] is False and s["invalid"].startswith("the queue grew")
    assert s["points"][0]["backlog_growth"] == pytest.approx(0.8, abs=0.15)  # rho 1.8: waits grow 0.8 s per s
    line = serving.summary_line(s)
    assert "INVALID, the queue grew" in line and "p99 per query" not in line
    assert "INVALID" in serving.serving_text(s)[0] and "per query" not in serving.serving_text(s)[0]
    assert "not judged, the point is invalid" in serving.bound_text(s)
    cells = serving_texts(s)["points"][0]
    assert cells["outcome"] == "invalid" and cells["p99"].startswith("— (invalid")
    assert latency_lead({"serving": s}) == "latency: none, the point is invalid (its queue grew through the run)"
    assert p99_cell({"server_queries": 400, "server_invalid": s["invalid"]}) == "invalid (the queue grew)"
    under = serving.summarize(
        {**record, "points": [server_point(200.0)]}, {}, [], batch_size=2, percentile=99, bound_ms=1e6
    )
    assert under["invalid"] is None and under["outcome"] == "met"
    points = [server_point(q, seed=i) for i, q in enumerate((100.0, 200.0, 900.0))]
    search = serving.summarize(
        {**record, "points": points, "search": True}, {}, [], batch_size=2, percentile=99, bound_ms=1e6
    )
    assert search["max_qps_target"] == 200.0 and [p["outcome"] for p in search["points"]] == ["met", "met", "invalid"]


def test_a_search_reports_every_point_and_the_highest_rate_that_met():
    points = [server_point(q, seed=i) for i, q in enumerate((100.0, 200.0, 450.0, 950.0))]
    record = {"scenario": "server", "wall_s": 9.0, "examples": 0, "points": points, "search": True}
    s = serving.summarize(record, {}, [], batch_size=2, percentile=99, bound_ms=15.0)
    assert [p["target_qps"] for p in s["points"]] == [100.0, 200.0, 450.0, 950.0]
    met = [p["target_qps"] for p in s["points"] if p["met"]]
    assert met and s["max_qps"] == max(met) == s["target_qps"] and 950.0 not in met
    for p in s["points"]:  # met is the interval's upper bound against the bound
        high = percentiles.percentile_ci(points[s["points"].index(p)]["latency_ms"], 99).high
        assert p["upper_ms"] == high and p["met"] == (high <= 15.0)
    assert any("max QPS" in line for line in serving.serving_text(s))


def test_a_server_runs_headline_throughput_is_the_rate_it_achieved():
    # the user's report: --scenario server --target-qps 100 printed "1946.6 examples/s at the median" (the batches'
    # service rate, batch_size / median service time) while the server achieved 86.1 q/s
    s = serving.summarize(
        {"scenario": "server", "wall_s": 4.0, "examples": 0, "points": [server_point(100.0, batch_size=4)]},
        {},
        [],
        batch_size=4,
        percentile=99,
        bound_ms=None,
    )
    text = serving.server_throughput_text(s, 1946.6)
    achieved = s["achieved_qps"]
    assert s["throughput_eps"] == achieved == s["points"][0]["achieved_qps"] and 70 < achieved < 130
    assert text == (
        f"{achieved:.1f} queries/s achieved ({achieved:.1f} examples/s) at 100 q/s offered (issued 100); "
        "service rate 1946.6 examples/s at the median batch"
    )
    assert (
        serving.server_throughput_text(s)
        == f"{achieved:.1f} queries/s achieved ({achieved:.1f} examples/s) at 100 q/s offered (issued 100)"
    )
    points = [server_point(q, seed=i) for i, q in enumerate((100.0, 200.0, 950.0))]
    search = serving.summarize(
        {"scenario": "server", "wall_s": 9.0, "examples": 0, "points": points, "search": True},
        {},
        [],
        batch_size=2,
        percentile=99,
        bound_ms=15.0,
    )
    assert f"at {search['max_qps_target']:.4g} q/s offered (issued {search['max_qps']:.4g}), the max QPS" in (
        serving.server_throughput_text(search)
    )


def test_the_schedule_issues_its_target_rate_or_the_check_says_so():
    """The audit: the issued_rate check passed with a +-13.5-19% Poisson tolerance while seed 0 issued 43.3 q/s at
    "50 q/s offered". The schedule is scaled to the target now, so the check holds it to rounding."""
    point = server_point(50.0, n=299)
    assert point["issued_qps"] == pytest.approx(50.0, rel=1e-12)
    assert failed(serving.server_checks(point, 2)) == set()
    drawn = {**point, "issued_qps": 43.3}  # an unscaled draw's rate
    assert failed(serving.server_checks(drawn, 2)) == {"issued_rate"}


def test_littles_law_holds_on_the_timestamps_and_catches_a_latency_that_does_not():
    """L = lambda W: the time-average number in the system, counted from the arrivals and the batches'
    completions, against the achieved rate times the mean latency; a latency timed from the batch's start (the
    queueing left out) breaks it, as does a completion credited to the wrong batch."""
    point = server_point(400.0, n=2000)  # rho 0.8 of the 500 q/s capacity: queues form
    little = serving.littles_law_check(point)
    assert little is not None and little["ok"], little
    no_queue = {**point, "latency_ms": [w - q for w, q in zip(point["latency_ms"], point["queue_ms"], strict=True)]}
    assert not serving.littles_law_check(no_queue)["ok"]
    shifted = {**point, "done_s": [*point["done_s"][1:], point["done_s"][-1]]}  # each batch given the next's time
    assert not serving.littles_law_check(shifted)["ok"]
    assert serving.littles_law_check({**point, "arrivals_s": [], "done_s": []}) is None  # stored before timestamps
    assert "littles_law" in failed(serving.server_checks(no_queue, 2))


def test_a_single_stream_run_too_short_for_its_bound_says_not_estimable():
    """The audit: 100 batches, every one <= 14.78 ms, said "p99's 95% upper bound missed within 50 ms"."""
    times = [14.78 - 0.01 * i for i in range(100)]
    lat = percentiles.with_intervals({"p50": 14.3, "throughput_eps": 4 * 100 / (sum(times) / 1000)}, times)
    s = serving.summarize(
        {"scenario": "single-stream", "wall_s": 1.5, "examples": 400},
        lat,
        times,
        batch_size=4,
        percentile=99,
        bound_ms=50.0,
    )
    assert s["outcome"] == "not estimable" and s["met"] is False and s["upper_ms"] is None
    text = serving.serving_text(s)[0]
    assert "p99's 95% upper bound within 50 ms: not estimable (needs 299 batches, have 100)" in text
    assert "missed" not in text
    enough = [10.0] * 320
    lat = percentiles.with_intervals({"p50": 10.0, "throughput_eps": 400.0}, enough)
    s = serving.summarize(
        {"scenario": "single-stream", "wall_s": 3.2, "examples": 1280},
        lat,
        enough,
        batch_size=4,
        percentile=99,
        bound_ms=50.0,
    )
    assert s["outcome"] == "met" and "p99's 95% upper bound met within 50 ms" in serving.serving_text(s)[0]


def summary_point(qps: float, met: bool, upper: float, other: float = 0.1, load: float = 1.0) -> dict:
    return {
        "target_qps": qps,
        "issued_qps": qps,
        "met": met,
        "outcome": "met" if met else "missed",
        "upper_ms": upper,
        "host_load": {"other_cpu_share": other, "load1_start": load},
    }


def test_a_non_monotonic_search_is_said_so_and_its_max_is_the_rate_below_which_every_rate_met():
    """The audit: 314.8 q/s missed (p99 79.7 ms) while 377.8 q/s read 67 ms and met; the host's load changed."""
    points = [
        summary_point(299.1, True, 40.0, other=0.15, load=2.0),
        summary_point(598.2, False, 300.0, other=0.20),
        summary_point(448.7, False, 120.0, other=0.22),
        summary_point(314.8, False, 79.7, other=0.80, load=6.0),  # a busy minute
        summary_point(377.8, True, 67.0, other=0.30),
    ]
    codes = {f.code for f in serving.search_findings(points, 99)}
    assert codes == {"search_non_monotonic", "search_host_load_changed"}
    text = next(f.message for f in serving.search_findings(points, 99) if f.code == "search_non_monotonic")
    assert "314.8 q/s missed (p99 upper bound 79.70 ms) below 377.8 q/s that met (67.00 ms)" in text
    assert serving.consistent_max(points)["target_qps"] == 299.1  # not 377.8: a rate between missed
    monotone = [summary_point(100.0, True, 5.0), summary_point(200.0, True, 9.0), summary_point(400.0, False, 60.0)]
    assert serving.search_findings(monotone, 99) == [] and serving.consistent_max(monotone)["target_qps"] == 200.0


def test_a_re_measure_that_disagrees_caps_the_max_below_the_rate():
    points = [
        summary_point(100.0, True, 5.0),
        summary_point(200.0, True, 9.0),
        summary_point(400.0, False, 60.0),
        summary_point(300.0, True, 40.0),
        summary_point(350.0, False, 55.0),
        summary_point(300.0, False, 52.0),
        summary_point(350.0, False, 58.0),  # the confirmation: 300 missed now
    ]
    findings = serving.search_findings(points, 99)
    assert [f.code for f in findings] == ["search_unconfirmed"] and "300 q/s re-measured" in findings[0].message
    assert serving.consistent_max(points)["target_qps"] == 200.0
    confirmed = [*points[:5], summary_point(300.0, True, 45.0), summary_point(350.0, False, 58.0)]
    best = serving.consistent_max(confirmed)
    assert best["target_qps"] == 300.0 and best["upper_ms"] == 45.0  # the less favourable of its two measures


def test_a_search_states_its_max_as_the_rate_issued_with_its_per_query_percentile():
    points = [server_point(q, seed=i) for i, q in enumerate((100.0, 200.0, 400.0, 300.0, 350.0, 300.0, 350.0))]
    record = {"scenario": "server", "wall_s": 9.0, "examples": 0, "points": points, "search": True}
    s = serving.summarize(record, {}, [], batch_size=2, percentile=99, bound_ms=15.0)
    assert s["max_qps"] == s["issued_qps"] and s["max_qps_target"] == s["target_qps"]
    line = serving.summary_line(s, 2)
    assert line.startswith(f"server search (batch 2): max QPS {s['max_qps']:.4g} q/s issued")
    assert "p99 per query" in line


def test_a_summary_stored_before_these_fields_still_reads():
    """A search stored before the max's nominal rate, the outcome and the upper bound's needs were kept."""
    points = [server_point(q, seed=i) for i, q in enumerate((100.0, 200.0, 950.0))]
    record = {"scenario": "server", "wall_s": 9.0, "examples": 0, "points": points, "search": True}
    s = serving.summarize(record, {}, [], batch_size=2, percentile=99, bound_ms=15.0)
    old = {k: v for k, v in s.items() if k not in ("max_qps_target", "upper_needs", "outcome", "point_index")}
    old["points"] = [{k: v for k, v in p.items() if k != "outcome"} for p in s["points"]]
    assert serving.summary_line(old).startswith(f"server search: max QPS {s['max_qps']:.4g} q/s issued")
    assert any(line.startswith("server 100 q/s offered") for line in serving.serving_text(old))


def test_a_search_whose_bound_is_below_the_service_time_says_no_rate_can_meet_it():
    """A 4 ms bound on 5 ms batches: even unqueued, every query takes 5 ms. The answer says so and why the search
    stopped; a bound the service time is within but the queueing broke says only that none of the rates met."""
    points = [server_point(200.0, service_s=0.005)]
    search = serving.summarize(
        {"scenario": "server", "wall_s": 2.0, "examples": 0, "points": points, "search": True},
        {},
        [],
        batch_size=2,
        percentile=99,
        bound_ms=4.0,
    )
    assert search["max_qps"] is None and search["points"][0]["floor_upper_ms"] == pytest.approx(5.0)
    text = serving.max_qps_text(search)
    assert "none of the 1 rates tried" in text
    assert "no rate can meet it: without queueing, p99 per query's 95% upper bound is 5.00 ms" in text
    queued = [server_point(480.0, service_s=0.004)]  # rho 0.96 of 500 q/s: queueing breaks a 6 ms bound
    s = serving.summarize(
        {"scenario": "server", "wall_s": 2.0, "examples": 0, "points": queued, "search": True},
        {},
        [],
        batch_size=2,
        percentile=99,
        bound_ms=6.0,
    )
    assert s["max_qps"] is None and "no rate can meet it" not in serving.max_qps_text(s)
