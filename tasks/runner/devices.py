"""The device kind a case runs on (``Case.device``: auto, cpu, gpu, tpu), checked where it is measured.

Pure functions over what the measuring host shows (no TensorFlow import here; the runner passes in what TF
sees, the fingerprint stage what NVML sees), stdlib only, so they load in a bare TF/GPU venv:

* :func:`refusal`: why a ``gpu`` or ``tpu`` case cannot run here (none visible), or None. The runner
  refuses such a case instead of silently measuring the CPU.
* :func:`hidden_gpus_env`: the environment of a ``cpu`` case's runner process, the GPUs hidden from CUDA
  (``CUDA_VISIBLE_DEVICES=""``), so a cpu case on a GPU host really measures the CPU; the runner also
  hides them from TF itself (``tf.config.set_visible_devices([], "GPU")``, tasks.runner.process).
* :func:`device_section`: the fingerprint's ``device`` section, which device measured.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

KINDS: tuple[str, ...] = ("cpu", "gpu", "tpu")
"""The device kinds a case may ask for (``Case.device``; ``auto`` asks for none)."""

_TF_TYPE = {"cpu": "CPU", "gpu": "GPU", "tpu": "TPU"}


def refusal(
    case_name: str, device: str, seen: Sequence[str], cuda_visible_devices: str | None, *, who: str = "TF"
) -> str | None:
    """Why case ``case_name`` asking for ``device`` cannot run on this host, or None when it can.

    Args:
        case_name: the case, as the message names it (``<model> <case name>``).
        device: ``Case.device``: ``auto`` and ``cpu`` always run (every host has a CPU).
        seen: the device types visible here, as TF names them (``tf.config.list_physical_devices()``'s
            ``device_type``: ``CPU``, ``GPU``, ``TPU``), one entry per device.
        cuda_visible_devices: the ``CUDA_VISIBLE_DEVICES`` value (None: unset), quoted in the message: an empty
            value hides every GPU.
        who: what saw ``seen`` (``TF``, or ``NVML`` for the fingerprint stage's check before any model loads).

    Returns:
        ``"case X asks for device gpu; this host has none visible (CUDA_VISIBLE_DEVICES=<unset>, TF sees [CPU])"``
        or None.

    Raises:
        ValueError: ``device`` is not auto, cpu, gpu or tpu.
    """
    if device not in ("auto", *KINDS):
        raise ValueError(f"device {device!r}: expected auto, cpu, gpu or tpu")
    if device in ("auto", "cpu") or _TF_TYPE[device] in seen:
        return None
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


def device_section(requested: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint's ``device`` section: which device measured a run on the host of record ``data``.

    ``requested`` is ``Case.device``; ``kind`` the device measured (the requested one, or for ``auto`` a GPU
    where the record shows one, else the CPU: TF places ops on a visible GPU first); ``names`` that device's
    models (``gpu.devices.*.name``, or ``host.cpu_model``). ``kind`` enters the comparability key when a
    device was requested (tasks.analysis.environment): a cpu run on a GPU host and a gpu run there never
    share a history, and the keys of runs that requested none are what they were.
    """
    kind = requested
    if requested == "auto":
        kind = "gpu" if "GPU" in nvml_seen(data) else "cpu"
    if kind == "gpu":
        names = [d.get("name") for d in section(data, "gpu").get("devices") or [] if isinstance(d, Mapping)]
    elif kind == "cpu":
        names = [section(data, "host").get("cpu_model", "unknown")]
    else:
        names = []  # a TPU is named by the runner (TF), not the probe
    return {"requested": requested, "kind": kind, "names": names}


def select(device: str, case_name: str) -> list[str]:
    """In the runner, after ``import tensorflow`` and before TF initialises its devices: for a ``cpu`` case hide
    the GPUs from TF (``tf.config.set_visible_devices([], "GPU")``), so the CPU is measured; for ``gpu`` and
    ``tpu`` check that TF sees one (:func:`refusal`). Returns the device types TF sees (``CPU``, ``GPU``, ...).

    Raises:
        tasks.runner.protocol.RunnerError: the case's device kind is not visible to TF here (the message names
            the case, ``CUDA_VISIBLE_DEVICES`` and what TF sees), before any model is loaded.
    """
    import tensorflow as tf

    from tasks.runner.protocol import RunnerError

    if device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        seen = [d.device_type for d in tf.config.get_visible_devices()]
    else:
        seen = [d.device_type for d in tf.config.list_physical_devices()]
    if (why := refusal(case_name, device, seen, os.environ.get("CUDA_VISIBLE_DEVICES"))) is not None:
        raise RunnerError(why)
    return seen
