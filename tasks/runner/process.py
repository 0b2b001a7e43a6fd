"""The runner process: ``python -m tasks.runner SPEC.json`` — the only code that runs TensorFlow.

One process per measurement (PerfZero's rule): a fresh interpreter reads the request (``RunnerSpec``, the
probe's ``ProbeSpec`` or the pull stage's ``BuildSpec``), says hello (its protocol version,
``tasks.runner.protocol``), runs one mode (``tasks.runner.modes``: probe, build, warmup, profile, paired) and
writes the mode's typed result to ``<out_dir>/result.json`` — also on failure, an ``ErrorResult`` with the
error, and the process then exits 1.
The measuring modes feed the model the inputs it declares (synthetic batches through ``tf.data`` with
prefetch, shaped and ranged by the case's ``inputs``, or the case's own ``input_fn`` pipeline,
``tasks.runner.inputs``) and time one kind of step, the case's ``case_mode`` (``tasks.runner.measure``).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from pydantic import BaseModel, ValidationError

from tasks.runner import devices, execution, progress
from tasks.runner.modes import build, paired, probe, profile, warmup
from tasks.runner.protocol import (
    SCHEMA_VERSION,
    BuildSpec,
    ErrorResult,
    HelloEvent,
    PairedResult,
    ProbeSpec,
    ProfileResult,
    RunnerError,
    WarmupResult,
    event_line,
    write_result,
)
from tasks.runner.spec import RunnerSpec

#: environment variable: modules (comma-separated, ``package.module``) the runner imports before it loads a
#: model, so that the custom Keras classes they register (``@keras.saving.register_keras_serializable()``) load
IMPORTS_ENV = "PERFWATCH_RUNNER_IMPORTS"


def import_user_modules(environ: dict[str, str] | None = None) -> list[str]:
    """Import the modules named in ``PERFWATCH_RUNNER_IMPORTS`` (comma-separated; unset or empty: none) and
    return their names, in order.

    Raises:
        RunnerError: a module does not import (names the variable, the module and the error).
    """
    import importlib

    raw = (os.environ if environ is None else environ).get(IMPORTS_ENV, "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any failure is the user's module
            raise RunnerError(
                f"{IMPORTS_ENV}: cannot import {name!r} in the runner's interpreter ({sys.executable}): "
                f"{type(e).__name__}: {e}"
            ) from e
    return names


def run(spec: RunnerSpec) -> WarmupResult | ProfileResult | PairedResult:
    """Execute a measuring ``spec`` in this process (after importing TensorFlow) and return its result.

    Raises:
        RunnerError: a model failed to load or its step failed (names the model).
    """
    t_import = time.perf_counter()
    import tensorflow  # noqa: F401 - timed here: what a case costs beyond its steps (phases_s.import_tf)

    devices.select(spec.device, spec.case_name)  # cpu: GPUs hidden; gpu/tpu: refused where TF sees none
    execution.configure_devices()  # PERFWATCH_CPU_LOGICAL_DEVICES, before TF initialises
    import_user_modules()  # their custom Keras classes register before the model loads
    progress.emit("start", text=f"{spec.mode}: TensorFlow imported; loading the model and tracing its first step")
    if spec.mode == "paired":
        return paired.run(spec)
    import_s = time.perf_counter() - t_import
    if spec.mode == "warmup":
        return warmup.run(spec, import_s)
    return profile.run(spec, import_s)


def read_spec(path: str | Path) -> RunnerSpec | ProbeSpec | BuildSpec:
    """The request in ``path``.

    Raises:
        RunnerError: it is of another protocol version (names both), or not a valid request.
    """
    raw = json.loads(Path(path).read_text())
    theirs = raw.get("schema_version") if isinstance(raw, dict) else None
    if theirs != SCHEMA_VERSION:
        raise RunnerError(
            f"the request {path} is of protocol {theirs}, this runner ({sys.executable}) speaks {SCHEMA_VERSION}: "
            "install the same perfwatch in the runner's venv"
        )
    try:
        if raw.get("mode") == "probe":
            return ProbeSpec.model_validate(raw)
        if raw.get("mode") == "build":
            return BuildSpec.model_validate(raw)
        return RunnerSpec.model_validate(raw)
    except ValidationError as e:
        raise RunnerError(f"the request {path} is not valid: {e}") from e


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m tasks.runner SPEC.json``; writes ``<out_dir>/result.json``, returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m tasks.runner SPEC.json", file=sys.stderr)
        return 2
    sys.stdout.write(event_line(HelloEvent(schema_version=SCHEMA_VERSION, python=sys.executable)))
    sys.stdout.flush()
    raw = json.loads(Path(argv[0]).read_text())
    out = Path(raw["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result: BaseModel
    try:
        spec = read_spec(argv[0])
        if isinstance(spec, ProbeSpec):
            result = probe.run(spec)
        elif isinstance(spec, BuildSpec):
            result = build.run(spec)
        else:
            xla_cache = execution.configure_xla_cache(spec.xla_cache_dir if spec.xla else None)  # before TF
            cached = len(os.listdir(xla_cache)) if xla_cache else None
            gpu_host = os.path.exists("/dev/nvidiactl")  # an NVIDIA driver's control node: CUDA may run here
            cuda_cache = execution.configure_cuda_cache() if spec.device != "cpu" and gpu_host else None  # before CUDA
            cuda_before = execution.cache_entries(cuda_cache) if cuda_cache else 0
            result = run(spec)
            if xla_cache:
                cache = {"dir": xla_cache, "entries_before": cached, "entries_after": len(os.listdir(xla_cache))}
                result = type(result).model_validate({**result.model_dump(), "xla_cache": cache})
            if cuda_cache and getattr(result, "peak_device_bytes", None) is not None:  # a GPU ran
                jit = {
                    "dir": cuda_cache,
                    "entries_before": cuda_before,
                    "entries_after": execution.cache_entries(cuda_cache),
                    "first_on_host": cuda_before == 0,
                }
                result = type(result).model_validate({**result.model_dump(), "cuda_cache": jit})
        code = 0
    except Exception as e:  # noqa: BLE001 - every failure is reported in result.json
        result = ErrorResult(
            mode=raw.get("mode"),
            error=f"{type(e).__name__}: {e}" if not isinstance(e, RunnerError) else str(e),
            traceback=traceback.format_exc()[-4000:],
        )
        code = 1
    write_result(out / "result.json", result)
    return code
