"""Cases the hardware cannot run as they say (issue 26): mixed precision without the type in hardware and
mirrored with one replica, flagged at plan time and in the run's findings, and refused by the runner."""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path

import pytest

from tasks.analysis.hardware import case_findings, mirrored_replicas, missing_precision
from tasks.records import Case, EnvRecord, RunContext, RunState
from tasks.runner.execution import check_mirrored_devices
from tasks.runner.spec import RunnerError
from tasks.settings import Settings
from tasks.stages.pipeline import plan_cases, run_stage, warn_hardware
from tasks.store import migrate
from tests.helpers.builders import BASELINE_FINGERPRINT, make_records

XPLANE = Path(__file__).parents[2] / "data" / "tiny_train_3steps.xplane.pb"
NO_FLAGS = dict.fromkeys(("avx512_fp16", "avx512_bf16", "amx_bf16", "amx_fp16", "amx_tile", "asimdhp", "bf16"), False)


def cpu_host(**flags: bool) -> dict:
    """A CPU-only fingerprint (no NVML) whose CPU has ``flags`` of tasks.runner.cpus.PRECISION_FLAGS."""
    return {
        "gpu": {"nvml": "absent", "count": 0, "devices": []},
        "host": {"cpu_model": "Intel(R) Xeon(R) CPU E5-2680 v4", "cpu_precision_flags": {**NO_FLAGS, **flags}},
        "env_vars": {"PERFWATCH_CPU_LOGICAL_DEVICES": "absent"},
    }


def gpu_host(capability: str) -> dict:
    data = copy.deepcopy(BASELINE_FINGERPRINT)
    data["gpu"]["devices"][0]["compute_capability"] = capability
    data["gpu"]["devices"][0]["name"] = "Tesla T4" if capability == "7.5" else "A100"
    return data


def test_mixed_precision_needs_the_type_in_hardware():
    assert "none of avx512_bf16, amx_bf16, bf16" in missing_precision(cpu_host(), "mixed_bfloat16")
    assert "no float16 instructions" in missing_precision(cpu_host(avx512_bf16=True), "mixed_float16")
    assert missing_precision(cpu_host(amx_bf16=True), "mixed_bfloat16") is None
    assert missing_precision(cpu_host(avx512_fp16=True), "mixed_float16") is None
    assert missing_precision(cpu_host(), "fp32") is None
    assert missing_precision({"host": {"cpu_model": "x"}}, "mixed_bfloat16") is None  # no flags recorded: unknown
    # on a GPU host the GPU decides: tensor cores do float16 from 7.0, bfloat16 from 8.0
    t4 = gpu_host("7.5")
    assert missing_precision(t4, "mixed_float16") is None
    assert missing_precision(t4, "mixed_bfloat16") == (
        "GPU 0 'Tesla T4' has compute capability 7.5; bfloat16 tensor cores need 8.0"
    )
    assert missing_precision(gpu_host("8.0"), "mixed_bfloat16") is None


def test_replicas_of_a_mirrored_case():
    assert mirrored_replicas(cpu_host()) == 1
    two = cpu_host()
    two["env_vars"]["PERFWATCH_CPU_LOGICAL_DEVICES"] = "2"
    assert mirrored_replicas(two) == 2 and not case_findings("fp32", "mirrored", two)
    assert mirrored_replicas(gpu_host("8.0")) == 1
    assert mirrored_replicas({"gpu": {"count": "unknown: NVMLError_Unknown"}}) is None
    (f,) = case_findings("fp32", "mirrored", cpu_host())
    assert f.code == "mirrored_one_replica" and "PERFWATCH_CPU_LOGICAL_DEVICES=N" in f.message
    assert [f.code for f in case_findings("mixed_bfloat16", "none", cpu_host())] == ["precision_without_hardware"]


def test_the_runner_refuses_mirrored_over_one_device():
    with pytest.raises(RunnerError, match=r"strategy mirrored found 1 device \(/device:CPU:0\).*not mirrored"):
        check_mirrored_devices(["/device:CPU:0"])
    check_mirrored_devices(["/device:CPU:0", "/device:CPU:1"])


def test_plan_time_warns_by_case_name(home, tmp_path, monkeypatch, caplog):
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(
        "models:\n  - model: effnet\n    matrix:\n      precision: [fp32, mixed_bfloat16]\n"
        "  - model: resnet\n    strategy: mirrored\n"
    )
    settings = Settings.from_env({"PERFWATCH_HOME": str(home), "PERFWATCH_CONFIG": str(cfg)})
    monkeypatch.delenv("PERFWATCH_PROFILE_QUEUE", raising=False)
    monkeypatch.setattr("tasks.runner.probe.hardware", cpu_host)  # this host's hardware: no bf16, no GPU
    with caplog.at_level(logging.WARNING, logger="tasks.stages.pipeline"):
        plan_cases("dag", "scheduled__1", "scheduled", {}, settings)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert warned[0].startswith("plan: effnet train-bs16-mixed_bfloat16: precision_without_hardware: mixed_bfloat16")
    assert warned[1].startswith("plan: resnet train-bs16-mirrored: mirrored_one_replica")
    assert warn_hardware([Case(model="m", precision="mixed_bfloat16")], cpu_host(avx512_bf16=True)) == []


def test_the_runs_findings_name_precision_without_hardware(home, tmp_path):
    """EfficientNetB0 in bf16 ran 1.6-2.7x slower than fp32 on a CPU without bf16, and no finding said why."""
    settings = Settings.from_env({"PERFWATCH_HOME": str(home)})
    migrate(settings.database_url)
    _, _, _, _, run, _, _ = make_records(tmp_path)
    prof = Path(run.profile_dir) / "plugins" / "profile" / "2026_01_01"
    (prof / "host.xplane.pb").unlink()
    shutil.copy(XPLANE, prof / "host.xplane.pb")
    samples = json.loads(Path(run.samples_path).read_text())
    Path(run.samples_path).write_text(
        json.dumps({**samples, "measured_step_times_ms": [1.0] * 10, "profiled_step_times_ms": [1.0] * 3})
    )
    ctx = RunContext(dag_id="d", dag_run_id="r1", case=Case(model="m", precision="mixed_bfloat16"))
    env = EnvRecord(fingerprint_id="f" * 64, comparability_key="k", data=cpu_host())
    out = run_stage(RunState(ctx=ctx, env=env, run=run), "parse", settings).parsed
    assert out is not None
    (flag,) = [f for f in out.findings if f.startswith("precision_without_hardware")]
    assert "Intel(R) Xeon(R) CPU E5-2680 v4" in flag and "float32" in flag
    stored = json.loads(Path(out.parsed_path).read_text())["findings"]
    assert any(f["code"] == "precision_without_hardware" and f["severity"] == "warning" for f in stored)
