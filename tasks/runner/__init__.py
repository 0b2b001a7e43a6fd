"""The runner: the only code that imports TensorFlow, run as ``python -m tasks.runner SPEC.json``.

Everything here runs in the *runner's* interpreter (``PERFWATCH_RUNNER_COMMAND``, by default
``PERFWATCH_RUNNER_PYTHON -m tasks.runner``: the project venv, a separate TF/GPU venv or a container image)
except ``driver``, the parent side that starts it. Modules: ``protocol`` (the typed, versioned boundary:
requests, stdout events, results), ``spec`` (``RunnerSpec``, what to measure), ``driver`` (parent side:
``RunnerProcess``, ``launch``, ``run_rounds``), ``process`` (the runner's entry point, dispatching to
``modes``: probe, build, warmup, profile, paired), ``measure`` (model loading, the timed step, host load, memory),
``inputs`` (what the model is fed: its declared inputs, the case's ``inputs`` options, synthetic batches,
the case's ``input_fn``), ``execution`` (precision, XLA, strategy), ``tflite``, ``telemetry``, ``steady``
(the warm-up rule), ``progress`` (progress events of the long phases), ``probe`` (the environment facts,
also ``python -m tasks.runner.probe``), ``zoo`` (model builders: the demo store and the zoo of model kinds),
``applications`` (``keras.applications`` models by name: the name table, the build with random weights, the
config hash and version),
``input_fns`` (example ``input_fn`` pipelines over TFRecord images).

Rule: modules here import only ``tasks.runner.*`` (and TF, numpy, pydantic, psutil, pynvml), so
the runner's venv needs nothing else from this project.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tasks.runner.driver import RunnerProcess, launch, run_rounds
    from tasks.runner.spec import RunnerError, RunnerSpec

__all__ = ["RunnerError", "RunnerProcess", "RunnerSpec", "launch", "run_rounds"]

_LAZY = {
    "RunnerProcess": "driver",
    "launch": "driver",
    "run_rounds": "driver",
    "RunnerError": "spec",
    "RunnerSpec": "spec",
}


def __getattr__(name: str) -> Any:
    """The package's names, imported on first use (PEP 562): ``tasks.runner.gpus`` and ``telemetry`` load
    without pydantic, in a bare interpreter with only pynvml (``bench/gpu_check.py`` on a GPU machine)."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"tasks.runner.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'tasks.runner' has no attribute {name!r}")
