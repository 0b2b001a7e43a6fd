"""The Airflow UI plugin, served by Airflow's own API server app (``airflow.api_fastapi.app.create_app``, the
plugin mounted at /perfwatch from the plugins folder) over real HTTP (TestClient): pages behind Airflow's
login (the simple auth manager's real token from ``POST /auth/token``, as a bearer token and as the UI's
``_token`` cookie), /perfwatch with and without the trailing slash, runs newest first, missing values
as "—", and each run's links (Airflow task log, GX Data Docs, archived profile) followed to what they
serve."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from tasks.records import Case, RunContext
from tasks.stages.archive import archive_run
from tasks.store import migrate
from tasks.store.writes import record_failure
from tests.helpers import ROOT as ROOT
from tests.helpers.browser import failed_requests, needs_browser, no_horizontal_scroll, offline_browser
from tests.helpers.builders import make_records

pytestmark = pytest.mark.slow  # every test shares Airflow's API server app with the plugin


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    """Airflow's API server app with the project's plugins folder, the simple auth manager (its generated
    password in a temporary file) and a perfwatch store with: resnet r1 (no-baseline), r2 (regression,
    Data Docs archived), bert r3 (failed at warm-up: no numbers), a ``perfwatch run`` (CLI) run of bert.
    Yields (client, token, store URL, archive root)."""
    tmp = tmp_path_factory.mktemp("airflow_plugin")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
        mp.setenv(
            "AIRFLOW__CORE__AUTH_MANAGER",
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        )
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(tmp / "passwords.json"))
        url = f"sqlite:///{tmp / 'store.db'}"
        mp.setenv("PERFWATCH_DATABASE_URL", url)
        mp.delenv("PERFWATCH_METRICS_TOKEN", raising=False)
        migrate(url)
        archive = str(tmp / "archive")
        archive_run(url, archive, *make_records(tmp, dag_run_id="r1", model="resnet"))
        gx = _data_docs(tmp / "gx")
        *r2, comp = make_records(tmp, dag_run_id="r2", model="resnet", verdict="regression", median=14.0)
        busy = "decided on CPU time: host busy (other processes took 71% of the host's CPU time)"
        comp = comp.model_copy(  # a busy host's gate, decided on CPU time
            update={
                "ratio": 1.4,
                "ci_low": 1.35,
                "ci_high": 1.45,
                "method": "paired-abba",
                "metric": "cpu",
                "evidence": {**comp.evidence, "metric": "cpu", "reason": busy},
            }
        )
        archive_run(url, archive, *r2, comp, extra_dirs={"gx": str(gx)})
        record_failure(
            url,
            RunContext(
                dag_id="perfwatch_profile",
                dag_run_id="manual__2026-11-30T15:00:00+00:00",
                trigger="manual",
                case=Case(model="bert"),
            ),
            "warm-up",
            "RunnerError: out of memory",
        )
        ctx, *rest = make_records(tmp, dag_run_id="cli__1", model="bert")
        archive_run(url, archive, ctx.model_copy(update={"dag_id": "perfwatch_cli"}), *rest)

        from airflow.api_fastapi.app import create_app, purge_cached_app

        purge_cached_app()  # an auth manager of another test's configuration is not reused
        client = TestClient(create_app())
        password = json.loads((tmp / "passwords.json").read_text())["admin"]
        r = client.post("/auth/token", json={"username": "admin", "password": password})
        assert r.status_code == 201, r.text
        yield client, r.json()["access_token"], url, archive
        purge_cached_app()


def _data_docs(target: Path) -> Path:
    from tasks.stages import expectations

    outcomes = {
        "step_times": expectations.validate_step_times([14.0, 14.1, 14.2], min_rows=3),
        "verdict": expectations.validate_verdict(1.4, 1.35, 1.45, tolerance=0.05),
    }
    title = expectations.data_docs_title(RunContext(dag_id="d", dag_run_id="r2", case=Case(model="resnet")), "1")
    expectations.render_data_docs(outcomes, target, title=title)
    return target


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _rows(page: str, heading: str) -> list[list[str]]:
    """The rows (cell texts) of the table after ``<h2>heading</h2>``."""
    table = page.split(f"<h2>{heading}</h2>", 1)[1].split("</table>", 1)[0]
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", table)
        if "<td" in row
    ]


def test_pages_sit_behind_airflows_login(airflow, monkeypatch):
    client, token, _, _ = airflow
    api = client.get("/perfwatch/", headers={"Accept": "application/json"}, follow_redirects=False)
    assert api.status_code == 401
    for path in (
        "/perfwatch/models/resnet",
        "/perfwatch/runs/2",
        "/perfwatch/runs/2/archive/gx/index.html",
        "/perfwatch/models/resnet/plot.png",
    ):
        assert client.get(path, follow_redirects=False).status_code == 401, path
    assert client.get("/perfwatch/", headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403
    browser = client.get("/perfwatch/models/resnet", headers={"Accept": "text/html"}, follow_redirects=False)
    assert browser.status_code == 307
    assert (
        browser.headers["location"] == "/api/v2/auth/login?next=http%3A%2F%2Ftestserver%2Fperfwatch%2Fmodels%2Fresnet"
    )
    login = client.get(browser.headers["location"], follow_redirects=False)  # Airflow's own login redirect
    assert login.status_code == 307 and login.headers["location"].startswith("/auth/login?next=")
    assert unquote(login.headers["location"].split("next=", 1)[1]) == "http://testserver/perfwatch/models/resnet"
    assert client.get("/perfwatch/", headers=_auth(token)).status_code == 200
    client.cookies.set("_token", token)  # what the Airflow UI sets at login
    try:
        assert client.get("/perfwatch/").status_code == 200
    finally:
        client.cookies.clear()
    # metrics: closed by default (an Airflow login that may read every DAG), or behind PERFWATCH_METRICS_TOKEN
    assert client.get("/perfwatch/metrics").status_code == 401
    assert client.get("/perfwatch/metrics", headers=_auth(token)).status_code == 200
    monkeypatch.setenv("PERFWATCH_METRICS_TOKEN", "scrape-secret")
    assert client.get("/perfwatch/metrics").status_code == 401
    assert client.get("/perfwatch/metrics", headers=_auth(token)).status_code == 401
    r = client.get("/perfwatch/metrics", headers=_auth("scrape-secret"))
    assert r.status_code == 200 and "perfwatch_store_up 1.0" in r.text


def test_with_and_without_the_trailing_slash(airflow):
    client, token, _, _ = airflow
    r = client.get("/perfwatch", headers=_auth(token), follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/perfwatch/"
    assert client.get("/perfwatch?x=1", follow_redirects=False).headers["location"] == "/perfwatch/?x=1"
    page = client.get("/perfwatch", headers=_auth(token))
    assert page.status_code == 200 and "<h2>Latest runs</h2>" in page.text  # ours, not Airflow's UI
    r = client.get("/perfwatch/models/resnet/", headers=_auth(token), follow_redirects=False)
    assert r.status_code == 307 and urlsplit(r.headers["location"]).path == "/perfwatch/models/resnet"
    assert "perfwatch: resnet" in client.get("/perfwatch/models/resnet/", headers=_auth(token)).text


def test_newest_first_missing_values_and_links(airflow):
    client, token, _, _ = airflow
    page = client.get("/perfwatch/", headers=_auth(token)).text
    latest = _rows(page, "Latest runs")
    assert [row[0] for row in latest] == ["4", "3", "2", "1"]
    assert "None" not in page and not re.search(r">\s*(nan|NaN|NaT)\s*<", page)
    failed = latest[1]
    assert "failed@warm-up" in failed and "—" in failed  # no step time for a failed run
    assert [row[0] for row in _rows(page, "Regressions, last 7 days")] == ["2"]
    # each run: its page, the Airflow task log (the failed stage's task, else archive), Data Docs, profile
    assert "<a href='/perfwatch/runs/2'>2</a>" in page
    assert "<a class='airflow' href='/dags/d/runs/r2/tasks/archive/mapped'>task log</a>" in page
    assert (
        "<a class='airflow' href='/dags/perfwatch_profile/runs/manual__2026-11-30T15%3A00%3A00%2B00%3A00"
        "/tasks/measure/mapped'>task log</a>"  # warm-up is one of the three stages of the measure task
    ) in page
    assert "<a href='/perfwatch/runs/2/archive/gx/index.html'>Data Docs</a>" in page
    assert "<a href='/perfwatch/runs/2#profile'>profile</a>" in page
    cli_links = latest[0][-1]
    assert "task log" not in cli_links and "profile" in cli_links  # a `perfwatch run` has no Airflow DAG run
    # a Data Docs link only where the site is archived (run 2): runs 1 and 4 were archived without one, and a
    # link there would 404 (the run page says "none archived")
    assert "Data Docs" not in cli_links and "Data Docs" not in latest[3][-1] and "Data Docs" in latest[2][-1]
    model = client.get("/perfwatch/models/resnet", headers=_auth(token)).text
    runs = _rows(model.replace("<table>", "<h2>t</h2><table>", 1), "t")
    assert [row[0] for row in runs] == ["2", "1"]
    assert "Data Docs" in runs[0][-1] and "Data Docs" not in runs[1][-1] and "profile" in runs[1][-1]
    assert client.get("/perfwatch/runs/1/archive/gx/index.html", headers=_auth(token)).status_code == 404
    assert "None" not in model and "<a href='/perfwatch/models/resnet/plot.png'" not in model
    png = client.get("/perfwatch/models/resnet/plot.png", headers=_auth(token))
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert client.get("/perfwatch/models/nope", headers=_auth(token)).status_code == 404


def test_a_runs_links_open_its_data_docs_profile_and_task_log(airflow):
    client, token, _, archive = airflow
    page = client.get("/perfwatch/runs/2", headers=_auth(token))
    assert page.status_code == 200
    text = page.text
    # the verdict with its figures, the metric that decided and why
    assert "<dt>ratio</dt><dd>CPU-time ratio 1.400 [1.350, 1.450]</dd>" in text  # the verdict's story
    assert "<dt>method</dt><dd>paired ABBA gate: both versions in one process</dd>" in text
    assert "<dt>why</dt><dd>decided on CPU time: host busy (other processes took 71% of" in text
    assert "<dt>ratio</dt>" not in client.get("/perfwatch/runs/3", headers=_auth(token)).text  # no verdict
    assert "/dags/d/runs/r2'>DAG run</a>" in text and "/dags/d/runs/r2/tasks/archive/mapped'>task log</a>" in text
    # the archived profile: where it is, the TensorBoard line and the run (session) name, the xplane download
    run_dir = re.search(r"pick the run <code>([^<]+)</code>", text).group(1)
    assert run_dir.startswith("run000002_") and f"tensorboard --logdir {archive}/resnet" in text
    assert (Path(archive) / "resnet" / run_dir / "gx" / "index.html").is_file()
    (xplane,) = re.findall(r"href='(/perfwatch/runs/2/archive/plugins/profile/[^']+\.xplane\.pb)'", text)
    assert client.get(xplane, headers=_auth(token)).content == b"xplane-bytes"
    # the Data Docs: the index names the run and every page it links resolves, through the plugin
    docs = re.search(r"href='([^']+/gx/index\.html)'>open the Data Docs", text).group(1)
    index = client.get(docs, headers=_auth(token))
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert "<strong >Data Docs</strong> | resnet v1 train-bs16, DAG run d/r2" in index.text
    seen, todo = set(), [docs]
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        r = client.get(url, headers=_auth(token))
        assert r.status_code == 200, f"{url}: {r.status_code}"
        if url.endswith(".html"):
            for link in re.findall(r"""(?:href|src)=\\?["']([^"'#\\]+)""", r.text) + re.findall(
                r"'_table_row_link_path': '([^']+)'", r.text
            ):
                if "://" not in link:
                    todo.append(urljoin(url, link))
    assert len([u for u in seen if "/validations/" in u and u.endswith(".html")]) == 2
    assert len([u for u in seen if "/expectations/" in u]) == 2
    # a failed run has no archive; paths outside the run's archive directory are refused
    failed = client.get("/perfwatch/runs/3", headers=_auth(token)).text
    assert "RunnerError: out of memory" in failed and "no archive" in failed and "None" not in failed
    assert client.get("/perfwatch/runs/3/archive/gx/index.html", headers=_auth(token)).status_code == 404
    for bad in (
        "/perfwatch/runs/2/archive/gx/%2E%2E/%2E%2E/r1",
        "/perfwatch/runs/2/archive/gx",
        "/perfwatch/runs/2/archive/gx//index.html",
        "/perfwatch/runs/99/archive/gx/index.html",
    ):
        assert client.get(bad, headers=_auth(token)).status_code == 404, bad


def test_standalone_app_takes_the_deployments_tokens_and_has_no_login_page(airflow):
    """``standalone_app()`` (uvicorn without Airflow's API server): the same routes and rules, but a browser
    without a login gets 401, not a redirect to a login page that server does not have."""
    from plugins.perfwatch.app import standalone_app

    _, token, _, _ = airflow
    client = TestClient(standalone_app())
    assert client.get("/perfwatch/", headers={"Accept": "text/html"}, follow_redirects=False).status_code == 401
    assert client.get("/perfwatch", follow_redirects=False).headers["location"] == "/perfwatch/"
    page = client.get("/perfwatch", headers=_auth(token))
    assert page.status_code == 200 and [row[0] for row in _rows(page.text, "Latest runs")] == ["4", "3", "2", "1"]
    assert client.get("/perfwatch/metrics").status_code == 401
    assert client.get("/perfwatch/metrics", headers=_auth(token)).status_code == 200


def test_airflow_loads_the_plugin_package_once(airflow):
    """Airflow's plugins manager executes every ``.py`` file of the plugins folder on its own, by path;
    ``plugins/.airflowignore`` keeps the package out of that scan, so it executes ``perfwatch_plugin.py`` only:
    the plugin is registered once, without import errors, and each module of the package is imported once,
    as ``perfwatch.<module>``, never as a top-level module of its own (``pages``, ``__init__``, ...)."""
    import sys

    from airflow import plugins_manager

    ours = [p for p in plugins_manager.get_plugin_info() if p["name"] == "perfwatch"]
    assert len(ours) == 1 and str(ours[0]["source"]) == "$PLUGINS_FOLDER/perfwatch_plugin.py"
    assert [e for e in plugins_manager.get_import_errors() if "perfwatch" in e] == []
    modules = {p.stem for p in (ROOT / "plugins" / "perfwatch").glob("*.py")}
    assert {"perfwatch.app", "perfwatch.pages"} <= set(sys.modules)  # what the plugin's registration imports
    assert modules & set(sys.modules) == set()


def test_the_comparison_page_and_the_empty_states(airflow):
    """Any two runs side by side (by run ids, or by model and versions); bad or missing runs say why; the
    index's note when there are runs but no regression is the count of runs, not "No runs yet"."""
    from plugins.perfwatch.pages import regressions_note

    client, token, _, _ = airflow
    page = client.get("/perfwatch/compare?a=1&b=2", headers=_auth(token))
    assert page.status_code == 200 and "run 1 vs run 2" in page.text and "median step time ×1.400" in page.text
    assert "change of the step time" in page.text and '<div id="ecdf"' in page.text
    assert "/perfwatch/assets/plotly.min.js" in page.text and "cdn" not in page.text.lower()
    form = client.get("/perfwatch/compare", headers=_auth(token))
    assert form.status_code == 200 and "<form" in form.text
    assert client.get("/perfwatch/compare?a=x&b=2", headers=_auth(token)).status_code == 422
    failed = client.get("/perfwatch/compare?a=1&b=3", headers=_auth(token))
    assert failed.status_code == 404 and "run 3 is not a successful run in the store" in failed.text
    by_version = client.get("/perfwatch/compare?model=resnet&a_version=1&b_version=7", headers=_auth(token))
    assert by_version.status_code == 404 and "no successful run of resnet version 7" in by_version.text
    model = client.get("/perfwatch/models/resnet", headers=_auth(token)).text
    assert '<div id="trend"' in model and "plotly_click" in model
    assert regressions_note(12, 0) == "No regressions in the last 7 days (12 runs in that time)."
    assert regressions_note(0, 0, dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.UTC)) == (
        "No regressions in the last 7 days: no run in that time (the newest run started 2026-11-01 02:00 UTC)."
    )
    assert regressions_note(3, 1) is None


@needs_browser
def test_the_pages_inside_airflows_ui(airflow, tmp_path):
    """Airflow's own UI (its API server on a loopback port, headless Chromium with the network off, logged in by
    the UI's ``_token`` cookie): the "perfwatch" nav entry frames the run page at ``/plugin/perfwatch/...``, the
    page fits the frame without a horizontal scroll bar and without a failed request, and a link to Airflow's own
    pages (the task log) opens in Airflow's window, not inside the frame. Screenshot: ``airflow-frame.png``."""
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.helpers.browser import serving
    from tests.system.test_metrics import free_port

    client, token, _, _ = airflow
    with serving(client.app, free_port(), lifespan="off") as base:
        with offline_browser(width=1280, height=900) as browser:
            browser.get(f"{base}/perfwatch/assets/perfwatch.css")
            browser.add_cookie({"name": "_token", "value": token, "path": "/"})
            browser.get(f"{base}/plugin/perfwatch/perfwatch/runs/2")
            wait = WebDriverWait(browser, 60)
            nav = wait.until(
                ec.presence_of_element_located(
                    ("css selector", "a[href$='plugin/perfwatch'], a[href*='plugin/perfwatch']")
                )
            )
            assert "perfwatch" in nav.text
            wait.until(ec.frame_to_be_available_and_switch_to_it(("css selector", "iframe[title='perfwatch']")))
            wait.until(lambda d: d.execute_script("return document.querySelectorAll('.js-plotly-plot').length") >= 1)
            assert "regression" in browser.find_element("css selector", "section.story").text
            assert failed_requests(browser) == [] and no_horizontal_scroll(browser)
            assert not browser.find_element("css selector", "a.unframed").is_displayed()  # already inside Airflow
            browser.switch_to.default_content()
            shot = tmp_path / "airflow-frame.png"
            browser.save_screenshot(str(shot))
            if os.environ.get("PERFWATCH_SCREENSHOTS_DIR"):
                shutil.copy(shot, Path(os.environ["PERFWATCH_SCREENSHOTS_DIR"]) / shot.name)
            assert browser.current_url == f"{base}/plugin/perfwatch/perfwatch/runs/2"
            browser.switch_to.frame(browser.find_element("css selector", "iframe[title='perfwatch']"))
            browser.find_element("link text", "task log").click()
            browser.switch_to.default_content()
            wait.until(lambda d: d.current_url == f"{base}/dags/d/runs/r2/tasks/archive/mapped")
            wait.until(lambda d: d.find_elements("css selector", "iframe[title='perfwatch']") == [])  # Airflow's page
