"""Benchmark: is the hypervisor's steal time in a process's CPU time? (what the busy-host rule may decide on)

Run: ``.venv/bin/python bench/steal.py [--minutes 5] [--cpu 1] [--window-s 1]``.

On a virtual machine the hypervisor runs other guests on this guest's CPUs; the time taken is *steal*
(``/proc/stat``'s 8th CPU field, in USER_HZ ticks). A step's wall time (our timer) grows by what was stolen
during it. Whether its **CPU time** (``time.process_time``: ``CLOCK_PROCESS_CPUTIME_ID``, the scheduler's
runtime of the process's threads, what ``tasks.runner.counters`` records per step) grows too depends on the
kernel: with paravirtual steal accounting (``CONFIG_PARAVIRT_TIME_ACCOUNTING``, KVM's steal-time MSR) the
scheduler's task clock leaves stolen time out. This bench measures it instead of assuming it.

One busy thread (a fixed pure-Python loop) pinned to ``--cpu`` runs for ``--minutes``; every ``--window-s`` it
records: wall time (``time.perf_counter``), its CPU time (``time.process_time``), its run-queue wait
(``/proc/thread-self/schedstat`` 2nd field: runnable but waiting for this guest's scheduler, i.e. other
processes of this guest), and the steal of its CPU (``/proc/stat`` ``cpuN``, ticks -> s). Per window
``lost = wall - cpu - wait`` is the time the thread was neither running by its own CPU clock nor waiting in
this guest: if CPU time excludes steal, ``lost`` follows steal one to one (slope ~1); if it included steal,
``lost`` stays ~0 whatever steal was. Printed: the windows binned by steal share, with ``lost`` and the CPU
time per loop iteration (does steal also slow the work itself, e.g. by a co-runner's cache pressure?), the
least-squares slope of ``lost`` on steal, and the host's 1-minute load at start and end.

Last line (machine-readable)::

    steal: windows=N steal_share_max=<x> slope_lost_on_steal=<s> cpu_per_iter_ratio_stolen_vs_not=<r> load=<a>-<b>
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ITERS = 20_000  # loop iterations per work unit (~1 ms of pure Python here)


def _steal_s(cpu: int) -> float:
    """Steal time of CPU ``cpu`` so far, seconds (``/proc/stat``, USER_HZ ticks)."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                return int(line.split()[8]) / hz
    raise RuntimeError(f"/proc/stat has no cpu{cpu} line")


def _wait_s() -> float:
    """This thread's run-queue wait so far, seconds (schedstat's 2nd field, ns)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def _work() -> int:
    x = 0
    for i in range(ITERS):
        x += i * i
    return x


def collect(minutes: float, cpu: int, window_s: float) -> list[dict[str, float]]:
    """Windows of (wall, cpu, wait, steal) seconds and loop units done, for ``minutes`` on CPU ``cpu``."""
    os.sched_setaffinity(0, {cpu})
    end = time.perf_counter() + minutes * 60
    rows = []
    while time.perf_counter() < end:
        w0, c0, q0, s0, n = time.perf_counter(), time.process_time(), _wait_s(), _steal_s(cpu), 0
        while time.perf_counter() - w0 < window_s:
            _work()
            n += 1
        w1, c1, q1, s1 = time.perf_counter(), time.process_time(), _wait_s(), _steal_s(cpu)
        rows.append({"wall": w1 - w0, "cpu": c1 - c0, "wait": q1 - q0, "steal": s1 - s0, "units": n})
    return rows


def report(rows: list[dict[str, float]], load: tuple[float, float]) -> str:
    """The table and the machine-readable last line (module docstring)."""
    for r in rows:
        r["lost"] = r["wall"] - r["cpu"] - r["wait"]
        r["share"] = r["steal"] / r["wall"]
        r["cpu_per_unit_ms"] = r["cpu"] / r["units"] * 1e3
    bins = [(0.0, 0.01), (0.01, 0.05), (0.05, 0.15), (0.15, 1.01)]
    out = ["steal share   windows  steal s  lost s  (lost/steal)  CPU ms per unit (median)"]
    for lo, hi in bins:
        sel = [r for r in rows if lo <= r["share"] < hi]
        if not sel:
            continue
        steal, lost = sum(r["steal"] for r in sel), sum(r["lost"] for r in sel)
        ratio = f"{lost / steal:.2f}" if steal > 0 else "-"
        per = statistics.median(r["cpu_per_unit_ms"] for r in sel)
        out.append(f"[{lo:.2f}, {hi:.2f})   {len(sel):7d}  {steal:7.2f}  {lost:6.2f}  {ratio:>12}  {per:.4f}")
    xs, ys = [r["steal"] for r in rows], [r["lost"] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else float("nan")
    stolen = [r["cpu_per_unit_ms"] for r in rows if r["share"] >= 0.05]
    calm = [r["cpu_per_unit_ms"] for r in rows if r["share"] < 0.01]
    per_ratio = statistics.median(stolen) / statistics.median(calm) if stolen and calm else float("nan")
    out.append(
        f"windows {len(rows)}, total steal {sum(xs):.2f} s, lost {sum(ys):.2f} s; least-squares slope of lost on "
        f"steal {slope:.3f} (1: CPU time leaves steal out, 0: it counts it); CPU time per unit with >= 5% steal / "
        f"with < 1%: {per_ratio:.3f}; 1-min load {load[0]:.2f} -> {load[1]:.2f}"
    )
    out.append(
        f"steal: windows={len(rows)} steal_share_max={max(r['share'] for r in rows):.3f} "
        f"slope_lost_on_steal={slope:.3f} cpu_per_iter_ratio_stolen_vs_not={per_ratio:.3f} "
        f"load={load[0]:.2f}-{load[1]:.2f}"
    )
    return "\n".join(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--cpu", type=int, default=1, help="the CPU to pin the busy thread to")
    ap.add_argument("--window-s", type=float, default=1.0)
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    rows = collect(args.minutes, args.cpu, args.window_s)
    print(report(rows, (load0, os.getloadavg()[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
