"""One throughput per scenario run (issue 27, the serving team's audit): a server run's is the queries/s it
achieved at its reported point, an offline run's the examples over its measured wall time, a single-stream run's
examples/s at the median batch (``tasks.analysis.serving.run_throughput_eps``, what the profiled-run stage
stores), and `perfwatch runs`, `history` and ``/metrics`` give that one figure. Before, a server run stored its
batches' service rate at the median (4 / 8 ms = 500 examples/s beside 297.7 queries/s achieved), and `perfwatch
run` printed both, and a third, "examples/s over all batches"."""

from __future__ import annotations

import json

import pytest

from tasks.analysis.serving import run_throughput_eps, server_throughput_text
from tasks.cli.figures import figure_texts
from tests.helpers.builders import archive_scenario_run, archive_server_run, server_points


def test_the_runs_throughput_is_its_scenarios():
    assert run_throughput_eps({"scenario": "server", "throughput_eps": 49.6}, 189.8) == 49.6
    assert run_throughput_eps({"scenario": "offline", "throughput_eps": 470.0}, 500.0) == 470.0
    assert run_throughput_eps({"scenario": "single-stream", "throughput_eps": 470.0}, 500.0) == 500.0
    assert run_throughput_eps(None, 1600.0) == 1600.0  # a train run


@pytest.fixture
def scenario_runs(db_url, tmp_path) -> dict:
    point = server_points([(300.0, 0.008)])
    offline = [8.0 + 0.02 * (i % 50) for i in range(320)]
    return {
        "server": archive_server_run(db_url, tmp_path, "srv", point, model="m"),
        "offline": archive_scenario_run(db_url, tmp_path, "off", "offline", offline, wall_s=2.8, model="m"),
        "achieved": point[0]["achieved_qps"],
        "offline_eps": 4 * 320 / 2.8,
    }


def test_runs_history_and_metrics_give_the_same_throughput(cli, db_url, scenario_runs):
    from plugins.perfwatch.metrics import StoreCollector

    server, offline = scenario_runs["server"], scenario_runs["offline"]
    want = {server: scenario_runs["achieved"], offline: scenario_runs["offline_eps"]}
    runs = {r["run_id"]: r for r in json.loads(cli("runs", "--format", "json").stdout)}
    history = {r["run_id"]: r for r in json.loads(cli("history", "m", "--format", "json").stdout)}
    for rid, eps in want.items():
        assert runs[rid]["throughput_eps"] == pytest.approx(eps), rid
        assert history[rid]["throughput_eps"] == pytest.approx(eps), rid
    assert runs[server]["server_achieved_qps"] == pytest.approx(runs[server]["throughput_eps"])
    families = {f.name: f for f in StoreCollector(db_url).collect()}
    shown = {s.labels["case"]: s.value for s in families["perfwatch_throughput_examples_per_second"].samples}
    assert shown["infer-bs4-server-q300"] == pytest.approx(scenario_runs["achieved"])
    assert shown["infer-bs4-offline"] == pytest.approx(scenario_runs["offline_eps"])
    table = " ".join(cli("runs", "--format", "table").stdout.split())
    assert f"{scenario_runs['achieved']:,.1f}" in table  # the throughput column: the rate the qps column names


def test_perfwatch_runs_headline_names_each_scenarios_throughput():
    s = {"scenario": "server", "target_qps": 100.0, "achieved_qps": 86.1, "search": False, "max_qps": None}
    texts = figure_texts(None, median_ms=2.055, throughput_eps=86.1, latency={"serving": s})
    assert texts[1] == "86.1 queries/s achieved (86.1 examples/s) at 100 q/s offered"  # no second "service rate"
    assert "service rate" not in server_throughput_text(s)
    offline = figure_texts(None, median_ms=2.0, throughput_eps=470.0, latency={"serving": {"scenario": "offline"}})
    assert offline[1] == "470.0 examples/s over the run"
    assert figure_texts(None, median_ms=2.0, throughput_eps=86.1, scenario="server")[1] == "86.1 queries/s achieved"


def test_perfwatch_run_of_a_server_search_prints_one_throughput_and_each_finding_once(home, cli, monkeypatch, tmp_path):
    """`perfwatch run` of a server search, as the serving team ran it: its headline throughput is the queries/s
    achieved at the reported point, the per-batch line names its rate the service capacity, no "service rate ...
    at the median batch" is printed beside it, every per-query p99 has its interval and n, and each of the search's
    findings is printed once (it was printed by the run's findings and again by the scenario's lines)."""
    from tasks.analysis.percentiles import percentile_ci
    from tasks.records import ArchiveRecord, RunState
    from tasks.stages import pipeline
    from tests.helpers.builders import server_run_records

    (home / "models" / "m" / "1").mkdir(parents=True)
    (home / "models" / "m" / "1" / "model.keras").write_bytes(b"not read: run_case is replaced")
    points = server_points([(100.0, 0.004), (200.0, 0.030), (400.0, 0.012), (300.0, 0.004), (300.0, 0.004)])
    ctx, pulled, env, warm, run, parsed, comp = server_run_records(tmp_path, "s", points, search=True, bound_ms=20.0)
    served = run.latency_ms["serving"]
    run = run.model_copy(update={"findings": served["findings"]})  # as the stage adds an unstable search's
    state = RunState(
        ctx=ctx, pulled=pulled, env=env, warmup=warm, run=run, parsed=parsed, verdict=comp,
        archived=ArchiveRecord(run_id=7, archive_uri=str(tmp_path / "archive"), verdict="no-baseline"),
    )  # fmt: skip
    monkeypatch.setattr(pipeline, "run_case", lambda ctx, settings=None: state)
    args = ["run", "m", "--version", "1", "--mode", "infer", "--batch-size", "4", "--scenario", "server"]
    res = cli(*args, "--search-qps", "--latency-bound-ms", "20")
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert f"{served['achieved_qps']:.1f} queries/s achieved" in out and run.throughput_eps == served["achieved_qps"]
    assert "service rate" not in out and "at the median batch" not in out
    assert "service capacity" in out and "not a rate the server delivered" in out
    for p in points:  # a rate above the capacity (200 q/s of 30-45 ms batches of 4, 400 of 12-18) is invalid
        ci = percentile_ci(p["latency_ms"], 99)
        shown = f"p99 {ci.point:.2f} ms [{ci.low:.2f}, {ci.high:.2f}] (95%, n={ci.n})" in out
        assert shown == (p["invalid"] is None), p["target_qps"]
    assert out.count("INVALID, the queue grew through the run") == 2  # 200 and 400 q/s
    assert out.count("finding search_non_monotonic:") == 1, res.output
