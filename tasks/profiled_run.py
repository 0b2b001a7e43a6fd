"""profiled run: a fresh runner process times measured steps, then profiles a short window.

The measured steps run with the profiler OFF (their step times are the numbers compared
against the baseline); the profiled window runs after them with step markers so xprof can
split step time into compute, input and other. The ratio of the two medians is the profiler's
overhead, reported with the run.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tasks.records import Case, ProfiledRun, PulledModel, WarmupRecord
from tasks.runner import RunnerError, RunnerSpec, launch


def profiled_run(pulled: PulledModel, case: Case, warmup: WarmupRecord, work_dir: str | Path,
                 runner_python: str, timeout_s: float = 3600) -> ProfiledRun:
    """Run the measured and profiled steps in ``<work_dir>/run`` and return where the files are.

    Returns:
        ProfiledRun: median step time (ms) and throughput (examples/s) of the measured steps,
        profiler overhead ratio, peak host RSS (bytes) and device memory (bytes, GPU only).

    Raises:
        RunnerError: the runner failed, or returned fewer measured steps than asked, or a
            non-positive step time (never stored as a measurement), or wrote no xplane.
    """
    out = Path(work_dir) / "run"
    spec = RunnerSpec(mode="profile", model_path=pulled.local_path, out_dir=str(out), batch_size=case.batch_size,
                      seed=case.seed, deterministic=case.deterministic, warmup_steps=warmup.warmup_steps,
                      measured_steps=case.measured_steps, profiled_steps=case.profiled_steps)
    r = launch(spec, runner_python, timeout_s)
    measured = r["measured_step_times_ms"]
    if len(measured) < case.measured_steps:
        raise RunnerError(f"runner returned {len(measured)} measured steps, {case.measured_steps} were asked")
    bad = [(i, t) for i, t in enumerate(measured) if not t > 0]
    if bad:
        raise RunnerError(f"non-positive or NaN measured step time(s) at (index, ms) {bad[:5]}")
    xplanes = sorted(Path(r["profile_dir"]).glob("plugins/profile/*/*.xplane.pb"))
    if not xplanes:
        raise RunnerError(f"the profiler wrote no *.xplane.pb under {r['profile_dir']}/plugins/profile/*/")
    median = statistics.median(measured)
    prof_median = statistics.median(r["profiled_step_times_ms"])
    return ProfiledRun(work_dir=str(work_dir), samples_path=str(out / "result.json"), profile_dir=r["profile_dir"],
                       measured_steps=len(measured), median_step_ms=median,
                       throughput_eps=case.batch_size / (median / 1000.0),
                       profile_overhead_ratio=prof_median / median, peak_rss_bytes=r["peak_rss_bytes"],
                       peak_device_bytes=r["peak_device_bytes"], wall_s=r["wall_s"])
