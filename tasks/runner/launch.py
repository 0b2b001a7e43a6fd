"""The parent side of the runner: start ``python -m tasks.runner SPEC.json`` in a fresh interpreter.

Never imports TensorFlow; the interpreter is the configured runner Python (``PERFWATCH_RUNNER_PYTHON``),
so production can point it at a separate TF/GPU venv or container image.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tasks.runner.spec import RunnerError, RunnerSpec


def launch(spec: RunnerSpec, python_executable: str, timeout_s: float = 1800) -> dict[str, Any]:
    """Run ``spec`` in a fresh ``python -m tasks.runner`` process and return its result dict.

    Raises:
        RunnerError: the process failed or timed out; the message carries the runner's own
            error (e.g. the model that failed to load, the exception of the training step) or
            the tail of its stderr.
    """
    import subprocess

    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / f"{spec.mode}_spec.json"
    spec_path.write_text(spec.model_dump_json(indent=2))
    (out / "result.json").unlink(missing_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    project_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run([python_executable, "-m", "tasks.runner", str(spec_path)], capture_output=True,
                              text=True, timeout=timeout_s, env=env, cwd=project_root)
    except subprocess.TimeoutExpired as e:
        raise RunnerError(f"runner ({spec.mode}) for {spec.model_path} timed out after {timeout_s:.0f} s") from e
    except OSError as e:
        raise RunnerError(f"cannot start runner interpreter {python_executable!r}: {e}") from e
    (out / f"{spec.mode}_stderr.log").write_text(proc.stderr)
    result_file = out / "result.json"
    if not result_file.exists():
        tail = proc.stderr.strip().splitlines()[-15:]
        raise RunnerError(f"runner ({spec.mode}) for {spec.model_path} exited {proc.returncode} without a result; "
                          "stderr tail:\n" + "\n".join(tail))
    result = json.loads(result_file.read_text())
    if result.get("status") != "ok":
        raise RunnerError(f"runner ({spec.mode}) failed: {result.get('error')}")
    return result
