"""Build mode: a ``keras.applications`` model by name, with random weights, saved for the pull stage.

The pull stage of a ``backbone: keras.applications`` case asks for it (``tasks.stages.pull.build_application``):
the architecture is built in the runner's interpreter, whose Keras decides it (the runner may be another venv
or image than the Airflow worker's), saved as ``<model_dir>/model.keras`` so that every later process of the
run (warm-up, profiled run, paired gate, TFLite conversion) loads the very same weights, and its config is
hashed (``tasks.runner.applications``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from tasks.runner import applications, progress
from tasks.runner.protocol import BuildResult, BuildSpec


def _shape(shape: Sequence[int | None]) -> list[int | None]:
    dims = list(shape)[1:]  # the batch dimension left out
    return [None if d is None else int(d) for d in dims]


def run(spec: BuildSpec) -> BuildResult:
    """Build, save and hash the model ``spec.name`` (module docstring).

    Raises:
        RunnerError: unknown name (lists close matches), arguments the constructor refuses, or a model that is not
            the architecture asked for (``applications.stem_mismatch``).
    """
    t0 = time.perf_counter()
    import keras

    progress.emit("start", text=f"build: Keras imported in {time.perf_counter() - t0:.1f} s; building {spec.name}")
    model, constructor = applications.build(spec.name, spec.input_shape, spec.classes, spec.seed)
    digest = applications.config_sha256(model.get_config())
    out = Path(spec.model_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.keras"
    model.save(path)
    return BuildResult(
        constructor=constructor,
        keras_version=keras.__version__,
        config_sha256=digest,
        version=applications.version_string(keras.__version__, digest),
        source=applications.describe_call(constructor, spec.input_shape, spec.classes, spec.seed),
        model_path=str(path),
        size_bytes=path.stat().st_size,
        params=int(model.count_params()),
        input_shape=_shape(model.input_shape),
        output_shape=_shape(model.output_shape),
        weights_sha256=applications.weights_sha256(model.get_weights()),
    )
