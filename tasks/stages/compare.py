"""baseline-compare: gather → decide → validate → explain.

1. gather: one read of the stored facts (``tasks.store.reads.gather_compare_inputs``, ``tasks.records.CompareInputs``);
2. decide: the final verdict, pure (``tasks.analysis.verdict.decide``): the usable baselines, the statistics,
   then the noise rule;
3. validate: the Great Expectations suites (``tasks.stages.expectations``) on the samples' data quality,
   the op table, and the **verdict's result table** (ratio, interval, host_busy) with the step-time
   threshold ``1 + tolerance`` as a suite parameter;
4. explain: op-level attribution against the newest usable baseline run, its op table read from the store
   (``tasks.store.reads.run_ops``, ``tasks.analysis.attribution``).

The baseline is the lookback history of accepted runs (``baselines`` rows, newest first) of the
same model, case and environment comparability key. Without one, the environment changed: the change is
judged against the lookback of the environment of the case's newest accepted run (``tasks.analysis.verdict.
judge_change``: ``pass``/``improvement``/``regression`` when the interval across the change decides,
``env-changed`` when it does not, which never becomes the baseline by itself), naming the fingerprint fields
that differ. With neither, ``no-baseline``.

Thresholds are tests: the statistics (``tasks.analysis.stats.verdict_from_ci``) decide
``pass``/``regression``/``improvement``/``inconclusive`` from the interval against the no-change line 1
and the tolerance threshold ``1 + tolerance``, and GX enforces the same threshold on the same interval
(``expectations.validate_verdict``: where the interval lies above 1 on a quiet host, its upper end must
stay within the threshold; it fails exactly for a ``regression``). Nothing else changes a verdict: GX
never overturns one, and a per-step check over a line is not a test of a change in the median. A
failed data-quality expectation (too few rows, nulls, non-positive step times) fails the stage
(``MeasurementRejected``); ``gx_success`` is true when every suite passed, i.e. the data are sound and
the threshold holds (false for a ``regression`` or bad data).

The history comparison's prior for process-to-process drift comes from ``tasks.analysis.calibration``
(the Case's ``prior_between_sd``, else estimated from the store's accepted runs in the same
environment, else 0.05); it is recorded in ``evidence["prior"]``. It compares the metric that drifts
least between processes (``calibration.history_metric``: the run's per-step CPU time, from its samples
file, when clearly steadier than wall time on a CPU host, else wall time; ``evidence["metric"]``).
Baseline runs whose samples are unusable (fewer than ``stats.MIN_STEPS`` measured steps, a NaN or
non-positive step time) are left out of the lookback and named in ``evidence["skipped_baselines"]``; if
none is left the verdict is ``no-baseline`` with that reason.

Paired gates (``run.paired_path`` is set by the profiled-run stage) are judged on the ABBA block pairs
of the baseline version (A) and the candidate (B) measured in one process, method ``paired-abba``:
the sequential gate's final repeated confidence interval as the profiled-run stage stopped on it
(``tasks.analysis.sequential``; its design and looks are in ``evidence["paired"]["sequential"]``, the
cost actually spent in ``evidence["paired"]["spent"]``). The history verdict is kept as evidence
(``evidence["history"]``); the process-level offset the gate used is in ``evidence["paired_offset"]``.

Baselines only from sound measurements: a run whose verdict would make it the baseline (``pass``,
``no-baseline``, ``improvement``) is refused that when its host was busy, its warm-up never got
steady or its timed steps compiled (``tasks.analysis.soundness.baseline_refusals`` of ``run.noise`` and
``run.findings``): ``CompareRecord.baseline_refused`` and ``evidence["baseline_refused"]`` say why, the reason
says so, and the archive does not accept it (``perfwatch baseline accept`` still can). ``run.findings`` are kept
in ``evidence["measurement_findings"]``.

Output agreement: a case that bounds it (``Case.min_top1_agreement``, ``Case.max_output_rel_diff``) has the run's
agreement with the fp32 eager model (the runner's ``agreement`` record, a tflite run's ``tflite.agreement``)
judged beside step time (``tasks.analysis.agreement``): a broken bound makes the verdict ``regression``, the reason
leading with it ("output agreement (mixed_float16, eager against fp32, eager; 16 examples): top-1 agreement 0.910
below the case's 0.99; step time: ..."); a bound that could not be checked is said in the reason and never passes
silently. ``evidence["agreement"]`` keeps the check.

Per-process figures: a paired gate of several processes records, per version and process, the cold step and
what the version's load, build and cold step added to the resident set; their gates over the processes
(:data:`PROCESS_METRICS`, ``tasks.analysis.metric_gates``) go into ``evidence["cold_step"]`` and
``evidence["model_memory"]`` (a cross-environment gate's process pairs: ``evidence["cold_step"]`` and
``evidence["process_memory"]``, each process's peak resident memory), and a case's ``cold_step_tolerance`` /
``memory_tolerance`` makes one that regresses a ``regression`` (said beside a step-time regression, else leading the
reason); the cold step, wall time, is not judged on a busy host.

Noise (``run.noise``, judged once, by the profiled-run stage: ``tasks.analysis.verdict.judge_noise``; this
stage only applies it): on a busy host the verdict is ``inconclusive`` with the reason "host busy: ..." (in
``CompareRecord.reason`` and ``evidence["noise"]``), the statistics' own verdict kept in
``evidence["verdict_statistics"]``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.analysis import calibration, processes, sequential, soundness
from tasks.analysis.agreement import AgreementCheck, judge_agreement
from tasks.analysis.attribution import attribute_against_run
from tasks.analysis.metric_gates import (
    ENVIRONMENT_METRICS,
    METRICS,
    PROCESS_METRICS,
    ProcessMetric,
    ProcessMetricGate,
    environment_gates,
    process_gates,
)
from tasks.analysis.verdict import Decision, decide, gate_per_query, is_process_gate
from tasks.records import AUTO_ACCEPT_VERDICTS, Case, CompareRecord, EnvRecord, ParseRecord, ProfiledRun, Verdict
from tasks.runner.protocol import (
    EnvironmentGate,
    PairedGateSamples,
    ProfileResult,
    StepSamples,
    load_json,
    read_result,
    read_view,
)
from tasks.stages import expectations
from tasks.stages.profiled_run import read_paired, server_queries
from tasks.store import reads

#: methods whose verdict is the threshold rule on an interval (GX validates their result table)
THRESHOLD_METHODS = ("history-lookback", "paired-abba", "cross-environment")


class MeasurementRejected(ValueError):
    """The run's samples fail a data-quality expectation (too few rows, nulls, non-positive)."""


def _validate(
    d: Decision,
    case: Case,
    measured: list[float],
    paired_steps: list[float] | None,
    process_gate: bool,
    parsed_tables: dict[str, Any],
    gx_dir: Path,
    docs_title: str | None,
    query_latencies: list[float] | None = None,
    gated: list[expectations.GatedFigure] | None = None,
    agreement: AgreementCheck | None = None,
) -> tuple[dict[str, expectations.GxOutcome], Path]:
    """Run the GX suites (step samples' data quality, a server run's per-query latencies, paired blocks' data quality,
    the verdict's result table, the figures the case gates beside step time (``gated``), the output agreement the
    case bounds (``agreement``), op table), render Data Docs
    (named ``docs_title``) under ``gx_dir`` and write the full results to ``gx_dir/validation_results.json``.

    A server run's step samples are its batches: a point issues ``server_queries(case)`` queries or more, served
    up to ``batch_size`` at a time, so at least ``ceil(queries / batch_size)`` batches, not ``measured_steps``
    (how many depends on how the arrivals bunched); its queries are validated on their own
    (``query_latencies``: the reported point's, at least ``server_queries(case)``)."""
    if case.scenario == "server":
        queries = server_queries(case)
        outcomes = {
            "step_times": expectations.validate_step_times(measured, min_rows=math.ceil(queries / case.batch_size)),
            "query_latencies": expectations.validate_query_latencies(query_latencies or [], min_rows=queries),
        }
    else:
        outcomes = {"step_times": expectations.validate_step_times(measured, min_rows=case.measured_steps)}
    if paired_steps is not None:
        # a sequential gate may stop at its first look: at least that many pairs, both versions (a gate of
        # several processes: its first look's processes, each of paired_process_pairs pairs)
        if process_gate:
            first_look = processes.MIN_LOOK_PROCESSES * case.paired_process_pairs
        else:
            first_look = min(case.paired_blocks, sequential.MIN_LOOK_PAIRS)
        outcomes["paired_steps"] = expectations.validate_step_times(
            paired_steps, min_rows=2 * first_look * case.paired_block_steps
        )
    if d.method in THRESHOLD_METHODS and d.ratio is not None:
        outcomes["verdict"] = expectations.validate_verdict(
            d.ratio,
            d.ci_low,
            d.ci_high,
            tolerance=case.tolerance,
            # the threshold is tested unless the noise rule left the verdict undecided (a busy host's CPU-time
            # regression fails it as a quiet one does)
            host_busy=bool((d.evidence.get("noise") or {}).get("busy"))
            and d.verdict in (Verdict.INCONCLUSIVE, Verdict.ENV_CHANGED),
        )
    if gated:  # the figures the case gates beside step time, each threshold an expectation of its own
        outcomes["gated_figures"] = expectations.validate_gated_figures(gated)
    if agreement is not None:  # the case bounds its outputs' agreement with the fp32 eager model
        outcomes["agreement"] = expectations.validate_agreement(agreement.agreement, agreement.bounds)
    outcomes["op_stats"] = expectations.validate_op_table(
        pd.DataFrame(
            parsed_tables.get("op_stats", []), columns=["op_name", "op_type", "total_self_time_us", "occurrences"]
        )
    )
    expectations.render_data_docs(outcomes, gx_dir, title=docs_title)
    # The full GX validation results (KBs each) go to a file archived with the run and into the
    # store by the archive stage; the verdict that travels through XCom carries their summary.
    gx_results = gx_dir / "validation_results.json"
    gx_results.write_text(json.dumps({k: o.result_json for k, o in outcomes.items()}))
    return outcomes, gx_results


def uncompared_note(
    model: str, version: str, earlier: tuple[str, int] | None, *, paired_wanted: bool = False
) -> str | None:
    """What an unpaired ``no-baseline`` run of ``model`` ``version`` was not compared with, in one phrase: with an
    earlier version measured (``earlier``: ``tasks.store.reads.measured_version``, its version and run id) that no
    one accepted as the baseline, that this run was compared with nothing and the paired gate that compares the
    two (``perfwatch run MODEL --version V --paired``, which pairs with it); for a run that asked for a paired gate
    (``paired_wanted``) with nothing to pair with, that there was nothing (a first version); else None."""
    if earlier is not None:
        return (
            f"not compared: no baseline is accepted, and version {earlier[0]} of this case was measured (run "
            f"{earlier[1]}) but never made the baseline; a paired gate compares the two: perfwatch run {model} "
            f"--version {version} --paired"
        )
    if paired_wanted:
        return (
            f"no paired gate: nothing to pair with (no baseline is accepted and no version of {model} before "
            f"{version} was measured in this case: a first version)"
        )
    return None


def _agreement_check(case: Case, samples: dict[str, Any]) -> AgreementCheck | None:
    """The run's output agreement (the runner's ``agreement`` record, or a tflite run's ``tflite.agreement``)
    against the case's bounds (``tasks.analysis.agreement.judge_agreement``); None when the case sets none."""
    record = samples.get("agreement") or (samples.get("tflite") or {}).get("agreement")
    if case.mode != "tflite" and case.precision == "fp32" and not case.xla:
        why = "the run computes the model as saved (fp32, no XLA): nothing to compare"
    elif case.strategy != "none":
        why = "the runner does not compare outputs under a distribution strategy"
    else:
        why = "the runner recorded no agreement (a SavedModel, whose graph is fixed, is not compared)"
    return judge_agreement(
        record, min_top1=case.min_top1_agreement, max_rel_diff=case.max_output_rel_diff, why_absent=why
    )


def _process_gates(case: Case, run: ProfiledRun) -> tuple[dict[str, ProcessMetric], dict[str, ProcessMetricGate]]:
    """The figures a paired run measures once per process and version, and their gates by evidence key
    (``tasks.analysis.metric_gates``: each at its case tolerance, else its default; the repeated interval
    of the gate's last look): a paired gate of several processes, each holding both versions
    (:data:`PROCESS_METRICS`: the order they were set up in taken out), or a cross-environment gate's process
    pairs, one side per process (``ENVIRONMENT_METRICS``); a figure no process (pair) recorded on both sides has
    no gate. Any other run: :data:`PROCESS_METRICS` and no gates."""
    if not run.paired_path:
        return PROCESS_METRICS, {}
    mode = load_json(run.paired_path).get("mode")
    if mode == "environment-gate":
        g = read_result(run.paired_path, EnvironmentGate)
        sides: dict[int, dict[str, ProfileResult]] = {}
        for p in g.processes:
            sides.setdefault(p.pair, {})[p.side] = p.result
        pairs = [(x["A"], x["B"]) for _, x in sorted(sides.items()) if {"A", "B"} <= set(x)]
        figures = environment_gates(
            pairs,
            case.model_dump(),
            confidence=case.confidence,
            looks=g.gate.get("look_processes") or None,
            max_processes=(g.gate.get("design") or {}).get("max_processes"),
        )
        return ENVIRONMENT_METRICS, figures
    if mode != "paired-gate":
        return PROCESS_METRICS, {}
    samples = read_view(run.paired_path, PairedGateSamples)
    design = samples.gate.get("design") or {}
    figures = process_gates(
        samples.processes,
        case.model_dump(),
        confidence=case.confidence,
        looks=samples.gate.get("look_processes") or None,
        max_processes=design.get("max_processes"),
    )
    return PROCESS_METRICS, figures


def _gated_rows(case: Case, figures: dict[str, ProcessMetricGate], *, busy: bool) -> list[expectations.GatedFigure]:
    """The rows of the ``perfwatch_gated_figures`` GX suite: each figure whose gate has an interval, at the tolerance
    it was judged at (the case's, else its default); judged unless it is wall time on a busy host (as the verdict
    judges it)."""
    rows = []
    for key, gate in figures.items():
        m = METRICS[key]
        tolerance = gate.tolerance
        if gate.ratio is None or gate.ci_low is None or gate.ci_high is None:
            continue
        rows.append(
            expectations.GatedFigure(
                figure=m.metric,
                ratio=gate.ratio,
                ci_low=gate.ci_low,
                ci_high=gate.ci_high,
                tolerance=tolerance,
                judged=not (busy and m.wall),
            )
        )
    return rows


def _unmeasured(m: ProcessMetric, run: ProfiledRun) -> str:
    """Why a figure the case gates (``m.tolerance_field``) has no gate over this paired run, in words."""
    mode = load_json(run.paired_path).get("mode") if run.paired_path else None
    if mode == "paired-gate":
        why = "no process of the paired gate recorded it for both versions"
    elif mode == "environment-gate":
        why = "no process pair of the cross-environment gate recorded it on both sides"
    else:
        why = (
            "it is measured once per process and version, and this paired gate ran one process "
            "(paired_processes 3 or more gives it an interval)"
        )
    return f"{m.words} not judged ({m.tolerance_field} is set): {why}"


def baseline_compare(
    db_url: str,
    case: Case,
    env: EnvRecord,
    run: ProfiledRun,
    parsed: ParseRecord,
    work_dir: str | Path,
    *,
    docs_title: str | None = None,
    version: str | None = None,
    paired_wanted: bool = False,
) -> CompareRecord:
    """Compare the run's measured step times with its baseline and validate them with GX.

    ``version``: the candidate's resolved model version (``PulledModel.version``); ``paired_wanted``: the run asked
    for a paired gate (``RunContext.wants_paired``: a release trigger, ``--paired``). An unpaired ``no-baseline``
    verdict says what it was not compared with (:func:`uncompared_note`).

    Writes the GX Data Docs HTML under ``<work_dir>/gx`` (archived with the run), headed ``docs_title``
    (``expectations.data_docs_title``: model, version, case and DAG run). Whenever a baseline
    run exists (any verdict), ``evidence["attribution"]`` holds the op-level attribution of the change
    against the newest one (``tasks.analysis.attribution.attribute_against_run``: µs per profiled step).

    Raises:
        MeasurementRejected: a data-quality expectation failed (names it and the observed value).
        ValueError: the paired result (``run.paired_path``) holds no blocks, unequal block counts or a
            NaN/non-positive step time (names ``a_blocks[i]``/``b_blocks[i]`` and the index).
    """
    samples = read_view(run.samples_path, StepSamples)
    raw_samples = json.loads(Path(run.samples_path).read_text())  # a server point's queries, the agreement record
    measured = samples.measured_step_times_ms
    inputs = reads.gather_compare_inputs(
        db_url,
        case.model,
        case.name,
        env.comparability_key,
        lookback=case.lookback,
        calibration_window=calibration.CALIBRATION_WINDOW,
    )
    base = run.baseline_model
    paired = read_paired(run.paired_path) if run.paired_path else None
    d = decide(
        measured,
        case,
        inputs,
        env_data=env.data,
        paired=paired,
        baseline_version=base.version if base else None,
        baseline_digest=base.digest if base else None,
        noise=run.noise,
        measured_cpu=samples.measured_cpu_ms or None,
        gpu=calibration.gpu_in_use(env.data, run.peak_device_bytes),
    )
    point = None
    if case.scenario == "server":
        from tasks.store.writes import server_point_record

        point = server_point_record(raw_samples, run.latency_ms)
    if point is not None and case.gate_percentile is not None and d.baseline_run_ids:
        # the per-query tail against the baseline run's at the same rate: what the paired gate's back-to-back
        # batches (service time) do not measure
        gate_per_query(d, case, point, reads.server_point(db_url, d.baseline_run_ids[0]), run.noise)
    parsed_tables = json.loads(Path(parsed.parsed_path).read_text())
    paired_steps = [t for blk in paired.a + paired.b for t in blk] if paired else None
    busy = bool((run.noise or {}).get("busy"))
    table, figures = _process_gates(case, run)
    check = _agreement_check(case, raw_samples)
    outcomes, gx_results = _validate(
        d,
        case,
        measured,
        paired_steps,
        paired is not None and is_process_gate(paired),
        parsed_tables,
        Path(work_dir) / "gx",
        docs_title,
        query_latencies=point["latency_ms"] if point else None,
        gated=_gated_rows(case, figures, busy=busy),
        agreement=check,
    )
    evidence = d.evidence
    evidence["gx"] = {k: {"success": o.success, "failures": len(o.failures)} for k, o in outcomes.items()}
    evidence["gx_failures"] = [f.model_dump(mode="json") for o in outcomes.values() for f in o.failures]
    quality = [
        f
        for k in ("step_times", "query_latencies", "paired_steps", "verdict")
        if k in outcomes
        for f in outcomes[k].failures
        if not f.is_limit
    ]
    if quality:
        raise MeasurementRejected(
            "step-time samples failed data-quality expectations: " + "; ".join(f.text for f in quality)
        )
    verdict, reason = d.verdict, d.reason
    regressed_on: list[str] = []  # the figures beside step time that regressed, each with its figure, in words
    if check is not None:  # the case bounds its outputs' agreement with the fp32 eager model: judged beside step time
        evidence["agreement"] = {**check.model_dump(mode="json"), "failed": check.failed}
        if check.failed:
            regressed_on.append(check.text())
        if check.failed and verdict == Verdict.REGRESSION:  # the step time's regression leads; this is said beside
            reason = evidence["reason"] = f"{reason}; also a regression on {check.text()}" if reason else check.text()
        elif check.failed:
            verdict = Verdict.REGRESSION
            reason = evidence["reason"] = f"{check.text()}; step time: {reason}" if reason else check.text()
        elif check.unchecked:
            reason = evidence["reason"] = f"{reason}; {check.text()}" if reason else check.text()
    for key, m in table.items():  # a figure the case gates and that no process measured is said, not passed
        if getattr(case, m.tolerance_field) is not None and key not in figures and paired is not None:
            said = _unmeasured(m, run)
            evidence[key] = {"metric": m.metric, "measured": False, "gated": True, "reason": said}
            reason = evidence["reason"] = f"{reason}; {said}" if reason else said
    for key, gate in figures.items():  # per-process figures of both versions: recorded and judged, at the case's
        # tolerance (the gate waited for it: gated) or at the figure's default where the gate stopped
        field, words, wall = (m := METRICS[key]).tolerance_field, m.words, m.wall
        gated = getattr(case, field) is not None
        evidence[key] = {**gate.model_dump(mode="json"), "gated": gated}
        if gate.verdict in (Verdict.PASS, Verdict.IMPROVEMENT) or (not gated and gate.verdict != Verdict.REGRESSION):
            continue  # an undecided figure at its default is in the evidence, not the reason: nothing waited for it
        if gate.verdict == Verdict.REGRESSION and not (busy and wall):
            said = f"regression on {words}: {gate.reason}"
            regressed_on.append(f"{words}: {gate.figure_text()}")
            if verdict == Verdict.REGRESSION:  # the step time's regression leads; this one is said beside it
                reason = evidence["reason"] = f"{reason}; also a {said}" if reason else said
            else:
                reason = evidence["reason"] = f"{said}; step time: {reason}" if reason else said
            verdict = Verdict.REGRESSION
        else:
            said = f"{words} undecided: {gate.reason}" + (
                " (not judged: the host was busy, and it is wall time)" if busy and wall else ""
            )
            reason = evidence["reason"] = f"{reason}; {said}" if reason else said
    if regressed_on:  # what the headline of every front door names (VerdictStory.regressed_on)
        evidence["regressed_on"] = regressed_on
        evidence["step_verdict"] = str(d.verdict)
    earlier = None
    if verdict == Verdict.NO_BASELINE and paired is None and version is not None:
        earlier = reads.measured_version(db_url, case.model, case.name, version)
        if note := uncompared_note(case.model, version, earlier, paired_wanted=paired_wanted):
            reason = f"{note}; {reason}" if reason else note
            evidence["uncompared"] = {
                "reason": note,
                **({"version": earlier[0], "run_id": earlier[1]} if earlier else {"version": None, "run_id": None}),
            }
    if run.findings:  # on the steps themselves: recompiles, batch shapes, partial batches, the warm-up
        evidence["measurement_findings"] = run.findings
    refused = soundness.baseline_refusals(run.findings, run.noise) if verdict in AUTO_ACCEPT_VERDICTS else []
    if earlier is not None:  # a later version compared with nothing never becomes the baseline unexamined
        refused.append(
            f"version {earlier[0]} of this case was measured (run {earlier[1]}) and this run was not compared with it"
        )
    if refused:
        evidence["baseline_refused"] = refused
        note = f"not made the case's baseline automatically, although {verdict} would make it one: " + "; ".join(
            refused
        )
        if earlier is None:  # else the advice is the paired gate, never to accept the run that was not compared
            note += " (if it is sound after all: perfwatch baseline accept RUN_ID --by NAME --reason WHY)"
        reason = evidence["reason"] = f"{reason}; {note}" if reason else note
    if reason:
        evidence.setdefault("reason", reason)
    if d.baseline_run_ids:  # op-level attribution against the newest baseline run, whatever the verdict
        # on wall time, each run's op shares scaled to its own measured median: what perfwatch compare gives
        evidence["attribution"] = attribute_against_run(
            reads.run_ops(db_url, d.baseline_run_ids[0]),
            d.baseline_run_ids[0],
            parsed_tables,
            case.profiled_steps,
            run.median_step_ms,
        )
    return CompareRecord(
        verdict=Verdict(verdict),
        method=d.method,
        baseline_run_ids=d.baseline_run_ids,
        ratio=d.ratio,
        ci_low=d.ci_low,
        ci_high=d.ci_high,
        median_limit_ms=d.limit,
        gx_results_path=str(gx_results),
        gx_success=all(o.success for o in outcomes.values()),
        evidence=evidence,
        reason=reason,
        metric=evidence.get("metric", "wall"),
        baseline_refused=refused,
    )
