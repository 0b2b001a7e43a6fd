"""Precision, XLA and the mirrored strategy in the real runner (fresh processes, a tiny Keras model), and the
all-reduce time the parse stage reads from the profile."""

from __future__ import annotations

import sys

import pytest

from tasks.runner import RunnerError, RunnerSpec, launch
from tasks.runner.execution import CPU_DEVICES_ENV, XLA_CACHE_FLAG, configure_devices, configure_xla_cache
from tasks.stages.parse import parse_profile

pytestmark = pytest.mark.slow


def _profile(tmp_path, model, monkeypatch=None, **kw):
    spec = RunnerSpec(
        mode="profile",
        model_path=str(model),
        out_dir=str(tmp_path / "run"),
        batch_size=8,
        warmup_steps=1,
        measured_steps=6,
        profiled_steps=2,
        **kw,
    )
    return launch(spec, sys.executable, 900).model_dump(mode="json")


def _op_types(profile_dir) -> set[str]:
    return {r["op_type"] for r in parse_profile(profile_dir).op_stats}


def test_bfloat16_with_xla_computes_in_bfloat16_and_runs_compiled(model_files, tmp_path):
    r = _profile(tmp_path, model_files["tiny"], precision="mixed_bfloat16", xla=True)
    ex = r["execution"]
    assert ex["policy"] == "mixed_bfloat16" and ex["xla"] is True and ex["replicas"] == 1
    assert ex["compute_dtypes"] == ["bfloat16"]  # the loaded model was rebuilt: every layer computes in it
    assert ex["optimizer"] == "SGD"
    assert len(r["measured_step_times_ms"]) == 6 and all(t > 0 for t in r["measured_step_times_ms"])
    ops = _op_types(r["profile_dir"])
    # XLA ran the step as one compiled cluster: TF's own conv kernels never ran (they do without XLA, below)
    assert not any("Conv2D" in t for t in ops), ops
    parsed = parse_profile(r["profile_dir"])
    assert parsed.collectives["ms_per_step"] is None and "single-device" in parsed.collectives["absent_reason"]
    # the outputs in bfloat16 under XLA against the fp32 model's, eager, on the same 2 batches (issue 38 item 3)
    agree = r["agreement"]
    assert (agree["reference"], agree["candidate"], agree["examples"]) == ("fp32, eager", "mixed_bfloat16, XLA", 16)
    assert 0 < agree["max_abs_diff"] < 0.5 and 0 < agree["max_rel_diff"] < 0.2, agree
    assert "agreement" in r["phases_s"]


def test_mirrored_float16_over_two_logical_cpus(model_files, tmp_path, monkeypatch):
    monkeypatch.setenv(CPU_DEVICES_ENV, "2")
    r = _profile(tmp_path, model_files["tiny"], precision="mixed_float16", strategy="mirrored")
    ex = r["execution"]
    assert ex["replicas"] == 2 and ex["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert ex["compute_dtypes"] == ["float16"] and ex["optimizer"] == "LossScaleOptimizer"
    assert all(t > 0 for t in r["measured_step_times_ms"])
    assert any("Conv2D" in t for t in _op_types(r["profile_dir"]))  # no XLA: TF's kernels ran
    col = parse_profile(r["profile_dir"]).collectives
    assert col["ms_per_step"] > 0 and any(op.startswith("Collective") for op in col["ops"])
    assert col["source"].startswith("framework_op_stats") and col["absent_reason"] is None


def test_xla_with_mirrored_over_two_devices_is_refused(model_files, tmp_path, monkeypatch):
    monkeypatch.setenv(CPU_DEVICES_ENV, "2")
    with pytest.raises(RunnerError, match="xla with strategy mirrored over 2 devices .* not supported"):
        _profile(tmp_path, model_files["tiny"], xla=True, strategy="mirrored")


def test_savedmodel_refuses_mixed_precision(model_files, tmp_path):
    from tests.helpers.models import make_model

    sm = make_model("tiny", tmp_path / "sm")
    with pytest.raises(RunnerError, match="precision mixed_bfloat16 needs a Keras model"):
        _profile(tmp_path, sm, precision="mixed_bfloat16", case_mode="infer")


def test_logical_cpu_setting_is_checked_before_tensorflow():
    assert configure_devices({}) is None
    assert configure_devices({CPU_DEVICES_ENV: " "}) is None
    for bad in ("zero", "0", "-2", "1.5"):
        with pytest.raises(RunnerError, match=f"{CPU_DEVICES_ENV}=.*expected a whole number"):
            configure_devices({CPU_DEVICES_ENV: bad})


def test_xla_cache_flag_is_added_to_the_users_flags_and_never_replaces_their_cache(tmp_path):
    env = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
    assert configure_xla_cache(str(tmp_path / "c"), env) == str(tmp_path / "c")
    assert env["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=2 {XLA_CACHE_FLAG}={tmp_path / 'c'}"
    assert (tmp_path / "c").is_dir()
    own = {"TF_XLA_FLAGS": f"{XLA_CACHE_FLAG}=/theirs"}
    assert configure_xla_cache(str(tmp_path / "d"), own) is None
    assert own["TF_XLA_FLAGS"] == f"{XLA_CACHE_FLAG}=/theirs" and not (tmp_path / "d").exists()
    none: dict[str, str] = {}
    assert configure_xla_cache(None, none) is None and none == {}


def test_the_profiled_run_loads_what_the_warm_up_compiled(model_files, tmp_path):
    """An xla case's warm-up process fills the case's compilation cache; the profiled run's process loads the
    executables from it instead of compiling and writing them again (their files are left untouched)."""
    cache = tmp_path / "xla_cache"
    warm = RunnerSpec(
        mode="warmup",
        model_path=str(model_files["tiny"]),
        out_dir=str(tmp_path / "warmup"),
        batch_size=8,
        xla=True,
        xla_cache_dir=str(cache),
        warmup_window=3,
        warmup_max_steps=6,
    )
    w = launch(warm, sys.executable, 900).model_dump(mode="json")
    entries = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert entries and w["xla_cache"] == {"dir": str(cache), "entries_before": 0, "entries_after": len(entries)}
    r = _profile(tmp_path, model_files["tiny"], xla=True, xla_cache_dir=str(cache))
    assert r["xla_cache"]["entries_before"] == len(entries)
    after = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert {k: after.get(k) for k in entries} == entries  # loaded, not compiled again
    # and one executable more: the agreement check's forward pass under XLA (tasks.runner.agreement), after the steps
    assert len(set(after) - set(entries)) == 1 and r["agreement"]["candidate"] == "fp32, XLA"
    assert len(r["measured_step_times_ms"]) == 6 and all(t > 0 for t in r["measured_step_times_ms"])


_TRANSFORMER = """
import json, sys
import keras
from keras import layers, ops
from tasks.runner import measure
from tasks.runner.spec import RunnerSpec

keras.utils.set_random_seed(0)
tokens = keras.Input((8, 16), name="tokens")  # a standard Transformer encoder block, tiny
x = layers.LayerNormalization()(tokens + layers.MultiHeadAttention(num_heads=2, key_dim=8)(tokens, tokens))
x = layers.LayerNormalization()(x + layers.Dense(16)(layers.Dense(32, activation="relu")(x)))
out = layers.Dense(4)(ops.mean(x, axis=1))  # a keras.ops node besides the merges
path = sys.argv[1] + "/encoder.keras"
keras.Model(tokens, out).save(path)
got = {}
for precision in ("mixed_bfloat16", "mixed_float16"):
    spec = RunnerSpec(mode="warmup", model_path=path, out_dir=sys.argv[1], batch_size=4, precision=precision)
    step = measure.build_step(spec)
    times = [step() for _ in range(2)]
    got[precision] = {**step.extra["execution"], "times": times}
got["threads"] = measure.thread_record()
print("RESULT " + json.dumps(got))
"""


def test_a_transformer_encoder_is_rebuilt_and_trains_in_mixed_precision(tmp_path):
    """Residual ``x + attention(x)`` (a keras.ops Add node), MultiHeadAttention and LayerNormalization: the
    rebuild failed with "Error when deserializing class 'Add' ... 'dtype': 'mixed_bfloat16'" (issue 26)."""
    import json
    import os
    import subprocess

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, "-c", _TRANSFORMER, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(next(line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")))
    bf16, fp16 = got["mixed_bfloat16"], got["mixed_float16"]
    assert "bfloat16" in bf16["compute_dtypes"] and "float16" in fp16["compute_dtypes"]
    assert fp16["optimizer"] == "LossScaleOptimizer" and bf16["optimizer"] == "SGD"
    assert all(t > 0 for t in bf16["times"] + fp16["times"])
    threads = got["threads"]  # TF's thread pools as TF reports them (0: its default) and the CPU set
    assert threads["tf_intra_op_reported"] == threads["tf_intra_op_configured"] == 0
    assert threads["cpu_count_usable"] >= 1 and threads["tf_default_threads"] >= 1
