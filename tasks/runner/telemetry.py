"""Device telemetry sampled in the runner process during the measured steps (``Case.telemetry_interval_ms``).

A :class:`Sampler` thread wakes every ``interval_ms`` and appends one row per device to a time series:

* ``device="host"`` (always, psutil): ``utilization_pct`` = the host's CPU utilization over the interval
  (all logical CPUs, 0..100, ``psutil.cpu_percent``), ``memory_bytes`` = this process's RSS;
* ``device="gpu<i>"`` (per GPU of this process, only where NVML answers: pynvml from nvidia-ml-py, as
  ``nvidia-smi`` reads it; ``i`` is CUDA's ordinal, TF's ``GPU:i``, and only the GPUs ``CUDA_VISIBLE_DEVICES``
  gives the process are read, ``tasks.runner.gpus``, so a ``cpu`` case, whose runner has them hidden, reads
  none): ``utilization_pct`` (the share of time a kernel ran, %, the mean of NVML's utilization
  samples since the previous row: ``nvmlDeviceGetSamples``, so a row covers its whole interval and a GPU
  busy 1 s of every 2 reads about 50% at any phase), ``memory_bytes`` (used), ``power_w`` (board power, W,
  NVML's mW / 1000), ``sm_clock_mhz``, ``temperature_c`` and ``throttle_reasons`` (NVML's clock-event
  bitmask; names in ``throttle_names``). A quantity a GPU does not support is found once, at start, and
  listed in that GPU's ``not_supported``; a reading that fails is a read error, counted per quantity in
  its ``errors`` (with the last message). Either way the rows hold ``None`` for it, never 0. Without
  NVML (no driver, no GPU, no pynvml) there are no GPU rows at all and ``nvml`` says why.

The interval is at most :data:`MAX_INTERVAL_MS` (``Case.telemetry_interval_ms``): the rows are what
the memory-growth fit and the run page's series are drawn from, and a GPU without NVML's sample buffer
falls back to ``nvmlDeviceGetUtilizationRates``, one sample period (1/6 to 1 s), which must cover a
good part of each interval to mean anything.

Energy comes from each GPU's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ, Volta and
later), read when sampling starts and when it stops (the GPU record's ``energy_counter``: ``energy_j`` and
its ``window_s``); NVML's power field is itself a 1-s average on Ampere and Hopper, so mean sampled power x
window reads short windows wrong, and is only the labelled fallback (``tasks.analysis.telemetry``).

Every row carries ``t_s`` (s since the sampler started, ``time.perf_counter``) and ``step`` (measured
steps finished at that moment: the caller counts them through :meth:`Sampler.count`), so memory can be
regressed on steps (``tasks.analysis.telemetry``). Imports nothing from TensorFlow.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tasks.runner import gpus as gpus_mod

#: longest sampling interval, ms (module docstring; ``Case.telemetry_interval_ms`` has the same bound)
MAX_INTERVAL_MS = 1000
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


class _Field:
    """One GPU quantity of a row: its readers (pynvml function names, the first one the GPU supports is
    used), how the reading becomes the row's value, and whether it is read through NVML's sample buffer."""

    def __init__(self, key: str, readers: tuple[str, ...], convert: Callable[[Any, Any], Any]) -> None:
        self.key, self.readers, self.convert = key, readers, convert


def _not_supported(n: ModuleType, e: BaseException) -> bool:
    """Whether ``e`` says the GPU or driver lacks the quantity (NVML_ERROR_NOT_SUPPORTED, or the driver's
    library has no such function), as opposed to a reading that failed this time."""
    return isinstance(e, n.NVMLError) and e.value in (n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_FUNCTION_NOT_FOUND)


def _no_new_sample(n: ModuleType, fn: str, e: BaseException) -> bool:
    """Whether ``e`` is ``nvmlDeviceGetSamples`` saying the buffer holds no sample newer than the timestamp
    asked for (NVML_ERROR_NOT_FOUND): nothing sampled since, not a failure."""
    return fn == "nvmlDeviceGetSamples" and isinstance(e, n.NVMLError) and e.value == n.NVML_ERROR_NOT_FOUND


def _sample_value(n: ModuleType, value_type: int, sample: Any) -> float:
    """The number in one ``c_nvmlSample_t`` of ``nvmlDeviceGetSamples``, read by its value type."""
    attr = {
        n.NVML_VALUE_TYPE_DOUBLE: "dVal",
        n.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        n.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        n.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        n.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        n.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }.get(value_type, "uiVal")
    return float(getattr(sample.sampleValue, attr))


class _Gpu:
    """One GPU's state for the sampler's life: which quantity is read how, which is not supported (found once,
    at start), the read errors counted per quantity, and the sample buffer's last timestamp (µs)."""

    def __init__(self, index: int, handle: Any, name: Any, visible: gpus_mod.VisibleGpu | None = None) -> None:
        self.index, self.handle, self.name = index, handle, name
        self.nvml_index = visible.nvml_index if visible is not None else index
        self.uuid = visible.uuid if visible is not None else None
        self.mig_uuid = visible.mig_uuid if visible is not None else None
        self.energy_mj: list[tuple[float, int]] = []  # (perf_counter s, NVML's total energy mJ) at start, stop
        self.energy_error: str | None = None
        self.reader: dict[str, str] = {}  # row key -> the pynvml function that reads it
        self.not_supported: list[str] = []
        self.errors: dict[str, dict[str, Any]] = {}
        self.last_sample_us = 0

    def error(self, key: str, e: BaseException) -> None:
        err = self.errors.setdefault(key, {"count": 0, "last": ""})
        err["count"] += 1
        err["last"] = f"{type(e).__name__}: {e}"

    def record(self) -> dict[str, Any]:
        counter = None
        if len(self.energy_mj) == 2:
            (t0, e0), (t1, e1) = self.energy_mj
            counter = {"energy_j": (e1 - e0) / 1000.0, "window_s": t1 - t0}
        return {
            "device": f"gpu{self.index}",
            "index": self.index,
            "nvml_index": self.nvml_index,
            "uuid": self.uuid,
            "mig_uuid": self.mig_uuid,
            "name": self.name,
            "energy_counter": counter,
            "energy_counter_error": self.energy_error,
            "utilization_source": {
                "nvmlDeviceGetSamples": "samples",
                "nvmlDeviceGetUtilizationRates": "rates",
            }.get(self.reader.get("utilization_pct", "")),
            "not_supported": list(self.not_supported),
            "errors": {k: dict(v) for k, v in self.errors.items()},
        }


class _Nvml:
    """NVML for the sampler's life: init once, a handle per GPU, one reading per call; ``error`` when absent.

    At start each quantity of each GPU is read once: one the GPU does not support (``NVMLError_NotSupported``,
    or a driver without the function) is listed in that GPU's ``not_supported`` and never read again (its
    rows hold ``None``); any other failure, then or later, is a read error, counted per quantity with its
    last message (``errors``), and that row holds ``None``. Utilization comes from NVML's sample buffer
    (``nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES)``): a row's ``utilization_pct`` is the mean of the
    driver's samples taken since the previous row, so it covers the whole interval and a GPU busy half the
    time reads about 50% whatever the phase; a GPU without the buffer falls back to
    ``nvmlDeviceGetUtilizationRates`` (one sample period of 1/6 to 1 s, ``utilization_source: "rates"``)."""

    def __init__(self) -> None:
        self.gpus: list[_Gpu] = []
        self.error: str | None = None
        try:
            import pynvml
        except ImportError:
            self.error = "pynvml (nvidia-ml-py) is not installed in the runner's interpreter"
            return
        self._n = n = pynvml
        self.fields = (
            _Field("utilization_pct", ("nvmlDeviceGetSamples", "nvmlDeviceGetUtilizationRates"), self._utilization),
            _Field("memory_bytes", ("nvmlDeviceGetMemoryInfo",), lambda g, v: int(v.used)),
            _Field("power_w", ("nvmlDeviceGetPowerUsage",), lambda g, v: v / 1000.0),  # NVML's mW
            _Field("sm_clock_mhz", ("nvmlDeviceGetClockInfo",), lambda g, v: float(v)),
            _Field("temperature_c", ("nvmlDeviceGetTemperature",), lambda g, v: float(v)),
            _Field(
                "throttle_reasons",
                ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                lambda g, v: int(v),
            ),
        )
        try:
            n.nvmlInit()
            visible, note = gpus_mod.visible_gpus(n)
            for g in visible:
                self.gpus.append(_Gpu(g.ordinal, g.handle, self._name(g.handle), g))
        except Exception as e:  # noqa: BLE001 - NVMLError subclasses: no driver, no GPU, library not found
            self.error = f"NVML unavailable: {type(e).__name__}: {e}"
            self.gpus = []
            return
        if not self.gpus:
            self.error = note or "NVML reports no GPU"
        for gpu in self.gpus:
            self._probe(gpu)

    @property
    def handles(self) -> list[Any]:
        return [g.handle for g in self.gpus]

    @property
    def devices(self) -> list[dict[str, Any]]:
        """Per GPU: ``device``, ``index``, ``name``, ``utilization_source``, ``not_supported``, ``errors``."""
        return [g.record() for g in self.gpus]

    def _name(self, h: Any) -> str | None:
        try:
            v = self._n.nvmlDeviceGetName(h)
        except Exception:  # noqa: BLE001 - a name is a label; without it the GPU is still sampled
            return None
        return v.decode() if isinstance(v, bytes) else v

    def _call(self, fn: str, gpu: _Gpu) -> Any:
        n, h = self._n, gpu.handle
        if fn == "nvmlDeviceGetSamples":
            return n.nvmlDeviceGetSamples(h, n.NVML_GPU_UTILIZATION_SAMPLES, gpu.last_sample_us)
        if fn == "nvmlDeviceGetClockInfo":
            return n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)
        if fn == "nvmlDeviceGetTemperature":
            return n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)
        return getattr(n, fn)(h)

    def _probe(self, gpu: _Gpu) -> None:
        """Find, once, how each quantity of ``gpu`` is read, or that it is not supported (class docstring)."""
        for f in self.fields:
            for fn in f.readers:
                try:
                    value = self._call(fn, gpu)
                except Exception as e:  # noqa: BLE001 - NVMLError subclasses
                    if _not_supported(self._n, e):
                        continue  # the next reader, else not supported
                    if _no_new_sample(self._n, fn, e):
                        gpu.reader[f.key] = fn  # an empty sample buffer: supported, nothing sampled yet
                        break
                    gpu.reader[f.key] = fn  # supported as far as we know: this reading failed
                    gpu.error(f.key, e)
                    break
                gpu.reader[f.key] = fn
                if fn == "nvmlDeviceGetSamples":  # the rows average what the driver samples from now on
                    gpu.last_sample_us = max((s.timeStamp for s in value[1]), default=0)
                break
            else:
                gpu.not_supported.append(f.key)

    def _utilization(self, gpu: _Gpu, value: Any) -> float | None:
        if gpu.reader.get("utilization_pct") != "nvmlDeviceGetSamples":
            return float(value.gpu)
        value_type, samples = value
        fresh = [s for s in samples if s.timeStamp > gpu.last_sample_us]
        if not fresh:
            return None
        gpu.last_sample_us = max(s.timeStamp for s in fresh)
        return statistics.fmean(_sample_value(self._n, value_type, s) for s in fresh)

    def mark_energy(self) -> None:
        """Read each GPU's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver
        loaded, Volta and later) with the time; the first and last marks bound the window's counted energy. A GPU
        without the counter keeps its reason in ``energy_counter_error`` and is marked no more."""
        for gpu in self.gpus:
            if gpu.energy_error is not None:
                continue
            try:
                mj = int(self._n.nvmlDeviceGetTotalEnergyConsumption(gpu.handle))
            except Exception as e:  # noqa: BLE001 - NVMLError subclasses: NotSupported before Volta
                gpu.energy_error, gpu.energy_mj = f"{type(e).__name__}: {e}", []
                continue
            gpu.energy_mj = [*gpu.energy_mj[:1], (time.perf_counter(), mj)]

    def read(self) -> list[dict[str, Any]]:
        """One row per GPU (the module docstring's keys): ``None`` for a quantity not supported, a failed
        reading (counted in the GPU's ``errors``) or, for utilization, no driver sample since the last row."""
        n, rows = self._n, []
        for gpu in self.gpus:
            row: dict[str, Any] = {"device": f"gpu{gpu.index}"}
            for f in self.fields:
                row[f.key] = None
                fn = gpu.reader.get(f.key)
                if fn is None:  # not supported (found at start)
                    continue
                try:
                    row[f.key] = f.convert(gpu, self._call(fn, gpu))
                except Exception as e:  # noqa: BLE001 - NVMLError subclasses: counted, the row says None
                    if not _no_new_sample(n, fn, e):  # no driver sample since the last row is no error
                        gpu.error(f.key, e)
            rows.append(row)
        return rows

    def close(self) -> None:
        if self.gpus:
            try:
                self._n.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down: nothing left to report it to
                pass


class Sampler:
    """Samples host (psutil) and GPU (NVML) telemetry every ``interval_ms`` on a daemon thread.

    Use::

        sampler = Sampler(100).start()
        step = sampler.count(step)          # counts finished steps for the rows' ``step``
        times = [step() for _ in range(n)]
        telemetry = sampler.stop()

    :meth:`stop` takes a last sample, joins the thread and returns the JSON-safe record: ``interval_ms``,
    ``window_s`` (start to stop, s), ``steps`` (counted), ``samples`` (rows with :data:`FIELDS`),
    ``gpus`` (``device``, ``index`` (CUDA's ordinal), ``nvml_index``, ``uuid``, ``mig_uuid``, ``name``,
    ``energy_counter`` (``{"energy_j", "window_s"}`` from NVML's total-energy counter, or None) and
    ``energy_counter_error`` (why not), ``utilization_source``: ``samples`` (NVML's sample buffer),
    ``rates`` (the fallback) or None (not supported); ``not_supported``: the row keys this GPU does not
    support, found at start; ``errors``: row key -> ``{"count", "last"}`` of failed readings;
    ``throttle_reasons_seen``: names of every reason bit seen),
    ``nvml`` (None when NVML answered, else why there are no GPU rows) and ``psutil`` (likewise).

    Raises:
        ValueError: ``interval_ms`` < 1 or above :data:`MAX_INTERVAL_MS`.
    """

    def __init__(self, interval_ms: int) -> None:
        if not 1 <= interval_ms <= MAX_INTERVAL_MS:
            raise ValueError(
                f"telemetry interval {interval_ms} ms: expected 1 to {MAX_INTERVAL_MS} ms (module docstring)"
            )
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
        self._nvml.mark_energy()
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
        self._nvml.mark_energy()
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
