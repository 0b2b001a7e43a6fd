"""The environment probe: every fact that makes step times comparable, read in the runner's interpreter.

Sections of the record: ``tensorflow``, ``gpu``, ``tpu``, ``host``, ``packages``, ``env_vars``, ``threads``,
``recorded``. ``tpu`` is the host's TPU chips read from sysfs and ``/dev`` (``tasks.runner.devices.tpu_section``;
not in the comparability key: a tpu run's key has ``device.kind``).
``host`` includes the CPU set this process may use (affinity, cgroup CPU quota, usable CPUs) and the CPU's
fp16/bf16 instruction flags, ``threads`` TF's thread settings (``tasks.runner.cpus``).
Every field is always present; a fact that cannot be read is the string ``"absent"`` (the thing
does not exist here: no NVML, no GPU, TF not installed, env var unset) or ``"unknown: <reason>"``
(it exists but reading it failed), never a crash and never a missing key.

TF facts belong to the *runner's* interpreter, so the env-fingerprint stage runs
``python -m tasks.runner.probe`` there (JSON ``{"data": record}`` on stdout, and on stderr one line
per step it starts, so a probe killed by its time limit shows where it was); hashing and comparing
records is ``tasks.analysis.environment``'s job.

TensorFlow is **not imported** (that took 15-30 s on the dev machine, most of the stage): the TF facts
are read from the installed package that ``import tensorflow`` would load (found with
``importlib.util.find_spec``, which imports nothing), giving the values the imported library reports:

* ``version``: ``_VERSION`` of ``tensorflow/tools/pip_package/setup.py`` (the semver string TF's build
  writes there and compiles in as ``tf.__version__``), else the distribution's version;
* ``build``: the ``build_info`` literal of ``tensorflow/python/platform/build_info.py`` (what
  ``tf.sysconfig.get_build_info()`` returns: CUDA/cuDNN versions, CUDA/ROCm/TensorRT build flags);
* ``built_with_xla``, ``onednn_enabled``, ``op_determinism``, ``tensor_float_32``: TF's own C++ answers,
  from its small pybind11 extensions (``_pywrap_util_port``, ``_pywrap_determinism``,
  ``_pywrap_tensor_float_32_execution``) loaded on their own (about 1 s: they link the TF framework
  library), the functions ``tf.test.is_built_with_xla``, ``IsMklEnabled``,
  ``tf.config.experimental.is_op_determinism_enabled`` and ``tensor_float_32_execution_enabled`` call;
  the environment variables that change them are read by that same C++ code;
* ``xla_jit``: ``"off"``: ``tf.config.optimizer.get_jit()`` reports only a ``set_jit`` call of the same
  process, which a fresh interpreter has not made (``tensorflow/python/eager/context.py``), so the
  old probe read ``"off"`` every time too; XLA asked for by ``TF_XLA_FLAGS`` is in ``env_vars``, by a
  case in its ``xla`` axis.

The comparability key of an environment is therefore unchanged. ``git_version`` (not a comparability
field) is no longer recorded: only TF's session library holds it (another second or more to load); a
diff against an older run lists it as gone. If TensorFlow is already imported in this interpreter, its
loaded extensions are reused.

NVML: no library or no driver is ``"absent"`` (a CPU host); any other NVML failure (e.g. a
driver/library version mismatch after a driver upgrade without a reboot) records
``"unknown: NVMLError_...: ..."`` in ``nvml``, ``driver_version``, ``cuda_driver_version``,
``count`` and ``physical_count``, never ``absent``/0, so such a host never looks like a CPU host
(``tasks.analysis.environment`` then makes it comparable with no other environment).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from tasks.runner import cpus, devices, gpus

ABSENT = "absent"

# Env vars always recorded ("absent" when unset); every other TF_* that is set is recorded too, and so
# is each of ENV_VARS_WHEN_SET that is set. Which of them enter the comparability key is decided in
# tasks.analysis.environment.PERFORMANCE_ENV_VARS (tests/unit/cli/test_inputs_faults.py checks that every
# one of those is recorded here).
PERF_ENV_VARS: tuple[str, ...] = (
    "XLA_FLAGS",
    "TF_XLA_FLAGS",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_DETERMINISTIC_OPS",
    "TF_ENABLE_AUTO_MIXED_PRECISION",
    "NVIDIA_TF32_OVERRIDE",
)
ENV_VARS_WHEN_SET: tuple[str, ...] = (
    "PERFWATCH_CPU_LOGICAL_DEVICES",  # logical CPU devices: the replicas of a mirrored case on a CPU host
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "MKL_NUM_THREADS",
)
# TF_* names that belong to Terraform, not TensorFlow (TF_VAR_*/TF_TOKEN_* may hold secrets): never recorded.
_TERRAFORM_ENV = re.compile(
    r"TF_(VAR_|TOKEN_|CLI_|LOG|WORKSPACE$|IN_AUTOMATION$|INPUT$|DATA_DIR$|"
    r"PLUGIN_CACHE_DIR$|REGISTRY_|APPEND_USER_AGENT$|IGNORE$|STATE_PERSIST)"
)
PACKAGES: tuple[str, ...] = ("tensorflow", "tensorflow-cpu", "keras", "numpy", "xprof")
IMAGE_DIGEST_ENV = "PERFWATCH_IMAGE_DIGEST"
_GOVERNOR_FILE = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
_TF_BUILD_KEYS = ("cuda_version", "cudnn_version", "is_cuda_build", "is_rocm_build", "is_tensorrt_build")


def _unknown(exc: BaseException) -> str:
    return f"unknown: {type(exc).__name__}: {exc}".strip()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def _safe(fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn``; any exception becomes an "unknown: ..." value (NVML "not supported" kept as such)."""
    try:
        return _jsonable(fn(*args))
    except Exception as exc:  # noqa: BLE001 - a fingerprint must never crash on one field
        if type(exc).__name__ == "NVMLError_NotSupported":
            return "not supported"
        return _unknown(exc)


# ---------------------------------------------------------------- tensorflow


#: TF facts answered by TF's own C++ code: field -> (extension module under ``tensorflow/python``, function).
_TF_NATIVE: dict[str, tuple[str, str]] = {
    "built_with_xla": ("util._pywrap_util_port", "IsBuiltWithXLA"),
    "onednn_enabled": ("util._pywrap_util_port", "IsMklEnabled"),
    "op_determinism": ("util._pywrap_determinism", "is_enabled"),
    "tensor_float_32": ("util._pywrap_tensor_float_32_execution", "is_enabled"),
}
_TF_FIELDS = ("version", "built_with_xla", "xla_jit", "onednn_enabled", "op_determinism", "tensor_float_32")


def _tf_package_dir() -> Path | None:
    """The directory of the ``tensorflow`` package ``import tensorflow`` would load, found without
    importing it; None when there is none (also when ``sys.modules["tensorflow"]`` is None)."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _assigned_literal(path: Path, name: str) -> Any:
    """The literal assigned to ``name`` at the top level of the Python file ``path``, read with ``ast``
    (never executed); a call such as ``collections.OrderedDict([...])`` gives its first argument.

    Raises:
        FileNotFoundError: no such file; LookupError: no literal assignment to ``name`` there.
    """
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value.args[0] if isinstance(node.value, ast.Call) and node.value.args else node.value
            return ast.literal_eval(value)
    raise LookupError(f"no literal assignment to {name} in {path}")


def _tf_version(pkg: Path) -> str:
    try:
        return str(_assigned_literal(pkg / "tools" / "pip_package" / "setup.py", "_VERSION"))
    except FileNotFoundError:
        for dist in ("tensorflow", "tensorflow-cpu"):  # a wheel without setup.py: pip's spelling of it
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                return importlib.metadata.version(dist)
        raise


def _tf_native(pkg: Path, module: str) -> Any:
    """TF's extension module ``tensorflow.python.<module>`` loaded from ``pkg`` on its own, without the
    ``tensorflow`` package's Python code (registered under its full name, so a later ``import
    tensorflow`` in this process uses it; an already loaded one is reused).

    Raises:
        FileNotFoundError: the package has no such extension; ImportError: it does not load.
    """
    full = f"tensorflow.python.{module}"
    if (loaded := sys.modules.get(full)) is not None:
        return loaded
    where = pkg.joinpath("python", *module.split("."))
    path = next(
        (p for s in importlib.machinery.EXTENSION_SUFFIXES if (p := where.with_name(where.name + s)).exists()), None
    )
    if path is None:
        raise FileNotFoundError(f"no extension module {where}.so in the TensorFlow package")
    spec = importlib.util.spec_from_file_location(full, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the extension module {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[full] = mod
    return mod


def _tensorflow_section(include: bool) -> dict[str, Any]:
    marker = None if include else "unknown: not collected (include_tensorflow=False)"
    pkg = None
    if include:
        try:
            pkg = _tf_package_dir()
            marker = ABSENT if pkg is None else None
        except Exception as exc:  # noqa: BLE001 - a broken TF install is recorded, not raised
            marker = _unknown(exc)
    if marker is not None or pkg is None:
        return {**dict.fromkeys(_TF_FIELDS, marker), "build": dict.fromkeys(_TF_BUILD_KEYS, marker)}
    out: dict[str, Any] = {"version": _safe(_tf_version, pkg), "xla_jit": "off"}
    for field, (module, fn) in _TF_NATIVE.items():
        out[field] = _safe(lambda m=module, f=fn: getattr(_tf_native(pkg, m), f)())
    try:
        info: Any = dict(_assigned_literal(pkg / "python" / "platform" / "build_info.py", "build_info"))
    except Exception as exc:  # noqa: BLE001
        info = _unknown(exc)
    out["build"] = {k: _jsonable(info.get(k, ABSENT)) if isinstance(info, dict) else info for k in _TF_BUILD_KEYS}
    return {k: out[k] for k in (*_TF_FIELDS, "build")}


# ---------------------------------------------------------------- gpu (NVML)


def _enabled(value: int) -> str:
    return "enabled" if value else "disabled"


def _pair(get: Callable[..., Any], fn: Callable[[Any], Any], handle: Any) -> dict[str, Any]:
    """``{"current", "pending"}`` from an NVML call returning [current, pending]."""
    got = get(lambda: [_enabled(v) for v in fn(handle)])
    if isinstance(got, list):
        return dict(zip(("current", "pending"), got, strict=True))
    return {"current": got, "pending": got}


def _device(nv: Any, index: int, handle: Any) -> dict[str, Any]:
    """One GPU's facts. ``handle`` may be an "unknown: ..." string (handle lookup failed)."""
    get: Callable[..., Any] = (lambda *_: handle) if isinstance(handle, str) else _safe
    clocks = {"sm": nv.NVML_CLOCK_SM, "mem": nv.NVML_CLOCK_MEM}
    dev = {
        "index": index,
        "name": get(nv.nvmlDeviceGetName, handle),
        "uuid": get(nv.nvmlDeviceGetUUID, handle),
        "memory_total_bytes": get(lambda: nv.nvmlDeviceGetMemoryInfo(handle).total),
        "compute_capability": get(lambda: "{}.{}".format(*nv.nvmlDeviceGetCudaComputeCapability(handle))),
        "power_limit_mw": get(nv.nvmlDeviceGetPowerManagementLimit, handle),
        "applications_clock_mhz": {k: get(nv.nvmlDeviceGetApplicationsClock, handle, c) for k, c in clocks.items()},
        "max_clock_mhz": {k: get(nv.nvmlDeviceGetMaxClockInfo, handle, c) for k, c in clocks.items()},
        "ecc_mode": _pair(get, nv.nvmlDeviceGetEccMode, handle),
        "persistence_mode": get(lambda: _enabled(nv.nvmlDeviceGetPersistenceMode(handle))),
        "mig_mode": _pair(get, nv.nvmlDeviceGetMigMode, handle),
        "mig_devices": [],
    }
    if dev["mig_mode"]["current"] == "enabled":
        slots = _safe(nv.nvmlDeviceGetMaxMigDeviceCount, handle)
        for slot in range(slots if isinstance(slots, int) else 0):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError:  # empty slot (NVML_ERROR_NOT_FOUND)
                continue
            dev["mig_devices"].append(
                {
                    "name": _safe(nv.nvmlDeviceGetName, mig),
                    "uuid": _safe(nv.nvmlDeviceGetUUID, mig),
                    "memory_total_bytes": _safe(lambda m=mig: nv.nvmlDeviceGetMemoryInfo(m).total),
                }
            )
    return dev


def _gpu_section() -> dict[str, Any]:
    out: dict[str, Any] = {
        "nvml": "ok",
        "driver_version": ABSENT,
        "cuda_driver_version": ABSENT,
        "count": 0,
        "physical_count": 0,
        "devices": [],
    }
    try:
        import pynvml as nv
    except ImportError as exc:
        return {
            **out,
            **dict.fromkeys(
                ("nvml", "driver_version", "cuda_driver_version", "count", "physical_count"), _unknown(exc)
            ),
        }
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        if isinstance(exc, nv.NVMLError_LibraryNotFound | nv.NVMLError_DriverNotLoaded):
            return {**out, "nvml": ABSENT}
        # NVML is there but broken (e.g. NVMLError_LibRmVersionMismatch after a driver upgrade): the driver and GPUs
        # are unknown, not absent; a CPU host's "absent"/0 here would let this run join a CPU history.
        return {
            **out,
            **dict.fromkeys(
                ("nvml", "driver_version", "cuda_driver_version", "count", "physical_count"), _unknown(exc)
            ),
        }
    try:
        out["driver_version"] = _safe(nv.nvmlSystemGetDriverVersion)
        version = _safe(nv.nvmlSystemGetCudaDriverVersion_v2)
        if not isinstance(version, int):  # older drivers lack the _v2 entry point
            version = _safe(nv.nvmlSystemGetCudaDriverVersion)
        if isinstance(version, int):  # e.g. 12040 -> "12.4"
            version = f"{version // 1000}.{version % 1000 // 10}"
        out["cuda_driver_version"] = version
        count = _safe(nv.nvmlDeviceGetCount)
        out["physical_count"] = count
        if not isinstance(count, int):
            out["count"] = count
            return out
        handles: list[Any] = []
        for i in range(count):
            try:
                handles.append(nv.nvmlDeviceGetHandleByIndex(i))
            except nv.NVMLError as exc:
                handles.append(_unknown(exc))
        uuids = [h if isinstance(h, str) else _safe(nv.nvmlDeviceGetUUID, h) for h in handles]
        names = [h if isinstance(h, str) else _safe(nv.nvmlDeviceGetName, h) for h in handles]
        spec = os.environ.get("CUDA_VISIBLE_DEVICES")
        mig = gpus.mig_instances(nv, handles) if spec and "MIG-" in spec else None
        order, note = gpus.visible_order(
            spec, uuids, names=names, device_order=os.environ.get("CUDA_DEVICE_ORDER"), mig=mig
        )
        if order is None:  # ordinals over different GPUs under FASTEST_FIRST: which GPUs is not knowable
            out["count"] = f"unknown: {note}"
            return out
        shown = dict.fromkeys(i for i, _ in order)  # a MIG instance: its GPU
        out["devices"] = [_device(nv, i, handles[i]) for i in shown]
        out["count"] = len(out["devices"])
    except Exception as exc:  # noqa: BLE001 - unexpected NVML/ctypes failure: record, never crash
        out["count"] = _unknown(exc)
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
    return out


# ---------------------------------------------------------------- host, packages, env


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model", "cpu model")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown: no model name in /proc/cpuinfo"


def _governor() -> str:
    try:
        return _GOVERNOR_FILE.read_text().strip()
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        return _unknown(exc)


def _os_release() -> str:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME", ABSENT)
    except OSError:
        return ABSENT


def _host_section() -> dict[str, Any]:
    logical = _safe(psutil.cpu_count)
    return {
        "cpu_model": _safe(_cpu_model),
        "cpu_count_logical": logical,
        "cpu_count_physical": _safe(lambda: psutil.cpu_count(logical=False) or ABSENT),
        **_safe_section(lambda: cpus.cpu_facts(logical if isinstance(logical, int) else None), _CPU_SET_KEYS),
        **_safe_section(lambda: {"cpu_precision_flags": cpus.precision_flags()}, ("cpu_precision_flags",)),
        "cpu_governor": _safe(_governor),
        "memory_total_bytes": _safe(lambda: psutil.virtual_memory().total),
        "os": platform.system(),
        "os_release": _safe(_os_release),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python_version": platform.python_version(),
        "image_digest": os.environ.get(IMAGE_DIGEST_ENV) or ABSENT,
    }


_THREAD_KEYS = ("tf_intra_op_configured", "tf_inter_op_configured", "tf_default_threads")
_CPU_SET_KEYS = ("cpu_affinity", "cpu_affinity_count", "cgroup_cpu_quota", "cpu_count_usable")


def _safe_section(fn: Callable[[], dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    """``fn()``'s dict, or every one of ``keys`` reading "unknown: ..." when it raises."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a fingerprint must never crash on one field
        return dict.fromkeys(keys, _unknown(exc))


def _packages_section() -> dict[str, Any]:
    installed = {
        (re.sub(r"[-_.]+", "-", d.metadata["Name"] or "").lower(), d.version)
        for d in importlib.metadata.distributions()
    }
    versions = dict(sorted(installed, reverse=True))  # duplicates on sys.path: any one wins
    lines = sorted(f"{n}=={v}" for n, v in installed)
    runtime = {n: v for n, v in versions.items() if _NVIDIA_RUNTIME.match(n) and n not in _NVIDIA_NOT_RUNTIME}
    return {
        **{name: versions.get(name, ABSENT) for name in PACKAGES},
        "installed_count": len(lines),
        "installed_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
        **({"nvidia_runtime": dict(sorted(runtime.items()))} if runtime else {}),
    }


#: the CUDA runtime wheels TensorFlow's ``and-cuda`` extra installs (nvidia-cudnn-cu12, nvidia-cublas-cu12, ...):
#: their versions are what the runner loads, not TF's build-time ``cuda_version``/``cudnn_version``, so they are in
#: the comparability key (``packages.nvidia_runtime.*``) and a cuDNN upgrade reads env-changed
_NVIDIA_RUNTIME = re.compile(r"nvidia-[a-z0-9-]+")
_NVIDIA_NOT_RUNTIME = frozenset({"nvidia-ml-py", "nvidia-ml-py3"})  # NVML's Python bindings, not a runtime library


def _env_section() -> dict[str, Any]:
    names = (
        set(PERF_ENV_VARS)
        | {k for k in ENV_VARS_WHEN_SET if k in os.environ}
        | {k for k in os.environ if k.startswith("TF_") and not _TERRAFORM_ENV.match(k)}
    )
    return {k: os.environ.get(k, ABSENT) for k in sorted(names)}


def _say(step: str) -> None:
    """One progress line on stderr: what the probe is doing (shown if it is killed by its time limit)."""
    sys.stderr.write(f"perfwatch probe: {step}\n")
    sys.stderr.flush()


def collect(*, include_tensorflow: bool = True, progress: bool = False) -> dict[str, Any]:
    """The fingerprint record of this interpreter and host (about 0.1-0.3 s, plus about 1 s to load TF's
    framework library for its C++ settings; TensorFlow's Python package is never imported).

    With ``include_tensorflow=False`` TF is not read and its fields read
    ``"unknown: not collected ..."``. ``recorded.probe_id`` is a random id of this reading (it tells
    apart environments that must not be compared with any other). ``progress``: say each step on
    stderr. Never raises for missing hardware or libraries.
    """
    say = _say if progress else (lambda _step: None)
    if include_tensorflow:
        say("reading TensorFlow's version, build info and C++ settings from its package (about 1 s)")
    tensorflow = _tensorflow_section(include_tensorflow)
    say("reading NVML (driver and GPUs)")
    gpu = _gpu_section()
    say("reading host, packages and environment variables")
    data = {
        "tensorflow": tensorflow,
        "gpu": gpu,
        "tpu": devices.tpu_section(),
        "host": _host_section(),
        "packages": _packages_section(),
        "env_vars": _env_section(),
        "threads": _safe_section(cpus.thread_settings, _THREAD_KEYS),
        "recorded": {
            "hostname": socket.gethostname(),
            "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python_executable": sys.executable,
            "probe_id": uuid.uuid4().hex,
        },
    }
    return data


def hardware() -> dict[str, Any]:
    """The part of the record that says what the hardware computes in and how many replicas a mirrored case
    gets (``tasks.analysis.hardware``): ``gpu`` (NVML), ``tpu`` (the TPU chips, ``tasks.runner.devices``),
    ``host`` (CPU model and fp16/bf16 flags) and ``env_vars`` (``PERFWATCH_CPU_LOGICAL_DEVICES``,
    ``CUDA_VISIBLE_DEVICES``); well under a second, TensorFlow not read."""
    return {
        "gpu": _gpu_section(),
        "tpu": devices.tpu_section(),
        "host": {
            "cpu_model": _safe(_cpu_model),
            **_safe_section(lambda: {"cpu_precision_flags": cpus.precision_flags()}, ("cpu_precision_flags",)),
        },
        "env_vars": {
            "PERFWATCH_CPU_LOGICAL_DEVICES": os.environ.get("PERFWATCH_CPU_LOGICAL_DEVICES", ABSENT),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", ABSENT),
        },
    }


def main(argv: list[str] | None = None) -> None:
    """CLI: print the fingerprint as one line of JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m tasks.runner.probe", description=main.__doc__)
    parser.add_argument("--no-tensorflow", action="store_true", help="do not read TensorFlow's facts")
    args = parser.parse_args(argv)
    data = collect(include_tensorflow=not args.no_tensorflow, progress=True)
    sys.stdout.write(json.dumps({"data": data}) + "\n")


if __name__ == "__main__":
    main()
