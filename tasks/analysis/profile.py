"""The parsed profile as plain values: xprof's tables normalised, and the check of the profiled window
against the measured steps it stands for (``cross_check``).

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

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field
from scipy import stats as scipy_stats

from tasks.records import OP_STATS_COLUMNS as OP_STATS_COLUMNS

IDLE_OP = "IDLE"
#: framework_op_stats keeps at most this many rows (IDLE included), the ops with most self-time; seen on the
#: demo model (499 ops + IDLE), where smaller ops are dropped.
XPROF_MAX_OP_ROWS = 500


def op_table_capped(n_ops: int, idle_rows: int) -> bool:
    """Whether a framework_op_stats table was cut at xprof's cap (:data:`XPROF_MAX_OP_ROWS` rows, IDLE included):
    ``n_ops`` op rows (IDLE excluded, as the parse stage keeps them) and ``idle_rows`` IDLE rows (one per Host /
    Device side, the keys of ``idle_time_us``) fill it. Then every op with less self-time than the table's smallest
    was dropped: an op missing from it may be below that cut rather than gone (``tasks.analysis.attribution``)."""
    return n_ops + idle_rows >= XPROF_MAX_OP_ROWS


#: xprof step-table column id -> our name (all values in ms).
STEP_COLUMNS = {
    "stepnum": "step",
    "stepTimeMs": "step_time_ms",
    "deviceComputeTimeMs": "device_compute_ms",
    "deviceToDeviceTimeMs": "device_to_device_ms",
    "deviceCollectivesTimeMs": "device_collectives_ms",
    "hostComputeTimeMs": "host_compute_ms",
    "kernelLaunchTimeMs": "kernel_launch_ms",
    "infeedTimeMs": "input_ms",
    "outfeedTimeMs": "output_ms",
    "compileTimeMs": "compile_ms",
    "otherTimeMs": "other_ms",
}
#: xprof tf.data stage-table column id -> our name (times in ms, shares as fractions 0..1).
INPUT_OP_COLUMNS = {
    "opName": "op_name",
    "count": "count",
    "timeInMs": "total_time_ms",
    "timeInPercent": "total_time_share",
    "selfTimeInMs": "self_time_ms",
    "selfTimeInPercent": "self_time_share",
    "category": "category",
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
    #: step numbers of the step markers in the trace (``tasks.stages.parse.marker_steps``), looked up only when
    #: xprof found no steps in a profile the perfwatch runner marked; None: not looked (a user job's profile)
    marker_steps: list[int] | None = None
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
    #: all-reduce / collective time per step (``tasks.analysis.collectives.collective_time``); None: not parsed
    collectives: dict[str, Any] | None = None
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


#: Confidence of the band a profiled window's median step time must lie in (``window_band``).
WINDOW_BAND_CONFIDENCE = 0.99
#: Profiler overhead allowed on top of that band (fraction): the profiler's own tracing makes each profiled
#: step slower. Measured on this 2-core CPU host at load 2-5 (runner ``profile`` mode, 200 measured + 5
#: profiled steps): window median / measured median 1.05-1.13 on the demo MobileNetV2 (about 500 ops),
#: 0.62-1.13 on a 7-layer CNN (where the host's load, not the profiler, set the spread).
PROFILER_OVERHEAD_ALLOWANCE = 0.15
#: Fewest measured steps whose distribution a window is checked against (fewer: not checked).
MIN_CHECK_MEASURED_STEPS = 20


def window_band(
    measured_ms: Sequence[float], n: int, confidence: float = WINDOW_BAND_CONFIDENCE
) -> tuple[float, float]:
    """Where the median of ``n`` more steps falls, ``confidence`` of the time, if those steps are drawn from the
    same distribution as ``measured_ms``: a distribution-free prediction interval (ms).

    For n steps from a continuous distribution F, the k-th smallest has ``F(X_(k)) ~ Beta(k, n + 1 - k)``
    (David & Nagaraja, *Order Statistics*, 3rd ed., sec. 2.2); the median lies between ``X_(floor((n+1)/2))``
    and ``X_(floor(n/2)+1)``. The band is the measured steps' empirical quantiles (``numpy.quantile``) at the
    ``(1 - confidence) / 2`` quantile of the first's Beta and the ``(1 + confidence) / 2`` quantile of the
    second's (``scipy.stats.beta``): for n = 5 at 99%, the 8.3rd to 91.7th percentiles of the measured steps.
    Consecutive steps are correlated on a busy host, so a real window strays more often than this says: a flag
    means the window ran outside the bulk of the measured steps, not that the host misbehaved.

    Raises ValueError when ``measured_ms`` is empty or ``n < 1`` or ``confidence`` is outside (0, 1).
    """
    if n < 1:
        raise ValueError(f"n = {n}: a window has at least 1 step")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence}: must be in (0, 1)")
    if len(measured_ms) == 0:
        raise ValueError("measured_ms is empty: need the measured steps' times (ms)")
    lo_k, hi_k = (n + 1) // 2, n // 2 + 1
    lo_p = float(scipy_stats.beta.ppf((1 - confidence) / 2, lo_k, n + 1 - lo_k))
    hi_p = float(scipy_stats.beta.ppf((1 + confidence) / 2, hi_k, n + 1 - hi_k))
    lo, hi = np.quantile(np.asarray(measured_ms, dtype=float), [lo_p, hi_p])
    return float(lo), float(hi)


class CrossCheck(BaseModel):
    """Is the profiled window representative of the measured steps it stands for?

    The profiled window (``window_*``: the runner's timer over the profiled steps, ms; ``profiler_*``: xprof's
    per-step step times over the same window, overview_page, ms) is compared with the distribution of the
    measured steps (profiler OFF, runner's timer, ms): each window median must lie in ``window_band`` of the
    measured steps for a window of its length, the upper end raised by ``overhead_allowance`` for the
    profiler's own cost. ``overhead_ratio`` = window median / measured median (the profiler overhead, plus
    whatever the host did meanwhile); ``profiler_vs_timer`` = xprof's median / the runner's over the same
    steps (a parse check: far from 1 means xprof split the steps differently).

    ``representative``: True when every known window median is inside its band, False when one is not,
    None when it cannot be checked (fewer than ``MIN_CHECK_MEASURED_STEPS`` measured steps).
    """

    measured_steps: int
    measured_median_ms: float
    window_steps: int
    window_median_ms: float
    overhead_ratio: float
    band_low_ms: float | None
    band_high_ms: float | None  # already raised by overhead_allowance
    window_inside: bool | None
    profiler_steps: int = 0
    profiler_avg_step_ms: float | None = None  # xprof overview_page average over the window
    profiler_median_ms: float | None = None  # median of xprof's per-step step times; None without steps
    profiler_ratio: float | None = None  # profiler_median_ms / measured_median_ms
    profiler_band_low_ms: float | None = None
    profiler_band_high_ms: float | None = None
    profiler_inside: bool | None = None
    profiler_vs_timer: float | None = None
    confidence: float = WINDOW_BAND_CONFIDENCE
    overhead_allowance: float = PROFILER_OVERHEAD_ALLOWANCE
    representative: bool | None
    message: str


def _positive(values: Sequence[float], name: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise ValueError(f"{name} is empty: expected a list of positive step times (ms)")
    bad = [(i, v) for i, v in enumerate(out) if not (math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"{name}[{bad[0][0]}] = {bad[0][1]!r}: step times must be finite and > 0 ms")
    return out


def cross_check(
    measured_step_ms: Sequence[float],
    runner_profiled_step_ms: Sequence[float],
    profiler_step_ms: Sequence[float] = (),
    *,
    profiler_avg_step_ms: float | None = None,
    confidence: float = WINDOW_BAND_CONFIDENCE,
    overhead_allowance: float = PROFILER_OVERHEAD_ALLOWANCE,
) -> CrossCheck:
    """Check the profiled window against the measured steps (see ``CrossCheck``; all times ms).

    ``measured_step_ms``: the measured steps (profiler off, runner's timer); ``runner_profiled_step_ms``: the
    profiled window's steps (runner's timer); ``profiler_step_ms``: xprof's per-step step times over the same
    window (overview_page step table; empty when xprof found no step markers, then only the runner's window is
    checked); ``profiler_avg_step_ms``: xprof's average, recorded as given.

    Raises ValueError when ``measured_step_ms`` or ``runner_profiled_step_ms`` is empty or holds a non-positive
    or non-finite value, or ``overhead_allowance`` is negative. xprof step times of 0 (a step xprof could not
    time) are left out, never treated as a time.
    """
    if not overhead_allowance >= 0:
        raise ValueError(f"overhead_allowance = {overhead_allowance}: must be >= 0")
    measured = _positive(measured_step_ms, "measured_step_ms")
    window = _positive(runner_profiled_step_ms, "runner_profiled_step_ms")
    prof = [float(v) for v in profiler_step_ms if v is not None and math.isfinite(v) and v > 0]
    med = statistics.median(measured)
    w_med = statistics.median(window)
    check = len(measured) >= MIN_CHECK_MEASURED_STEPS

    def inside(x: float, n: int) -> tuple[float | None, float | None, bool | None]:
        if not check:
            return None, None, None
        lo, hi = window_band(measured, n, confidence)
        hi *= 1 + overhead_allowance
        return lo, hi, lo <= x <= hi

    lo, hi, w_in = inside(w_med, len(window))
    p_med = statistics.median(prof) if prof else None
    p_lo, p_hi, p_in = inside(p_med, len(prof)) if p_med is not None else (None, None, None)
    representative = None if not check else bool(w_in and p_in is not False)
    ratio = w_med / med
    parts = [
        f"profiled window ({len(window)} steps, runner timer) median {w_med:.3f} ms = {ratio:.3f}x the "
        f"measured median {med:.3f} ms ({len(measured)} steps, profiler off)"
    ]
    if check:
        parts.append(
            f"{confidence:.0%} band for a {len(window)}-step median [{lo:.3f}, {hi:.3f}] ms (upper end "
            f"+{overhead_allowance:.0%} for profiler overhead): {'inside' if w_in else 'OUTSIDE'}"
        )
    if p_med is not None:
        parts.append(
            f"xprof's per-step median {p_med:.3f} ms ({len(prof)} steps) = {p_med / med:.3f}x"
            + (f": {'inside' if p_in else 'OUTSIDE'} [{p_lo:.3f}, {p_hi:.3f}] ms" if check else "")
            + f"; xprof/runner over the window {p_med / w_med:.3f}"
        )
    else:
        parts.append("xprof reported no per-step times: only the runner's window checked")
    if not check:
        verdict = f"not checked ({len(measured)} measured steps, need {MIN_CHECK_MEASURED_STEPS})"
    else:
        verdict = "representative" if representative else "NOT representative of the measured steps"
    return CrossCheck(
        measured_steps=len(measured),
        measured_median_ms=med,
        window_steps=len(window),
        window_median_ms=w_med,
        overhead_ratio=ratio,
        band_low_ms=lo,
        band_high_ms=hi,
        window_inside=w_in,
        profiler_steps=len(prof),
        profiler_avg_step_ms=profiler_avg_step_ms if profiler_avg_step_ms and profiler_avg_step_ms > 0 else None,
        profiler_median_ms=p_med,
        profiler_ratio=p_med / med if p_med is not None else None,
        profiler_band_low_ms=p_lo,
        profiler_band_high_ms=p_hi,
        profiler_inside=p_in,
        profiler_vs_timer=p_med / w_med if p_med is not None else None,
        confidence=confidence,
        overhead_allowance=overhead_allowance,
        representative=representative,
        message="; ".join(parts) + f": {verdict}.",
    )
