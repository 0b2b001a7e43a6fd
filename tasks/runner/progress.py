"""Progress of the runner's long phases: emitted by the runner process, relayed by its parent.

The runner (``tasks.runner.modes``) writes each event as a protocol line on stdout
(``tasks.runner.protocol.ProgressEvent``; the parent's ``tasks.runner.driver`` reads them, with the round
events of a paired gate). An event's fields: ``phase`` (``start``, ``warm-up``, ``measure``, ``profile``,
``paired``, a paired run's ``warm-up A`` / ``warm-up B``), ``n`` steps done of ``of`` (None when open-ended),
and where known ``median_ms`` (running median step time so far, ms), ``cv`` (coefficient of variation of the
warm-up's last window, a fraction), ``cv_max`` (the steady threshold), ``round`` (paired gate round), ``text``.
Counted phases are reported about every 10% of their steps or every :data:`EVERY_S` seconds, whichever comes
first, and at their end.

The parent hands each event (a dict of the fields set) to the current reporter (:func:`report`): by default a
log line on the ``tasks.runner.progress`` logger (what an Airflow task log shows), or a rich progress bar on a
terminal (:class:`RichProgress`, used by ``perfwatch run``). Imports nothing else from ``tasks``.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from tasks.runner.protocol import MORE, STOP, CueEvent, ProgressEvent, event_line
from tasks.runner.spec import RunnerError

#: longest silence (s) between two progress lines of a counted phase
EVERY_S = 5.0

log = logging.getLogger(__name__)
Event = dict[str, Any]


# ---------------------------------------------------------------- runner side


def emit(phase: str, *, stream: IO[str] | None = None, **fields: Any) -> None:
    """Write one progress event (``tasks.runner.protocol.ProgressEvent``: ``phase`` and ``fields``) and flush.

    Raises:
        pydantic.ValidationError: a field the event does not have, or of the wrong type.
    """
    out = stream or sys.stdout
    out.write(event_line(ProgressEvent(phase=phase, **fields)))
    out.flush()


def wait_for_cue(block: int, of: int, mode: str) -> bool:
    """Write a ``CueEvent`` (``block`` of ``of``) on stdout and read the parent's answer on stdin: True for
    ``more``, False for ``stop`` or a closed stdin (the parent is gone).

    Raises:
        RunnerError: a line that is neither ``more`` nor ``stop`` (quoted, with ``mode`` and the cue).
    """
    sys.stdout.write(event_line(CueEvent(block=block, of=of)))
    sys.stdout.flush()
    command = sys.stdin.readline().strip()
    if command not in ("", MORE, STOP):
        raise RunnerError(
            f"{mode} mode: unknown command {command!r} on stdin at cue {block} of {of}; expected {MORE!r} or {STOP!r}"
        )
    return command == MORE


class Ticker:
    """Emits a counted phase's progress about every 10% of ``total`` steps or every ``every_s`` seconds.

    ``total``: steps planned (for an open-ended warm-up, its most steps). Call :meth:`tick` after each
    step with the step time (ms) and any fields to add (e.g. ``cv``); :meth:`done` emits the last line.
    """

    def __init__(
        self, phase: str, total: int, *, every_s: float = EVERY_S, stream: IO[str] | None = None, **fields: Any
    ) -> None:
        self.phase, self.total, self.every_s, self.stream, self.fields = phase, total, every_s, stream, fields
        self.times: list[float] = []
        self._step = max(1, total // 10)
        self._last_n, self._last_t = 0, time.monotonic()

    def _emit(self, **extra: Any) -> None:
        n = len(self.times)
        emit(
            self.phase,
            stream=self.stream,
            n=n,
            of=self.total,
            median_ms=round(statistics.median(self.times), 4) if self.times else None,
            **self.fields,
            **extra,
        )
        self._last_n, self._last_t = n, time.monotonic()

    def tick(self, step_ms: float, **extra: Any) -> None:
        """Record one step (ms); emit when 10% more steps are done or ``every_s`` passed since the last line."""
        self.times.append(step_ms)
        n = len(self.times)
        if n - self._last_n >= self._step or time.monotonic() - self._last_t >= self.every_s:
            self._emit(**extra)

    def done(self, **extra: Any) -> None:
        """Emit the phase's last line (always, so a reader sees where it ended)."""
        self._emit(final=True, **extra)


def run_steps(phase: str, step: Callable[[], float], n: int, **fields: Any) -> list[float]:
    """Run ``step`` ``n`` times and return its step times (ms), reporting progress (:class:`Ticker`)."""
    ticker = Ticker(phase, n, **fields)
    for _ in range(n):
        ticker.tick(step())
    ticker.done()
    return ticker.times


# ---------------------------------------------------------------- parent side


def describe(event: Event) -> str:
    """One line for people, e.g. ``measure: 50/100 steps, running median 41.20 ms`` or
    ``warm-up: step 12 (at most 60), CV 8.3% (steady below 5.0%)``."""
    phase, n, of = event["phase"], event.get("n"), event.get("of")
    if event.get("text"):
        return f"{phase}: {event['text']}"
    if phase == "paired":
        return f"paired gate: round {event.get('round')}, {n} of at most {of} ABBA pairs" + (
            f"; {event['decision']}" if event.get("decision") else ""
        )
    if phase.startswith("warm-up") and event.get("open_ended"):
        text = f"{phase}: step {n} (at most {of})"
    else:
        text = f"{phase}: {n}/{of} steps"
    if event.get("median_ms") is not None:
        text += f", running median {event['median_ms']:.2f} ms"
    if event.get("cv") is not None:
        text += f", CV {event['cv']:.1%}" + (f" (steady below {event['cv_max']:.1%})" if event.get("cv_max") else "")
    return text


def log_event(event: Event) -> None:
    """The default reporter: one INFO line on the ``tasks.runner.progress`` logger."""
    log.info("%s", describe(event))


_reporter: Callable[[Event], None] = log_event


def report(event: Event) -> None:
    """Hand ``event`` to the current reporter (:func:`reporting`); a reporter's failure never stops a run."""
    try:
        _reporter(event)
    except Exception:  # noqa: BLE001 - progress is for people; the measurement goes on
        log.debug("progress reporter failed", exc_info=True)


@contextmanager
def reporting(reporter: Callable[[Event], None]) -> Iterator[None]:
    """Use ``reporter`` for every event reported inside the ``with`` block (any thread)."""
    global _reporter
    previous, _reporter = _reporter, reporter
    try:
        yield
    finally:
        _reporter = previous


class RichProgress:
    """A reporter that draws each phase as a rich progress bar (steps done of planned, with the event's
    text) on stderr; use as a context manager around the run, then as the reporter."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, event: Event) -> None:
        phase, text = event["phase"], describe(event)
        total = event.get("n") if event.get("final") else event.get("of")  # a warm-up may end before its most
        if phase not in self._tasks:
            self._tasks[phase] = self.progress.add_task(text, total=total)
        self.progress.update(self._tasks[phase], description=text, completed=event.get("n") or 0, total=total)
