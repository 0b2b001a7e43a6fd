"""The paired gate on a tail percentile (issue 27, item 2): a p99 slowdown the median cannot see is a regression,
a sample too short for its p99 says so, and an unchanged candidate is rarely flagged (simulated, no TF)."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.analysis import sequential
from tasks.analysis.tail import combine, compare_tail, min_arm_samples
from tasks.analysis.verdict import Decision, PairedBlocks, decide, gate_per_query
from tasks.records import Case, CompareInputs, Verdict
from tasks.stages.profiled_run import tail_plan

QUIET = {"busy": False, "reason": None}


def _latencies(n: int, seed: int, slow_share: float = 0.0, slow: float = 1.6) -> np.ndarray:
    """Per-batch latencies (ms): lognormal around 10 ms, ``slow_share`` of the batches ``slow`` times slower."""
    rng = np.random.default_rng(seed)
    x = 10.0 * rng.lognormal(0.0, 0.05, n)
    x[rng.random(n) < slow_share] *= slow
    return x


def _gate(pairs: int, slow_share: float, seed: int = 1) -> tuple[Case, PairedBlocks]:
    """A sequential paired gate of one-step blocks, as an infer case's that gates its p99 leaves it: every look
    of the budget taken, kept going by the tail gate (``stopping`` tail)."""
    rounds = pairs // 4  # four looks (the looks' boundaries cost more than the tail)
    case = Case(model="m", mode="infer", measured_steps=pairs, gate_percentile=99, paired_round_pairs=rounds)
    design = sequential.Design(
        confidence=case.confidence, tolerance=case.tolerance, max_pairs=pairs, round_pairs=rounds
    )
    looks = sequential.look_schedule(pairs, rounds)
    a, b = _latencies(pairs, seed), _latencies(pairs, seed + 1000, slow_share)
    paired = PairedBlocks(
        a=[[x] for x in a],
        b=[[x] for x in b],
        layout={"blocks": pairs, "block_steps": 1, "timed_steps": 2 * pairs, "wall_s": 1.0, "orders": ""},
        gate={
            "design": design.model_dump(mode="json"),
            "look_pairs": looks,
            "stopping": ["tail"] * len(looks),
            "offset": {"sd": 0.0, "source": "default"},
            "tail": tail_plan(case),
        },
    )
    return case, paired


def _decide(case: Case, paired: PairedBlocks):
    return decide([x for blk in paired.b for x in blk], case, CompareInputs(), env_data={}, paired=paired, noise=QUIET)


def test_a_slowdown_in_the_tail_only_passes_the_median_and_fails_the_p99():
    case, paired = _gate(600, slow_share=0.03)
    d = _decide(case, paired)
    median = d.evidence["verdict_median"]
    assert median["verdict"] == "pass" and median["ci_high"] < 1.05  # the median gate alone sees nothing
    tail = d.evidence["tail"]
    assert tail["verdict"] == "regression" and tail["ci_low"] > 1.05 and tail["enough"]
    assert (tail["n_a"], tail["n_b"], tail["min_n"]) == (600, 600, 528)
    assert d.verdict == Verdict.REGRESSION and d.evidence["gated_on"] == "p99"
    assert (d.ratio, d.ci_low) == (tail["ratio"], tail["ci_low"])  # the figures that decided
    assert d.reason.startswith("regression on the p99: p99 gate: p99 ratio")
    assert "The median gate alone said pass" in d.reason
    plain = _decide(case.model_copy(update={"gate_percentile": None}), paired)  # the median gate of today
    assert plain.verdict == Verdict.PASS and "tail" not in plain.evidence


def test_too_few_samples_for_a_p99_is_inconclusive_and_says_what_it_needs():
    case, paired = _gate(320, slow_share=0.0)
    assert tail_plan(case) == {
        "percentile": 99.0,
        "per_version": 320,
        "min_samples": 528,
        "enough": False,
        "measures": "per-step time, back to back",
        "text": "the p99 gate needs 528 steps per version for a two-sided 99% interval of the p99 ratio; this "
        "gate's budget times 320: its p99 verdict will be inconclusive (too few samples for p99)",
    }
    d = _decide(case, paired)
    assert d.verdict == Verdict.INCONCLUSIVE and d.evidence["verdict_median"]["verdict"] == "pass"
    assert d.reason.startswith("inconclusive (too few samples for p99: n=320 per version, needs 528): ")
    assert "baseline p99 >= " in d.reason and "(lower bounds only)" in d.reason
    assert d.evidence["tail"]["ci_low"] is None and d.ratio == d.evidence["verdict_median"]["ratio"]


def test_needed_samples_and_the_combination():
    assert (min_arm_samples(99, 0.95), min_arm_samples(99, 0.99), min_arm_samples(90, 0.99)) == (368, 528, 51)
    assert combine(Verdict.PASS, Verdict.REGRESSION) == combine(Verdict.REGRESSION, Verdict.INCONCLUSIVE)
    assert combine(Verdict.PASS, Verdict.REGRESSION) == Verdict.REGRESSION
    assert combine(Verdict.PASS, Verdict.INCONCLUSIVE) == Verdict.INCONCLUSIVE
    assert combine(Verdict.IMPROVEMENT, Verdict.PASS) == Verdict.IMPROVEMENT
    assert combine(Verdict.PASS, Verdict.IMPROVEMENT) == Verdict.PASS
    with pytest.raises(ValueError, match="B \\(candidate\\) must be finite and > 0"):
        compare_tail([1.0] * 10, [1.0, -1.0], 99, confidence=0.99, tolerance=0.05)


def test_an_unchanged_candidate_is_rarely_flagged_and_its_ratio_covered():
    """200 simulated A/A gates of 600 steps per version (a skewed, heavy-ish tail): the 99% interval of the p99
    ratio covers 1 in at least 97% of them (its level, less simulation slack), a regression in at most 3%."""
    rng = np.random.default_rng(7)
    covered = flagged = 0
    for _ in range(200):
        a, b = (10.0 * (1 + rng.gamma(2.0, 0.05, 600)) for _ in range(2))
        t = compare_tail(a, b, 99, confidence=0.99, tolerance=0.05)
        covered += t.ci_low <= 1.0 <= t.ci_high
        flagged += t.verdict == Verdict.REGRESSION
    assert covered >= 194 and flagged <= 6


def test_a_paired_tail_gate_on_a_server_case_says_it_gates_service_time():
    """The audit: `--paired --gate-percentile 99` on a server case ran back-to-back ABBA pairs, so it gated the
    batches' service time while the user reads per-query latency; the gate record and its log say so."""
    case = Case(model="m", mode="infer", scenario="server", target_qps=50, gate_percentile=99, paired=True)
    plan = tail_plan(case)
    assert plan["measures"].startswith("per-batch service time, back to back (no arrivals, no queueing)")
    assert "not what a query waits: the compare stage also tests the p99 per query" in plan["text"]


def _point(qps: float, lat: np.ndarray, other: float = 0.02) -> dict:
    return {"issued_qps": qps, "latency_ms": list(lat), "host_load": {"other_cpu_share": other}}


def _passed() -> Decision:
    return Decision(verdict=Verdict.PASS, method="paired-abba", baseline_run_ids=[1], reason="median gate: pass")


def test_the_per_query_tail_is_gated_against_the_baseline_runs_at_the_same_rate():
    case = Case(model="m", mode="infer", scenario="server", target_qps=50, gate_percentile=99, paired=True)
    base = _point(50.0, _latencies(600, 1))
    slow = _point(50.0, _latencies(600, 2, slow_share=0.05))  # one query in 20 waits 1.6x: the median cannot see it
    d = _passed()
    gate_per_query(d, case, slow, base, QUIET)
    tail = d.evidence["per_query_tail"]
    assert tail["verdict"] == "regression" and tail["rate_qps"] == 50.0 and (tail["n_a"], tail["n_b"]) == (600, 600)
    assert d.verdict == Verdict.REGRESSION and d.evidence["gated_on"] == "p99 per query"
    assert d.reason.startswith("regression on the p99 per query: per query at 50 q/s against the baseline run's")
    assert "two runs, two processes" in d.reason and (d.ratio, d.ci_low) == (tail["ratio"], tail["ci_low"])
    same = _passed()  # unchanged, 2,000 queries a run: the interval of the p99 ratio within the tolerance
    gate_per_query(same, case, _point(50.0, _latencies(2000, 3)), _point(50.0, _latencies(2000, 1)), QUIET)
    assert same.verdict == Verdict.PASS and same.evidence["per_query_tail"]["verdict"] == "pass"
    busy = _passed()
    gate_per_query(busy, case, slow, _point(50.0, _latencies(600, 1), other=0.6), QUIET)  # the baseline's host busy
    assert busy.verdict == Verdict.INCONCLUSIVE and "the baseline run's host was busy" in busy.reason
    other_rate = _passed()
    gate_per_query(other_rate, case, _point(60.0, _latencies(600, 2)), base, QUIET)
    assert (
        other_rate.verdict == Verdict.PASS and "not like for like" in other_rate.evidence["per_query_tail"]["skipped"]
    )
    none = _passed()
    gate_per_query(none, case, slow, None, QUIET)
    assert none.verdict == Verdict.PASS and "skipped" in none.evidence["per_query_tail"]


def test_a_server_that_no_longer_keeps_up_with_the_baselines_rate_is_a_regression():
    """This run's point is invalid (its queue grew through the run) where the baseline run's at the same rate was
    valid: a regression whatever its percentiles; on a busy host inconclusive; an invalid baseline point is no
    result to compare with."""
    case = Case(model="m", mode="infer", scenario="server", target_qps=50, gate_percentile=99, paired=True)
    base = _point(50.0, _latencies(600, 1))
    over = {**_point(50.0, _latencies(600, 2)), "invalid": "the queue grew through the run: ..."}
    d = _passed()
    gate_per_query(d, case, over, base, QUIET)
    assert d.verdict == Verdict.REGRESSION and d.evidence["gated_on"] == "p99 per query"
    assert d.reason.startswith("regression on the p99 per query: this run's server did not keep up at 50 q/s")
    busy = _passed()
    gate_per_query(busy, case, over, base, {"busy": True, "reason": "others"})
    assert busy.verdict == Verdict.INCONCLUSIVE and "host busy" in busy.reason
    stale = _passed()
    gate_per_query(stale, case, _point(50.0, _latencies(600, 2)), over, QUIET)
    assert stale.verdict == Verdict.PASS and "is invalid" in stale.evidence["per_query_tail"]["skipped"]
