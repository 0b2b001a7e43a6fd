"""Fakes at the edges: NVML (the pynvml functions the fingerprint probe calls, and GPU devices for it) and a
webhook sink (a real HTTP server on loopback that records every POST)."""

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
