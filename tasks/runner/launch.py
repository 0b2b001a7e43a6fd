"""The parent side of the runner: start ``python -m tasks.runner SPEC.json`` in a fresh interpreter.

Never imports TensorFlow; the interpreter is the configured runner Python (``PERFWATCH_RUNNER_PYTHON``),
so production can point it at a separate TF/GPU venv or container image. The runner's progress lines
(``tasks.runner.progress``) are relayed while it runs: log lines, or a progress bar on a terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from tasks.runner import progress
from tasks.runner.spec import RunnerError, RunnerSpec

#: The pipeline stage each runner mode belongs to, as error messages name it.
STAGE_OF_MODE = {"warmup": "warm-up", "profile": "profiled run", "paired": "paired run"}


def stderr_tail(stderr: str | bytes | None, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of a child's stderr (bytes decoded), or ``(nothing)``."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else (stderr or "")
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return "\n".join(tail) if tail else "(nothing)"


def launch(
    spec: RunnerSpec, python_executable: str, timeout_s: float = 1800, *, limit_note: str | None = None
) -> dict[str, Any]:
    """Run ``spec`` in a fresh ``python -m tasks.runner`` process and return its result dict.

    Args:
        timeout_s: the process's time limit (s); past it the process is killed.
        limit_note: how the limit was made (e.g. ``"PERFWATCH_WARMUP_TIMEOUT_S=1800 s"``), quoted in
            the timeout error so the reader knows which setting to raise.

    The process's stderr is kept in ``<out_dir>/<mode>_stderr.log`` (also when it timed out); its
    progress lines on stdout are handed to ``tasks.runner.progress.report`` as they come.

    Raises:
        RunnerError: the process failed or timed out; the message names the stage, the model and,
            for a timeout, the limit and how it was made; it carries the runner's own error (e.g.
            the model that failed to load, the exception of the training step) or the tail of its
            stderr.
    """
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / f"{spec.mode}_spec.json"
    spec_path.write_text(spec.model_dump_json(indent=2))
    (out / "result.json").unlink(missing_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH")) if p)
    stage = STAGE_OF_MODE.get(spec.mode, spec.mode)
    log = out / f"{spec.mode}_stderr.log"
    with open(log, "w") as err:
        try:
            proc = subprocess.Popen(
                [python_executable, "-m", "tasks.runner", str(spec_path)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                bufsize=1,
                env=env,
                cwd=project_root,
            )
        except OSError as e:
            raise RunnerError(f"{stage}: cannot start runner interpreter {python_executable!r}: {e}") from e
        reader = threading.Thread(target=progress.relay, args=(proc.stdout,), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            proc.kill()
            proc.wait()
            raise RunnerError(
                f"{stage} timed out: the runner process for {spec.model_path} ran past its limit of "
                f"{timeout_s:.0f} s ({limit_note or 'timeout_s'}) and was killed; stderr tail:\n"
                f"{stderr_tail(log.read_text(errors='replace'))}"
            ) from e
        finally:
            reader.join(timeout=10)
            proc.stdout.close()  # type: ignore[union-attr]
    result_file = out / "result.json"
    if not result_file.exists():
        raise RunnerError(
            f"{stage}: runner ({spec.mode}) for {spec.model_path} exited {proc.returncode} without a "
            f"result; stderr tail:\n{stderr_tail(log.read_text(errors='replace'))}"
        )
    result = json.loads(result_file.read_text())
    if result.get("status") != "ok":
        raise RunnerError(f"runner ({spec.mode}) failed: {result.get('error')}")
    return result
