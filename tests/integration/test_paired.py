"""Paired (A/B) gates: the runner's ABBA mode in rounds, the parent driving it, the pipeline choosing
it (release, paired cases, nightly runs of a new version, A/A calibration), and its sequential verdicts."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from tasks.analysis.calibration import DEFAULT_PAIRED_OFFSET_SD
from tasks.records import Case, RunContext
from tasks.runner import RunnerError, RunnerSpec, launch, run_rounds
from tasks.settings import Settings
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.stages.pipeline import pull_paired_baseline
from tests.helpers.builders import _paired_file, make_records


@pytest.fixture
def baseline(db_url, tmp_path):
    """One accepted baseline run (version 1) of model m."""
    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="base"))
    return db_url


def _paired_compare(db_url, tmp_path, ratio, offset_sd=0.0, noise=None, **kw):
    ctx, pulled, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand")
    budget = kw.get("budget", 64)
    case = ctx.case.model_copy(
        update={"paired_blocks": budget, "paired_block_steps": kw.get("steps", 1), "paired_offset_sd": offset_sd}
    )
    run = run.model_copy(
        update={
            "paired_path": _paired_file(tmp_path / "paired.json", ratio, offset_sd=offset_sd, **kw),
            "baseline_model": pulled,
            "noise": noise,
        }
    )
    return baseline_compare(db_url, case, env, run, parsed, tmp_path / "cand" / "work")


def test_sequential_regression_stops_early_and_states_its_cost(baseline, tmp_path):
    v = _paired_compare(baseline, tmp_path, 1.15)
    assert (v.verdict, v.method) == ("regression", "paired-abba")
    assert v.ratio == pytest.approx(1.15, rel=0.03) and v.ci_low > 1
    p = v.evidence["paired"]
    assert p["sequential"]["stopped"] == "decided" and len(p["sequential"]["looks"]) == 1
    assert p["spent"] == {"pairs": 32, "max_pairs": 64, "timed_steps": 64, "wall_s": 2.5}
    assert p["cost"].startswith("32 of at most 64 ABBA block pairs x 1 step(s) x 2 versions = 64 extra timed steps")
    assert p["orders"] == "ABBA" * 16 and p["baseline_version"] == "1" and p["n_candidate"] == 32
    assert v.evidence["history"]["method"] == "history-lookback"  # kept as evidence
    assert v.median_limit_ms == pytest.approx(1.05 * p["a_median_ms"])  # the step time at the threshold
    # GX enforced the same threshold on the same interval, and failed exactly there
    assert v.evidence["gx"]["verdict"] == {"success": False, "failures": 1} and not v.gx_success
    assert v.reason and "lies above 1" in v.reason


def test_same_model_passes_and_gx_succeeds(baseline, tmp_path):
    v = _paired_compare(baseline, tmp_path, 1.0)
    assert (v.verdict, v.method) == ("pass", "paired-abba") and v.gx_success
    assert v.evidence["paired"]["spent"]["pairs"] < 64


def test_budget_under_32_pairs_is_one_fixed_look(baseline, tmp_path):
    v = _paired_compare(baseline, tmp_path, 1.15, budget=6, steps=3)
    assert v.verdict == "regression" and v.evidence["paired"]["sequential"] == {"stopped": "fixed"}
    assert v.evidence["paired"]["spent"]["timed_steps"] == 36


def test_process_offset_keeps_a_no_change_gate_from_alarming(baseline, tmp_path):
    """With a large process-level offset (sd 0.03, recorded in the gate's design) a 5% tolerance cannot be
    resolved in one process: the same model is inconclusive, never a regression, at the budget, and the
    reason says more pairs cannot help."""
    v = _paired_compare(baseline, tmp_path, 1.0, offset_sd=0.03)
    assert v.evidence["paired_offset"]["sd"] == 0.03
    assert v.verdict == "inconclusive" and v.evidence["paired"]["needed_samples"] is None
    assert v.evidence["paired"]["sequential"]["stopped"] == "budget"
    assert "More pairs cannot help" in v.evidence["paired"]["reason"]
    assert _paired_compare(baseline, tmp_path, 1.3, offset_sd=0.03).verdict == "regression"


def test_fresh_store_uses_the_default_offset(baseline, tmp_path):
    v = _paired_compare(baseline, tmp_path, 1.0, offset_sd=None, budget=6, steps=3)  # no gate offset: the store's
    assert v.evidence["paired_offset"]["sd"] == DEFAULT_PAIRED_OFFSET_SD
    assert v.evidence["paired_offset"]["source"] == "default"
    assert v.evidence["paired"]["details"]["offset_sd"] == DEFAULT_PAIRED_OFFSET_SD


def test_paired_bad_step_time_names_block(baseline, tmp_path):
    with pytest.raises(ValueError, match=r"b_blocks\[2\]\[1\] = 0.0: step times must be finite and > 0"):
        _paired_compare(baseline, tmp_path, 1.0, bad=0.0, budget=6, steps=3)


def test_paired_spec_needs_baseline_model():
    with pytest.raises(ValidationError, match="paired mode needs baseline_model_path"):
        RunnerSpec(mode="paired", model_path="b.keras", out_dir="/tmp/x", batch_size=1)


def _zip_model(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model.weights.h5", path.parent.name.encode())


@pytest.mark.parametrize(
    ("trigger", "paired", "candidate", "expect"),
    [
        ("release", False, "2", "1"),
        ("scheduled", False, "1", None),
        ("manual", True, "2", "1"),
        ("scheduled", False, "2", "1"),  # nightly: latest resolved to a new version -> paired against the baseline's
        ("manual", False, "2", None),
    ],
)
def test_pipeline_pairs_against_the_baseline_version(
    baseline, home, monkeypatch, tmp_path, trigger, paired, candidate, expect
):
    for v in (1, 2):
        _zip_model(home / "models" / "m" / str(v) / "model.keras")
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", baseline)
    ctx = RunContext(
        dag_id="d", dag_run_id="rel", trigger=trigger, case=Case(model="m", version="latest", paired=paired)
    )
    env = make_records(tmp_path)[2]
    cand = make_records(tmp_path)[1].model_copy(update={"version": candidate})
    pulled = pull_paired_baseline(ctx, env, Settings.from_env(), cand)
    assert (pulled.version if pulled else None) == expect
    if pulled:
        assert "/baseline/" in pulled.local_path


def test_calibration_pairs_a_version_with_itself(db_url, home, monkeypatch, tmp_path):
    """An A/A gate (``paired_version``) pairs even without a baseline, against the named version."""
    for v in (1, 2):
        _zip_model(home / "models" / "m" / str(v) / "model.keras")
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    ctx = RunContext(
        dag_id="d", dag_run_id="aa", trigger="calibrate", case=Case(model="m", version="2"), paired_version="2"
    )
    pulled = pull_paired_baseline(ctx, make_records(tmp_path)[2], Settings.from_env())
    assert pulled.version == "2" and "/baseline/" in pulled.local_path


def test_release_without_baseline_takes_the_normal_path(db_url, home, monkeypatch, tmp_path):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    ctx = RunContext(dag_id="d", dag_run_id="rel", trigger="release", case=Case(model="m"))
    assert ctx.wants_paired and pull_paired_baseline(ctx, make_records(tmp_path)[2], Settings.from_env()) is None


def test_full_gx_results_travel_by_file_and_land_in_the_store(baseline, tmp_path):
    """XCom carries the GX summary; the archive stores the full validation results."""
    from sqlalchemy import select

    from tasks.store import RunComparison, session_scope

    v = _paired_compare(baseline, tmp_path, 1.15)
    assert v.evidence["gx"]["verdict"] == {"success": False, "failures": 1}  # the threshold, on the interval
    assert v.evidence["gx"]["paired_steps"] == {"success": True, "failures": 0}  # the samples are sound
    full = json.loads(open(v.gx_results_path).read())
    assert set(full) == {"step_times", "op_stats", "paired_steps", "verdict"} and full["verdict"]["success"] is False
    ctx, pulled, env, warm, run, parsed, _ = make_records(tmp_path, dag_run_id="cand")
    archive_run(baseline, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, v)
    with session_scope(baseline) as s:
        stored = s.scalar(select(RunComparison.gx_result).where(RunComparison.verdict == "regression"))
    assert stored == full


@pytest.mark.slow
def test_runner_paired_mode_abba_on_tiny_models(model_files, tmp_path):
    spec = RunnerSpec(
        mode="paired",
        model_path=str(model_files["wide"]),
        baseline_model_path=str(model_files["tiny"]),
        out_dir=str(tmp_path / "p"),
        batch_size=4,
        warmup_steps=2,
        blocks=4,
        block_steps=3,
    )
    r = launch(spec, sys.executable).model_dump(mode="json")
    orders = [b["order"] for b in r["blocks"]]
    assert sorted(orders[:2]) == sorted(orders[2:]) == ["AB", "BA"] and r["timed_steps"] == 24  # drawn per quadruple
    assert all(len(b["a_cpu_ms"]) == len(b["b_cpu_ms"]) == 3 for b in r["blocks"])  # CPU time around every step
    assert all(len(b["a_wait_ms"]) == 3 for b in r["blocks"]) == Path("/proc/self/task").exists()
    for side in ("wait", "a_wait"):  # how far each side's wait can be trusted, as the single-model modes say
        wait = r["threads"][side]
        if r["blocks"][0]["a_wait_ms"]:
            assert wait["unavailable"] is None and wait["threads_read"] >= 12 and 0 <= wait["threads_lost"]
        else:
            assert wait["unavailable"]
    assert len(r["a_warmup_cpu_ms"]) == len(r["b_warmup_cpu_ms"]) == 2
    assert r["first_built"] in ("A", "B")  # drawn per gate (issue 12: the version set up first ran faster)
    assert all(len(b["a_ms"]) == len(b["b_ms"]) == 3 for b in r["blocks"])
    assert len(r["a_warmup_step_times_ms"]) == len(r["b_warmup_step_times_ms"]) == 2
    assert r["a_cold_step_ms"] > 0 and r["b_cold_step_ms"] > 0
    assert r["stopped_by"] == "budget" and 0 <= r["host_load"]["other_cpu_share"] <= 1
    ratio = np.median([np.median(b["b_ms"]) / np.median(b["a_ms"]) for b in r["blocks"]])
    assert ratio > 1.5  # the wide model is several times heavier than the tiny one


@pytest.mark.slow
def test_parent_drives_the_runner_round_by_round(model_files, tmp_path):
    """The runner measures a round, reports it, and waits for the parent's word; ``stop`` ends it early
    and the result holds exactly the rounds measured; without a stop it ends at the budget."""
    seen = []

    def stop_after_two(info):
        seen.append(info.model_dump(mode="json"))
        return len(seen) < 2

    spec = RunnerSpec(
        mode="paired",
        model_path=str(model_files["wide"]),
        baseline_model_path=str(model_files["tiny"]),
        out_dir=str(tmp_path / "s"),
        batch_size=4,
        warmup_steps=2,
        blocks=40,
        block_steps=1,
        round_pairs=4,
    )
    r = run_rounds(spec, sys.executable, stop_after_two, 600).model_dump(mode="json")
    assert [x["pairs"] for x in seen] == [4, 8] and [len(x["blocks"]) for x in seen] == [4, 4]
    assert r["stopped_by"] == "parent" and len(r["blocks"]) == 8 and r["timed_steps"] == 16
    assert [b["pair"] for b in r["blocks"]] == list(range(8)) and len(r["rounds"]) == 2
    assert all({"other_cpu_share", "steal_share", "load1_start", "load1_end"} <= set(x["host_load"]) for x in seen)
    full = run_rounds(
        spec.model_copy(update={"blocks": 6, "out_dir": str(tmp_path / "f")}), sys.executable, lambda info: True, 600
    ).model_dump(mode="json")
    assert full["stopped_by"] == "budget" and len(full["blocks"]) == 6 and full["rounds"][-1]["final"] is True


@pytest.mark.slow
def test_session_errors_are_named(model_store, model_files, tmp_path):
    broken = str(model_store / "broken" / "1" / "model.keras")
    spec = RunnerSpec(
        mode="paired",
        model_path=broken,
        baseline_model_path=str(model_files["tiny"]),
        out_dir=str(tmp_path / "b"),
        batch_size=2,
        warmup_steps=1,
        blocks=8,
        round_pairs=4,
    )
    with pytest.raises(RunnerError, match=r"training step failed for model .*broken"):
        run_rounds(spec, sys.executable, lambda info: True, 600)
    with pytest.raises(RunnerError, match=r"ran past its limit of 1 s \(test limit\)"):
        run_rounds(
            spec.model_copy(update={"out_dir": str(tmp_path / "t")}),
            sys.executable,
            lambda i: True,
            1,
            limit_note="test limit",
        )
    with pytest.raises(RunnerError, match="cannot start runner interpreter"):
        run_rounds(spec, str(tmp_path / "no-python"), lambda i: True, 10)
    with pytest.raises(ValueError, match="round_pairs set"):
        run_rounds(spec.model_copy(update={"round_pairs": None}), sys.executable, lambda i: True, 10)


@pytest.mark.slow
def test_release_gate_end_to_end(model_store, home, monkeypatch):
    """tiny v1 then the several-times-heavier v2 as release gates: the gate across processes stops at its first
    look (3 of at most 6 processes of 10 pairs). The host's load is recorded and judged, but a shared CI runner must not
    make this test about the host: the case allows any load (``max_other_cpu_share=1``) and any steal by the
    hypervisor (``max_steal_share=1``: CI's VM shares its host with other guests) and calls any warm-up steady
    (``warmup_cv_max=1``), so that v1 becomes the baseline (a busy or unsteady run would not, issue 26) and v2's
    gate decides on wall time."""
    from tasks.stages.pipeline import run_case

    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{home / 'pw.db'}")
    small = {
        "batch_size": 4,
        "measured_steps": 5,
        "profiled_steps": 1,
        "warmup_max_steps": 10,
        "paired_blocks": 64,
        "paired_block_steps": 1,
        "max_other_cpu_share": 1.0,
        "max_steal_share": 1.0,
        "warmup_cv_max": 1.0,
    }
    first = run_case(
        RunContext(dag_id="d", dag_run_id="v1", trigger="release", case=Case(model="tiny", version="1", **small))
    ).to_xcom()
    assert first["verdict"]["verdict"] == "no-baseline" and first["run"]["paired_path"] is None
    assert first["verdict"]["evidence"]["noise"]["host_load"]["cpus"] >= 1
    second = run_case(
        RunContext(dag_id="d", dag_run_id="v2", trigger="release", case=Case(model="tiny", version="2", **small))
    ).to_xcom()
    v = second["verdict"]
    assert (v["verdict"], v["method"]) == ("regression", "paired-abba"), v["reason"]
    p = v["evidence"]["paired"]
    # the process is the unit: 6 processes of 64 // 6 = 10 pairs at most, a look after each from the third on;
    # a several-times-heavier v2 decides (at the first look on a quiet host; at load 10 on 2 cores, the sixth)
    k = p["spent"]["processes"]
    assert p["baseline_version"] == "1" and p["sequential"]["stopped"] == "decided" and 3 <= k <= 6
    assert p["spent"]["pairs"] == 10 * k and p["timed_steps"] == 2 * 10 * k
    assert v["evidence"]["noise"]["gate_sd"] > 0 and p["host_busy"] is False
    spread = v["evidence"]["processes"]
    assert spread["processes"] == k and len(spread["unit_ratios"]) == k and spread["between_sd"] >= 0
    assert spread["within_sd"] > 0 and f"K = {k} processes" in v["reason"]
