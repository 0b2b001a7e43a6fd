"""Turns for runner processes that run side by side but must not measure at the same time.

A cross-environment gate cannot put both sides in one process, so its unit is a pair of processes, one per
environment. Started one after the other, the pair's ratio also holds whatever the host did in between (a
slow drift of its load); started together and measured in alternating blocks, in the randomized order of
multiple interleaved trials (Abedi & Brecht, ICPE 2017), both sides meet the same drift, and their start-up
(TensorFlow's import, the model load, the warm-up) runs side by side instead of twice in a row.

:class:`Turns` is that alternation: each side's driver thread calls :meth:`Turns.cue` with the runner's cue
events (``tasks.runner.driver.RunnerProcess.run``'s ``on_cue``), which blocks until that side's turn. No block
is timed before both sides are ready (their first cue: warmed up, nothing else running), only one block runs at
a time, blocks go in the order given (:func:`block_order`), and a side that has timed its last block waits for
the other's before it goes on (so neither side's shutdown overlaps a measured block). Plain threads and a
condition, no TensorFlow.

:class:`Relay` does the same for a same-environment gate of several processes (each holds both versions, so
nothing is interleaved between them): processes start in batches (``profiled_run.start_batches``), and once all
are warmed up they time their pairs one after the other (``RunnerSpec.cue_start``), the next only after the one
before has exited and been looked at. So a process's start-up runs beside another's start-up, never beside a
measurement, and a gate that decides after a process tells those still waiting to stop.
"""

from __future__ import annotations

import random
import threading

from tasks.runner.protocol import CueEvent


def block_order(blocks: int, rng: random.Random) -> str:
    """The order in which two sides time ``blocks`` blocks each: per pair of blocks ``AB`` or ``BA``, drawn
    afresh with probability 1/2 (randomized interleaving), e.g. ``"ABBAABBA"`` for 4; ``2 x blocks`` letters."""
    return "".join(rng.choice(("AB", "BA")) for _ in range(blocks))


class Turns:
    """Grants two sides (``"A"``, ``"B"``) their measured blocks one at a time, in ``order``.

    Args:
        order: the sides in block order, each side's letters as many as its blocks (:func:`block_order`).
        timeout_s: the longest a side waits for its turn (s); past it the wait fails (a stuck peer).
    """

    def __init__(self, order: str, timeout_s: float) -> None:
        if set(order) - {"A", "B"} or order.count("A") != order.count("B"):
            raise ValueError(f"order {order!r}: expected as many 'A' as 'B' blocks and no other letter")
        self.order = order
        self.timeout_s = timeout_s
        self.granted = ""  #: the sides whose blocks were granted, in order (a prefix of ``order``)
        self._cond = threading.Condition()
        self._ready: set[str] = set()
        self._running: str | None = None
        self._failed: str | None = None

    @property
    def failed(self) -> str | None:
        """The side that failed first (:meth:`fail`), None while none has."""
        return self._failed

    def cue(self, side: str, event: CueEvent) -> bool:
        """``side``'s runner is at ``event``: its previous block (if any) is done. Blocks until its next block's
        turn (every block before it done, both sides ready) and returns True (``more``); for the final cue
        (``block == of``) until every block is done. False (``stop``) once the other side failed.

        Raises:
            TimeoutError: no turn within ``timeout_s`` (names the side and the block).
        """
        with self._cond:
            if self._running == side:
                self._running = None
            self._ready.add(side)
            self._cond.notify_all()
            if event.block >= event.of:
                done = self._cond.wait_for(
                    lambda: (
                        self._failed is not None or (len(self.granted) == len(self.order) and self._running is None)
                    ),
                    self.timeout_s,
                )
            else:
                done = self._cond.wait_for(
                    lambda: (
                        self._failed is not None
                        or (
                            len(self._ready) == 2
                            and self._running is None
                            and len(self.granted) < len(self.order)
                            and self.order[len(self.granted)] == side
                        )
                    ),
                    self.timeout_s,
                )
            if self._failed is not None:
                return False
            if not done:
                raise TimeoutError(
                    f"side {side} waited {self.timeout_s:.0f} s for its turn at block {event.block} of {event.of} "
                    f"(granted so far: {self.granted!r} of {self.order!r})"
                )
            if event.block >= event.of:
                return True
            self._running = side
            self.granted += side
            return True

    def fail(self, side: str) -> None:
        """``side``'s process failed: the other side's waits end, answered ``stop``."""
        with self._cond:
            self._failed = self._failed or side
            self._running = None
            self._cond.notify_all()


class Relay:
    """Measuring turns for a gate's processes started in batches: a process waits at its start cue until the
    parent grants it (:meth:`grant`), or is told ``stop`` (:meth:`stop`).

    Args:
        timeout_s: the longest a process, or the parent in :meth:`wait_ready`, waits (s).
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._cond = threading.Condition()
        self._waiting: set[int] = set()
        self._ended: set[int] = set()
        self._turn: int | None = None
        self._stopped = False

    def cue(self, k: int, event: CueEvent) -> bool:
        """Process ``k`` is warmed up and at its start cue: blocks until its turn (True, ``more``) or a stop
        (False).

        Raises:
            TimeoutError: no turn within ``timeout_s`` (names the process).
        """
        with self._cond:
            self._waiting.add(k)
            self._cond.notify_all()
            ok = self._cond.wait_for(lambda: self._stopped or self._turn == k, self.timeout_s)
            if self._stopped:
                return False
            if not ok:
                raise TimeoutError(f"process {k} waited {self.timeout_s:.0f} s for its turn to measure")
            return True

    def ended(self, k: int) -> None:
        """Process ``k``'s run returned or failed: it waits for nothing."""
        with self._cond:
            self._ended.add(k)
            self._cond.notify_all()

    def wait_ready(self, ks: list[int]) -> None:
        """Block until every process of ``ks`` is at its start cue or has ended (so none is starting up).

        Raises:
            TimeoutError: not within ``timeout_s`` (names those still starting).
        """
        with self._cond:
            if not self._cond.wait_for(lambda: all(k in self._waiting or k in self._ended for k in ks), self.timeout_s):
                late = [k for k in ks if k not in self._waiting and k not in self._ended]
                raise TimeoutError(f"processes {late} were not ready to measure within {self.timeout_s:.0f} s")

    def grant(self, k: int) -> None:
        """Process ``k`` may time its pairs now."""
        with self._cond:
            self._turn = k
            self._cond.notify_all()

    def stop(self) -> None:
        """Every process still waiting, and any that reaches its cue later, is told ``stop``."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
