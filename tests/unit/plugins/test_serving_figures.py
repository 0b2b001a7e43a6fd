"""The server scenario's figures on the plugin's run page and in ``/perfwatch/metrics`` (issue 27, the serving
team's audit: neither mentioned a scenario or a QPS): the rates offered, issued and achieved, the per-query
percentiles with their intervals and n, a search's max QPS and whether it was unstable."""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient

from tasks.analysis.percentiles import percentile_ci
from tasks.store.reads import run_tool_tables
from tests.helpers.builders import archive_server_run, server_points


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


@pytest.fixture
def served(db_url, tmp_path):
    fixed = server_points([(300.0, 0.008)])
    search = server_points([(100.0, 0.004), (200.0, 0.030), (400.0, 0.012), (300.0, 0.004), (300.0, 0.004)])
    return {
        "fixed": archive_server_run(db_url, tmp_path, "fixed", fixed, model="a"),
        "search": archive_server_run(db_url, tmp_path, "search", search, search=True, bound_ms=20.0, model="b"),
        "points": {"fixed": fixed, "search": search},
    }


def test_the_run_page_section_gives_every_rate_and_the_max_qps(db_url, served):
    from plugins.perfwatch.serving import serving_section

    page = _text(serving_section(run_tool_tables(db_url, served["search"]).get("inputs")))
    assert page.startswith("Serving scenario server search: max QPS 100 q/s issued (nominal 100)")
    assert "unstable search: search_non_monotonic" in page and "search_non_monotonic: QPS search not monotonic" in page
    for p in served["points"]["search"]:  # above capacity: invalid (200 q/s of 30-45 ms batches of 4)
        ci = percentile_ci(p["latency_ms"], 99)
        shown = f"p99 per query {ci.point:.2f} ms [{ci.low:.2f}, {ci.high:.2f}] (95%, n=320)" in page
        assert shown == (p["invalid"] is None), p["target_qps"]
    assert page.count("— (invalid: the queue grew through the run)") == 2  # 200 and 400 q/s
    assert "numbers agree" in page
    assert serving_section(None) == "" and serving_section({"latency_ms": {"p50": 1.0}}) == ""


def test_metrics_carry_the_servers_rates_per_query_latency_and_max_qps(db_url, served):
    from plugins.perfwatch.metrics import StoreCollector

    families = {f.name: f for f in StoreCollector(db_url).collect()}

    def values(name: str, **labels: str) -> dict[str, float]:
        return {
            s.labels["model"]: s.value
            for s in families[name].samples
            if all(s.labels.get(k) == v for k, v in labels.items())
        }

    fixed = served["points"]["fixed"][0]
    assert values("perfwatch_server_offered_qps") == {"a": 300.0, "b": 100.0}
    assert values("perfwatch_server_issued_qps") == {"a": pytest.approx(300.0), "b": pytest.approx(100.0)}
    assert values("perfwatch_server_achieved_qps")["a"] == pytest.approx(fixed["achieved_qps"])
    p99 = percentile_ci(fixed["latency_ms"], 99)
    assert values("perfwatch_server_latency_seconds", quantile="0.99")["a"] == pytest.approx(p99.point / 1000)
    assert values("perfwatch_server_latency_bound_seconds", quantile="0.99", bound="high")["a"] == pytest.approx(
        p99.high / 1000
    )
    assert values("perfwatch_server_latency_samples") == {"a": 320.0, "b": 320.0}
    assert values("perfwatch_server_max_qps") == {"b": pytest.approx(100.0)}  # a fixed rate is no search
    assert values("perfwatch_server_search_unstable") == {"b": 1.0}
    assert values("perfwatch_server_latency_bound_target_seconds") == {"b": pytest.approx(0.020)}
    assert {s.labels["scenario"] for s in families["perfwatch_server_offered_qps"].samples} == {"server"}
    assert values("perfwatch_server_point_invalid") == {"a": 0.0, "b": 0.0}


def test_an_invalid_point_exports_no_latency_and_says_it_is_invalid():
    """400 q/s of 12-18 ms batches of 4 is 1.5x the capacity: its queue grows through the run, so its percentiles
    grow with the run's length; /metrics says the point is invalid and exports none of them."""
    from types import SimpleNamespace

    from plugins.perfwatch.metrics import server_families
    from tasks.analysis import serving

    over = server_points([(400.0, 0.012)])
    record = {"scenario": "server", "wall_s": over[0]["duration_s"], "examples": 0, "points": over}
    s = serving.summarize(record, {}, [], batch_size=4, percentile=99, bound_ms=None)
    run = SimpleNamespace(model="m", case_name="", latency_ms={"serving": s})
    families = {f.name: f for f in server_families([run], lambda model, case: [model, case, case])}
    assert [x.value for x in families["perfwatch_server_point_invalid"].samples] == [1.0]
    assert families["perfwatch_server_latency_seconds"].samples == []
    assert families["perfwatch_server_latency_bound_seconds"].samples == []
    assert [x.value for x in families["perfwatch_server_achieved_qps"].samples] == [pytest.approx(s["achieved_qps"])]


def test_the_run_page_shows_the_section(db_url, served, monkeypatch):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER", "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    )
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "serving-figures-secret")
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from plugins.perfwatch.app import standalone_app

    token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="VIEWER"))
    client = TestClient(standalone_app())
    client.cookies.set("_token", token)
    page = _text(client.get(f"/perfwatch/runs/{served['fixed']}").text)
    assert "Serving scenario server at 300 q/s offered (issued 300): achieved" in page
    assert "p99 per query" in page
