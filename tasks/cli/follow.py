"""What ``make demo`` shows of a DAG run's log as it is written (``perfwatch demo follow``; the full log stays in
its file): each task's start and end, a task that failed, and perfwatch's own lines (each stage's start, its
progress, a busy host's "waiting for a quieter host: ...; measuring again at 19:42:10 UTC"), with their UTC time.

While a task waits for its retry, ``airflow dags test`` logs ``No tasks to run. unrunnable tasks: ...`` every
second (about 600 lines for the default 10-minute retry delay). Those are folded: one line says what waits on
what, one line a minute says it still waits, and a last line how long it waited and how many lines the log has
for it. Any other shown line that repeats right after itself is shown once (with a count from 3 repeats on).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_TIME = r"^(?P<date>[0-9-]+)T(?P<time>[0-9:]{8})[^]]*\] "
#: (pattern, what is shown; ``{time}`` and the pattern's groups are filled in)
SHOWN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(_TIME + r"\[DAG TEST\] starting task_id=(?P<task>\S+)"), "task {task}: started"),
    (re.compile(_TIME + r"\[DAG TEST\] end task task_id=(?P<task>\S+)"), "task {task}: ended"),
    (re.compile(_TIME + r"\[DAG TEST\] Error running task "), "the task FAILED (traceback in the log)"),
    (re.compile(_TIME + r"(?P<text>.*\S) +\[tasks\.[a-z_.]+\]"), "    {text}"),
)
#: the scheduler loop of ``airflow dags test`` while no task can run (a retry's delay, a sensor's poke)
WAITING = re.compile(_TIME + r"No tasks to run\. unrunnable tasks: (?P<tasks>.*)")
_TASK = re.compile(r"<TaskInstance: [^.\s]+\.(?P<task>\S+) \S+(?: map_index=-?\d+)? \[(?P<state>\w+)\]")
_AFTER = ("none", "scheduled")  #: states of a task instance that waits on others, not for its own time
_RETRY_AT = re.compile(r"again at (\d\d:\d\d:\d\d) UTC")  #: a retry's time (``tasks.stages.pipeline.retry_when``)
#: seconds of log time between two "still waiting" lines
WAIT_NOTE_EVERY_S = 60.0


def _at(m: re.Match[str]) -> dt.datetime:
    return dt.datetime.fromisoformat(f"{m['date']}T{m['time']}")


def _who_waits(tasks: str) -> str:
    """``measure up for retry; 4 tasks after it`` from the unrunnable-tasks set of Airflow's warning
    (task instance reprs ``<TaskInstance: dag.task run [state] ...>``; state None: waits on the others)."""
    found = [(t["task"], t["state"].lower()) for t in _TASK.finditer(tasks)]
    blocking = sorted({f"{task} {state.replace('_', ' ')}" for task, state in found if state not in _AFTER})
    after = sum(1 for _, state in found if state in _AFTER)
    head = "; ".join(blocking) or "no task can run yet"
    return head + (f"; {after} task{'s' if after != 1 else ''} after it" if after else "")


@dataclass
class _Fold:
    """A run of repeated lines being folded: its first and latest log time, its count, the last note's time."""

    key: str
    first: dt.datetime
    last: dt.datetime
    noted: dt.datetime
    count: int = 1
    until: str = ""  #: " until HH:MM:SS UTC" of the retry this wait is for, else empty


def follow(lines: Iterable[str]) -> Iterator[str]:
    """The lines ``make demo`` shows for the log ``lines`` (module docstring), each ``   HH:MM:SS <what>``.

    A run of ``No tasks to run`` warnings becomes ``waiting: <who waits>``, then ``still waiting (N s)`` every
    ``WAIT_NOTE_EVERY_S`` seconds of log time, then ``waited N s (K 'No tasks to run' lines in the log)`` when
    another shown line comes or the log ends; another shown line repeated right after itself (same text,
    another time) becomes one line and, from 3 on, ``(repeated K times until HH:MM:SS)``.
    """
    fold: _Fold | None = None
    until = ""  # " until HH:MM:SS UTC": the retry a shown line announced, for the next wait

    def close(f: _Fold | None) -> Iterator[str]:
        if f is None or f.count < 2:
            return
        if f.key == "waiting":
            secs = (f.last - f.first).total_seconds()
            yield f"   {f.last:%H:%M:%S} waited {secs:.0f} s ({f.count} 'No tasks to run' lines in the log)"
        elif f.count > 2:  # a line logged twice is shown once, without a note
            yield f"   {f.last:%H:%M:%S} (repeated {f.count} times until {f.last:%H:%M:%S})"

    for line in lines:
        if m := WAITING.match(line):
            at = _at(m)
            if fold is not None and fold.key == "waiting":
                fold.count, fold.last = fold.count + 1, at
                if (at - fold.noted).total_seconds() >= WAIT_NOTE_EVERY_S:
                    fold.noted = at
                    yield f"   {at:%H:%M:%S} still waiting ({(at - fold.first).total_seconds():.0f} s){fold.until}"
                continue
            yield from close(fold)
            fold, until = _Fold("waiting", at, at, at, until=until), ""
            yield f"   {at:%H:%M:%S} waiting: {_who_waits(m['tasks'])}{fold.until}"
            continue
        for pattern, shown in SHOWN:
            if m := pattern.match(line):
                at, text = _at(m), shown.format(**m.groupdict())
                if retry := _RETRY_AT.search(text):  # the next wait is for this retry
                    until = f" until {retry[1]} UTC"
                if fold is not None and fold.key == text:
                    fold.count, fold.last = fold.count + 1, at
                    break
                yield from close(fold)
                fold = _Fold(text, at, at, at)
                yield f"   {at:%H:%M:%S} {text}"
                break
    yield from close(fold)
