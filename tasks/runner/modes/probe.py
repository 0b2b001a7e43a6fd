"""Probe mode: the environment fingerprint of this interpreter and host (``tasks.runner.probe.collect``).

TensorFlow is read from its package files, never imported, so this mode costs a few seconds; the probe says
each step it starts on stderr (kept by the parent), so a probe killed by its time limit shows where it was.
"""

from __future__ import annotations

from tasks.runner import probe
from tasks.runner.protocol import ProbeResult, ProbeSpec


def run(spec: ProbeSpec) -> ProbeResult:
    """The fingerprint record (``ProbeResult.data``); never raises for missing hardware or libraries."""
    return ProbeResult(data=probe.collect(include_tensorflow=spec.include_tensorflow, progress=True))
