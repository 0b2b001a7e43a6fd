"""Issue 39: NVML read every GPU of the host whatever CUDA_VISIBLE_DEVICES said (a run on card 3 labelled gpu0,
eight cards' power summed into one run's energy, a cpu case with GPU energy, any other job anywhere made the run
busy), counted the runner itself as another process where NVML lists host PIDs (containers), and estimated
energy as mean sampled power x window. A fake NVML with the real API's semantics (pynvml's functions, handles by
NVML index, mJ counters) stands in for the driver."""

from __future__ import annotations

import ctypes
import json
import os
from types import SimpleNamespace

import pynvml
import pytest

from tasks.analysis.telemetry import ENERGY_MIN_WINDOW_S, summarize
from tasks.runner import gpus, measure
from tasks.runner.telemetry import Sampler


class FakeHost:
    """A host of ``len(names)`` GPUs at the pynvml boundary: GPU ``i`` draws ``100 + 100 i`` W (sampled power) and
    its total-energy counter (mJ) advances at ``counter_w[i]`` W of wall time; ``procs[i]`` are the PIDs NVML lists
    on it (host PIDs: a container's runner is not among them); ``mig`` the MIG instances per GPU."""

    def __init__(self, names, procs=None, counter_w=None, mig=None, energy=True) -> None:
        self.names = names
        self.procs = procs or {}
        self.counter_w = counter_w or [150.0 * (i + 1) for i in range(len(names))]
        self.mig = mig or {}
        self.energy = energy
        self.t0 = None

    def install(self, mp: pytest.MonkeyPatch) -> FakeHost:
        import time

        self.t0 = time.perf_counter()

        def energy(h):
            if not self.energy:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return int(self.counter_w[h] * (time.perf_counter() - self.t0) * 1000) + 10_000_000

        def mig_handle(h, slot):
            if slot >= len(self.mig.get(h, [])):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            return ("mig", h, slot)

        def uuid(h):
            if isinstance(h, tuple):
                return self.mig[h[1]][h[2]]
            return f"GPU-{h}{h}{h}{h}-0000"

        def procs(h):
            return [SimpleNamespace(pid=p, usedGpuMemory=1) for p in self.procs.get(h, [])]

        for name, fn in {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: len(self.names),
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetName": lambda h: self.names[h],
            "nvmlDeviceGetUUID": uuid,
            "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7 if self.mig.get(h) else 0,
            "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
            "nvmlDeviceGetSamples": lambda h, kind, since: (_ for _ in ()).throw(
                pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            ),
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=50, memory=10),
            "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=2**30, total=80 * 2**30, free=0),
            "nvmlDeviceGetPowerUsage": lambda h: (100 + 100 * h) * 1000,  # mW
            "nvmlDeviceGetClockInfo": lambda h, kind: 1980,
            "nvmlDeviceGetTemperature": lambda h, sensor: 60,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0,
            "nvmlDeviceGetTotalEnergyConsumption": energy,
            "nvmlDeviceGetComputeRunningProcesses": procs,
            "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
        }.items():
            mp.setattr(pynvml, name, fn)
        return self


H200 = "NVIDIA H200"


class FakeCuda:
    """``libcuda`` at the ctypes boundary: the primary context of ordinal ``d`` is active when ``d in active``."""

    def __init__(self, active=(), init=0) -> None:
        self.active, self.init = set(active), init

    def cuInit(self, flags):
        return self.init

    def cuDeviceGet(self, ref, ordinal):
        ref._obj.value = ordinal
        return 0

    def cuDevicePrimaryCtxGetState(self, dev, flags, active):
        active._obj.value = int(dev.value in self.active)
        return 0


@pytest.mark.parametrize(
    ("spec", "order"),
    [
        (None, [(0, None), (1, None), (2, None), (3, None)]),
        ("3", [(3, None)]),
        ("2,0", [(2, None), (0, None)]),
        ("GPU-1111", [(1, None)]),
        ("1,GPU-3333-0000,9,0", [(1, None), (3, None)]),  # CUDA stops at the first entry naming no GPU
        ("1,1,2", []),  # a repeated GPU hides them all (CUDA 13 on an H200, bench/gpu_check.py)
        ("", []),
        ("-1", []),
        ("MIG-abc", [(2, "MIG-abcdef")]),
    ],
)
def test_visible_order_follows_cudas_rules(spec, order):
    uuids = [f"GPU-{i}{i}{i}{i}-0000" for i in range(4)]
    got, note = gpus.visible_order(spec, uuids, names=[H200] * 4, mig={"MIG-abcdef": 2})
    assert got == order and note is None


def test_ordinals_over_different_gpus_need_pci_order_or_uuids():
    uuids, names = ["GPU-a", "GPU-b"], ["NVIDIA A100", "NVIDIA H200"]
    got, note = gpus.visible_order("1", uuids, names=names)
    assert got is None and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in note and "by UUID" in note
    assert gpus.visible_order("1", uuids, names=names, device_order="PCI_BUS_ID") == ([(1, None)], None)
    assert gpus.visible_order("GPU-b", uuids, names=names) == ([(1, None)], None)
    got, note = gpus.visible_order(None, uuids, names=names)  # every GPU: the set is known, the labels are NVML's
    assert got == [(0, None), (1, None)] and "FASTEST_FIRST" in note


def test_telemetry_reads_only_the_runs_gpu_under_its_own_ordinal(monkeypatch):
    """A run on card 3 of four: one GPU series, labelled gpu0 (TF's GPU:0), with card 3's power and UUID."""
    FakeHost([H200] * 4).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    s = Sampler(20).start()
    tel = s.stop()
    assert [g["device"] for g in tel["gpus"]] == ["gpu0"]
    g = tel["gpus"][0]
    assert g["nvml_index"] == 3 and g["uuid"] == "GPU-3333-0000" and g["mig_uuid"] is None
    assert {r["device"] for r in tel["samples"]} == {"host", "gpu0"}
    assert {r["power_w"] for r in tel["samples"] if r["device"] == "gpu0"} == {400.0}  # card 3's, not card 0's


def test_a_cpu_case_reads_no_gpu(monkeypatch):
    """The runner of a cpu case has CUDA_VISIBLE_DEVICES="" (tasks.runner.devices.hidden_gpus_env): no GPU
    series, no GPU energy, and the record says why."""
    FakeHost([H200] * 2).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    tel = Sampler(20).start().stop()
    assert tel["gpus"] == [] and {r["device"] for r in tel["samples"]} == {"host"}
    assert tel["nvml"] == "no GPU visible to this process (CUDA_VISIBLE_DEVICES='')"
    assert set(summarize(tel, batch_size=4)["devices"]) == {"host"}


def test_unmappable_ordinals_read_nothing_and_say_why(monkeypatch):
    FakeHost(["NVIDIA A100", "NVIDIA H200"]).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    tel = Sampler(20).start().stop()
    assert tel["gpus"] == [] and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in tel["nvml"]


def test_energy_comes_from_the_counter_and_the_sampled_figure_is_kept_beside_it(monkeypatch):
    """The counter advances at 600 W while the sampled power field reads 200 W (a 1-s average that missed a
    burst): the window's energy is the counter's, labelled, and the sampled estimate is kept for comparison."""
    import time

    FakeHost([H200] * 2, counter_w=[150.0, 600.0]).install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    s = Sampler(20).start()
    time.sleep(0.3)
    tel = s.stop()
    counter = tel["gpus"][0]["energy_counter"]
    assert counter["energy_j"] == pytest.approx(600.0 * counter["window_s"], rel=0.02)
    d = summarize(tel, batch_size=10, examples=100)["devices"]["gpu0"]
    assert d["energy_source"] == "counter" and d["energy_j"] == pytest.approx(counter["energy_j"])
    assert d["energy_per_example_j"] == pytest.approx(counter["energy_j"] / 100)
    assert d["power_mean_w"] == pytest.approx(600.0, rel=0.02)
    assert d["energy_sampled_j"] == pytest.approx(200.0 * tel["window_s"])
    assert d["energy_window_short"] is True  # 0.3 s: the counter's 100-ms steps could be 2/3 of it
    long = {**tel, "window_s": ENERGY_MIN_WINDOW_S + 1}
    long["gpus"] = [{**tel["gpus"][0], "energy_counter": {"energy_j": 3000.0, "window_s": ENERGY_MIN_WINDOW_S + 1}}]
    d = summarize(long, batch_size=10, examples=100)["devices"]["gpu0"]
    assert d["energy_window_short"] is False and d["energy_j"] == 3000.0


def test_without_the_counter_energy_is_the_labelled_sampled_fallback_and_a_short_window_is_flagged(monkeypatch):
    FakeHost([H200], energy=False).install(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    tel = Sampler(20).start().stop()
    g = tel["gpus"][0]
    assert g["energy_counter"] is None and "NotSupported" in g["energy_counter_error"]
    d = summarize(tel, batch_size=1, examples=1)["devices"]["gpu0"]
    assert d["energy_source"] == "sampled power x window"
    assert d["energy_j"] == pytest.approx(100.0 * tel["window_s"])
    assert d["energy_window_short"] is True  # a window of a few ms


def test_other_processes_are_counted_on_the_runs_gpus_only_and_its_own_context_is_told_apart(monkeypatch):
    """Host PIDs (a container): NVML lists 4242 (this runner, under its host PID) on card 1, and another job
    on card 0, which this run does not use. The runner is not another process, and card 0 is not its GPU."""
    FakeHost([H200] * 2, procs={0: [777], 1: [4242]}).install(monkeypatch)
    nv = pynvml
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    visible, _ = gpus.visible_gpus(nv)
    assert gpus.other_processes(nv, visible, cuda=FakeCuda(active={0})) == {"most": 0, "own": "context"}
    # the same list where this process holds no context on the GPU: 4242 is another job
    assert gpus.other_processes(nv, visible, cuda=FakeCuda()) == {"most": 1, "own": "none"}
    # NVML lists this process's own PID (no PID namespace): found by PID
    visible_all, _ = gpus.visible_gpus(nv, {})
    got = gpus.other_processes(nv, visible_all, pid=777, cuda=FakeCuda())
    assert got == {"most": 1, "own": "pid"}  # card 1 has 4242, another process
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert measure.gpu_other_processes() is None  # a cpu case reads no GPU


def test_own_context_asks_the_driver_and_says_none_when_it_cannot():
    assert gpus.own_context(0, FakeCuda(active={0})) is True
    assert gpus.own_context(1, FakeCuda(active={0})) is False
    assert gpus.own_context(0, FakeCuda(init=100)) is None  # CUDA_ERROR_NO_DEVICE
    if not os.path.exists("/dev/nvidiactl"):
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            assert gpus.own_context(0) is None  # no driver library on this host


def test_the_gpu_check_loads_without_the_projects_dependencies_and_says_when_there_is_no_gpu(tmp_path):
    """bench/gpu_check.py runs on a GPU machine with only pynvml and PyTorch: tasks.runner's NVML modules load with
    pydantic absent (the package imports its driver lazily), and a host without a GPU is told so, exit 0."""
    import subprocess
    import sys

    from tests.helpers import ROOT

    bare = "import sys; sys.modules['pydantic'] = None; import tasks.runner.gpus, tasks.runner.telemetry; print('ok')"
    got = subprocess.run([sys.executable, "-c", bare], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr
    out = tmp_path / "gpu_check.json"
    cmd = [sys.executable, "bench/gpu_check.py", "--json", str(out)]
    got = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        assert "no GPU here: NVML unavailable" in got.stdout and "nothing to check" in got.stdout
        assert json.loads(out.read_text())["lines"] == [got.stdout.strip()]


class FakeTF:
    """``tensorflow`` at the boundary the runner's memory reads use: physical GPUs (NVML/CUDA's), the logical ones
    left after ``set_visible_devices`` (none for a cpu case), and a per-device allocator peak that reset clears."""

    def __init__(self, physical: int, logical: int) -> None:
        self.peak = {f"GPU:{i}": 100 * (i + 1) for i in range(logical)}
        self.resets: list[str] = []
        dev = SimpleNamespace
        phys = [dev(name=f"/physical_device:GPU:{i}", device_type="GPU") for i in range(physical)]
        logi = [dev(name=f"/device:GPU:{i}", device_type="GPU") for i in range(logical)]

        def info(d):
            if d not in self.peak:
                raise ValueError(f"No matching devices found for '{d}'")  # TF's message for a hidden GPU
            return {"current": 1, "peak": self.peak[d]}

        def reset(d):
            self.resets.append(d)
            self.peak[d] = 1

        self.config = SimpleNamespace(
            list_physical_devices=lambda kind=None: phys,
            list_logical_devices=lambda kind=None: logi,
            experimental=SimpleNamespace(get_memory_info=info, reset_memory_stats=reset),
        )


def test_device_memory_reads_the_logical_gpus_and_starts_afresh_before_the_window(monkeypatch):
    """Issue 39: the peak was read on GPU:0 after checking the *physical* devices, which a cpu case's runner still
    lists after hiding them from TF (get_memory_info then raised), and from process start (the cold step's
    autotuning scratch). Now: the logical GPUs, summed, from the last reset."""
    import sys

    hidden = FakeTF(physical=1, logical=0)
    monkeypatch.setitem(sys.modules, "tensorflow", hidden)
    assert measure.device_peak_bytes() is None  # a cpu case on a GPU host: no GPU of its own, no error
    measure.reset_device_peak()
    assert hidden.resets == []
    two = FakeTF(physical=2, logical=2)
    monkeypatch.setitem(sys.modules, "tensorflow", two)
    assert measure.device_peak_bytes() == 100 + 200
    measure.reset_device_peak()
    assert two.resets == ["GPU:0", "GPU:1"] and measure.device_peak_bytes() == 2


def test_an_application_is_built_with_the_gpus_hidden(monkeypatch, tmp_path):
    """Issue 39: the pull stage's keras.applications build ran outside the measuring pool with the GPUs visible, so
    it could take GPU memory and time during another case's measurement."""
    from tasks.records import Case
    from tasks.settings import Settings
    from tasks.stages import pipeline, pull

    seen = {}

    def fake_build(case, dest, runner):
        seen["env"] = runner.env
        raise RuntimeError("stop here")

    monkeypatch.setattr(pull, "build_application", fake_build)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    case = Case(model="resnet50", backbone="keras.applications")
    ctx = SimpleNamespace(case=case, dag_id="d", run_id="r", key=lambda: "k")
    st = Settings.from_env()
    monkeypatch.setattr(pipeline, "work_dir", lambda st, ctx: tmp_path)
    with pytest.raises(RuntimeError, match="stop here"):
        pipeline._pull(SimpleNamespace(refused=None), ctx, st)
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == ""


def test_cudas_jit_cache_is_kept_per_host_and_a_users_choice_wins(tmp_path):
    """Issue 39: nothing set CUDA_CACHE_PATH, so each fresh runner process on a GPU newer than the wheel's kernels
    JIT-compiled them again in its cold step (CUDA's default cache, 256 MiB, under a home that containers lose)."""
    from tasks.runner import execution

    env = {"PERFWATCH_HOME": str(tmp_path / "pw")}
    got = execution.configure_cuda_cache(env)
    assert got == str(tmp_path / "pw" / "cuda-cache") == env["CUDA_CACHE_PATH"]
    assert env["CUDA_CACHE_MAXSIZE"] == str(4 * 2**30) and (tmp_path / "pw" / "cuda-cache").is_dir()
    assert execution.cache_entries(got) == 0
    (tmp_path / "pw" / "cuda-cache" / "ComputeCache" / "a").mkdir(parents=True)
    (tmp_path / "pw" / "cuda-cache" / "ComputeCache" / "a" / "k1").write_bytes(b"x")
    assert execution.cache_entries(got) == 1
    mine = {"CUDA_CACHE_PATH": str(tmp_path / "mine"), "CUDA_CACHE_MAXSIZE": "1000"}
    assert execution.configure_cuda_cache(mine) == str(tmp_path / "mine") and mine["CUDA_CACHE_MAXSIZE"] == "1000"
