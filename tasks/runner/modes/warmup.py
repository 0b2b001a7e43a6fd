"""Warm-up mode: run steps until step time is steady (``tasks.runner.steady.SteadyDetector``).

Reports the cold first step (tracing/compilation) and how many warm-up steps steady state took; the
profiled run then uses that count as its warm-up. Each step also records the process's CPU time and run-queue
wait (``tasks.runner.counters``).
"""

from __future__ import annotations

import time

from tasks.runner import counters, measure, progress
from tasks.runner.protocol import WarmupResult
from tasks.runner.spec import RunnerSpec
from tasks.runner.steady import SteadyDetector


def run(spec: RunnerSpec, import_s: float) -> WarmupResult:
    """Warm up the model of ``spec`` (times in ms, our timer); ``import_s``: s the TensorFlow import took.

    Raises:
        RunnerError: the model failed to load or its first step failed (names the model).
    """
    started = measure.start(spec, import_s)
    phases = started.phases
    step = counters.Recorder(started.step)  # CPU time and run-queue wait around each step
    det = SteadyDetector(window=spec.warmup_window, cv_max=spec.warmup_cv_max, max_steps=spec.warmup_max_steps)
    times: list[float] = []
    t0 = time.perf_counter()
    ticker = progress.Ticker("warm-up", spec.warmup_max_steps, open_ended=True, cv_max=spec.warmup_cv_max)
    while True:
        times.append(step())
        over = det.add(times[-1])
        ticker.tick(times[-1], cv=det.result().final_cv)
        if over:
            break
    res = det.result()
    ticker.done(cv=res.final_cv)
    phases["warmup_steps"] = time.perf_counter() - t0
    started.end_phase("warmup")
    cpu, wait = step.take()
    return WarmupResult(
        **started.record(wait=step.wait_record()),
        warmup_step_times_ms=times,
        warmup_cpu_ms=cpu,
        warmup_wait_ms=wait,
        warmup_steps=res.warmup_steps,
        steady=res.steady,
        final_cv=res.final_cv,
        reason=res.reason,
        phases_s=phases,
        peak_rss_bytes=measure.peak_rss_bytes(),
        peak_device_bytes=measure.device_peak_bytes(),
        wall_s=time.perf_counter() - started.t_start,
    )
