"""Whether the hardware of a fingerprint can run a case as the case says: mixed precision and replicas.

Pure functions over a fingerprint record (``tasks.runner.probe``; a partial record with only the ``gpu``,
``host`` and ``env_vars`` sections will do, as the planner takes on its own host):

* **precision**: ``mixed_float16`` / ``mixed_bfloat16`` are fast only where the hardware computes in that
  type. On a GPU host the model computes on the GPUs: tensor cores do float16 from compute capability 7.0
  (Volta) and bfloat16 from 8.0 (Ampere), ``gpu.devices.*.compute_capability`` (NVML
  ``nvmlDeviceGetCudaComputeCapability``). On a CPU host the CPU needs the instructions of
  :data:`CPU_FLAGS` (``host.cpu_precision_flags``, from ``/proc/cpuinfo``): without them TF converts to and
  from float32 around every op, and the case measures that emulation (EfficientNetB0 in bfloat16 ran 1.6-2.7x
  slower than in float32 on such a CPU).
* **replicas**: a ``mirrored`` case runs one replica per visible GPU, else per logical CPU device
  (``PERFWATCH_CPU_LOGICAL_DEVICES``); with one it is not mirrored at all, and the runner refuses it.
* **hardware label**: a case's ``hardware`` label (``gpu-h100``) names the model after its kind; the devices
  that measured (the fingerprint's ``device.names``: NVML's GPU names, the CPU model, the TPU version) must
  bear that name (:func:`label_mismatch`), else an A100 host measures a ``gpu-h100`` case under its name.

:func:`case_findings` turns both into ``tasks.analysis.findings.Finding`` records: the planner logs them
(``tasks.stages.pipeline.plan_cases``) and the parse stage adds them to the run's findings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tasks.analysis.findings import WARNING, Finding

#: per mixed precision: the type it computes in, the /proc/cpuinfo flags of which one suffices, and the least
#: GPU compute capability (tensor cores of that type)
CPU_FLAGS: dict[str, tuple[str, ...]] = {
    "mixed_float16": ("avx512_fp16", "amx_fp16", "asimdhp"),
    "mixed_bfloat16": ("avx512_bf16", "amx_bf16", "bf16"),
}
GPU_CAPABILITY: dict[str, float] = {"mixed_float16": 7.0, "mixed_bfloat16": 8.0}
_TYPE = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
CPU_DEVICES_ENV = "PERFWATCH_CPU_LOGICAL_DEVICES"  # as tasks.runner.execution.CPU_DEVICES_ENV


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    got = data.get(name)
    return got if isinstance(got, dict) else {}


def _gpus(data: dict[str, Any]) -> list[dict[str, Any]]:
    gpu = _section(data, "gpu")
    count = gpu.get("count")
    return [d for d in gpu.get("devices") or [] if isinstance(d, dict)] if isinstance(count, int) and count else []


def _capability(value: Any) -> float | None:
    try:
        major, minor = str(value).split(".")
        return int(major) + int(minor) / 10
    except ValueError:
        return None


def missing_precision(data: dict[str, Any], precision: str) -> str | None:
    """Why the hardware of fingerprint ``data`` cannot compute in ``precision`` (``fp32``, ``mixed_float16``,
    ``mixed_bfloat16``), in words naming the device and the figure; None when it can, for ``fp32``, and
    where the figure is unknown (an older fingerprint without CPU flags, an unreadable capability).

    E.g. ``"CPU 'Intel Xeon ...' has none of avx512_bf16, amx_bf16, bf16 (no bfloat16 instructions)"`` or
    ``"GPU 0 'Tesla T4' has compute capability 7.5; bfloat16 tensor cores need 8.0"``.
    """
    if precision not in CPU_FLAGS:
        return None
    kind = _TYPE[precision]
    if gpus := _gpus(data):
        need = GPU_CAPABILITY[precision]
        for d in gpus:
            cap = _capability(d.get("compute_capability"))
            if cap is not None and cap < need:
                return (
                    f"GPU {d.get('index')} {d.get('name')!r} has compute capability {d.get('compute_capability')}; "
                    f"{kind} tensor cores need {need:.1f}"
                )
        return None
    host = _section(data, "host")
    flags = host.get("cpu_precision_flags")
    if not isinstance(flags, dict):
        return None
    wanted = CPU_FLAGS[precision]
    if any(flags.get(f) is True for f in wanted):
        return None
    return f"CPU {host.get('cpu_model')!r} has none of {', '.join(wanted)} (no {kind} instructions)"


def mirrored_replicas(data: dict[str, Any]) -> int | None:
    """Replicas a ``mirrored`` case gets in the environment of ``data``: the visible GPUs, else the logical CPU
    devices of ``PERFWATCH_CPU_LOGICAL_DEVICES`` (1 when unset); None where that cannot be told (the GPU count
    or the variable is unreadable)."""
    count = _section(data, "gpu").get("count")
    if isinstance(count, int) and count:
        return count
    if count not in (0, None):
        return None
    raw = str(_section(data, "env_vars").get(CPU_DEVICES_ENV, "absent")).strip()
    if raw in ("absent", ""):
        return 1
    return int(raw) if raw.isdigit() else None


def _plain(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def label_mismatch(label: str, names: Sequence[Any]) -> str | None:
    """Why the devices named ``names`` (the fingerprint's ``device.names``: ``["NVIDIA A100-SXM4-40GB"]``) are
    not the hardware of label ``label`` (``Case.hardware``: ``<kind>-<model>``, e.g. ``gpu-h100``), or None when
    one bears the label's model (``h100`` in ``NVIDIA H100 80GB HBM3``; letters and digits only, any case) or
    there is no name to compare (none read).

    E.g. ``"the case's hardware label gpu-h100 names h100, but it was measured on 'NVIDIA A100-SXM4-40GB'"``.
    """
    model = _plain(label.split("-", 1)[1]) if "-" in label else ""
    shown = [str(n) for n in names if n and not str(n).startswith(("unknown", "absent"))]
    if not model or not shown or any(model in _plain(n) for n in shown):
        return None
    return (
        f"the case's hardware label {label} names {label.split('-', 1)[1]}, but it was measured on "
        f"{', '.join(repr(n) for n in shown)}"
    )


def case_findings(precision: str, strategy: str, data: dict[str, Any], hardware: str | None = None) -> list[Finding]:
    """What the hardware of fingerprint ``data`` says about a case of ``precision``, ``strategy`` and hardware
    label ``hardware`` (``Case.hardware``, None: no label): ``precision_without_hardware``
    (:func:`missing_precision`: the step measures float32 emulation of the type, not the type),
    ``mirrored_one_replica`` (:func:`mirrored_replicas` is 1: the runner refuses the case, it would be labelled
    mirrored and measure one device) and ``hardware_label_mismatch`` (:func:`label_mismatch` of the label and
    ``data``'s ``device.names``: the run carries a label its hardware is not). All are warnings; none is an empty
    list."""
    out = []
    names = _section(data, "device").get("names") or []
    if hardware is not None and (why := label_mismatch(hardware, names)) is not None:
        out.append(
            Finding(
                code="hardware_label_mismatch",
                severity=WARNING,
                figure="hardware",
                message=f"{why}. The run is stored under the label's case and history, with the device it had in "
                "its fingerprint (its own comparability key): send the label to hosts that have it (the config's "
                f"queues: {{{hardware}: <their queue>}}), or name the label after the device.",
            )
        )
    if (why := missing_precision(data, precision)) is not None:
        out.append(
            Finding(
                code="precision_without_hardware",
                severity=WARNING,
                figure="precision",
                message=f"{precision} on hardware without {_TYPE[precision]} arithmetic: {why}. The step "
                f"measures {_TYPE[precision]} emulated through float32 (often slower than fp32), not what "
                "the precision gains where the hardware has it.",
            )
        )
    if strategy == "mirrored" and (n := mirrored_replicas(data)) == 1:
        out.append(
            Finding(
                code="mirrored_one_replica",
                severity=WARNING,
                figure="replicas",
                value=float(n),
                threshold=2.0,
                message=f"strategy mirrored has one replica here (no GPU or one, {CPU_DEVICES_ENV} unset): "
                f"the runner refuses it; make several GPUs visible, or set {CPU_DEVICES_ENV}=N on a CPU host, "
                "or plan the case with strategy none.",
            )
        )
    return out
