"""The history comparison's drift prior: per-case value, estimated from the store by the documented rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from tasks.analysis import calibration
from tasks.analysis.calibration import CALIBRATION_WINDOW, DEFAULT_PRIOR_BETWEEN_SD, estimate_between_sd
from tasks.records import Case
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.store import reads
from tests.helpers.builders import make_records


def prior_for_case(db_url, case, key):
    """The prior as baseline-compare computes it: the store's accepted runs read, then the pure rule."""
    return calibration.prior_for_case(
        case, reads.calibration_runs(db_url, case.model, case.name, key, CALIBRATION_WINDOW)
    )


def paired_offset_for_case(db_url, case, key):
    """The paired offset as baseline-compare computes it: the store's A/A gates read, then the pure rule."""
    return calibration.paired_offset_for_case(
        case, reads.aa_gates(db_url, case.model, case.name, key, CALIBRATION_WINDOW)
    )


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
        archive_run(
            db_url,
            str(tmp_path / "archive"),
            *make_records(tmp_path, dag_run_id=f"r{start + i}", verdict="pass", median=m, key=key),
        )


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
        "between_sd": 0.2,
        "prior_df": 2.0,
        "source": "case",
        "n_runs": 0,
        "df": 0,
    }


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


def test_paired_offset_is_zero_when_gates_scatter_like_their_own_noise():
    # standardised log ratios 0.2, 0.5, 1.5: the median square 0.25 is below chi2(1)'s 0.455 -> no offset
    gates = [(math.exp(z * 0.01), 0.01 * math.sqrt(64), 64) for z in (0.2, -0.5, 1.5)]
    assert calibration.estimate_paired_offset(gates) == (0.0, 3)


def test_paired_offset_solves_the_median_equation():
    gates = [(math.exp(0.05), 0.0, 8), (math.exp(-0.05), 0.0, 8), (math.exp(0.05), 0.0, 8)]
    sd, n = calibration.estimate_paired_offset(gates)
    assert n == 3 and sd == pytest.approx(0.05 / math.sqrt(float(sps.chi2.median(1))), rel=1e-6)
    assert calibration.estimate_paired_offset(gates[:2]) == (None, 2)  # fewer than MIN_AA_GATES
    with pytest.raises(ValueError, match="A/A gate 1"):
        calibration.estimate_paired_offset([(1.0, 0.1, 8), (0.0, 0.1, 8)])


def test_one_disturbed_gate_does_not_drive_the_offset():
    """Four quiet A/A gates and one hit by a load burst (log ratio 0.3): the robust estimate stays 0,
    where the old mean-of-squares estimate would have said ~0.13 and widened every later gate."""
    quiet = [(math.exp(z * 0.01), 0.01 * math.sqrt(64), 64) for z in (0.3, -0.6, 0.1, 0.5)]
    gates = [*quiet, (math.exp(0.3), 0.08, 64)]
    assert calibration.estimate_paired_offset(gates) == (0.0, 5)
    mean_of_squares = math.sqrt(
        np.mean([math.log(r) ** 2 for r, _, _ in gates]) - np.mean([s**2 / n for _, s, n in gates])
    )
    assert mean_of_squares > 0.1


def _aa(log_ratio, *, busy=False, n=8, sd=0.0, digest="a" * 64):
    return {
        "ratio": math.exp(log_ratio),
        "details": {"sd_log_ratio": sd},
        "n_candidate": n,
        "baseline_digest": digest,
        "host_busy": busy,
    }


def test_offset_is_calibrated_only_from_quiet_gates_and_capped():
    case = Case(model="m")
    quiet = [_aa(0.004), _aa(-0.004), _aa(0.004)]
    got = calibration.paired_offset_for_case(case, quiet)
    assert (got.source, got.n_gates, got.capped) == ("store", 3, False)
    assert got.sd == pytest.approx(0.004 / math.sqrt(float(sps.chi2.median(1))), rel=1e-6)
    # gates on a busy host, or without a noise record, never count
    noisy = [_aa(0.2, busy=True)] * 3 + [{k: v for k, v in _aa(0.2).items() if k != "host_busy"}] * 2
    got = calibration.paired_offset_for_case(case, noisy + quiet)
    assert (got.n_gates, got.skipped_busy) == (3, 5) and got.sd < 0.01
    assert calibration.paired_offset_for_case(case, noisy).source == "default"
    # an estimate past the cap is capped (and says so)
    big = calibration.paired_offset_for_case(case, [_aa(0.05), _aa(-0.05), _aa(0.05)])
    assert (big.sd, big.capped) == (calibration.MAX_PAIRED_OFFSET_SD, True)


def test_paired_offset_rule_case_then_aa_gates_then_default(db_url, tmp_path):
    from tasks.records import CompareRecord

    case = Case(model="m", measured_steps=10)
    assert paired_offset_for_case(db_url, case, "k1").source == "default"
    assert paired_offset_for_case(db_url, case.model_copy(update={"paired_offset_sd": 0.02}), "k1").model_dump() == {
        "sd": 0.02,
        "source": "case",
        "n_gates": 0,
        "capped": False,
        "skipped_busy": 0,
    }
    for i, log_ratio in enumerate([0.003, -0.003, 0.003, 0.2, 0.2]):
        ctx, pulled, env, warm, run, parse, _ = make_records(tmp_path, dag_run_id=f"aa{i}")
        # the 4th gate compares other bytes (a real A/B gate): it must not count as A/A; the 5th ran busy
        paired = _aa(log_ratio, digest=pulled.digest if i != 3 else "b" * 64, busy=i == 4)
        verdict = CompareRecord(
            verdict="inconclusive",
            method="paired-abba",
            baseline_run_ids=[],
            ratio=1.0,
            ci_low=0.9,
            ci_high=1.1,
            median_limit_ms=None,
            gx_success=True,
            evidence={"paired": paired},
        )
        archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, verdict)
    got = paired_offset_for_case(db_url, case, "k1")
    assert (got.source, got.n_gates, got.skipped_busy) == ("store", 3, 1)
    assert got.sd == pytest.approx(0.003 / math.sqrt(float(sps.chi2.median(1))), rel=1e-6)
    assert paired_offset_for_case(db_url, case, "other-env").source == "default"
    inputs = reads.gather_compare_inputs(db_url, "m", case.name, "k1", lookback=5, calibration_window=50)
    assert len(inputs.paired_gates) == 5 and len(inputs.aa_gates) == 4  # every gate; A/A ones (busy included)
