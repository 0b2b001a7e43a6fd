"""All-reduce / collective time per step, from a parsed xprof profile (``tasks.stages.parse``).

Two sources, both xprof's: on a profile with device planes (GPU), overview_page's per-step
``device_collectives_ms`` (device time in collective kernels, e.g. NCCL all-reduce); everywhere, the
self-time of collective ops in framework_op_stats (``NcclAllReduce``, ``CollectiveReduceV2``,
``CollectiveGatherV2``, ``CollectiveBcast*``, XLA's ``all-reduce``...: :data:`COLLECTIVE_OP`) divided by the
steps xprof found. The op self-time is summed over every device's replica of the op, and includes the
time a replica waits in the collective for the others. ``ms_per_step`` is the device figure where the
profile has one above zero, else the op figure; where the profile has neither (a single-device step,
or no steps found) it is ``None`` with ``absent_reason``: never a zero.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

#: framework op types that are collective communication (TF collectives, NCCL, XLA HLO names)
COLLECTIVE_OP = re.compile(
    r"^(Nccl\w*|Collective\w*|_?HostCollective\w*|AllReduce\w*|AllGather\w*|ReduceScatter\w*|AllToAll\w*"
    r"|all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)",
    re.IGNORECASE,
)


def collective_time(
    op_stats: list[dict[str, Any]], num_steps: int, device_collectives_ms: list[float] | None = None
) -> dict[str, Any]:
    """Collective time per step (ms) of a profiled window (module docstring).

    Args:
        op_stats: framework_op_stats records (``op_type``, ``total_self_time_us`` in µs over the window).
        num_steps: steps xprof found in the window (0: none found).
        device_collectives_ms: overview_page's per-step device collective time (ms), only for profiles with
            device planes (None otherwise: a CPU-only profile's column is not a measurement).

    Returns:
        ``{"ms_per_step", "source", "device_ms_per_step", "op_self_ms_per_step", "ops" (collective op types
        seen), "steps", "absent_reason"}``; figures ``None`` where absent.
    """
    ops = sorted({r["op_type"] for r in op_stats if COLLECTIVE_OP.match(str(r.get("op_type") or ""))})
    out: dict[str, Any] = {
        "ms_per_step": None,
        "source": None,
        "device_ms_per_step": None,
        "op_self_ms_per_step": None,
        "ops": ops,
        "steps": num_steps,
        "absent_reason": None,
    }
    if num_steps <= 0:
        out["absent_reason"] = "xprof found no steps in the profiled window: no per-step figure"
        return out
    if device_collectives_ms and any(x > 0 for x in device_collectives_ms):
        out["device_ms_per_step"] = statistics.fmean(device_collectives_ms)
    if ops:
        total_us = sum(r["total_self_time_us"] for r in op_stats if r["op_type"] in ops)
        out["op_self_ms_per_step"] = total_us / 1000.0 / num_steps
    if out["device_ms_per_step"] is not None:
        out["ms_per_step"], out["source"] = out["device_ms_per_step"], "overview_page device collectives"
    elif out["op_self_ms_per_step"] is not None:
        out["ms_per_step"] = out["op_self_ms_per_step"]
        out["source"] = f"framework_op_stats self-time of {', '.join(ops)}"
    else:
        out["absent_reason"] = (
            "no collective op (all-reduce, all-gather, broadcast) in the profile: a single-device step"
        )
    return out
