"""The parent side of the runner: :class:`RunnerProcess` starts ``<runner command> SPEC.json`` and speaks the protocol.

Every caller goes through it (the env-fingerprint probe, the warm-up, the profiled run, the paired gate fixed or
in rounds), so the runner is started, watched and read one way (``tasks.runner.protocol``): the spec is written
to ``<out_dir>/<mode>_spec.json``; the runner's stderr is kept in ``<out_dir>/<mode>_stderr.log``; its progress
events are handed to ``tasks.runner.progress.report``; its round events to the caller, whose answer goes back
as ``more``/``stop`` on stdin; its ``result.json`` is read as the mode's typed record. Every failure is a
``RunnerError`` naming the stage, what ran and the tail of its stderr.

The command is configurable (``PERFWATCH_RUNNER_COMMAND``, ``tasks.settings.Settings.runner_command``): the
project's interpreter by default, a TF/GPU venv's ``python -m tasks.runner``, or a container
(``docker run -i --gpus all IMAGE python -m tasks.runner``; the out_dir must then be a volume mounted at the
same path). Never imports TensorFlow.
"""

from __future__ import annotations

import os
import queue
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

from tasks.runner import progress
from tasks.runner.protocol import (
    MORE,
    SCHEMA_VERSION,
    STOP,
    BuildResult,
    BuildSpec,
    CueEvent,
    HelloEvent,
    PairedResult,
    ProbeResult,
    ProbeSpec,
    ProfileResult,
    ProtocolError,
    RoundEvent,
    RunnerError,
    WarmupResult,
    mismatch,
    parse_event,
    read_result,
)
from tasks.runner.spec import RunnerSpec

#: the checkout (or installed package's parent) that holds ``tasks``: prepended to the runner's PYTHONPATH
PROJECT_ROOT = Path(__file__).resolve().parents[2]

R = TypeVar("R", ProbeResult, BuildResult, WarmupResult, ProfileResult, PairedResult)
OnRound = Callable[[RoundEvent], bool]
OnCue = Callable[[CueEvent], bool]


def default_command(python: str) -> tuple[str, ...]:
    """The runner command of an interpreter: ``(python, "-m", "tasks.runner")``."""
    return (python, "-m", "tasks.runner")


def _log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of the runner's stderr log, ``(nothing)`` or ``(no stderr)``."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no stderr)"
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(tail) if tail else "(nothing)"


class RunnerProcess:
    """How to start the runner: ``command`` (the prefix that ``SPEC.json`` is appended to) and its environment.

    ``env`` (default: this process's) gets ``TF_CPP_MIN_LOG_LEVEL=2`` unless set, and :data:`PROJECT_ROOT` in
    front of ``PYTHONPATH``; the runner's working directory is :data:`PROJECT_ROOT`.
    """

    def __init__(self, command: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        if not command:
            raise ValueError("the runner command is empty (PERFWATCH_RUNNER_COMMAND)")
        self.command = tuple(command)
        self.env = env

    @classmethod
    def for_python(cls, python: str, *, env: Mapping[str, str] | None = None) -> RunnerProcess:
        """The runner in interpreter ``python`` (:func:`default_command`)."""
        return cls(default_command(python), env=env)

    @property
    def name(self) -> str:
        """What runs, for messages: the interpreter of a default command, else the whole command."""
        if self.command[1:] == ("-m", "tasks.runner"):
            return self.command[0]
        return shlex.join(self.command)

    def __repr__(self) -> str:
        return f"RunnerProcess({list(self.command)!r})"

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH")) if p)
        return env

    def run(
        self,
        spec: RunnerSpec | ProbeSpec | BuildSpec,
        kind: type[R],
        timeout_s: float,
        *,
        limit_note: str | None = None,
        on_round: OnRound | None = None,
        on_cue: OnCue | None = None,
    ) -> R:
        """Run ``spec`` in a fresh runner process and return its result, a ``kind`` (the mode's record).

        Args:
            timeout_s: the whole process's time limit (s); past it the process is killed.
            limit_note: how the limit was made (e.g. ``"PERFWATCH_WARMUP_TIMEOUT_S=1800 s"``), quoted in the
                timeout error so the reader knows which setting to raise.
            on_round: a paired gate in rounds: called with each round event, returns True for ``more`` and
                False for ``stop`` (not answered for the ``final`` round); an exception in it stops the
                runner and propagates.
            on_cue: a run that measures on cue (``RunnerSpec.cue_block_steps``, ``cue_start``): called with each
                cue event, may block until the runner's turn, returns True for ``more`` and False for ``stop``;
                an exception in it stops the runner and propagates.

        Raises:
            RunnerError: the process could not start, timed out, wrote a malformed event, exited without a
                result, or reported an error (the runner's own message: the model that failed to load, the
                exception of the step); ``ProtocolMismatch`` when it speaks another protocol version. The
                message starts with the stage (``kind.stage``) and ends with the tail of the runner's stderr.
        """
        stage = kind.stage
        out = Path(spec.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        spec_path = out / f"{spec.mode}_spec.json"
        spec_path.write_text(spec.model_dump_json(indent=2))
        result_file = out / "result.json"
        result_file.unlink(missing_ok=True)
        log = out / f"{spec.mode}_stderr.log"
        if isinstance(spec, ProbeSpec):
            who = process_name = f"the probe in {self.name!r}"
        elif isinstance(spec, BuildSpec):
            who = process_name = f"the runner building keras.applications model {spec.name!r}"
        else:
            paired = f" (A = {spec.baseline_model_path})" if spec.mode == "paired" else ""
            who = f"runner ({spec.mode}) for {spec.model_path}{paired}"
            process_name = f"the runner process for {spec.model_path}{paired}"
        with open(log, "w") as err:
            try:
                proc = subprocess.Popen(
                    [*self.command, str(spec_path)],
                    stdin=subprocess.PIPE if on_round or on_cue else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    bufsize=1,
                    env=self._environment(),
                    cwd=str(PROJECT_ROOT),
                )
            except OSError as e:
                raise RunnerError(f"{stage}: cannot start runner interpreter {self.name!r}: {e}") from e

            def timed_out() -> RunnerError:
                return RunnerError(
                    f"{stage} timed out: {process_name} ran past its limit of {timeout_s:.0f} s "
                    f"({limit_note or 'timeout_s'}) and was killed; stderr tail:\n{_log_tail(log)}"
                )

            assert proc.stdout is not None
            lines: queue.Queue[str | None] = queue.Queue()
            pump = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
            pump.start()
            deadline = time.monotonic() + timeout_s
            runner = self.name
            try:
                while True:
                    try:
                        line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        raise timed_out() from None
                    if line is None:
                        break
                    try:
                        event = parse_event(line)
                    except ProtocolError as e:
                        raise RunnerError(f"{stage}: {who} wrote a {e}") from e
                    if isinstance(event, HelloEvent):
                        runner = event.python
                        if event.schema_version != SCHEMA_VERSION:
                            raise mismatch(runner, event.schema_version)
                    elif isinstance(event, RoundEvent):
                        self._answer(proc, event, on_round, spec, stage, who)
                    elif isinstance(event, CueEvent):
                        if on_cue is None:
                            raise RunnerError(f"{stage}: {who} sent a cue event, but no cues were asked")
                        _reply(proc, on_cue(event))
                    elif event is not None:
                        progress.report(event.fields())
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise timed_out() from None
            except BrokenPipeError as e:
                proc.wait(timeout=30)
                raise RunnerError(
                    f"{stage}: {who} exited {proc.returncode} while the parent answered a round or cue; "
                    f"stderr tail:\n{_log_tail(log)}"
                ) from e
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                pump.join(timeout=10)
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        try:
                            stream.close()
                        except (OSError, ValueError):
                            pass
        if not result_file.exists():
            raise RunnerError(
                f"{stage}: {who} exited {proc.returncode} without a result; stderr tail:\n{_log_tail(log)}"
            )
        return read_result(result_file, kind, runner=runner)

    @staticmethod
    def _answer(
        proc: subprocess.Popen[str],
        event: RoundEvent,
        on_round: OnRound | None,
        spec: RunnerSpec | ProbeSpec | BuildSpec,
        stage: str,
        who: str,
    ) -> None:
        if on_round is None or not isinstance(spec, RunnerSpec):
            raise RunnerError(f"{stage}: {who} sent a round event, but no rounds were asked (round_pairs unset)")
        go_on = on_round(event)
        progress.report(
            {
                "phase": "paired",
                "round": event.round,
                "n": event.pairs,
                "of": spec.blocks,
                "decision": None if event.final or go_on else "the interval decides: stopping",
            }
        )
        if not event.final:
            _reply(proc, go_on)


def _reply(proc: subprocess.Popen[str], go_on: bool) -> None:
    """Answer the runner's round or cue on its stdin: ``more`` or ``stop``."""
    assert proc.stdin is not None
    proc.stdin.write((MORE if go_on else STOP) + "\n")
    proc.stdin.flush()


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def as_runner(runner: RunnerProcess | str) -> RunnerProcess:
    """``runner`` itself, or the runner in interpreter ``runner`` (a path)."""
    return runner if isinstance(runner, RunnerProcess) else RunnerProcess.for_python(runner)


def launch(
    spec: RunnerSpec, runner: RunnerProcess | str, timeout_s: float = 1800, *, limit_note: str | None = None
) -> WarmupResult | ProfileResult | PairedResult:
    """Run ``spec`` to its end (:meth:`RunnerProcess.run` with the record of ``spec.mode``); ``runner``: a
    :class:`RunnerProcess` or an interpreter path."""
    proc = as_runner(runner)
    if spec.mode == "warmup":
        return proc.run(spec, WarmupResult, timeout_s, limit_note=limit_note)
    if spec.mode == "profile":
        return proc.run(spec, ProfileResult, timeout_s, limit_note=limit_note)
    return proc.run(spec, PairedResult, timeout_s, limit_note=limit_note)


def run_rounds(
    spec: RunnerSpec,
    runner: RunnerProcess | str,
    on_round: OnRound,
    timeout_s: float = 3600,
    *,
    limit_note: str | None = None,
) -> PairedResult:
    """Run a paired gate in rounds (``spec.round_pairs`` set): ``on_round`` decides after each round whether to go
    on (:meth:`RunnerProcess.run`); the runner stops by itself once ``blocks`` pairs are done.

    Raises:
        ValueError: the spec is not a paired spec with rounds.
        RunnerError: see :meth:`RunnerProcess.run`.
    """
    if spec.mode != "paired" or not spec.round_pairs:
        raise ValueError(
            f"run_rounds needs a paired spec with round_pairs set, got mode {spec.mode!r}, "
            f"round_pairs {spec.round_pairs!r}"
        )
    return as_runner(runner).run(spec, PairedResult, timeout_s, limit_note=limit_note, on_round=on_round)
