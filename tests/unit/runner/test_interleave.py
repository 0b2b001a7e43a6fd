"""Turns of two cued runner processes (``tasks.runner.interleave``), with threads standing in for the drivers."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tasks.runner.interleave import Relay, Turns, block_order
from tasks.runner.protocol import CueEvent


def _side(turns: Turns, side: str, blocks: int, log: list[tuple[str, str]], delay_s: float = 0.0) -> None:
    """A runner's cues: ``delay_s`` of start-up, then each block (logged at its start and end) on its turn."""
    time.sleep(delay_s)
    for block in range(blocks + 1):
        if not turns.cue(side, CueEvent(block=block, of=blocks)):
            log.append((side, "stopped"))
            return
        if block == blocks:
            log.append((side, "done"))
            return
        log.append((side, "start"))
        time.sleep(0.002)
        log.append((side, "end"))


def _run(turns: Turns, blocks: int, delays: dict[str, float]) -> list[tuple[str, str]]:
    log: list[tuple[str, str]] = []
    threads = [threading.Thread(target=_side, args=(turns, s, blocks, log, delays[s])) for s in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return log


def test_blocks_run_one_at_a_time_in_the_drawn_order_after_both_are_ready():
    """B starts 0.2 s late (a slower start-up): A's first block waits for it; then every block starts after the
    one before ended, in the order drawn, and neither side goes on before all blocks are done."""
    order = block_order(4, random.Random(3))
    assert len(order) == 8 and order.count("A") == 4 and all(order[i : i + 2] in ("AB", "BA") for i in (0, 2, 4, 6))
    turns = Turns(order, timeout_s=10)
    log = _run(turns, 4, {"A": 0.0, "B": 0.2})
    blocks = [side for side, what in log if what == "start"]
    assert "".join(blocks) == order == turns.granted
    body = [e for e in log if e[1] in ("start", "end")]
    assert all(body[i][1] == "start" and body[i + 1] == (body[i][0], "end") for i in range(0, len(body), 2))
    assert [what for _, what in log[-2:]] == ["done", "done"]  # both go on only after the last block


def test_a_failed_side_releases_the_other_with_stop():
    turns = Turns("ABBA", timeout_s=10)
    log: list[tuple[str, str]] = []
    t = threading.Thread(target=_side, args=(turns, "A", 2, log))
    t.start()
    time.sleep(0.05)  # A is ready and waits for B, which dies in its start-up
    turns.fail("B")
    t.join(5)
    assert log == [("A", "stopped")] and turns.failed == "B"


def test_a_stuck_peer_is_a_timeout_that_names_the_side():
    turns = Turns("AB", timeout_s=0.1)
    with pytest.raises(TimeoutError, match="side A waited 0 s for its turn at block 0 of 1"):
        turns.cue("A", CueEvent(block=0, of=1))  # B never comes


def test_an_order_with_unequal_sides_is_refused():
    with pytest.raises(ValueError, match="as many 'A' as 'B'"):
        Turns("AAB", timeout_s=1)


def test_a_relay_lets_no_process_measure_before_its_batch_is_ready_and_stops_the_rest():
    """Process 0 is ready at once, process 1 after 0.2 s (a slower start-up): the parent's wait_ready returns only
    when both are at their cue; 0 measures on its grant; a stop then answers 1 with False."""
    relay = Relay(timeout_s=10)
    answers: dict[int, bool] = {}

    def process(k: int, delay_s: float) -> None:
        time.sleep(delay_s)
        answers[k] = relay.cue(k, CueEvent(block=0, of=1))
        relay.ended(k)

    threads = [threading.Thread(target=process, args=(k, d)) for k, d in ((0, 0.0), (1, 0.2))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    relay.wait_ready([0, 1])
    assert time.perf_counter() - t0 >= 0.2 and answers == {}  # 0 waits for 1's start-up, nobody measures
    relay.grant(0)
    threads[0].join(5)
    assert answers == {0: True}
    relay.stop()  # the look after 0 decided
    threads[1].join(5)
    assert answers == {0: True, 1: False}


def test_a_process_that_dies_in_its_start_up_does_not_hold_the_batch():
    relay = Relay(timeout_s=10)
    relay.ended(1)  # its run raised before its cue
    t = threading.Thread(target=lambda: relay.cue(0, CueEvent(block=0, of=1)))
    t.start()
    relay.wait_ready([0, 1])  # returns: 0 at its cue, 1 gone
    relay.stop()
    t.join(5)
    assert not t.is_alive()
