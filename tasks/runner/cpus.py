"""The CPUs this process may use and the threads it runs: affinity, cgroup CPU quota, TF's thread settings,
and the CPU's fp16/bf16 instructions. Standard library only (the probe reads these without TensorFlow).

* **affinity**: ``os.sched_getaffinity(0)``, the CPUs the kernel lets this process run on (``taskset -c 0``
  gives ``[0]``); children inherit it, so the probe and the runner see the same set.
* **cgroup CPU quota**: cgroup v2 ``cpu.max`` (``"<quota_us> <period_us>"`` or ``"max <period_us>"``), else v1
  ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (``-1``: no limit), of this process's cgroup and each of its
  ancestors up to the mount (the lowest limit binds), found through ``/proc/self/cgroup`` and
  ``/proc/self/mountinfo``. A container with ``--cpus 1.5`` reads ``1.5`` CPUs.
* **usable CPUs**: the smaller of the affinity count and the quota in CPUs (a float where the quota is not
  whole): what a step can use at most, and what changes its speed.
* **threads**: TF's intra-/inter-op thread pools as configured (``TF_NUM_INTRAOP_THREADS`` /
  ``TF_NUM_INTEROP_THREADS``; 0 or unset: TF's default, one thread per CPU of the affinity set,
  TF's ``port::MaxParallelism``, which ignores the cgroup quota) and, in the runner, as TF reports them
  (``tf.config.threading.get_intra_op_parallelism_threads`` / ``get_inter_op_parallelism_threads``, 0: default).
* **fp16/bf16 instructions**: the flags of ``/proc/cpuinfo`` that do float16 / bfloat16 arithmetic in hardware
  (:data:`PRECISION_FLAGS`); without them TF emulates the type with float32 conversions, slower than float32.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

ABSENT = "absent"  # as in tasks.runner.probe

#: /proc/cpuinfo flags that compute in float16 / bfloat16 (x86: AVX-512 FP16/BF16, AMX; Arm: asimdhp, bf16)
PRECISION_FLAGS: tuple[str, ...] = ("avx512_fp16", "avx512_bf16", "amx_bf16", "amx_fp16", "amx_tile", "asimdhp", "bf16")


def affinity() -> list[int] | None:
    """The CPU indices this process may run on, sorted (``os.sched_getaffinity(0)``); None where the OS has
    no affinity call (macOS)."""
    getter = getattr(os, "sched_getaffinity", None)
    return sorted(getter(0)) if getter is not None else None


def cpu_ranges(cpus: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2,5"`` (the kernel's cpulist format, as ``taskset -c`` takes it)."""
    out: list[str] = []
    for c in sorted(set(cpus)):
        if out and (last := out[-1].split("-"))[-1] == str(c - 1):
            out[-1] = f"{last[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """cgroup mounts of ``/proc/self/mountinfo``: (fstype, root inside the hierarchy, mount point, options)."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and tail and tail[0] in ("cgroup", "cgroup2"):
            out.append((tail[0], fields[3], fields[4], set(tail[-1].split(",")) if len(tail) >= 3 else set()))
    return out


def _levels(mount_point: str, mount_root: str, path: str) -> list[Path]:
    """This cgroup's directory under the mount and its ancestors up to the mount point, lowest first."""
    rel = path if mount_root == "/" else (path[len(mount_root) :] if path.startswith(mount_root) else "/")
    parts = [p for p in rel.split("/") if p]
    return [Path(mount_point, *parts[:i]) for i in range(len(parts), -1, -1)]


def _read_limit(d: Path, version: str) -> tuple[int, int] | None:
    """(quota_us, period_us) of cgroup directory ``d``, or None where it sets no limit or has no such file."""
    with contextlib.suppress(OSError, ValueError):
        if version == "v2":
            quota, period = (d / "cpu.max").read_text().split()
            return None if quota == "max" else (int(quota), int(period))
        quota_us = int((d / "cpu.cfs_quota_us").read_text())
        return None if quota_us < 0 else (quota_us, int((d / "cpu.cfs_period_us").read_text()))
    return None


def cgroup_cpu_quota(proc: str | Path = "/proc/self") -> dict[str, Any]:
    """This process's cgroup CPU limit: ``{"version": "v2"|"v1", "quota_us", "period_us", "cpus", "path"}`` of the
    level whose limit is lowest (``cpus`` = quota / period, e.g. 1.5), or ``{"version": ..., "cpus": "absent"}``
    when no level sets one, or ``{"version": "absent", "cpus": "absent"}`` without cgroups. ``proc``: where to read
    ``cgroup`` and ``mountinfo`` (a test's fake tree; the mount points in it are read as written).

    Raises:
        OSError: ``proc``'s files exist but cannot be read (the probe records it as "unknown: ...").
    """
    proc = Path(proc)
    try:
        cgroups = (proc / "cgroup").read_text().splitlines()
        mounts = _mounts((proc / "mountinfo").read_text())
    except FileNotFoundError:
        return {"version": ABSENT, "cpus": ABSENT}
    found: list[tuple[str, Path]] = []
    for line in cgroups:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        for fstype, root, point, opts in mounts:
            if hid == "0" and controllers == "" and fstype == "cgroup2":
                found += [("v2", d) for d in _levels(point, root, path)]
            elif fstype == "cgroup" and "cpu" in controllers.split(",") and "cpu" in opts:
                found += [("v1", d) for d in _levels(point, root, path)]
    version = found[0][0] if found else ABSENT
    best: dict[str, Any] = {"version": version, "cpus": ABSENT}
    for ver, d in found:
        if (limit := _read_limit(d, ver)) is not None and limit[1] > 0:
            cpus = limit[0] / limit[1]
            if best["cpus"] == ABSENT or cpus < best["cpus"]:
                best = {"version": ver, "quota_us": limit[0], "period_us": limit[1], "cpus": cpus, "path": str(d)}
    return best


def usable_cpus(cpus_allowed: list[int] | None, quota_cpus: float | None, logical: int | None) -> int | float:
    """CPUs a step can use at most: the fewest of the affinity set's size, the cgroup quota (CPUs, may be
    fractional, e.g. 1.5) and the host's ``logical`` CPUs (when the others are unknown). An int when whole."""
    bounds = [float(n) for n in (len(cpus_allowed) if cpus_allowed else None, quota_cpus, logical) if n]
    best = min(bounds) if bounds else 1.0
    return int(best) if float(best).is_integer() else round(best, 3)


def _env_int(environ: dict[str, str] | os._Environ[str], name: str) -> int | str:
    raw = environ.get(name, "").strip()
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        return f"unknown: {name}={raw!r} is not a whole number (TF ignores it)"


def thread_settings(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """TF's thread pools as configured in the environment and what TF makes of it when unset:
    ``{"tf_intra_op_configured", "tf_inter_op_configured"}`` (from ``TF_NUM_INTRAOP_THREADS`` /
    ``TF_NUM_INTEROP_THREADS``; 0: TF's default) and ``tf_default_threads`` (TF's default pool size: one
    thread per CPU of the affinity set, ``port::MaxParallelism``; the cgroup quota does not lower it, so a
    quota under the affinity count oversubscribes the quota)."""
    env = os.environ if environ is None else environ
    allowed = affinity()
    return {
        "tf_intra_op_configured": _env_int(env, "TF_NUM_INTRAOP_THREADS"),
        "tf_inter_op_configured": _env_int(env, "TF_NUM_INTEROP_THREADS"),
        "tf_default_threads": len(allowed) if allowed else (os.cpu_count() or 1),
    }


def cpu_facts(logical: int | None = None, proc: str | Path = "/proc/self") -> dict[str, Any]:
    """The CPU set of this process, as the fingerprint and the run's load record keep it: ``cpu_affinity``
    (``"0-1"``, or "absent"), ``cpu_affinity_count``, ``cgroup_cpu_quota`` (:func:`cgroup_cpu_quota`) and
    ``cpu_count_usable`` (:func:`usable_cpus`; ``logical`` defaults to ``os.cpu_count()``). A cgroup that
    cannot be read is ``"unknown: <error>"`` and then bounds nothing."""
    allowed = affinity()
    try:
        quota: dict[str, Any] | str = cgroup_cpu_quota(proc)
    except OSError as exc:
        quota = f"unknown: {type(exc).__name__}: {exc}"
    quota_cpus = quota.get("cpus") if isinstance(quota, dict) else None
    quota_cpus = quota_cpus if isinstance(quota_cpus, int | float) else None
    return {
        "cpu_affinity": cpu_ranges(allowed) if allowed else ABSENT,
        "cpu_affinity_count": len(allowed) if allowed else ABSENT,
        "cgroup_cpu_quota": quota,
        "cpu_count_usable": usable_cpus(allowed, quota_cpus, logical or os.cpu_count()),
    }


def precision_flags(cpuinfo: str | None = None) -> dict[str, bool] | str:
    """Which of :data:`PRECISION_FLAGS` the first CPU of ``/proc/cpuinfo`` (or the text ``cpuinfo``) lists
    (its ``flags``, on Arm ``Features``, line): ``{"avx512_bf16": True, ...}``; "absent" where there is no
    such line (no /proc/cpuinfo: macOS, Windows)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ABSENT
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            have = set(value.split())
            return {f: f in have for f in PRECISION_FLAGS}
    return ABSENT
