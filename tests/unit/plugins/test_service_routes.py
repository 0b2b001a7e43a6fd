"""The plugin's service routes without Airflow's API server (``standalone_app``): the bearer tokens of
``/perfwatch/metrics`` and the webhook take the scheme in any case (RFC 7235), and the read-only paths
(metrics, pages) never create a store: a missing or unmigrated one is reported with the reason."""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient


@pytest.fixture
def client(home, monkeypatch):
    from plugins.perfwatch.app import standalone_app

    monkeypatch.setenv("PERFWATCH_METRICS_TOKEN", "scrape-secret")
    monkeypatch.delenv("PERFWATCH_METRICS_PUBLIC", raising=False)
    return TestClient(standalone_app(), headers={"Authorization": "Bearer scrape-secret"})


def test_bearer_scheme_is_case_insensitive():
    from plugins.perfwatch.auth import bearer_ok

    for header in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret", "Bearer  s3cret", " bearer s3cret "):
        assert bearer_ok(header, "s3cret"), header
    for header in (None, "", "Bearer", "Bearer S3CRET", "Basic s3cret", "Bearers3cret", "Bearer s3cret x", "s3cret"):
        assert not bearer_ok(header, "s3cret"), header


def test_metrics_and_webhook_take_a_lowercase_bearer(client, monkeypatch, tmp_path):
    from tasks.store import migrate

    url = f"sqlite:///{tmp_path / 'store.db'}"
    migrate(url)
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", url)
    assert client.get("/perfwatch/metrics", headers={"Authorization": "bearer scrape-secret"}).status_code == 200
    assert client.get("/perfwatch/metrics", headers={"Authorization": "bearer wrong"}).status_code == 401
    monkeypatch.setenv("PERFWATCH_ALERTMANAGER_TOKEN", "hook-token")
    r = client.post("/perfwatch/alertmanager", json={"version": "4"}, headers={"Authorization": "bearer hook-token"})
    assert r.status_code == 200, r.text


def metric_values(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_a_scrape_never_creates_a_store(client, monkeypatch, tmp_path):
    missing = tmp_path / "nowhere" / "perfwatch.db"
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{missing}")
    r = client.get("/perfwatch/metrics")
    assert not missing.exists() and not missing.parent.exists()
    assert r.status_code == 200 and metric_values(r.text) == {("perfwatch_store_up", ()): 0.0}
    assert f"# perfwatch_store_up 0: StoreMissing: no store at SQLite file {missing}" in r.text

    empty = tmp_path / "perfwatch.db"  # a database that exists but was never migrated
    sqlite3.connect(empty).close()
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{empty}")
    r = client.get("/perfwatch/metrics")
    assert metric_values(r.text) == {("perfwatch_store_up", ()): 0.0}
    assert "StoreNotMigrated: the store at SQLite file" in r.text and "not migrated" in r.text
    with sqlite3.connect(empty) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []  # nothing created in it


def test_pages_answer_503_for_a_missing_store_without_creating_it(home, monkeypatch, tmp_path):
    from fastapi import HTTPException

    from plugins.perfwatch.app import store_ready

    missing = tmp_path / "perfwatch.db"
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{missing}")
    with pytest.raises(HTTPException) as e:
        store_ready()
    assert e.value.status_code == 503 and "no store at SQLite file" in e.value.detail
    assert not missing.exists()
    from tasks.store import migrate

    migrate(f"sqlite:///{missing}")
    store_ready()  # a migrated store is ready
