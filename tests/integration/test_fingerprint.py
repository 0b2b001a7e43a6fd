"""Tests for the env-fingerprint stage (tasks.runner.probe, tasks.analysis.environment).

NVML is faked at the pynvml boundary; the real code runs CPU-only."""

from __future__ import annotations

import copy
import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from tasks.analysis import environment as envm
from tasks.runner import probe
from tasks.stages import fingerprint as fpm
from tests.helpers import ROOT as REPO
from tests.helpers.fakes import H100, FakeNVML

A100 = {
    **H100,
    "name": "NVIDIA A100-SXM4-40GB",
    "uuid": "GPU-bbbb-2222",
    "mem": 42_949_672_960,
    "cc": (8, 0),
    "power": 400_000,
}


def gpu(mp, devices, **kw) -> tuple[dict, FakeNVML]:
    fake = FakeNVML(devices, **kw).install(mp)
    return fpm.take_fingerprint(include_tensorflow=False).data["gpu"], fake


def test_one_gpu_all_fields_and_shutdown(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    g, fake = gpu(monkeypatch, [H100])
    assert (g["nvml"], g["driver_version"], g["cuda_driver_version"], g["count"]) == ("ok", "550.54.15", "12.4", 1)
    assert g["devices"] == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-aaaa-1111",
            "memory_total_bytes": 85_899_345_920,
            "compute_capability": "9.0",
            "power_limit_mw": 700_000,
            "applications_clock_mhz": {"sm": 1980, "mem": 2619},
            "max_clock_mhz": {"sm": 1980, "mem": 2619},
            "ecc_mode": {"current": "enabled", "pending": "enabled"},
            "persistence_mode": "enabled",
            "mig_mode": {"current": "disabled", "pending": "disabled"},
            "mig_devices": [],
        }
    ]
    assert fake.shutdowns == 1


def test_two_different_gpus_are_both_comparability(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeNVML([H100, A100]).install(monkeypatch)
    fields = envm.comparability_fields(fpm.take_fingerprint(include_tensorflow=False).data)
    assert fields["gpu.count"] == 2
    assert (fields["gpu.devices.0.name"], fields["gpu.devices.1.name"]) == (H100["name"], A100["name"])
    assert fields["gpu.devices.1.compute_capability"] == "8.0"
    assert not any(k.endswith((".uuid", "clock_mhz.sm", ".power_limit_mw")) for k in fields)


def test_mig_enabled_lists_slices_and_skips_empty_slots(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    slices = [
        {"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": "MIG-1", "mem": 20 << 30},
        None,
        {"name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "uuid": "MIG-2", "mem": 5 << 30},
    ]
    g, _ = gpu(monkeypatch, [{**A100, "mig": [1, 1], "migs": slices}])
    dev = g["devices"][0]
    assert dev["mig_mode"] == {"current": "enabled", "pending": "enabled"}
    assert [m["name"] for m in dev["mig_devices"]] == [slices[0]["name"], slices[2]["name"]]
    fields = envm.comparability_fields({"gpu": g})
    assert fields["gpu.devices.0.mig_devices.1.name"].endswith("1g.5gb")
    assert "gpu.devices.0.mig_devices.1.uuid" not in fields


def test_nvml_error_on_one_field_is_recorded_not_raised(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    g, fake = gpu(
        monkeypatch,
        [H100],
        errors={
            "nvmlDeviceGetPowerManagementLimit": pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN),
            "nvmlDeviceGetMigMode": pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED),
            "nvmlSystemGetCudaDriverVersion_v2": pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
        },
    )
    assert g["cuda_driver_version"] == "11.8"  # fell back to the v1 entry point
    dev = g["devices"][0]
    assert dev["power_limit_mw"] == "unknown: NVMLError_Unknown: Unknown Error"
    assert dev["mig_mode"] == {"current": "not supported", "pending": "not supported"}
    assert dev["name"] == H100["name"] and dev["compute_capability"] == "9.0"
    assert fake.shutdowns == 1


def test_handle_error_keeps_device_entry(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    g, fake = gpu(
        monkeypatch, [H100], errors={"nvmlDeviceGetHandleByIndex": pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)}
    )
    dev = g["devices"][0]
    assert g["count"] == 1 and dev["index"] == 0
    assert dev["name"] == dev["ecc_mode"]["current"] == "unknown: NVMLError_GpuIsLost: GPU is lost"
    assert fake.shutdowns == 1


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded])
def test_no_nvml_library_or_driver_is_absent(monkeypatch, error):
    g, fake = gpu(monkeypatch, [H100], init_error=error())
    assert g == {
        "nvml": "absent",
        "driver_version": "absent",
        "cuda_driver_version": "absent",
        "count": 0,
        "physical_count": 0,
        "devices": [],
    }
    assert fake.shutdowns == 0


def test_other_init_error_is_unknown(monkeypatch):
    g, _ = gpu(monkeypatch, [H100], init_error=pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION))
    assert g["nvml"] == "unknown: NVMLError_NoPermission: Insufficient Permissions"


def test_nvml_without_gpus(monkeypatch):
    g, fake = gpu(monkeypatch, [])
    assert (g["nvml"], g["driver_version"], g["count"], g["devices"]) == ("ok", "550.54.15", 0, [])
    assert fake.shutdowns == 1


@pytest.mark.parametrize(
    "spec, names",
    [
        ("1", [A100["name"]]),
        ("GPU-bbbb", [A100["name"]]),
        ("1,0", [A100["name"], H100["name"]]),
        ("0,7,1", [H100["name"]]),
        ("", []),
        ("-1", []),
        ("MIG-abc", []),  # no such MIG instance: CUDA sees no GPU
        ("MIG-c1", [A100["name"]]),  # a MIG instance is read on its GPU
    ],
)
def test_cuda_visible_devices_selects_gpus(monkeypatch, spec, names):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # ordinals over two GPU models need it
    slices = [{"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": "MIG-c1d2", "mem": 20 << 30}]
    g, _ = gpu(monkeypatch, [H100, {**A100, "mig": [1, 1], "migs": slices}])
    assert [d["name"] for d in g["devices"]] == names
    assert (g["count"], g["physical_count"]) == (len(names), 2)


def test_ordinals_over_two_gpu_models_in_fastest_first_order_are_unknown(monkeypatch):
    """Issue 39: ordinals were read as NVML's (PCI) order, which CUDA's default FASTEST_FIRST order is not over
    different GPUs; which GPUs the run has is unknown then, and the record says how to make it known."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    g, _ = gpu(monkeypatch, [H100, A100])
    assert g["count"].startswith("unknown: ") and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in g["count"]
    assert g["devices"] == [] and g["physical_count"] == 2


def test_real_machine_cpu_only():
    """The real code on this machine: every section present (``tpu`` too), GPU absent where there is no NVML."""
    fp = fpm.take_fingerprint(include_tensorflow=False)
    data = json.loads(json.dumps(fp.data))  # JSON-serialisable
    assert set(data) == {"tensorflow", "gpu", "tpu", "host", "packages", "env_vars", "threads", "recorded"}
    assert set(data["tpu"]) == {"chips", "versions", "device_nodes", "count"}  # TPUs read without TF or libtpu
    assert data["tensorflow"]["version"].startswith("unknown: not collected")
    assert data["packages"]["numpy"] != "absent" and len(data["packages"]["installed_sha256"]) == 64
    assert isinstance(data["host"]["cpu_count_logical"], int) and data["host"]["memory_total_bytes"] > 0
    assert all(v is not None for v in envm.flatten(data).values())
    assert len(fp.fingerprint_id) == 64 and len(fp.comparability_key) == 16
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        assert data["gpu"]["nvml"] == data["gpu"]["driver_version"] == "absent"
    else:
        pytest.skip("NVML present on this machine")


def test_module_import_does_not_import_tensorflow():
    code = "import sys, tasks.stages.fingerprint, tasks.runner.probe; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_tensorflow_not_importable_is_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    tf = fpm.take_fingerprint().data["tensorflow"]
    assert set(envm.flatten(tf).values()) == {"absent"}
    assert "tensorflow.build.cuda_version" in envm.flatten({"tensorflow": tf})


def fake_tf_package(
    root: Path,
    *,
    setup: str | None = "_VERSION = '9.9.9-rc0'\n",
    build_info: str | None = "import collections\nbuild_info = collections.OrderedDict("
    "[('cuda_version', '12.5'), ('is_cuda_build', True)])\n",
) -> Path:
    """A ``tensorflow`` package dir with the two text files the probe reads (no extension modules)."""
    pkg = root / "tensorflow"
    (pkg / "tools" / "pip_package").mkdir(parents=True)
    (pkg / "python" / "platform").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('the probe must not import tensorflow')\n")
    if setup is not None:
        (pkg / "tools" / "pip_package" / "setup.py").write_text(setup)
    if build_info is not None:
        (pkg / "python" / "platform" / "build_info.py").write_text(build_info)
    return pkg


def test_tensorflow_facts_read_from_package_files_failures_isolated(monkeypatch, tmp_path):
    """Version and build info come from the package's text files (never executed); a missing extension
    module makes only its own fields unknown."""
    fake_tf_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    tf = fpm.take_fingerprint().data["tensorflow"]
    assert tf["version"] == "9.9.9-rc0" and tf["xla_jit"] == "off"
    assert tf["onednn_enabled"].startswith("unknown: FileNotFoundError: no extension module")
    assert tf["op_determinism"].startswith("unknown: FileNotFoundError")
    assert tf["build"] == {
        "cuda_version": "12.5",
        "cudnn_version": "absent",
        "is_cuda_build": True,
        "is_rocm_build": "absent",
        "is_tensorrt_build": "absent",
    }
    assert "tensorflow" not in sys.modules


def test_tensorflow_unreadable_files_are_unknown(monkeypatch, tmp_path):
    fake_tf_package(tmp_path, setup="print('no version here')\n", build_info=None)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    tf = fpm.take_fingerprint().data["tensorflow"]
    assert tf["version"].startswith("unknown: LookupError: no literal assignment to _VERSION")
    assert set(tf["build"].values()) == {tf["build"]["cuda_version"]}
    assert tf["build"]["cuda_version"].startswith("unknown: FileNotFoundError")


def test_collect_reads_tensorflow_without_importing_it():
    """The real package: the TF facts are read, yet ``import tensorflow`` never ran in the probe."""
    code = (
        "import json, sys; from tasks.runner import probe; tf = probe.collect()['tensorflow']; "
        "print(json.dumps([tf, 'tensorflow' in sys.modules, 'keras' in sys.modules]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    tf, imported_tf, imported_keras = json.loads(proc.stdout.splitlines()[-1])
    assert not imported_tf and not imported_keras
    assert isinstance(tf["onednn_enabled"], bool) and isinstance(tf["built_with_xla"], bool)
    assert tf["version"][0].isdigit() and isinstance(tf["build"]["is_cuda_build"], bool)


def test_cpu_governor(monkeypatch, tmp_path):
    monkeypatch.setattr(probe, "_GOVERNOR_FILE", tmp_path / "missing")
    assert probe._host_section()["cpu_governor"] == "absent"
    (tmp_path / "gov").write_text("performance\n")
    monkeypatch.setattr(probe, "_GOVERNOR_FILE", tmp_path / "gov")
    assert probe._host_section()["cpu_governor"] == "performance"
    monkeypatch.setattr(probe, "_GOVERNOR_FILE", tmp_path)  # a directory: read fails
    assert probe._host_section()["cpu_governor"].startswith("unknown: IsADirectoryError")


def test_env_vars_and_image_digest(monkeypatch):
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    monkeypatch.setenv("TF_VAR_db_password", "hunter2")
    monkeypatch.setenv("TF_TOKEN_app_terraform_io", "secret")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("PERFWATCH_IMAGE_DIGEST", "sha256:abc")
    data = fpm.take_fingerprint(include_tensorflow=False).data
    env = data["env_vars"]
    assert env["TF_GPU_ALLOCATOR"] == "cuda_malloc_async" and env["XLA_FLAGS"] == "absent"
    assert not any(k.startswith(("TF_VAR_", "TF_TOKEN_")) for k in env)
    assert data["host"]["image_digest"] == "sha256:abc"


@pytest.fixture
def record(monkeypatch) -> dict:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeNVML([H100]).install(monkeypatch)
    return fpm.take_fingerprint(include_tensorflow=False).data


def changed(data: dict, path: str, value) -> dict:
    out = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[last] = value
    return out


def test_hashes_ignore_recorded_and_non_comparability(record):
    base = envm.Fingerprint.from_data(record)
    other_host = envm.Fingerprint.from_data(changed(record, "recorded.hostname", "elsewhere"))
    assert (other_host.fingerprint_id, other_host.comparability_key) == (base.fingerprint_id, base.comparability_key)
    swapped = envm.Fingerprint.from_data(changed(record, "gpu.devices.0.uuid", "GPU-new-card"))
    assert swapped.comparability_key == base.comparability_key and swapped.fingerprint_id != base.fingerprint_id
    for path, value in [
        ("gpu.devices.0.name", "NVIDIA H200"),
        ("gpu.driver_version", "560.1"),
        ("packages.numpy", "1.0.0"),
        ("env_vars.XLA_FLAGS", "--xla_gpu_autotune_level=0"),
    ]:
        assert envm.Fingerprint.from_data(changed(record, path, value)).comparability_key != base.comparability_key


def test_comparability_fields_fill_missing_paths():
    fields = envm.comparability_fields({"gpu": {"count": 0, "devices": []}})
    assert fields["gpu.count"] == 0 and fields["tensorflow.version"] == "absent"
    assert not any("*" in k for k in fields)


def test_diff_fingerprints(record):
    new = changed(
        changed(changed(record, "gpu.devices.0.uuid", "GPU-x"), "gpu.driver_version", "560.1"),
        "recorded.hostname",
        "elsewhere",
    )
    new["gpu"]["devices"].append(copy.deepcopy(new["gpu"]["devices"][0]))
    changes = {c.field: c for c in envm.diff_fingerprints(record, envm.Fingerprint.from_data(new))}
    assert (changes["gpu.driver_version"].old, changes["gpu.driver_version"].new) == ("550.54.15", "560.1")
    assert changes["gpu.driver_version"].affects_comparability
    assert changes["gpu.devices.0.uuid"].new == "GPU-x" and not changes["gpu.devices.0.uuid"].affects_comparability
    assert changes["gpu.devices.1.name"].old == "absent" and changes["gpu.devices.1.name"].affects_comparability
    assert "recorded.hostname" not in changes
    assert any(c.field == "recorded.hostname" for c in envm.diff_fingerprints(record, new, include_recorded=True))
    assert envm.diff_fingerprints(record, copy.deepcopy(record)) == []


def test_take_fingerprint_in_parses_child(tmp_path, monkeypatch):
    shim = tmp_path / "python"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.chdir(tmp_path)  # tasks must be found through PYTHONPATH, not the cwd
    fp = fpm.take_fingerprint_in(str(shim), timeout_s=60, include_tensorflow=False)
    assert fp.data["tensorflow"]["version"].startswith("unknown: not collected")
    assert fp == envm.Fingerprint.from_data(fp.data)


@pytest.mark.parametrize(
    "script, match",
    [
        ("echo 'boom: bad venv' >&2; exit 3", "boom: bad venv"),
        ("exec sleep 5", "timed out"),
        ("echo not-json", "exited 0 without a result"),
    ],
)
def test_take_fingerprint_in_failures(tmp_path, script, match):
    shim = tmp_path / "python"
    shim.write_text(f"#!/bin/sh\n{script}\n")
    shim.chmod(0o755)
    with pytest.raises(RuntimeError, match=match) as err:
        fpm.take_fingerprint_in(str(shim), timeout_s=1)
    assert str(shim) in str(err.value)


def test_take_fingerprint_in_missing_interpreter(tmp_path):
    with pytest.raises(RuntimeError, match="no-such-python"):
        fpm.take_fingerprint_in(str(tmp_path / "no-such-python"))


@pytest.mark.slow
def test_take_fingerprint_in_real_tensorflow():
    fp = fpm.take_fingerprint_in(sys.executable)
    tf, pkgs = fp.data["tensorflow"], fp.data["packages"]
    assert tf["version"] in (pkgs["tensorflow"], pkgs["tensorflow-cpu"])
    assert isinstance(tf["built_with_xla"], bool) and isinstance(tf["build"]["is_cuda_build"], bool)
    assert isinstance(tf["onednn_enabled"], bool) and isinstance(tf["tensor_float_32"], bool)


_AS_IMPORTED = """
import json
from tasks.runner import probe
import tensorflow as tf
from tensorflow.python.framework import config
from tensorflow.python.util import _pywrap_util_port
imported = {"version": tf.__version__, "built_with_xla": tf.test.is_built_with_xla(),
            "xla_jit": tf.config.optimizer.get_jit() or "off", "onednn_enabled": _pywrap_util_port.IsMklEnabled(),
            "op_determinism": config.is_op_determinism_enabled(),
            "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "build": {k: tf.sysconfig.get_build_info().get(k, "absent") for k in probe._TF_BUILD_KEYS}}
print(json.dumps(imported))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "env", [{}, {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_DETERMINISTIC_OPS": "1", "NVIDIA_TF32_OVERRIDE": "0"}]
)
def test_tensorflow_facts_equal_what_imported_tensorflow_reports(env):
    """Keys stay comparable with runs fingerprinted by importing TF: every TF field read from the package
    equals the imported library's answer, also with the variables that change them set."""
    import os

    out = []
    for code in (
        "import json; from tasks.runner import probe; print(json.dumps(probe.collect()['tensorflow']))",
        _AS_IMPORTED,
    ):  # two interpreters: the reading must not lean on an imported TF
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out.append(json.loads(proc.stdout.splitlines()[-1]))
    read, imported = out
    assert read == imported


def test_a_cudnn_wheel_upgrade_is_an_environment_change_and_a_cpu_host_keeps_its_key(record, monkeypatch):
    """Issue 39: only TF's build-time CUDA/cuDNN versions were recorded, so upgrading the nvidia-cudnn-cu12 wheel the
    runner loads never read env-changed. The nvidia-* runtime wheels are now in the record and the key; a host
    without them (this CPU venv: nvidia-ml-py is NVML's bindings, no runtime) records none and keeps its key."""
    import importlib.metadata

    assert "nvidia_runtime" not in probe._packages_section()  # this venv has nvidia-ml-py only
    fake = [
        type("D", (), {"metadata": {"Name": n}, "version": v})()
        for n, v in [("nvidia-cudnn-cu12", "9.28.0.42"), ("nvidia_cublas_cu12", "12.9.3.13"), ("nvidia-ml-py", "13.1")]
    ]
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: fake)
    runtime = probe._packages_section()["nvidia_runtime"]
    assert runtime == {"nvidia-cublas-cu12": "12.9.3.13", "nvidia-cudnn-cu12": "9.28.0.42"}
    with_wheels = {**record, "packages": {**record["packages"], "nvidia_runtime": runtime}}
    base = envm.Fingerprint.from_data(with_wheels)
    upgraded = changed(with_wheels, "packages.nvidia_runtime.nvidia-cudnn-cu12", "9.30.0.1")
    assert envm.Fingerprint.from_data(upgraded).comparability_key != base.comparability_key
    (c,) = [c for c in envm.diff_fingerprints(with_wheels, upgraded) if "cudnn" in c.field]
    assert c.affects_comparability and (c.old, c.new) == ("9.28.0.42", "9.30.0.1")
    assert not any(k.startswith("packages.nvidia_runtime") for k in envm.comparability_fields(record))  # no wheels
