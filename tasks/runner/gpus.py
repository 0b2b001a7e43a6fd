"""The GPUs this process may use, as NVML names them, and whether this process holds a context on them.

NVML (pynvml, from nvidia-ml-py) sees every GPU of the host, whatever ``CUDA_VISIBLE_DEVICES`` says; CUDA,
and so TensorFlow, sees only the listed ones, renumbered from 0 in the listed order. Everything perfwatch
reads through NVML for a run (telemetry, energy, the other-process check, the fingerprint's ``gpu``
section) must read only the run's GPUs, under the run's own numbers. This module maps one to the other
with CUDA's documented rules (CUDA C Programming Guide, "CUDA Environment Variables"):

* ``CUDA_VISIBLE_DEVICES`` unset: every GPU; set: a comma-separated list of ordinals, ``GPU-<uuid>``
  prefixes or ``MIG-<uuid>`` instances, read up to the first entry that names no GPU; an empty value (or
  ``-1``) hides every GPU, and so does a list that names one GPU twice (seen on an H200, CUDA 13: the real
  check, ``bench/gpu_check.py``, found CUDA showing no device for ``0,0``).
* Ordinals are CUDA's order, ``CUDA_DEVICE_ORDER``: ``FASTEST_FIRST`` (the default) or ``PCI_BUS_ID``
  (NVML's own index order). Over GPUs of one model the fastest-first order is the PCI bus order; over
  different models it is not knowable from NVML, so an ordinal entry there is refused with the reason
  (name the GPUs by UUID or set ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) rather than read from the wrong card.
* A MIG instance is read on its parent GPU (NVML gives power, clocks, temperature and utilization per
  physical GPU only); :attr:`VisibleGpu.mig_uuid` says so.

:func:`own_context` asks the CUDA driver (``libcuda``, ``cuDevicePrimaryCtxGetState``, through ctypes: no
TensorFlow) whether this process holds the primary context on a GPU: in a container NVML lists host PIDs,
so ``os.getpid()`` is not in its process list and the runner would otherwise count itself as another job.

Stdlib and pynvml only, so it loads in a bare TF/GPU venv and in ``bench/gpu_check.py`` without the project.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VisibleGpu:
    """One GPU this process may use.

    Attributes:
        ordinal: CUDA's device ordinal in this process (``cuda:N``, TF's ``GPU:N``), the ``gpu<N>`` label of
            telemetry rows.
        nvml_index: NVML's index of the physical GPU (PCI bus order; ``nvidia-smi``'s index).
        uuid: NVML's ``GPU-...`` UUID of the physical GPU, or None where NVML did not give one.
        handle: the pynvml device handle of the physical GPU.
        mig_uuid: the ``MIG-...`` instance this process was given on that GPU, or None (a whole GPU).
    """

    ordinal: int
    nvml_index: int
    uuid: str | None
    handle: Any
    mig_uuid: str | None = None

    @property
    def label(self) -> str:
        """The device name of telemetry rows: ``gpu<ordinal>``."""
        return f"gpu{self.ordinal}"


def visible_order(
    spec: str | None,
    uuids: Sequence[Any],
    *,
    names: Sequence[Any] | None = None,
    device_order: str | None = None,
    mig: Mapping[str, int] | None = None,
) -> tuple[list[tuple[int, str | None]] | None, str | None]:
    """The NVML indices this process's CUDA ordinals 0, 1, ... stand for (module docstring's rules).

    Args:
        spec: ``CUDA_VISIBLE_DEVICES`` (None: unset).
        uuids: NVML's UUID of each GPU, by NVML index (``GPU-...``; a non-string, e.g. an "unknown: ..." reading,
            matches no UUID entry).
        names: NVML's name of each GPU, by NVML index: ordinals map to NVML's order only over GPUs of one name,
            or under ``device_order="PCI_BUS_ID"`` (None: taken as one model).
        device_order: ``CUDA_DEVICE_ORDER`` (None: unset, i.e. ``FASTEST_FIRST``).
        mig: ``MIG-...`` UUID -> NVML index of its parent GPU, for MIG entries (None: no MIG instance known).

    Returns:
        ``(order, note)``: ``order`` a list of ``(nvml_index, mig_uuid or None)`` by CUDA ordinal, or None when the
        ordinals cannot be mapped; ``note`` why not, or what is only partly known (None when all is known).
    """
    n = len(uuids)
    mixed = names is not None and len({str(x) for x in names}) > 1
    pci = (device_order or "FASTEST_FIRST").strip().upper() == "PCI_BUS_ID"
    if spec is None:
        note = None
        if mixed and not pci:
            note = (
                "CUDA_DEVICE_ORDER is FASTEST_FIRST over different GPUs: CUDA's ordinals are not NVML's order, "
                "so rows are labelled in NVML's order (set CUDA_DEVICE_ORDER=PCI_BUS_ID to make them agree)"
            )
        return [(i, None) for i in range(n)], note
    order: list[tuple[int, str | None]] = []
    for tok in (t.strip() for t in spec.split(",")):
        if tok.isdigit():
            if mixed and not pci:
                return None, (
                    f"CUDA_VISIBLE_DEVICES={spec!r} names GPUs by ordinal, and CUDA_DEVICE_ORDER is FASTEST_FIRST "
                    "over different GPUs, whose order NVML cannot tell: name them by UUID (nvidia-smi -L) or set "
                    "CUDA_DEVICE_ORDER=PCI_BUS_ID"
                )
            hit: tuple[int, str | None] | None = (int(tok), None) if int(tok) < n else None
        elif tok.startswith("MIG-"):
            found = [(u, p) for u, p in (mig or {}).items() if u.startswith(tok)]
            hit = (found[0][1], found[0][0]) if len(found) == 1 else None
        elif tok.startswith("GPU-"):
            found_i = [i for i, u in enumerate(uuids) if isinstance(u, str) and u.startswith(tok)]
            hit = (found_i[0], None) if len(found_i) == 1 else None
        else:
            hit = None
        if hit in order:
            return [], None  # a repeated GPU: CUDA shows none at all (bench/gpu_check.py, CUDA 13, driver 580)
        if hit is None:
            break  # CUDA stops at the first entry that names no device
        order.append(hit)
    return order, None


def visible_gpus(nv: Any, environ: Mapping[str, str] | None = None) -> tuple[list[VisibleGpu], str | None]:
    """The GPUs of this process (``environ``'s ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``, default
    this process's environment), read through pynvml module ``nv`` after ``nvmlInit``.

    Returns:
        ``(gpus, note)``: ``gpus`` by CUDA ordinal; ``note`` is why there are none (``CUDA_VISIBLE_DEVICES`` hides
        every GPU, the ordinals cannot be mapped) or what is only partly known, else None.

    Raises:
        pynvml.NVMLError: NVML fails to count the GPUs or give a handle (the caller records it).
    """
    env = os.environ if environ is None else environ
    spec, device_order = env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER")
    count = nv.nvmlDeviceGetCount()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [_text(_try(nv.nvmlDeviceGetUUID, h)) for h in handles]
    names = [_text(_try(nv.nvmlDeviceGetName, h)) for h in handles]
    mig = mig_instances(nv, handles) if spec and "MIG-" in spec else None
    order, note = visible_order(spec, uuids, names=names, device_order=device_order, mig=mig)
    if order is None:
        return [], note
    gpus = [VisibleGpu(k, i, uuids[i], handles[i], m) for k, (i, m) in enumerate(order)]
    if not gpus and note is None:
        note = f"no GPU visible to this process (CUDA_VISIBLE_DEVICES={spec!r})" if spec is not None else None
    return gpus, note


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVMLError subclasses: a label that could not be read matches nothing
        return None


def _text(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def mig_instances(nv: Any, handles: Sequence[Any]) -> dict[str, int]:
    """``MIG-...`` UUID -> NVML index of its parent GPU, for every MIG instance NVML shows (``handles`` by NVML
    index; a string there, an "unknown: ..." handle that could not be read, has none)."""
    out: dict[str, int] = {}
    for i, h in enumerate(handles):
        if isinstance(h, str):
            continue
        slots = _try(nv.nvmlDeviceGetMaxMigDeviceCount, h)
        for slot in range(slots if isinstance(slots, int) else 0):
            mig = _try(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, slot)
            uuid = _text(_try(nv.nvmlDeviceGetUUID, mig)) if mig is not None else None
            if isinstance(uuid, str):
                out[uuid] = i
    return out


def own_context(ordinal: int, cuda: Any = None) -> bool | None:
    """Whether this process holds the primary CUDA context of device ``ordinal`` (CUDA's numbering).

    Asks the CUDA driver API, ``cuInit(0)``, ``cuDeviceGet`` and ``cuDevicePrimaryCtxGetState``
    (``active``), the context TensorFlow and PyTorch create; ``cuda`` is the loaded ``libcuda`` (default:
    ``ctypes.CDLL("libcuda.so.1")``). ``cuInit`` loads the driver but creates no context.

    Returns:
        True or False; None when the driver cannot be asked (no libcuda, an error code), which callers treat as
        "not known".
    """
    try:
        lib = cuda if cuda is not None else ctypes.CDLL("libcuda.so.1")
        if lib.cuInit(0) != 0:
            return None
        dev = ctypes.c_int()
        if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            return None
        flags, active = ctypes.c_uint(), ctypes.c_int()
        if lib.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) != 0:
            return None
        return bool(active.value)
    except (OSError, AttributeError):
        return None


def other_processes(
    nv: Any, gpus: Sequence[VisibleGpu], *, pid: int | None = None, cuda: Any = None
) -> dict[str, Any] | None:
    """The processes other than this one on this process's GPUs (compute and graphics, NVML), after ``nvmlInit``.

    A process is this one when NVML lists ``pid`` (default ``os.getpid()``); where it does not although this
    process holds the GPU's primary context (:func:`own_context`: a container whose NVML lists host PIDs),
    one of the listed processes is this one and is not counted.

    Returns:
        ``{"most": N, "own": how}``: ``most`` the most other processes on one of ``gpus``; ``own`` ``"pid"`` (found
        by PID on every GPU it uses), ``"context"`` (not listed by PID: host PIDs, counted by its CUDA context) or
        ``"none"`` (this process is on none of them); None for no GPUs.

    Raises:
        pynvml.NVMLError: NVML fails to list a GPU's processes.
    """
    if not gpus:
        return None
    me = os.getpid() if pid is None else pid
    most, how = 0, set()
    for g in gpus:
        pids = {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(g.handle)}
        pids |= {p.pid for p in nv.nvmlDeviceGetGraphicsRunningProcesses(g.handle)}
        if me in pids:
            others, how_here = len(pids) - 1, "pid"
        elif pids and own_context(g.ordinal, cuda):
            others, how_here = len(pids) - 1, "context"
        else:
            others, how_here = len(pids), "none"
        most = max(most, others)
        how.add(how_here)
    own = "context" if "context" in how else "pid" if "pid" in how else "none"
    return {"most": most, "own": own}
