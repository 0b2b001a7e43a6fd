"""A run's progress as ``perfwatch run`` and ``perfwatch calibrate`` show it (:func:`progress_shown`); off a
terminal (a CI log, a pipe), one line per stage.

On a terminal the run's progress is rich's bars. Into a log the same events were ~60 lines a run: a start and
an end line per stage, and the runner's progress every 10% of a phase.
:class:`StageLines` writes one line when a stage ends, e.g. ``13:37:24 profiled-run (stage 4 of 7): done in
15.2 s; warm-up: 8/8 steps, running median 111.97 ms; measure: 60/60 steps, running median 108.86 ms; profile:
5 steps under the TF profiler, then writing the XSpace``: the stage's duration and the last progress of each of
its runner phases (``tasks.runner.progress.describe``). Any other record (a warning, a waiting host, an error)
is written as it comes, so nothing that needs reading is held back. A stage's start and end are found by the
``stage_event`` its records carry (``tasks.stages.pipeline.run_stage``), not by their words.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import IO, Any

from tasks.runner import progress


class StageLines(logging.Handler):
    """A logging handler writing one line per finished stage on ``stream`` (module docstring), and the reporter
    of the runner's progress events (:meth:`report`, for ``tasks.runner.progress.reporting``) that collects them
    for that line instead of writing each."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._phases: dict[str, str] = {}  # runner phase -> its newest progress line, in the order first seen

    def report(self, event: progress.Event) -> None:
        """Keep ``event`` (a runner progress event) as its phase's newest line (``progress.describe``)."""
        self._phases[str(event.get("phase"))] = progress.describe(event)

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record``: a stage's start is held back (its end says it), its end is the stage's one line,
        anything else is written whole."""
        try:
            event: Any = getattr(record, "stage_event", None)
            if event == "start":
                self._phases.clear()
                return
            if event == "done":
                fields = {k: getattr(record, k, "?") for k in ("stage_id", "stage_number", "stage_count")}
                seconds = float(getattr(record, "stage_s", 0.0))
                text = (
                    f"{logging.Formatter().formatTime(record, '%H:%M:%S')} {fields['stage_id']} (stage "
                    f"{fields['stage_number']} of {fields['stage_count']}): done in {seconds:.1f} s"
                    + "".join(f"; {line}" for line in self._phases.values())
                )
                self._phases.clear()
            else:
                text = self.format(record)
            self.stream.write(text + "\n")
            self.stream.flush()
        except Exception:  # noqa: BLE001 - logging's own rule: a handler never raises into the run
            self.handleError(record)


@contextmanager
def progress_shown(stream: IO[str] | None = None) -> Iterator[None]:
    """Show a run's progress while the block runs: the stage log lines (``tasks.*`` loggers, INFO) and the
    runner's phases (``tasks.runner.progress``: warm-up step and CV, measured steps n/N with the running
    median, profiling, paired rounds) on ``stream`` (default stderr): as rich progress bars and log lines on
    a terminal; otherwise (a CI log, a pipe) one line per finished stage with its duration and the last progress
    of each runner phase, other records (warnings, errors) as ``time level logger: message`` lines
    (:class:`StageLines`)."""
    stream = stream or sys.stderr
    logger = logging.getLogger("tasks")
    # not also to the root logger: a library that configures it (absl does) would print every line twice
    level, propagate = logger.level, logger.propagate
    logger.level, logger.propagate = logging.INFO, False
    with ExitStack() as stack:
        if stream.isatty():
            from rich.logging import RichHandler

            bar = stack.enter_context(progress.RichProgress())
            stack.enter_context(progress.reporting(bar))
            handler: logging.Handler = RichHandler(console=bar.progress.console, show_path=False)
        else:
            lines = StageLines(stream)
            stack.enter_context(progress.reporting(lines.report))
            handler = lines
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.level, logger.propagate = level, propagate
