"""Macro alert -> micro diagnosis: Alertmanager's webhook payload triggers a perfwatch_profile DAG run through
Airflow's REST API (a local HTTP server stands in for Airflow's API server and records each request)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient


class FakeAirflow:
    """Airflow's ``POST /auth/token`` and ``POST /api/v2/dags/{dag_id}/dagRuns``: records the requests;
    a dag_run_id seen before is a 409, as Airflow answers; ``fail`` makes every trigger a 500."""

    def __init__(self):
        self.requests: list[dict] = []
        self.run_ids: set[str] = set()
        self.fail = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"null")
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if self.path == "/auth/token":
                    ok = body == {"username": "airflow", "password": "secret"}
                    self._reply(201 if ok else 401, {"access_token": "tok-123"} if ok else {"detail": "bad"})
                elif self.path == "/api/v2/dags/perfwatch_profile/dagRuns":
                    if self.headers.get("Authorization") != "Bearer tok-123":
                        self._reply(401, {"detail": "Not authenticated"})
                    elif fake.fail:
                        self._reply(500, {"detail": "boom"})
                    elif body["dag_run_id"] in fake.run_ids:
                        self._reply(409, {"detail": "DAG Run already exists"})
                    else:
                        fake.run_ids.add(body["dag_run_id"])
                        self._reply(200, {"dag_run_id": body["dag_run_id"], "state": "queued"})
                else:
                    self._reply(404, {"detail": "Not Found"})

            def _reply(self, code, data):
                raw = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


CONFIG = """
models:
  - model: resnet
    matrix: {mode: [train, infer], batch_size: [16], precision: [fp32, mixed_bfloat16]}
"""


@pytest.fixture
def airflow(monkeypatch, home):
    """The fake Airflow, and what the DAG would find: model ``resnet`` versions 1 and 3 in the model store
    (the files' names are what the store reads) and its four cases in the config."""
    for v in (1, 3):
        (home / "models" / "resnet" / str(v)).mkdir(parents=True)
        (home / "models" / "resnet" / str(v) / "model.keras").write_bytes(b"PK")
    (home / "perfwatch.yaml").write_text(CONFIG)
    monkeypatch.setenv("PERFWATCH_CONFIG", str(home / "perfwatch.yaml"))
    fake = FakeAirflow()
    monkeypatch.setenv("PERFWATCH_AIRFLOW_API_URL", fake.url)
    monkeypatch.setenv("PERFWATCH_AIRFLOW_USERNAME", "airflow")
    monkeypatch.setenv("PERFWATCH_AIRFLOW_PASSWORD", "secret")
    monkeypatch.delenv("PERFWATCH_AIRFLOW_TOKEN", raising=False)
    monkeypatch.setenv("PERFWATCH_ALERTMANAGER_TOKEN", "hook-token")
    yield fake
    fake.server.shutdown()


def alert(status="firing", **labels):
    return {
        "status": status,
        "labels": {"alertname": "PerfwatchStepTimeRise", **labels},
        "annotations": {"summary": "step time up"},
        "startsAt": "2026-12-01T02:10:00.123Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus:9090/graph?g0.expr=x",
        "fingerprint": "c0ffee" + str(len(labels)),
    }


def payload(*alerts):
    """Alertmanager's webhook payload, version 4, as it documents it."""
    return {
        "version": "4",
        "groupKey": '{}:{alertname="PerfwatchStepTimeRise"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "perfwatch-profile",
        "groupLabels": {"alertname": "PerfwatchStepTimeRise"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


HOOK = {"Authorization": "Bearer hook-token"}


def test_a_matrix_case_label_picks_that_case_of_the_config():
    from plugins.perfwatch.webhook import Alert, profile_request

    req, why = profile_request(Alert(**alert(perfwatch_model="resnet", perfwatch_case="infer-bs16-mixed_bfloat16")))
    assert why is None and req["conf"] == {
        "model": "resnet",
        "version": "latest",
        "trigger": "manual",
        "case": "infer-bs16-mixed_bfloat16",
    }
    req, why = profile_request(Alert(**alert(perfwatch_model="resnet", perfwatch_case="infer-bs16; drop")))
    assert req is None and why.startswith("perfwatch_case 'infer-bs16; drop': expected a perfwatch case name")


def test_model_and_version_labels_follow_the_records_rules():
    from plugins.perfwatch.webhook import Alert, profile_request

    req, why = profile_request(Alert(**alert(perfwatch_model="résnet v2", perfwatch_version="0003")))
    assert why is None and req["conf"] == {"model": "résnet v2", "version": "3", "trigger": "manual"}
    req, why = profile_request(Alert(**alert(perfwatch_model="../resnet")))
    assert req is None and why.startswith("perfwatch_model '../resnet' is not a model name the DAG accepts: ")
    req, why = profile_request(Alert(**alert(perfwatch_model="resnet", perfwatch_version="v3")))
    assert req is None and why == "perfwatch_version 'v3': expected an integer version or 'latest'"


def test_a_firing_alert_triggers_a_profiling_dag_run(airflow):
    from plugins.perfwatch.app import standalone_app

    client = TestClient(standalone_app())
    body = payload(
        alert(perfwatch_model="resnet", perfwatch_version="3", perfwatch_case="train-bs32"),
        alert(job="recsys"),  # no perfwatch_model label: not ours
        alert("resolved", perfwatch_model="resnet"),
        alert(perfwatch_model="resnet", perfwatch_case="eval-bs8"),
    )
    r = client.post("/perfwatch/alertmanager", json=body, headers=HOOK)
    assert r.status_code == 200, r.text
    out = r.json()
    (run,) = out["triggered"]
    assert run["status"] == "triggered" and run["dag_run_id"].startswith("alert__PerfwatchStepTimeRise__c0ffee")
    assert run["conf"] == {"model": "resnet", "version": "3", "batch_size": 32, "trigger": "manual"}
    assert [s["reason"] for s in out["skipped"]] == [
        "no perfwatch_model label",
        "alert is 'resolved', not firing",
        "perfwatch_case 'eval-bs8': expected a perfwatch case name, <mode>-bs<N>[-<axis>...] (train-bs<N> sets "
        "the batch size; another name picks that case of the model's config)",
    ]
    token, trigger = airflow.requests
    assert token == {"path": "/auth/token", "auth": None, "body": {"username": "airflow", "password": "secret"}}
    assert trigger["path"] == "/api/v2/dags/perfwatch_profile/dagRuns" and trigger["auth"] == "Bearer tok-123"
    assert trigger["body"]["logical_date"] is None and trigger["body"]["conf"] == run["conf"]
    assert "PerfwatchStepTimeRise" in trigger["body"]["note"]
    # the body is what Airflow's own API model accepts (no unknown fields), and the conf names DAG Params
    from airflow.api_fastapi.core_api.datamodels.dag_run import TriggerDAGRunPostBody

    TriggerDAGRunPostBody.model_validate(trigger["body"])
    assert set(run["conf"]) <= {"model", "version", "batch_size", "measured_steps", "trigger"}

    # Alertmanager repeats the notification: the same alert is one DAG run (Airflow answers 409)
    again = client.post("/perfwatch/alertmanager", json=body, headers=HOOK).json()
    assert [t["status"] for t in again["triggered"]] == ["exists"]
    assert len(airflow.run_ids) == 1


def test_webhook_refusals(airflow, monkeypatch):
    from plugins.perfwatch.app import standalone_app

    client = TestClient(standalone_app())
    body = payload(alert(perfwatch_model="resnet"))
    assert client.post("/perfwatch/alertmanager", json=body).status_code == 401
    assert (
        client.post("/perfwatch/alertmanager", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
    )
    assert client.post("/perfwatch/alertmanager", json={**body, "version": "3"}, headers=HOOK).status_code == 400
    assert client.post("/perfwatch/alertmanager", json={"alerts": "x"}, headers=HOOK).status_code == 422
    airflow.fail = True  # Airflow refuses: 502, so Alertmanager retries
    r = client.post("/perfwatch/alertmanager", json=body, headers=HOOK)
    assert r.status_code == 502 and "HTTP 500" in r.json()["error"]
    monkeypatch.setenv("PERFWATCH_AIRFLOW_PASSWORD", "wrong")
    assert (
        "auth/token as 'airflow': HTTP 401"
        in client.post("/perfwatch/alertmanager", json=body, headers=HOOK).json()["error"]
    )
    monkeypatch.delenv("PERFWATCH_ALERTMANAGER_TOKEN")
    assert client.post("/perfwatch/alertmanager", json=body, headers=HOOK).status_code == 503


def test_the_token_is_checked_before_the_body_is_read(airflow):
    """An unauthenticated request of any size is answered 401 before a byte of its body is read: the app is
    called as the ASGI server calls it, with a ``receive`` that counts the body messages it hands out."""
    import anyio

    from plugins.perfwatch.app import standalone_app

    app = standalone_app()
    chunk = b"x" * (1 << 20)

    async def call(headers: list[tuple[bytes, bytes]], n_chunks: int) -> tuple[int, int]:
        served, sent = 0, []

        async def receive():
            nonlocal served
            served += 1
            return {"type": "http.request", "body": chunk, "more_body": served < n_chunks}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/perfwatch/alertmanager",
            "raw_path": b"/perfwatch/alertmanager",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), *headers],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)
        return sent[0]["status"], served

    big = [(b"content-length", str(32 * len(chunk)).encode())]
    assert anyio.run(call, big, 32) == (401, 0)  # 32 MiB, no token: nothing read
    assert anyio.run(call, [*big, (b"authorization", b"Bearer nope")], 32) == (401, 0)
    hook = [(b"authorization", b"Bearer hook-token")]
    assert anyio.run(call, [*hook, *big], 32) == (413, 0)  # the right token, over the limit: not read either
    assert anyio.run(call, hook, 32) == (411, 0)  # no Content-Length (chunked): not read


def test_body_limit_and_truncated_alerts(airflow, monkeypatch):
    from plugins.perfwatch.app import standalone_app
    from plugins.perfwatch.webhook import MAX_BODY_BYTES

    client = TestClient(standalone_app())
    body = payload(alert(perfwatch_model="resnet"))
    big = json.dumps({**body, "padding": "x" * MAX_BODY_BYTES})
    r = client.post("/perfwatch/alertmanager", content=big, headers={**HOOK, "Content-Type": "application/json"})
    assert r.status_code == 413 and f"limit of {MAX_BODY_BYTES} bytes" in r.json()["detail"]
    monkeypatch.setenv("PERFWATCH_ALERTMANAGER_MAX_BYTES", str(len(big) + 1))
    assert client.post("/perfwatch/alertmanager", content=big, headers=HOOK).status_code == 200
    monkeypatch.delenv("PERFWATCH_ALERTMANAGER_MAX_BYTES")
    r = client.post("/perfwatch/alertmanager", content=b"{not json", headers=HOOK)
    assert r.status_code == 400 and "not JSON" in r.json()["detail"]

    # Alertmanager cut the group (max_alerts): the response and the log say how many alerts were left out
    r = client.post("/perfwatch/alertmanager", json={**body, "truncatedAlerts": 7}, headers=HOOK)
    assert r.status_code == 200 and r.json()["truncated_alerts"] == 7
    assert "left 7 alert(s)" in r.json()["warning"] and "max_alerts" in r.json()["warning"]
    assert len(r.json()["triggered"]) == 1  # the alerts that were sent still trigger
    assert "warning" not in client.post("/perfwatch/alertmanager", json=body, headers=HOOK).json()


def test_truncated_alerts_are_logged(airflow, caplog):
    from plugins.perfwatch.app import standalone_app

    client = TestClient(standalone_app())
    with caplog.at_level("WARNING", logger="plugins.perfwatch.webhook"):
        client.post("/perfwatch/alertmanager", json={**payload(), "truncatedAlerts": 3}, headers=HOOK)
    assert any("left 3 alert(s)" in r.getMessage() for r in caplog.records)


def test_an_unknown_model_version_or_case_triggers_nothing(airflow):
    from plugins.perfwatch.app import standalone_app

    client = TestClient(standalone_app())
    for labels, why in (
        ({"perfwatch_model": "resnt"}, "not in the model store: unknown model 'resnt'"),
        ({"perfwatch_model": "resnet", "perfwatch_version": "2"}, "version '2' of model 'resnet' not found"),
        ({"perfwatch_model": "resnet", "perfwatch_case": "infer-bs16-xla"}, "model 'resnet' has no case"),
    ):
        r = client.post("/perfwatch/alertmanager", json=payload(alert(**labels)), headers=HOOK)
        assert r.status_code == 422, (labels, r.text)
        (skip,) = r.json()["skipped"]
        assert why in skip["reason"], (labels, skip)
    assert airflow.requests == []  # not even a token was asked for
    # a known case of the config is triggered, and one unknown alert does not hold back a known one
    r = client.post(
        "/perfwatch/alertmanager",
        json=payload(alert(perfwatch_model="resnt"), alert(perfwatch_model="resnet", perfwatch_case="infer-bs16")),
        headers=HOOK,
    )
    assert r.status_code == 200 and [t["conf"].get("case") for t in r.json()["triggered"]] == ["infer-bs16"]
    assert "unknown model 'resnt'" in r.json()["skipped"][0]["reason"]
