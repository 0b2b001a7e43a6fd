"""Watching the trend: change points (Apache Otava), the creep guard, `perfwatch changes`/`creep`, the DAG's
watch-trend stage."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import numpy as np
import pytest
from sqlalchemy import update

from tasks.analysis import changes
from tasks.services.trend import TrendAlert, creep_check, raise_on_trend_alert, watch_case, watch_dag_run
from tasks.stages.archive import archive_run
from tasks.store import Baseline, Run, session_scope
from tests.helpers.builders import make_records

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.UTC)


def noisy(n: int, seed: int, sd: float = 0.03, level: float = 100.0) -> np.ndarray:
    return level * np.exp(np.random.default_rng(seed).normal(0, sd, n))


# ------------------------------------------------------------------------------------------- pure: change points


def test_a_step_is_found_where_it_is_with_its_ratio():
    x = noisy(40, 1)
    x[25:] *= 1.15
    (cp,) = changes.detect_change_points(x, list(range(100, 140)))
    assert abs(cp.index - 25) <= 1 and cp.run_id == 100 + cp.index
    assert cp.slower and cp.metric == "median_step_ms"
    assert cp.ci_low < 1.15 < cp.ci_high and cp.ci_low > 1.08
    assert cp.p_value < changes.DEFAULT_MAX_PVALUE
    assert cp.n_before + cp.n_after == 40


def test_flat_noise_has_no_change_points():
    for seed in range(10):
        assert changes.detect_change_points(noisy(50, seed), list(range(50))) == []


def test_a_throughput_drop_is_a_slowdown():
    x = noisy(30, 2)
    x[15:] *= 0.8
    (cp,) = changes.detect_change_points(x, list(range(30)), metric="throughput_eps")
    assert cp.slower and cp.ratio < 0.85


def test_short_series_and_bad_input():
    assert changes.detect_change_points([1.0] * 5, list(range(5))) == []
    with pytest.raises(ValueError, match=r"median_step_ms\[3\] = nan \(run 13\)"):
        changes.detect_change_points([1.0, 2.0, 3.0, float("nan")] + [1.0] * 6, list(range(10, 20)))
    with pytest.raises(ValueError, match="expected a finite value > 0"):
        changes.detect_change_points([0.0] * 10, list(range(10)))
    with pytest.raises(ValueError, match="one run id per value"):
        changes.detect_change_points([1.0] * 10, list(range(9)))
    with pytest.raises(ValueError, match="metric 'loss'"):
        changes.detect_change_points([1.0] * 10, list(range(10)), metric="loss")


def test_a_change_point_is_new_once():
    x = noisy(60, 3)
    x[30:] *= 1.2
    ids = list(range(60))
    nights = [n for n in range(10, 61) if changes.new_change_points(x[:n], ids[:n])]
    assert len(nights) == 1 and 31 <= nights[0] <= 36  # found a few nights after the step, reported once
    assert changes.new_change_points(x, ids) == []


# ------------------------------------------------------------------------------------------- pure: creep guard


def test_creep_guard_verdicts():
    flat = list(noisy(7, 4, sd=0.02))
    assert changes.creep_guard(flat, list(noisy(7, 5, sd=0.02))).verdict == "ok"
    crept = changes.creep_guard(list(noisy(7, 6, sd=0.02) * 1.2), flat, now_runs=range(7), then_runs=range(7, 14))
    assert crept.verdict == "creep" and crept.ci_low > 1.05 and crept.now_runs == list(range(7))
    assert "above its level a window ago" in crept.reason
    assert changes.creep_guard(list(noisy(7, 6, sd=0.1) * 1.06), flat).verdict == "inconclusive"
    assert changes.creep_guard([100.0], flat).verdict == "no-history"
    with pytest.raises(ValueError, match=r"then_ms\[1\] = -1"):
        changes.creep_guard(flat, [100.0, -1])
    with pytest.raises(ValueError, match="tolerance"):
        changes.creep_guard(flat, flat, tolerance=5)


def test_alerts_name_slowdowns_and_creep_only():
    x = noisy(30, 7)
    x[15:] *= 0.8
    faster = changes.detect_change_points(x, list(range(30)))
    assert faster and not faster[0].slower
    assert changes.alerts(faster, None) == []
    crept = changes.creep_guard([120.0, 121.0, 119.0], [100.0, 101.0, 99.0])
    assert changes.alerts([], crept) == [f"creep: {crept.reason}"]


# ------------------------------------------------------------------------------------------- store, stage, CLI


def store_series(
    db_url: str, tmp_path, medians, *, model: str = "m", start: dt.datetime = T0, dag_id: str = "perfwatch_profile"
) -> list[int]:
    """Archive one nightly run per median (ms), a day apart, each accepted as the baseline at its start."""
    ids = []
    for i, med in enumerate(medians):
        ctx, *rest = make_records(tmp_path, dag_run_id=f"n{i}", model=model, median=float(med), verdict="pass")
        ctx = ctx.model_copy(update={"dag_id": dag_id, "started_at": start + dt.timedelta(days=i)})
        ids.append(archive_run(db_url, str(tmp_path / "archive"), ctx, *rest).run_id)
    with session_scope(db_url) as s:
        for rid in ids:
            started = s.get(Run, rid).started_at
            s.execute(update(Baseline).where(Baseline.run_id == rid).values(accepted_at=started))
    return ids


def test_changes_cli_and_trend_stage_on_a_stored_series(db_url, tmp_path, cli):
    x = noisy(40, 8, sd=0.015)
    x[28:] *= 1.2
    ids = store_series(db_url, tmp_path, x)
    out = cli("changes", "m", "--format", "json")
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    assert abs(ids.index(row["run_id"]) - 28) <= 1
    assert row["direction"] == "slower" and row["version"] == "1" and row["env_changed"] == 0
    assert row["ci_low"] < 1.2 < row["ci_high"] and row["p_value"] < 1e-4
    table = cli("changes", "m", "--metric", "throughput_eps")
    assert table.exit_code == 0 and "train-bs16: 40 successful runs" in table.output
    assert json.loads(cli("changes", "m", "--since", "2026-02-01", "-f", "json").output) == []  # 9 runs: flat
    assert cli("changes", "nope").exit_code == 1 and "no model 'nope'" in cli("changes", "nope").output
    assert "expected an ISO date" in cli("changes", "m", "--since", "yesterday").output

    # creep: the 7 newest accepted runs (x1.2) against those of 30 days before the newest
    now = T0 + dt.timedelta(days=39, hours=1)
    chk = creep_check(db_url, "m", "train-bs16", now=now)
    assert chk.verdict == "creep" and len(chk.now_runs) == 7 and chk.now_runs[0] == ids[-1]
    assert creep_check(db_url, "m", "train-bs16", now=T0 + dt.timedelta(days=20), window_days=10).verdict == "ok"
    # the change point was new on one night only; watching the newest run now reports the creep, and alerts nothing:
    # the confirmed step explains it and alerted on its night (issue 36 item 4)
    report = watch_case(db_url, "m", "train-bs16", ids[-1], now=now)
    assert report.new_change_points == [] and report.alerts == [] and report.creep["reason"] == chk.reason
    with pytest.raises(TrendAlert, match=r"m \(train-bs16\): creep"):
        raise_on_trend_alert([dataclasses.replace(report, alerts=[f"creep: {chk.reason}"])])


def test_trend_stage_alerts_on_the_night_a_step_is_confirmed(db_url, tmp_path):
    x = noisy(30, 9)
    x[20:] *= 1.25
    store_series(db_url, tmp_path, x[:23])  # the step's third night: confirmed (DEFAULT_MIN_RUNS_AFTER = 3)
    reports = watch_dag_run(db_url, "perfwatch_profile", "n22", now=T0 + dt.timedelta(days=23))
    (r,) = reports
    assert r.run_id is not None and len(r.new_change_points) == 1 and r.new_change_points[0]["slower"]
    assert r.new_change_points[0]["n_after"] == 3 and r.tentative_change_points == []
    assert r.alerts and r.alerts[0].startswith("change point at run ")
    assert r.creep["verdict"] == "no-history"  # nothing accepted 30 days before
    assert watch_dag_run(db_url, "perfwatch_profile", "no-such-run") == []


# ------------------------------------------------------------------- issue 26: persistence, strict JSON, p-values


def _spiked(seed: int = 0) -> np.ndarray:
    """30 quiet nights (3% noise), then one night 50% slower: a spike, not (yet) a change."""
    return np.append(noisy(30, seed), 150.0)


def test_a_single_slow_night_at_the_end_is_tentative_and_never_alerts():
    x, ids = _spiked(), list(range(31))
    (cp,) = changes.detect_change_points(x, ids)  # Otava's E-divisive splits the last night off
    assert (cp.index, cp.n_after, cp.status, cp.runs_to_confirm) == (30, 1, "tentative", 2)
    assert cp.ci_low is None and cp.ci_high is None  # one run after: no interval, never [0, inf]
    assert changes.new_change_points(x, ids) == [] and changes.alerts(changes.new_change_points(x, ids), None) == []
    assert changes.confirming_night(cp, dt.date(2026, 1, 31)) == dt.date(2026, 2, 2)
    assert changes.detect_change_points(x, ids, min_runs_after=1)[0].status == "confirmed"
    with pytest.raises(ValueError, match="min_runs_after = 0"):
        changes.detect_change_points(x, ids, min_runs_after=0)


def test_a_step_alerts_once_on_the_night_that_confirms_it():
    x = noisy(40, 3)
    x[30:] *= 1.2
    ids = list(range(40))
    nights = [n for n in range(10, 41) if changes.new_change_points(x[:n], ids[:n])]
    assert len(nights) == 1 and nights[0] >= 30 + changes.DEFAULT_MIN_RUNS_AFTER
    (cp,) = changes.new_change_points(x[: nights[0]], ids[: nights[0]])
    assert cp.status == "confirmed" and cp.n_after >= changes.DEFAULT_MIN_RUNS_AFTER


def test_a_one_night_spike_is_tentative_in_the_cli_and_the_trend_and_json_is_strict(db_url, tmp_path, cli, monkeypatch):
    from tasks.services.trend import min_runs_after

    monkeypatch.setenv("COLUMNS", "400")  # every column of the table
    ids = store_series(db_url, tmp_path, _spiked())
    out = cli("changes", "m", "--format", "json")
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert row["run_id"] == ids[-1] and row["n_after"] == 1 and row["status"] == "tentative"
    assert row["ci_low"] is None and row["ci_high"] is None and row["confirms_on"] == "2026-02-02"
    assert 0 < row["p_value"] < 1e-6
    table = cli("changes", "m")
    assert table.exit_code == 0 and " 0.000 " not in table.output
    assert (
        f"run {ids[-1]} tentative (1 run(s) after it, 3 confirm): confirmed by the night of 2026-02-02" in table.output
    )
    assert f"{row['p_value']:.2e}" in table.output  # scientific notation
    assert json.loads(cli("changes", "m", "--min-after", "1", "-f", "json").output)[0]["status"] == "confirmed"
    (r,) = watch_dag_run(db_url, "perfwatch_profile", "n30", now=T0 + dt.timedelta(days=31))
    assert r.new_change_points == [] and r.alerts == []  # the DAG run stays green
    (t,) = r.tentative_change_points
    assert t["run_id"] == ids[-1] and t["confirms_on"] == "2026-02-02"
    raise_on_trend_alert([r])  # no TrendAlert
    assert min_runs_after({"PERFWATCH_CHANGE_MIN_RUNS_AFTER": "5"}) == 5 and min_runs_after({}) == 3
    with pytest.raises(ValueError, match="PERFWATCH_CHANGE_MIN_RUNS_AFTER='0'"):
        min_runs_after({"PERFWATCH_CHANGE_MIN_RUNS_AFTER": "0"})


# --------------------------------------------- issue 36 item 4: a nightly that confirms itself, no repeats, one-sided


def test_one_sided_verdicts_are_called_so_by_a_sign_test():
    """k regressions and 0 improvements over N judged runs: a symmetric measurement cannot produce that."""
    st = changes.sign_test(["regression"] * 8 + ["pass"] * 30 + ["no-baseline", None])
    assert (st.judged, st.regressions, st.improvements) == (38, 8, 0)
    assert st.one_sided and st.direction == "slower" and st.p_value == pytest.approx(2 * 0.5**8)
    assert st.reason.startswith("one-sided: 8 regression(s), 0 improvement(s) over 38 judged run(s)")
    balanced = changes.sign_test(["regression"] * 4 + ["improvement"] * 3 + ["pass"] * 10)
    assert not balanced.one_sided and balanced.direction is None and "not one-sided" in balanced.reason
    few = changes.sign_test(["regression"] * 5)  # p = 0.0625: not enough to say so
    assert not few.one_sided and few.p_value == pytest.approx(0.0625)
    assert changes.sign_test([]).p_value == 1.0 and not changes.sign_test([]).one_sided
    assert changes.sign_test(["improvement"] * 9).direction == "faster"


def _tentative(slower: bool = True, status: str = "tentative") -> changes.ChangePoint:
    return changes.ChangePoint(
        "median_step_ms", 12, 112, 1.0, 1.5, 1.5 if slower else 0.7, None, None, 1e-9, 12, 1, slower, status=status
    )


def test_a_tentative_slowdown_is_confirmed_by_the_gate_that_sees_what_changed():
    cp = _tentative()
    kw = dict(before_version="1", before_key="k", version="2", key="k", cross_environment=False)
    assert changes.confirm_choice(cp, **kw) == changes.ConfirmChoice(
        "version", "1", "2", "v1 beside v2, one paired gate"
    )
    env = changes.confirm_choice(cp, **{**kw, "version": "1", "key": "k2", "cross_environment": True})
    assert (env.kind, env.baseline_version, env.version) == ("environment", "1", "1")
    blind = changes.confirm_choice(cp, **{**kw, "key": "k2"})  # a version gate cannot see the environment
    assert blind.kind is None and "no old-environment runner" in blind.reason
    same = changes.confirm_choice(cp, **{**kw, "version": "1"})
    assert same.kind is None and "compare the version with itself" in same.reason
    assert changes.confirm_choice(cp, **{**kw, "version": "keras3.1-ab"}).kind is None  # not a store version
    assert changes.confirm_choice(_tentative(slower=False), **kw) is None  # faster: nothing to confirm
    assert changes.confirm_choice(_tentative(status="confirmed"), **kw) is None  # the persistence rule alerts


def test_the_confirming_gates_verdict_decides_the_alert():
    change = "tentative change point at run 112 (median_step_ms x1.500)"
    alert, line = changes.confirm_outcome(change, "regression", 1.48, 1.41, 1.55, 120)
    assert alert and line == f"{change} confirmed by a paired gate: regression x1.480 [1.410, 1.550] (run 120)"
    alert, line = changes.confirm_outcome(change, "pass", 1.004, 0.98, 1.03, 120)
    assert not alert and line.endswith(
        "was not confirmed by a paired gate: pass x1.004 [0.980, 1.030] (run 120); no alert"
    )
    alert, line = changes.confirm_outcome(change, "inconclusive", 1.04, 0.97, 1.12, 120)
    assert not alert and line.endswith("it stays tentative")
    assert changes.confirm_outcome(change, None, None, None, None, None) == (
        False,
        f"{change}: the paired gate did not decide (failed, no run stored); it stays tentative",
    )


def test_a_creep_alerts_once_and_never_for_a_step_that_alerted():
    def creep(verdict: str, then: list[int]) -> changes.CreepCheck:
        return changes.CreepCheck(verdict, 1.2, 1.1, 1.3, 12.0, 10.0, 0.05, 0.995, [40, 39], then)  # type: ignore[arg-type]

    assert changes.creep_is_new(creep("creep", [5, 4]), None)
    assert changes.creep_is_new(creep("creep", [5, 4]), creep("ok", [4, 3]))
    assert not changes.creep_is_new(creep("creep", [5, 4]), creep("creep", [4, 3]))  # already said
    assert not changes.creep_is_new(creep("creep", [5, 4]), creep("ok", [4, 3]), shift_runs=[30])  # the step's alert
    assert changes.creep_is_new(creep("creep", [5, 4]), None, shift_runs=[3])  # a shift before the old level
    assert not changes.creep_is_new(creep("ok", [5, 4]), None)
    assert changes.alerts([], creep("creep", [5]), creep_alerts=False) == []


def test_a_confirmed_level_shift_alerts_once_in_the_nights_that_follow(db_url, tmp_path):
    """After a step is confirmed (its alert), the nights that follow alert nothing more: not the change point
    again, and not the creep guard, whose baseline now holds the step (before: a creep alert every night for up to
    a window, 30 days, after the step's)."""
    x = noisy(44, 8, sd=0.015)
    x[30:] *= 1.2
    ids = store_series(db_url, tmp_path, x[:30])
    alerted = {}
    for n in range(30, 44):
        ctx, *rest = make_records(tmp_path, dag_run_id=f"n{n}", median=float(x[n]), verdict="pass")
        ctx = ctx.model_copy(update={"dag_id": "perfwatch_profile", "started_at": T0 + dt.timedelta(days=n)})
        ids.append(archive_run(db_url, str(tmp_path / "archive"), ctx, *rest).run_id)
        with session_scope(db_url) as s:
            s.execute(
                update(Baseline).where(Baseline.run_id == ids[-1]).values(accepted_at=s.get(Run, ids[-1]).started_at)
            )
        report = watch_case(db_url, "m", "train-bs16", ids[-1], now=T0 + dt.timedelta(days=n, hours=1))
        alerted[n] = (report.alerts, report.creep["verdict"])
    nights = [n for n, (a, _) in alerted.items() if a]
    assert len(nights) == 1 and alerted[nights[0]][0][0].startswith("change point at run "), alerted
    assert alerted[43][1] == "creep"  # the guard still says so; the step alerted already


def test_perfwatch_changes_says_when_the_verdicts_are_one_sided(db_url, tmp_path, cli):
    """8 regressions and no improvement over the judged runs of a case: the trend check and ``perfwatch changes``
    say the store's verdicts are one-sided (a symmetric measurement cannot produce them)."""
    ids = store_series(db_url, tmp_path, noisy(20, 4))
    with session_scope(db_url) as s:
        s.execute(update(Run).where(Run.id.in_(ids[10:18])).values(verdict="regression"))
    out = cli("changes", "m")
    assert out.exit_code == 0, out.output
    assert (
        "train-bs16: verdicts one-sided: 8 regression(s), 0 improvement(s) over 20 judged run(s) (sign test p=0.0078"
        in out.output
    )
    report = watch_case(db_url, "m", "train-bs16", ids[-1], now=T0 + dt.timedelta(days=21))
    assert report.sign_test["one_sided"] and report.sign_test["direction"] == "slower"
