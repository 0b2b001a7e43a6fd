"""Fakes at the edges: NVML (the pynvml functions the fingerprint probe calls, and GPU devices for it; a GPU
busy part of every period for the telemetry sampler) and a webhook sink (a real HTTP server on loopback that
records every POST)."""

from __future__ import annotations

import json
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pynvml
import pytest

# NVML


H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-aaaa-1111",
    "mem": 85_899_345_920,
    "cc": (9, 0),
    "power": 700_000,
    "app": {1: 1980, 2: 2619},
    "max": {1: 1980, 2: 2619},
    "ecc": [1, 1],
    "persist": 1,
    "mig": [0, 0],
    "migs": [],
}


class FakeNVML:
    """Replaces the pynvml functions fingerprint.py calls; ``errors`` maps a function name to an exception."""

    def __init__(
        self, devices: list[dict], errors: dict[str, Exception] | None = None, init_error: Exception | None = None
    ) -> None:
        self.devices, self.errors, self.init_error = devices, errors or {}, init_error
        self.shutdowns = 0

    def install(self, mp: pytest.MonkeyPatch) -> FakeNVML:
        def call(name, fn):
            def wrapper(*args):
                if name in self.errors:
                    raise self.errors[name]
                return fn(*args)

            mp.setattr(pynvml, name, wrapper)

        def init():
            if self.init_error:
                raise self.init_error

        def dev(h):
            return h if isinstance(h, dict) else self.devices[h]

        def mig_handle(h, slot):
            migs = self.devices[h]["migs"]
            if slot >= len(migs) or migs[slot] is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            return migs[slot]

        mp.setattr(pynvml, "nvmlInit", init)
        mp.setattr(pynvml, "nvmlShutdown", lambda: setattr(self, "shutdowns", self.shutdowns + 1))
        call("nvmlSystemGetDriverVersion", lambda: "550.54.15")
        call("nvmlSystemGetCudaDriverVersion_v2", lambda: 12040)
        call("nvmlSystemGetCudaDriverVersion", lambda: 11080)
        call("nvmlDeviceGetCount", lambda: len(self.devices))
        call("nvmlDeviceGetHandleByIndex", lambda i: i)
        call("nvmlDeviceGetName", lambda h: dev(h)["name"])
        call("nvmlDeviceGetUUID", lambda h: dev(h)["uuid"])
        call("nvmlDeviceGetMemoryInfo", lambda h: types.SimpleNamespace(total=dev(h)["mem"], free=1, used=2))
        call("nvmlDeviceGetCudaComputeCapability", lambda h: dev(h)["cc"])
        call("nvmlDeviceGetPowerManagementLimit", lambda h: dev(h)["power"])
        call("nvmlDeviceGetApplicationsClock", lambda h, t: dev(h)["app"][t])
        call("nvmlDeviceGetMaxClockInfo", lambda h, t: dev(h)["max"][t])
        call("nvmlDeviceGetEccMode", lambda h: dev(h)["ecc"])
        call("nvmlDeviceGetPersistenceMode", lambda h: dev(h)["persist"])
        call("nvmlDeviceGetMigMode", lambda h: dev(h)["mig"])
        call("nvmlDeviceGetMaxMigDeviceCount", lambda h: 7)
        call("nvmlDeviceGetMigDeviceHandleByIndex", mig_handle)
        return self


# a webhook


class FakePeriodicGpu:
    """One GPU at the pynvml boundary (the functions ``tasks.runner.telemetry`` calls) that is busy
    ``busy_s`` of every ``period_s`` on a virtual clock (``now_s``, set by the test): the driver samples its
    utilization every ``sample_period_s`` into a buffer of ``buffer_len`` samples (``nvmlDeviceGetSamples``,
    100 while busy, else 0), and ``nvmlDeviceGetUtilizationRates`` reports the last sample period only, as
    NVML's does. ``errors``: a function name -> the exception it raises every call (e.g. NotSupported);
    ``calls`` counts the calls per function."""

    def __init__(
        self,
        period_s: float = 2.0,
        busy_s: float = 1.0,
        sample_period_s: float = 1 / 6,
        buffer_len: int = 100,
        errors: dict[str, Exception] | None = None,
    ) -> None:
        self.period_s, self.busy_s = period_s, busy_s
        self.sample_period_s, self.buffer_len = sample_period_s, buffer_len
        self.errors = errors or {}
        self.now_s = 0.0
        self.calls: dict[str, int] = {}
        self.epoch_us = 1_780_000_000_000_000  # NVML's timestamps are CPU time in µs

    def busy(self, t: float) -> bool:
        return (t % self.period_s) < self.busy_s

    def _samples(self, h, sampling_type, since_us):
        if sampling_type != pynvml.NVML_GPU_UTILIZATION_SAMPLES:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        last = int(self.now_s / self.sample_period_s)
        out = []
        for k in range(max(0, last - self.buffer_len + 1), last + 1):
            ts = self.epoch_us + round(k * self.sample_period_s * 1e6)
            if ts > since_us:
                s = pynvml.c_nvmlSample_t()
                s.timeStamp = ts
                s.sampleValue.uiVal = 100 if self.busy(k * self.sample_period_s) else 0
                out.append(s)
        if not out:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, out

    def install(self, mp: pytest.MonkeyPatch) -> FakePeriodicGpu:
        def call(name, fn):
            def wrapper(*a):
                self.calls[name] = self.calls.get(name, 0) + 1
                if name in self.errors:
                    raise self.errors[name]
                return fn(*a)

            mp.setattr(pynvml, name, wrapper)

        call("nvmlInit", lambda: None)
        call("nvmlShutdown", lambda: None)
        call("nvmlDeviceGetCount", lambda: 1)
        call("nvmlDeviceGetHandleByIndex", lambda i: i)
        call("nvmlDeviceGetName", lambda h: b"Fake periodic GPU")
        call("nvmlDeviceGetSamples", self._samples)
        call(
            "nvmlDeviceGetUtilizationRates",
            lambda h: types.SimpleNamespace(gpu=100 if self.busy(self.now_s) else 0, memory=0),
        )
        call("nvmlDeviceGetMemoryInfo", lambda h: types.SimpleNamespace(used=2**30, total=80 * 2**30, free=0))
        call("nvmlDeviceGetPowerUsage", lambda h: 300_000 if self.busy(self.now_s) else 60_000)
        call("nvmlDeviceGetClockInfo", lambda h, kind: 1980)
        call("nvmlDeviceGetTemperature", lambda h, sensor: 60)
        call("nvmlDeviceGetCurrentClocksEventReasons", lambda h: 0)
        return self


class Sink:
    """A webhook: a real HTTP server on 127.0.0.1 that records every POST (path, headers, JSON body);
    answers ``status``."""

    def __init__(self, status: int = 200):
        self.posts: list[dict] = []
        self.status = status
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                sink.posts.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                self.send_response(sink.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
