"""What the pages say of a run, without a browser (``plugins.perfwatch.pages`` over HTTP with the plugin's
``standalone_app`` and a real Airflow JWT): a failed run's reason is its error's first line on the index, the run
page and the model page, as the run page's Error section says it; a run accepted as the baseline after its
verdict advised accepting it says who accepted it instead of the stale advice, and a run not accepted names its own
id in the advice; the run page's TensorBoard line is the one that works with what perfwatch installs. The store is
the browser test's demo-like one (``tests.system.test_pages_browser.fill_demo_like``)."""

from __future__ import annotations

import datetime as dt
import html
import re

import pytest
from fastapi.testclient import TestClient

from plugins.perfwatch.pages import TENSORBOARD_HOW, shown_reason
from tasks.records import Acceptance
from tasks.services.story import ACCEPT_ADVICE
from tasks.store import migrate
from tests.system.test_pages_browser import ADVICE, DEVICE_MISSING, NOT_MADE, UNKNOWN_MODEL, fill_demo_like


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """(client with a viewer's token as the UI's cookie, run ids) over a demo-like store."""
    tmp = tmp_path_factory.mktemp("pages_text")
    url = f"sqlite:///{tmp / 'store.db'}"
    migrate(url)
    ids = fill_demo_like(url, tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWATCH_DATABASE_URL", url)
        mp.setenv(
            "AIRFLOW__CORE__AUTH_MANAGER",
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        )
        mp.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "pages-text-secret")
        from airflow.api_fastapi.app import init_auth_manager
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        from plugins.perfwatch.app import standalone_app

        token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="VIEWER"))
        client = TestClient(standalone_app())
        client.cookies.set("_token", token)
        yield client, ids


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _row(page: str, run_id: int) -> str:
    """The text of the index's Latest runs row of ``run_id``."""
    table = page.split("<h2>Latest runs</h2>", 1)[1]
    (row,) = [r for r in re.findall(r"<tr>(.*?)</tr>", table) if f"/runs/{run_id}'>{run_id}</a></td>" in r]
    return _text(row)


def test_a_failed_runs_reason_is_its_errors_first_line_on_every_page(pages):
    client, ids = pages
    index = client.get("/perfwatch/").text
    assert DEVICE_MISSING in _row(index, ids["failed_env-fingerprint"])
    assert UNKNOWN_MODEL in _row(index, ids["failed_pull-model-version"])
    assert "Traceback" not in _row(index, ids["failed_env-fingerprint"])
    run = client.get(f"/perfwatch/runs/{ids['failed_env-fingerprint']}").text
    story = run.split("<h2>The run</h2>", 1)[0]
    assert f"<dt>why</dt><dd>{html.escape(DEVICE_MISSING)}</dd>" in story  # the verdict's story says why
    model = client.get("/perfwatch/models/demo_mobilenet").text
    assert html.escape(DEVICE_MISSING) in model.split("<h2>Trend</h2>", 1)[0]  # the newest verdict of its case
    assert re.search(r"failed@(<wbr>)?env-fingerprint", model.split("<h2>Runs</h2>", 1)[1])  # not "—" as its verdict
    compare = client.get(f"/perfwatch/compare?a={ids['demo_v1']}&b={ids['failed_env-fingerprint']}")
    assert compare.status_code == 404  # a failed run has no numbers to compare: the page says so


def test_an_accepted_run_says_so_instead_of_the_advice_to_accept_it(pages):
    client, ids = pages
    index = client.get("/perfwatch/").text
    accepted = _row(index, ids["demo_v1"])
    assert NOT_MADE in accepted and "(accepted as the baseline by make demo on " in accepted
    assert "if it is sound after all" not in accepted and "RUN_ID" not in index
    assert f"perfwatch baseline accept {ids['long']} --by NAME --reason WHY" in _row(index, ids["long"])
    run = _text(client.get(f"/perfwatch/runs/{ids['demo_v1']}").text)
    assert "if it is sound after all" not in run
    assert re.search(r"whyno.*\(accepted as the baseline by make demo on \d{4}-\d\d-\d\d \d\d:\d\d UTC\)", run)
    assert "baselineaccepted as the baseline by make demo on " in run and "the demo's version 1, accepted" in run
    compare = _text(client.get(f"/perfwatch/compare?a={ids['demo_v1']}&b={ids['demo_v2']}").text)
    assert "(accepted as the baseline by make demo on " in compare and "if it is sound after all" not in compare
    model = client.get("/perfwatch/models/demo_mobilenet").text
    assert "if it is sound after all" not in model  # the chart's hover text and the newest verdicts


def test_the_run_pages_tensorboard_line_works_with_what_perfwatch_installs(pages):
    """``tensorboard --logdir`` needs tensorboard (TensorFlow 2.21 no longer pulls it in; perfwatch declares it)
    and xprof gives it the Profile tab (its ``profile`` plugin): both are in perfwatch's environment, so the page
    says no ``pip install ... tensorboard-plugin-profile`` (xprof's predecessor, which would clash with it)."""
    from importlib.metadata import distribution, entry_points

    client, ids = pages
    page = client.get(f"/perfwatch/runs/{ids['demo_v1']}").text
    assert TENSORBOARD_HOW in page and "tensorboard --logdir " in page
    assert "tensorboard-plugin-profile" not in page and "pip install tensorboard xprof" in _text(page)
    assert distribution("tensorboard").version.startswith("2.") and distribution("xprof")
    plugins = {e.name: e.value for e in entry_points(group="tensorboard_plugins")}
    assert plugins["profile"].startswith("xprof.")  # the Profile tab comes from xprof


def test_shown_reason():
    at = dt.datetime(2026, 12, 2, 3, 31, tzinfo=dt.UTC)
    acc = Acceptance(by="make demo", at=at, reason="ok")
    ok = {"run_id": 3, "status": "success", "error": None, "reason": NOT_MADE + ADVICE}
    assert shown_reason(ok, acc) == NOT_MADE + " (accepted as the baseline by make demo on 2026-12-02 03:31 UTC)"
    later = acc.model_copy(update={"superseded_at": at + dt.timedelta(days=1)})
    assert shown_reason(ok, later).endswith("by make demo on 2026-12-02 03:31 UTC, superseded on 2026-12-03 03:31 UTC)")
    assert shown_reason(ok).endswith("(if it is sound after all: perfwatch baseline accept 3 --by NAME --reason WHY)")
    failed = {"run_id": 9, "status": "failed", "error": f"{DEVICE_MISSING}\nTraceback (most recent call last):\n"}
    assert shown_reason(failed) == DEVICE_MISSING
    assert shown_reason({"run_id": 1, "status": "success", "reason": None}) is None
    assert shown_reason({"run_id": 1, "status": "failed", "error": " "}) is None
    assert ACCEPT_ADVICE.search(ADVICE) and shown_reason({"status": "success", "reason": "plain"}, acc) == "plain"


def _models_row(page: str, model: str) -> list[str]:
    """The cells of the index's Models row of ``model``, as text."""
    table = page.split("<h2>Models</h2>", 1)[1].split("</table>", 1)[0]
    (row,) = [r for r in re.findall(r"<tr>(.*?)</tr>", table) if f">{model}</a></td>" in r]
    return [_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]


def test_the_index_and_the_model_page_say_which_is_the_newest_version_measured(pages):
    """The index's "newest version" was the version of the model's newest run, ``latest`` where that run failed
    before its pull: it says the newest version measured (of its successful runs), and so does the model page."""
    client, _ = pages
    index = client.get("/perfwatch/").text
    assert "newest version measured" in index
    assert _models_row(index, "demo_mobilenet")[2] == "v2"
    model = _text(client.get("/perfwatch/models/demo_mobilenet").text)
    assert "Newest version measured: v2 (its newest successful run: " in model


def test_a_cpu_time_ratio_says_so_in_the_pages_tables():
    """A ratio cell named no metric: one of CPU time says ``(CPU time)``; one of wall time is the figure alone."""
    from starlette.requests import Request

    from plugins.perfwatch.pages import _cell

    request = Request({"type": "http", "path": "/perfwatch/", "root_path": "", "headers": [], "query_string": b""})
    cpu = {"ratio": 1.36, "ci_low": 1.3, "ci_high": 1.4, "metric": "cpu"}
    assert _text(_cell(request, "ratio", cpu)).endswith("(CPU time)")
    assert "CPU" not in _cell(request, "ratio", cpu | {"metric": "wall"})
