"""The device kind a case runs on (``Case.device``: auto, cpu, gpu, tpu), checked where it is measured.

Pure functions over what the measuring host shows (no TensorFlow import here; the runner passes in what TF
sees, the fingerprint stage what NVML sees), stdlib only, so they load in a bare TF/GPU venv:

* :func:`refusal`: why a ``gpu`` or ``tpu`` case cannot run here (none visible), or None. The runner
  refuses such a case instead of silently measuring the CPU.
* :func:`tpu_section`: the TPUs of this host without TensorFlow or libtpu (JAX's rule, ``jax._src.hardware_utils``:
  a PCI function of Google's vendor id with a TPU device id; usable when its device nodes, ``/dev/accel*`` on
  TPU v2-v4 VMs or ``/dev/vfio/<n>`` on v5e and later, are present), for the fingerprint and the plan.
* :func:`hidden_gpus_env`: the environment of a ``cpu`` case's runner process, the GPUs hidden from CUDA
  (``CUDA_VISIBLE_DEVICES=""``), so a cpu case on a GPU host really measures the CPU; the runner also
  hides them from TF itself (``tf.config.set_visible_devices([], "GPU")``, tasks.runner.process).
* :func:`device_section`: the fingerprint's ``device`` section, which device measured.
* :func:`cpu_only_tensorflow`: why the runner's TensorFlow cannot use a GPU (a build without CUDA) although NVML
  sees one: a gpu case is refused with it, an auto case's device section says it measured the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

KINDS: tuple[str, ...] = ("cpu", "gpu", "tpu")
"""The device kinds a case may ask for (``Case.device``; ``auto`` asks for none)."""

_TF_TYPE = {"cpu": "CPU", "gpu": "GPU", "tpu": "TPU"}

GOOGLE_PCI_VENDOR = "0x1ae0"
"""Google's PCI vendor id (``/sys/bus/pci/devices/*/vendor``)."""

TPU_PCI_DEVICES: dict[str, str] = {
    "0x0027": "v2/v3",
    "0x0056": "plc",
    "0x005e": "v4",
    "0x0062": "v5p",
    "0x0063": "v5e",
    "0x006f": "v6e",
    "0x0076": "tpu7x",
}
"""PCI device id -> TPU version of Google's TPU chips (the table of ``jax._src.hardware_utils``)."""


def tpu_section(root: str | Path = "/") -> dict[str, Any]:
    """The fingerprint's ``tpu`` section: this host's TPU chips, read from sysfs and ``/dev`` under ``root``
    (``/``: this host; a test passes a tree of its own); no TensorFlow, JAX or libtpu is imported.

    Returns:
        ``{"chips": N, "versions": [...], "device_nodes": [...], "count": M}``: ``chips`` the PCI functions of
        vendor :data:`GOOGLE_PCI_VENDOR` with a device id of :data:`TPU_PCI_DEVICES` (``versions`` their TPU
        versions, sorted, each once), ``device_nodes`` the ``/dev/accel*`` and ``/dev/vfio/<n>`` nodes present
        (a container without them cannot reach the chips), ``count`` the usable chips: ``chips`` where a
        device node is present, else 0. An unreadable sysfs counts none; never raises.
    """
    base = Path(root)
    chips, versions = 0, set()
    for vendor in sorted((base / "sys" / "bus" / "pci" / "devices").glob("*/vendor")):
        try:
            if vendor.read_text().strip() != GOOGLE_PCI_VENDOR:
                continue
            version = TPU_PCI_DEVICES.get((vendor.parent / "device").read_text().strip())
        except OSError:
            continue
        if version is not None:
            chips += 1
            versions.add(version)
    dev = base / "dev"
    nodes = [*sorted(dev.glob("accel[0-9]*")), *[p for p in sorted(dev.glob("vfio/*")) if p.name.isdigit()]]
    shown = ["/" + str(p.relative_to(base)) for p in nodes]
    return {"chips": chips, "versions": sorted(versions), "device_nodes": shown, "count": chips if nodes else 0}


def _tpu_detail(tpu: Mapping[str, Any] | None) -> str:
    """What the ``tpu`` section (:func:`tpu_section`) says of this host's TPUs, for a refusal message."""
    if not tpu:
        return "no TPU reading"
    chips, nodes = tpu.get("chips", 0), tpu.get("device_nodes") or []
    versions = f" ({', '.join(tpu.get('versions') or [])})" if chips else ""
    shown = ", ".join(nodes) or "none"
    return f"TPU chips on PCI: {chips}{versions}, TPU device nodes (/dev/accel*, /dev/vfio/<n>): {shown}"


def refusal(
    case_name: str,
    device: str,
    seen: Sequence[str],
    cuda_visible_devices: str | None,
    *,
    who: str = "TF",
    tpu: Mapping[str, Any] | None = None,
) -> str | None:
    """Why case ``case_name`` asking for ``device`` cannot run on this host, or None when it can.

    Args:
        case_name: the case, as the message names it (``<model> <case name>``).
        device: ``Case.device``: ``auto`` and ``cpu`` always run (every host has a CPU).
        seen: the device types visible here, as TF names them (``tf.config.list_physical_devices()``'s
            ``device_type``: ``CPU``, ``GPU``, ``TPU``), one entry per device.
        cuda_visible_devices: the ``CUDA_VISIBLE_DEVICES`` value (None: unset), quoted in a gpu case's message:
            an empty value hides every GPU.
        who: what saw ``seen`` (``TF``, ``NVML`` for the fingerprint stage's gpu check before any model loads,
            ``the probe`` for its tpu check).
        tpu: the host's ``tpu`` section (:func:`tpu_section`), quoted in a tpu case's message (None: not read).

    Returns:
        ``"case X asks for device gpu; this host has none visible (CUDA_VISIBLE_DEVICES=<unset>, TF sees [CPU])"``,
        for tpu ``"... device tpu; this host has none visible (TPU chips on PCI: 0, TPU device nodes (...): none;
        TF sees [CPU])"``, or None.

    Raises:
        ValueError: ``device`` is not auto, cpu, gpu or tpu.
    """
    if device not in ("auto", *KINDS):
        raise ValueError(f"device {device!r}: expected auto, cpu, gpu or tpu")
    if device in ("auto", "cpu") or _TF_TYPE[device] in seen:
        return None
    if device == "tpu":
        return (
            f"case {case_name} asks for device tpu; this host has none visible "
            f"({_tpu_detail(tpu)}; {who} sees [{', '.join(seen)}])"
        )
    shown = "<unset>" if cuda_visible_devices is None else repr(cuda_visible_devices)
    return (
        f"case {case_name} asks for device {device}; this host has none visible "
        f"(CUDA_VISIBLE_DEVICES={shown}, {who} sees [{', '.join(seen)}])"
    )


def hidden_gpus_env(device: str, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The runner process's environment for a case on ``device``: for ``cpu``, ``environ`` (default this
    process's) with ``CUDA_VISIBLE_DEVICES=""`` (CUDA and NVML's probe then show no GPU); None (the runner's
    own environment, unchanged) for auto, gpu and tpu."""
    if device != "cpu":
        return None
    return {**(os.environ if environ is None else environ), "CUDA_VISIBLE_DEVICES": ""}


def section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """Section ``name`` of fingerprint record ``data`` (``gpu``, ``host``, ...); an empty mapping where it is
    missing or not a mapping."""
    got = data.get(name)
    return got if isinstance(got, Mapping) else {}


def nvml_seen(data: Mapping[str, Any]) -> list[str]:
    """The device types a fingerprint record shows (TF's names): ``CPU``, then one ``GPU`` per visible GPU
    (``gpu.count``, NVML's GPUs in ``CUDA_VISIBLE_DEVICES``; a count that is not a number adds none)."""
    count = section(data, "gpu").get("count")
    return ["CPU", *["GPU"] * (count if isinstance(count, int) else 0)]


def host_seen(data: Mapping[str, Any]) -> list[str]:
    """:func:`nvml_seen` and one ``TPU`` per usable TPU chip of the record's ``tpu`` section (``tpu.count``,
    :func:`tpu_section`; a record without one, taken before perfwatch read TPUs, shows none)."""
    count = section(data, "tpu").get("count")
    return [*nvml_seen(data), *["TPU"] * (count if isinstance(count, int) else 0)]


def cpu_only_tensorflow(data: Mapping[str, Any]) -> str | None:
    """Why the runner's TensorFlow of fingerprint record ``data`` cannot use a GPU, or None (a CUDA build, or not
    known): its ``tensorflow.build.is_cuda_build`` (``tf.sysconfig.get_build_info()``, read by the probe without
    importing TF) is False, e.g. the ``tensorflow-cpu`` wheel."""
    tf = section(data, "tensorflow")
    build = tf.get("build")
    if not isinstance(build, Mapping) or build.get("is_cuda_build") is not False:
        return None
    return (
        f"the runner's TensorFlow ({tf.get('version', 'unknown version')}) is a build without CUDA "
        "(tf.sysconfig build_info is_cuda_build: False, e.g. the tensorflow-cpu wheel): install tensorflow[and-cuda] "
        "in the runner's environment (make gpu-runner, docs/gpu.md)"
    )


def device_section(requested: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint's ``device`` section: which device measured a run on the host of record ``data``.

    ``requested`` is ``Case.device``; ``kind`` the device measured (the requested one, or for ``auto`` a GPU
    where the record shows one, else the CPU: TF places ops on a visible GPU first); ``names`` that device's
    models (``gpu.devices.*.name``, or ``host.cpu_model``). ``kind`` enters the comparability key when a
    device was requested (tasks.analysis.environment): a cpu run on a GPU host and a gpu run there never
    share a history, and the keys of runs that requested none are what they were.
    """
    kind, note = requested, None
    if requested == "auto":
        kind = "gpu" if "GPU" in nvml_seen(data) else "cpu"
        if kind == "gpu" and (why := cpu_only_tensorflow(data)) is not None:
            kind, note = "cpu", f"device auto measured the CPU although NVML sees a GPU: {why}"
    if kind == "gpu":
        names = [d.get("name") for d in section(data, "gpu").get("devices") or [] if isinstance(d, Mapping)]
    elif kind == "cpu":
        names = [section(data, "host").get("cpu_model", "unknown")]
    else:
        names = [f"TPU {v}" for v in section(data, "tpu").get("versions") or []]  # the chips' PCI ids
    out = {"requested": requested, "kind": kind, "names": names}
    return out if note is None else {**out, "note": note}


def select(device: str, case_name: str) -> list[str]:
    """In the runner, after ``import tensorflow`` and before TF initialises its devices: for a ``cpu`` case hide
    the GPUs from TF (``tf.config.set_visible_devices([], "GPU")``), so the CPU is measured; for ``gpu`` and
    ``tpu`` check that TF sees one (:func:`refusal`; a gpu refusal by a TF built without CUDA says so).
    Returns the device types TF sees (``CPU``, ``GPU``, ...).

    Raises:
        tasks.runner.protocol.RunnerError: the case's device kind is not visible to TF here (the message names
            the case, what TF sees and, for gpu, ``CUDA_VISIBLE_DEVICES``; for tpu, the TPU chips and device nodes
            of :func:`tpu_section`), before any model is loaded.
    """
    import tensorflow as tf

    from tasks.runner.protocol import RunnerError

    if device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        seen = [d.device_type for d in tf.config.get_visible_devices()]
    else:
        seen = [d.device_type for d in tf.config.list_physical_devices()]
    tpu = tpu_section() if device == "tpu" else None
    if (why := refusal(case_name, device, seen, os.environ.get("CUDA_VISIBLE_DEVICES"), tpu=tpu)) is not None:
        if device == "gpu" and not tf.test.is_built_with_cuda():
            why += (
                f"; this TensorFlow ({tf.__version__}) is a build without CUDA (tf.test.is_built_with_cuda() is False, "
                "e.g. the tensorflow-cpu wheel): install tensorflow[and-cuda] in the runner's environment "
                "(make gpu-runner, docs/gpu.md)"
            )
        raise RunnerError(why)
    return seen
