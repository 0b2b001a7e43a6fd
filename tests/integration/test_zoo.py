"""The model zoo end to end (issue 13): each zoo model (``tasks.runner.zoo.ZOO``) runs through all seven
stages (``tasks.stages.pipeline.run_case``), in train mode where it trains and the image CNN in infer too;
the LSTM's profile, in which xprof finds no steps although the runner marked them, is reported as such; and a
deliberately slow ``input_fn`` pipeline is diagnosed input-bound while the synthetic feed of the same model is
not.

The zoo and the example TFRecord images are built once per module in a subprocess (TensorFlow stays out of
pytest's process). Step counts are tiny (10 measured steps, 2 profiled): these tests show that each kind of
model runs and what perfwatch says about it, not how fast it is. ``-s`` prints each run's figures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.analysis.diagnose import INPUT_BOUND_HIGH_PCT
from tasks.records import Case, RunContext
from tasks.runner.zoo import ZOO
from tasks.stages.pipeline import run_case

pytestmark = pytest.mark.slow

#: per runner process (s): a hang fails the test instead of blocking the suite for the 30-min default
RUNNER_LIMIT_S = "600"


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory) -> Path:
    """``<dir>/models`` (the zoo as a model store) and ``<dir>/images`` (the example TFRecords)."""
    root = tmp_path_factory.mktemp("zoo")
    script = (
        "import sys; from tasks.runner.zoo import build_zoo, write_images; "
        "build_zoo(sys.argv[1] + '/models'); write_images(sys.argv[1] + '/images')"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root)], capture_output=True, text=True, env=env, timeout=900
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the zoo failed:\n{proc.stderr[-3000:]}")
    return root


@pytest.fixture
def zoo_home(home, zoo_dir, monkeypatch) -> Path:
    """A fresh PERFWATCH_HOME (SQLite store) whose model store is the zoo and whose images are the zoo's."""
    monkeypatch.setenv("PERFWATCH_MODEL_STORE", str(zoo_dir / "models"))
    monkeypatch.setenv("PERFWATCH_IMAGES", str(zoo_dir / "images"))
    for var in ("PERFWATCH_WARMUP_TIMEOUT_S", "PERFWATCH_PROFILE_TIMEOUT_S"):
        monkeypatch.setenv(var, RUNNER_LIMIT_S)
    return home


_BUNDLES: dict[tuple[str, str], dict] = {}


def _run(model: str, mode: str = "train", **fields) -> dict:
    """The final bundle of ``run_case`` for a zoo model (batch 4, 10 measured and 2 profiled steps, the zoo's
    Case fields updated by ``fields``), run once per module."""
    case = Case(
        model=model,
        mode=mode,
        **{
            "batch_size": 4,
            "measured_steps": 10,
            "profiled_steps": 2,
            "warmup_max_steps": 10,
            **ZOO[model].case,
            **fields,
        },
    )
    if (model, case.name) in _BUNDLES:
        return _BUNDLES[model, case.name]
    bundle = run_case(RunContext(dag_id="zoo", dag_run_id=f"{model}-{case.name}", trigger="test", case=case)).to_xcom()
    _BUNDLES[model, case.name] = bundle
    run = bundle["run"]
    lat = run.get("latency_ms") or {}
    print(
        f"\n{model:11s} {mode:5s} bs{case.batch_size}: median {run['median_step_ms']:.2f} ms, "
        f"{run['throughput_eps']:.0f} examples/s"
        + (f", latency p50 {lat['p50']:.2f} p90 {lat['p90']:.2f} p99 {lat['p99']:.2f} ms" if lat else "")
        + f"; input-bound {bundle['parsed']['input_bound_pct']}%; findings "
        + str([f.split(":")[0] for f in bundle["parsed"]["findings"]])
    )
    return bundle


#: every zoo model end to end in one mode (train where it trains: the LSTM's training run has its own test
#: below, so it runs infer here), and the image CNN in both, so each mode's path runs end to end; the other
#: (model, mode) pairs cost 24 s of `make test` each and test no path these do not (issue 23's test-time cut)
ZOO_RUNS = [("zoo_cnn", "infer")] + [
    (name, "infer" if name == "zoo_lstm" or "train" not in z.modes else "train") for name, z in ZOO.items()
]


@pytest.mark.parametrize("model, mode", ZOO_RUNS, ids=[f"{n}-{m}" for n, m in ZOO_RUNS])
def test_zoo_model_runs_end_to_end(zoo_home, model, mode):
    bundle = _run(model, mode)
    run, verdict = bundle["run"], bundle["verdict"]
    assert bundle["archived"]["run_id"] >= 1 and verdict["verdict"] == "no-baseline"
    assert run["measured_steps"] == 10 and run["median_step_ms"] > 0 and run["throughput_eps"] > 0
    if mode == "infer":
        lat = run["latency_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"] and lat["throughput_eps"] > 0
        ci = lat["ci"]  # each percentile's interval and n; 10 batches bound a median, never a p99
        assert lat["n"] == 10 and ci["p50"]["estimable"] and ci["p50"]["low"] <= lat["p50"] <= ci["p50"]["high"]
        assert not ci["p99"]["estimable"] and ci["p99"]["high"] is None and ci["p99"]["min_n"] == 299
    else:
        assert run.get("latency_ms") is None
    findings = bundle["parsed"]["findings"]
    assert not any(f.startswith("no_step_markers") for f in findings), findings  # the runner always marks steps
    if bundle["parsed"]["avg_step_time_ms"] is None:  # xprof found no steps (the LSTM): said so, timer kept
        assert any(f.startswith("steps_not_found") and "step markers are in the profile" in f for f in findings)


def test_lstm_profile_without_xprof_steps_is_reported_honestly(zoo_home):
    """The LSTM's loop inside the step: xprof groups none of the marked steps. The run keeps the runner's
    timings, and the finding says the markers are there instead of advising to add them."""
    bundle = _run("zoo_lstm", "train")
    parsed = bundle["parsed"]
    assert bundle["verdict"]["verdict"] == "no-baseline"
    assert parsed["avg_step_time_ms"] is None and parsed["input_bound_pct"] is None  # unknown, never 0
    assert bundle["run"]["median_step_ms"] > 0  # the step time is the runner's timer
    [f] = [f for f in parsed["findings"] if f.startswith("steps_not_found")]
    assert "although perfwatch's step markers are in the profile (2 marked steps, step_num 0..1)" in f
    assert "_r=1" not in f and "Trace(" not in f


def test_slow_input_pipeline_is_diagnosed_input_bound_and_synthetic_is_not(zoo_home):
    # batch 64 (~10 ms steps): at batch 4 or 16 a step of this tiny CNN is so short (2-3 ms) that even the
    # synthetic feed's IteratorGetNext took 4-8% of it (MODERATELY input-bound); at 64 it takes under 1%
    slow = _run("zoo_cnn", batch_size=64, inputs=None, input_fn="tasks.runner.input_fns:images_slow")
    synthetic = _run("zoo_cnn", batch_size=64)  # the same model fed synthetic in-memory batches of the same shape
    assert slow["parsed"]["input_bound_pct"] >= INPUT_BOUND_HIGH_PCT
    assert any(f.startswith("input_bound: The run is HIGHLY input-bound") for f in slow["parsed"]["findings"])
    # quiet, the synthetic feed takes under 1% of a step; beside the other xdist worker it read 5.04% once (CI,
    # 2026-12-07: "MODERATELY input-bound", xprof's 5% line), so the contrast is what is asserted, not the line
    share = synthetic["parsed"]["input_bound_pct"]
    assert share < INPUT_BOUND_HIGH_PCT and share < slow["parsed"]["input_bound_pct"] / 4
    assert not any(f.startswith("input_bound: The run is HIGHLY") for f in synthetic["parsed"]["findings"])
    assert slow["run"]["median_step_ms"] > synthetic["run"]["median_step_ms"]  # the step waits for its input
