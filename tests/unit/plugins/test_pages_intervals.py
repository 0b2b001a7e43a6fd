"""The plugin's index (latest runs) and model page (its runs and its sweep along batch size) give each median and
p99 with its 95% interval and n, as the CLI does (issue 27: every percentile perfwatch prints has its interval
and sample size); before, both showed bare medians and the sweep a bare p99."""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient

from tasks.analysis.percentiles import percentile_ci
from tests.helpers.builders import archive_scenario_run, archive_server_run, server_points


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


@pytest.fixture
def client(db_url, monkeypatch) -> TestClient:
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    monkeypatch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER", "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    )
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "pages-intervals-secret")
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from plugins.perfwatch.app import standalone_app

    token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="VIEWER"))
    c = TestClient(standalone_app())
    c.cookies.set("_token", token)
    return c


@pytest.fixture
def swept(db_url, tmp_path) -> dict:
    small = [8.0 + 0.01 * (i % 97) for i in range(320)]
    large = [14.0 + 0.02 * (i % 89) for i in range(320)]
    point = server_points([(300.0, 0.008)])
    return {
        "bs4": archive_scenario_run(db_url, tmp_path, "bs4", "single-stream", small, batch_size=4, model="m"),
        "bs8": archive_scenario_run(db_url, tmp_path, "bs8", "single-stream", large, batch_size=8, model="m"),
        "server": archive_server_run(db_url, tmp_path, "srv", point, model="m"),
        "steps": {"bs4": small, "bs8": large},
        "queries": point[0]["latency_ms"],
    }


def _median(xs: list[float]) -> str:
    ci = percentile_ci(xs, 50)
    return f"[{ci.low:.3f}, {ci.high:.3f}] n={ci.n}"


def _p99(xs: list[float]) -> str:
    ci = percentile_ci(xs, 99)
    return f"{ci.point:.2f} [{ci.low:.2f}, {ci.high:.2f}] n={ci.n}"


def test_the_index_gives_each_runs_median_and_p99_with_interval_and_n(client, swept):
    page = client.get("/perfwatch/")
    assert page.status_code == 200, page.text
    latest = _text(page.text).split("Latest runs", 1)[1]
    assert "median step (ms) [95% interval] n" in latest and "p99 latency (ms) [95% interval] n" in latest
    for key in ("bs4", "bs8"):
        assert _median(swept["steps"][key]) in latest, key
        assert _p99(swept["steps"][key]) in latest, key
    assert _p99(swept["queries"]) + " per query" in latest  # a server run's p99 is its queries'


def test_the_model_pages_runs_and_sweep_give_medians_and_p99_with_interval_and_n(client, swept):
    page = client.get("/perfwatch/models/m")
    assert page.status_code == 200, page.text
    text = _text(page.text)
    runs = text.split("Sweep along batch size", 1)[0].rsplit("Runs", 1)[1]
    sweep = text.split("Sweep along batch size", 1)[1]
    assert "p99 (ms) [95% interval] n" in sweep
    for key in ("bs4", "bs8"):
        assert _median(swept["steps"][key]) in runs and _median(swept["steps"][key]) in sweep, key
        assert _p99(swept["steps"][key]) in sweep and _p99(swept["steps"][key]) in runs, key
