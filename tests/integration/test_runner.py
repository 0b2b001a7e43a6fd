"""The runner in fresh processes, on tiny real Keras models: warm-up, profiled run, and failures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tasks.records import Case
from tasks.runner import RunnerError, RunnerSpec, launch
from tasks.stages.profiled_run import profiled_run
from tasks.stages.pull import pull_model_version
from tasks.stages.warmup import warm_up

pytestmark = pytest.mark.slow


def test_warmup_then_profiled_run(model_store, tmp_path):
    case = Case(model="tiny", version="1", batch_size=4, measured_steps=8, profiled_steps=3, warmup_max_steps=20)
    pulled = pull_model_version(str(model_store), "tiny", "1", tmp_path)
    warm = warm_up(pulled, case, tmp_path, sys.executable)
    assert warm.cold_step_ms > 0 and 0 <= warm.warmup_steps <= 20
    assert len(warm.step_times_ms) <= 20 and all(t > 0 for t in warm.step_times_ms)
    run = profiled_run(pulled, case, warm, tmp_path, sys.executable)
    samples = json.loads(Path(run.samples_path).read_text())
    assert len(samples["measured_step_times_ms"]) == 8
    assert len(samples["profiled_step_times_ms"]) == 3
    assert len(samples["warmup_step_times_ms"]) == warm.warmup_steps
    # the process's CPU time around every warm-up and measured step; the wait where schedstat is there
    assert len(samples["measured_cpu_ms"]) == 8 and all(c >= 0 for c in samples["measured_cpu_ms"])
    assert len(samples["warmup_cpu_ms"]) == warm.warmup_steps
    assert len(samples["measured_wait_ms"]) == (8 if Path("/proc/self/task").is_dir() else 0)
    wait = samples["threads"]["wait"]  # how far the wait can be trusted: read or not, threads that ended mid-step
    if samples["measured_wait_ms"]:
        assert wait["unavailable"] is None and wait["threads_read"] >= 8 + warm.warmup_steps
        assert 0 <= wait["threads_lost"] <= wait["threads_read"]
    else:
        assert wait["unavailable"]
    assert run.median_step_ms > 0
    assert run.throughput_eps == pytest.approx(4 / (run.median_step_ms / 1000))
    assert run.peak_rss_bytes > 50 * 2**20  # TensorFlow alone is bigger than that
    assert run.peak_device_bytes is None  # CPU machine
    assert len(list(Path(run.profile_dir).glob("plugins/profile/*/*.xplane.pb"))) == 1


def test_training_step_failure_names_the_model(model_store, tmp_path):
    case = Case(model="broken", version="1", batch_size=2, measured_steps=5, warmup_max_steps=10)
    pulled = pull_model_version(str(model_store), "broken", "1", tmp_path)
    with pytest.raises(RunnerError, match=r"training step failed for model .*model.*InvalidArgumentError"):
        warm_up(pulled, case, tmp_path, sys.executable)


def test_missing_model_and_bad_interpreter(tmp_path):
    spec = RunnerSpec(mode="warmup", model_path=str(tmp_path / "nothing"), out_dir=str(tmp_path / "o"), batch_size=1)
    with pytest.raises(RunnerError, match="no model at .*nothing"):
        launch(spec, sys.executable)
    with pytest.raises(RunnerError, match="cannot start runner interpreter"):
        launch(spec, str(tmp_path / "no-python"))


def test_an_xla_step_fed_new_shapes_records_every_batch_and_flags_the_compiles(model_store, tmp_path):
    """Issue 26: XLA with an input whose shape changes recompiled on every measured step with no finding, and
    only the first batch's shape was checked, so partial batches passed and the throughput was overstated (the
    refusal of partial batches a case does not allow: tests/unit/runner/test_fed.py)."""
    from tasks.records import WarmupRecord

    case = Case(
        model="tiny",
        version="1",
        batch_size=32,
        measured_steps=5,
        profiled_steps=1,
        xla=True,
        input_fn="tests.helpers.pipelines:shrinking_batches",
        allow_partial_batches=True,
    )
    pulled = pull_model_version(str(model_store), "tiny", "1", tmp_path)
    warm = WarmupRecord(warmup_steps=2, steady=False, final_cv=0.31, cold_step_ms=1.0, step_times_ms=[1.0], wall_s=0)
    run = profiled_run(pulled, case, warm, tmp_path, sys.executable, timeout_s=300)
    fed = json.loads(Path(run.samples_path).read_text())["fed"]
    # every batch recorded, phase by phase: 32 examples, then 31, 30, ... (batch_size - i)
    assert [d["examples"] for p in ("cold", "warmup", "measured", "profiled") for d in fed[p]["distinct"]] == list(
        range(32, 23, -1)
    )
    assert fed["measured"]["compiled_steps"] == [0, 1, 2, 3, 4] and fed["measured"]["examples"] == 135
    codes = [f["code"] for f in run.findings]
    assert set(codes) >= {"recompiled_timed_steps", "batch_shapes_vary", "partial_batches", "warmup_not_steady"}
    first = run.findings[codes.index("recompiled_timed_steps")]
    assert first["figure"] == "fed.measured.compiled_steps" and first["value"] == 5
    assert "5 of 5 measured steps compiled (steps 0, 1, 2, 3, 4;" in first["message"]
    assert run.throughput_eps == pytest.approx(27 / (run.median_step_ms / 1000))  # the examples fed, not 32


def test_a_gpu_case_under_a_tensorflow_built_without_cuda_names_the_build(tmp_path):
    """Issue 39: the runner refused a gpu case with "TF sees [CPU]" only. This machine's TensorFlow is the real
    tensorflow-cpu wheel: the refusal now says it is a build without CUDA and how to get one."""
    import subprocess

    code = (
        "from tasks.runner import devices\n"
        "try:\n    devices.select('gpu', 'm train-bs16-gpu')\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("RunnerError case m train-bs16-gpu asks for device gpu; this host has none visible")
    assert "is a build without CUDA (tf.test.is_built_with_cuda() is False" in got.stdout
    assert "tensorflow[and-cuda]" in got.stdout
