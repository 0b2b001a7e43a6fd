"""Per-step CPU time and run-queue wait (``tasks.runner.counters``) and the paired mode's drawn pair order,
without TensorFlow: fake step functions stand in for the model's step."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tasks.runner import counters
from tasks.runner.modes.paired import pair_orders


def _fake_task_dir(root: Path, waits: dict[str, int]) -> None:
    for tid, ns in waits.items():
        (root / tid).mkdir(parents=True, exist_ok=True)
        (root / tid / "schedstat").write_text(f"123456 {ns} 7\n")


def test_counters_are_read_around_the_step_never_inside_its_wall_window(tmp_path, monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(counters, "TASK_DIR", tmp_path)
    _fake_task_dir(tmp_path, {"1": 1_000_000, "2": 0})
    clock = iter([10.0, 10.25])  # process_time before and after the step: 250 ms of CPU

    def process_time() -> float:
        events.append("cpu")
        return next(clock)

    real_read = counters.WaitReader.read

    def read(self, relist=True):
        events.append("wait")
        return real_read(self, relist)

    rec = counters.Recorder(lambda: 0.0)
    monkeypatch.setattr(counters.time, "process_time", process_time)
    monkeypatch.setattr(counters.WaitReader, "read", read)

    def step() -> float:
        events.append("t0")
        _fake_task_dir(tmp_path, {"1": 4_000_000, "2": 500_000})  # 3 ms + 0.5 ms waited during the step
        events.append("t1")
        return 42.0

    rec.step = step
    assert rec() == 42.0  # the step's own wall time, untouched
    assert events == ["wait", "cpu", "t0", "t1", "cpu", "wait"]
    cpu, wait = rec.take()
    assert cpu == [pytest.approx(250.0)] and wait == [pytest.approx(3.5)]
    assert rec.take() == ([], [])  # taken: new lists


def test_wait_list_is_empty_without_schedstat(tmp_path, monkeypatch):
    monkeypatch.setattr(counters, "TASK_DIR", tmp_path / "no-such-dir")
    rec = counters.Recorder(lambda: 1.0)
    assert not rec.waits.available
    for _ in range(3):
        rec()
    cpu, wait = rec.take()
    assert len(cpu) == 3 and wait == []  # never zeros


def test_a_thread_new_during_a_step_counts_from_the_next_and_an_ended_one_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(counters, "TASK_DIR", tmp_path)
    _fake_task_dir(tmp_path, {"1": 0})
    reader = counters.WaitReader()
    before = reader.read()
    _fake_task_dir(tmp_path, {"1": 2_000_000, "9": 5_000_000})
    assert counters.wait_delta_ms(before, reader.read(relist=False)) == pytest.approx(2.0)  # 9 not listed yet
    assert set(reader.read()) == {"1", "9"}
    for f in (tmp_path / "9").iterdir():
        f.unlink()
    (tmp_path / "9").rmdir()
    assert set(reader.read()) == {"1"}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only")
def test_real_counters_see_cpu_work_and_cost_little():
    def busy() -> float:
        t0 = time.perf_counter()
        sum(i * i for i in range(20000))
        return (time.perf_counter() - t0) * 1000.0

    rec = counters.Recorder(busy)
    walls = [rec() for _ in range(20)]
    cpu, wait = rec.take()
    assert len(cpu) == 20 and all(c > 0 for c in cpu) and sum(cpu) <= sum(walls) * 1.5 + 20
    if rec.waits.available:
        assert len(wait) == 20 and all(w >= 0 for w in wait)


def test_pair_order_is_drawn_per_quadruple_and_each_quadruple_is_balanced():
    orders = pair_orders(random.Random(1))
    quads = [(next(orders), next(orders)) for _ in range(400)]
    assert set(quads) == {("AB", "BA"), ("BA", "AB")}  # both patterns occur
    assert 150 < quads.count(("AB", "BA")) < 250  # about half each
    flat = [o for q in quads for o in q]
    for n in (2, 4, 10, 64):  # every batch of an even number of pairs holds as many AB as BA
        assert flat[:n].count("AB") == flat[:n].count("BA")


def test_an_all_zero_schedstat_is_no_wait_not_a_quiet_host(tmp_path, monkeypatch):
    # gVisor (and kernels that do not keep schedstat) report 0 for every thread: that is not "0 ms waited"
    monkeypatch.setattr(counters, "TASK_DIR", tmp_path)
    _fake_task_dir(tmp_path, {"1": 0, "2": 0})
    rec = counters.Recorder(lambda: 1.0)
    for _ in range(3):
        rec()
    cpu, wait = rec.take()
    assert len(cpu) == 3 and wait == []  # unavailable: no list, never zeros a busy-host rule would read as quiet
    assert "reads 0" in str(rec.wait_record()["unavailable"])


def test_a_thread_that_ends_during_a_step_is_counted_as_lost(tmp_path, monkeypatch):
    monkeypatch.setattr(counters, "TASK_DIR", tmp_path)
    _fake_task_dir(tmp_path, {"1": 1_000_000, "2": 1_000_000})
    rec = counters.Recorder(lambda: 1.0)

    def step_ending_thread_2() -> float:
        _fake_task_dir(tmp_path, {"1": 3_000_000})
        (tmp_path / "2" / "schedstat").write_text("")  # thread 2 ended during the step: its file reads nothing
        return 1.0

    rec.step = step_ending_thread_2
    rec()
    rec.step = lambda: 1.0
    rec()  # thread 1 alone: nothing lost
    cpu, wait = rec.take()
    assert wait == [pytest.approx(2.0), pytest.approx(0.0)]  # what could be read; thread 2's share is not guessed
    assert rec.wait_record() == {
        "unavailable": None,
        "threads_read": 3,
        "threads_lost": 1,
        "lost_share": pytest.approx(1 / 3),
        "steps_losing_threads": 1,
    }
