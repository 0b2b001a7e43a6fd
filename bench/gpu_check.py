"""The real GPU check (issue 39): perfwatch's NVML parts on the GPU machine at hand, and its TF runs where a TF GPU
runner exists. Prints what it measured and what it could not run and why; ``--json PATH`` writes the same as JSON.

Run it on a GPU host from the repository root::

    python bench/gpu_check.py --json gpu_check.json

It needs only Python, pynvml (nvidia-ml-py) and this repository's ``tasks/runner/{gpus,telemetry,probe,cpus,devices}``
(psutil for the probe and the host rows; PyTorch, where installed, to put a load on the GPU; TensorFlow, where
installed with CUDA, for the TF part). On a host without a GPU (no NVML, or NVML shows none) it says so and exits 0.

Sections, each timed by our timer (``time.perf_counter``) and read through NVML:

1. ``fingerprint``: the env-fingerprint's ``gpu`` section (``tasks.runner.probe``), as a run would record it.
2. ``visible``: ``CUDA_VISIBLE_DEVICES`` variants (unset, an ordinal, a UUID prefix, empty, ``-1``): the GPUs
   ``tasks.runner.gpus.visible_gpus`` maps each to, checked against what CUDA itself shows a fresh process
   under the same variable (PyTorch's ``torch.cuda.get_device_properties(i).uuid``), where PyTorch exists.
3. ``processes`` (before 4, while this process has no CUDA context yet): the other-process check
   (``tasks.runner.gpus.other_processes``) before this process has a CUDA context, with one (is this process
   listed by its PID, or are NVML's PIDs the host's), and with a second process holding a context (it must count
   as one other).
4. ``telemetry``: ``tasks.runner.telemetry.Sampler`` at 100 ms over an idle, a steady and a bursty load (bf16
   matmuls from PyTorch: steady back to back, bursty 0.25 s on / 0.25 s off), with the energy from NVML's total
   energy counter beside mean sampled power x window, and the counter's update period (the counter polled for 1 s).
5. ``tensorflow``: where TensorFlow with CUDA is importable here and ``perfwatch`` is installed, one train run,
   one infer run and the demo's paired gate with ``--device gpu``; else why not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.runner import gpus  # noqa: E402 - after the repository is on sys.path
from tasks.runner.telemetry import Sampler  # noqa: E402

LOAD_S = 4.0
SAMPLE_MS = 100


def _say(report: dict[str, Any], section: str, line: str) -> None:
    print(f"[{section}] {line}", flush=True)
    report.setdefault("lines", []).append(f"[{section}] {line}")


def _torch() -> Any:
    try:
        import torch  # type: ignore[import-not-found]  # PyTorch is not a project dependency: the GPU host's own
    except ImportError as e:
        return f"PyTorch is not importable here ({e})"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    return torch


def fingerprint(report: dict[str, Any]) -> None:
    try:
        from tasks.runner import probe
    except ImportError as e:
        _say(report, "fingerprint", f"not run: the probe needs psutil ({e})")
        return
    section = probe._gpu_section()
    report["fingerprint"] = section
    _say(
        report,
        "fingerprint",
        f"nvml={section['nvml']} driver={section['driver_version']} cuda_driver={section['cuda_driver_version']} "
        f"count={section['count']} physical_count={section['physical_count']}",
    )
    for d in section["devices"]:
        keep = ("index", "name", "compute_capability", "memory_total_bytes", "power_limit_mw", "mig_mode")
        _say(report, "fingerprint", "  " + ", ".join(f"{k}={d.get(k)}" for k in keep))


_CHILD = """
import json, os, sys
sys.path.insert(0, {root!r})
import pynvml
from tasks.runner import gpus
pynvml.nvmlInit()
mapped, note = gpus.visible_gpus(pynvml)
out = {{"mapped": [g.uuid for g in mapped], "note": note}}
try:
    import torch
    n = torch.cuda.device_count()
    out["cuda"] = ["GPU-" + str(torch.cuda.get_device_properties(i).uuid) for i in range(n)]
except Exception as e:
    out["cuda_error"] = f"{{type(e).__name__}}: {{e}}"
print(json.dumps(out))
"""


def visible(report: dict[str, Any], nv: Any) -> None:
    uuid0 = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    uuid0 = uuid0.decode() if isinstance(uuid0, bytes) else uuid0
    last = nv.nvmlDeviceGetCount() - 1
    variants: list[str | None] = [None, "0", str(last), uuid0[:12], "", "-1", f"{last},{last}"]
    rows = []
    for spec in dict.fromkeys(variants):
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        if spec is not None:
            env["CUDA_VISIBLE_DEVICES"] = spec
        got = subprocess.run(
            [sys.executable, "-c", _CHILD.format(root=str(ROOT))], env=env, capture_output=True, text=True, timeout=120
        )
        if got.returncode != 0:
            _say(report, "visible", f"CUDA_VISIBLE_DEVICES={spec!r}: the child failed: {got.stderr.strip()[-300:]}")
            continue
        row = {"spec": spec, **json.loads(got.stdout.strip().splitlines()[-1])}
        if "cuda" in row:
            row["agrees"] = row["mapped"] == row["cuda"]
        rows.append(row)
        verdict = {True: "agrees with CUDA", False: "DIFFERS from CUDA", None: row.get("cuda_error", "CUDA not asked")}
        _say(
            report,
            "visible",
            f"CUDA_VISIBLE_DEVICES={spec!r}: NVML mapping {row['mapped']} (note: {row['note']}); "
            f"CUDA shows {row.get('cuda')}: {verdict[row.get('agrees')]}",
        )
    report["visible"] = rows


_HOLDER = """
import sys, time, torch
x = torch.ones(1, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
"""


def processes(report: dict[str, Any], nv: Any, torch: Any) -> None:
    visible_now, _ = gpus.visible_gpus(nv)
    me = os.getpid()

    def listed() -> list[int]:
        h = visible_now[0].handle
        return sorted({p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)})

    out: dict[str, Any] = {"pid": me}
    out["before_context"] = {**(gpus.other_processes(nv, visible_now) or {}), "listed": listed()}
    _say(report, "processes", f"before this process has a context: {out['before_context']} (pid {me})")
    if isinstance(torch, str):
        _say(report, "processes", f"with a context: not run: {torch}")
        report["processes"] = out
        return
    torch.ones(1, device="cuda:0")
    torch.cuda.synchronize()
    time.sleep(0.5)
    pids = listed()
    out["with_context"] = {
        **(gpus.other_processes(nv, visible_now) or {}),
        "listed": pids,
        "own_pid_listed": me in pids,
    }
    where = "by its PID" if me in pids else "not by its PID: NVML lists host PIDs (a PID namespace, e.g. a container)"
    _say(report, "processes", f"with this process's context: {out['with_context']}; this process is listed {where}")
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, "20"], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline() if holder.stdout else None
        time.sleep(0.5)
        out["with_another"] = {**(gpus.other_processes(nv, visible_now) or {}), "listed": listed()}
        _say(report, "processes", f"with a second process holding a context: {out['with_another']} (expect most=1)")
    finally:
        holder.kill()
        holder.wait()
    report["processes"] = out


def _load(torch: Any, seconds: float, on_s: float | None) -> int:
    """bf16 matmuls on cuda:0 for ``seconds``: back to back (``on_s`` None) or ``on_s`` on / ``on_s`` off."""
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        burst_end = time.perf_counter() + (on_s or seconds)
        while time.perf_counter() < min(burst_end, end):
            for _ in range(8):
                a @ b
            torch.cuda.synchronize()
            n += 8
        if on_s:
            time.sleep(min(on_s, max(0.0, end - time.perf_counter())))
    return n


def counter_period(nv: Any, handle: Any, torch: Any) -> dict[str, Any]:
    """The total-energy counter polled every ~1 ms for 1 s under load: the median time between its changes."""
    import threading

    load = threading.Thread(target=lambda: _load(torch, 1.2, None)) if not isinstance(torch, str) else None
    if load is not None:
        load.start()
    changes, last, t_end = [], None, time.perf_counter() + 1.0
    while time.perf_counter() < t_end:
        v = nv.nvmlDeviceGetTotalEnergyConsumption(handle)
        if v != last:
            changes.append(time.perf_counter())
            last = v
        time.sleep(0.001)
    if load is not None:
        load.join()  # a CUDA thread alive at interpreter exit aborts it
    gaps = [b - a for a, b in zip(changes[1:], changes[2:], strict=False)]
    return {"changes": len(changes) - 1, "median_update_ms": statistics.median(gaps) * 1000 if gaps else None}


def telemetry(report: dict[str, Any], nv: Any, torch: Any) -> None:
    loads = {"idle": None, "steady": None, "bursty": 0.25}
    out = {}
    for name, on_s in loads.items():
        if name != "idle" and isinstance(torch, str):
            _say(report, "telemetry", f"{name}: not run: {torch}")
            continue
        sampler = Sampler(SAMPLE_MS).start()
        if name == "idle":
            time.sleep(LOAD_S)
            matmuls = 0
        else:
            matmuls = _load(torch, LOAD_S, on_s)
        tel = sampler.stop()
        g = tel["gpus"][0] if tel["gpus"] else None
        rows = [r for r in tel["samples"] if r["device"] == "gpu0"]
        power = [r["power_w"] for r in rows if r["power_w"] is not None]
        util = [r["utilization_pct"] for r in rows if r["utilization_pct"] is not None]
        sampled = statistics.fmean(power) * tel["window_s"] if power else None
        counter = (g or {}).get("energy_counter") or {}
        item = {
            "window_s": tel["window_s"],
            "samples": len(rows),
            "matmuls": matmuls,
            "utilization_mean_pct": statistics.fmean(util) if util else None,
            "power_mean_w_sampled": statistics.fmean(power) if power else None,
            "energy_sampled_j": sampled,
            "energy_counter_j": counter.get("energy_j"),
            "counter_over_sampled": counter["energy_j"] / sampled if counter.get("energy_j") and sampled else None,
            "sm_clock_mhz": sorted({r["sm_clock_mhz"] for r in rows if r["sm_clock_mhz"] is not None}),
            "temperature_max_c": max(
                (r["temperature_c"] for r in rows if r["temperature_c"] is not None), default=None
            ),
            "throttle_reasons_seen": (g or {}).get("throttle_reasons_seen"),
            "utilization_source": (g or {}).get("utilization_source"),
            "not_supported": (g or {}).get("not_supported"),
            "read_errors": (g or {}).get("errors"),
            "energy_counter_error": (g or {}).get("energy_counter_error"),
            "nvml": tel["nvml"],
        }
        try:
            from tasks.analysis.telemetry import summarize

            d = summarize(tel, batch_size=1, examples=max(1, matmuls or 1))["devices"].get("gpu0") or {}
            item["summary"] = {
                k: d.get(k) for k in ("energy_source", "energy_j", "energy_window_short", "power_mean_w")
            }
        except ImportError as e:  # scipy (the memory-growth fit) absent from this interpreter
            item["summary"] = f"not run: {e}"
        out[name] = item
        clocks = item["sm_clock_mhz"]
        _say(
            report,
            "telemetry",
            f"{name}: {item['samples']} samples in {item['window_s']:.2f} s, "
            f"util {_f(item['utilization_mean_pct'])} %, "
            f"power {_f(item['power_mean_w_sampled'])} W, energy counter {_f(item['energy_counter_j'])} J vs sampled "
            f"{_f(item['energy_sampled_j'])} J (x{_f(item['counter_over_sampled'], 3)}), SM clock "
            f"{clocks[0] if clocks else None}-{clocks[-1] if clocks else None} MHz, max {item['temperature_max_c']} C, "
            f"throttle {item['throttle_reasons_seen']}",
        )
    visible_now, _ = gpus.visible_gpus(nv)
    try:
        out["counter_update"] = counter_period(nv, visible_now[0].handle, torch)
        _say(report, "telemetry", f"energy counter under load: {out['counter_update']}")
    except Exception as e:  # noqa: BLE001 - NVMLError_NotSupported before Volta
        _say(report, "telemetry", f"energy counter: not read ({type(e).__name__}: {e})")
    report["telemetry"] = out


def _f(x: Any, nd: int = 1) -> str:
    return "None" if x is None else f"{x:.{nd}f}"


def tensorflow(report: dict[str, Any]) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["?"])[-1]
        _say(report, "tensorflow", f"not run: TensorFlow is not importable in this interpreter ({why})")
        report["tensorflow"] = {"skipped": why}
        return
    if probe.stdout.strip().splitlines()[-1] == "0":
        _say(report, "tensorflow", "not run: TensorFlow sees no GPU (a CPU-only build, or no CUDA libraries)")
        report["tensorflow"] = {"skipped": "TF sees no GPU"}
        return
    commands = [
        ["perfwatch", "run", "demo_mobilenet", "--version", "1", "--device", "gpu"],
        ["perfwatch", "run", "demo_mobilenet", "--version", "1", "--device", "gpu", "--mode", "infer"],
        ["perfwatch", "run", "demo_mobilenet", "--version", "2", "--device", "gpu", "--paired"],
    ]
    done = []
    for cmd in commands:
        t0 = time.perf_counter()
        got = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        done.append({"cmd": cmd, "rc": got.returncode, "s": time.perf_counter() - t0, "tail": got.stdout[-2000:]})
        _say(report, "tensorflow", f"{' '.join(cmd)}: exit {got.returncode} in {done[-1]['s']:.0f} s")
    report["tensorflow"] = {"runs": done}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the report here as JSON")
    args = ap.parse_args(argv)
    report: dict[str, Any] = {"python": sys.version.split()[0], "load1": os.getloadavg()[0]}
    try:
        import pynvml as nv
    except ImportError as e:
        _say(report, "host", f"no GPU check: pynvml (nvidia-ml-py) is not importable ({e})")
        return _done(report, args.json)
    try:
        nv.nvmlInit()
        count = nv.nvmlDeviceGetCount()
    except nv.NVMLError as e:
        _say(report, "host", f"no GPU here: NVML unavailable ({type(e).__name__}: {e}); nothing to check")
        return _done(report, args.json)
    if count == 0:
        _say(report, "host", "no GPU here: NVML reports none; nothing to check")
        return _done(report, args.json)
    driver = nv.nvmlSystemGetDriverVersion()
    _say(
        report, "host", f"{count} GPU(s), driver {driver}, Python {report['python']}, 1-min load {report['load1']:.2f}"
    )
    torch = _torch()
    _say(
        report, "host", f"GPU load generator: {'PyTorch ' + torch.__version__ if not isinstance(torch, str) else torch}"
    )
    for name, fn in (
        ("fingerprint", lambda: fingerprint(report)),
        ("visible", lambda: visible(report, nv)),
        ("processes", lambda: processes(report, nv, torch)),  # first: it starts before this process has a context
        ("telemetry", lambda: telemetry(report, nv, torch)),
        ("tensorflow", lambda: tensorflow(report)),
    ):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - one section's failure is reported, the others still run
            _say(report, name, f"FAILED: {type(e).__name__}: {e}")
    report["load1_end"] = os.getloadavg()[0]
    return _done(report, args.json)


def _done(report: dict[str, Any], path: Path | None) -> int:
    if path is not None:
        path.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
