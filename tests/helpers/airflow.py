"""Airflow for tests: a fake Airflow API server on loopback for tests of the REST client
(``tasks.services.airflow_api``), the environment and paths the DAG files and the Airflow CLI need, and the
plugin module loaded from its file."""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers import ROOT


class FakeAirflowAssets:
    """Airflow's ``POST /auth/token``, ``GET /api/v2/assets``, ``POST /api/v2/assets/events``,
    ``GET /api/v2/dags/{dag_id}`` and ``POST /api/v2/dags/{dag_id}/dagRuns``, recording the requests; it knows one
    Asset (id 7) and the DAG record ``dag`` (None: a 404, the DAG not parsed yet; set ``dag["is_paused"]`` for a
    paused one; ``known_uri`` None: no Assets). A triggered DAG run is answered ``queued``. Bodies are checked
    against Airflow's own request models by the tests."""

    def __init__(self, known_uri: str | None):
        self.requests: list[dict] = []
        self.dag: dict | None = {"dag_id": "perfwatch_release", "is_paused": False}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                fake.requests.append({"method": "GET", "path": self.path, "auth": self.headers.get("Authorization")})
                if self.path.startswith("/api/v2/dags/"):
                    dag_id = self.path.removeprefix("/api/v2/dags/")
                    if fake.dag is None or fake.dag["dag_id"] != dag_id:
                        return self._reply(404, {"detail": f"The Dag with ID: `{dag_id}` was not found"})
                    return self._reply(200, fake.dag)
                assets = [{"id": 7, "uri": known_uri}, {"id": 8, "uri": known_uri + "x"}] if known_uri else []
                self._reply(200, {"assets": assets, "total_entries": len(assets)})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {"method": "POST", "path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                if self.path == "/auth/token":
                    ok = body == {"username": "ci", "password": "pw"}
                    return self._reply(201 if ok else 401, {"access_token": "jwt-1"} if ok else {"detail": "no"})
                if self.path.endswith("/dagRuns"):
                    return self._reply(200, {**body, "dag_id": self.path.split("/")[4], "state": "queued"})
                self._reply(200, {"id": 99, "asset_id": body["asset_id"], "extra": body["extra"]})

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


# the perfwatch plugin module, loaded from its file


# Airflow puts the plugins folder on sys.path in every process (airflow.settings, [core] plugins_folder): the DAG
# files import the plugin's notifier and hooks as perfwatch.notifier and perfwatch.hooks. A process whose
# AIRFLOW_HOME is a test's own may not have plugins_folder set, so the probes here add the folder themselves.
DAG_PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "plugins")])


# this venv's Airflow CLI and the environment of a DAG run through it


BIN = Path(sys.executable).parent


def _airflow_env(home: Path, airflow_home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": str(ROOT),
        "PERFWATCH_HOME": str(home),
        "GX_ANALYTICS_ENABLED": "false",
    }


class FakeAirflowApi:
    """Airflow's REST API as ``perfwatch doctor`` sees it (``AirflowClient.call``), in memory.

    What it models, from Airflow 3's code: the execution API validates a task token with the api-server's
    ``[api_auth] jwt_secret`` (``api_secret``) and answers 403 ``Invalid auth token`` otherwise
    (``execution_api/security.py``); a DAG run's tasks, started by a scheduler/worker signing with
    ``worker_secret``, succeed when the two secrets agree, else fail before they start (the supervisor's
    ``PATCH .../run`` is refused): state ``failed``, no host name, pid or start date, and a log with only
    Airflow's framing (apache/airflow#59373; what a live Airflow 3.3 with two secrets showed).
    ``dags``: the parsed DAGs by id; ``pools``: pool name -> slots; ``import_errors``: Airflow's records;
    ``run_state``: None to let a run finish, or a state it stays in (e.g. ``queued``: no worker).
    """

    def __init__(self, secret: str = "s3cret", *, audience: str = "urn:airflow.apache.org:task"):
        self.api_secret = self.worker_secret = secret
        self.audience = audience
        self.dags = {
            d: {"dag_id": d, "is_paused": d != "perfwatch_doctor"}
            for d in ("perfwatch_profile", "perfwatch_release", "perfwatch_watch", "perfwatch_doctor")
        }
        self.pools = {"perfwatch_profile": 1}
        self.import_errors: list[dict] = []
        self.health = {s: {"status": "healthy"} for s in ("metadatabase", "scheduler", "dag_processor")}
        self.run_state: str | None = None
        self.runs: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []

    def call(self, method, path, *, json=None, params=None, token=None):
        import jwt

        self.calls.append((method, path))
        if "://" in path:  # the execution API
            assert path.endswith("/execution/task-instances/count") and params == {"dag_id": "perfwatch_doctor"}
            try:
                jwt.decode(token, self.api_secret, algorithms=["HS512"], audience=self.audience)
            except jwt.InvalidTokenError:
                return 403, {"detail": "Invalid auth token"}
            return 200, 0
        parts = path.removeprefix("/api/v2/").split("/")
        if parts == ["monitor", "health"]:
            return 200, self.health
        if parts == ["importErrors"]:
            return 200, {"import_errors": self.import_errors, "total_entries": len(self.import_errors)}
        if parts[0] == "pools":
            return (200, {"name": parts[1], "slots": self.pools[parts[1]]}) if parts[1] in self.pools else (404, {})
        if parts[0] != "dags" or parts[1] not in self.dags:
            return 404, {"detail": "Not Found"}
        dag = self.dags[parts[1]]
        if len(parts) == 2:
            if method == "PATCH":
                dag.update(json)
            return 200, dag
        if parts[2:] == ["dagRuns"] and method == "POST":
            ok = self.worker_secret == self.api_secret
            ti = (
                {"task_id": "ping", "state": "success", "hostname": "worker-1", "pid": 42, "start_date": "t"}
                if ok
                else {"task_id": "ping", "state": "failed", "hostname": "", "pid": None, "start_date": None}
            )
            ti["try_number"] = 1
            state = self.run_state or ("success" if ok else "failed")
            if self.run_state:
                ti = {"task_id": "ping", "state": self.run_state, "hostname": "", "pid": None, "queue": "default"}
            self.runs[json["dag_run_id"]] = {"state": state, "ti": {**ti, "map_index": -1}, "paused": dag["is_paused"]}
            return 200, {"dag_run_id": json["dag_run_id"], "state": "queued"}
        run = self.runs.get(parts[3])
        if run is None:
            return 404, {}
        if len(parts) == 4:
            return 200, {"state": "queued" if run["paused"] else run["state"]}
        if parts[4:] == ["taskInstances"]:
            return 200, {"task_instances": [run["ti"]]}
        if parts[4:6] == ["taskInstances", "ping"] and parts[6] == "logs":
            # Airflow 3.3's answer: the log files named in a "source details" group, then what the task logged;
            # a task that never started has only "Pre Execute" (seen on a live Airflow with mismatched secrets)
            framing = [
                {"event": "::group::Log message source details"},
                {"event": "/airflow/logs/dag_id=perfwatch_doctor/run_id=r/task_id=ping/attempt=1.log"},
                {"event": "::endgroup::"},
                {"event": "::group::Pre Execute"},
            ]
            if run["ti"]["state"] == "success":
                framing += [{"event": "::endgroup::"}, {"event": "Done. Returned value was: worker-1"}]
            return 200, {"content": framing, "continuation_token": None}
        return 404, {}
