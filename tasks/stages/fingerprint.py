"""env-fingerprint stage: take the environment fingerprint in the runner's interpreter.

The record comes from ``python -m tasks.runner.probe`` run by the configured runner Python (TF facts
belong to that interpreter, not to the Airflow worker); ``tasks.analysis.environment`` hashes it into
``fingerprint_id`` and ``comparability_key``. The probe reads TensorFlow's facts from its installed
package without importing it (``tasks.runner.probe``), so the stage costs a few seconds, not the
15-30 s of ``import tensorflow`` (``bench/fingerprint.py`` times the whole subprocess).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tasks.analysis.environment import Fingerprint
from tasks.runner import probe
from tasks.runner.launch import stderr_tail
from tasks.settings import Settings


def take_fingerprint(*, include_tensorflow: bool = True) -> Fingerprint:
    """Fingerprint this interpreter and host in-process (``tasks.runner.probe.collect``, hashed).

    TensorFlow is read from its package files, never imported; with ``include_tensorflow=False`` it is
    not read and its fields read ``"unknown: not collected ..."``. Never raises for missing hardware or
    libraries.
    """
    return Fingerprint.from_data(probe.collect(include_tensorflow=include_tensorflow))


def take_fingerprint_in(
    python_executable: str, timeout_s: float | None = None, env: Mapping[str, str] | None = None
) -> Fingerprint:
    """Run ``python -m tasks.runner.probe`` under another interpreter (the runner's) and parse it.

    ``env`` (default: this process's environment) is the runner's environment; this package's root
    is prepended to PYTHONPATH. ``timeout_s`` (s) defaults to ``PERFWATCH_FINGERPRINT_TIMEOUT_S``
    (:data:`tasks.settings.TIMEOUT_DEFAULTS`; the probe takes 2-4 s on the dev machine, several times
    that under load).

    Raises:
        RuntimeError: the interpreter cannot start, exits non-zero, runs past its limit (the message
            names the stage, the limit and its setting) or prints no valid JSON; the message names
            the interpreter and ends with the tail of the probe's stderr (the probe says there what
            it is doing, e.g. importing TensorFlow).
    """
    how = "timeout_s"
    if timeout_s is None:
        timeout_s, how = Settings.from_env().runner_limit("env-fingerprint")
    env = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run(
            [python_executable, "-m", "tasks.runner.probe"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(
            f"env-fingerprint timed out: the probe in {python_executable!r} ran past its limit of "
            f"{timeout_s:.0f} s ({how}) and was killed; stderr tail:\n"
            f"{stderr_tail(exc.stderr)}"
        ) from exc
    except OSError as exc:
        raise RuntimeError(f"env-fingerprint: cannot start the probe in {python_executable!r}: {exc}") from exc
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        if proc.returncode != 0:
            raise ValueError(f"exit status {proc.returncode}")
        return Fingerprint.from_data(json.loads(lines[-1])["data"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise RuntimeError(
            f"env-fingerprint in {python_executable!r} failed: {exc}; stderr tail:\n{stderr_tail(proc.stderr)}"
        ) from exc
