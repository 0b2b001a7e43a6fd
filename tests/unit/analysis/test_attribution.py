"""Op-level attribution on hand-made op tables with known answers."""

from __future__ import annotations

import pandas as pd
import pytest

from tasks.analysis.attribution import CATEGORIES, attribute, match_scopes, op_category
from tasks.analysis.profile import OP_STATS_COLUMNS


def _table(rows):
    return pd.DataFrame(
        [
            {
                "host_or_device": "Device",
                "op_type": t,
                "op_name": n,
                "occurrences": 1,
                "total_self_time_us": us,
                "avg_self_time_us": us,
                "self_time_share": None,
            }
            for t, n, us in rows
        ],
        columns=OP_STATS_COLUMNS,
    )


BASE = _table(
    [
        ("Conv2D", "conv", 500.0),
        ("MatMul", "dense", 300.0),
        ("Relu", "relu", 100.0),
        ("ResourceApplyAdam", "adam", 50.0),
        ("IDLE", "IDLE", 9999.0),
    ]
)
# twice as many steps: per-step conv +100 µs, dense unchanged, relu vanished, a new batch-norm op
CAND = _table(
    [
        ("Conv2D", "conv", 1200.0),
        ("MatMul", "dense", 600.0),
        ("ResourceApplyAdam", "adam", 100.0),
        ("FusedBatchNormV3", "bn", 80.0),
        ("IDLE", "IDLE", 1.0),
    ]
)


def test_ranks_by_change_per_step():
    a = attribute(BASE, CAND, baseline_steps=5, candidate_steps=10)
    ops = a.ops_frame().set_index("op_name")
    assert list(ops.index[:3]) == ["conv", "relu", "bn"]
    assert ops.loc["conv", "baseline_us_per_step"] == pytest.approx(100.0)
    assert ops.loc["conv", "delta_us_per_step"] == pytest.approx(20.0)
    assert ops.loc["conv", "relative_change"] == pytest.approx(0.2)
    assert ops.loc["dense", "delta_us_per_step"] == pytest.approx(0.0)  # same per step
    assert ops.loc["relu", "status"] == "vanished" and ops.loc["relu", "delta_us_per_step"] == -20.0
    assert ops.loc["bn", "status"] == "appeared" and pd.isna(ops.loc["bn", "relative_change"])
    assert a.appeared == ["bn"] and a.vanished == ["relu"]
    assert "IDLE" not in ops.index
    assert a.step_time_change_source == "op_self_time"
    assert a.op_self_time_change_us == pytest.approx(20.0 - 20.0 + 8.0)


def test_op_figures_are_scaled_to_the_measured_medians_and_add_up_to_their_change():
    # windows: baseline 190 µs/step of op self-time, candidate 198; measured medians 0.380 and 0.792 ms
    a = attribute(
        BASE,
        CAND,
        baseline_steps=5,
        candidate_steps=10,
        baseline_measured_ms=0.380,
        candidate_measured_ms=0.792,
        top_n=1,
    )
    assert a.step_time_change_source == "measured_median"
    assert a.step_time_change_us == pytest.approx(412.0)
    assert (a.baseline_scale, a.candidate_scale) == (pytest.approx(2.0), pytest.approx(4.0))
    ops = a.ops_frame().set_index("op_name")
    assert ops["delta_us_per_step"].sum() == pytest.approx(412.0)  # the parts add up to the whole
    assert ops["baseline_us_per_step"].sum() == pytest.approx(380.0)
    assert ops["candidate_us_per_step"].sum() == pytest.approx(792.0)
    assert ops.loc["conv", "baseline_us_per_step"] == pytest.approx(200.0)  # 100/190 of 380 µs
    assert ops.loc["conv", "candidate_us_per_step"] == pytest.approx(480.0)  # 120/198 of 792 µs
    assert ops.loc["conv", "baseline_window_us_per_step"] == pytest.approx(100.0)  # raw, per profiled step
    assert a.op_self_time_change_us == pytest.approx(8.0)
    assert a.top_share == pytest.approx(280.0 / 412.0)
    assert sum(c.delta_us_per_step for c in a.categories) == pytest.approx(412.0)
    assert "+412.0 µs/step" in a.summary and "x2.084" in a.summary and "68%" in a.summary
    assert a.warnings == []


def test_a_slowdown_is_not_explained_as_a_speedup_by_unrepresentative_windows():
    # the case: the baseline's 5-step window ran 3.57x its measured median (busy host), the
    # candidate's 0.49x; the candidate is really x2.04 slower with the same op mix
    base = _table([("Conv2D", "conv", 5 * 0.6 * 3.57 * 50_000), ("MatMul", "dense", 5 * 0.4 * 3.57 * 50_000)])
    cand = _table([("Conv2D", "conv", 5 * 0.6 * 0.49 * 102_000), ("MatMul", "dense", 5 * 0.4 * 0.49 * 102_000)])
    raw = attribute(base, cand, baseline_steps=5, candidate_steps=5)
    assert raw.step_time_change_us < -100_000  # what the windows alone say: a large speed-up
    assert "need not add up" in raw.warnings[0] and raw.step_time_change_source == "op_self_time"
    a = attribute(
        base,
        cand,
        baseline_steps=5,
        candidate_steps=5,
        baseline_measured_ms=50.0,
        candidate_measured_ms=102.0,
        warnings=["the profiled window of the baseline is not representative"],
    )
    assert a.step_time_change_us == pytest.approx(52_000.0)
    ops = a.ops_frame().set_index("op_name")
    assert ops.loc["conv", "delta_us_per_step"] == pytest.approx(0.6 * 52_000.0)
    assert ops.loc["dense", "delta_us_per_step"] == pytest.approx(0.4 * 52_000.0)
    assert ops.loc["conv", "relative_change"] == pytest.approx(1.04)
    assert "Warning: the profiled window of the baseline is not representative" in a.summary


def test_measured_medians_must_be_step_times():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="baseline_measured_ms"):
            attribute(
                BASE, CAND, baseline_steps=5, candidate_steps=10, baseline_measured_ms=bad, candidate_measured_ms=1.0
            )
    one = attribute(BASE, CAND, baseline_steps=5, candidate_steps=10, candidate_measured_ms=1.0)
    assert one.step_time_change_source == "op_self_time" and "for the baseline" in one.warnings[0]


def test_categories():
    a = attribute(BASE, CAND, baseline_steps=5, candidate_steps=10)
    cats = a.categories_frame().set_index("category")
    assert cats.loc["convolution", "delta_us_per_step"] == pytest.approx(20.0)
    assert cats.loc["elementwise", "delta_us_per_step"] == pytest.approx(-20.0)
    assert cats.loc["normalization", "delta_us_per_step"] == pytest.approx(8.0)
    assert cats.loc["optimizer", "delta_us_per_step"] == pytest.approx(0.0)
    assert set(cats.index) <= set(CATEGORIES)


@pytest.mark.parametrize(
    "op_type, category",
    [
        ("Conv2D", "convolution"),
        ("Conv2DBackpropFilter", "convolution"),
        ("_MklNativeFusedConv2D", "convolution"),
        ("DepthwiseConv2dNative", "convolution"),
        ("MatMul", "matmul"),
        ("BatchMatMulV2", "matmul"),
        ("Einsum", "matmul"),
        ("_MklMatMul", "matmul"),
        ("FusedBatchNormV3", "normalization"),
        ("FusedBatchNormGradV3", "normalization"),
        ("IteratorGetNext", "data_input"),
        ("Dataset", "data_input"),
        ("ResourceApplyAdam", "optimizer"),
        ("ApplyGradientDescent", "optimizer"),
        ("AssignSubVariableOp", "optimizer"),
        ("Relu", "elementwise"),
        ("ReluGrad", "elementwise"),
        ("AddV2", "elementwise"),
        ("BiasAddGrad", "elementwise"),
        ("Softmax", "other"),
        ("Transpose", "other"),
    ],
)
def test_op_category(op_type, category):
    assert op_category(op_type) == category


def test_records_input_and_errors():
    a = attribute(BASE.to_dict("records"), [], baseline_steps=5, candidate_steps=1)
    assert set(a.vanished) == {"conv", "dense", "relu", "adam"} and a.appeared == []
    with pytest.raises(ValueError, match="baseline_steps"):
        attribute(BASE, CAND, baseline_steps=0, candidate_steps=1)
    with pytest.raises(ValueError, match="lacks columns"):
        attribute(BASE.drop(columns=["op_name"]), CAND, baseline_steps=1, candidate_steps=1)
    same = attribute(BASE, BASE, baseline_steps=5, candidate_steps=5)
    assert same.top_share is None and same.step_time_change_us == 0


def test_renamed_model_scope_is_matched_not_appeared():
    def table(scope, extra=()):
        return _table(
            [
                ("Conv2D", f"{scope}/block_1/conv/Conv2D", 500.0),
                ("Conv2DBackpropFilter", f"gradient_tape/{scope}/block_1/conv/Conv2DBackpropFilter", 300.0),
                ("Relu", f"{scope}/block_1/relu/Relu", 100.0),
                ("AddN", "AddN_7", 10.0),
                *extra,
            ]
        )

    base = table("mobilenetv2_0.35_96_1")
    cand = table("mobilenetv2_0.75_96_1", [("MatMul", "head_1/dense/MatMul", 50.0)])
    cand.loc[0, "total_self_time_us"] = 1500.0
    a = attribute(base, cand, baseline_steps=5, candidate_steps=5)
    assert a.scope_renames == {"mobilenetv2_0.75_96_1": "mobilenetv2_0.35_96_1"}
    assert a.appeared == ["head_1/dense/MatMul"] and a.vanished == []  # an unrelated new scope stays new
    assert (a.ops[0].op_name, a.ops[0].delta_us_per_step) == ("mobilenetv2_0.35_96_1/block_1/conv/Conv2D", 200.0)
    assert "'mobilenetv2_0.75_96_1' of the candidate matched to 'mobilenetv2_0.35_96_1'" in a.summary


@pytest.mark.parametrize(
    "base, cand, expected",
    [
        (["m1/a/x", "m1/b/y"], ["m2/a/x", "m2/b/y"], {"m2": "m1"}),
        (["m1/a/x", "m1/b/y", "m1/c/z"], ["m2/q/x"], {}),  # nothing shared: not the same scope
        (["m1/a/x", "keep/a/x"], ["m2/a/x", "keep/a/x"], {"m2": "m1"}),  # scopes in both runs are not renamed
        (["Conv2D", "AddN_1"], ["MatMul"], {}),  # unscoped names
    ],
)
def test_match_scopes(base, cand, expected):
    assert match_scopes(base, cand) == expected


def test_an_op_missing_from_a_table_at_xprofs_cap_is_below_cut_not_appeared_or_vanished():
    """Only the table at the cap makes its missing ops below-cut: a missing op of a complete table is still
    appeared / vanished (here the candidate's table is complete, the baseline's capped)."""
    a = attribute(
        BASE, CAND, baseline_steps=5, candidate_steps=10, baseline_measured_ms=1.0, candidate_measured_ms=1.0,
        baseline_capped=True, labels=("run 1 (v1)", "run 2 (v2)"),
    )  # fmt: skip
    status = a.ops_frame().set_index("op_name")["status"]
    assert (status["bn"], status["relu"], status["conv"]) == ("below-cut", "vanished", "both")
    assert (a.appeared, a.vanished, a.below_cut) == ([], ["relu"], ["bn"])
    assert a.candidate_cut_us is None and a.baseline_cut_us == pytest.approx(
        a.ops_frame().query("status != 'appeared' and baseline_us_per_step > 0")["baseline_us_per_step"].min()
    )
    assert "0 ops appeared, 1 vanished." in a.summary
    assert (
        "1 ops are in one run's op table only: xprof keeps a profile's 500 largest ops, and the op table of "
        in (a.summary)
        and "run 1 (v1) is at that cap" in a.summary
    )
    assert a.basis.startswith("wall time: the measured median step times (profiler off) of run 1 (v1), 1.000 ms")
