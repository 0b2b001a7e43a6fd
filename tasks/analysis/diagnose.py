"""Plain-language findings from a parsed profile, in the spirit of the TF profiler's overview page.

Each finding names the figure that triggered it, its value and the threshold (module constants below).
Figures come from ``tasks.analysis.profile.ParsedProfile`` (xprof overview_page / framework_op_stats), and
for ``diagnose_window`` from the profiled window's check against the measured steps
(``tasks.analysis.profile.CrossCheck``).
"""

from __future__ import annotations

from tasks.analysis.findings import INFO, WARNING, Finding
from tasks.analysis.profile import IDLE_OP, CrossCheck, ParsedProfile

#: Input share of step time (%, overview_page) at/above which the run is HIGHLY input-bound (xprof: 20).
INPUT_BOUND_HIGH_PCT = 20.0
#: Input share of step time (%) at/above which the run is MODERATELY input-bound (xprof: 5).
INPUT_BOUND_MODERATE_PCT = 5.0
#: Host compute + kernel launch share of step time (%) above which a run WITH a device is host-bound.
HOST_BOUND_PCT = 50.0
#: Compilation share of step time (%) above which compile time is called large.
COMPILE_PCT = 10.0
#: One op's share of busy (non-IDLE) self-time (%, framework_op_stats) above which it dominates.
OP_DOMINANT_PCT = 50.0
#: Device idle time (%, overview_page) above which the device is called mostly idle.
DEVICE_IDLE_PCT = 50.0


def _share_pct(avg: dict[str, float], *keys: str) -> float:
    step = avg.get("step_time_ms") or 0.0
    return 100.0 * sum(avg.get(k, 0.0) for k in keys) / step if step > 0 else 0.0


def diagnose(parsed: ParsedProfile, *, gpu_run: bool = False) -> list[Finding]:
    """Return findings for ``parsed`` (possibly empty). Codes: ``no_step_markers`` (a user job's profile
    without steps: says how to mark them), ``steps_not_found`` (xprof found no steps in a profile the runner
    marked, ``parsed.marker_steps`` set: says so, no advice), ``cpu_only`` (no device planes), or for a run that
    measured a GPU (``gpu_run``: the fingerprint's device kind) ``no_device_planes`` (CUPTI not loaded),
    ``device_idle``, ``input_bound``, ``host_bound``, ``compile_time_large``, ``op_dominates``.
    Raises nothing for missing figures: a rule whose figure is unknown is not evaluated."""
    out: list[Finding] = []
    if parsed.avg_step_time_ms is None and parsed.marker_steps is not None:
        out.append(_steps_not_found(parsed.marker_steps))
    elif parsed.avg_step_time_ms is None:
        xprof_says = next((d.message for d in parsed.diagnostics if "step marker" in d.message.lower()), "")
        out.append(
            Finding(
                code="no_step_markers",
                severity=WARNING,
                figure="avg_step_time_ms",
                message=(
                    "The profile has no step markers, so step time and its breakdown are unknown "
                    "(wrap each step in tf.profiler.experimental.Trace('train', step_num=i, _r=1)). " + xprof_says
                ).strip(),
            )
        )
    if not parsed.has_device:
        hardware = f"No device planes (hardware {parsed.hardware_type or 'unknown'})"
        code, severity, message = (
            (
                "no_device_planes",
                WARNING,
                f"{hardware} although this run measured a GPU: the profiler saw the host only, most likely because "
                "the runner could not load CUPTI (libcupti: the nvidia-cuda-cupti wheel of tensorflow[and-cuda], or "
                "the CUDA toolkit's extras/CUPTI on LD_LIBRARY_PATH). Device compute, kernel launch and kernel "
                "statistics are absent; the step times (our timer) are unaffected.",
            )
            if gpu_run
            else (
                "cpu_only",
                INFO,
                f"{hardware}: a CPU-only profile; device compute, kernel launch and kernel statistics are absent.",
            )
        )
        out.append(
            Finding(
                code=code,
                severity=severity,
                figure="device_core_count",
                value=float(parsed.device_core_count or 0),
                message=message,
            )
        )
    elif parsed.device_idle_pct is not None and parsed.device_idle_pct > DEVICE_IDLE_PCT:
        out.append(
            Finding(
                code="device_idle",
                severity=WARNING,
                figure="device_idle_pct",
                value=parsed.device_idle_pct,
                threshold=DEVICE_IDLE_PCT,
                message=f"The device is idle {parsed.device_idle_pct:.1f}% of the time "
                f"(> {DEVICE_IDLE_PCT:.0f}%): it waits for the host or for input.",
            )
        )
    if parsed.input_bound_pct is not None and parsed.input_bound_pct >= INPUT_BOUND_MODERATE_PCT:
        high = parsed.input_bound_pct >= INPUT_BOUND_HIGH_PCT
        level, limit = ("HIGHLY", INPUT_BOUND_HIGH_PCT) if high else ("MODERATELY", INPUT_BOUND_MODERATE_PCT)
        out.append(
            Finding(
                code="input_bound",
                severity=WARNING if high else INFO,
                figure="input_bound_pct",
                value=parsed.input_bound_pct,
                threshold=limit,
                message=f"The run is {level} input-bound: {parsed.input_bound_pct:.1f}% of step time waits for "
                f"input (>= {limit:.0f}%). See the tf.data stage table (input_pipeline_analyzer).",
            )
        )
    avg = parsed.breakdown_avg_ms or {}
    if avg and parsed.has_device:
        host = _share_pct(avg, "host_compute_ms", "kernel_launch_ms")
        if host > HOST_BOUND_PCT:
            out.append(
                Finding(
                    code="host_bound",
                    severity=WARNING,
                    figure="breakdown_avg_ms[host_compute+kernel_launch]",
                    value=host,
                    threshold=HOST_BOUND_PCT,
                    message=f"The run is host-bound: host compute and kernel launch take {host:.1f}% of step "
                    f"time (> {HOST_BOUND_PCT:.0f}%) while the device waits.",
                )
            )
    if avg:
        compile_pct = _share_pct(avg, "compile_ms")
        if compile_pct > COMPILE_PCT:
            out.append(
                Finding(
                    code="compile_time_large",
                    severity=WARNING,
                    figure="breakdown_avg_ms[compile_ms]",
                    value=compile_pct,
                    threshold=COMPILE_PCT,
                    message=f"Compilation takes {compile_pct:.1f}% of step time (> {COMPILE_PCT:.0f}%): "
                    "retracing or recompiling inside the profiled window?",
                )
            )
    busy = [r for r in parsed.op_stats if r["op_type"] != IDLE_OP]
    for side in sorted({r["host_or_device"] for r in busy}):
        rows = [r for r in busy if r["host_or_device"] == side]
        total = sum(r["total_self_time_us"] for r in rows)
        top = max(rows, key=lambda r: r["total_self_time_us"])
        pct = 100.0 * top["total_self_time_us"] / total if total > 0 else 0.0
        if pct > OP_DOMINANT_PCT:
            out.append(
                Finding(
                    code="op_dominates",
                    severity=WARNING,
                    figure="op_stats.self_time_share",
                    value=pct,
                    threshold=OP_DOMINANT_PCT,
                    message=f"One op dominates {side} self-time: {top['op_name']} ({top['op_type']}) takes "
                    f"{pct:.1f}% (> {OP_DOMINANT_PCT:.0f}%).",
                )
            )
    return out


def _steps_not_found(marker_steps: list[int]) -> Finding:
    """The ``steps_not_found`` finding: xprof found no steps in a profile whose every step the perfwatch runner
    marked. ``value``: how many distinct marked steps the trace holds (``ParsedProfile.marker_steps``)."""
    if marker_steps:
        what = (
            f"although perfwatch's step markers are in the profile ({len(marker_steps)} marked steps, "
            f"step_num {marker_steps[0]}..{marker_steps[-1]}): its step detection did not group them, as "
            "happens with loops inside the step (an LSTM's while loop)"
        )
    else:
        what = "and the trace holds none of the step markers the runner wraps each profiled step in"
    return Finding(
        code="steps_not_found",
        severity=INFO,
        figure="marker_steps",
        value=float(len(marker_steps)),
        message=f"xprof found no steps in this profile {what}. The step time is the runner's timer over the "
        "measured steps (profiler off), as for every run; xprof's per-step breakdown and input-bound "
        "share are unknown for it, and op self-times are over the whole profiled window.",
    )


def diagnose_window(check: CrossCheck) -> list[Finding]:
    """The ``unrepresentative_window`` warning when the profiled window's median step time (runner timer, or
    xprof's) lies outside the band of the measured steps (``tasks.analysis.profile.cross_check``); empty when
    it lies inside or could not be checked. ``value``: the window median / measured median; ``threshold``: the
    band's edge it crossed, as the same ratio. Op figures of such a window (self-times, shares) describe a
    slower or faster moment than the one measured."""
    if check.representative is not False:
        return []
    med = check.measured_median_ms
    runner_out = check.window_inside is False
    x = check.window_median_ms if runner_out else check.profiler_median_ms
    lo, hi = (
        (check.band_low_ms, check.band_high_ms)
        if runner_out
        else (check.profiler_band_low_ms, check.profiler_band_high_ms)
    )
    if med is None or x is None or lo is None or hi is None:  # a check that decided has all four
        return []
    edge = hi if x > hi else lo
    who = "runner timer" if runner_out else "xprof"
    return [
        Finding(
            code="unrepresentative_window",
            severity=WARNING,
            figure="cross_check.overhead_ratio" if runner_out else "cross_check.profiler_ratio",
            value=x / med,
            threshold=edge / med,
            message=f"The profiled window is not representative of the measured steps: its median step time "
            f"({who}) is {x:.3f} ms = {x / med:.2f}x the measured median {med:.3f} ms, "
            f"{'above' if x > hi else 'below'} the {check.confidence:.0%} band for a window of its length "
            f"[{lo / med:.2f}x, {hi / med:.2f}x] (profiler overhead allowance "
            f"+{check.overhead_allowance:.0%} included). Op self-times from this window describe another "
            f"moment than the one measured; attribution scales them to the measured median.",
        )
    ]
