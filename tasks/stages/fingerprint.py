"""env-fingerprint stage: take the environment fingerprint in the runner's interpreter.

The record comes from ``python -m tasks.runner.probe`` run by the configured runner Python (TF facts
belong to that interpreter, not to the Airflow worker); ``tasks.analysis.environment`` hashes it into
``fingerprint_id`` and ``comparability_key``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tasks.analysis.environment import Fingerprint
from tasks.runner import probe


def take_fingerprint(*, include_tensorflow: bool = True) -> Fingerprint:
    """Fingerprint this interpreter and host in-process (``tasks.runner.probe.collect``, hashed).

    With ``include_tensorflow=False`` TF is not imported and its fields read
    ``"unknown: not collected ..."``. Never raises for missing hardware or libraries.
    """
    return Fingerprint.from_data(probe.collect(include_tensorflow=include_tensorflow))


def take_fingerprint_in(python_executable: str, timeout_s: float = 120,
                        env: Mapping[str, str] | None = None) -> Fingerprint:
    """Run ``python -m tasks.runner.probe`` under another interpreter (the runner's) and parse it.

    ``env`` (default: this process's environment) is the runner's environment; this package's root
    is prepended to PYTHONPATH. Raises RuntimeError naming the interpreter, with the stderr tail,
    if it cannot start, exits non-zero, exceeds ``timeout_s`` seconds or prints no valid JSON.
    """
    env = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run([python_executable, "-m", "tasks.runner.probe"], capture_output=True,
                              text=True, timeout=timeout_s, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        tail = getattr(exc, "stderr", None) or ""
        tail = (tail.decode(errors="replace") if isinstance(tail, bytes) else tail)[-2000:]
        raise RuntimeError(f"fingerprint in {python_executable!r} failed: {exc}; stderr tail:\n{tail}") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        if proc.returncode != 0:
            raise ValueError(f"exit status {proc.returncode}")
        return Fingerprint.from_data(json.loads(lines[-1])["data"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise RuntimeError(f"fingerprint in {python_executable!r} failed: {exc}; "
                           f"stderr tail:\n{proc.stderr[-2000:]}") from exc
