"""warm-up: a fresh runner process loads the model and trains until step time is steady.

Fails fast when the model cannot run (load error, a training step that raises), before the
longer profiled run. The steady-state rule is ``tasks.runner.steady``'s rolling coefficient of
variation; its step count is what the profiled run then uses as warm-up.
"""

from __future__ import annotations

from pathlib import Path

from tasks.records import Case, PulledModel, WarmupRecord
from tasks.runner import RunnerSpec, launch


def warm_up(pulled: PulledModel, case: Case, work_dir: str | Path, runner_python: str,
            timeout_s: float = 1800) -> WarmupRecord:
    """Run the warm-up in ``<work_dir>/warmup`` and return its record (our timer, ms).

    Raises:
        tasks.runner.RunnerError: the model failed to load or to train (message names the model).
    """
    spec = RunnerSpec(mode="warmup", model_path=pulled.local_path, out_dir=str(Path(work_dir) / "warmup"),
                      batch_size=case.batch_size, seed=case.seed, deterministic=case.deterministic,
                      warmup_window=case.warmup_window, warmup_cv_max=case.warmup_cv_max,
                      warmup_max_steps=case.warmup_max_steps)
    r = launch(spec, runner_python, timeout_s)
    return WarmupRecord(warmup_steps=r["warmup_steps"], steady=r["steady"], final_cv=r["final_cv"],
                        cold_step_ms=r["cold_step_ms"], step_times_ms=r["warmup_step_times_ms"],
                        wall_s=r["wall_s"])
