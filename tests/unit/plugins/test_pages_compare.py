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
    baseline-compare computes (``attribute_against_run`` against v1's ops, on the two runs' measured medians)."""
    ctx, pulled, env, warm, run, parse, comp = records(tmp, name, version="2", ops=CAND_OPS, median=median)
    ctx = ctx.model_copy(update={"started_at": T0 + dt.timedelta(days=day)})
    parsed = json.loads(Path(parse.parsed_path).read_text())
    attribution = attribute_against_run(reads.run_ops(url, v1), v1, parsed, 5, median)
    comp = comp.model_copy(
        update={
            "verdict": verdict, "method": method, "ratio": ratio, "ci_low": ratio - 0.05, "ci_high": ratio + 0.05,
            "baseline_run_ids": [v1],
            "evidence": {"reason": f"{verdict} ({method})", "attribution": attribution},
        }
    )  # fmt: skip
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id


#: a busy host (other processes took 62% of it): the paired gate decides on CPU time
LOADED = {"wall_s": 10.0, "cpus": 2, "load1_start": 8.0, "load1_end": 9.0, "other_cpu_share": 0.62, "steal_share": 0.0}


def _cpu_gate(url: str, tmp: Path) -> tuple[int, int]:
    """Model cp: v1 (measured median 10.0 ms, accepted), then v2 (measured median 13.0 ms) whose busy paired gate
    baseline-compare itself decided on CPU time (x1.7): the evidence as the stage writes it."""
    from tasks.analysis import calibration
    from tasks.analysis.verdict import judge_noise
    from tasks.stages.compare import baseline_compare
    from tasks.stages.profiled_run import read_paired
    from tests.helpers.builders import _paired_file

    ids = []
    for name, version, ops, median, day in (("cp1", "1", None, 10.0, 8), ("cp2", "2", CAND_OPS, 13.0, 9)):
        ctx, pulled, env, warm, run, parse, comp = records(tmp, name, version=version, median=median, **(
            {"ops": ops} if ops else {}
        ))  # fmt: skip
        case = ctx.case.model_copy(update={"model": "cp", "paired_blocks": 64, "paired_block_steps": 1})
        ctx = ctx.model_copy(update={"case": case, "started_at": T0 + dt.timedelta(days=day)})
        pulled = pulled.model_copy(update={"model": "cp"})
        if ids:  # v2: the paired gate, judged busy and decided on CPU time
            path = _paired_file(tmp / "cp-paired.json", 1.7, sd=0.25, cpu_ratio=1.7, cpu_sd=0.03, host_load=LOADED)
            noise = judge_noise(
                case,
                None,
                read_paired(path),
                offset=calibration.Offset(sd=0.0, source="default"),
                calibrated=calibration.NoiseCalibration(sd_pair=None, n_gates=0),
                gpu=False,
            ).model_dump(mode="json")
            run = run.model_copy(update={"paired_path": path, "baseline_model": pulled, "noise": noise})
            comp = baseline_compare(url, case, env, run, parse, tmp / name / "work")
            assert comp.metric == "cpu" and comp.method == "paired-abba" and comp.verdict == "regression"
        ids.append(archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id)
    return ids[0], ids[1]


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
    ids["cpu_v1"], ids["cpu_v2"] = _cpu_gate(url, tmp)
    from tests.helpers.builders import add_run

    # model om: 12 nights; from the 9th (version 2) its conv op takes 1.5x its time per step, relu the same
    noise = [1.0, 1.03, 0.98, 1.01, 0.97, 1.02, 0.99, 1.04, 1.0, 0.98, 1.02, 1.01]
    for i, k in enumerate(noise):
        conv = (750.0 if i >= 8 else 500.0) * k
        ids[f"om{i}"] = add_run(
            url,
            tmp,
            f"om{i}",
            model="om",
            version="2" if i >= 8 else "1",
            median=(conv + 250.0) / 500.0,
            day=10 + i,
            ops=[("om/conv", "Conv2D", conv), ("om/relu", "Relu", 250.0 * noise[-1 - i])],
        )
    from tests.helpers.builders import archive_scenario_run

    # model tp: two runs whose throughputs are two definitions (runs.throughput_def): two metrics under one name
    ids["tp_single"] = archive_scenario_run(url, tmp, "tp1", "single-stream", [8.0] * 40, model="tp")
    ids["tp_offline"] = archive_scenario_run(url, tmp, "tp2", "offline", [8.0] * 40, wall_s=0.4, model="tp")
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


def test_the_run_page_and_compare_give_one_attribution_on_one_metric_with_its_basis(pages):
    """Issue 35: the run page scaled the op deltas by the verdict's CPU-time ratio applied to the candidate's wall
    median (+87.3 ms a step, a baseline no run measured) where compare said +58.1 ms. Both now split the change of
    the two runs' measured wall-time medians (10.0 -> 13.0 ms: +3,000 µs/step), say so, and the page says the
    verdict's CPU-time figure is another measurement."""
    from tasks.cli.compare import compare_runs
    from tasks.settings import Settings

    client, ids = pages
    v1, v2 = ids["cpu_v1"], ids["cpu_v2"]
    page = client.get(f"/perfwatch/runs/{v2}").text
    ops = _text(page.split("id='ops'", 1)[1].split("<h2", 1)[0])
    compared = compare_runs(Settings.from_env().database_url, v1, v2).attribution  # the fixture's store
    assert compared.step_time_change_us == pytest.approx(3000.0)
    assert f"change of the step time {compared.step_time_change_us:+,.1f} 100%" in ops  # the same total: +3,000.0
    assert (
        f"basis: wall time: the measured median step times (profiler off) of the baseline run {v1}, 10.000 ms, and "
        "the candidate, 13.000 ms, each split by its own profiled window's op self-time shares"
    ) in ops
    assert "The verdict's figure, CPU-time ratio ×1.6" in ops and "(paired-abba), is another measurement" in ops
    assert "measured wall-time medians, ×1.300." in ops
    shown = {o.op_name: o.delta_us_per_step for o in compared.ops}
    assert "conv Conv2D convolution" in ops and f"{shown['conv']:+,.1f}" in ops  # op by op as compare has it
    assert (len(compared.appeared), len(compared.vanished)) == (1, 1) and "1 ops appeared, 1 vanished." in ops


def test_the_pages_name_each_throughputs_definition_and_never_compare_two(pages):
    """Issue 40 item 8: ``throughput_eps`` of an offline run is its examples over the run, of a single-stream run
    a step's examples over the median step. The comparison page names each side's definition and compares them
    only under one (``tasks.records.throughput_pair_text``, as ``perfwatch compare``); the latest runs and the
    sweep name the definition of every figure."""
    client, ids = pages
    text = _text(client.get(f"/perfwatch/compare?a={ids['tp_single']}&b={ids['tp_offline']}").text)
    assert "throughput 500.0 examples/s at the median step 400.0 examples/s over the run" in text
    assert (
        "throughput not compared: 500.0 examples/s at the median step vs 400.0 examples/s over the run "
        "(two definitions)" in text
    )
    same = _text(client.get(f"/perfwatch/compare?a={ids['v1']}&b={ids['paired']}").text)
    assert re.search(r"throughput [0-9.]+ -> [0-9.]+ examples/s at the median step", same), same
    latest = _text(client.get("/perfwatch/").text)
    assert "400.0 examples/s over the run" in latest and "500.0 examples/s at the median step" in latest
    sweep = _text(client.get("/perfwatch/models/sw").text)
    assert "examples/s at the median step" in sweep


def test_the_model_page_says_which_op_moved_over_the_nights(pages):
    client, ids = pages
    page = client.get("/perfwatch/models/om")
    assert page.status_code == 200
    text = _text(page.text)
    assert "Which op moved" in text and "perfwatch changes om --ops" in text
    section = text[text.index("Which op moved") : text.index("Versions")]
    assert "om/conv Conv2D" in section and "om/relu" not in section and "confirmed" in section
    assert f"/runs/{ids['om8']}" in page.text.split("Which op moved")[1].split("Versions")[0]
    assert "×1.497 [1.457, 1.537]" in section  # conv's share of the window grew from 2/3 to 3/4 of a longer step
    # model m has op tables but too few runs for a change point: the section says nothing moved
    m = _text(client.get("/perfwatch/models/m").text)
    assert "No op moved." in m[m.index("Which op moved") :]
