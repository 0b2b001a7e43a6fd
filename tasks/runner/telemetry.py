"""Device telemetry sampled in the runner process during the measured steps (``Case.telemetry_interval_ms``).

A :class:`Sampler` thread wakes every ``interval_ms`` and appends one row per device to a time series:

* ``device="host"`` (always, psutil): ``utilization_pct`` = the host's CPU utilization over the interval
  (all logical CPUs, 0..100, ``psutil.cpu_percent``), ``memory_bytes`` = this process's RSS;
* ``device="gpu<i>"`` (per GPU, only where NVML answers: pynvml from nvidia-ml-py, as ``nvidia-smi``
  reads it): ``utilization_pct`` (the share of the last sample period a kernel ran, %),
  ``memory_bytes`` (used), ``power_w`` (board power, W, NVML's mW / 1000), ``sm_clock_mhz``,
  ``temperature_c`` and ``throttle_reasons`` (NVML's clock-event bitmask; names in ``throttle_names``).
  A quantity a GPU does not support is absent (``None``) in its rows, never 0; without NVML (no driver,
  no GPU, no pynvml) there are no GPU rows at all and ``nvml`` says why.

Every row carries ``t_s`` (s since the sampler started, ``time.perf_counter``) and ``step`` (measured
steps finished at that moment: the caller counts them through :meth:`Sampler.count`), so memory can be
regressed on steps (``tasks.analysis.telemetry``). Imports nothing from TensorFlow.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: the row keys of one sample, in the order the store's ``telemetry_samples`` table has them
FIELDS = (
    "device",
    "t_s",
    "step",
    "utilization_pct",
    "memory_bytes",
    "power_w",
    "sm_clock_mhz",
    "temperature_c",
    "throttle_reasons",
)


def throttle_names(mask: int | None) -> list[str]:
    """The NVML clock-event (throttle) reasons set in ``mask`` (e.g. ``["SwPowerCap", "HwSlowdown"]``), named
    from pynvml's ``nvmlClocksEventReason*`` constants; ``[]`` for 0 or None."""
    if not mask:
        return []
    import pynvml

    prefix = "nvmlClocksEventReason"
    bits = {
        getattr(pynvml, n): n.removeprefix(prefix)
        for n in dir(pynvml)
        if n.startswith(prefix) and n.removeprefix(prefix) not in ("All", "None", "Unknown")
    }
    names = [name for bit, name in sorted(bits.items()) if bit and mask & bit]
    rest = mask & ~sum(bits)
    return names + ([f"0x{rest:x}"] if rest else [])


class _Nvml:
    """NVML for the sampler's life: init once, a handle per GPU, one reading per call; ``error`` when absent."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.devices: list[dict[str, Any]] = []
        self.error: str | None = None
        try:
            import pynvml
        except ImportError:
            self.error = "pynvml (nvidia-ml-py) is not installed in the runner's interpreter"
            return
        self._n = pynvml
        try:
            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                self.handles.append(h)
                self.devices.append({"device": f"gpu{i}", "index": i, "name": self._get(pynvml.nvmlDeviceGetName, h)})
        except Exception as e:  # noqa: BLE001 - NVMLError subclasses: no driver, no GPU, library not found
            self.error = f"NVML unavailable: {type(e).__name__}: {e}"
            self.handles, self.devices = [], []
        if not self.handles and self.error is None:
            self.error = "NVML reports no GPU"

    @staticmethod
    def _get(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            value = fn(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and kin: this quantity is absent
            return None
        return value.decode() if isinstance(value, bytes) else value

    def read(self) -> list[dict[str, Any]]:
        n, rows = self._n, []
        for dev, h in zip(self.devices, self.handles, strict=True):
            util = self._get(n.nvmlDeviceGetUtilizationRates, h)
            mem = self._get(n.nvmlDeviceGetMemoryInfo, h)
            power_mw = self._get(n.nvmlDeviceGetPowerUsage, h)
            reasons = self._get(n.nvmlDeviceGetCurrentClocksEventReasons, h)
            if reasons is None:
                reasons = self._get(n.nvmlDeviceGetCurrentClocksThrottleReasons, h)
            rows.append(
                {
                    "device": dev["device"],
                    "utilization_pct": None if util is None else float(util.gpu),
                    "memory_bytes": None if mem is None else int(mem.used),
                    "power_w": None if power_mw is None else power_mw / 1000.0,
                    "sm_clock_mhz": _float(self._get(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM)),
                    "temperature_c": _float(self._get(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)),
                    "throttle_reasons": None if reasons is None else int(reasons),
                }
            )
        return rows

    def close(self) -> None:
        if self.handles:
            self._get(self._n.nvmlShutdown)


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


class Sampler:
    """Samples host (psutil) and GPU (NVML) telemetry every ``interval_ms`` on a daemon thread.

    Use::

        sampler = Sampler(100).start()
        step = sampler.count(step)          # counts finished steps for the rows' ``step``
        times = [step() for _ in range(n)]
        telemetry = sampler.stop()

    :meth:`stop` takes a last sample, joins the thread and returns the JSON-safe record: ``interval_ms``,
    ``window_s`` (start to stop, s), ``steps`` (counted), ``samples`` (rows with :data:`FIELDS`),
    ``gpus`` (``device``, ``index``, ``name``, ``throttle_reasons_seen``: names of every reason bit seen),
    ``nvml`` (None when NVML answered, else why there are no GPU rows) and ``psutil`` (likewise).

    Raises:
        ValueError: ``interval_ms`` < 1.
    """

    def __init__(self, interval_ms: int) -> None:
        if interval_ms < 1:
            raise ValueError(f"telemetry interval {interval_ms} ms: expected at least 1 ms")
        self.interval_s = interval_ms / 1000.0
        self.interval_ms = interval_ms
        self.steps = 0
        self._rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def count(self, step: Callable[[], float]) -> Callable[[], float]:
        """``step`` that also counts itself finished (for the samples' ``step``)."""

        def counted() -> float:
            out = step()
            self.steps += 1
            return out

        return counted

    def start(self) -> Sampler:
        """Initialise NVML and psutil, take the first sample and start the thread."""
        self._nvml = _Nvml()
        self._psutil: ModuleType | None
        try:
            import psutil

            self._proc, self._psutil, self._psutil_error = psutil.Process(os.getpid()), psutil, None
            psutil.cpu_percent(interval=None)  # primes the counter: the next call covers the interval since now
        except ImportError:
            self._psutil, self._psutil_error = None, "psutil is not installed in the runner's interpreter"
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="perfwatch-telemetry", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        t, step = time.perf_counter() - self._t0, self.steps
        rows = []
        if self._psutil is not None:
            rows.append(
                {
                    "device": "host",
                    "utilization_pct": float(self._psutil.cpu_percent(interval=None)),
                    "memory_bytes": int(self._proc.memory_info().rss),
                    "power_w": None,
                    "sm_clock_mhz": None,
                    "temperature_c": None,
                    "throttle_reasons": None,
                }
            )
        if self._nvml.handles:
            rows += self._nvml.read()
        self._rows += [{**r, "t_s": t, "step": step} for r in rows]

    def stop(self) -> dict[str, Any]:
        """Stop sampling (one last sample first) and return the record (class docstring)."""
        if self._thread is None:
            raise RuntimeError("Sampler.stop() before start()")
        self._stop.set()
        self._thread.join()
        self._sample()
        window = time.perf_counter() - self._t0
        self._nvml.close()
        gpus = []
        for dev in self._nvml.devices:
            seen = 0
            for r in self._rows:
                if r["device"] == dev["device"] and r["throttle_reasons"]:
                    seen |= r["throttle_reasons"]
            gpus.append({**dev, "throttle_reasons_seen": throttle_names(seen)})
        return {
            "interval_ms": self.interval_ms,
            "window_s": window,
            "steps": self.steps,
            "samples": [{k: r[k] for k in FIELDS} for r in self._rows],
            "gpus": gpus,
            "nvml": self._nvml.error,
            "psutil": self._psutil_error,
        }
