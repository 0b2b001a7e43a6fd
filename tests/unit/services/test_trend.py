"""watch-trend on the steadier metric (issue 23, item 5): the change points and the creep guard of a case's series
look at each run's median CPU time per step when, by the history verdict's rule, it drifts clearly less between
processes than its median step time; else at the median step time."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
from sqlalchemy import update

from tasks.services.trend import creep_check, watch_case
from tasks.stages.archive import archive_run
from tasks.store import Baseline, Run, session_scope
from tasks.store.series import baseline_levels, run_series
from tests.helpers.builders import make_records

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.UTC)


def store_series(db_url, tmp_path, wall, cpu, *, gpu_from: int | None = None) -> list[int]:
    """One nightly run per (median wall ms, median CPU ms or None) a day apart, each accepted at its start; from
    night ``gpu_from`` on, the runs allocated GPU memory."""
    ids = []
    for i, (w, c) in enumerate(zip(wall, cpu, strict=True)):
        ctx, *rest = make_records(tmp_path, dag_run_id=f"n{i}", median=float(w), verdict="pass")
        ctx = ctx.model_copy(update={"dag_id": "perfwatch_profile", "started_at": T0 + dt.timedelta(days=i)})
        if c is not None:
            path = Path(rest[3].samples_path)
            samples = json.loads(path.read_text())
            samples["measured_cpu_ms"] = [float(c) + 0.001 * (j - 4.5) for j in range(10)]  # median c
            path.write_text(json.dumps(samples))
        if gpu_from is not None and i >= gpu_from:
            rest[3] = rest[3].model_copy(update={"peak_device_bytes": 1 << 20})
        ids.append(archive_run(db_url, str(tmp_path / "archive"), ctx, *rest).run_id)
    with session_scope(db_url) as s:
        for rid in ids:
            started = s.get(Run, rid).started_at
            s.execute(update(Baseline).where(Baseline.run_id == rid).values(accepted_at=started))
    return ids


def _nights(n=21, step_at=20, step=1.10, seed=0):
    """Wall medians drifting 10% between processes, CPU medians 0.5%; both slower by ``step`` from ``step_at``."""
    rng = np.random.default_rng(seed)
    wall = 10.0 * np.exp(rng.normal(0, 0.10, n))
    cpu = 18.0 * np.exp(rng.normal(0, 0.005, n))
    wall[step_at:] *= step
    cpu[step_at:] *= step
    return wall, cpu


def test_the_series_reads_each_runs_median_cpu_time(db_url, tmp_path):
    ids = store_series(db_url, tmp_path, [10.0, 11.0], [None, 20.0])
    assert [r.median_cpu_ms for r in run_series(db_url, "m", cpu=True)] == [None, 20.0]
    assert [r.median_cpu_ms for r in run_series(db_url, "m")] == [None, None]  # not read unless asked
    assert baseline_levels(db_url, "m", "train-bs16", runs=5, metric="median_cpu_ms") == ("k1", [(ids[1], 20.0)])
    assert baseline_levels(db_url, "m", "train-bs16", runs=5)[1] == [(ids[1], 11.0), (ids[0], 10.0)]


def test_change_points_on_cpu_time_when_it_drifts_less(db_url, tmp_path):
    wall, cpu = _nights(n=23)  # the step's third night: confirmed (changes.DEFAULT_MIN_RUNS_AFTER)
    ids = store_series(db_url, tmp_path, wall, cpu)
    r = watch_case(db_url, "m", "train-bs16", ids[-1], now=T0 + dt.timedelta(days=23))
    assert r.metric == "median_cpu_ms" and r.history_metric is not None and r.history_metric["metric"] == "cpu"
    (cp,) = r.new_change_points
    assert cp["metric"] == "median_cpu_ms" and cp["slower"] and cp["index"] == 20
    assert 1.08 < cp["ratio"] < 1.12 and cp["n_after"] == 3
    assert r.alerts and "median_cpu_ms x1.1" in r.alerts[0]
    assert r.creep["metric"] == "median_cpu_ms"


def test_the_same_step_in_wall_time_alone_is_lost_in_its_drift(db_url, tmp_path):
    """The series of the test above whose first run recorded no CPU time: the rule keeps wall time, whose 10%
    drift between processes hides the 10% step on its first night."""
    wall, cpu = _nights()
    ids = store_series(db_url, tmp_path, wall, [None, *cpu[1:]])
    r = watch_case(db_url, "m", "train-bs16", ids[-1], now=T0 + dt.timedelta(days=21))
    assert r.metric == "median_step_ms" and r.history_metric is not None
    assert "a baseline run recorded no CPU time" in r.history_metric["reason"]
    assert r.new_change_points == [] and r.alerts == []
    assert r.creep["metric"] == "median_step_ms"


def test_a_gpu_series_stays_on_wall_time(db_url, tmp_path):
    wall, cpu = _nights()
    ids = store_series(db_url, tmp_path, wall, cpu, gpu_from=15)
    r = watch_case(db_url, "m", "train-bs16", ids[-1], now=T0 + dt.timedelta(days=21))
    assert r.metric == "median_step_ms" and "a GPU case" in (r.history_metric or {})["reason"]


def test_the_creep_guard_on_cpu_time(db_url, tmp_path):
    n = 40
    wall = 10.0 * np.exp(np.random.default_rng(1).normal(0, 0.10, n))
    cpu = 18.0 * 1.004 ** np.arange(n)  # creeps 0.4% a night: +12% over 30 nights
    store_series(db_url, tmp_path, wall, cpu)
    now = T0 + dt.timedelta(days=39, hours=1)
    chk = creep_check(db_url, "m", "train-bs16", now=now, metric="median_cpu_ms")
    assert chk.verdict == "creep" and chk.metric == "median_cpu_ms" and chk.reason.startswith("on CPU time: ")
    assert chk.now_ms is not None and chk.now_ms > 18.0 * 1.004**30
    assert creep_check(db_url, "m", "train-bs16", now=now).metric == "median_step_ms"


# ------------------------------------------------------ issue 36 item 4: a tentative slowdown confirms itself tonight


def _store_version_step(db_url, tmp_path, *, nights=12, after=2, step=1.5):
    """``nights`` runs of version 1 (10 ms, 1% noise), then ``after`` of version 2 ``step`` x slower: a tentative
    slowdown at the series' end (fewer than 3 runs after it), in one environment."""
    from tests.helpers.builders import make_records as records

    rng = np.random.default_rng(1)
    ids = []
    for i in range(nights + after):
        v2 = i >= nights
        ctx, pulled, *rest = records(
            tmp_path,
            dag_run_id=f"n{i}",
            median=float(10.0 * (step if v2 else 1.0) * np.exp(rng.normal(0, 0.01))),
            verdict="pass",
        )
        ctx = ctx.model_copy(update={"dag_id": "perfwatch_profile", "started_at": T0 + dt.timedelta(days=i)})
        pulled = pulled.model_copy(update={"version": "2" if v2 else "1", "digest": ("b" if v2 else "a") * 64})
        ids.append(archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, *rest).run_id)
    return ids, ctx


def test_a_tentative_slowdown_plans_a_paired_gate_and_its_verdict_decides_the_alert(db_url, tmp_path):
    import pytest

    from tasks.records import RunState
    from tasks.services.trend import CONFIRM_RUN_SUFFIX, TrendAlert, check_dag_run, judge_night
    from tasks.settings import Settings

    settings = Settings.from_env({"PERFWATCH_DATABASE_URL": db_url, "PERFWATCH_HOME": str(tmp_path / "home")})
    ids, night = _store_version_step(db_url, tmp_path)
    planned = RunState(ctx=night, label="m train-bs16", queue="default")
    trend = check_dag_run("perfwatch_profile", night.dag_run_id, [planned.to_xcom()], settings)
    (report,) = trend["reports"]
    assert [t["run_id"] for t in report["tentative_change_points"]] == [ids[12]] and report["alerts"] == []
    (plan,) = report["confirmations"]
    assert (plan["kind"], plan["baseline_version"], plan["version"]) == ("version", "1", "2")
    (state,) = [RunState.model_validate(d) for d in trend["confirm"]]
    assert state.ctx.trigger == "confirm" and state.ctx.paired_version == "1" and state.ctx.case.version == "2"
    assert state.ctx.dag_run_id == night.dag_run_id + CONFIRM_RUN_SUFFIX and state.queue == "default"
    assert state.confirms is not None and state.confirms.change_run_id == ids[12]
    assert state.label == f"m train-bs16 (confirm run {ids[12]})"
    assert report["sign_test"]["judged"] == 14 and not report["sign_test"]["one_sided"]

    # the gate has not run (no run stored): nothing alerts, the point stays tentative
    (line,) = judge_night(trend, settings)
    assert line.endswith("the paired gate did not decide (failed, no run stored); it stays tentative")

    def gate(verdict: str, ratio: float, low: float, high: float, tag: str) -> int:
        ctx, pulled, env, warm, run, parsed, comp = make_records(tmp_path, dag_run_id=tag, median=15.0, verdict=verdict)
        comp = comp.model_copy(update={"method": "paired-abba", "ratio": ratio, "ci_low": low, "ci_high": high})
        pulled = pulled.model_copy(update={"version": "2", "digest": "b" * 64})
        return archive_run(
            db_url,
            str(tmp_path / "archive"),
            state.ctx.model_copy(update={"dag_run_id": state.ctx.dag_run_id + tag}),
            pulled,
            env,
            warm,
            run,
            parsed,
            comp,
        ).run_id

    rid = gate("pass", 1.01, 0.98, 1.04, "")
    (line,) = judge_night(trend, settings)  # a pass: no alert
    assert line.endswith(f"was not confirmed by a paired gate: pass x1.010 [0.980, 1.040] (run {rid}); no alert")

    other = {
        **trend,
        "confirm": [
            state.model_copy(
                update={"ctx": state.ctx.model_copy(update={"dag_run_id": state.ctx.dag_run_id + "x"})}
            ).to_xcom()
        ],
    }
    rid = gate("regression", 1.49, 1.44, 1.55, "x")
    with pytest.raises(
        TrendAlert, match=rf"confirmed by a paired gate: regression x1\.490 \[1\.440, 1\.550\] \(run {rid}\)"
    ):
        judge_night(other, settings)


def test_no_gate_is_planned_when_nothing_but_the_series_changed(db_url, tmp_path):
    """The same version and environment on both sides of a tentative slowdown: a paired gate would be an A/A gate;
    none is planned and the report says why."""
    from tasks.records import RunState
    from tasks.services.trend import check_dag_run
    from tasks.settings import Settings

    settings = Settings.from_env({"PERFWATCH_DATABASE_URL": db_url, "PERFWATCH_HOME": str(tmp_path / "home")})
    wall = [10.0 * (1.5 if i >= 12 else 1.0) * (1 + 0.005 * (i % 3)) for i in range(14)]
    store_series(db_url, tmp_path, wall, [None] * 14)
    ctx, *_ = make_records(tmp_path, dag_run_id="n13")
    trend = check_dag_run("perfwatch_profile", "n13", [RunState(ctx=ctx).to_xcom()], settings)
    (plan,) = trend["reports"][0]["confirmations"]
    assert plan["kind"] is None and "compare the version with itself" in plan["reason"] and trend["confirm"] == []


# ------------------------------------- issue 36 item 4, without Airflow: `perfwatch changes MODEL --confirm` runs it


def _fake_run_case(db_url, tmp_path, verdict, ratio, low, high, seen):
    """A stand-in for ``tasks.stages.pipeline.run_case`` that stores the gate's run (the version B of the context it
    is given) with the given verdict, and records the contexts it ran."""
    from tasks.records import RunState

    def run_case(ctx, settings):
        seen.append(ctx)
        _, pulled, env, warm, run, parsed, comp = make_records(tmp_path, dag_run_id=f"g{len(seen)}", median=15.0)
        comp = comp.model_copy(
            update={"verdict": verdict, "method": "paired-abba", "ratio": ratio, "ci_low": low, "ci_high": high}
        )
        pulled = pulled.model_copy(update={"version": ctx.case.version, "digest": "b" * 64})
        archived = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, comp)
        return RunState(ctx=ctx, verdict=comp, archived=archived)

    return run_case


def test_confirm_now_runs_the_nightlys_gate_in_this_process_and_its_verdict_decides(db_url, tmp_path, monkeypatch):
    from tasks.records import Case
    from tasks.services.trend import confirm_now
    from tasks.settings import Settings
    from tasks.stages import pipeline

    settings = Settings.from_env({"PERFWATCH_DATABASE_URL": db_url, "PERFWATCH_HOME": str(tmp_path / "home")})
    ids, _ = _store_version_step(db_url, tmp_path, after=1)  # the gate's run joins the series: still tentative
    seen: list = []
    monkeypatch.setattr(pipeline, "run_case", _fake_run_case(db_url, tmp_path, "regression", 1.49, 1.44, 1.55, seen))
    (r,) = confirm_now(settings, "m", [Case(model="m")])
    (ctx,) = seen
    assert ctx.trigger == "confirm" and ctx.paired_version == "1" and ctx.case.version == "2"
    assert r.alert and r.run_id is not None and r.confirmation.change_run_id == ids[12]
    assert r.line.endswith(f"confirmed by a paired gate: regression x1.490 [1.440, 1.550] (run {r.run_id})")

    monkeypatch.setattr(pipeline, "run_case", _fake_run_case(db_url, tmp_path, "pass", 1.01, 0.98, 1.04, seen))
    (r,) = confirm_now(settings, "m", [Case(model="m")])
    assert not r.alert and r.line.endswith("no alert")


def test_a_failed_confirming_gate_leaves_the_point_tentative(db_url, tmp_path, monkeypatch):
    from tasks.records import Case
    from tasks.services.trend import confirm_now
    from tasks.settings import Settings
    from tasks.stages import pipeline

    settings = Settings.from_env({"PERFWATCH_DATABASE_URL": db_url, "PERFWATCH_HOME": str(tmp_path / "home")})
    _store_version_step(db_url, tmp_path)

    def broken(ctx, settings):
        raise RuntimeError("the runner died")

    monkeypatch.setattr(pipeline, "run_case", broken)
    (r,) = confirm_now(settings, "m", [Case(model="m")])
    assert not r.alert and "it stays tentative" in r.line and "RuntimeError: the runner died" in r.line


def test_confirm_now_says_why_no_gate_runs(db_url, tmp_path, monkeypatch):
    """The same version on both sides of a tentative slowdown: no gate runs, and the line says why."""
    from tasks.records import Case
    from tasks.services.trend import confirm_now
    from tasks.settings import Settings
    from tasks.stages import pipeline

    settings = Settings.from_env({"PERFWATCH_DATABASE_URL": db_url, "PERFWATCH_HOME": str(tmp_path / "home")})
    wall = [10.0 * (1.5 if i >= 12 else 1.0) * (1 + 0.005 * (i % 3)) for i in range(14)]
    store_series(db_url, tmp_path, wall, [None] * 14)
    monkeypatch.setattr(pipeline, "run_case", None)  # never called
    out = confirm_now(settings, "m", [Case(model="m")])
    assert any("no paired gate can confirm it" in x.line and x.run_id is None for x in out)


def test_changes_confirm_prints_each_gate_and_exits_1_when_one_confirms(db_url, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tasks.cli.main import app
    from tasks.stages import pipeline

    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    monkeypatch.setenv("PERFWATCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PERFWATCH_CONFIG", str(tmp_path / "none.yaml"))  # no config: the default case
    _store_version_step(db_url, tmp_path, after=1)
    seen: list = []
    monkeypatch.setattr(pipeline, "run_case", _fake_run_case(db_url, tmp_path, "regression", 1.49, 1.44, 1.55, seen))
    res = CliRunner().invoke(app, ["changes", "m", "--confirm"])
    assert res.exit_code == 1, res.output
    assert "train-bs16: tentative change point at run" in res.output and "confirmed by a paired gate" in res.output
    monkeypatch.setattr(pipeline, "run_case", _fake_run_case(db_url, tmp_path, "pass", 1.0, 0.98, 1.02, seen))
    res = CliRunner().invoke(app, ["changes", "m", "--confirm"])
    assert res.exit_code == 0 and "no alert" in res.output, res.output


def test_changes_confirm_names_a_config_that_does_not_parse(db_url, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tasks.cli.main import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  - model: m\n    batch_size: many\n")
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    monkeypatch.setenv("PERFWATCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PERFWATCH_CONFIG", str(bad))
    _store_version_step(db_url, tmp_path, after=1)
    res = CliRunner().invoke(app, ["changes", "m", "--confirm"])
    assert res.exit_code == 1 and "--confirm reads the cases' settings from the config" in res.output, res.output
    assert "batch_size" in res.output
