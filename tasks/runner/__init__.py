"""The runner: the only code that imports TensorFlow, run as ``python -m tasks.runner SPEC.json``.

Everything here runs in the *runner's* interpreter (``PERFWATCH_RUNNER_PYTHON``: the project venv by
default, a separate TF/GPU venv or image in production) except ``launch``, the parent side that
starts it, and ``session``, the parent side of a paired gate in rounds. Modules: ``spec`` (what to
run; the JSON contract), ``launch`` (parent side), ``session`` (parent side, round by round),
``process`` (the measurement itself), ``inputs`` (what the model is fed: its declared inputs, the
case's ``inputs`` options, synthetic batches, the case's ``input_fn``), ``steady`` (the warm-up rule), ``progress``
(progress lines of the
long phases: emitted by ``process``, relayed by ``launch`` and ``session``), ``probe`` (the environment
facts, ``python -m tasks.runner.probe``), ``zoo`` (model builders: the demo store and the zoo of model kinds),
``pipelines`` (example ``input_fn``
pipelines over TFRecord images).

Rule: modules here import only ``tasks.runner.*`` (and TF, numpy, pydantic, psutil, pynvml), so
the runner's venv needs nothing else from this project.
"""

from tasks.runner.launch import launch
from tasks.runner.spec import RunnerError, RunnerSpec

__all__ = ["RunnerError", "RunnerSpec", "launch"]
