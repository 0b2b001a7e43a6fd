"""Sweep curves and the knee; the axes of matrix cases in `perfwatch runs` and `perfwatch history --case`."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from tasks.analysis.sweep import sweep
from tasks.matrix import expand_entry
from tasks.records import Case
from tasks.stages.archive import archive_run
from tasks.store import queries
from tasks.store.writes import record_failure
from tests.helpers.builders import make_records

T0 = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.UTC)
AXES = queries.AXIS_COLUMNS
# median step time (ms) per (precision, batch size); throughput = batch / median
MEDIANS = {
    ("fp32", 8): 10.0,
    ("fp32", 16): 18.0,
    ("fp32", 32): 40.0,
    ("mixed_bfloat16", 8): 8.0,
    ("mixed_bfloat16", 16): 14.0,
    ("mixed_bfloat16", 32): 30.0,
}


def _store(url, tmp, case, median, day, name, steps=400):
    """One run of ``case``: ``steps`` measured steps of median + 0.00 ... 0.09 ms (each 1/10 of them)."""
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp, dag_run_id=name, model="demo", median=median)
    samples = json.loads(Path(run.samples_path).read_text())
    samples["measured_step_times_ms"] = [median + (i % 10) * 0.01 for i in range(steps)]
    Path(run.samples_path).write_text(json.dumps(samples))
    ctx = ctx.model_copy(update={"case": case, "started_at": T0 + dt.timedelta(days=day)})
    run = run.model_copy(update={"throughput_eps": case.batch_size / median * 1000})
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id


@pytest.fixture
def matrix_runs(db_url, tmp_path):
    """The matrix batch_size 8/16/32 x precision fp32/mixed_bfloat16 of model 'demo', one run per case
    (400 samples: median + 0.00 ... 0.09 ms, so p99 = median + 0.09, and so is its 95% upper bound), an
    older run of one case and a newer failed run of another, which the sweep must skip."""
    cases = expand_entry(
        {
            "model": "demo",
            "measured_steps": 10,
            "matrix": {"precision": ["fp32", "mixed_bfloat16"], "batch_size": [8, 16, 32]},
        }
    )
    older = _store(db_url, tmp_path, cases[0], 99.0, 0, "old")
    ids = {
        c.name: _store(db_url, tmp_path, c, MEDIANS[(c.precision, c.batch_size)], 1, f"n{i}")
        for i, c in enumerate(cases)
    }
    ctx = make_records(tmp_path, dag_run_id="failed", model="demo")[0]
    record_failure(
        db_url,
        ctx.model_copy(update={"case": cases[1], "started_at": T0 + dt.timedelta(days=2)}),
        "warm-up",
        "RunnerError: boom",
    )
    return {"older": older, **ids}


def _point(case, value, median, p99, high="same", n=1000, **axes):
    """A sweep point; its p99's interval is [p99, high] (high: the p99 itself unless given; None: unbounded),
    from ``n`` steps (estimable from 299)."""
    return {
        "case": case,
        "run_id": 1,
        "version": "1",
        "median_step_ms": median,
        "p99_step_ms": p99,
        "p99_low_ms": p99,
        "p99_high_ms": p99 if high == "same" else high,
        "p99_n": n,
        "p99_estimable": None if n is None else n >= 299,
        "throughput_eps": value / median * 1000,
        **dict.fromkeys(AXES, None),
        "batch_size": value,
        **axes,
    }


def test_knee_is_the_highest_throughput_within_the_budget():
    pts = [_point("b8", 8, 10.0, 12.0), _point("b16", 16, 18.0, 19.0), _point("b32", 32, 30.0, 50.0)]
    got = sweep(pts, "batch_size", AXES)
    assert [(p.value, p.knee, p.within_budget) for p in got] == [(8, False, None), (16, False, None), (32, True, None)]
    got = sweep(pts, "batch_size", AXES, latency_budget_ms=20.0)
    assert [(p.value, p.knee, p.within_budget) for p in got] == [(8, False, True), (16, True, True), (32, False, False)]
    got = sweep(pts, "batch_size", AXES, latency_budget_ms=5.0)  # nothing fits: no knee, never a made-up one
    assert not any(p.knee for p in got) and all(p.within_budget is False for p in got)
    no_p99 = [_point("b8", 8, 10.0, None)]
    assert sweep(no_p99, "batch_size", AXES, latency_budget_ms=20.0)[0].knee is False  # absent p99 is no pass


def test_knee_is_judged_on_the_p99s_upper_bound():
    # b16's p99 point (19 ms) is within the 20 ms budget but its interval reaches 24 ms: not shown within it;
    # b32's p99 comes from 100 steps, too few to bound it at 95%: never the knee under a budget
    pts = [
        _point("b8", 8, 10.0, 12.0, high=13.0),
        _point("b16", 16, 18.0, 19.0, high=24.0),
        _point("b32", 32, 15.0, 16.0, high=None, n=100),
    ]
    got = sweep(pts, "batch_size", AXES, latency_budget_ms=20.0)
    assert [(p.value, p.knee, p.within_budget) for p in got] == [(8, True, True), (16, False, False), (32, False, None)]
    assert [(p.p99_low_ms, p.p99_high_ms, p.p99_n) for p in got] == [
        (12.0, 13.0, 1000),
        (19.0, 24.0, 1000),
        (16.0, None, 100),
    ]
    assert [p.knee for p in sweep(pts, "batch_size", AXES)] == [False, False, True]  # no budget: throughput only


def test_a_p99_that_is_not_estimable_has_no_point_and_never_decides():
    # b16 is the fastest and its p99 "point" (9.5 ms) is well within the budget, but it rests on 30 steps:
    # not estimable (issue 27), so it is no point at all and never the knee under a budget
    pts = [_point("b8", 8, 10.0, 12.0, high=13.0), _point("b16", 16, 9.0, 9.5, high=None, n=30)]
    got = sweep(pts, "batch_size", AXES, latency_budget_ms=20.0)
    assert [(p.case, p.p99_step_ms, p.p99_low_ms, p.p99_estimable, p.within_budget, p.knee) for p in got] == [
        ("b8", 12.0, 12.0, True, True, True),
        ("b16", None, 9.5, False, None, False),  # the lower bound it supports stays, in its own column
    ]
    unknown = sweep([_point("b8", 8, 10.0, 12.0, high=None, n=None)], "batch_size", AXES)
    assert unknown[0].p99_step_ms == 12.0 and unknown[0].p99_estimable is None  # a thinned run without its count


def test_sweep_command_says_not_estimable_instead_of_a_p99_point(cli, db_url, tmp_path):
    from tasks.analysis.percentiles import percentile_ci

    cases = expand_entry({"model": "demo", "measured_steps": 30, "matrix": {"batch_size": [8, 16]}})
    _store(db_url, tmp_path, cases[0], 10.0, 1, "b8")  # 400 steps
    _store(db_url, tmp_path, cases[1], 12.0, 1, "b16", steps=30)  # the user's report: p99 from 30 steps
    res = cli("sweep", "demo", "--format", "json")
    assert res.exit_code == 0, res.output
    b8, b16 = json.loads(res.stdout)
    assert (b8["p99_step_ms"], b8["p99_estimable"], b8["p99_n"]) == (pytest.approx(10.09), True, 400)
    short = percentile_ci([12.0 + (i % 10) * 0.01 for i in range(30)], 99)
    assert (b16["p99_step_ms"], b16["p99_high_ms"], b16["p99_estimable"], b16["p99_n"]) == (None, None, False, 30)
    assert b16["p99_low_ms"] == pytest.approx(short.low)
    assert b16["knee"]  # no budget: the highest throughput, which no p99 decides
    assert (
        "all: knee train-bs16 (batch_size=16): 1333.3 examples/s, median 12.00 ms [12.03, 12.06] (n=30), p99 not "
        f"estimable from 30 steps at 95% (needs 299): p99 >= {short.low:.2f} ms"
    ) in res.stderr
    budget = cli("sweep", "demo", "--latency-budget-ms", "50", "--format", "csv")
    assert budget.exit_code == 0, budget.output
    assert "all: knee train-bs8 (batch_size=8)" in budget.stderr  # the short case is never shown within it
    from sqlalchemy import delete

    from tasks.store import StepSample, session_scope

    with session_scope(db_url) as s:  # samples thinned (perfwatch db thin): step_quantiles' p99 and n remain
        s.execute(delete(StepSample))
    thinned = cli("sweep", "demo", "--format", "json")
    assert thinned.exit_code == 0, thinned.output
    b8, b16 = json.loads(thinned.stdout)
    assert (b16["p99_step_ms"], b16["p99_estimable"], b16["p99_n"]) == (None, False, 30)
    assert (b8["p99_step_ms"], b8["p99_estimable"], b8["p99_n"]) == (pytest.approx(10.09), True, 400)


def test_series_are_the_other_axes_that_vary():
    pts = [
        _point("a", 8, 10.0, 11.0, precision="fp32", mode="train"),
        _point("b", 16, 15.0, 16.0, precision="fp32", mode="train"),
        _point("c", 8, 8.0, 9.0, precision="mixed_bfloat16", mode="train"),
    ]
    got = sweep(pts, "batch_size", AXES)
    assert [(p.series, p.case, p.knee) for p in got] == [
        ("precision=fp32", "a", False),
        ("precision=fp32", "b", True),
        ("precision=mixed_bfloat16", "c", False),  # one point: no curve, no knee to mark
    ]
    assert {p.series for p in sweep(pts[:2], "batch_size", AXES)} == {"all"}
    by_precision = sweep(pts, "precision", AXES)  # along another axis: batch size makes the series
    assert [(p.series, p.value) for p in by_precision] == [
        ("batch_size=16", "fp32"),
        ("batch_size=8", "fp32"),
        ("batch_size=8", "mixed_bfloat16"),
    ]


def _case(**kw):
    return Case(model="zoo_cnn", measured_steps=10, **kw)


#: cases of one model that differ in every axis that names a case, batch size 4 and 8 of each
IDENTITY_CASES = [
    _case(batch_size=bs, **kw)
    for bs in (4, 8)
    for kw in (
        {},
        {"mode": "infer"},
        {"mode": "infer", "device": "cpu"},
        {"mode": "infer", "hardware": "gpu-h100"},
        {"mode": "infer", "scenario": "offline"},
        {"mode": "infer", "scenario": "server", "target_qps": 100},
        {"mode": "infer", "scenario": "server", "target_qps": 50},
        {"mode": "infer", "scenario": "server", "search_qps": True, "latency_bound_ms": 10},
        {"mode": "infer", "scenario": "server", "search_qps": True, "latency_bound_ms": 10, "latency_percentile": 95},
        {"mode": "infer", "latency_bound_ms": 10},  # a single-stream bound judges the run, it names no case
        {"precision": "mixed_bfloat16"},
        {"xla": True},
        {"strategy": "mirrored"},
        {"deterministic": True},
        {"mode": "tflite", "quantization": "int8"},
        {"mode": "tflite", "tflite_threads": 2},
        {"inputs": {"x": {"shape": [8]}}},
        {"inputs": {"x": {"shape": [16]}}},
        {"signature": "predict", "mode": "infer"},
    )
]


def test_a_case_identity_is_every_part_of_its_name():
    # two runs are of one case exactly when their identities agree, and of one series (along batch size)
    # exactly when their names agree but for the batch size: the series key leaves no axis of Case.name out
    ids = [queries.case_identity(c.to_xcom(), c.name) for c in IDENTITY_CASES]
    for c, i in zip(IDENTITY_CASES, ids, strict=True):
        assert set(i) == set(queries.SERIES_COLUMNS) and i["batch_size"] == c.batch_size
    for a, ia in zip(IDENTITY_CASES, ids, strict=True):
        for b, ib in zip(IDENTITY_CASES, ids, strict=True):
            assert (ia == ib) == (a.name == b.name), (a.name, b.name)
            rest = [{k: v for k, v in i.items() if k != "batch_size"} for i in (ia, ib)]
            assert (rest[0] == rest[1]) == (
                a.name.replace(f"bs{a.batch_size}", "bs") == b.name.replace(f"bs{b.batch_size}", "bs")
            ), (a.name, b.name)
    scenarios = {c.name: i["scenario"] for c, i in zip(IDENTITY_CASES, ids, strict=True)}
    assert scenarios["infer-bs4-server-q100"] == "server-q100" and scenarios["infer-bs4"] == "single-stream"
    assert scenarios["infer-bs4-server-search-p95b10ms"] == "server-search-p95b10ms"


def test_a_series_varies_the_swept_axis_only(cli, db_url, tmp_path):
    # the user's report: infer-bs4-cpu, infer-bs4-offline and infer-bs4-server-q100 were one series "all" with
    # a knee picked among them; each is its own curve along batch size
    kinds = ({"device": "cpu"}, {"scenario": "offline"}, {"scenario": "server", "target_qps": 100})
    medians = {4: 2.0, 8: 3.0}
    for i, (kw, bs) in enumerate((kw, bs) for kw in kinds for bs in (4, 8)):
        case = Case(model="demo", mode="infer", batch_size=bs, measured_steps=10, **kw)
        _store(db_url, tmp_path, case, medians[bs] + i * 0.1, 1, f"r{i}")
    res = cli("sweep", "demo", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    series = {}
    for r in rows:
        series.setdefault(r["series"], []).append((r["case"], r["batch_size"], r["knee"]))
    assert series == {
        "scenario=offline device=auto": [("infer-bs4-offline", 4, False), ("infer-bs8-offline", 8, True)],
        "scenario=server-q100 device=auto": [("infer-bs4-server-q100", 4, False), ("infer-bs8-server-q100", 8, True)],
        "scenario=single-stream device=cpu": [("infer-bs4-cpu", 4, False), ("infer-bs8-cpu", 8, True)],
    }
    assert "note: too little data" not in res.stderr and res.stderr.count(": knee ") == 3
    along = json.loads(cli("sweep", "demo", "--axis", "scenario", "--format", "json").stdout)
    assert {r["series"] for r in along} == {
        "batch_size=4 device=auto",
        "batch_size=8 device=auto",
        "batch_size=4 device=cpu",
        "batch_size=8 device=cpu",
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"axis": "colour"}, "unknown sweep axis 'colour'; the axes are mode, batch_size"),
        ({"latency_budget_ms": 0.0}, "latency budget 0.0 ms must be positive"),
        ({"points": []}, "no successful run to sweep"),
        ({"points": [{"case": "x"}]}, "lacks run_id"),
    ],
)
def test_bad_sweep_input_is_named(kwargs, message):
    args = {"points": [_point("b8", 8, 10.0, 12.0)], "axis": "batch_size", "axes": AXES, **kwargs}
    with pytest.raises(ValueError, match=message):
        sweep(**args)


def test_sweep_command_reads_the_newest_success_of_each_case(cli, matrix_runs, tmp_path):
    res = cli("sweep", "demo", "--latency-budget-ms", "20", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [(r["series"], r["batch_size"]) for r in rows] == [
        ("precision=fp32", 8),
        ("precision=fp32", 16),
        ("precision=fp32", 32),
        ("precision=mixed_bfloat16", 8),
        ("precision=mixed_bfloat16", 16),
        ("precision=mixed_bfloat16", 32),
    ]
    first = rows[0]
    assert first["run_id"] == matrix_runs["train-bs8"] != matrix_runs["older"]  # the newest run of the case
    assert (first["median_step_ms"], first["p99_step_ms"]) == (10.0, pytest.approx(10.09))
    assert rows[1]["run_id"] == matrix_runs["train-bs16"]  # its newer failed run is skipped
    assert [r["case"] for r in rows if r["knee"]] == ["train-bs16", "train-bs16-mixed_bfloat16"]
    assert [r["within_budget"] for r in rows] == [True, True, False, True, True, False]
    assert "precision=mixed_bfloat16: knee train-bs16-mixed_bfloat16 (batch_size=16): 1142.9 examples/s" in res.stderr
    assert "p99 14.09 ms [14.09, 14.09] (95%, n=400)" in res.stderr  # the knee's p99 with its interval
    assert (first["p99_low_ms"], first["p99_high_ms"], first["p99_n"]) == (
        pytest.approx(10.09),
        pytest.approx(10.09),
        400,
    )
    tight = cli("sweep", "demo", "--latency-budget-ms", "9", "--format", "csv")
    assert "precision=fp32: no case within the latency budget of 9.0 ms at 95% (lowest p99 upper bound 10.09 ms)" in (
        tight.stderr
    )
    png = tmp_path / "sweep.png"
    res = cli("sweep", "demo", "--axis", "precision", "--plot", png)
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_sweep_command_errors(cli, matrix_runs):
    res = cli("sweep", "demo", "--axis", "colour")
    assert res.exit_code == 1 and "unknown sweep axis 'colour'" in res.stderr
    res = cli("sweep", "demo", "--version", "7")
    assert res.exit_code == 1 and "no successful run of model 'demo' version 7" in res.stderr
    res = cli("sweep", "dem")
    assert res.exit_code == 1 and "unknown model 'dem' (did you mean 'demo'?)" in res.stderr


def test_runs_and_history_show_matrix_cases(cli, matrix_runs):
    res = cli("runs", "--model", "demo", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {r["run_id"]: r for r in json.loads(res.stdout)}
    row = rows[matrix_runs["train-bs32-mixed_bfloat16"]]
    assert {k: row[k] for k in ("case", *AXES)} == {
        "case": "train-bs32-mixed_bfloat16",
        "mode": "train",
        "batch_size": 32,
        "precision": "mixed_bfloat16",
        "xla": False,
        "strategy": "none",
        "quantization": "none",
    }
    res = cli("history", "demo", "--case", "train-bs16-mixed_bfloat16", "--format", "json")
    assert res.exit_code == 0, res.output
    (run,) = json.loads(res.stdout)
    assert (run["run_id"], run["median_step_ms"]) == (matrix_runs["train-bs16-mixed_bfloat16"], 14.0)


def test_axes_of_runs_stored_before_the_axes_existed_are_the_defaults():
    old = {"model": "m", "batch_size": 16, "measured_steps": 320}  # a Case of before 0.x: no mode, no precision
    assert queries.case_axes(json.dumps(old)) == {
        "mode": "train",
        "batch_size": 16,
        "precision": "fp32",
        "xla": False,
        "strategy": "none",
        "quantization": "none",
    }
    with pytest.raises(queries.QueryError, match="must be its Case as a JSON object, got list"):
        queries.case_axes([1])


@pytest.mark.slow  # imports the Airflow plugin and Airflow's web stack
def test_model_page_of_the_airflow_plugin_has_the_sweep(db_url, matrix_runs, monkeypatch):
    from starlette.requests import Request

    from plugins.perfwatch.auth import RunAccess
    from plugins.perfwatch.pages import _sweep_section, model_sweep_plot

    class EveryDag:  # an auth manager that lets the user read every DAG (who sees what: test_authorization.py)
        def filter_authorized_dag_ids(self, *, dag_ids, user, method):
            return set(dag_ids)

    access = RunAccess(EveryDag(), user=None)  # type: ignore[arg-type]
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    request = Request(
        {
            "type": "http",
            "method": "GET",
            "path": "/perfwatch/models/demo",
            "root_path": "/perfwatch",
            "headers": [],
            "query_string": b"",
        }
    )
    html = _sweep_section(request, "demo", access)
    assert "<img src='/perfwatch/models/demo/sweep.png'" in html
    assert html.count("<tr>") == 1 + 6 and "train-bs16-mixed_bfloat16" in html  # header + one row per case
    png = model_sweep_plot("demo", access)
    assert png.media_type == "image/png" and png.body[:8] == b"\x89PNG\r\n\x1a\n"
    assert _sweep_section(request, "nomodel", access) == ""  # no successful run: no section


def test_sweep_says_when_its_points_come_from_more_than_one_version(cli, matrix_runs, db_url, tmp_path):
    assert "more than one model version" not in cli("sweep", "demo").stderr
    case = expand_entry({"model": "demo", "measured_steps": 10, "matrix": {"batch_size": [8]}})[0]
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp_path, dag_run_id="v2", model="demo", median=9.0)
    ctx = ctx.model_copy(update={"case": case, "started_at": T0 + dt.timedelta(days=3)})
    pulled = pulled.model_copy(update={"version": "2", "digest": "b" * 64})
    archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, comp)
    res = cli("sweep", "demo")
    assert res.exit_code == 0, res.output
    assert "note: the newest run of each case comes from more than one model version (v1: train-bs16, " in res.stderr
    assert "; v2: train-bs8): a curve may mix versions; give --version to sweep one" in res.stderr
    assert "more than one model version" not in cli("sweep", "demo", "--version", "1").stderr


def test_a_scenario_sweep_judges_each_case_by_its_scenarios_own_figures(cli, db_url, tmp_path):
    """The audit: `sweep --axis scenario` made the server search its knee at "513.3 examples/s, p99 13.52 ms", its
    batches' service rate and time, where it served 473 q/s at a per-query p99 of 40.07 ms; offline showed 513.6
    examples/s (batch over median) instead of its own 487.0. Each case is judged by its own figures now."""
    from tests.helpers.builders import archive_scenario_run, archive_server_run, server_points

    single = [8.0 + 0.02 * (i % 50) for i in range(320)]  # mean 8.49 ms: 471 examples/s over all batches
    offline = [7.8] * 320  # batch / median 513 examples/s, but its run lasted longer: 487 over the run
    archive_scenario_run(db_url, tmp_path, "ss", "single-stream", single, model="svc")
    archive_scenario_run(db_url, tmp_path, "off", "offline", offline, wall_s=4 * 320 / 487.0, model="svc")
    search = server_points([(150.0, 0.004), (300.0, 0.004), (600.0, 0.004), (450.0, 0.030), (300.0, 0.004)])
    archive_server_run(db_url, tmp_path, "srv", search, search=True, bound_ms=50.0, model="svc")
    res = cli("sweep", "svc", "--axis", "scenario", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {r["scenario"]: r for r in json.loads(res.stdout)}
    assert rows["offline"]["throughput_eps"] == pytest.approx(487.0, rel=1e-3)
    assert rows["offline"]["throughput_of"] == "examples/s over the run"
    assert rows["single-stream"]["throughput_eps"] == pytest.approx(4 * 320 / (sum(single) / 1000))
    server = rows["server-search-b50ms"]
    assert server["throughput_of"] == "queries/s achieved" and server["p99_of"] == "per query"
    assert server["max_qps"] == pytest.approx(300.0) and server["throughput_eps"] < 310  # not 4 / 4 ms = 1000
    from tasks.analysis.percentiles import percentile_ci

    at_max = [p for p in search if p["target_qps"] == 300.0]
    worst = max((percentile_ci(p["latency_ms"], 99) for p in at_max), key=lambda c: c.high)
    assert (server["p99_step_ms"], server["p99_high_ms"], server["p99_n"]) == (
        pytest.approx(worst.point),
        pytest.approx(worst.high),
        320,
    )
    assert rows["offline"]["knee"] and not server["knee"]
    assert "knee infer-bs4-offline (scenario=offline): 487.0 examples/s over the run" in res.stderr
    assert all(r["median_step_low_ms"] is not None and r["median_step_n"] for r in rows.values())
    table = cli("sweep", "svc", "--axis", "scenario")
    assert table.exit_code == 0 and " n=320" in table.stdout  # the median's cell with its interval and n


def test_a_single_point_is_no_sweep_it_has_no_knee_and_says_so_first(cli, db_url, tmp_path):
    """``perfwatch sweep`` of one run printed ``knee True`` and only then that there was too little data: one
    point has no knee, and the note comes before the table."""
    from tests.helpers.builders import add_run

    add_run(db_url, tmp_path, "solo", model="solo", verdict="no-baseline")
    res = cli("sweep", "solo", "--format", "json")
    assert res.exit_code == 0, res.output
    (point,) = json.loads(res.stdout)
    assert point["knee"] is False
    assert res.stderr.startswith("note: too little data for a sweep along batch_size: every series has runs at one")
    assert "all: runs at batch_size=16 only: no knee (a sweep needs two or more values)" in res.stderr
    table = cli("sweep", "solo")
    assert "True" not in table.stdout and "★" not in table.stdout
