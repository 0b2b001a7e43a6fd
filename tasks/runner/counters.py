"""Per-step CPU time and run-queue wait of this process, read around each timed step.

Wall time is the step's own timer (``time.perf_counter`` inside the step, ``tasks.runner.measure``); this
module reads two more counters *outside* that window, so reading them never lengthens the wall time:

* ``cpu_ms``: the process's CPU time during the step, all threads, user + system (``time.process_time``);
* ``wait_ms``: the time its threads were runnable but waiting for a CPU, the sum over
  ``/proc/self/task/*/schedstat`` of the 2nd field (run-queue wait, ns): the direct measure of what other
  processes took from the step. The threads are listed before each step (a thread started during it counts
  from the next step). A thread that ended during a step takes its wait in that step with it: such threads are
  counted (:meth:`Recorder.wait_record`: how many, and their share of the threads read), never guessed. Without
  schedstat (not Linux, or a kernel without ``CONFIG_SCHED_INFO``) there is no wait: its list stays empty,
  never zeros; a schedstat whose every counter stays 0 over the steps (gVisor reports zeros, as does a kernel
  without ``CONFIG_SCHED_INFO`` on some versions) is no wait either, not "no wait".

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
    ``available`` is False where there is no schedstat; :meth:`read` then returns None. ``counting`` turns True
    once any thread's counter reads above 0 (an all-zero schedstat counts nothing). ``lost`` is how many threads
    listed by the last relisting read could not be read by the read after it (``relist=False``): threads that
    ended between the two, whose wait in between is lost.
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._fds)
        self.counting = False
        self.lost = 0
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
        self.lost = 0
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
                if not relist:
                    self.lost += 1
        self.counting = self.counting or any(ns > 0 for ns in out.values())
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
    at construction). :meth:`take` returns both lists and starts new ones. ``threads_read`` and
    ``threads_lost`` count, over every step so far, the threads read before a step and those of them that ended
    during it (:meth:`wait_record`).
    """

    def __init__(self, step: Callable[[], float]) -> None:
        self.step = step
        self.cpu_ms: list[float] = []
        self.wait_ms: list[float] = []
        self.waits = WaitReader()
        self.threads_read = 0
        self.threads_lost = 0
        self.steps_losing = 0

    def __call__(self) -> float:
        w0 = self.waits.read() if self.waits.available else None
        c0 = time.process_time()
        wall_ms = self.step()
        c1 = time.process_time()
        w1 = self.waits.read(relist=False) if w0 is not None else None
        self.cpu_ms.append((c1 - c0) * 1000.0)
        if w0 is not None and w1 is not None:
            self.wait_ms.append(wait_delta_ms(w0, w1))
        if w0 is not None:
            self.threads_read += len(w0)
            self.threads_lost += self.waits.lost
            self.steps_losing += self.waits.lost > 0
        return wall_ms

    def wait_available(self) -> str | None:
        """None where the run-queue wait was read, else why not (``no schedstat``; ``schedstat reads 0``: every
        thread's counter stayed 0, as gVisor and some kernels report)."""
        if not self.waits.available:
            return "no schedstat (not Linux, or a kernel without CONFIG_SCHED_INFO)"
        if not self.waits.counting:
            return "schedstat reads 0 for every thread (gVisor, or a kernel that does not keep it)"
        return None

    def wait_record(self) -> dict[str, float | int | str | None]:
        """How far the run-queue wait can be trusted, over every step so far: ``unavailable`` (None, or why
        :meth:`wait_available` says it is not there), ``threads_read`` (threads read before a step, summed over
        the steps), ``threads_lost`` (of those, the ones that ended during their step: their wait in it is not
        counted), ``lost_share`` (``threads_lost / threads_read``, None with nothing read) and
        ``steps_losing_threads`` (steps in which one ended)."""
        return {
            "unavailable": self.wait_available(),
            "threads_read": self.threads_read,
            "threads_lost": self.threads_lost,
            "lost_share": self.threads_lost / self.threads_read if self.threads_read else None,
            "steps_losing_threads": self.steps_losing,
        }

    def take(self) -> tuple[list[float], list[float]]:
        """The CPU times and waits (ms) recorded since the last call; ``wait_ms`` is empty where the wait is
        unavailable (:meth:`wait_available`: no schedstat, or one that reads 0 for every thread, never zeros),
        and also if a reading failed on some step (a partial list would not line up with the steps)."""
        cpu, wait = self.cpu_ms, self.wait_ms
        self.cpu_ms, self.wait_ms = [], []
        return cpu, wait if len(wait) == len(cpu) and self.wait_available() is None else []
