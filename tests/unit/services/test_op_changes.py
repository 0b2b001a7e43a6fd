"""Which op moved over the nights (issue 38 item 5): `perfwatch changes MODEL --ops` on a stored series whose op
tables are xprof's own parse of a real profile (tests/data/tiny_train_3steps.xplane.pb), on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tasks.services.op_changes import op_change_table, op_series
from tasks.stages.parse import parse_profile
from tests.helpers.builders import add_run

XPLANE = Path(__file__).parents[2] / "data" / "tiny_train_3steps.xplane.pb"
GRAD = "gradient_tape/functional_1/conv2d_1/convolution/Conv2DBackpropFilter"


@pytest.fixture(scope="module")
def real_ops(tmp_path_factory) -> list[dict]:
    """xprof's framework_op_stats rows of the tiny Conv2D model's 3-step profile (IDLE left out)."""
    prof = tmp_path_factory.mktemp("profile") / "plugins" / "profile" / "s"
    prof.mkdir(parents=True)
    shutil.copy(XPLANE, prof / "host.xplane.pb")
    parsed = parse_profile(prof.parents[2], tools=("overview_page", "framework_op_stats"))
    return [o for o in parsed.op_stats if o["op_type"] != "IDLE"]


def store_nights(db_url, tmp_path, ops: list[dict], n: int, *, v2_from: int, grad_factor: float, seed: int = 0):
    """``n`` nightly runs of model m; from run ``v2_from`` on version 2, whose conv backprop op takes
    ``grad_factor`` x its time and whose model scope Keras named functional_2 (the ops keep their series)."""
    rng = np.random.default_rng(seed)
    total = sum(o["total_self_time_us"] for o in ops)
    ids = []
    for i in range(n):
        v2 = i >= v2_from
        rows = []
        for o in ops:
            us = o["total_self_time_us"] * float(np.exp(rng.normal(0, 0.04)))
            if v2 and o["op_name"] == GRAD:
                us *= grad_factor
            name = o["op_name"].replace("functional_1", "functional_2") if v2 else o["op_name"]
            rows.append((name, o["op_type"], us))
        # the measured median moves with the window's op time, as a real run's would (10 ms at the base)
        median = 10.0 * sum(us for *_, us in rows) / total * float(np.exp(rng.normal(0, 0.01)))
        ids.append(add_run(db_url, tmp_path, f"n{i}", version="2" if v2 else "1", median=median, day=i, ops=rows))
    return ids


def test_changes_ops_names_the_op_that_moved_at_its_run_and_version(db_url, tmp_path, cli, real_ops):
    ids = store_nights(db_url, tmp_path, real_ops, 14, v2_from=9, grad_factor=1.6)
    out = cli("changes", "m", "--ops", "--format", "json")
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.output)
    # named as the newest run names it (version 2's scope)
    assert row["op_name"] == GRAD.replace("functional_1", "functional_2")
    assert row["op_type"] == "_MklNativeConv2DBackpropFilterWithBias"
    assert row["run_id"] == ids[9] and (row["version"], row["prev_version"]) == ("2", "1")
    assert row["direction"] == "slower" and row["status"] == "confirmed" and row["missing_runs"] == 0
    # the op's share of the window grew and the run's median with it: the op's µs/step ratio holds the factor
    assert row["ci_low"] < 1.6 < row["ci_high"] and row["n_before"] == 9 and row["n_after"] == 5
    table = cli("changes", "m", "--ops", "--top", "3")
    assert table.exit_code == 0, table.output
    assert "train-bs16: 14 runs with op tables, the 3 largest ops watched, 1 op change point(s) in 1 op(s)" in (
        table.output
    )
    # one series across the rename: the version-1 runs read under version 2's scope name
    (s,) = op_series(db_url, "m").values()
    assert ("Host", "_MklNativeConv2DBackpropFilterWithBias", GRAD.replace("_1/", "_2/", 1)) in s.per_run[0]
    assert s.renamed[ids[0]] == {"functional_1": "functional_2"} and ids[-1] not in s.renamed
    # the version-1 stretch alone: nothing moved
    early, _ = op_change_table(db_url, "m", runs_before=s.runs[8].started_at)
    assert early.empty


def test_changes_ops_on_a_flat_series_and_bad_options(db_url, tmp_path, cli, real_ops):
    store_nights(db_url, tmp_path, real_ops, 10, v2_from=99, grad_factor=1.0, seed=3)
    out = cli("changes", "m", "--ops")
    assert out.exit_code == 0, out.output
    assert "10 runs with op tables, the 10 largest ops watched, 0 op change point(s)" in out.output
    assert json.loads(cli("changes", "m", "--ops", "-f", "json").output) == []
    bad = cli("changes", "m", "--ops", "--metric", "p90_step_ms")
    assert bad.exit_code == 2 and "expected it without --metric and --confirm" in " ".join(
        bad.output.replace("│", " ").split()
    )
    assert "no model 'nope'" in cli("changes", "nope", "--ops").output


def test_the_nightly_alert_names_the_op_that_moved_where_the_step_time_moved(db_url, tmp_path, real_ops):
    from tasks.services.trend import watch_case

    ids = store_nights(db_url, tmp_path, real_ops, 12, v2_from=9, grad_factor=1.6)
    report = watch_case(db_url, "m", "train-bs16", ids[-1])  # the night whose run confirms the step
    (alert,) = report.alerts
    grad = GRAD.replace("functional_1", "functional_2")
    assert alert.startswith(f"change point at run {ids[9]}: median_step_ms x1.")
    assert f"; ops that moved there: {grad} [_MklNativeConv2DBackpropFilterWithBias] x1.6" in alert
    (moved,) = report.moved_ops[str(ids[9])]
    assert moved["op"][2] == grad and moved["run_id"] == ids[9] and moved["metric"] == "op_us_per_step"
    # a night whose own run failed looks for no new change point: nothing alerts, no op is named
    quiet = watch_case(db_url, "m", "train-bs16", ids[-1], new_points=False)
    assert quiet.alerts == [] and quiet.moved_ops == {}


def test_op_shares_split_the_cpu_time_per_step_when_every_run_recorded_it(db_url, tmp_path, cli):
    """A busy host stretches the wall step (x1 to x2 here) and not the CPU time: the ops split the CPU time."""
    ops = [("m/conv", "Conv2D", 600.0), ("m/relu", "Relu", 400.0)]
    for i in range(10):
        add_run(db_url, tmp_path, f"c{i}", median=10.0 * (1 + (i % 5) / 4), day=i, ops=ops, cpu_ms=20.0)
    (s,) = op_series(db_url, "m").values()
    assert s.basis == "median_cpu_ms"
    assert all(r[("Host", "Conv2D", "m/conv")] == pytest.approx(12_000.0) for r in s.per_run)  # 60% of 20 ms
    out = cli("changes", "m", "--ops")
    assert "0 op change point(s)" in out.output and "the op shares split each run's median CPU time per step" in (
        " ".join(out.output.split())
    )
    # one run without CPU time: the whole series splits the wall step instead
    add_run(db_url, tmp_path, "c10", median=10.0, day=10, ops=ops)
    (s,) = op_series(db_url, "m").values()
    assert s.basis == "median_step_ms" and s.per_run[-1][("Host", "Conv2D", "m/conv")] == pytest.approx(6_000.0)


def test_a_table_shows_an_op_path_by_its_layer_and_op():
    from tasks.cli.changes import short_op

    long = "gradient_tape/mobilenetv2_0.75_96_1/block_1_depthwise_1/depthwise/DepthwiseConv2dNativeBackpropFilter"
    assert short_op(long) == "grad block_1_depthwise_1/…/DepthwiseConv2dNativeBackpropFilter"
    assert short_op("mobilenetv2_0.75_96_1/block_1_expand_BN_1/moments/SquaredDifference") == (
        "block_1_expand_BN_1/moments/SquaredDifference"
    )
    assert short_op("functional_1/conv2d_1/Relu") == "functional_1/conv2d_1/Relu"
