"""The parent side of a paired gate in rounds: drive ``python -m tasks.runner SPEC.json`` round by round.

``launch`` runs a spec to the end; a sequential gate must instead decide *between* rounds, in the
parent (the statistics live in ``tasks.analysis``, never in the runner). :func:`run_rounds` starts the
runner with ``round_pairs`` set, reads each round it writes on stdout (one line, ``ROUND_PREFIX`` +
JSON; other stdout lines are ignored), hands the round to a callback, and answers ``more`` or
``stop`` on the runner's stdin. The runner stops by itself once ``blocks`` pairs are done.

Same contract as ``launch``: never imports TensorFlow; the interpreter is the configured runner
Python; the runner's stderr is kept in ``<out_dir>/paired_stderr.log``; a failure, a timeout, or a
runner that exits without a result raises ``RunnerError`` naming the stage, the model and the runner's
own error or the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.runner import progress
from tasks.runner.spec import MORE, ROUND_PREFIX, STOP, RunnerError, RunnerSpec


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no stderr)"
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(tail) if tail else "(nothing)"


def run_rounds(
    spec: RunnerSpec,
    python_executable: str,
    on_round: Callable[[dict[str, Any]], bool],
    timeout_s: float = 3600,
    *,
    limit_note: str | None = None,
) -> dict[str, Any]:
    """Run a paired ``spec`` with ``round_pairs`` set in a fresh runner process, round by round.

    Args:
        spec: mode ``paired`` with ``round_pairs`` set.
        python_executable: the runner's interpreter.
        on_round: called with each round's dict (``round``, ``pairs`` so far, ``blocks`` of this round:
            ``{"pair", "order", "a_ms", "b_ms"}`` with per-step ms, ``host_load``, ``wall_s``, ``final``);
            returns True for ``more``, False for ``stop``. Not answered for the ``final`` round (the
            budget is spent). An exception in it stops the runner and propagates.
        timeout_s: the whole process's time limit (s); past it the process is killed.
        limit_note: how the limit was made, quoted in the timeout error.

    Returns:
        The runner's result dict (``result.json``): every block measured, ``rounds``, ``stopped_by``,
        ``host_load``, ``timed_steps``, ``wall_s`` (see ``tasks.runner.process.run``).

    Raises:
        ValueError: the spec is not a paired spec with rounds.
        RunnerError: the process could not start, timed out, wrote a malformed round line, exited
            without a result, or reported an error (the message names the model and the cause).
    """
    if spec.mode != "paired" or not spec.round_pairs:
        raise ValueError(
            f"run_rounds needs a paired spec with round_pairs set, got mode {spec.mode!r}, "
            f"round_pairs {spec.round_pairs!r}"
        )
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "paired_spec.json"
    spec_path.write_text(spec.model_dump_json(indent=2))
    (out / "result.json").unlink(missing_ok=True)
    log = out / "paired_stderr.log"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH")) if p)
    what = f"paired run: runner for {spec.model_path} (A = {spec.baseline_model_path})"
    with open(log, "w") as err:
        try:
            proc = subprocess.Popen(
                [python_executable, "-m", "tasks.runner", str(spec_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                bufsize=1,
                env=env,
                cwd=project_root,
            )
        except OSError as e:
            raise RunnerError(f"paired run: cannot start runner interpreter {python_executable!r}: {e}") from e
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise RunnerError(
                        f"{what} ran past its limit of {timeout_s:.0f} s "
                        f"({limit_note or 'timeout_s'}) and was killed; stderr tail:\n{_tail(log)}"
                    ) from None
                if line is None:
                    break
                if (event := progress.parse_line(line)) is not None:
                    progress.report(event)  # the runner's warm-up progress (tasks.runner.progress)
                    continue
                if not line.startswith(ROUND_PREFIX):
                    continue
                try:
                    info = json.loads(line[len(ROUND_PREFIX) :])
                except json.JSONDecodeError as e:
                    raise RunnerError(f"{what} wrote a malformed round line ({e}): {line[:200]!r}") from e
                go_on = on_round(info)
                progress.report(
                    {
                        "phase": "paired",
                        "round": info.get("round"),
                        "n": info.get("pairs"),
                        "of": spec.blocks,
                        "decision": None if info.get("final") or go_on else "the interval decides: stopping",
                    }
                )
                if not info.get("final"):
                    proc.stdin.write((MORE if go_on else STOP) + "\n")  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
            remaining = max(0.0, deadline - time.monotonic())
            try:
                proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                raise RunnerError(
                    f"{what} ran past its limit of {timeout_s:.0f} s ({limit_note or 'timeout_s'}) "
                    f"and was killed; stderr tail:\n{_tail(log)}"
                ) from None
        except BrokenPipeError as e:
            proc.wait(timeout=30)
            raise RunnerError(
                f"{what} exited {proc.returncode} while the parent answered a round; stderr tail:\n{_tail(log)}"
            ) from e
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()  # type: ignore[union-attr]
                except (OSError, ValueError):
                    pass
    result_file = out / "result.json"
    if not result_file.exists():
        raise RunnerError(f"{what} exited {proc.returncode} without a result; stderr tail:\n{_tail(log)}")
    result = json.loads(result_file.read_text())
    if result.get("status") != "ok":
        raise RunnerError(f"runner (paired) failed: {result.get('error')}")
    return result
