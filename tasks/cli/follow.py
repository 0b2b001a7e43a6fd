"""What ``make demo`` shows of a DAG run's log as it is written (``perfwatch demo follow``; the full log stays in
its file): each task's start and end, a task that failed with its exception's line, and perfwatch's own lines
(each stage's start, its progress, a busy host's "waiting for a quieter host: ...; measuring again at 19:42:10
UTC", the alert of a failed DAG run), with their UTC time.

The log is Airflow 3.3's (structlog's console renderer): a record starts with its time and level
(``2026-12-02T03:27:51.873758Z [info     ] <message> [<logger>] loc=...``); a message of several lines has its logger
on its last line, and an exception's traceback follows the line of the record that logged it. A task that fails
logs ``Task failed with exception [task]`` with the traceback under it, then ``Task instance state updated ...
new_state=failed`` (``up_for_retry`` when it will be retried), then ``[DAG TEST] end task task_id=<task>``; task
ids of a task group carry its prefix (``on_gpu.measure``). The follower shows ``task on_gpu.measure failed:
DeviceMissing: case ...`` (the exception's type without its module, and the first line of its message; Airflow's
``AirflowFailException`` wrapper, with which the DAG ends a task without retries, left out).

While a task waits for its retry, ``airflow dags test`` logs ``No tasks to run. unrunnable tasks: ...`` every
second (about 600 lines for the default 10-minute retry delay). Those are folded: one line says what waits on
what, one line a minute says it still waits, and a last line how long it waited and how many lines the log has
for it. Any other shown line that repeats right after itself is shown once (with a count from 3 repeats on).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

#: the start of a log record: its UTC date and time (then the level in brackets)
_TIME = r"^(?P<date>\d{4}-\d\d-\d\d)T(?P<time>\d\d:\d\d:\d\d)[^]]*\] "
_HEAD = re.compile(_TIME + r"(?P<rest>.*)$")
#: the logger of a record, on the last line of its message: ``<text> [tasks.stages.pipeline] loc=...`` (the last
#: bracketed dotted name followed by ``key=`` or the line's end, so ``[None]`` inside a message is no logger)
_LOGGER = re.compile(r"^(?P<text>.*\S) +\[(?P<logger>[A-Za-z_][\w.]*)\](?P<kv>(?= [\w.]+=).*|)$")
#: loggers whose messages are shown: perfwatch's stages, runner and services; the alerts (the plugin's notifier,
#: ``perfwatch.notifier``; ``perfwatch_alerts`` in the logs of DAG runs from before it moved out of dags/)
_OURS = re.compile(r"^(?:tasks(?:\.[\w.]+)?|perfwatch_alerts|perfwatch(?:\.[\w.]+)?)$")
_STARTED = re.compile(r"^\[DAG TEST\] starting task_id=(?P<task>\S+)")
_ENDED = re.compile(r"^\[DAG TEST\] end task task_id=(?P<task>\S+)")
_FAILED = "Task failed with exception"
_NEW_STATE = re.compile(r"\bnew_state=(?P<state>\w+)")
#: the scheduler loop of ``airflow dags test`` while no task can run (a retry's delay, a sensor's poke)
WAITING = re.compile(r"^No tasks to run\. unrunnable tasks: (?P<tasks>.*)")
_TASK = re.compile(r"<TaskInstance: [^.\s]+\.(?P<task>\S+) \S+(?: map_index=-?\d+)? \[(?P<state>\w+)\]")
_AFTER = ("none", "scheduled")  #: states of a task instance that waits on others, not for its own time
_RETRY_AT = re.compile(r"again at (\d\d:\d\d:\d\d) UTC")  #: a retry's time (``tasks.stages.pipeline.retry_when``)
#: an exception's line: ``package.module.TypeName: message`` (or the bare type)
_EXC_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?P<type>[A-Za-z_]\w*)(?::(?P<msg>.*))?$")
#: exceptions that only carry another's text: the DAG raises AirflowFailException(f"{type(e).__name__}: {e}")
_WRAPPERS = ("AirflowFailException",)
#: seconds of log time between two "still waiting" lines
WAIT_NOTE_EVERY_S = 60.0
_INDENT = " " * 16  #: continuation lines of a shown message of several lines, under its first line's text


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


def exception_line(traceback: list[str]) -> str | None:
    """The one line that says what a logged traceback raised: the exception line under the last ``Traceback
    (most recent call last):`` (the one raised last, of a chain), its type without its module and the first line
    of its message, e.g. ``UnknownModelError: unknown model 'nope': ...``; an ``AirflowFailException`` that only
    carries another exception's text is left out (``DeviceMissing: case ...``). None when there is none."""
    lines = [x.rstrip() for x in traceback]
    starts = [i for i, x in enumerate(lines) if x.startswith("Traceback (most recent call last)")]
    rest = lines[starts[-1] + 1 :] if starts else lines
    found = next((x for x in rest if x and not x[0].isspace()), None)
    if found is None or not (m := _EXC_LINE.match(found)):
        return found or None
    msg = (m["msg"] or "").strip()
    if m["type"] in _WRAPPERS and msg:
        return msg
    return f"{m['type']}: {msg}" if msg else m["type"]


@dataclass
class _Fold:
    """A run of repeated lines being folded: its first and latest log time, its count, the last note's time."""

    key: str
    first: dt.datetime
    last: dt.datetime
    noted: dt.datetime
    count: int = 1
    until: str = ""  #: " until HH:MM:SS UTC" of the retry this wait is for, else empty


@dataclass
class _Record:
    """A log record being read: its time, its lines so far; ``logger`` once its message's last line came;
    ``after``: the lines after that (a traceback)."""

    at: dt.datetime
    lines: list[str]
    logger: str | None = None
    kv: str = ""
    after: list[str] = field(default_factory=list)


@dataclass
class _Task:
    """The task ``airflow dags test`` runs now (one at a time): its id, the line of the exception it logged,
    the state it was given (``failed``, ``up_for_retry``, ...)."""

    id: str
    exception: str | None = None
    state: str | None = None
    reading_traceback: bool = False
    shown: bool = False


def follow(lines: Iterable[str]) -> Iterator[str]:
    """The lines ``make demo`` shows for the log ``lines`` (module docstring), each ``   HH:MM:SS <what>``.

    A task's end is ``task <id>: ended``, or ``task <id> failed: <the exception's line>`` when Airflow set it
    failed (``task <id>: ended, up for retry: <line>`` when it will be retried); a task that failed without an
    end line (the log stopped) is shown when the log ends. A run of ``No tasks to run`` warnings becomes
    ``waiting: <who waits>``, then ``still waiting (N s)`` every ``WAIT_NOTE_EVERY_S`` seconds of log time,
    then ``waited N s (K 'No tasks to run' lines in the log)`` when another shown line comes or the log ends;
    another shown line repeated right after itself (same text, another time) becomes one line and, from 3 on,
    ``(repeated K times until HH:MM:SS)``. A perfwatch message of several lines (the alert of a failed DAG run)
    is shown whole, its later lines indented under its text.
    """
    fold: _Fold | None = None
    until = ""  # " until HH:MM:SS UTC": the retry a shown line announced, for the next wait
    task: _Task | None = None
    pending: _Record | None = None
    last = dt.datetime.min  # the time of the newest record

    def close(f: _Fold | None) -> Iterator[str]:
        if f is None or f.count < 2:
            return
        if f.key == "waiting":
            secs = (f.last - f.first).total_seconds()
            yield f"   {f.last:%H:%M:%S} waited {secs:.0f} s ({f.count} 'No tasks to run' lines in the log)"
        elif f.count > 2:  # a line logged twice is shown once, without a note
            yield f"   {f.last:%H:%M:%S} (repeated {f.count} times until {f.last:%H:%M:%S})"

    def show(at: dt.datetime, text: str) -> Iterator[str]:
        nonlocal fold, until
        if retry := _RETRY_AT.search(text):  # the next wait is for this retry
            until = f" until {retry[1]} UTC"
        if fold is not None and fold.key == text:
            fold.count, fold.last = fold.count + 1, at
            return
        yield from close(fold)
        fold = _Fold(text, at, at, at)
        yield f"   {at:%H:%M:%S} {text}"

    def wait(at: dt.datetime, tasks: str) -> Iterator[str]:
        nonlocal fold, until
        if fold is not None and fold.key == "waiting":
            fold.count, fold.last = fold.count + 1, at
            if (at - fold.noted).total_seconds() >= WAIT_NOTE_EVERY_S:
                fold.noted = at
                yield f"   {at:%H:%M:%S} still waiting ({(at - fold.first).total_seconds():.0f} s){fold.until}"
            return
        yield from close(fold)
        fold, until = _Fold("waiting", at, at, at, until=until), ""
        yield f"   {at:%H:%M:%S} waiting: {_who_waits(tasks)}{fold.until}"

    def task_end(t: _Task) -> str:
        why = f": {t.exception}" if t.exception else " (traceback in the log)"
        if t.state == "failed" or (t.state is None and t.exception is not None):
            return f"task {t.id} failed{why}"
        if t.state == "up_for_retry":
            return f"task {t.id}: ended, up for retry{why}"
        return f"task {t.id}: ended"

    def record(r: _Record) -> Iterator[str]:
        """A whole record (its message's lines and logger known)."""
        nonlocal task
        text = "\n".join(r.lines)
        if m := WAITING.match(text):
            yield from wait(r.at, m["tasks"])
        elif m := _STARTED.match(text):
            task = _Task(m["task"])
            yield from show(r.at, f"task {task.id}: started")
        elif m := _ENDED.match(text):
            t = task if task is not None and task.id == m["task"] else _Task(m["task"])
            if t.shown:
                return
            t.shown = True
            yield from show(r.at, task_end(t))
        elif text == _FAILED:
            if task is not None:
                task.reading_traceback = True
        elif (m := _NEW_STATE.search(r.kv)) and task is not None and text.startswith("Task instance state"):
            task.state = m["state"]
        elif r.logger is not None and _OURS.match(r.logger):
            yield from show(r.at, "    " + ("\n" + _INDENT).join(r.lines))

    def finish(r: _Record | None) -> None:
        """The record before a new one (or the log's end): its traceback read; a message without its logger
        line is not shown."""
        if r is None:
            return
        if task is not None and task.reading_traceback:
            task.reading_traceback = False
            task.exception = exception_line(r.after)

    for raw in lines:
        line = raw.rstrip("\n")
        if m := _HEAD.match(line):
            finish(pending)
            r = _Record(_at(m), [m["rest"]])
            last = r.at
            if lm := _LOGGER.match(m["rest"]):
                r.lines, r.logger, r.kv = [lm["text"]], lm["logger"], lm["kv"]
                yield from record(r)
            pending = r
            continue
        if pending is None:
            continue
        if pending.logger is not None:  # after the message: an exception's traceback
            pending.after.append(line)
        elif lm := _LOGGER.match(line):  # the last line of a message of several lines
            pending.lines.append(lm["text"])
            pending.logger, pending.kv = lm["logger"], lm["kv"]
            yield from record(pending)
        else:
            pending.lines.append(line)
    finish(pending)
    if task is not None and not task.shown and (task.state == "failed" or task.exception):
        task.shown = True  # the log ends before the task's end line: say it failed all the same
        yield from show(last, task_end(task))
    yield from close(fold)
