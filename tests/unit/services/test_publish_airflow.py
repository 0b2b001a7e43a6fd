"""``perfwatch publish`` and Airflow's answers (a fake Airflow API server, ``tests.helpers.airflow``): on a paused
DAG the gate is queued as a DAG run that waits for the unpause (Airflow queues no Asset event for a paused DAG), and
a DAG the dag-processor has not parsed yet is not a model missing from the config."""

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


def test_a_release_on_a_paused_dag_is_queued_as_a_dag_run_not_an_asset_event(publish):
    """Issue 35 item 3: "the release gate is queued, but the DAG is paused" was untrue: Airflow records the Asset
    event of a paused DAG and never starts a run for it, so after the unpause no gate ran. Now no event is sent;
    the gate is a triggered DAG run of perfwatch_release (Airflow keeps it queued until the unpause), planned as
    the event would plan it (the model's config cases at the published version, trigger release)."""
    from airflow.api_fastapi.core_api.datamodels.dag_run import TriggerDAGRunPostBody

    r, fake = publish("perfwatch://models/net", {"dag_id": "perfwatch_release", "is_paused": True})
    assert r.exit_code == 0, r.output
    assert not [q for q in fake.requests if q["path"] == "/api/v2/assets/events"]  # an event would be lost
    (run,) = [q for q in fake.requests if q["method"] == "POST" and q["path"].endswith("/dagRuns")]
    assert run["path"] == "/api/v2/dags/perfwatch_release/dagRuns"
    body = TriggerDAGRunPostBody.model_validate(run["body"])  # what Airflow's API accepts
    assert body.conf == {"model": "net", "version": "1", "trigger": "release", "case": "all"}
    assert body.logical_date is None and body.dag_run_id.startswith("release__net__v1__")
    assert "is scheduled" not in r.output
    assert (
        f"the DAG perfwatch_release is paused, and Airflow queues no Asset event for a paused DAG: the release gate "
        f"of net version 1 is queued as DAG run {body.dag_run_id} instead and runs once the DAG is unpaused "
        "(airflow dags unpause perfwatch_release)" in r.output
    )
    r, fake = publish("perfwatch://models/net", {"dag_id": "perfwatch_release", "is_paused": False})
    assert r.exit_code == 0 and "the release gate of net version 2 is scheduled (DAG perfwatch_release)" in r.output
    assert [q["path"] for q in fake.requests if q["method"] == "POST"][-1] == "/api/v2/assets/events"


def test_a_dag_not_parsed_yet_is_not_a_model_missing_from_the_config(publish):
    r, _ = publish(None, None)  # no Assets, and no DAG: the dag-processor has not parsed it yet
    assert r.exit_code == 2, r.output
    assert "the DAG perfwatch_release has not been parsed yet (dag-processor): wait or check its log" in r.output
    assert "add the model" not in r.output
    r, _ = publish(None, {"dag_id": "perfwatch_release", "is_paused": False})  # parsed: the config lacks the model
    assert r.exit_code == 2 and "add the model there" in r.output
