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
    """Airflow's ``POST /auth/token``, ``GET /api/v2/assets``, ``POST /api/v2/assets/events`` and
    ``GET /api/v2/dags/{dag_id}``, recording the requests; it knows one Asset (id 7) and the DAG record ``dag``
    (None: a 404, the DAG not parsed yet; set ``dag["is_paused"]`` for a paused one; ``known_uri`` None: no
    Assets). Bodies are checked against Airflow's own request model."""

    def __init__(self, known_uri: str | None):
        self.requests: list[dict] = []
        self.dag: dict | None = {"dag_id": "perfwatch_profile", "is_paused": False}
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


# Airflow puts the dags folder on sys.path when it parses it (its DAG bundles do): the DAG files import
# their sibling perfwatch_alerts.py. A bare DagBag() does not, so the probes here add it.
DAG_PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "dags")])


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
