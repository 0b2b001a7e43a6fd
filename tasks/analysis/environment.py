"""Environment fingerprints compared: hashes, the comparability split and field-by-field diffs.

Pure functions over the fingerprint record (a nested JSON dict taken by ``tasks.runner.probe``):
``Fingerprint.from_data`` hashes it into ``fingerprint_id`` (everything but the ``recorded``
section) and ``comparability_key`` (only :data:`COMPARABILITY_FIELDS`, the set variables of
:data:`PERFORMANCE_ENV_VARS`, the CPUs usable where fewer than the host's, :data:`WHEN_DIFFERENT_FIELDS`, and the
device kind where the case asked for one, :data:`DEVICE_KIND_FIELD`:
a change there starts a new history); :func:`diff_fingerprints` lists what differs between two records.

Environment variables: the probe records every ``TF_*`` variable that is set, but only those that
can change step time enter the comparability key (:data:`PERFORMANCE_ENV_VARS`); the rest
(``TF_CPP_MIN_LOG_LEVEL``, ``CUDA_VISIBLE_DEVICES``, ...) are recorded for information only.

An environment whose NVML reading failed (:func:`not_comparable_reason`) is comparable with no other:
its key is made unique with the reading's ``recorded.probe_id``, so a GPU host with a broken driver
never joins (or becomes the baseline of) a CPU-only history, nor another broken reading's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

ABSENT = "absent"  #: the probe's value for a thing that does not exist here (same string in tasks.runner.probe)

# Environment variables that can change step time. Each one that is set enters the comparability key
# (``env_vars.<NAME>``); an unset one adds nothing, so adding a name here keeps every stored key.
# The first seven are also in COMPARABILITY_FIELDS below, where unset reads "absent" (as keys have
# been computed since the first store: never take them out). Recorded for information only, never
# in the key: TF_CPP_MIN_LOG_LEVEL (which log lines print), CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER
# (their effect, which and how many GPUs are visible, is in gpu.count and gpu.devices.*, which are
# in the key; the spelling, index or UUID, is not), and every other TF_* variable the probe records.
PERFORMANCE_ENV_VARS: tuple[str, ...] = (
    "XLA_FLAGS",  # XLA compiler flags
    "TF_XLA_FLAGS",  # XLA auto-clustering (--tf_xla_auto_jit) and its flags
    "TF_ENABLE_ONEDNN_OPTS",  # oneDNN kernels on/off
    "TF_DETERMINISTIC_OPS",  # deterministic (slower) kernels
    "TF_ENABLE_AUTO_MIXED_PRECISION",  # float16 graph rewrite
    "NVIDIA_TF32_OVERRIDE",  # TF32 math on Ampere and later
    "OMP_NUM_THREADS",  # CPU threads of OpenMP-backed kernels
    "TF_NUM_INTRAOP_THREADS",  # TF's own thread pools
    "TF_NUM_INTEROP_THREADS",
    "TF_GPU_THREAD_MODE",  # GPU launch threads (gpu_private, gpu_shared)
    "TF_GPU_THREAD_COUNT",
    "TF_GPU_ALLOCATOR",  # cuda_malloc_async vs the BFC allocator
    "TF_FORCE_GPU_ALLOW_GROWTH",  # GPU memory grown on demand (fragmentation)
    "TF_CUDNN_DETERMINISTIC",  # deterministic cuDNN algorithms
    "TF_CUDNN_USE_AUTOTUNE",  # cuDNN algorithm autotuning on/off
    "TF_CUDNN_WORKSPACE_LIMIT_IN_MB",  # limits which cuDNN algorithms can run
    "TF_USE_LEGACY_KERAS",  # Keras 2 (tf_keras) instead of Keras 3
    "TF_CPP_MAX_VLOG_LEVEL",  # verbose C++ logging slows every op
    "TF_CPP_VMODULE",
    "CUDA_LAUNCH_BLOCKING",  # synchronous kernel launches
    "CUDA_DEVICE_MAX_CONNECTIONS",  # concurrent GPU work queues
    "KMP_AFFINITY",  # Intel OpenMP thread placement and spin time
    "KMP_BLOCKTIME",
    "MKL_NUM_THREADS",  # MKL threads
    "PERFWATCH_CPU_LOGICAL_DEVICES",  # logical CPU devices: how many replicas a mirrored case has on a CPU host
)
_ALWAYS_IN_KEY_ENV = PERFORMANCE_ENV_VARS[:7]

# THE comparability split, in one place. A change in any of these fields starts a new history;
# every other field is only recorded (shown by diff_fingerprints, part of fingerprint_id, not of
# comparability_key). "*" matches one list index. Unlisted on purpose: GPU uuid (a swapped card of
# the same model is comparable), clocks, power limit, ECC/persistence, memory totals, hostname,
# timestamp, kernel, governor, image digest, full package-set hash. Values are hashed as read, so an
# "unknown: ..." reading in one of these fields also starts a new history (conservative by design).
COMPARABILITY_FIELDS: tuple[str, ...] = (
    "tensorflow.version",  # runtime TF version, as imported by the runner
    "tensorflow.build.cuda_version",  # CUDA TF was built against
    "tensorflow.build.cudnn_version",  # cuDNN TF was built against
    "tensorflow.build.is_cuda_build",  # CUDA build flag
    "tensorflow.build.is_rocm_build",  # ROCm build flag
    "tensorflow.build.is_tensorrt_build",  # TensorRT build flag
    "tensorflow.xla_jit",  # XLA auto-clustering in effect
    "tensorflow.onednn_enabled",  # oneDNN kernels in effect (TF_ENABLE_ONEDNN_OPTS resolved)
    "tensorflow.op_determinism",  # deterministic kernels (slower ones) in effect
    "tensorflow.tensor_float_32",  # TF32 matmul/conv precision in effect
    "gpu.driver_version",  # NVIDIA driver
    "gpu.cuda_driver_version",  # CUDA version the driver supports
    "gpu.count",  # number of GPUs visible to CUDA
    "gpu.devices.*.name",  # GPU model
    "gpu.devices.*.compute_capability",  # architecture
    "gpu.devices.*.mig_mode.current",  # MIG on/off
    "gpu.devices.*.mig_devices.*.name",  # MIG slice profile (e.g. "... MIG 1g.10gb")
    "host.cpu_model",  # CPU model string
    "host.cpu_count_logical",  # logical cores (input pipeline / intra-op threads)
    "packages.tensorflow",  # distribution versions
    "packages.tensorflow-cpu",
    "packages.keras",
    "packages.numpy",
    "packages.nvidia_runtime.*",  # the CUDA runtime wheels the runner loads (cuDNN, cuBLAS...), where installed
    *(f"env_vars.{name}" for name in _ALWAYS_IN_KEY_ENV),  # see PERFORMANCE_ENV_VARS
)


# Fields in the key only where they differ from a reference field of the same record, so that every record
# whose value equals the reference (and every record taken before the field existed) keeps its key: a run
# pinned with ``taskset -c 0`` or limited by a cgroup CPU quota (``docker --cpus 1``) uses fewer CPUs than
# the host has, and is comparable only with runs that had as many (tasks.runner.cpus.usable_cpus); an
# unrestricted run's usable count equals ``host.cpu_count_logical`` and adds nothing.
WHEN_DIFFERENT_FIELDS: dict[str, str] = {"host.cpu_count_usable": "host.cpu_count_logical"}

# The device that measured (``device.kind``: cpu, gpu, tpu; tasks.runner.devices.device_section) is in the key
# where the case asked for a device kind (``device.requested`` other than "auto"): a cpu case on a GPU host
# (its GPUs hidden) and a gpu case there never share a history. A run that asked for none (every run before
# cases named a device) keeps its key; its GPUs are in the key already (gpu.devices.*.name).
DEVICE_KIND_FIELD = "device.kind"


class Fingerprint(pydantic.BaseModel):
    """One environment fingerprint.

    ``data`` is the full nested JSON record; ``fingerprint_id`` is the sha256 hex of the canonical
    JSON of ``data`` without its ``recorded`` section; ``comparability_key`` is the first 16 hex
    chars of the sha256 of :func:`comparability_fields`.
    """

    data: dict[str, Any]
    fingerprint_id: str
    comparability_key: str

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Fingerprint:
        """Build a fingerprint from a record, computing both hashes. Raises TypeError if not JSON-able.

        When :func:`not_comparable_reason` finds an NVML failure, the key also hashes the reading's
        ``recorded.probe_id`` (or, lacking one, the whole record): no other reading shares it.
        """
        body = {k: v for k, v in data.items() if k != "recorded"}
        keyed: Any = comparability_fields(data)
        if (reason := not_comparable_reason(data)) is not None:
            recorded = data["recorded"] if isinstance(data.get("recorded"), dict) else {}
            keyed = {"fields": keyed, "not_comparable": reason, "reading": recorded.get("probe_id") or data}
        return cls(
            data=data,
            fingerprint_id=hashlib.sha256(_canonical(body)).hexdigest(),
            comparability_key=hashlib.sha256(_canonical(keyed)).hexdigest()[:16],
        )


def not_comparable_reason(data: dict[str, Any]) -> str | None:
    """Why the environment of record ``data`` can be compared with no other, or None.

    NVML failed while reading a GPU fact that decides comparability (a ``gpu.*`` comparability field
    reads ``"unknown: NVMLError..."``, e.g. ``NVMLError_LibRmVersionMismatch`` from ``nvmlInit``,
    nvidia-smi's "Driver/library version mismatch", or a GPU lost): the driver and GPUs in use are unknown. Returns
    ``"<field>: <value>"`` of the
    first such field. A missing NVML library or driver (``"absent"``) is a CPU host, not a failure.
    """
    for path, value in comparability_fields(data).items():
        if path.startswith("gpu.") and isinstance(value, str) and value.startswith("unknown: NVMLError"):
            return f"{path}: {value}"
    return None


class FieldChange(pydantic.BaseModel):
    """One differing field: dotted path, old and new value ("absent" where the path is missing)."""

    field: str
    old: Any
    new: Any
    affects_comparability: bool


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested dicts/lists as ``{"a.b.0.c": value}``; empty containers yield nothing."""
    if isinstance(obj, dict | list):
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        return {p: v for k, child in items for p, v in flatten(child, f"{prefix}{k}.").items()}
    return {prefix[:-1]: obj}


_PERF_ENV_PATHS = frozenset(f"env_vars.{name}" for name in PERFORMANCE_ENV_VARS)


def is_comparability(path: str) -> bool:
    """Whether dotted ``path`` is a comparability field (COMPARABILITY_FIELDS, a PERFORMANCE_ENV_VARS variable
    or one of WHEN_DIFFERENT_FIELDS)."""
    if path in _PERF_ENV_PATHS or path in WHEN_DIFFERENT_FIELDS or path == DEVICE_KIND_FIELD:
        return True
    parts = path.split(".")
    return any(
        len(p := pat.split(".")) == len(parts) and all(a in ("*", b) for a, b in zip(p, parts, strict=True))
        for pat in COMPARABILITY_FIELDS
    )


def comparability_fields(data: dict[str, Any]) -> dict[str, Any]:
    """Dotted path -> value for the comparability group only (COMPARABILITY_FIELDS, PERFORMANCE_ENV_VARS).

    Fixed paths missing from ``data`` are given as "absent"; "*" paths expand per list entry; a
    variable of PERFORMANCE_ENV_VARS outside COMPARABILITY_FIELDS is included only when it is set; a field
    of WHEN_DIFFERENT_FIELDS only when it is there and differs from its reference field (e.g.
    ``host.cpu_count_usable`` 1 on a 2-CPU host).
    """
    flat = flatten(data)
    out = {
        p: v
        for p, v in flat.items()
        if is_comparability(p)
        and not (p in _PERF_ENV_PATHS and p not in COMPARABILITY_FIELDS and v == ABSENT)
        and not (p in WHEN_DIFFERENT_FIELDS and v == flat.get(WHEN_DIFFERENT_FIELDS[p], v))
    }
    if flat.get("device.requested", "auto") == "auto":
        out.pop(DEVICE_KIND_FIELD, None)
    out.update({p: ABSENT for p in COMPARABILITY_FIELDS if "*" not in p and p not in flat})
    return dict(sorted(out.items()))


def diff_fingerprints(
    old: dict[str, Any] | Fingerprint, new: dict[str, Any] | Fingerprint, *, include_recorded: bool = False
) -> list[FieldChange]:
    """Fields that differ between two fingerprint records (or Fingerprint objects), sorted by path.

    The ``recorded`` section (hostname, timestamp) is skipped unless ``include_recorded``.
    A path present on one side only shows "absent" on the other.
    """
    da, db = (x.data if isinstance(x, Fingerprint) else x for x in (old, new))
    a, b = flatten(da), flatten(db)
    ka, kb = comparability_fields(da), comparability_fields(db)

    def affects(p: str) -> bool:  # a WHEN_DIFFERENT field counts only where it changed what enters the key
        conditional = p in WHEN_DIFFERENT_FIELDS or p == DEVICE_KIND_FIELD
        return is_comparability(p) and (not conditional or ka.get(p) != kb.get(p))

    return [
        FieldChange(field=p, old=a.get(p, ABSENT), new=b.get(p, ABSENT), affects_comparability=affects(p))
        for p in sorted(a.keys() | b.keys())
        if a.get(p, ABSENT) != b.get(p, ABSENT) and (include_recorded or not p.startswith("recorded."))
    ]


#: most differing fields a cross-environment verdict names in its reason (the rest are in its evidence)
MAX_NAMED_DIFFERENCES = 6


def sides_differences(
    configured: Mapping[str, tuple[str | None, str | None]], changes: Sequence[FieldChange]
) -> tuple[list[dict[str, Any]], str]:
    """What differs between the two sides of a cross-environment gate (A: the baseline environment, B: this
    run's), as records and in words: ``configured`` the settings the gate was given (``runner``, ``env KEY``:
    A's value and B's, None where unset), then ``changes`` (:func:`diff_fingerprints` of A's fingerprint to B's),
    the fields that enter the comparability key first. E.g. ``({"env TF_NUM_INTRAOP_THREADS": ("1", None)},
    [])`` gives ``"A and B differ in env TF_NUM_INTRAOP_THREADS 1 -> unset"``; nothing differing gives ``"A and
    B differ in nothing recorded (the same environment)"``. At most :data:`MAX_NAMED_DIFFERENCES` are named."""
    rows: list[dict[str, Any]] = [
        {"field": k, "old": a, "new": b, "configured": True} for k, (a, b) in configured.items() if a != b
    ]
    ranked = sorted(changes, key=lambda c: (not c.affects_comparability, c.field))
    rows += [{**c.model_dump(mode="json"), "configured": False} for c in ranked]
    if not rows:
        return rows, "A and B differ in nothing recorded (the same environment)"

    def show(v: Any) -> str:
        return "unset" if v is None or v == ABSENT else str(v)

    named = [f"{r['field']} {show(r['old'])} -> {show(r['new'])}" for r in rows[:MAX_NAMED_DIFFERENCES]]
    more = len(rows) - len(named)
    return rows, "A and B differ in " + ", ".join(named) + (f" and {more} more field(s)" if more else "")
