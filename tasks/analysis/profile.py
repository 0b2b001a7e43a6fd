"""The parsed profile as plain values: xprof's tables normalised, and the timer cross-check.

``ParsedProfile`` is what the parse stage (``tasks.stages.parse``, xprof's converters) produces and
what ``diagnose`` and ``attribution`` read. Units: ``*_ms`` milliseconds, ``*_us`` microseconds,
``*_bytes`` bytes, ``*_pct`` percent (0..100), ``*_share`` fractions (0..1); ``None`` means unknown or
absent, never zero.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

IDLE_OP = "IDLE"
#: framework_op_stats keeps at most this many rows (IDLE included), the ops with most self-time; seen on the
#: demo model (499 ops + IDLE), where smaller ops are dropped.
XPROF_MAX_OP_ROWS = 500
OP_STATS_COLUMNS = ["host_or_device", "op_type", "op_name", "occurrences", "total_self_time_us",
                    "avg_self_time_us", "self_time_share"]
#: xprof step-table column id -> our name (all values in ms).
STEP_COLUMNS = {
    "stepnum": "step", "stepTimeMs": "step_time_ms", "deviceComputeTimeMs": "device_compute_ms",
    "deviceToDeviceTimeMs": "device_to_device_ms", "deviceCollectivesTimeMs": "device_collectives_ms",
    "hostComputeTimeMs": "host_compute_ms", "kernelLaunchTimeMs": "kernel_launch_ms",
    "infeedTimeMs": "input_ms", "outfeedTimeMs": "output_ms", "compileTimeMs": "compile_ms",
    "otherTimeMs": "other_ms",
}
#: xprof tf.data stage-table column id -> our name (times in ms, shares as fractions 0..1).
INPUT_OP_COLUMNS = {
    "opName": "op_name", "count": "count", "timeInMs": "total_time_ms", "timeInPercent": "total_time_share",
    "selfTimeInMs": "self_time_ms", "selfTimeInPercent": "self_time_share", "category": "category",
}



class SkippedTool(BaseModel):
    tool: str
    reason: str


class Diagnostic(BaseModel):
    """A diagnostic emitted by xprof itself (overview_page / input_pipeline_analyzer tables)."""

    tool: str
    severity: str
    message: str


class ParsedProfile(BaseModel):
    """Normalised result of one parse. Tables are JSON-safe lists of records; ``*_frame()`` give DataFrames.

    Units: ``*_ms`` milliseconds, ``*_us`` microseconds, ``*_bytes`` bytes, ``*_pct`` percent (0..100),
    ``*_share`` fractions (0..1). ``None`` means unknown / absent, never zero.
    """

    profile_dir: str
    xplane_paths: list[str]
    xplane_bytes: int
    hosts: list[str]
    hardware_type: str | None = None  # overview_page run environment, e.g. "CPU_ONLY", "GPU"
    device_type: str | None = None  # overview_page, e.g. "CPU", "GPU"
    device_core_count: int | None = None  # overview_page; 0 on CPU-only profiles (no device planes)
    num_steps: int = 0  # steps xprof found (rows of the step table)
    avg_step_time_ms: float | None = None  # mean of overview_page per-step "Step time"; None without steps
    step_time_stddev_ms: float | None = None
    step_breakdown: list[dict[str, Any]] = Field(default_factory=list)  # per step: int step + ms columns
    breakdown_avg_ms: dict[str, float] | None = None  # mean of each breakdown column, ms
    input_bound_pct: float | None = None  # 100 * Σ input ms / Σ step ms (xprof's input-bound share)
    bottleneck: str | None = None  # overview_page classification: "host" | "both" | "device" | "unknown"
    conclusion: str | None = None  # overview_page input conclusion text
    recommendation: str | None = None  # overview_page "next step" text
    statements: list[str] = Field(default_factory=list)  # other overview_page bottleneck statements
    device_idle_pct: float | None = None  # overview_page "device idle time" (%), None without a device
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    op_stats: list[dict[str, Any]] = Field(default_factory=list)  # OP_STATS_COLUMNS records, IDLE excluded
    idle_time_us: dict[str, float] = Field(default_factory=dict)  # framework_op_stats IDLE per Host/Device, µs
    input_steps: list[dict[str, Any]] = Field(default_factory=list)  # input_pipeline_analyzer, per step, ms
    input_ops: list[dict[str, Any]] = Field(default_factory=list)  # tf.data stage table, INPUT_OP_COLUMNS
    input_time_breakdown_us: dict[str, float] | None = None  # enqueue/preprocessing/file-read totals, µs
    input_recommendations: list[str] = Field(default_factory=list)
    memory: list[dict[str, Any]] | None = None  # per host+allocator peaks (bytes); None when absent
    memory_absent_reason: str | None = None
    kernel_stats: list[dict[str, Any]] | None = None  # GPU kernels (µs); None when absent
    kernel_stats_absent_reason: str | None = None
    skipped_tools: list[SkippedTool] = Field(default_factory=list)
    parse_seconds: float = 0.0

    @property
    def has_device(self) -> bool:
        """True when the profile has accelerator (device) planes."""
        return bool(self.device_core_count) and self.hardware_type not in (None, "CPU_ONLY")

    def step_breakdown_frame(self) -> pd.DataFrame:
        """overview_page per-step breakdown: ``step`` (int) + STEP_COLUMNS values (ms)."""
        return pd.DataFrame(self.step_breakdown, columns=list(STEP_COLUMNS.values()))

    def op_stats_frame(self) -> pd.DataFrame:
        """framework_op_stats, columns OP_STATS_COLUMNS (self-times µs over the window, share 0..1)."""
        return pd.DataFrame(self.op_stats, columns=OP_STATS_COLUMNS)

    def input_steps_frame(self) -> pd.DataFrame:
        """input_pipeline_analyzer per-step input breakdown, same columns as the step breakdown (ms)."""
        return pd.DataFrame(self.input_steps, columns=list(STEP_COLUMNS.values()))

    def input_ops_frame(self) -> pd.DataFrame:
        """input_pipeline_analyzer tf.data stage table, INPUT_OP_COLUMNS values (ms; shares 0..1)."""
        return pd.DataFrame(self.input_ops, columns=list(INPUT_OP_COLUMNS.values()))

    def memory_frame(self) -> pd.DataFrame | None:
        """memory_profile peaks per host and allocator (bytes); None when absent (see the reason)."""
        return None if self.memory is None else pd.DataFrame(self.memory)

    def kernel_stats_frame(self) -> pd.DataFrame | None:
        """kernel_stats GPU kernel table (durations µs); None when absent (see the reason)."""
        return None if self.kernel_stats is None else pd.DataFrame(self.kernel_stats)


class CrossCheck(BaseModel):
    """xprof's average step time vs. the runner's own timer over the same profiled window."""

    profiler_avg_step_ms: float | None
    runner_mean_step_ms: float
    ratio: float | None  # profiler / runner; None when xprof has no step time
    tolerance: float  # allowed |ratio - 1|
    agrees: bool | None  # None when it cannot be checked
    message: str



def cross_check(profiler_avg_step_ms: float | None, runner_profiled_step_ms: Sequence[float],
                tolerance: float = 0.25) -> CrossCheck:
    """Compare xprof's average step time (ms, overview_page) with the runner's own timer (ms) over the
    profiled window: ``ratio = profiler / mean(runner)``; they agree when ``|ratio - 1| <= tolerance``.

    ``agrees`` is None when xprof has no step time (no step markers). Raises ValueError when the
    runner's list is empty or holds non-positive / non-finite values, or tolerance is negative.
    """
    if tolerance < 0:
        raise ValueError("tolerance must be >= 0")
    steps = [float(s) for s in runner_profiled_step_ms]
    if not steps or any(not math.isfinite(s) or s <= 0 for s in steps):
        raise ValueError("runner_profiled_step_ms must be a non-empty list of positive step times (ms)")
    runner = statistics.fmean(steps)
    if profiler_avg_step_ms is None or not profiler_avg_step_ms > 0:
        return CrossCheck(profiler_avg_step_ms=None, runner_mean_step_ms=runner, ratio=None,
                          tolerance=tolerance, agrees=None,
                          message="xprof reported no step time (no step markers?); cannot cross-check")
    ratio = profiler_avg_step_ms / runner
    agrees = abs(ratio - 1.0) <= tolerance
    return CrossCheck(
        profiler_avg_step_ms=profiler_avg_step_ms, runner_mean_step_ms=runner, ratio=ratio,
        tolerance=tolerance, agrees=agrees,
        message=(f"xprof avg step {profiler_avg_step_ms:.3f} ms vs runner mean {runner:.3f} ms: "
                 f"ratio {ratio:.3f} ({'within' if agrees else 'OUTSIDE'} ±{tolerance:.0%})"))
