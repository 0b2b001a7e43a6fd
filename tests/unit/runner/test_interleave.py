"""Turns of two cued runner processes (``tasks.runner.interleave``), with threads standing in for the drivers."""

from __future__ import annotations

import random
import threading
import time

import pytest

from tasks.runner.interleave import Turns, block_order
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
