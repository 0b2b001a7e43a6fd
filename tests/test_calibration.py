"""The history comparison's drift prior: per-case value, estimated from the store by the documented rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tasks.analysis import calibration
from tasks.analysis.calibration import CALIBRATION_WINDOW, DEFAULT_PRIOR_BETWEEN_SD, estimate_between_sd
from tasks.records import Case
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.store import reads
from tests.test_store import make_records


def prior_for_case(db_url, case, key):
    """The prior as baseline-compare computes it: the store's accepted runs read, then the pure rule."""
    return calibration.prior_for_case(case, reads.calibration_runs(db_url, case.model, case.name, key,
                                                                    CALIBRATION_WINDOW))


def paired_offset_for_case(db_url, case, key):
    """The paired offset as baseline-compare computes it: the store's A/A gates read, then the pure rule."""
    return calibration.paired_offset_for_case(case, reads.aa_gates(db_url, case.model, case.name, key,
                                                                   CALIBRATION_WINDOW))


def test_pooled_within_version_sd():
    v1 = [100.0, 110.0, 95.0, 105.0]
    v2 = [200.0, 230.0, 190.0, 215.0]  # twice as slow: the version difference must not count as drift
    tau, df = estimate_between_sd([("1", x) for x in v1] + [("2", x) for x in v2])
    ss = sum(((np.log(v) - np.log(v).mean()) ** 2).sum() for v in (v1, v2))
    assert df == 6 and tau == pytest.approx(math.sqrt(ss / 6))
    assert 0.05 < tau < 0.1  # ~7% drift, not the 70% between versions


def test_too_little_history_gives_no_estimate():
    assert estimate_between_sd([("1", 10.0 + i) for i in range(5)]) == (None, 4)  # df 4 < 5
    assert estimate_between_sd([("1", 10.0), ("2", 11.0), ("3", 12.0)]) == (None, 0)


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0])
def test_bad_median_names_version(bad):
    with pytest.raises(ValueError, match=r"version '7' has median step time .* expected a finite value > 0"):
        estimate_between_sd([("1", 10.0), ("7", bad)])


def _accepted(db_url, tmp_path, medians, key="k1", start=0):
    for i, m in enumerate(medians):
        archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id=f"r{start + i}",
                                                                     verdict="pass", median=m, key=key))


def test_prior_rule_case_then_store_then_default(db_url, tmp_path):
    case = Case(model="m")
    prior = prior_for_case(db_url, case, "k1")
    assert (prior.source, prior.between_sd, prior.prior_df) == ("default", DEFAULT_PRIOR_BETWEEN_SD, 2.0)
    medians = [10.0, 11.0, 9.5, 10.5, 12.0, 9.0, 10.2]
    _accepted(db_url, tmp_path, medians)
    _accepted(db_url, tmp_path, [50.0, 5.0, 80.0, 1.0, 30.0, 60.0], key="other-env", start=100)  # ignored
    prior = prior_for_case(db_url, case, "k1")
    assert prior.source == "store" and prior.n_runs == 7 and prior.df == 6 and prior.prior_df == 6.0
    assert prior.between_sd == pytest.approx(float(np.std(np.log(medians), ddof=1)))
    assert prior_for_case(db_url, case.model_copy(update={"prior_between_sd": 0.2}), "k1").model_dump() == {
        "between_sd": 0.2, "prior_df": 2.0, "source": "case", "n_runs": 0, "df": 0}


def test_store_estimate_reaches_the_verdict(db_url, tmp_path, monkeypatch):
    """baseline_compare hands the calibrated prior to the statistics and records it as evidence."""
    _accepted(db_url, tmp_path, [10.0, 12.0, 8.0, 11.0, 9.0, 12.5, 8.5])  # ~17% drift: a wide CI
    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand", median=9.5)
    v = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "cand" / "work")
    assert v.evidence["prior"]["source"] == "store" and v.evidence["prior"]["between_sd"] > 0.15
    assert v.evidence["stats"]["details"]["between_run_sd"] > 0.1
    assert v.verdict == "inconclusive"  # the CI spans far more than the 5% tolerance
    monkeypatch.setattr(calibration, "CALIBRATION_WINDOW", 3)  # too short a window: the default prior
    v = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "cand" / "work2")
    assert v.evidence["prior"]["source"] == "default"


def test_unusable_baseline_is_skipped_and_named(db_url, tmp_path):
    recs = make_records(tmp_path, dag_run_id="short")
    samples = json.loads(open(recs[4].samples_path).read())
    samples["measured_step_times_ms"] = samples["measured_step_times_ms"][:3]
    open(recs[4].samples_path, "w").write(json.dumps(samples))
    archive_run(db_url, str(tmp_path / "archive"), *recs)
    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand")
    v = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "cand" / "work")
    assert v.verdict == "no-baseline" and v.baseline_run_ids == []
    assert "3 measured step times, need at least 5" in v.evidence["reason"]


def test_paired_offset_is_the_excess_over_block_noise():
    # offset-free gates: |log d| equals the block noise sd/sqrt(n) -> estimate 0
    quiet = [(math.exp(0.01), 0.01 * math.sqrt(4), 4)] * 3
    assert calibration.estimate_paired_offset(quiet) == (pytest.approx(0.0, abs=1e-9), 3)
    gates = [(math.exp(0.05), 0.0, 8), (math.exp(-0.05), 0.0, 8), (math.exp(0.05), 0.0, 8)]
    assert calibration.estimate_paired_offset(gates) == (pytest.approx(0.05), 3)
    assert calibration.estimate_paired_offset(gates[:2]) == (None, 2)  # fewer than MIN_AA_GATES
    with pytest.raises(ValueError, match="A/A gate 1"):
        calibration.estimate_paired_offset([(1.0, 0.1, 8), (0.0, 0.1, 8)])


def test_paired_offset_rule_case_then_aa_gates_then_default(db_url, tmp_path):
    from tasks.records import CompareRecord

    case = Case(model="m", measured_steps=10)
    assert paired_offset_for_case(db_url, case, "k1").source == "default"
    assert paired_offset_for_case(db_url, case.model_copy(update={"paired_offset_sd": 0.02}),
                                              "k1").model_dump() == {"sd": 0.02, "source": "case", "n_gates": 0}
    for i, log_ratio in enumerate([0.03, -0.03, 0.03, 0.2]):
        ctx, pulled, env, warm, run, parse, _ = make_records(tmp_path, dag_run_id=f"aa{i}")
        # the 4th gate compares other bytes (a real A/B gate): it must not count as A/A
        digest = pulled.digest if i < 3 else "b" * 64
        paired = {"ratio": math.exp(log_ratio), "details": {"sd_log_ratio": 0.0}, "n_candidate": 8,
                  "baseline_digest": digest}
        verdict = CompareRecord(verdict="inconclusive", method="paired-abba", baseline_run_ids=[], ratio=1.0,
                                ci_low=0.9, ci_high=1.1, median_limit_ms=None, gx_success=True,
                                evidence={"paired": paired})
        archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, verdict)
    got = paired_offset_for_case(db_url, case, "k1")
    assert (got.source, got.n_gates) == ("store", 3) and got.sd == pytest.approx(0.03)
    assert paired_offset_for_case(db_url, case, "other-env").source == "default"
