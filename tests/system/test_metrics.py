"""/perfwatch/metrics scraped by a real Prometheus, the Grafana dashboard's queries and the example alert
rule evaluated by it.

The Prometheus server is Debian's ``prometheus`` package (``.ci/run`` installs it); outside CI the
tests that need it skip, saying so, when the binary is absent. It runs on a loopback port with a
generated config that scrapes the plugin's routes served by uvicorn in this process (``standalone_app``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tasks.records import Case, RunContext
from tasks.stages.archive import archive_run
from tasks.store import migrate
from tasks.store.writes import record_failure
from tests.helpers import ROOT as ROOT
from tests.helpers.builders import make_records

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None and os.environ.get("CI") != "true",
    reason="Prometheus is not installed (apt-get install prometheus; .ci/run installs it for CI)",
)


def fill_store(url: str, tmp: Path) -> None:
    """resnet: 10 ms (first), 10.2 ms (pass), 14 ms (regression); bert: 20 ms (pass) and a failed run."""
    migrate(url)
    for i, (model, verdict, median) in enumerate(
        [
            ("resnet", "no-baseline", 10.0),
            ("resnet", "pass", 10.2),
            ("resnet", "regression", 14.0),
            ("bert", "no-baseline", 20.0),
        ]
    ):
        archive_run(
            url,
            str(tmp / "archive"),
            *make_records(tmp, dag_run_id=f"r{i}", model=model, verdict=verdict, median=median),
        )
    record_failure(
        url,
        RunContext(dag_id="d", dag_run_id="r9", trigger="test", case=Case(model="bert")),
        "warm-up",
        "RunnerError: out of memory",
    )


def metric_values(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_metrics_endpoint_names_units_and_values(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from plugins.perfwatch.app import standalone_app

    url = f"sqlite:///{tmp_path / 'store.db'}"
    fill_store(url, tmp_path)
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", url)
    monkeypatch.setenv("PERFWATCH_METRICS_TOKEN", "scrape-secret")
    client = TestClient(standalone_app(), headers={"Authorization": "Bearer scrape-secret"})
    r = client.get("/perfwatch/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    v = metric_values(r.text)
    # labels sorted by name; a case without a readable label has its name as case_label (issue 25)
    rn = (("case", "train-bs16"), ("case_label", "train-bs16"), ("model", "resnet"))
    bert = (("case", "train-bs16"), ("case_label", "train-bs16"), ("model", "bert"))
    assert v[("perfwatch_store_up", ())] == 1
    assert v[("perfwatch_step_time_seconds", (*rn, ("quantile", "0.5"), ("source", "perfwatch")))] == pytest.approx(
        0.014
    )
    assert v[("perfwatch_baseline_step_time_seconds", rn)] == pytest.approx(
        0.0102
    )  # a regression is never the baseline
    thr = tuple(sorted([*rn, ("definition", "median_step"), ("source", "perfwatch")]))  # a train run's (0013)
    assert v[("perfwatch_throughput_examples_per_second", thr)] == 1600.0
    assert v[("perfwatch_latest_verdict", (*rn, ("verdict", "regression")))] == 1
    assert v[("perfwatch_latest_verdict", (*rn, ("verdict", "pass")))] == 0
    assert v[("perfwatch_runs_total", (*rn, ("status", "success")))] == 3
    assert v[("perfwatch_runs_total", (*bert, ("status", "failed")))] == 1
    assert v[("perfwatch_regressions_total", rn)] == 1
    assert v[("perfwatch_regressions_total", bert)] == 0
    assert v[("perfwatch_latest_run_info", (*rn, ("source", "perfwatch"), ("version", "1")))] == 1
    assert 0 <= v[("perfwatch_newest_data_age_seconds", ())] < 600
    assert abs(time.time() - v[("perfwatch_last_success_timestamp_seconds", rn)]) < 600
    # a store that cannot be read: store_up 0 and nothing else
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    assert metric_values(client.get("/perfwatch/metrics").text) == {("perfwatch_store_up", ()): 0.0}


# ------------------------------------------------------------------------------------------- real Prometheus


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only
        return json.loads(r.read())


def scrape_job(target: str, token_file: Path) -> dict:
    """prometheus/prometheus.yml's perfwatch scrape job (path, bearer token from its ``credentials_file``) with
    ``target`` for its target and ``token_file`` for the file docker-compose.yml's prometheus service writes."""
    import yaml

    (job,) = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    assert job["authorization"]["credentials_file"], "prometheus.yml scrapes without the metrics token"
    return {
        **job,
        "authorization": {**job["authorization"], "credentials_file": str(token_file)},
        "static_configs": [{"targets": [target]}],
    }


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus scraping the plugin's /perfwatch/metrics (uvicorn in this process) every second,
    with prometheus/alerts.yml loaded; yields ``query(expr) -> result list``."""
    if PROMETHEUS is None:
        pytest.fail("CI=true but the prometheus binary is missing: .ci/run should have installed it")
    import uvicorn

    from plugins.perfwatch.app import standalone_app

    tmp = tmp_path_factory.mktemp("prom")
    url = f"sqlite:///{tmp / 'store.db'}"
    fill_store(url, tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWATCH_DATABASE_URL", url)
        mp.setenv("PERFWATCH_METRICS_TOKEN", "scrape-secret")  # closed by default: Prometheus sends the token
        mp.delenv("PERFWATCH_METRICS_PUBLIC", raising=False)
        (tmp / "metrics-token").write_text("scrape-secret")
        app_port, prom_port = free_port(), free_port()
        server = uvicorn.Server(uvicorn.Config(standalone_app(), host="127.0.0.1", port=app_port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        config = tmp / "prometheus.yml"
        config.write_text(
            json.dumps(
                {  # JSON is YAML
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(ROOT / "prometheus" / "alerts.yml")],
                    "scrape_configs": [scrape_job(f"127.0.0.1:{app_port}", tmp / "metrics-token")],
                }
            )
        )
        log = (tmp / "prometheus.log").open("w")
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{prom_port}"

        def query(expr: str) -> list:
            out = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
            assert out["status"] == "success", out
            return out["data"]["result"]

        try:
            deadline = time.time() + 60
            while True:  # ready, scraped, and at least two scrapes in (rate-free queries need one)
                with contextlib.suppress(OSError, ValueError):
                    if query("count_over_time(perfwatch_store_up[1m]) >= 2"):
                        break
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(
                        f"Prometheus did not scrape perfwatch in 60 s (exit {proc.poll()}): "
                        + (tmp / "prometheus.log").read_text()[-2000:]
                    )
                time.sleep(0.5)
            yield query
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
            server.should_exit = True
            thread.join(timeout=10)
            log.close()


@needs_prometheus
def test_prometheus_scrapes_the_metrics(prometheus):
    (s,) = prometheus('perfwatch_step_time_seconds{model="resnet", quantile="0.5"}')
    assert float(s["value"][1]) == pytest.approx(0.014)
    assert s["metric"]["job"] == "perfwatch" and s["metric"]["case"] == "train-bs16"
    (up,) = prometheus("perfwatch_store_up")
    assert up["value"][1] == "1"
    assert {r["metric"]["model"] for r in prometheus("perfwatch_runs_total")} == {"resnet", "bert"}


def dashboard_queries(dash: dict) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target (rows included) and every annotation of a Grafana dashboard."""
    out = []

    def walk(panels):
        for p in panels:
            out.extend((f"panel {p['title']!r} {t.get('refId')}", t["expr"]) for t in p.get("targets", []))
            walk(p.get("panels", []))

    walk(dash["panels"])
    out += [(f"annotation {a['name']!r}", a["expr"]) for a in dash["annotations"]["list"] if a.get("expr")]
    return out


@needs_prometheus
def test_every_dashboard_query_returns_series(prometheus):
    dash = json.loads((ROOT / "grafana" / "dashboards" / "perfwatch.json").read_text())
    titles = " | ".join(p["title"] for p in dash["panels"]).lower()
    for wanted in ("step time", "throughput", "percentiles", "verdicts", "freshness"):
        assert wanted in titles
    assert {v["name"] for v in dash["templating"]["list"]} == {"model", "case"}
    for v in dash["templating"]["list"]:  # the variables' own queries: label_values(<selector>, label)
        m = re.match(r"label_values\((.+), (\w+)\)$", v["query"]["query"])
        selector = m.group(1).replace("$model", ".*")
        assert {r["metric"][m.group(2)] for r in prometheus(selector)}, v["name"]
    queries = dashboard_queries(dash)
    assert len(queries) >= 10
    empty = []
    for where, expr in queries:
        resolved = expr.replace("$model", ".*").replace("$case", ".*")
        assert "$" not in resolved, (where, resolved)
        if not prometheus(resolved):
            empty.append(f"{where}: {resolved}")
    assert empty == [], "dashboard queries that return no series"


@needs_prometheus
def test_the_example_rule_fires_on_a_step_time_rise(prometheus):
    """resnet's newest run (14 ms) is 37% above its baseline (10.2 ms); bert's is its baseline."""
    deadline = time.time() + 30
    while not (alerts := prometheus('ALERTS{alertname="PerfwatchStepTimeRise"}')) and time.time() < deadline:
        time.sleep(0.5)
    assert [(a["metric"]["perfwatch_model"], a["metric"]["perfwatch_case"]) for a in alerts] == [
        ("resnet", "train-bs16")
    ]
    assert alerts[0]["metric"]["alertstate"] == "pending"  # `for: 10m` has not passed yet
    assert not prometheus('ALERTS{alertname="PerfwatchDataStale"}')


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")
def test_alert_rules_pass_promtool():
    out = subprocess.run(
        [PROMTOOL, "check", "rules", str(ROOT / "prometheus" / "alerts.yml")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_prometheus_sends_the_api_servers_metrics_token():
    """docker-compose.yml: the prometheus service writes the API server's PERFWATCH_METRICS_TOKEN to the file
    prometheus.yml's scrape job sends as its bearer token (the metrics are closed by default)."""
    import yaml

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    token = services["airflow-apiserver"]["environment"]["PERFWATCH_METRICS_TOKEN"]
    prom = services["prometheus"]
    assert prom["environment"]["PERFWATCH_METRICS_TOKEN"] == token
    (job,) = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    assert job["authorization"]["type"] == "Bearer"
    assert f'"$$PERFWATCH_METRICS_TOKEN" > {job["authorization"]["credentials_file"]}' in prom["entrypoint"][2]
    assert prom["entrypoint"][2].endswith('exec /bin/prometheus "$$@"')
