"""The pages say what ``perfwatch compare`` and ``gate`` say (issue 25, the audit of main): a comparison of two
versions takes the run ``gate`` answers with (the newest paired ABBA verdict, not a later unpaired run) and says
which and why; the comparison page shows the verdict's figure beside the medians' ratio and why they differ; an
inconclusive run's op deltas say the change they split is not established; the model page's sweep warns when its
points come from several versions. Over HTTP with the plugin's ``standalone_app`` and a real Airflow JWT, on a
store of stage records (``tests.helpers.builders``) with the methods the product writes."""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tasks.analysis.attribution import attribute_against_run
from tasks.stages.archive import archive_run
from tasks.store import migrate, reads
from tests.helpers.builders import CAND_OPS, T0, records


def _v2(url: str, tmp: Path, name: str, *, verdict: str, method: str, ratio: float, median: float, day: int, v1: int):
    """A v2 run of model m compared with run ``v1``: its ratio and interval, its reason, and the op attribution
    baseline-compare computes (``attribute_against_run`` against v1's ops, scaled to the verdict's ratio)."""
    ctx, pulled, env, warm, run, parse, comp = records(tmp, name, version="2", ops=CAND_OPS, median=median)
    ctx = ctx.model_copy(update={"started_at": T0 + dt.timedelta(days=day)})
    parsed = json.loads(Path(parse.parsed_path).read_text())
    attribution = attribute_against_run(reads.run_ops(url, v1), v1, parsed, 5, median, ratio=ratio, ratio_source=method)
    comp = comp.model_copy(
        update={
            "verdict": verdict, "method": method, "ratio": ratio, "ci_low": ratio - 0.05, "ci_high": ratio + 0.05,
            "baseline_run_ids": [v1],
            "evidence": {"reason": f"{verdict} ({method})", "attribution": attribution},
        }
    )  # fmt: skip
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """(client, run ids): model m v1; v2 unpaired inconclusive, v2 paired regression, v2 unpaired inconclusive
    again (the audit's store); model sw with its batch size 8 measured by v1 and 4 by v2."""
    tmp = tmp_path_factory.mktemp("pages_compare")
    url = f"sqlite:///{tmp / 'store.db'}"
    migrate(url)
    ctx, *rest = records(tmp, "v1", version="1")
    v1 = archive_run(url, str(tmp / "archive"), ctx.model_copy(update={"started_at": T0}), *rest).run_id
    ids = {"v1": v1}
    ids["first"] = _v2(
        url, tmp, "a", verdict="inconclusive", method="history-lookback", ratio=1.5, median=15.0, day=1, v1=v1
    )
    ids["paired"] = _v2(
        url, tmp, "b", verdict="regression", method="paired-abba", ratio=1.4, median=13.88, day=2, v1=v1
    )
    ids["adhoc"] = _v2(
        url, tmp, "c", verdict="inconclusive", method="history-lookback", ratio=1.45, median=14.5, day=3, v1=v1
    )
    for name, version, bs, day in (("s8", "1", 8, 4), ("s4", "2", 4, 5)):
        ctx, pulled, *rest = records(tmp, name, version=version, median=bs * 2.0)
        case = ctx.case.model_copy(update={"model": "sw", "batch_size": bs})
        ctx = ctx.model_copy(update={"case": case, "started_at": T0 + dt.timedelta(days=day)})
        archive_run(url, str(tmp / "archive"), ctx, pulled.model_copy(update={"model": "sw"}), *rest)
    from tests.helpers.builders import BASELINE_FINGERPRINT, CANDIDATE_FINGERPRINT, env_record

    for name, version, fp, day in (("e1", "1", BASELINE_FINGERPRINT, 6), ("e2", "2", CANDIDATE_FINGERPRINT, 7)):
        ctx, pulled, _, *rest = records(tmp, name, version=version)  # model ev: v2 measured on another environment
        ctx = ctx.model_copy(
            update={"case": ctx.case.model_copy(update={"model": "ev"}), "started_at": T0 + dt.timedelta(days=day)}
        )
        archive_run(url, str(tmp / "archive"), ctx, pulled.model_copy(update={"model": "ev"}), env_record(fp), *rest)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFWATCH_DATABASE_URL", url)
        mp.setenv(
            "AIRFLOW__CORE__AUTH_MANAGER",
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        )
        mp.setenv(
            "AIRFLOW__API_AUTH__JWT_SECRET", "pages-compare-secret-of-64-bytes-for-the-simple-auth-managers-hs512"
        )
        from airflow.api_fastapi.app import init_auth_manager
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        from plugins.perfwatch.app import standalone_app

        token = init_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="VIEWER"))
        client = TestClient(standalone_app())
        client.cookies.set("_token", token)
        yield client, ids


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_comparison_page_of_two_versions_takes_the_run_gate_answers_with(pages):
    client, ids = pages
    page = client.get("/perfwatch/compare?model=m&a_version=1&b_version=2")
    assert page.status_code == 200, page.text
    text = _text(page.text)
    assert f"perfwatch: run {ids['v1']} vs run {ids['paired']}" in text  # not the newer unpaired run
    assert (
        f"v2: run {ids['paired']}, as perfwatch gate m 2 answers: the newest paired ABBA gate of the version; the "
        f"newer run {ids['adhoc']} (inconclusive, history-lookback) is not a paired gate and does not override it"
    ) in text


def test_the_comparison_page_shows_the_verdicts_figure_beside_the_medians_ratio_and_why_they_differ(pages):
    client, ids = pages
    text = _text(client.get(f"/perfwatch/compare?a={ids['v1']}&b={ids['paired']}").text)
    assert "median step time ×1.388 (+38.8%), b over a" in text
    assert f"step-time ratio ×1.400 [1.350, 1.450] regression : the verdict's figure, run {ids['paired']}" in text
    assert (
        "why x1.388 differs from the verdict's 1.400: the verdict's paired gate timed both versions in one process"
    ) in text


def test_an_inconclusive_runs_op_deltas_say_the_change_is_not_established(pages):
    client, ids = pages
    page = client.get(f"/perfwatch/runs/{ids['adhoc']}").text
    ops = _text(page.split("id='ops'", 1)[1].split("<h2", 1)[0])
    assert "is not established: the verdict is inconclusive (ratio 1.450 [1.400, 1.500]" in ops
    assert "change of the step time" in ops  # the deltas are still shown, adding up to the change
    decided = client.get(f"/perfwatch/runs/{ids['paired']}").text
    assert "not established" not in decided and "change of the step time" in decided


def test_the_model_pages_sweep_warns_when_its_points_come_from_several_versions(pages):
    client, _ = pages
    page = client.get("/perfwatch/models/sw").text
    (warning,) = re.findall(r"<p class='note warn' id='sweep-versions'>(.*?)</p>", page)
    assert "more than one model version (v1: train-bs8; v2: train-bs4): a curve may mix versions" in _text(warning)
    assert "sweep-versions" not in client.get("/perfwatch/models/m").text


def test_the_comparison_page_of_versions_from_two_environments_warns_naming_the_fields(pages):
    """As ``perfwatch compare`` does: two versions measured in different environments are not compared silently."""
    client, _ = pages
    text = _text(client.get("/perfwatch/compare?model=ev&a_version=1&b_version=2").text)
    assert "were measured in different environments (gpu.driver_version 535.104.05 -> 535.129.03;" in text
