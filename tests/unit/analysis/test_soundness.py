"""Findings on the steps themselves and the rule that keeps unsound runs from becoming baselines
(``tasks.analysis.soundness``), over plain values: the runner's ``Fed`` records, the warm-up's outcome, the noise."""

from __future__ import annotations

import pytest

from tasks.analysis.calibration import assess_noise
from tasks.analysis.soundness import baseline_refusals, examples_per_step, measurement_findings
from tests.helpers.builders import QUIET_HOST_LOAD

QUIET = QUIET_HOST_LOAD


def _fed(steps: int, compiled: list[int], shapes: list[tuple[list[int], int]]) -> dict:
    distinct = [{"shapes": {"ids": s}, "examples": s[0], "steps": n, "first_step": 0} for s, n in shapes]
    return {
        "steps": steps,
        "examples": sum(s[0] * n for s, n in shapes),
        "distinct": distinct,
        "compiled_steps": compiled,
        "retraced_steps": [],
    }


def test_timed_steps_that_compiled_are_a_finding_with_their_steps_count_and_time_apart():
    """Issue 26: XLA with a variable sequence length recompiled on every measured step; the run stored a median
    of 1258.5 ms for a model whose warm step takes under 60 ms, and said nothing."""
    measured = _fed(50, list(range(50)), [([16, 20 + i], 1) for i in range(50)])
    fed = {"cold": _fed(1, [0], [([16, 12], 1)]), "warmup": _fed(3, [], [([16, 12], 3)]), "measured": measured}
    times = [1258.5 + (i % 3) for i in range(50)]
    f = {x.code: x for x in measurement_findings(fed, batch_size=16, xla=True, timed_ms={"measured": times})}
    rec = f["recompiled_timed_steps"]
    assert rec.severity == "warning" and rec.value == 50 and rec.figure == "fed.measured.compiled_steps"
    assert rec.message.startswith("50 of 50 measured steps compiled (steps 0, 1, 2,")
    assert "XLA compiles one executable per input shapes" in rec.message and "50 distinct batch shapes" in rec.message
    assert "no timed step ran without compiling (median 1259.50 ms)" in rec.message
    assert f["batch_shapes_vary"].value == 50 and "recompiled_in_warmup" not in f
    # two compiled steps of ten: their median apart from the others', and the compile time they hold
    some = {"measured": _fed(10, [3, 7], [([16, 20], 8), ([16, 21], 1), ([16, 22], 1)])}
    (rec,) = [
        x
        for x in measurement_findings(
            some,
            batch_size=16,
            xla=True,
            timed_ms={"measured": [50.0] * 3 + [900.0] + [50.0] * 3 + [1000.0] + [50.0] * 2},
        )
        if x.code == "recompiled_timed_steps"
    ]
    assert "2 of 10 measured steps compiled (steps 3, 7;" in rec.message
    assert "median 950.00 ms against 50.00 ms for the 8 that did not compile, about 1800 ms" in rec.message
    steady = {"measured": _fed(10, [], [([16, 20], 10)])}
    assert measurement_findings(steady, batch_size=16, xla=True, steady=True) == []


def test_a_warm_up_that_never_got_steady_is_a_finding():
    """Issue 26: a warm-up of 60 steps at CV 31% said done."""
    (f,) = measurement_findings({}, batch_size=16, xla=False, steady=False, warmup_steps=60, final_cv=0.31, cv_max=0.05)
    assert f.code == "warmup_not_steady" and f.severity == "warning" and f.value == 0.31 and f.threshold == 0.05
    assert f.message.startswith("The warm-up did not reach steady state in 60 steps: last window CV 31.0% (steady")


def test_partial_batches_where_allowed_are_a_finding_and_the_throughput_counts_the_examples_fed():
    fed = {"measured": _fed(4, [], [([8, 5], 3), ([6, 5], 1)])}
    f = {x.code: x for x in measurement_findings(fed, batch_size=8, xla=False)}
    assert f["partial_batches"].value == 1 and "30 examples in all" in f["partial_batches"].message
    assert examples_per_step(fed, "measured", 8) == pytest.approx(7.5)  # not 8: the throughput is not overstated
    assert examples_per_step({}, "measured", 8) == 8.0


def test_a_busy_host_an_unsteady_warm_up_or_compiled_timed_steps_refuse_an_automatic_baseline():
    """Issue 26: a run measured while other processes took up to 83% of the CPU became the first baseline."""
    busy = assess_noise({**QUIET, "other_cpu_share": 0.83}).model_dump(mode="json")
    quiet = assess_noise(QUIET).model_dump(mode="json")
    (why,) = baseline_refusals([], busy)
    assert why.startswith("host busy: other processes took 83%")
    assert baseline_refusals([], quiet) == [] and baseline_refusals(None, None) == []
    findings = [
        {"code": "warmup_not_steady", "message": "The warm-up did not reach steady state in 60 steps"},
        {"code": "recompiled_timed_steps", "message": "50 of 50 measured steps compiled"},
        {"code": "batch_shapes_vary", "message": "info only"},
        {"code": "partial_batches", "message": "allowed by the case"},
    ]
    assert baseline_refusals(findings, quiet) == [
        "warmup_not_steady: The warm-up did not reach steady state in 60 steps",
        "recompiled_timed_steps: 50 of 50 measured steps compiled",
    ]
