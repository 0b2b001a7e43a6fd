"""warm-up: a fresh runner process loads the model and trains until step time is steady.

Fails fast when the model cannot run (load error, a training step that raises), before the
longer profiled run. The steady-state rule is ``tasks.runner.steady``'s rolling coefficient of
variation; its step count is what the profiled run then uses as warm-up.

A nightly run of an unchanged model need not pay that process again: :func:`reusable_warm_up` finds the
newest warm-up of the same case on the same model bytes and environment within ``Case.warmup_reuse_days``
and the stage hands that record on instead (the model is known to run; the profiled run still warms up
in its own process). pyperf's calibration, kept and reused for later runs of the same benchmark, is the
same idea.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from tasks.records import Case, PulledModel, WarmupRecord
from tasks.runner import RunnerProcess, RunnerSpec
from tasks.runner.driver import as_runner
from tasks.runner.protocol import WarmupResult
from tasks.settings import RunnerStage, Settings
from tasks.store import reads


def case_options(case: Case) -> dict[str, Any]:
    """The ``RunnerSpec`` fields that say what a case measures and how (mode, inputs, input_fn, signature,
    safe_mode, precision, xla, strategy, quantization, TFLite threads, telemetry interval, partial batches): one
    place, so
    warm-up, the profiled run and the paired gate run the same thing."""
    return {
        "batch_size": case.batch_size,
        "seed": case.seed,
        "deterministic": case.deterministic,
        "case_mode": case.mode,
        "inputs": None if case.inputs is None else {k: v.to_xcom() for k, v in case.inputs.items()},
        "input_fn": case.input_fn,
        "signature": case.signature,
        "safe_mode": case.safe_mode,
        "precision": case.precision,
        "xla": case.xla,
        "strategy": case.strategy,
        "quantization": case.quantization,
        "tflite_threads": case.tflite_threads,
        "telemetry_interval_ms": case.telemetry_interval_ms,
        "allow_partial_batches": case.allow_partial_batches,
        "device": case.device,
        "case_name": f"{case.model} {case.name}",
    }


def xla_cache_dir(case: Case, work_dir: str | Path) -> str | None:
    """The case's XLA compilation cache, ``<work_dir>/xla_cache``, for an ``xla`` case (else ``None``): the
    warm-up process fills it, the profiled run and the paired gate of the same run load from it instead of
    compiling again (``tasks.runner.execution.configure_xla_cache``)."""
    return str(Path(work_dir) / "xla_cache") if case.xla else None


def warm_up(
    pulled: PulledModel,
    case: Case,
    work_dir: str | Path,
    runner: RunnerProcess | str,
    timeout_s: float | None = None,
) -> WarmupRecord:
    """Run the warm-up in ``<work_dir>/warmup`` and return its record (our timer, ms).

    ``runner``: how the runner is started (``RunnerProcess``; an interpreter path: its ``-m tasks.runner``).
    ``timeout_s`` (s) defaults to ``PERFWATCH_WARMUP_TIMEOUT_S`` (``tasks.settings.TIMEOUT_DEFAULTS``).

    Raises:
        tasks.runner.RunnerError: the model failed to load or to train (message names the model), or
            the process ran past its limit (message names the stage, the limit and its setting, and
            ends with the process's stderr tail).
    """
    how = "timeout_s"
    if timeout_s is None:
        timeout_s, how = Settings.from_env().runner_limit("warm-up")
    spec = RunnerSpec(
        mode="warmup",
        model_path=pulled.local_path,
        out_dir=str(Path(work_dir) / "warmup"),
        **case_options(case),
        warmup_window=case.warmup_window,
        warmup_cv_max=case.warmup_cv_max,
        warmup_max_steps=case.warmup_max_steps,
        xla_cache_dir=xla_cache_dir(case, work_dir),
    )
    r = as_runner(runner).run(spec, WarmupResult, timeout_s, limit_note=how)
    return WarmupRecord(
        warmup_steps=r.warmup_steps,
        steady=r.steady,
        final_cv=r.final_cv,
        cold_step_ms=r.cold_step_ms,
        step_times_ms=r.warmup_step_times_ms,
        wall_s=r.wall_s,
    )


def reusable_warm_up(db_url: str, pulled: PulledModel, comparability_key: str, case: Case) -> WarmupRecord | None:
    """A stored warm-up this run may reuse instead of starting a warm-up process, or ``None``.

    The newest successful run of ``case`` (same model and case name) whose warm-up process ran and reached
    steady state within ``case.warmup_reuse_days`` days, on the same model bytes (``pulled.digest``) in the
    same environment (``comparability_key``): ``tasks.store.reads.warmup_to_reuse``. Its record says
    ``reused_from_run_id``. Never for ``warmup_reuse_days`` 0.
    """
    return reads.warmup_to_reuse(
        db_url, case.model, case.name, pulled.digest, comparability_key, case.warmup_reuse_days
    )


def limit_after_warmup(
    stage: RunnerStage, warmup: WarmupRecord, timed_steps: int, timeout_s: float | None = None
) -> tuple[float, str]:
    """The time limit (s) of a measuring stage's process (``profiled-run``, ``paired-run``) and how it
    was made: ``timeout_s`` when given, else the stage's setting plus ``STEP_ALLOWANCE`` times the
    warm-up's median step time (ms; its cold step if it timed none) for each of ``timed_steps``
    (``tasks.settings.Settings.runner_limit``)."""
    if timeout_s is not None:
        return timeout_s, "timeout_s"
    step_ms = statistics.median(warmup.step_times_ms) if warmup.step_times_ms else warmup.cold_step_ms
    return Settings.from_env().runner_limit(stage, timed_steps=timed_steps, step_ms=step_ms)
