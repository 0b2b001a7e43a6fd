"""``perfwatch doctor`` over a fake Airflow API (``tests.helpers.airflow.FakeAirflowApi``): a healthy deployment
passes; a JWT secret that differs between the scheduler/worker and the api-server is named, both by the
task-token check and from the failed task alone; a missing pool, an unparsed DAG, a store that is missing or
not migrated and a missing model store are each named with what to do."""

from __future__ import annotations

import sqlite3

import pytest

from tasks.services import doctor
from tasks.settings import Settings
from tests.helpers.airflow import FakeAirflowApi

CONFIG_TEXT = """\
[core]
# comment lines, as `airflow config list --show-values` writes them
dags_folder = /opt/dags
execution_api_server_url = http://127.0.0.1:8080/execution/

[api_auth]
jwt_secret = a-shared-secret-of-sixty-four-bytes-as-pyjwt-recommends-for-hs512-x
jwt_leeway = 10

[execution_api]
jwt_audience = urn:airflow.apache.org:task
"""


SECRET = "a-shared-secret-of-sixty-four-bytes-as-pyjwt-recommends-for-hs512-x"


@pytest.fixture
def ready(home):
    """Settings of a migrated store and a model store with one model."""
    from tasks.store import migrate

    (home / "models" / "resnet" / "1").mkdir(parents=True)
    s = Settings.from_env()
    migrate(s.database_url)
    return s


def by_name(checks):
    return {c.name: c for c in checks}


def no_sleep(_s):
    pass


def test_the_airflow_configuration_is_read_as_the_executor_reads_it():
    config = doctor.parse_airflow_config(CONFIG_TEXT)
    assert config["api_auth"]["jwt_secret"].startswith("a-shared-secret")
    assert doctor.execution_api_url(config) == "http://127.0.0.1:8080/execution/"
    assert doctor.execution_api_url({"api": {"base_url": "/airflow"}}) == "http://localhost:8080/airflow/execution/"
    assert doctor.sign_task_token({"api_auth": {"jwt_private_key_path": "/k.pem", "jwt_secret": "x"}}) is None


def test_a_healthy_deployment_passes(ready):
    api = FakeAirflowApi(SECRET)
    checks = doctor.run_doctor(api, ready, doctor.parse_airflow_config(CONFIG_TEXT), sleep=no_sleep)
    assert [c.name for c in checks] == ["store", "model store", "airflow", "dags", "pool", "task token", "task"]
    assert all(c.ok for c in checks), [c.line() for c in checks]
    got = by_name(checks)
    assert "1 model(s) (resnet)" in got["model store"].detail and "schema revision" in got["store"].detail
    assert "perfwatch_doctor run doctor__" in got["task"].detail and "ping on worker-1" in got["task"].detail
    # the profile and release DAGs are paused: said (their runs wait), not a failure
    assert "the DAG is paused: unpause it (airflow dags unpause perfwatch_profile)" in got["dags"].detail
    assert "the DAG is paused: unpause it (airflow dags unpause perfwatch_release)" in got["dags"].detail


def test_a_jwt_secret_mismatch_is_named(ready):
    api = FakeAirflowApi(SECRET)
    api.api_secret = "the-api-servers-own-" + "x" * 64  # e.g. a component started without the shared config
    checks = by_name(doctor.run_doctor(api, ready, doctor.parse_airflow_config(CONFIG_TEXT), sleep=no_sleep))
    assert checks["task token"].ok is False and "refuses this machine's task tokens" in checks["task token"].detail
    assert "do not share one JWT secret" in checks["task token"].detail
    assert checks["task"].ok is False and "do not share one JWT secret" in checks["task"].detail
    assert "AIRFLOW__API_AUTH__JWT_SECRET" in checks["task"].detail
    # doctor run where Airflow's configuration cannot be read: the failed task alone names the likely cause
    checks = by_name(doctor.run_doctor(api, ready, None, sleep=no_sleep))
    assert checks["task token"].ok is None
    assert "failed before it started (no host, no pid) and left an empty log: most likely" in checks["task"].detail
    assert "do not share one JWT secret" in checks["task"].detail


def test_missing_pool_unparsed_dag_and_a_task_nobody_runs(ready):
    api = FakeAirflowApi(SECRET)
    del api.pools["perfwatch_profile"], api.dags["perfwatch_doctor"]
    checks = by_name(doctor.run_doctor(api, ready, doctor.parse_airflow_config(CONFIG_TEXT), sleep=no_sleep))
    assert checks["pool"].ok is False and 'airflow pools set perfwatch_profile 1 "' in checks["pool"].detail
    assert checks["dags"].ok is False
    assert "the DAG perfwatch_doctor has not been parsed yet (dag-processor): wait or check its log" in (
        checks["dags"].detail
    )
    assert checks["task"].ok is None
    api = FakeAirflowApi(SECRET)
    api.run_state = "queued"  # no worker serves the queue
    got = doctor.check_task(api, timeout_s=0.01, sleep=no_sleep)
    assert got.ok is False and "did not finish within" in got.detail and "ping queued (queue default)" in got.detail


def test_store_and_model_store_problems_are_named(home):
    s = Settings.from_env()
    store, models = doctor.check_store(s), doctor.check_model_store(s)
    assert store.ok is None and "not yet: no store at SQLite file" in store.detail
    assert not (home / "perfwatch.db").exists()  # the check creates nothing
    assert models.ok is None and "does not exist (PERFWATCH_MODEL_STORE" in models.detail
    home.mkdir(exist_ok=True)
    sqlite3.connect(home / "perfwatch.db").close()
    assert "not migrated" in doctor.check_store(s).detail
    s = Settings(**{**vars(s), "database_url": "postgresql+psycopg://u@127.0.0.1:9/x"})  # nobody listens on 9
    assert doctor.check_store(s).ok is False and "cannot connect" in doctor.check_store(s).detail


def test_an_unreachable_airflow_stops_the_airflow_checks(ready):
    from tasks.services.airflow_api import AirflowApiError

    class Down:
        def call(self, *a, **k):
            raise AirflowApiError("Airflow's API at http://127.0.0.1:9 could not be reached: ConnectError")

    checks = doctor.run_doctor(Down(), ready, None)
    assert [(c.name, c.ok) for c in checks][2:] == [
        ("airflow", False),
        ("dags", None),
        ("pool", None),
        ("task token", None),
        ("task", None),
    ]
