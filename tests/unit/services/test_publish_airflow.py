"""``perfwatch publish`` and Airflow's answers (a fake Airflow API server, ``tests.helpers.airflow``): a paused
DAG is not "scheduled", and a DAG the dag-processor has not parsed yet is not a model missing from the config."""

from __future__ import annotations

import zipfile

import pytest
from typer.testing import CliRunner

from tests.helpers.airflow import FakeAirflowAssets


@pytest.fixture
def publish(home, monkeypatch, tmp_path):
    """``perfwatch publish net <a .keras file> --airflow-url <fake>``: returns (run, fake)."""
    from tasks.cli.main import app

    for var in ("PERFWATCH_AIRFLOW_API_URL", "PERFWATCH_AIRFLOW_USERNAME", "PERFWATCH_AIRFLOW_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PERFWATCH_AIRFLOW_TOKEN", "t")
    src = tmp_path / "net.keras"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("config.json", "{}")
    fakes: list[FakeAirflowAssets] = []

    def run(known_uri: str | None, dag: dict | None):
        fake = FakeAirflowAssets(known_uri)
        fake.dag = dag
        fakes.append(fake)
        return CliRunner().invoke(app, ["publish", "net", str(src), "--airflow-url", fake.url]), fake

    yield run
    for f in fakes:
        f.server.shutdown()


def test_a_paused_dag_is_named_and_not_called_scheduled(publish):
    r, _ = publish("perfwatch://models/net", {"dag_id": "perfwatch_profile", "is_paused": True})
    assert r.exit_code == 0, r.output
    assert "is scheduled" not in r.output
    assert "the DAG is paused: unpause it (airflow dags unpause perfwatch_profile) or the gate will wait" in r.output
    r, _ = publish("perfwatch://models/net", {"dag_id": "perfwatch_profile", "is_paused": False})
    assert r.exit_code == 0 and "the release gate of net version 2 is scheduled" in r.output


def test_a_dag_not_parsed_yet_is_not_a_model_missing_from_the_config(publish):
    r, _ = publish(None, None)  # no Assets, and no DAG: the dag-processor has not parsed it yet
    assert r.exit_code == 2, r.output
    assert "the DAG perfwatch_profile has not been parsed yet (dag-processor): wait or check its log" in r.output
    assert "add the model" not in r.output
    r, _ = publish(None, {"dag_id": "perfwatch_profile", "is_paused": False})  # parsed: the config lacks the model
    assert r.exit_code == 2 and "add the model there" in r.output
