"""Thresholds that are tests: no rule but the interval against the threshold makes a regression.

Each test here describes a false regression that the old GX step ceiling (``mostly`` of the single steps
under 110% of the baseline median, or the median under it) produced by overturning an ``inconclusive``
verdict: under load 18-45% of an unchanged model's single steps exceed 110%, whatever the medians.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tests.helpers.builders import _paired_file, make_records


def _with_samples(tmp_path, dag_run_id, steps):
    recs = make_records(tmp_path, dag_run_id=dag_run_id)
    data = json.loads(open(recs[4].samples_path).read())
    data["measured_step_times_ms"] = [float(x) for x in steps]
    open(recs[4].samples_path, "w").write(json.dumps(data))
    run = recs[4].model_copy(update={"measured_steps": len(steps), "median_step_ms": float(np.median(steps))})
    return (*recs[:4], run, *recs[5:])


def test_an_unpaired_run_faster_than_its_baseline_is_never_a_regression(db_url, tmp_path):
    """Baselines at 10 ms; a candidate whose median is 0.91x theirs but whose steps spread like a loaded
    host's (a quarter of them over 110% of the baseline median). The history interval says it is not
    slower; nothing else may say regression."""
    rng = np.random.default_rng(0)
    for i in range(3):
        recs = _with_samples(tmp_path, f"base{i}", 10.0 * rng.lognormal(0, 0.02, 40))
        archive_run(db_url, str(tmp_path / "archive"), *recs[:-1], recs[-1].model_copy(update={"verdict": "pass"}))
    steps = np.concatenate([9.1 * rng.lognormal(0, 0.01, 30), 9.1 * rng.uniform(1.3, 2.0, 10)])
    assert np.mean(steps > 11.0) >= 0.2 and np.median(steps) < 9.5
    ctx, _, env, _, run, parsed, _ = _with_samples(tmp_path, "cand", steps)
    v = baseline_compare(
        db_url, ctx.case.model_copy(update={"measured_steps": 40}), env, run, parsed, tmp_path / "cand" / "work"
    )
    assert v.method == "history-lookback" and v.verdict != "regression"
    assert v.evidence["gx"]["verdict"]["success"] and v.evidence["gx"]["step_times"]["success"]
    assert "ceiling_breached" not in v.evidence


@pytest.fixture
def baseline(db_url, tmp_path):
    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="base"))
    return db_url


def test_an_undecided_paired_gate_stays_inconclusive_whatever_its_single_steps(baseline, tmp_path):
    """An unchanged model on a noisy host: step noise sd 0.3, so over 10% of B's single steps exceed 110%
    of A's median (what the old ``mostly`` rule failed on); the interval decides nothing within the budget,
    so the verdict is inconclusive (was: regression, by the GX ceiling)."""
    ctx, pulled, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand")
    path = _paired_file(tmp_path / "paired.json", 1.0, budget=64, sd=0.3, seed=3)
    blocks = json.loads(open(path).read())["blocks"]
    a_med = float(np.median([t for b in blocks for t in b["a_ms"]]))
    assert np.mean([t > 1.10 * a_med for b in blocks for t in b["b_ms"]]) > 0.2
    case = ctx.case.model_copy(update={"paired_blocks": 64, "paired_block_steps": 1})
    run = run.model_copy(update={"paired_path": path, "baseline_model": pulled})
    v = baseline_compare(baseline, case, env, run, parsed, tmp_path / "cand" / "work")
    assert (v.verdict, v.method) == ("inconclusive", "paired-abba")
    assert v.gx_success and v.evidence["paired"]["sequential"]["stopped"] == "budget"
    assert v.evidence["paired"]["needed_samples"] > 64
