"""baseline-compare: gather → decide → validate → explain.

1. gather: one read of the store (``tasks.store.reads.gather_compare_inputs``);
2. decide: the statistics, pure (``tasks.analysis.verdict.decide``);
3. validate: the Great Expectations suites on the samples and the op table (``tasks.stages.expectations``);
4. explain: op-level attribution against the newest baseline run (``tasks.analysis.attribution``).

The baseline is the lookback history of accepted runs (``baselines`` rows, newest first) of the
same model, case and environment comparability key. Without one, the latest accepted run of the
same model and case in another environment is compared anyway and the verdict is
``env-changed``, naming the fingerprint fields that differ. With neither, ``no-baseline``.

The statistics (``tasks.analysis.stats``) decide ``pass``/``regression``/``improvement``/``inconclusive``
within the tolerance; Great Expectations (``tasks.stages.expectations``) enforces the data-quality
expectations and the step-time ceiling (``tasks.analysis.verdict.ceiling_ms``: between 110% and 150% of the baseline
median, widened within that by the comparison's own uncertainty), passed to the suite as a
parameter. A ceiling breach turns a statistically undecided run into a ``regression``; a failed
data-quality expectation fails the stage.

The history comparison's prior for process-to-process drift comes from ``tasks.analysis.calibration``
(the Case's ``prior_between_sd``, else estimated from the store's accepted runs in the same
environment, else 0.05); it is recorded in ``evidence["prior"]``. Baseline runs whose samples
are unusable (fewer than ``stats.MIN_STEPS`` measured steps, a NaN or non-positive step time) are
left out of the lookback and named in ``evidence["skipped_baselines"]``; if none is left the
verdict is ``no-baseline`` with that reason.

Paired gates (release trigger or ``Case.paired``; ``run.paired_path`` is set by the profiled-run
stage) are judged by ``stats.compare_paired`` on the ABBA block pairs of the baseline version
(A) and the candidate (B) measured in one process: method ``paired-abba``. The history verdict
is kept as evidence (``evidence["history"]``), and the GX ceiling is then applied to the paired
samples, ``median(B) <= max_ratio x median(A)`` (same process, same time window), not to the
drift-prone history; the paired interval includes the process-level offset
(``tasks.analysis.calibration.paired_offset_for_case``, in ``evidence["paired_offset"]``). Cost (in
``evidence["paired"]["cost"]``): ``2 x blocks x block_steps`` extra timed steps, twice the
measured steps with the defaults.
"""


from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.analysis import calibration
from tasks.analysis.attribution import attribute_against_run
from tasks.analysis.verdict import DEFAULT_MAX_RATIO, Decision, PairedBlocks, decide
from tasks.records import Case, CompareRecord, EnvRecord, ParseRecord, ProfiledRun
from tasks.stages import expectations
from tasks.store import reads


class MeasurementRejected(ValueError):
    """The run's samples fail a data-quality expectation (too few rows, nulls, non-positive)."""


def paired_blocks(path: str | Path) -> PairedBlocks:
    """The A (baseline) and B (candidate) per-step ms of each block pair from the paired runner result
    at ``path``, and its layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``, ``orders``).

    Raises:
        ValueError: the file holds no ``blocks`` (names the path).
    """
    r = json.loads(Path(path).read_text())
    blocks = r.get("blocks")
    if not blocks:
        raise ValueError(f"{path}: paired result holds no 'blocks' (expected the runner's paired-mode output)")
    layout = {"blocks": len(blocks), "block_steps": r.get("block_steps"), "timed_steps": r.get("timed_steps"),
              "wall_s": r.get("wall_s"), "orders": "".join(b["order"] for b in blocks)}
    return PairedBlocks(a=[b["a_ms"] for b in blocks], b=[b["b_ms"] for b in blocks], layout=layout)


def _validate(d: Decision, case: Case, measured: list[float], parsed_tables: dict[str, Any],
              gx_dir: Path) -> tuple[dict[str, expectations.GxOutcome], Path]:
    """Run the GX suites (step samples with the ceiling, paired B samples, op table), render Data Docs under
    ``gx_dir`` and write the full results to ``gx_dir/validation_results.json``."""
    paired_steps = None
    if d.paired_b is not None:
        paired_steps = expectations.validate_step_times(d.paired_b, min_rows=case.paired_blocks * case.paired_block_steps,
                                                        median_limit_ms=d.limit)
    steps = expectations.validate_step_times(measured, min_rows=case.measured_steps,
                                             median_limit_ms=None if paired_steps else d.limit)
    ops = expectations.validate_op_table(pd.DataFrame(parsed_tables.get("op_stats", []),
                                                      columns=["op_name", "op_type", "total_self_time_us",
                                                               "occurrences"]))
    outcomes = {"step_times": steps, "op_stats": ops, **({"paired_b_steps": paired_steps} if paired_steps else {})}
    expectations.render_data_docs(outcomes, gx_dir)
    # The full GX validation results (KBs each) go to a file archived with the run and into the
    # store by the archive stage; the verdict that travels through XCom carries their summary.
    gx_results = gx_dir / "validation_results.json"
    gx_results.write_text(json.dumps({k: o.result_json for k, o in outcomes.items()}))
    return outcomes, gx_results


def baseline_compare(db_url: str, case: Case, env: EnvRecord, run: ProfiledRun, parsed: ParseRecord,
                     work_dir: str | Path, *, max_ratio: float = DEFAULT_MAX_RATIO) -> CompareRecord:
    """Compare the run's measured step times with its baseline and validate them with GX.

    Writes the GX Data Docs HTML under ``<work_dir>/gx`` (archived with the run). Whenever a baseline
    run exists (any verdict), ``evidence["attribution"]`` holds the op-level attribution of the change
    against the newest one (``tasks.analysis.attribution.attribute_against_run``: µs per profiled step).

    Raises:
        MeasurementRejected: a data-quality expectation failed (names it and the observed value).
        ValueError: the paired result (``run.paired_path``) holds no blocks, unequal block counts or a
            NaN/non-positive step time (names ``a_blocks[i]``/``b_blocks[i]`` and the index).
    """
    measured: list[float] = json.loads(Path(run.samples_path).read_text())["measured_step_times_ms"]
    inputs = reads.gather_compare_inputs(db_url, case.model, case.name, env.comparability_key,
                                         lookback=case.lookback, calibration_window=calibration.CALIBRATION_WINDOW)
    base = run.baseline_model
    d = decide(measured, case, same_env=inputs.same_env, other_env=inputs.other_env,
               other_env_data=inputs.other_env_data, env_data=env.data, samples=inputs.samples,
               calibration_runs=inputs.calibration_runs, aa_gates=inputs.aa_gates,
               paired=paired_blocks(run.paired_path) if run.paired_path else None,
               baseline_version=base.version if base else None, baseline_digest=base.digest if base else None,
               max_ratio=max_ratio)
    parsed_tables = json.loads(Path(parsed.parsed_path).read_text())
    outcomes, gx_results = _validate(d, case, measured, parsed_tables, Path(work_dir) / "gx")
    evidence = d.evidence
    evidence["gx"] = {k: {"success": o.success, "failures": len(o.failures)} for k, o in outcomes.items()}
    evidence["gx_failures"] = [f.model_dump(mode="json") for o in outcomes.values() for f in o.failures]
    steps, paired_steps = outcomes["step_times"], outcomes.get("paired_b_steps")
    quality = [f for o in (steps, paired_steps) if o for f in o.failures if not f.is_limit]
    if quality:
        raise MeasurementRejected("step-time samples failed data-quality expectations: "
                                  + "; ".join(f.text for f in quality))
    verdict = d.verdict
    ceiling = paired_steps or steps
    if d.limit is not None and not ceiling.success and verdict == "inconclusive":
        evidence["ceiling_breached"] = True
        verdict = "regression"
    if d.baseline_run_ids:  # op-level attribution against the newest baseline run, whatever the verdict
        evidence["attribution"] = attribute_against_run(inputs.baseline_ops, d.baseline_run_ids[0], parsed_tables,
                                                        case.profiled_steps, parsed.avg_step_time_ms)
    return CompareRecord(verdict=verdict, method=d.method, baseline_run_ids=d.baseline_run_ids, ratio=d.ratio,
                         ci_low=d.ci_low, ci_high=d.ci_high, median_limit_ms=d.limit, gx_results_path=str(gx_results),
                         gx_success=all(o.success for o in outcomes.values()), evidence=evidence)
