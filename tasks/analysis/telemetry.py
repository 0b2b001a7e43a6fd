"""Summaries of the device telemetry a run sampled during its measured steps (``tasks.runner.telemetry``).

Pure functions over the runner's telemetry record (``result["telemetry"]``): per device (``host``,
``gpu0``...) utilization mean and p95 (%), peak memory (bytes), mean power (W), and where power exists
the energy per example (J/example = the window's energy / examples) and the performance per watt
(examples/s per W = throughput over the window / mean power). A GPU's energy is its total-energy counter's
difference over the window where NVML has one (``energy_source: "counter"``, Volta and later; mean power is
then that energy over the counter's window), else mean sampled power x window (``"sampled power x window"``,
the fallback: NVML's power field is itself a 1-s average on Ampere and Hopper); ``energy_sampled_j`` keeps
the sampled figure beside the counter's, and ``energy_window_short`` flags a window under
:data:`ENERGY_MIN_WINDOW_S`. Memory growth is the slope of memory
(host RSS, GPU memory used) over the measured steps in bytes/step, from the Theil-Sen estimator
(``scipy.stats.theilslopes``, robust to the allocator's jumps) with its 95% interval; it is *flagged* as
a leak trend only when the whole interval lies above :data:`MEMORY_GROWTH_BOUND_BYTES_PER_STEP`.
A quantity no sample has is absent (``None``), never 0.
"""

from __future__ import annotations

import statistics
from typing import Any

#: memory growth (bytes per measured step) above which a run's memory counts as growing (a leak trend):
#: 64 KiB/step is 64 MiB per 1000 steps, well above what a steady allocator drifts by in a run, and a
#: 2-core host's RSS noise does not move the Theil-Sen interval's lower end past it
MEMORY_GROWTH_BOUND_BYTES_PER_STEP = 64 * 1024
#: shortest window (s) whose energy is read without a flag: the total-energy counter moves in steps of
#: 100 ms on an H200 (``bench/gpu_check.py``, driver 580: median 100.0 ms between changes under load), so
#: its two reads may each be up to one step stale, 2 x 0.1 s; under 4 s that can exceed 5% of the window.
#: (NVML's power field, the fallback, is itself a 1-s average on Ampere and Hopper.)
ENERGY_MIN_WINDOW_S = 4.0
#: fewest samples (at distinct step counts) a slope is fitted on
MIN_SLOPE_POINTS = 3


def _p95(xs: list[float]) -> float:
    return xs[0] if len(xs) == 1 else statistics.quantiles(xs, n=100, method="inclusive")[94]


def memory_growth(
    steps: list[int], memory_bytes: list[float], *, bound: float = MEMORY_GROWTH_BOUND_BYTES_PER_STEP
) -> dict[str, Any]:
    """Slope of ``memory_bytes`` against ``steps`` (measured steps finished at each sample), bytes/step.

    Returns ``{"slope_bytes_per_step", "low", "high"`` (95% Theil-Sen interval)``, "bound", "flagged"``
    (``low > bound``)``, "points"}``; the slope keys are ``None`` with a ``reason`` when fewer than
    :data:`MIN_SLOPE_POINTS` samples at distinct step counts exist.

    Raises:
        ValueError: ``steps`` and ``memory_bytes`` differ in length.
    """
    from scipy.stats import theilslopes

    if len(steps) != len(memory_bytes):
        raise ValueError(f"memory_growth: {len(steps)} steps but {len(memory_bytes)} memory readings")
    out: dict[str, Any] = {"bound": bound, "points": len(steps)}
    if len(set(steps)) < MIN_SLOPE_POINTS:
        return {
            **out,
            "slope_bytes_per_step": None,
            "low": None,
            "high": None,
            "flagged": None,
            "reason": f"{len(set(steps))} distinct step counts sampled; a slope needs {MIN_SLOPE_POINTS}",
        }
    res = theilslopes(memory_bytes, steps, alpha=0.95)
    return {
        **out,
        "slope_bytes_per_step": float(res.slope),
        "low": float(res.low_slope),
        "high": float(res.high_slope),
        "flagged": bool(res.low_slope > bound),
    }


def real_examples(result: dict[str, Any]) -> int | None:
    """The examples a profile result's measured phase really served, for energy per example: a server run's
    queries (one example each, LoadGen's sample: a batch of fewer queries than ``batch_size`` is padded, and the
    padding is no example; the idle time between arrivals is part of serving at that rate, so its energy stays
    in the numerator), else the examples fed to the measured steps (``fed["measured"]["examples"]``: partial
    batches, where allowed, count as fed); None when the result records neither (then ``steps x batch_size``)."""
    serving = result.get("serving") or {}
    if serving.get("scenario") == "server":
        return sum(len(p.get("latency_ms") or []) for p in serving.get("points") or [])
    measured = (result.get("fed") or {}).get("measured") or {}
    return int(measured["examples"]) if isinstance(measured.get("examples"), int) else None


def summarize(telemetry: dict[str, Any], batch_size: int, examples: int | None = None) -> dict[str, Any]:
    """Per-device summary of a runner telemetry record (module docstring) for ``batch_size`` examples/step;
    ``examples``: the real examples of the window (:func:`real_examples`), default ``steps x batch_size``.

    Returns ``{"interval_ms", "window_s", "steps", "examples", "nvml", "devices": {device: {"samples",
    "utilization_mean_pct", "utilization_p95_pct", "memory_peak_bytes", "power_mean_w", "energy_j",
    "energy_source", "energy_sampled_j", "energy_window_short", "energy_per_example_j", "examples_per_s_per_w",
    "sm_clock_mean_mhz", "temperature_max_c",
    "throttle_reasons_seen", "not_supported", "read_errors", "utilization_source", "memory_growth"}}}``
    (the three before ``memory_growth`` from the GPU's record, ``None`` for the host); a quantity without
    samples is ``None``.

    Raises:
        ValueError: the record lacks ``samples`` or ``window_s`` (names the key).
    """
    for key in ("samples", "window_s"):
        if key not in telemetry:
            raise ValueError(f"telemetry record has no {key!r} (expected the runner's Sampler.stop() record)")
    window, steps = float(telemetry["window_s"]), int(telemetry.get("steps") or 0)
    examples = steps * batch_size if examples is None else int(examples)
    gpus = {g["device"]: g for g in telemetry.get("gpus") or []}
    by_device: dict[str, list[dict[str, Any]]] = {}
    for row in telemetry["samples"]:
        by_device.setdefault(row["device"], []).append(row)
    devices = {}
    for dev, rows in by_device.items():

        def col(key: str, rows: list[dict[str, Any]] = rows) -> list[float]:
            return [r[key] for r in rows if r.get(key) is not None]

        util, mem, power = col("utilization_pct"), col("memory_bytes"), col("power_w")
        clock, temp = col("sm_clock_mhz"), col("temperature_c")
        mean_power = statistics.fmean(power) if power else None
        sampled = mean_power * window if mean_power is not None else None
        counter = gpus.get(dev, {}).get("energy_counter")
        energy, source = sampled, "sampled power x window" if sampled is not None else None
        if isinstance(counter, dict) and isinstance(counter.get("energy_j"), int | float):
            energy, source = float(counter["energy_j"]), "counter"
            if counter.get("window_s"):
                mean_power = energy / float(counter["window_s"])
        with_mem = [r for r in rows if r.get("memory_bytes") is not None]
        devices[dev] = {
            "samples": len(rows),
            "utilization_mean_pct": statistics.fmean(util) if util else None,
            "utilization_p95_pct": _p95(util) if util else None,
            "memory_peak_bytes": int(max(mem)) if mem else None,
            "power_mean_w": mean_power,
            "energy_j": energy,
            "energy_source": source,
            "energy_sampled_j": sampled,
            "energy_window_short": bool(energy is not None and window < ENERGY_MIN_WINDOW_S),
            "energy_per_example_j": energy / examples if energy is not None and examples else None,
            "examples_per_s_per_w": (examples / window) / mean_power
            if mean_power and examples and window > 0
            else None,
            "sm_clock_mean_mhz": statistics.fmean(clock) if clock else None,
            "temperature_max_c": max(temp) if temp else None,
            "throttle_reasons_seen": gpus.get(dev, {}).get("throttle_reasons_seen"),
            # GPUs: the quantities the GPU does not support (found at start) and the failed readings
            # (key -> {"count", "last"}), so "not supported" and "could not be read" never read alike
            "not_supported": gpus.get(dev, {}).get("not_supported"),
            "read_errors": gpus.get(dev, {}).get("errors"),
            "utilization_source": gpus.get(dev, {}).get("utilization_source"),
            "memory_growth": memory_growth([r["step"] for r in with_mem], [r["memory_bytes"] for r in with_mem])
            if with_mem
            else None,
        }
    return {
        "interval_ms": telemetry.get("interval_ms"),
        "window_s": window,
        "steps": steps,
        "examples": examples,
        "nvml": telemetry.get("nvml"),
        "devices": devices,
    }
