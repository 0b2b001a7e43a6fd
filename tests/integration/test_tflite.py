"""``mode: tflite``: conversion with each quantization, interpreter timing, agreement with TF, a converter
rejection naming the op, and the pipeline storing a tflite run that has no xprof profile."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from sqlalchemy import select

from tasks.records import Case, RunContext
from tasks.runner import RunnerError, RunnerSpec, launch
from tasks.runner.tflite import PROFILE_ABSENT_REASON, agreement, rejected_ops
from tasks.settings import Settings
from tasks.stages.pipeline import run_case
from tasks.store import Artifact, Run, RunTable, StepSample, TelemetrySample, session_scope
from tests.helpers.models import make_model


def _tflite(tmp_path, model, quantization, batch_size=4, **kw):
    spec = RunnerSpec(
        mode="profile",
        model_path=str(model),
        out_dir=str(tmp_path / f"run-{quantization}"),
        batch_size=batch_size,
        case_mode="tflite",
        quantization=quantization,
        warmup_steps=2,
        measured_steps=20,
        profiled_steps=2,
        **kw,
    )
    return launch(spec, sys.executable, 900).model_dump(mode="json")


@pytest.mark.slow
def test_each_quantization_converts_times_and_agrees(model_files, tmp_path):
    sizes = {}
    for q in ("none", "dynamic", "int8"):
        r = _tflite(tmp_path, model_files["tiny"], q)
        t = r["tflite"]
        assert t["quantization"] == q and t["size_bytes_before"] == os.path.getsize(model_files["tiny"])
        assert t["tflite_path"] == "model.tflite"  # relative to the out dir: the stages on other hosts find it
        assert t["size_bytes_after"] == os.path.getsize(tmp_path / f"run-{q}" / t["tflite_path"]) > 0
        assert len(r["measured_step_times_ms"]) == 20 and all(x > 0 for x in r["measured_step_times_ms"])
        lat = r["latency_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"] and lat["throughput_eps"] > 0
        assert r["profiled_step_times_ms"] == [] and r["profile_absent_reason"] == PROFILE_ABSENT_REASON
        a = t["agreement"]
        assert a["examples"] == 16 and a["top1_agreement"] is not None  # 3 classes: a classifier's head
        sizes[q] = (t["size_bytes_after"], a["max_abs_diff"])
        ((name, lite_in),) = t["inputs"].items()  # the interpreter's own I/O: float32 in every quantization
        assert lite_in["dtype"] == "float32" and lite_in["shape"] == [4, 16, 16, 3] and lite_in["scale"] is None
        assert t["num_threads"] == len(os.sched_getaffinity(0)) and t["num_threads_source"] == "affinity"
        assert t["label"].startswith(f"{q}: ") and "float32 I/O" in t["label"]
        assert (t["tensor_dtypes"].get("int8", 0) > 0) == (q == "int8")  # dynamic: every weight under 1024 elements
        if q == "dynamic":
            assert t["label"].endswith("nothing was quantized (no int8 tensor in the model)")
        if q == "none":
            assert a["max_abs_diff"] < 1e-4 and a["top1_agreement"] == 1.0  # float32 both sides
        else:
            assert a["max_abs_diff"] < 0.1  # quantized: close, not equal
    assert sizes["int8"][1] > sizes["none"][1]  # int8 activations cost accuracy that float32 does not


@pytest.mark.slow
def test_twelve_outputs_agree_with_one_thread_recorded(tmp_path):
    """Issue 26: outputs paired by sorting names as strings (output_10 before output_2) made a correct float32
    conversion of a 12-output model read max |diff| 5.02 and top-1 60.4%; TFLite's threads were not set."""
    model = make_model("heads12", tmp_path / "heads12.keras")
    r = _tflite(tmp_path, model, "none", tflite_threads=1)
    t = r["tflite"]
    a = t["agreement"]
    assert a["max_abs_diff"] < 1e-4 and a["top1_agreement"] == 1.0  # float32 both sides, paired right
    assert [o["name"] for o in a["outputs"]] == [f"output_{i}" for i in range(12)]
    assert (t["num_threads"], t["num_threads_source"], t["xnnpack"]) == (1, "case", True)
    assert t["outputs"]["output_11"] == {"dtype": "float32", "shape": [4, 3], "scale": None, "zero_point": None}
    assert t["label"] == "none: float32 weights and activations, float32 I/O"


@pytest.mark.slow
def test_int8_on_the_demo_model(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from tasks.runner.zoo import build_store; build_store(sys.argv[1])",
            str(tmp_path / "store"),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    model = tmp_path / "store" / "demo_mobilenet" / "1" / "model.keras"
    r = _tflite(tmp_path, model, "int8", batch_size=1)
    t = r["tflite"]
    assert t["size_bytes_after"] < t["size_bytes_before"] / 2  # int8 weights: a quarter of float32, plus graph
    assert list(t["interpreter_inputs"].values()) == [[1, 96, 96, 3]]
    assert t["agreement"]["examples"] == 4 and t["agreement"]["max_abs_diff"] is not None
    assert 0.0 <= t["agreement"]["top1_agreement"] <= 1.0
    assert r["latency_ms"]["p99"] > 0


_DET = textwrap.dedent("""
    import sys, keras
    inp = keras.Input((4, 4))
    out = keras.layers.Dense(2)(keras.ops.expand_dims(keras.ops.linalg.det(inp), -1))
    keras.Model(inp, out).save(sys.argv[1])
""")


@pytest.mark.slow
def test_conversion_failure_names_the_rejected_op(tmp_path):
    path = tmp_path / "det.keras"
    subprocess.run(
        [sys.executable, "-c", _DET, str(path)],
        check=True,
        capture_output=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    with pytest.raises(
        RunnerError,
        match=r"TFLite conversion \(quantization none\) of model .*det.keras failed: "
        r"the converter rejected op\(s\) tf.MatrixDeterminant",
    ):
        _tflite(tmp_path, path, "none")


@pytest.mark.slow
def test_tflite_options_that_do_not_apply_are_refused(model_files, tmp_path):
    with pytest.raises(RunnerError, match="mode tflite times the TFLite interpreter: precision mixed_bfloat16"):
        _tflite(tmp_path, model_files["tiny"], "none", precision="mixed_bfloat16")


@pytest.mark.slow
def test_pipeline_stores_a_tflite_run_without_a_profile(home, model_store):
    case = Case(
        model="tiny",
        version="1",
        batch_size=4,
        measured_steps=10,
        warmup_max_steps=12,
        mode="tflite",
        quantization="int8",
        telemetry_interval_ms=10,
    )
    assert case.name == "tflite-bs4-int8"
    bundle = run_case(RunContext(dag_id="t", dag_run_id="lite", trigger="test", case=case)).to_xcom()
    assert bundle["parsed"]["avg_step_time_ms"] is None and bundle["parsed"]["findings"][0].startswith("no_profile")
    with session_scope(Settings.from_env().database_url) as s:
        run = s.scalar(select(Run))
        assert (run.status, run.case_name) == ("success", "tflite-bs4-int8")
        assert run.median_step_ms > 0 and run.profile_overhead_ratio is None and run.profiler_avg_step_ms is None
        tables = {t.tool: t.data for t in s.scalars(select(RunTable))}
        assert tables["tflite"]["quantization"] == "int8" and tables["tflite"]["size_bytes_after"] > 0
        assert tables["tflite"]["label"].startswith("int8: int8 weights and activations, float32 I/O")
        assert tables["tflite"]["tflite_path"] == "tflite/model.tflite"  # kept in the run's archive dir
        (kept,) = s.scalars(select(Artifact).where(Artifact.kind == "tflite")).all()
        assert kept.size_bytes == tables["tflite"]["size_bytes_after"] and os.path.isfile(kept.uri)
        assert tables["parse"]["profile_absent_reason"] == PROFILE_ABSENT_REASON
        assert tables["telemetry"]["devices"]["host"]["memory_peak_bytes"] > 0
        assert (
            s.scalar(
                select(StepSample.step).where(StepSample.phase == "measured").order_by(StepSample.step.desc()).limit(1)
            )
            == 9
        )
        assert s.scalars(select(StepSample).where(StepSample.phase == "profiled")).all() == []
        assert s.scalars(select(TelemetrySample)).first() is not None
        assert s.scalars(select(Artifact).where(Artifact.kind == "xplane")).all() == []


def test_rejected_ops_from_converter_messages():
    msg = (
        "error: 'tf.MatrixDeterminant' op is neither a custom op nor a flex op\n"
        "see current operation: 'tf.MatrixDeterminant' op ...\n"
        'TF Select ops: Erf\nDetails:\n\ttf.Erf(tensor<?xf32>) -> (tensor<?xf32>) : {device = ""}'
    )
    assert rejected_ops(msg) == ["tf.MatrixDeterminant", "tf.Erf"]
    assert rejected_ops("Could not open file") == []


def test_agreement_of_outputs():
    ref = [[np.array([[0.1, 0.9], [0.8, 0.2]], dtype=np.float32)]]
    lite = [[np.array([[0.2, 0.7], [0.4, 0.6]], dtype=np.float32)]]
    a = agreement(ref, lite)
    assert a["max_abs_diff"] == pytest.approx(0.4) and a["top1_agreement"] == 0.5 and a["examples"] == 2
    reg = agreement([[np.array([[1.0], [2.0]])]], [[np.array([[1.5], [2.0]])]])
    assert reg["top1_agreement"] is None and reg["max_abs_diff"] == pytest.approx(0.5)  # not a classifier
    with pytest.raises(RunnerError, match="differs"):
        agreement([[np.zeros((2, 3))]], [[np.zeros((2, 4))]])


def test_the_cli_line_of_a_tflite_record():
    from tasks.cli.main import tflite_summary

    line = tflite_summary(
        {
            "quantization": "int8",
            "size_bytes_before": 8 * 2**20,
            "size_bytes_after": 2 * 2**20,
            "conversion_s": 4.25,
            "agreement": {"max_abs_diff": 0.0123, "top1_agreement": 0.984},
        }
    )
    assert line == (
        "tflite (int8): size 8.00 MiB -> 2.00 MiB (x0.25), converted in 4.2 s; agreement with TF: "
        "max |diff| 0.0123, top-1 98.4%"
    )
    bare = tflite_summary(
        {
            "quantization": "none",
            "size_bytes_before": 100,
            "size_bytes_after": 90,
            "conversion_s": 1.0,
            "agreement": {"max_abs_diff": None, "top1_agreement": None},
        }
    )
    assert bare.endswith("max |diff| —, top-1 —")
    labelled = tflite_summary(
        {
            "quantization": "int8",
            "label": "int8: int8 weights and activations, float32 I/O",
            "size_bytes_before": 100,
            "size_bytes_after": 30,
            "conversion_s": 1.0,
            "agreement": {"max_abs_diff": 0.01, "top1_agreement": 1.0},
            "num_threads": 2,
            "xnnpack": True,
        }
    )
    assert labelled.startswith("tflite (int8: int8 weights and activations, float32 I/O): size")
    assert labelled.endswith("top-1 100.0%; 2 interpreter thread(s), XNNPACK on")
