"""Device telemetry: the sampler with a faked NVML (at the pynvml boundary) and real psutil, and its summaries."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from pydantic import ValidationError

from tasks.analysis.telemetry import MEMORY_GROWTH_BOUND_BYTES_PER_STEP, memory_growth, real_examples, summarize
from tasks.records import Case
from tasks.runner.telemetry import FIELDS, MAX_INTERVAL_MS, Sampler, _Nvml, throttle_names
from tests.helpers.fakes import FakePeriodicGpu


def _busy_step(ms: float = 5.0):
    def step() -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < ms / 1000:
            pass
        return ms

    return step


def _no_nvml(monkeypatch):
    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)


def test_psutil_telemetry_runs_for_real_and_gpu_series_are_absent(monkeypatch):
    _no_nvml(monkeypatch)
    sampler = Sampler(10).start()
    step = sampler.count(_busy_step())
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.5:  # 50 intervals: at least 5 samples even on a busy 2-core host
        step()
    tel = sampler.stop()
    n = tel["steps"]
    assert n >= 30 and tel["window_s"] >= 0.5
    assert "NVML unavailable" in tel["nvml"] and tel["gpus"] == []
    rows = tel["samples"]
    assert {r["device"] for r in rows} == {"host"}  # no GPU rows at all, never zeros
    assert len(rows) >= 5 and all(set(r) == set(FIELDS) for r in rows)
    assert all(r["memory_bytes"] > 20 * 2**20 for r in rows)  # a Python process with pytest loaded
    assert all(0 <= r["utilization_pct"] <= 100 for r in rows)
    assert [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert rows[0]["step"] == 0 and rows[-1]["step"] == n
    assert all(r["power_w"] is None for r in rows)
    s = summarize(tel, batch_size=8)
    host = s["devices"]["host"]
    assert s["examples"] == 8 * n and set(s["devices"]) == {"host"}
    assert host["memory_peak_bytes"] == max(r["memory_bytes"] for r in rows)
    assert host["power_mean_w"] is None and host["energy_per_example_j"] is None
    assert host["examples_per_s_per_w"] is None
    assert host["utilization_p95_pct"] >= host["utilization_mean_pct"] * 0.5
    assert host["memory_growth"]["flagged"] is False


class _FakeGpu:
    """Two GPUs at the pynvml boundary: gpu0 with every reading, gpu1 without power (NotSupported)."""

    def __init__(self) -> None:
        self.reads = 0

    def install(self, monkeypatch) -> None:
        not_supported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def power(h):
            if h == 1:
                raise not_supported
            return 250_000 + 10_000 * h  # mW

        def memory(h):
            self.reads += 1
            return SimpleNamespace(used=2**30 + self.reads * 2**20, total=80 * 2**30, free=0)

        for name, fn in {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: 2,
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetName": lambda h: b"Fake H100",
            "nvmlDeviceGetSamples": lambda h, kind, since: (_ for _ in ()).throw(not_supported),
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=90 - 10 * h, memory=40),
            "nvmlDeviceGetMemoryInfo": memory,
            "nvmlDeviceGetPowerUsage": power,
            "nvmlDeviceGetClockInfo": lambda h, kind: 1980 if kind == pynvml.NVML_CLOCK_SM else 0,
            "nvmlDeviceGetTemperature": lambda h, sensor: 65,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: pynvml.nvmlClocksEventReasonSwPowerCap if h == 0 else 0,
        }.items():
            monkeypatch.setattr(pynvml, name, fn)


def test_nvml_telemetry_with_faked_pynvml(monkeypatch):
    _FakeGpu().install(monkeypatch)
    sampler = Sampler(10).start()
    step = sampler.count(_busy_step())
    for _ in range(40):
        step()
    tel = sampler.stop()
    assert tel["nvml"] is None
    assert [g["device"] for g in tel["gpus"]] == ["gpu0", "gpu1"] and tel["gpus"][0]["name"] == "Fake H100"
    assert tel["gpus"][0]["throttle_reasons_seen"] == ["SwPowerCap"] and tel["gpus"][1]["throttle_reasons_seen"] == []
    g0 = [r for r in tel["samples"] if r["device"] == "gpu0"]
    g1 = [r for r in tel["samples"] if r["device"] == "gpu1"]
    assert len(g0) == len(g1) >= 5
    assert g0[0]["power_w"] == pytest.approx(250.0) and g0[0]["sm_clock_mhz"] == 1980
    assert g0[0]["temperature_c"] == 65 and g0[0]["utilization_pct"] == 90
    assert all(r["power_w"] is None for r in g1)  # not supported: absent, not 0
    assert tel["gpus"][1]["not_supported"] == ["power_w"] and tel["gpus"][1]["errors"] == {}
    assert tel["gpus"][0]["utilization_source"] == "rates"  # this fake has no sample buffer
    s = summarize(tel, batch_size=4)
    d0, d1 = s["devices"]["gpu0"], s["devices"]["gpu1"]
    assert d0["power_mean_w"] == pytest.approx(250.0)
    assert d0["energy_per_example_j"] == pytest.approx(250.0 * tel["window_s"] / (40 * 4))
    assert d0["examples_per_s_per_w"] == pytest.approx((160 / tel["window_s"]) / 250.0)
    assert d0["utilization_mean_pct"] == 90 and d1["utilization_mean_pct"] == 80
    assert d1["power_mean_w"] is None and d1["energy_per_example_j"] is None
    assert d0["memory_peak_bytes"] == max(r["memory_bytes"] for r in g0)
    assert "host" in s["devices"]  # host telemetry is sampled beside the GPUs


def test_energy_per_example_counts_the_queries_served_not_the_padded_batches():
    """The audit: a server run's J/example divided the energy by batches x batch size, padding counted. A server
    window's real examples are its queries (one example each); elsewhere the examples fed."""
    tel = {
        "window_s": 2.0,
        "steps": 100,
        "samples": [{"device": "gpu0", "t_s": 0.0, "step": 0, "power_w": 100.0}],
    }
    padded = summarize(tel, batch_size=4)["devices"]["gpu0"]
    assert padded["energy_per_example_j"] == pytest.approx(200.0 / 400)
    server = {"serving": {"scenario": "server", "points": [{"latency_ms": [1.0] * 120}, {"latency_ms": [2.0] * 130}]}}
    assert real_examples(server) == 250  # 100 batches of 4 computed 400 examples, 250 of them queries
    real = summarize(tel, batch_size=4, examples=real_examples(server))["devices"]["gpu0"]
    assert real["energy_per_example_j"] == pytest.approx(200.0 / 250)
    assert real["examples_per_s_per_w"] == pytest.approx((250 / 2.0) / 100.0)
    assert real_examples({"fed": {"measured": {"examples": 390}}}) == 390  # partial batches, as fed
    assert real_examples({}) is None


def test_throttle_names():
    mask = pynvml.nvmlClocksEventReasonHwSlowdown | pynvml.nvmlClocksEventReasonSwThermalSlowdown
    assert throttle_names(mask) == ["HwSlowdown", "SwThermalSlowdown"]
    assert throttle_names(0) == [] and throttle_names(None) == []
    assert throttle_names(1 << 40) == [f"0x{1 << 40:x}"]


def test_memory_growth_flags_a_leak_only_when_the_interval_is_above_the_bound():
    steps = list(range(0, 200, 5))
    flat = [500e6 + (3e6 if i % 7 == 0 else 0) for i in range(len(steps))]  # jumps, no trend
    leak = [500e6 + 200_000 * s for s in steps]  # 200 kB/step
    small = [500e6 + 10_000 * s for s in steps]  # 10 kB/step: grows, but under the bound
    g = memory_growth(steps, flat)
    assert g["flagged"] is False and abs(g["slope_bytes_per_step"]) < MEMORY_GROWTH_BOUND_BYTES_PER_STEP
    g = memory_growth(steps, leak)
    assert g["flagged"] is True and g["slope_bytes_per_step"] == pytest.approx(200_000)
    assert memory_growth(steps, small)["flagged"] is False
    few = memory_growth([0, 0, 1], [1.0, 2.0, 3.0])
    assert few["slope_bytes_per_step"] is None and "distinct step counts" in few["reason"]
    with pytest.raises(ValueError, match="2 steps but 1 memory"):
        memory_growth([0, 1], [1.0])


def test_summarize_names_a_missing_key():
    with pytest.raises(ValueError, match="'window_s'"):
        summarize({"samples": []}, 1)


def test_interval_must_be_positive_and_bounded():
    with pytest.raises(ValueError, match="expected 1 to 1000 ms"):
        Sampler(0)
    with pytest.raises(ValueError, match="expected 1 to 1000 ms"):
        Sampler(MAX_INTERVAL_MS + 1)
    with pytest.raises(ValidationError, match="telemetry_interval_ms"):
        Case(model="m", telemetry_interval_ms=2000)  # issue 26: 60 s was accepted, 2 s aliases


@pytest.mark.parametrize("phase_s", [0.0, 0.5, 1.0, 1.5, 1.9])
def test_a_gpu_busy_half_the_time_reads_half_at_any_phase(monkeypatch, phase_s):
    """Issue 26: read every 2 s, a GPU busy 1 s of every 2 read 100% or 0% by phase (NVML's utilization is
    one short sample period); each row is now the mean of the driver's samples since the previous row."""
    gpu = FakePeriodicGpu(period_s=2.0, busy_s=1.0).install(monkeypatch)
    gpu.now_s = 100.0 + phase_s
    nvml = _Nvml()
    rows = []
    for k in range(1, 11):
        gpu.now_s = 100.0 + phase_s + 2.0 * k
        rows += nvml.read()
    util = [r["utilization_pct"] for r in rows]
    assert all(40 <= u <= 60 for u in util), util
    assert sum(util) / len(util) == pytest.approx(50, abs=3)
    assert nvml.devices[0]["utilization_source"] == "samples"


def test_not_supported_is_found_once_and_a_failed_reading_is_counted(monkeypatch):
    """Issue 26: any NVML exception became "no value": "not supported on this GPU" and a transient error
    read the same. Now not-supported is found once at start (and never asked again); errors are counted."""
    errors = {
        "nvmlDeviceGetPowerUsage": pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED),
        "nvmlDeviceGetTemperature": pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN),
    }
    gpu = FakePeriodicGpu(errors=errors).install(monkeypatch)
    nvml = _Nvml()
    for k in range(1, 6):
        gpu.now_s = float(k)
        rows = nvml.read()
        assert rows[0]["power_w"] is None and rows[0]["temperature_c"] is None and rows[0]["memory_bytes"] == 2**30
    dev = nvml.devices[0]
    assert dev["not_supported"] == ["power_w"] and gpu.calls["nvmlDeviceGetPowerUsage"] == 1  # asked once, at start
    assert dev["errors"] == {"temperature_c": {"count": 6, "last": "NVMLError_Unknown: Unknown Error"}}  # start + 5
    assert gpu.calls["nvmlDeviceGetTemperature"] == 6
    summary = summarize({"samples": [{**r, "t_s": 0.0, "step": 0} for r in rows], "window_s": 1.0, "gpus": [dev]}, 1)
    assert summary["devices"]["gpu0"]["not_supported"] == ["power_w"]
    assert summary["devices"]["gpu0"]["read_errors"]["temperature_c"]["count"] == 6


def test_archive_stores_the_time_series_and_summary(db_url, tmp_path, monkeypatch):
    from sqlalchemy import select

    from tasks.stages.archive import archive_run
    from tasks.store import RunTable, TelemetrySample, session_scope
    from tests.helpers.builders import make_records

    _FakeGpu().install(monkeypatch)
    sampler = Sampler(10).start()
    step = sampler.count(_busy_step())
    for _ in range(20):
        step()
    tel = sampler.stop()
    recs = make_records(tmp_path)
    samples_path = Path(recs[4].samples_path)
    samples_path.write_text(json.dumps({**json.loads(samples_path.read_text()), "telemetry": tel}))
    archive_run(db_url, str(tmp_path / "archive"), *recs)
    with session_scope(db_url) as s:
        rows = s.scalars(select(TelemetrySample).order_by(TelemetrySample.seq)).all()
        assert len(rows) == len(tel["samples"]) and {r.device for r in rows} == {"host", "gpu0", "gpu1"}
        assert all(r.power_w is None for r in rows if r.device in ("host", "gpu1"))  # NULL, not 0
        assert {r.power_w for r in rows if r.device == "gpu0"} == {250.0}
        summary = s.scalar(select(RunTable.data).where(RunTable.tool == "telemetry"))
    assert summary["devices"]["gpu0"]["power_mean_w"] == pytest.approx(250.0)
    assert summary["devices"]["gpu1"]["energy_per_example_j"] is None
    assert summary["steps"] == 20 and summary["examples"] == 20 * recs[0].case.batch_size
