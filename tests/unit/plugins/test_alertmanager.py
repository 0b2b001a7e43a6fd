"""Macro alert -> micro diagnosis: Alertmanager's webhook payload triggers a perfwatch_profile DAG run through
Airflow's REST API (a local HTTP server stands in for Airflow's API server and records each request)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient

from tests.helpers.airflow import plugin_module


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


@pytest.fixture
def airflow(monkeypatch):
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
    mod = plugin_module()
    req, why = mod.profile_request(
        mod.Alert(**alert(perfwatch_model="resnet", perfwatch_case="infer-bs16-mixed_bfloat16"))
    )
    assert why is None and req["conf"] == {
        "model": "resnet",
        "version": "latest",
        "trigger": "manual",
        "case": "infer-bs16-mixed_bfloat16",
    }
    req, why = mod.profile_request(mod.Alert(**alert(perfwatch_model="resnet", perfwatch_case="infer-bs16; drop")))
    assert req is None and why.startswith("perfwatch_case 'infer-bs16; drop': expected a perfwatch case name")


def test_a_firing_alert_triggers_a_profiling_dag_run(airflow):
    client = TestClient(plugin_module().standalone_app())
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
    client = TestClient(plugin_module().standalone_app())
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
