"""env-fingerprint stage: take the environment fingerprint in the runner's interpreter.

The record comes from the runner's ``probe`` mode (``tasks.runner.modes.probe``), run by the configured
runner command like every other runner mode (TF facts belong to that interpreter, not to the Airflow
worker); ``tasks.analysis.environment`` hashes it into ``fingerprint_id`` and ``comparability_key``. The
probe reads TensorFlow's facts from its installed package without importing it (``tasks.runner.probe``), so
the stage costs a few seconds, not the 15-30 s of ``import tensorflow`` (``bench/fingerprint.py`` times the
whole subprocess).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from tasks.analysis.environment import Fingerprint
from tasks.runner import RunnerProcess, probe
from tasks.runner.driver import as_runner
from tasks.runner.protocol import ProbeResult, ProbeSpec
from tasks.settings import Settings


def take_fingerprint(*, include_tensorflow: bool = True) -> Fingerprint:
    """Fingerprint this interpreter and host in-process (``tasks.runner.probe.collect``, hashed).

    TensorFlow is read from its package files, never imported; with ``include_tensorflow=False`` it is
    not read and its fields read ``"unknown: not collected ..."``. Never raises for missing hardware or
    libraries.
    """
    return Fingerprint.from_data(probe.collect(include_tensorflow=include_tensorflow))


def take_fingerprint_in(
    runner: RunnerProcess | str,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    *,
    include_tensorflow: bool = True,
    out_dir: str | Path | None = None,
) -> Fingerprint:
    """Run the probe in the runner (``RunnerProcess``; an interpreter path: its ``-m tasks.runner``) and hash it.

    ``env`` (default: the runner's own, else this process's environment) is the runner's environment; this
    package's root is prepended to PYTHONPATH. ``timeout_s`` (s) defaults to ``PERFWATCH_FINGERPRINT_TIMEOUT_S``
    (:data:`tasks.settings.TIMEOUT_DEFAULTS`; the probe takes 2-4 s on the dev machine, several times that
    under load). ``out_dir`` keeps the probe's spec, result and stderr (``probe_stderr.log``); default a
    temporary directory, removed afterwards.

    Raises:
        tasks.runner.RunnerError: the runner cannot start, exits without a result, runs past its limit (the
            message names the stage, the limit and its setting) or speaks another protocol version; the
            message names the interpreter and ends with the tail of the probe's stderr (the probe says there
            what it is doing, e.g. reading TensorFlow's package).
    """
    how = "timeout_s"
    if timeout_s is None:
        timeout_s, how = Settings.from_env().runner_limit("env-fingerprint")
    proc = as_runner(runner)
    if env is not None:
        proc = RunnerProcess(proc.command, env=env)
    with tempfile.TemporaryDirectory(prefix="perfwatch-probe-") as tmp:
        spec = ProbeSpec(out_dir=str(out_dir or tmp), include_tensorflow=include_tensorflow)
        result = proc.run(spec, ProbeResult, timeout_s, limit_note=how)
    return Fingerprint.from_data(result.data)
