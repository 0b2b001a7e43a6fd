"""Per-step CPU time and run-queue wait of this process, read around each timed step.

Wall time is the step's own timer (``time.perf_counter`` inside the step, ``tasks.runner.measure``); this
module reads two more counters *outside* that window, so reading them never lengthens the wall time:

* ``cpu_ms``: the process's CPU time during the step, all threads, user + system (``time.process_time``);
* ``wait_ms``: the time its threads were runnable but waiting for a CPU, the sum over
  ``/proc/self/task/*/schedstat`` of the 2nd field (run-queue wait, ns): the direct measure of what other
  processes took from the step. The threads are listed before each step (a thread started during it counts
  from the next step; one that ended during it is lost: TF's pools live as long as the process). Without
  schedstat (not Linux, or a kernel without ``CONFIG_SCHED_INFO``) there is no wait: its list stays empty,
  never zeros.

Order around a step: wait read, cpu read, the step (its t0 .. t1), cpu read, wait read.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from pathlib import Path

#: the per-thread directory read for the run-queue wait (a module attribute: tests point it elsewhere)
TASK_DIR = Path("/proc/self/task")


class WaitReader:
    """Reads the run-queue wait (ns) of each of this process's threads from :data:`TASK_DIR`.

    Each thread's ``schedstat`` is opened once and re-read in place (``pread`` at 0 regenerates a proc
    file), so a reading costs a directory listing and one small read per thread. :meth:`read` lists the
    threads (``relist``) or reuses the last list; a thread that has ended is dropped (its file closed).
    ``available`` is False where there is no schedstat; :meth:`read` then returns None.
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._fds)
        self.available = self.read() is not None

    def read(self, relist: bool = True) -> dict[str, int] | None:
        """Thread id -> run-queue wait so far (ns); ``None`` when no thread's schedstat could be read."""
        if relist:
            try:
                tids = os.listdir(TASK_DIR)
            except OSError:
                return None
        else:
            tids = list(self._fds)
        out: dict[str, int] = {}
        for tid in tids:
            try:
                fd = self._fds.get(tid)
                if fd is None:
                    fd = self._fds[tid] = os.open(f"{TASK_DIR}/{tid}/schedstat", os.O_RDONLY)
                out[tid] = int(os.pread(fd, 128, 0).split()[1])
            except (OSError, IndexError, ValueError):
                fd = self._fds.pop(tid, None)
                if fd is not None:
                    os.close(fd)
        if relist:
            for tid in set(self._fds) - set(tids):
                os.close(self._fds.pop(tid))
        return out or None


def _close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()


def wait_delta_ms(before: dict[str, int], after: dict[str, int]) -> float:
    """The run-queue wait (ms) between two :meth:`WaitReader.read` readings: per thread seen in ``after``,
    its growth since ``before`` (a thread new in ``after`` from 0), summed."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e6


class Recorder:
    """A timed step that also records each call's CPU time and run-queue wait (module docstring).

    Calling it runs ``step`` (which returns its wall time, ms) and returns that wall time, so it stands
    wherever a step does (``tasks.runner.progress.run_steps``, ``Sampler.count``); ``cpu_ms`` and
    ``wait_ms`` grow by one value (ms) per call, ``wait_ms`` only where schedstat is there (checked once,
    at construction). :meth:`take` returns both lists and starts new ones.
    """

    def __init__(self, step: Callable[[], float]) -> None:
        self.step = step
        self.cpu_ms: list[float] = []
        self.wait_ms: list[float] = []
        self.waits = WaitReader()

    def __call__(self) -> float:
        w0 = self.waits.read() if self.waits.available else None
        c0 = time.process_time()
        wall_ms = self.step()
        c1 = time.process_time()
        w1 = self.waits.read(relist=False) if w0 is not None else None
        self.cpu_ms.append((c1 - c0) * 1000.0)
        if w0 is not None and w1 is not None:
            self.wait_ms.append(wait_delta_ms(w0, w1))
        return wall_ms

    def take(self) -> tuple[list[float], list[float]]:
        """The CPU times and waits (ms) recorded since the last call; ``wait_ms`` is empty without schedstat,
        and also if a reading failed on some step (a partial list would not line up with the steps)."""
        cpu, wait = self.cpu_ms, self.wait_ms
        self.cpu_ms, self.wait_ms = [], []
        return cpu, wait if len(wait) == len(cpu) else []
