"""Authorization past the login (issue 40, item 4): a stored run is shown only to a user the auth manager lets
read the DAG that made it, the metrics are closed to anonymous clients unless opened on purpose, and the
plugin serves no OpenAPI schema. Airflow's own API server app with an auth manager that grants DAGs per user
(``tests.helpers.auth_manager``: the simple auth manager cannot refuse one DAG), real tokens from
``POST /auth/token``: ``alice`` may read DAG ``team_a``, ``bob`` DAG ``team_b``, ``admin`` every DAG."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from tasks.stages.archive import archive_run
from tasks.store import migrate
from tests.helpers import ROOT
from tests.helpers.builders import make_records

pytestmark = pytest.mark.slow  # Airflow's API server app with the plugin


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    """Airflow's API server app and a store with run 1 (resnet, DAG team_a, no-baseline), run 2 (resnet, DAG
    team_b, a regression against run 1 as its baseline) and run 3 (bert, DAG team_b). Yields (client, tokens by
    user name)."""
    from tests.helpers.auth_manager import DagScopedAuthManager

    tmp = tmp_path_factory.mktemp("airflow_authz")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
        mp.setenv("AIRFLOW__CORE__AUTH_MANAGER", "tests.helpers.auth_manager.DagScopedAuthManager")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,alice:viewer,bob:viewer")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(tmp / "passwords.json"))
        mp.setattr(DagScopedAuthManager, "readable", {"alice": {"team_a"}, "bob": {"team_b"}})
        url = f"sqlite:///{tmp / 'store.db'}"
        mp.setenv("PERFWATCH_DATABASE_URL", url)
        for name in ("PERFWATCH_METRICS_TOKEN", "PERFWATCH_METRICS_PUBLIC"):
            mp.delenv(name, raising=False)
        migrate(url)
        archive = str(tmp / "archive")
        ctx, *rest = make_records(tmp, dag_run_id="r1", model="resnet")
        archive_run(url, archive, ctx.model_copy(update={"dag_id": "team_a"}), *rest)
        ctx, *rest, comp = make_records(tmp, dag_run_id="r2", model="resnet", verdict="regression", median=14.0)
        comp = comp.model_copy(update={"baseline_run_ids": [1], "ratio": 1.4, "ci_low": 1.35, "ci_high": 1.45})
        archive_run(url, archive, ctx.model_copy(update={"dag_id": "team_b"}), *rest, comp)
        ctx, *rest = make_records(tmp, dag_run_id="r3", model="bert")
        archive_run(url, archive, ctx.model_copy(update={"dag_id": "team_b"}), *rest)

        from airflow.api_fastapi.app import create_app, purge_cached_app

        purge_cached_app()
        client = TestClient(create_app())
        passwords = json.loads((tmp / "passwords.json").read_text())
        tokens = {}
        for user in ("admin", "alice", "bob"):
            r = client.post("/auth/token", json={"username": user, "password": passwords[user]})
            assert r.status_code == 201, r.text
            tokens[user] = r.json()["access_token"]
        yield client, tokens
        purge_cached_app()


def _get(client: TestClient, token: str, path: str):
    return client.get(path, headers={"Authorization": f"Bearer {token}"}, follow_redirects=False)


def _run_ids(page: str, heading: str) -> list[str]:
    """The first cells (run ids) of the table after ``<h2>heading</h2>``."""
    table = page.split(f"<h2>{heading}</h2>", 1)[1].split("</table>", 1)[0]
    return [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<tr><td[^>]*>(.*?)</td>", table)]


def test_listings_show_only_the_runs_of_dags_the_user_may_read(airflow):
    client, tokens = airflow
    admin = _get(client, tokens["admin"], "/perfwatch/").text
    assert _run_ids(admin, "Latest runs") == ["3", "2", "1"]
    assert _run_ids(admin, "Regressions, last 7 days") == ["2"]
    alice = _get(client, tokens["alice"], "/perfwatch/")
    assert alice.status_code == 200
    assert _run_ids(alice.text, "Latest runs") == ["1"]
    assert "No regressions in the last 7 days (1 run in that time)." in alice.text  # run 2 is team_b's
    assert "bert" not in alice.text and "/runs/2" not in alice.text
    bob = _get(client, tokens["bob"], "/perfwatch/").text
    assert _run_ids(bob, "Latest runs") == ["3", "2"] and _run_ids(bob, "Regressions, last 7 days") == ["2"]
    model = _get(client, tokens["alice"], "/perfwatch/models/resnet").text
    assert _run_ids(model, "Runs") == ["1"] and "/runs/2" not in model and "regression" not in model


def test_a_refused_run_answers_404_as_a_missing_one(airflow):
    client, tokens = airflow
    alice = tokens["alice"]
    xplane = "plugins/profile/2026_01_01/host.xplane.pb"
    assert _get(client, alice, "/perfwatch/runs/1").status_code == 200  # allowed: her DAG's run and its files
    assert _get(client, alice, f"/perfwatch/runs/1/archive/{xplane}").content == b"xplane-bytes"
    assert _get(client, tokens["bob"], f"/perfwatch/runs/2/archive/{xplane}").content == b"xplane-bytes"
    for refused, missing, named in (
        ("/perfwatch/runs/2", "/perfwatch/runs/99", [("run 2", "run 99")]),
        (f"/perfwatch/runs/2/archive/{xplane}", f"/perfwatch/runs/99/archive/{xplane}", [("run 2", "run 99")]),
        ("/perfwatch/models/bert", "/perfwatch/models/nope", [("bert", "nope")]),
        ("/perfwatch/models/bert/plot.png", "/perfwatch/models/nope/plot.png", [("bert", "nope")]),
        (  # the page and its form echo b
            "/perfwatch/compare?a=1&b=2",
            "/perfwatch/compare?a=1&b=99",
            [("b=2", "b=99"), ("value='2'", "value='99'"), ("run 2", "run 99")],
        ),
    ):
        r, m = _get(client, alice, refused), _get(client, alice, missing)
        assert r.status_code == m.status_code == 404, refused
        text = r.text
        for old, new in named:
            text = text.replace(old, new)
        assert text == m.text, refused  # the same answer as for what does not exist
        assert "regression" not in r.text and "team_b" not in r.text and "14.0" not in r.text
    by_version = _get(client, alice, "/perfwatch/compare?model=bert&a_version=1&b_version=1")
    assert by_version.status_code == 404 and "bert" not in by_version.text.split("</h1>", 1)[1].split("<form")[0]


def test_a_baseline_the_user_may_not_see_is_neither_linked_nor_drawn(airflow):
    client, tokens = airflow
    admin = _get(client, tokens["admin"], "/perfwatch/runs/2").text
    assert "baseline run 1</a>" in admin and "compare side by side" in admin
    assert "baseline run 1" in admin.split("id='distribution'", 1)[1]  # its steps drawn beside run 2's
    bob = _get(client, tokens["bob"], "/perfwatch/runs/2")  # may read team_b (run 2), not team_a (run 1)
    assert bob.status_code == 200 and "regression" in bob.text
    assert "baseline run 1</a>" not in bob.text and "compare side by side" not in bob.text
    assert "baseline run 1" not in bob.text.split("id='distribution'", 1)[1]


def test_metrics_are_closed_by_default(airflow, monkeypatch):
    client, tokens = airflow
    anonymous = client.get("/perfwatch/metrics")
    assert anonymous.status_code == 401 and "resnet" not in anonymous.text
    assert "PERFWATCH_METRICS_TOKEN" in anonymous.json()["detail"]
    refused = _get(client, tokens["alice"], "/perfwatch/metrics")  # may not read every DAG
    assert refused.status_code == 403 and "resnet" not in refused.text
    allowed = _get(client, tokens["admin"], "/perfwatch/metrics")
    assert allowed.status_code == 200 and 'model="bert"' in allowed.text
    monkeypatch.setenv("PERFWATCH_METRICS_TOKEN", "scrape-secret")
    assert client.get("/perfwatch/metrics").status_code == 401
    assert _get(client, tokens["admin"], "/perfwatch/metrics").status_code == 401  # the token, when set
    assert _get(client, "scrape-secret", "/perfwatch/metrics").status_code == 200
    monkeypatch.delenv("PERFWATCH_METRICS_TOKEN")
    monkeypatch.setenv("PERFWATCH_METRICS_PUBLIC", "true")  # the explicit opt-out
    assert client.get("/perfwatch/metrics").status_code == 200
    monkeypatch.setenv("PERFWATCH_METRICS_PUBLIC", "yes please")
    bad = client.get("/perfwatch/metrics")
    assert bad.status_code == 500 and "PERFWATCH_METRICS_PUBLIC='yes please': expected true or false" in bad.text


def test_no_openapi_schema_or_docs(airflow):
    """The plugin's app (in Airflow's API server and standalone) serves no schema of its routes to anyone."""
    from plugins.perfwatch.app import standalone_app

    client, tokens = airflow
    paths = ("/perfwatch/openapi.json", "/perfwatch/docs", "/perfwatch/redoc")
    for c, more in ((client, ()), (TestClient(standalone_app()), ("/openapi.json", "/docs"))):
        for path in (*paths, *more):
            for headers in ({}, {"Authorization": f"Bearer {tokens['admin']}"}):
                r = c.get(path, headers=headers, follow_redirects=False)
                assert r.status_code == 404 and "openapi" not in r.text, path
