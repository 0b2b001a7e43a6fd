"""Environment fingerprints compared: hashes, the comparability split and field-by-field diffs.

Pure functions over the fingerprint record (a nested JSON dict taken by ``tasks.runner.probe``):
``Fingerprint.from_data`` hashes it into ``fingerprint_id`` (everything but the ``recorded``
section) and ``comparability_key`` (only :data:`COMPARABILITY_FIELDS`: a change there starts a new
history); :func:`diff_fingerprints` lists what differs between two records.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pydantic

ABSENT = "absent"  #: the probe's value for a thing that does not exist here (same string in tasks.runner.probe)

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
    "env_vars.XLA_FLAGS",  # compiler flags
    "env_vars.TF_XLA_FLAGS",
    "env_vars.TF_ENABLE_ONEDNN_OPTS",
    "env_vars.TF_DETERMINISTIC_OPS",
    "env_vars.TF_ENABLE_AUTO_MIXED_PRECISION",  # precision-relevant
    "env_vars.NVIDIA_TF32_OVERRIDE",  # precision-relevant
    "env_vars.OMP_NUM_THREADS",  # CPU threading
)

class Fingerprint(pydantic.BaseModel):
    """One environment fingerprint.

    ``data`` is the full nested JSON record; ``fingerprint_id`` is the sha256 hex of the canonical
    JSON of ``data`` without its ``recorded`` section; ``comparability_key`` is the first 16 hex
    chars of the sha256 of :func:`comparability_fields`.
    """

    data: dict
    fingerprint_id: str
    comparability_key: str

    @classmethod
    def from_data(cls, data: dict) -> Fingerprint:
        """Build a fingerprint from a record, computing both hashes. Raises TypeError if not JSON-able."""
        body = {k: v for k, v in data.items() if k != "recorded"}
        return cls(
            data=data,
            fingerprint_id=hashlib.sha256(_canonical(body)).hexdigest(),
            comparability_key=hashlib.sha256(_canonical(comparability_fields(data))).hexdigest()[:16],
        )


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


def is_comparability(path: str) -> bool:
    parts = path.split(".")
    return any(len(p := pat.split(".")) == len(parts) and all(a in ("*", b) for a, b in zip(p, parts, strict=True))
               for pat in COMPARABILITY_FIELDS)


def comparability_fields(data: dict) -> dict:
    """Dotted path -> value for the comparability group only (see COMPARABILITY_FIELDS).

    Fixed paths missing from ``data`` are given as "absent"; "*" paths expand per list entry.
    """
    flat = flatten(data)
    out = {p: v for p, v in flat.items() if is_comparability(p)}
    out.update({p: ABSENT for p in COMPARABILITY_FIELDS if "*" not in p and p not in flat})
    return dict(sorted(out.items()))


def diff_fingerprints(old: dict | Fingerprint, new: dict | Fingerprint, *,
                      include_recorded: bool = False) -> list[FieldChange]:
    """Fields that differ between two fingerprint records (or Fingerprint objects), sorted by path.

    The ``recorded`` section (hostname, timestamp) is skipped unless ``include_recorded``.
    A path present on one side only shows "absent" on the other.
    """
    a, b = (flatten(x.data if isinstance(x, Fingerprint) else x) for x in (old, new))
    return [FieldChange(field=p, old=a.get(p, ABSENT), new=b.get(p, ABSENT),
                        affects_comparability=is_comparability(p))
            for p in sorted(a.keys() | b.keys())
            if a.get(p, ABSENT) != b.get(p, ABSENT) and (include_recorded or not p.startswith("recorded."))]
