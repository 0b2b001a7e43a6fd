"""The Airflow UI plugin: history pages served from the store."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from tasks.stages.archive import archive_run
from tests.test_store import make_records

ROOT = Path(__file__).resolve().parent.parent


def _plugin_module():
    spec = importlib.util.spec_from_file_location("perfwatch_history_plugin", ROOT / "plugins" / "perfwatch_history.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_history_pages(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    from tasks.store import migrate

    migrate(url)
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", url)
    archive_run(url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r1", model="resnet"))
    archive_run(url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="r2", model="resnet",
                                                              verdict="regression", median=14.0))
    mod = _plugin_module()
    assert mod.PerfwatchPlugin.fastapi_apps[0]["url_prefix"] == "/perfwatch"
    client = TestClient(mod.app)
    index = client.get("/")
    assert index.status_code == 200
    assert "<a href='models/resnet'>resnet</a>" in index.text
    assert "class='regression'" in index.text
    page = client.get("/models/resnet")
    assert page.status_code == 200 and "14.000" in page.text
    png = client.get("/models/resnet/plot.png")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert client.get("/models/nope").status_code == 404
