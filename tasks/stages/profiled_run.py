"""profiled run: a fresh runner process times measured steps, then profiles a short window.

The measured steps run with the profiler OFF (their step times are the numbers compared
against the baseline); the profiled window runs after them with step markers so xprof can
split step time into compute, input and other. The ratio of the two medians is the profiler's
overhead, reported with the run.

Release gates (and cases with ``paired=True``) then run the paired (A/B) measurement in another
fresh process: the baseline's model version (A) and the candidate (B) loaded together, each warmed
up, measured in ABBA blocks (``tasks.runner``'s ``paired`` mode). Cost: ``2 * paired_blocks *
paired_block_steps`` more timed steps (by default 1-step blocks and ``paired_blocks =
measured_steps``: twice the measured steps, 640 for the default 320) plus a second model load,
cold step and warm-up.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tasks.records import Case, ProfiledRun, PulledModel, WarmupRecord
from tasks.runner import RunnerError, RunnerSpec, launch


def paired_run(pulled: PulledModel, baseline: PulledModel, case: Case, warmup: WarmupRecord, work_dir: str | Path,
               runner_python: str, timeout_s: float = 3600) -> tuple[str, float]:
    """Run the paired (A/B) measurement in ``<work_dir>/paired``: A = ``baseline``, B = ``pulled``.

    Each version gets the warm-up stage's step count (``warmup.warmup_steps``) after its cold step.

    Returns:
        (path of the runner's JSON result with ``blocks``, the process's wall time in s).

    Raises:
        RunnerError: the runner failed, returned fewer blocks or fewer steps per block than asked,
            or a non-positive/NaN step time (names the block and version).
    """
    out = Path(work_dir) / "paired"
    spec = RunnerSpec(mode="paired", model_path=pulled.local_path, baseline_model_path=baseline.local_path,
                      out_dir=str(out), batch_size=case.batch_size, seed=case.seed,
                      deterministic=case.deterministic, warmup_steps=warmup.warmup_steps,
                      blocks=case.paired_blocks, block_steps=case.paired_block_steps)
    r = launch(spec, runner_python, timeout_s)
    blocks = r["blocks"]
    if len(blocks) < case.paired_blocks:
        raise RunnerError(f"paired runner returned {len(blocks)} block pairs, {case.paired_blocks} were asked")
    for i, b in enumerate(blocks):
        for who, key in (("A (baseline)", "a_ms"), ("B (candidate)", "b_ms")):
            if len(b[key]) < case.paired_block_steps:
                raise RunnerError(f"paired block {i} of {who} has {len(b[key])} steps, "
                                  f"{case.paired_block_steps} were asked")
            bad = [(j, t) for j, t in enumerate(b[key]) if not t > 0]
            if bad:
                raise RunnerError(f"paired block {i} of {who}: non-positive or NaN step time(s) at (index, ms) "
                                  f"{bad[:5]}")
    return str(out / "result.json"), float(r["wall_s"])


def profiled_run(pulled: PulledModel, case: Case, warmup: WarmupRecord, work_dir: str | Path,
                 runner_python: str, timeout_s: float = 3600, *,
                 baseline: PulledModel | None = None) -> ProfiledRun:
    """Run the measured and profiled steps in ``<work_dir>/run`` and return where the files are.

    With ``baseline`` (the baseline's model version, pulled), also run :func:`paired_run` after
    them and record its result file in ``paired_path``.

    Returns:
        ProfiledRun: median step time (ms) and throughput (examples/s) of the measured steps,
        profiler overhead ratio, peak host RSS (bytes) and device memory (bytes, GPU only).

    Raises:
        RunnerError: the runner failed, or returned fewer measured steps than asked, or a
            non-positive step time (never stored as a measurement), or wrote no xplane.
    """
    out = Path(work_dir) / "run"
    spec = RunnerSpec(mode="profile", model_path=pulled.local_path, out_dir=str(out), batch_size=case.batch_size,
                      seed=case.seed, deterministic=case.deterministic, warmup_steps=warmup.warmup_steps,
                      measured_steps=case.measured_steps, profiled_steps=case.profiled_steps)
    r = launch(spec, runner_python, timeout_s)
    measured = r["measured_step_times_ms"]
    if len(measured) < case.measured_steps:
        raise RunnerError(f"runner returned {len(measured)} measured steps, {case.measured_steps} were asked")
    bad = [(i, t) for i, t in enumerate(measured) if not t > 0]
    if bad:
        raise RunnerError(f"non-positive or NaN measured step time(s) at (index, ms) {bad[:5]}")
    xplanes = sorted(Path(r["profile_dir"]).glob("plugins/profile/*/*.xplane.pb"))
    if not xplanes:
        raise RunnerError(f"the profiler wrote no *.xplane.pb under {r['profile_dir']}/plugins/profile/*/")
    median = statistics.median(measured)
    prof_median = statistics.median(r["profiled_step_times_ms"])
    paired_path = paired_wall = None
    if baseline is not None:
        paired_path, paired_wall = paired_run(pulled, baseline, case, warmup, work_dir, runner_python, timeout_s)
    return ProfiledRun(work_dir=str(work_dir), samples_path=str(out / "result.json"), profile_dir=r["profile_dir"],
                       measured_steps=len(measured), median_step_ms=median,
                       throughput_eps=case.batch_size / (median / 1000.0),
                       profile_overhead_ratio=prof_median / median, peak_rss_bytes=r["peak_rss_bytes"],
                       peak_device_bytes=r["peak_device_bytes"], wall_s=r["wall_s"], paired_path=paired_path,
                       baseline_model=baseline, paired_wall_s=paired_wall)
