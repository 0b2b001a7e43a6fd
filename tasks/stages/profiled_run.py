"""profiled run: a fresh runner process times measured steps, then profiles a short window.

The measured steps run with the profiler OFF (their step times are the numbers compared
against the baseline); the profiled window runs after them with step markers so xprof can
split step time into compute, input and other. The ratio of the two medians is the profiler's
overhead, reported with the run.

Paired gates (release triggers, cases with ``paired=True``, nightly runs of a new version:
``RunContext.pairs_with``) then run the paired (A/B) measurement in another fresh process: the
baseline's model version (A) and the candidate (B) loaded together, each warmed up, measured in ABBA
blocks (``tasks.runner``'s ``paired`` mode). The gate is **sequential**: the runner measures
``Case.paired_round_pairs`` pairs per round and, after each, this stage asks
``tasks.analysis.sequential`` whether the interval of the metric that will decide the verdict decides (that
metric chosen at every look by the verdict's own rule, ``tasks.analysis.verdict.deciding_metric``, over the
pairs and the rounds' host load so far); the runner stops at the first decisive look or at the budget
(``Case.paired_blocks`` pairs), so a x2 slowdown costs a few dozen pairs and an
undecidable gate the whole budget. The design (confidence, tolerance, budget, round, the process
offset calibrated from the store's quiet A/A gates) is fixed before the first pair and written with
the runner's result (``gate``), so baseline-compare recomputes the very interval that stopped the
gate. A budget under ``sequential.MIN_LOOK_PAIRS`` (32) pairs is one fixed look at the end.

By default (``Case.paired_processes`` > 1) the process is the gate's unit: the stage runs up to
``paired_processes`` fresh paired processes of ``Case.paired_process_pairs`` pairs each (no rounds inside a
process) and looks across them after each from the third on (:func:`_process_gate`,
``tasks.analysis.processes``); the processes are kept in one ``PairedGate`` file. The rounds described above
are the one-process design (``paired_processes=1``). A cross-environment gate (``Case.baseline_runner``,
``Case.baseline_env``) runs each side in its own processes instead, one of each per process pair, the pair's
blocks interleaved (:func:`_environment_gate`, an ``EnvironmentGate`` file).

Noise: the runner records the host's load during the measured steps and the paired phase
(``tasks.runner.measure.HostLoad``); this stage judges it, with the gate's own pair noise against
the case's calibrated noise, by ``tasks.analysis.verdict.judge_noise`` and records the result in
``ProfiledRun.noise``, the one judgement of it, including which metric decides (wall time on a quiet host;
on a busy one the pairs' per-step CPU time when it is fit, ``calibration.choose_metric``): baseline-compare
applies it (the verdict becomes ``inconclusive``, "host busy: ...", when a bound is passed and no metric
decided).

Cost actually spent: ``2 x pairs x paired_block_steps`` timed steps of the paired gate, plus a second
model load, cold step and warm-up per version (stated in the verdict's ``evidence["paired"]["spent"]``).
"""

from __future__ import annotations

import logging
import math
import os
import random
import shlex
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tasks.analysis import (
    calibration,
    environment,
    metric_gates,
    percentiles,
    processes,
    sequential,
    serving,
    soundness,
)
from tasks.analysis.findings import Finding
from tasks.analysis.verdict import (
    PairedBlocks,
    environment_metric,
    judge_noise,
    look_decides,
    process_look_decides,
    process_look_on,
)
from tasks.records import Case, ProfiledRun, PulledModel, WarmupRecord
from tasks.runner import RunnerError, RunnerProcess, RunnerSpec, interleave, loadgen
from tasks.runner.driver import as_runner
from tasks.runner.protocol import (
    BlockPair,
    EnvironmentGate,
    EnvironmentProcess,
    PairedGate,
    PairedGateSamples,
    PairedResult,
    PairedSamples,
    ProfileResult,
    RoundEvent,
    load_json,
    read_result,
    read_view,
    write_result,
)
from tasks.stages.warmup import case_options, limit_after_warmup, xla_cache_dir
from tasks.store import reads

log = logging.getLogger(__name__)

#: a cross-environment gate's side: A the baseline environment, B the candidate
Side = Literal["A", "B"]

#: processes of a same-environment gate started together (their start-ups side by side, :func:`_relay_batch`);
#: each measures alone. On the 2-core dev VM a process's start-up is 3.9 of its 4.9 s (bench/processes.py).
#: Three first (the first look needs three) was measured and not kept: with gates that often run 5-6 processes,
#: three start-ups on two cores cost more than they saved (bench/relay.py --designs processes,threes,one)
PROCESSES_AT_ONCE = 2


def start_batches(max_processes: int, gpu: bool | None) -> list[list[int]]:
    """The batches a same-environment gate starts its processes in (:func:`_relay_batch`), in order:
    :data:`PROCESSES_AT_ONCE` at a time; where a GPU may carry the steps (``gpu``: ``calibration.gpu_in_use``, True
    or None = unsure) one at a time: TensorFlow maps nearly all of a visible GPU's memory into the first process
    that uses it (its default, no memory growth; TensorFlow's GPU guide, "Limiting GPU memory growth"), so a
    second process warming up beside a waiting one could not allocate.

    Raises:
        ValueError: ``max_processes`` < 1.
    """
    if max_processes < 1:
        raise ValueError(f"max_processes = {max_processes}: a gate runs at least one process")
    at_once = 1 if gpu is not False else PROCESSES_AT_ONCE
    return [list(range(k, min(k + at_once, max_processes))) for k in range(0, max_processes, at_once)]


@dataclass(frozen=True)
class GateSetup:
    """What a paired gate takes from the store before its first pair: the process-level offset
    (``calibration.paired_offset_for_case``) and the case's calibrated gate noise
    (``calibration.calibrated_noise``). ``GateSetup()`` is a fresh store's: default offset, no noise."""

    offset: calibration.Offset = field(
        default_factory=lambda: calibration.Offset(sd=calibration.DEFAULT_PAIRED_OFFSET_SD, source="default")
    )
    noise: calibration.NoiseCalibration = field(
        default_factory=lambda: calibration.NoiseCalibration(sd_pair=None, n_gates=0)
    )


def gate_setup(db_url: str, case: Case, comparability_key: str) -> GateSetup:
    """Read the store once (``tasks.store.reads.gather_compare_inputs``) for the gate's offset and noise."""
    inputs = reads.gather_compare_inputs(
        db_url,
        case.model,
        case.name,
        comparability_key,
        lookback=case.lookback,
        calibration_window=calibration.CALIBRATION_WINDOW,
    )
    return GateSetup(
        offset=calibration.paired_offset_for_case(case, inputs.aa_gates),
        noise=calibration.calibrated_noise(inputs.paired_gates),
    )


def gate_design(case: Case, offset_sd: float) -> sequential.Design | None:
    """The sequential design of ``case``'s gate, or ``None`` for a budget under ``sequential.MIN_LOOK_PAIRS``
    pairs (one fixed look at the end, ``stats.compare_paired``)."""
    if case.paired_blocks < sequential.MIN_LOOK_PAIRS:
        return None
    return sequential.Design(
        confidence=case.confidence,
        tolerance=case.tolerance,
        max_pairs=case.paired_blocks,
        round_pairs=case.paired_round_pairs,
        offset_sd=offset_sd,
    )


def tail_plan(case: Case) -> dict[str, Any] | None:
    """What a tail gate (``Case.gate_percentile``) needs, stated before the first pair: ``percentile``,
    ``per_version`` (the steps of each version the budget times, ``paired_blocks x paired_block_steps``),
    ``min_samples`` (``tail.min_arm_samples`` at the case's confidence), ``enough`` and ``text``; None without
    a tail gate. Kept in the gate record (``gate["tail"]``)."""
    p = case.gate_percentile
    if p is None:
        return None
    from tasks.analysis.tail import min_arm_samples

    need = min_arm_samples(p, case.confidence)
    have = case.paired_blocks * case.paired_block_steps
    label = f"p{p:g}"
    text = (
        f"the {label} gate needs {need} steps per version for a two-sided {case.confidence:.0%} interval of the "
        f"{label} ratio; this gate's budget times {have}"
        + ("" if have >= need else f": its {label} verdict will be inconclusive (too few samples for {label})")
    )
    measures = "per-step time, back to back"
    if case.scenario == "server":  # ABBA blocks time batches back to back: no arrivals, no queueing
        measures = "per-batch service time, back to back (no arrivals, no queueing): not the per-query latency"
        text += (
            f"; on a server case the paired gate's {label} is the batches' service time, not what a query waits: "
            f"the compare stage also tests the {label} per query (arrival to result) against the baseline run's "
            "at the same rate (two runs, independent samples)"
        )
    return {
        "percentile": p,
        "per_version": have,
        "min_samples": need,
        "enough": have >= need,
        "measures": measures,
        "text": text,
    }


def _check_blocks(blocks: list[BlockPair], case: Case, first: int = 0) -> None:
    for i, b in enumerate(blocks, start=first):
        for who, times in (("A (baseline)", b.a_ms), ("B (candidate)", b.b_ms)):
            if len(times) < case.paired_block_steps:
                raise RunnerError(
                    f"paired block {i} of {who} has {len(times)} steps, {case.paired_block_steps} were asked"
                )
            bad = [(j, t) for j, t in enumerate(times) if not t > 0]
            if bad:
                raise RunnerError(
                    f"paired block {i} of {who}: non-positive or NaN step time(s) at (index, ms) {bad[:5]}"
                )


def _log_ratio(block: BlockPair) -> float:
    return math.log(statistics.median(block.b_ms) / statistics.median(block.a_ms))


def _cpu_log_ratio(block: BlockPair) -> float | None:
    """The block pair's log ratio of median per-step CPU time (B over A); None when either is absent or not > 0."""
    a, b = block.a_cpu_ms, block.b_cpu_ms
    if not a or not b or min(a) <= 0 or min(b) <= 0:
        return None
    return math.log(statistics.median(b) / statistics.median(a))


def paired_run(
    pulled: PulledModel,
    baseline: PulledModel,
    case: Case,
    warmup: WarmupRecord,
    work_dir: str | Path,
    runner: RunnerProcess | str,
    timeout_s: float | None = None,
    *,
    setup: GateSetup | None = None,
    gpu: bool | None = None,
) -> tuple[str, float]:
    """Run the paired (A/B) gate in ``<work_dir>/paired``: A = ``baseline``, B = ``pulled`` (module docstring).

    ``runner``: how the runner is started (``RunnerProcess``; an interpreter path: its ``-m tasks.runner``).
    Each version gets the warm-up stage's step count (``warmup.warmup_steps``) after its cold step.
    The runner's result gets a ``gate`` record: ``design`` (``sequential.Design`` fields, None for a
    fixed gate), ``look_pairs`` (pairs at each look), ``stopping`` (per look, the metric whose look decided
    whether to go on, by the verdict's own rule, ``verdict.look_decides`` over the pairs and the rounds' host load
    so far, with ``setup.noise`` and ``gpu``, ``calibration.gpu_in_use`` of the profiled run: ``wall``, ``cpu``
    on a busy host whose CPU time is fit, ``none`` where no metric was fit (the gate goes on), ``tail`` for a
    tail gate), ``host_load`` (``calibration.combined_load`` of the rounds: what the last look judged, and the
    verdict judges), ``offset`` and ``calibrated_noise`` (``setup``).

    Returns:
        (path of the runner's JSON result with ``blocks`` and ``gate``, the process's wall time in s).

    Raises:
        RunnerError: the runner failed or timed out, a fixed gate returned fewer blocks than asked, a
            block has fewer steps than asked or a non-positive/NaN step time (names the block and version).
    """
    setup = setup or GateSetup()
    if case.cross_environment:
        return _environment_gate(pulled, baseline, case, warmup, work_dir, runner, timeout_s, setup=setup, gpu=gpu)
    if case.paired_processes > 1:
        return _process_gate(pulled, baseline, case, warmup, work_dir, runner, timeout_s, setup=setup, gpu=gpu)
    design = gate_design(case, setup.offset.sd)
    out = Path(work_dir) / "paired"
    spec = RunnerSpec(
        mode="paired",
        model_path=pulled.local_path,
        baseline_model_path=baseline.local_path,
        out_dir=str(out),
        **case_options(case),
        warmup_steps=warmup.warmup_steps,
        blocks=case.paired_blocks,
        block_steps=case.paired_block_steps,
        round_pairs=case.paired_round_pairs if design else None,
        xla_cache_dir=xla_cache_dir(case, work_dir),
    )
    limit, how = limit_after_warmup("paired-run", warmup, 2 * warmup.warmup_steps + case.paired_timed_steps, timeout_s)
    tail = tail_plan(case)
    if tail is not None and (not tail["enough"] or case.scenario == "server"):
        log.warning("paired gate of %s %s: %s", case.model, case.name, tail["text"])
    looks: list[int] = []
    stopping: list[str] = []
    loads: list[dict[str, Any]] = []  # each round's host load: a look judges the rounds so far
    if design is None:
        r = as_runner(runner).run(spec, PairedResult, limit, limit_note=how)
        if len(r.blocks) < case.paired_blocks:
            raise RunnerError(f"paired runner returned {len(r.blocks)} block pairs, {case.paired_blocks} were asked")
        _check_blocks(r.blocks, case)
        looks.append(len(r.blocks))
    else:
        d: list[float] = []
        d_cpu: list[float | None] = []

        def on_round(info: RoundEvent) -> bool:
            _check_blocks(info.blocks, case, first=len(d))
            d.extend(_log_ratio(b) for b in info.blocks)
            d_cpu.extend(_cpu_log_ratio(b) for b in info.blocks)
            loads.append(info.host_load)
            if len(d) < sequential.MIN_LOOK_PAIRS and not info.final:
                return True
            looks.append(len(d))
            if case.gate_percentile is not None:  # a tail gate is one fixed look at the end: the whole budget
                stopping.append("tail")
                return True
            cpu = None if None in d_cpu else [x for x in d_cpu if x is not None]
            decided, metric = look_decides(
                d,
                cpu,
                looks,
                design,
                case=case,
                host_load=calibration.combined_load(loads),
                calibrated=setup.noise,
                gpu=gpu,
            )
            stopping.append(metric)
            return not decided

        r = as_runner(runner).run(spec, PairedResult, limit, limit_note=how, on_round=on_round)
        if len(r.blocks) != len(d):
            raise RunnerError(f"paired runner's result holds {len(r.blocks)} block pairs but its rounds held {len(d)}")
    gate = {
        **({"tail": tail} if tail is not None else {}),
        "design": design.model_dump(mode="json") if design else None,
        "look_pairs": looks,
        "stopping": stopping,
        **({"host_load": calibration.combined_load(loads)} if loads else {}),
        "offset": setup.offset.model_dump(mode="json"),
        "calibrated_noise": setup.noise.model_dump(mode="json"),
    }
    path = out / "result.json"
    write_result(path, r.model_copy(update={"gate": gate}))
    return str(path), r.wall_s


def process_design(case: Case) -> processes.ProcessDesign:
    """The design of ``case``'s gate of several processes (``Case.paired_processes`` > 1): its confidence and
    tolerance, ``paired_processes`` processes at most, ``Case.paired_process_pairs`` pairs in each."""
    return processes.ProcessDesign(
        confidence=case.confidence,
        tolerance=case.tolerance,
        max_processes=case.paired_processes,
        pairs_per_process=case.paired_process_pairs,
    )


def combine_host_loads(loads: list[dict[str, Any]]) -> dict[str, Any]:
    """The host load over several processes' pair phases (``tasks.runner.measure.HostLoad`` dicts), as
    ``calibration.combined_load`` reads consecutive windows (the one rule a gate's looks and its verdict judge),
    with ``per_process_other_cpu_share`` listing each process's share. A load without ``wall_s`` (psutil absent:
    ``{"error"}``) is returned as it is.

    Raises:
        ValueError: no loads.
    """
    if not loads:
        raise ValueError("combine_host_loads: no host loads")
    combined = calibration.combined_load(loads)
    if combined is None or "wall_s" not in combined:
        return next((x for x in loads if "wall_s" not in x or "cpus" not in x), combined or loads[0])
    return {**combined, "per_process_other_cpu_share": [x.get("other_cpu_share") for x in loads]}


def _process_gate(
    pulled: PulledModel,
    baseline: PulledModel,
    case: Case,
    warmup: WarmupRecord,
    work_dir: str | Path,
    runner: RunnerProcess | str,
    timeout_s: float | None,
    *,
    setup: GateSetup,
    gpu: bool | None,
) -> tuple[str, float]:
    """The paired gate with the process as its unit (``tasks.analysis.processes``): up to
    ``Case.paired_processes`` fresh runner processes in ``<work_dir>/paired/p<k>``, each timing
    ``Case.paired_process_pairs`` ABBA pairs of both versions (which is set up first, and each quadruple's order,
    drawn afresh in each process). They start in batches (:func:`start_batches`: :data:`PROCESSES_AT_ONCE` at a
    time; one at a time where a GPU may carry the steps) and measure one after another (:func:`_relay_batch`):
    start-ups side by side, never beside a measurement. After each process from the
    ``processes.MIN_LOOK_PROCESSES``-th on the gate looks across the processes (``verdict.process_look_decides``:
    wall time, or on a busy host the CPU time, by the newest process's host load) and stops when that look
    decides and so has every per-process figure the case gates (cold step, memory: repeated intervals on the same
    looks, ``tasks.analysis.metric_gates``). A tail gate (``Case.gate_percentile``) runs every process. Writes a
    ``PairedGate`` to ``<work_dir>/paired/result.json`` with the gate record: ``design`` (``ProcessDesign`` fields),
    ``look_processes``, ``stopping`` (per look, the metric judged), ``waited_for`` (per look whose step time
    decided, the gated per-process figures still undecided: ``metric_gates.undecided_gated``; the gate goes on for
    them), ``offset``, ``calibrated_noise`` and ``start_batches`` (the size of each batch planned).

    Returns (that path, the gate's wall time in s, our timer: its processes overlap).

    Raises:
        RunnerError: a process failed or timed out, returned fewer pairs than asked, or a block with fewer steps
            than asked or a non-positive/NaN step time (names the process, block and version).
    """
    design = process_design(case)
    out = Path(work_dir) / "paired"
    per = design.pairs_per_process
    batches = start_batches(design.max_processes, gpu)
    # a process lives through its own warm-ups and pairs and those of its batch-mates
    steps = 2 * warmup.warmup_steps + 2 * max(map(len, batches)) * per * case.paired_block_steps
    limit, how = limit_after_warmup("paired-run", warmup, steps, timeout_s)
    tail = tail_plan(case)
    if tail is not None and (not tail["enough"] or case.scenario == "server"):
        log.warning("paired gate of %s %s: %s", case.model, case.name, tail["text"])
    results: list[PairedResult] = []
    wall: list[processes.Unit] = []
    cpu: list[processes.Unit | None] = []
    looks: list[int] = []
    stopping: list[str] = []
    pairs_wall: list[float] = []  # every pair log ratio so far, process after process (the deciding-metric rule's)
    pairs_cpu: list[float | None] = []
    waited_for: dict[str, list[str]] = {}  # look (processes) -> the gated figures still undecided when step time was

    # which version each process sets up first: alternating from a random start, so any two processes hold both
    # orders and the order's one-time costs can be taken out of the cold-step and memory gates (metric_gates)
    first: Literal["A", "B"] = random.SystemRandom().choice(("A", "B"))
    other: Literal["A", "B"] = "B" if first == "A" else "A"

    def spec_of(k: int) -> RunnerSpec:
        return RunnerSpec(
            mode="paired",
            model_path=pulled.local_path,
            baseline_model_path=baseline.local_path,
            out_dir=str(out / f"p{k}"),
            **case_options(case),
            warmup_steps=warmup.warmup_steps,
            blocks=per,
            block_steps=case.paired_block_steps,
            round_pairs=None,
            process=k,
            processes=design.max_processes,
            first_built=first if k % 2 == 0 else other,
            xla_cache_dir=xla_cache_dir(case, work_dir),
            cue_start=True,
        )

    def take(k: int, r: PairedResult) -> bool:
        """Keep process ``k``'s result and look across the processes so far: True when the gate has decided."""
        if len(r.blocks) < per:
            raise RunnerError(f"paired process {k} returned {len(r.blocks)} block pairs, {per} were asked")
        try:
            _check_blocks(r.blocks, case)
        except RunnerError as e:
            raise RunnerError(f"paired process {k}: {e}") from e
        results.append(r)
        d_wall = [_log_ratio(b) for b in r.blocks]
        d_cpu = [_cpu_log_ratio(b) for b in r.blocks]
        wall.append(processes.unit_from_pairs(d_wall, f"process {k}"))
        cpu.append(None if None in d_cpu else processes.unit_from_pairs([x for x in d_cpu if x is not None]))
        pairs_wall.extend(d_wall)
        pairs_cpu.extend(d_cpu)
        if k + 1 < processes.MIN_LOOK_PROCESSES:
            return False
        looks.append(k + 1)
        if case.gate_percentile is not None:  # a tail gate is one look at the end: every process
            stopping.append("tail")
            return False
        decided, metric = process_look_decides(
            wall,
            cpu,
            looks,
            design,
            d_wall=pairs_wall,
            d_cpu=None if None in pairs_cpu else [x for x in pairs_cpu if x is not None],
            case=case,
            host_load=combine_host_loads([p.host_load for p in results]),
            calibrated=setup.noise,
            gpu=gpu,
        )
        stopping.append(metric)
        # a figure the case gates (cold step, memory) and is undecided keeps the gate going
        waiting = _waiting(metric_gates.process_gates, results, case, looks, design, metric) if decided else []
        if waiting:
            waited_for[str(k + 1)] = waiting
        log.info(
            "paired gate of %s %s: look after process %d of at most %d on %s: %s",
            case.model,
            case.name,
            k + 1,
            design.max_processes,
            _metric_words(metric),
            _look_words(decided, waiting),
        )
        return decided and not waiting

    t_gate = time.perf_counter()
    decided = False
    for batch in batches:
        decided = _relay_batch(batch, spec_of, take, runner, limit, how)
        if decided:
            break
    total_wall = time.perf_counter() - t_gate  # processes of a batch overlap: their wall times do not add up
    gate = {
        **({"tail": tail} if tail is not None else {}),
        "design": design.model_dump(mode="json"),
        "look_processes": looks,
        "stopping": stopping,
        "waited_for": waited_for,
        "offset": setup.offset.model_dump(mode="json"),
        "calibrated_noise": setup.noise.model_dump(mode="json"),
        "start_batches": [len(b) for b in batches],
    }
    record = PairedGate(
        processes=results,
        gate=gate,
        block_steps=case.paired_block_steps,
        host_load=combine_host_loads([r.host_load for r in results]),
        pairs_wall_s=sum(r.pairs_wall_s for r in results),
        wall_s=total_wall,
        timed_steps=sum(r.timed_steps for r in results),
    )
    path = out / "result.json"
    write_result(path, record)
    return str(path), total_wall


def _relay_batch(
    batch: list[int],
    spec_of: Callable[[int], RunnerSpec],
    take: Callable[[int, PairedResult], bool],
    runner: RunnerProcess | str,
    limit: float,
    how: str | None,
) -> bool:
    """Processes ``batch`` of a same-environment gate, started together (``tasks.runner.interleave.Relay``): once
    all are warmed up (at their start cue), each times its pairs in turn, the next only after the one before has
    exited and ``take(k, result)`` has looked; when a look decides, the processes still waiting are told ``stop``
    and their out dirs removed (they measured nothing). Returns whether a look decided.

    Raises:
        RunnerError: a process failed or timed out (its own error), or ``take`` refused its result.
    """
    relay = interleave.Relay(timeout_s=limit)
    got: dict[int, PairedResult] = {}
    errors: dict[int, Exception] = {}

    def run_one(k: int) -> None:
        try:
            got[k] = as_runner(runner).run(
                spec_of(k), PairedResult, limit, limit_note=how, on_cue=lambda e: relay.cue(k, e)
            )
        except Exception as e:  # raised in the caller below; a turn that never came is a stuck gate
            errors[k] = RunnerError(f"paired-run: {e}") if isinstance(e, TimeoutError) else e
        finally:
            relay.ended(k)

    threads = {k: threading.Thread(target=run_one, args=(k,), name=f"process-{k}") for k in batch}
    for t in threads.values():
        t.start()
    decided = False
    taken: list[int] = []
    try:
        try:
            relay.wait_ready(batch)
        except TimeoutError as e:
            raise RunnerError(f"paired-run: {e}") from e
        for k in batch:
            relay.grant(k)
            threads[k].join()
            if k in errors:
                raise errors[k]
            taken.append(k)
            if take(k, got[k]):
                decided = True
                break
    finally:
        relay.stop()  # those still waiting measure nothing
        for t in threads.values():
            t.join()
    for k in batch:
        if k not in taken:
            shutil.rmtree(spec_of(k).out_dir, ignore_errors=True)
    return decided


def baseline_runner(case: Case, runner: RunnerProcess | str) -> RunnerProcess:
    """Side A's runner of a cross-environment gate: ``Case.baseline_runner`` (split like a shell line) or else
    ``runner``'s command, in ``runner``'s environment (default this process's) with ``Case.baseline_env`` set over
    it."""
    b = as_runner(runner)
    command = shlex.split(case.baseline_runner) if case.baseline_runner else b.command
    return RunnerProcess(command, env={**(os.environ if b.env is None else b.env), **(case.baseline_env or {})})


def _side_settings(case: Case, a: RunnerProcess, b: RunnerProcess) -> dict[str, tuple[str | None, str | None]]:
    """The settings a cross-environment gate was given, A's value and B's: ``runner`` and each ``env KEY`` of
    ``Case.baseline_env`` (B's value: its runner's environment's, None where unset)."""
    b_env = os.environ if b.env is None else b.env
    out: dict[str, tuple[str | None, str | None]] = {"runner": (a.name, b.name)}
    out.update({f"env {k}": (v, b_env.get(k)) for k, v in sorted((case.baseline_env or {}).items())})
    return out


def _waiting(
    gates: Callable[..., dict[str, metric_gates.ProcessMetricGate]],
    units: Any,
    case: Case,
    looks: list[int],
    design: processes.ProcessDesign,
    metric: str,
) -> list[str]:
    """The figures the gate still waits for after this look (``metric_gates.undecided_gated``: one whose case sets
    a tolerance until it decides, one at its default while it is undecided and looks past that default):
    ``gates`` (``metric_gates.process_gates`` or ``environment_gates``) over the ``units`` so far, at the gate's
    looks. A look that was not on wall time (``cpu``, ``none``: a busy host) does not wait for a wall-time figure,
    which the verdict would not judge."""
    tolerances = case.model_dump()
    figures = gates(units, tolerances, confidence=case.confidence, looks=looks, max_processes=design.max_processes)
    return metric_gates.undecided_gated(figures, tolerances, busy=metric != "wall")


def _metric_words(metric: str) -> str:
    """The metric a look judged on, in a log line: ``wall time``, ``CPU time``, or for ``none`` (the host too busy
    for either: ``verdict.stop_metric``) ``no time (the host too busy to judge)``."""
    return {"wall": "wall time", "cpu": "CPU time"}.get(metric, "no time (the host too busy to judge)")


def _look_words(decided: bool, waiting: list[str]) -> str:
    """A gate's look in a log line: ``decided``, ``going on``, or ``step time decided, going on for cold_step``
    (the gated figures it waits for: ``metric_gates.undecided_gated``)."""
    if waiting:
        return f"step time decided, going on for {', '.join(waiting)}"
    return "decided" if decided else "going on"


def _environment_gate(
    pulled: PulledModel,
    baseline: PulledModel,
    case: Case,
    warmup: WarmupRecord,
    work_dir: str | Path,
    runner: RunnerProcess | str,
    timeout_s: float | None,
    *,
    setup: GateSetup,
    gpu: bool | None,
) -> tuple[str, float]:
    """A cross-environment gate (``Case.cross_environment``): side A is ``baseline`` in the baseline environment
    (:func:`baseline_runner`), side B ``pulled`` in ``runner``'s (a cross-environment run pulls the same version
    for both, ``tasks.stages.pipeline.pull_paired_baseline``). Each side's fingerprint is taken first (the
    env-fingerprint stage's probe, ``take_fingerprint_in``, in each side's runner). Then up to
    ``Case.paired_processes`` process pairs, one after another in ``<work_dir>/paired/p<k><side>``: a fresh
    profile-mode process of each side (no profiler window), timing ``paired_process_pairs x paired_block_steps``
    steps after the warm-up. Single-stream (every train case), both processes of a pair start together and time
    their steps in blocks of ``paired_block_steps`` on cue, one block at a time in a randomized order
    (:func:`_interleaved_pair`; ``gate.block_orders``), so both sides meet the host's same slow drift and their
    start-ups overlap; other scenarios, and any case a GPU may carry (``gpu`` not False: two processes cannot
    both hold its memory, :func:`start_batches`), run the two processes one after the other, the side that runs
    first drawn afresh per pair. A pair's unit is ``processes.unit_from_sides`` of its two processes' steps; after
    each pair from the ``processes.MIN_LOOK_PROCESSES``-th on the gate looks across the pairs
    (``verdict.environment_metric``, the verdict's rule, then ``verdict.process_look_on``, as a same-environment
    gate across processes) and stops when that look decides. Writes an ``EnvironmentGate`` to
    ``<work_dir>/paired/result.json``: every process's result, ``environments`` (each side's runner, settings and
    fingerprint; ``differs``: what differs, in records, and ``text``: in words,
    ``environment.sides_differences``) and the gate record (``unit``: ``process-pair``, ``orders``: the side run
    first per pair, and as :func:`_process_gate`'s).

    Returns (that path, the gate's wall time in s, our timer).

    Raises:
        RunnerError: a probe or process failed or timed out, or a process returned fewer steps than asked or a
            non-positive/NaN step time (names the pair and the side).
    """
    from tasks.stages.fingerprint import take_fingerprint_in

    design = process_design(case)
    out = Path(work_dir) / "paired"
    runners = {"A": baseline_runner(case, runner), "B": as_runner(runner)}
    models = {"A": baseline.local_path, "B": pulled.local_path}
    prints = {side: take_fingerprint_in(r) for side, r in runners.items()}
    settings = _side_settings(case, runners["A"], runners["B"])
    rows, text = environment.sides_differences(
        settings, environment.diff_fingerprints(prints["A"].data, prints["B"].data)
    )
    log.info("cross-environment gate of %s %s: %s", case.model, case.name, text)
    steps = case.paired_process_pairs * case.paired_block_steps
    # each side's process then lives through both sides' blocks; not where a GPU may carry the steps: the two
    # processes would hold the GPU together, and the first maps nearly all its memory (as start_batches)
    interleaved = case.scenario == "single-stream" and gpu is False
    lived = warmup.warmup_steps + (2 if interleaved else 1) * steps
    limit, how = limit_after_warmup("paired-run", warmup, lived, timeout_s)
    draw = random.SystemRandom()
    kept: list[EnvironmentProcess] = []
    wall: list[processes.Unit] = []
    cpu: list[processes.Unit | None] = []
    looks: list[int] = []
    stopping: list[str] = []
    orders: list[str] = []
    block_orders: list[str] = []
    waited_for: dict[str, list[str]] = {}  # look (pairs) -> the gated figures still undecided when step time was
    side_pairs: list[tuple[ProfileResult, ProfileResult]] = []  # (A's, B's) result per pair, as run
    elapsed = 0.0  # the gate's wall time: interleaved processes overlap, so their wall times do not add up
    for k in range(design.max_processes):

        def spec_of(side: Side, k: int = k) -> RunnerSpec:
            return RunnerSpec(
                mode="profile",
                model_path=models[side],
                out_dir=str(out / f"p{k}{side}"),
                **case_options(case),
                warmup_steps=warmup.warmup_steps,
                measured_steps=steps,
                profiled_steps=0,
                process=k,
                processes=design.max_processes,
                xla_cache_dir=xla_cache_dir(case, work_dir),
                cue_block_steps=case.paired_block_steps if interleaved else None,
            )

        if interleaved:
            order = interleave.block_order(case.paired_process_pairs, draw)
            block_orders.append(order)
            t0 = time.perf_counter()
            got = _interleaved_pair(runners, spec_of, order, limit, how)
            elapsed += time.perf_counter() - t0
            sides: tuple[Side, Side] = ("A", "B") if order[0] == "A" else ("B", "A")
        else:
            sides = ("A", "B") if draw.random() < 0.5 else ("B", "A")
            got = {side: runners[side].run(spec_of(side), ProfileResult, limit, limit_note=how) for side in sides}
            elapsed += sum(r.wall_s for r in got.values())
        orders.append("".join(sides))
        for side in sides:
            r = got[side]
            bad = [(i, t) for i, t in enumerate(r.measured_step_times_ms) if not t > 0]
            if len(r.measured_step_times_ms) < steps or bad:
                raise RunnerError(
                    f"cross-environment pair {k}, side {side}: {len(r.measured_step_times_ms)} measured steps of "
                    f"{steps} asked" + (f", non-positive or NaN at (index, ms) {bad[:5]}" if bad else "")
                )
            kept.append(EnvironmentProcess(pair=k, side=side, result=r))
        a, b = got["A"], got["B"]
        side_pairs.append((a, b))
        wall.append(processes.unit_from_sides(a.measured_step_times_ms, b.measured_step_times_ms, f"pair {k}"))
        has_cpu = all(x.measured_cpu_ms and min(x.measured_cpu_ms) > 0 for x in (a, b))
        cpu.append(processes.unit_from_sides(a.measured_cpu_ms, b.measured_cpu_ms) if has_cpu else None)
        if k + 1 < processes.MIN_LOOK_PROCESSES:
            continue
        looks.append(k + 1)
        # the verdict's rule over the process pairs so far: each pair's log ratio (its unit) is its one comparison,
        # the host load is every process's so far
        load = combine_host_loads([x.result.host_load for x in kept])
        noise = environment_metric(case, load, wall, cpu, gpu=gpu)
        decided, metric = process_look_on(noise, wall, cpu, looks, design)
        stopping.append(metric)
        # a figure the case gates (cold step, memory) and is undecided keeps the gate going
        waiting = _waiting(metric_gates.environment_gates, side_pairs, case, looks, design, metric) if decided else []
        if waiting:
            waited_for[str(k + 1)] = waiting
        log.info(
            "cross-environment gate of %s %s: look after pair %d of at most %d on %s: %s",
            case.model,
            case.name,
            k + 1,
            design.max_processes,
            _metric_words(metric),
            _look_words(decided, waiting),
        )
        if decided and not waiting:
            break
    environments = {
        side: {
            "runner": list(runners[side].command),
            "env": dict(case.baseline_env or {}) if side == "A" else {},
            "fingerprint_id": prints[side].fingerprint_id,
            "comparability_key": prints[side].comparability_key,
        }
        for side in ("A", "B")
    }
    gate = {
        "design": design.model_dump(mode="json"),
        "unit": "process-pair",
        "orders": orders,
        "interleaved": interleaved,
        "block_orders": block_orders,
        "look_processes": looks,
        "stopping": stopping,
        "waited_for": waited_for,
        "offset": setup.offset.model_dump(mode="json"),
        "calibrated_noise": setup.noise.model_dump(mode="json"),
        "environments": text,
    }
    results = [p.result for p in kept]
    record = EnvironmentGate(
        processes=kept,
        environments={**environments, "differs": rows, "text": text},
        gate=gate,
        block_steps=case.paired_block_steps,
        host_load=combine_host_loads([r.host_load for r in results]),
        pairs_wall_s=sum(
            (max if interleaved else sum)(  # interleaved: both sides' measured phases span the pair's blocks
                [p.result.phases_s.get("measured_steps", 0.0) for p in kept if p.pair == k]
            )
            for k in range(len(orders))
        ),
        wall_s=elapsed,
        timed_steps=sum(len(r.measured_step_times_ms) for r in results),
    )
    path = out / "result.json"
    write_result(path, record)
    return str(path), record.wall_s


def _interleaved_pair(
    runners: dict[str, RunnerProcess],
    spec_of: Callable[[Side], RunnerSpec],
    order: str,
    limit: float,
    how: str | None,
) -> dict[str, ProfileResult]:
    """One process pair of a cross-environment gate, interleaved: both sides' processes started together (their
    start-up and warm-up side by side), then their measured blocks timed one at a time in ``order``
    (``tasks.runner.interleave.Turns``), each side's runner in a thread of its own. Returns each side's result.

    Raises:
        RunnerError: a side's process failed or timed out (the first failure; the other side is told ``stop``).
    """
    turns = interleave.Turns(order, timeout_s=limit)
    errors: dict[str, BaseException] = {}
    got: dict[str, ProfileResult] = {}

    def run_side(side: Side) -> None:
        try:
            got[side] = runners[side].run(
                spec_of(side), ProfileResult, limit, limit_note=how, on_cue=lambda e: turns.cue(side, e)
            )
        except Exception as e:  # raised in the caller below; a turn that never came is the other side stuck
            errors[side] = RunnerError(f"paired-run: cross-environment {e}") if isinstance(e, TimeoutError) else e
            turns.fail(side)

    sides: tuple[Side, Side] = ("A", "B")
    threads = [threading.Thread(target=run_side, args=(side,), name=f"side-{side}") for side in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        first = turns.failed or next(iter(errors))
        raise errors.get(first) or next(iter(errors.values()))
    return got


def _blocks(steps: list[float], n: int, size: int) -> list[list[float]]:
    return [steps[i * size : (i + 1) * size] for i in range(n)]


def _read_environment_gate(path: str | Path) -> PairedBlocks:
    """:func:`read_paired` of a cross-environment gate (an ``EnvironmentGate``): each pair's two processes'
    steps cut into blocks of ``block_steps`` (A's blocks beside B's, as many as the shorter side has), each
    block with its pair's index (``PairedBlocks.process``); ``layout["processes"]`` counts the pairs,
    ``orders`` says which side ran first in each pair."""
    g = read_result(path, EnvironmentGate)
    size = g.block_steps
    a: list[list[float]] = []
    b: list[list[float]] = []
    a_cpu: list[list[float]] = []
    b_cpu: list[list[float]] = []
    index: list[int] = []
    pairs = sorted({p.pair for p in g.processes})
    for k in pairs:
        sides = {p.side: p.result for p in g.processes if p.pair == k}
        ra, rb = sides["A"], sides["B"]
        n = min(len(ra.measured_step_times_ms), len(rb.measured_step_times_ms)) // size
        a += _blocks(ra.measured_step_times_ms, n, size)
        b += _blocks(rb.measured_step_times_ms, n, size)
        a_cpu += _blocks(ra.measured_cpu_ms, n, size)
        b_cpu += _blocks(rb.measured_cpu_ms, n, size)
        index += [k] * n
    if not a:
        raise ValueError(f"{path}: cross-environment gate holds no measured steps")
    cpu = all(len(x) == size and min(x) > 0 for x in a_cpu + b_cpu)
    layout = {
        "blocks": len(a),
        "block_steps": size,
        "timed_steps": g.timed_steps,
        "wall_s": g.wall_s,
        "pairs_wall_s": g.pairs_wall_s,
        "orders": "".join(g.gate.get("orders") or []),
        "stopped_by": "parent",
        "rounds": None,
        "processes": len(pairs),
    }
    return PairedBlocks(
        a=a,
        b=b,
        layout=layout,
        gate=g.gate,
        host_load=g.host_load,
        a_cpu=a_cpu if cpu else None,
        b_cpu=b_cpu if cpu else None,
        process=index,
    )


def _tflite_file(out: Path, lite: dict[str, Any] | None) -> str | None:
    """The absolute path of a tflite run's converted model: its record's ``tflite_path`` (relative to the runner's
    out dir ``out``; an absolute one, from an older runner, is kept) resolved against ``out``; None without one."""
    if not lite or not lite.get("tflite_path"):
        return None
    return str(out / str(lite["tflite_path"]))


def read_paired(path: str | Path) -> PairedBlocks:
    """The A (baseline) and B (candidate) per-step ms of each block pair from a paired runner result, its
    layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``, ``pairs_wall_s``, ``orders``,
    ``stopped_by``, ``rounds``) and ``gate`` record (None in a result written without one), and the per-step
    process CPU time of each block (``a_cpu``/``b_cpu``; None unless every block pair recorded it).

    Raises:
        ValueError: the file holds no ``blocks`` (names the path).
        tasks.runner.protocol.ProtocolMismatch: the file is of another protocol version.
    """
    mode = load_json(path).get("mode")
    if mode == "paired-gate":
        return _read_gate(path)
    if mode == "environment-gate":
        return _read_environment_gate(path)
    r = read_view(path, PairedSamples)
    blocks = r.blocks
    if not blocks:
        raise ValueError(f"{path}: paired result holds no 'blocks' (expected the runner's paired-mode output)")
    layout = {
        "blocks": len(blocks),
        "block_steps": r.block_steps,
        "timed_steps": r.timed_steps,
        "wall_s": r.wall_s,
        "pairs_wall_s": r.pairs_wall_s,
        "orders": "".join(b.order for b in blocks),
        "stopped_by": r.stopped_by,
        "rounds": len(r.rounds or []) or None,
    }
    cpu = all(b.a_cpu_ms and b.b_cpu_ms for b in blocks)
    return PairedBlocks(
        a=[b.a_ms for b in blocks],
        b=[b.b_ms for b in blocks],
        layout=layout,
        gate=r.gate,
        host_load=r.host_load,
        a_cpu=[b.a_cpu_ms for b in blocks] if cpu else None,
        b_cpu=[b.b_cpu_ms for b in blocks] if cpu else None,
    )


def _read_gate(path: str | Path) -> PairedBlocks:
    """:func:`read_paired` of a gate of several processes (a ``PairedGate``): the blocks of every process in
    order, each with its process index (``PairedBlocks.process``); ``layout["processes"]`` counts them and
    ``stopped_by`` is the last process's."""
    g = read_view(path, PairedGateSamples)
    blocks = [b for p in g.processes for b in p.blocks]
    if not blocks:
        raise ValueError(f"{path}: paired gate holds no 'blocks' in its processes")
    index = [k for k, p in enumerate(g.processes) for _ in p.blocks]
    layout = {
        "blocks": len(blocks),
        "block_steps": g.block_steps,
        "timed_steps": g.timed_steps,
        "wall_s": g.wall_s,
        "pairs_wall_s": g.pairs_wall_s,
        "orders": "".join(b.order for b in blocks),
        "stopped_by": g.processes[-1].stopped_by,
        "rounds": None,
        "processes": len(g.processes),
    }
    cpu = all(b.a_cpu_ms and b.b_cpu_ms for b in blocks)
    return PairedBlocks(
        a=[b.a_ms for b in blocks],
        b=[b.b_ms for b in blocks],
        layout=layout,
        gate=g.gate,
        host_load=g.host_load,
        a_cpu=[b.a_cpu_ms for b in blocks] if cpu else None,
        b_cpu=[b.b_cpu_ms for b in blocks] if cpu else None,
        process=index,
    )


def gate_fed(path: str | Path) -> PairedSamples:
    """What a paired gate's file says each version was fed (``fed``, ``a_fed``): its one process's, or the first
    process's of a gate of several (every process feeds the same inputs)."""
    mode = load_json(path).get("mode")
    if mode == "paired-gate":
        return read_view(path, PairedGateSamples).processes[0]
    if mode == "environment-gate":  # each side's first process: B's feed as the candidate's, A's as the baseline's
        g = read_result(path, EnvironmentGate)
        first = {p.side: p.result for p in reversed(g.processes)}
        return PairedSamples(
            schema_version=g.schema_version,
            fed={"paired": first["B"].fed["measured"]} if "measured" in first["B"].fed else {},
            a_fed={"paired": first["A"].fed["measured"]} if "measured" in first["A"].fed else {},
        )
    return read_view(path, PairedSamples)


def profiled_run(
    pulled: PulledModel,
    case: Case,
    warmup: WarmupRecord,
    work_dir: str | Path,
    runner: RunnerProcess | str,
    timeout_s: float | None = None,
    *,
    baseline: PulledModel | None = None,
    setup: GateSetup | None = None,
    env_data: dict[str, Any] | None = None,
) -> ProfiledRun:
    """Run the measured and profiled steps in ``<work_dir>/run`` and return where the files are.

    With ``baseline`` (the baseline's model version, pulled), also run :func:`paired_run` after
    them and record its result file in ``paired_path``. ``setup``: the gate's offset and calibrated
    noise from the store (:func:`gate_setup`; default: a fresh store's). ``env_data``: the fingerprint
    (``EnvRecord.data``), which with the run's device memory says whether a GPU may carry the steps
    (``calibration.gpu_in_use``: on a busy host only a CPU case may decide on CPU time).

    Returns:
        ProfiledRun: median step time (ms) and throughput (examples/s) of the measured steps,
        profiler overhead ratio, peak host RSS (bytes) and device memory (bytes, GPU only),
        ``noise``: the paired gate's (else the measured steps') noise against the bounds, and ``findings`` on
        the steps themselves (``soundness.measurement_findings`` of what each phase was fed and which steps
        compiled, and of the warm-up's steadiness). The throughput is of the examples fed per measured step
        (``batch_size`` unless the case allows partial batches).

    Raises:
        RunnerError: the runner failed, or returned fewer measured steps than asked, or a
            non-positive step time (never stored as a measurement), or wrote no xplane (a tflite run has
            no profiler window: its result says why, ``profile_absent_reason``, and its overhead ratio is None).
    """
    setup = setup or GateSetup()
    out = Path(work_dir) / "run"
    scenario, serve_s, serve_steps = scenario_options(case, warmup)
    steps = measured_steps(case)
    spec = RunnerSpec(
        mode="profile",
        model_path=pulled.local_path,
        out_dir=str(out),
        **case_options(case),
        **scenario,
        warmup_steps=warmup.warmup_steps,
        measured_steps=steps,
        profiled_steps=case.profiled_steps,
        xla_cache_dir=xla_cache_dir(case, work_dir),
    )
    limit, how = limit_after_warmup(
        "profiled-run", warmup, warmup.warmup_steps + serve_steps + case.profiled_steps, timeout_s
    )
    if timeout_s is None and serve_s:
        limit, how = limit + serve_s, f"{how} + {serve_s:.0f} s of server arrivals at the lowest rate planned"
    r = as_runner(runner).run(spec, ProfileResult, limit, limit_note=how)
    measured = r.measured_step_times_ms
    if case.scenario != "server" and len(measured) < steps:  # server: batches as the queries came
        raise RunnerError(f"runner returned {len(measured)} measured steps, {steps} were asked")
    if case.scenario == "server" and not measured:
        raise RunnerError("runner served no batch in the server scenario")
    bad = [(i, t) for i, t in enumerate(measured) if not t > 0]
    if bad:
        raise RunnerError(f"non-positive or NaN measured step time(s) at (index, ms) {bad[:5]}")
    xplanes = sorted(Path(r.profile_dir).glob("plugins/profile/*/*.xplane.pb"))
    if not xplanes and not r.profile_absent_reason:  # a tflite run has no profiler window, and says so
        raise RunnerError(f"the profiler wrote no *.xplane.pb under {r.profile_dir}/plugins/profile/*/")
    median = statistics.median(measured)
    prof_median = statistics.median(r.profiled_step_times_ms) if r.profiled_step_times_ms else None
    paired_path = paired_wall = None
    paired: PairedBlocks | None = None
    gpu = calibration.gpu_in_use(env_data, r.peak_device_bytes)
    if baseline is not None:
        paired_path, paired_wall = paired_run(
            pulled, baseline, case, warmup, work_dir, runner, timeout_s, setup=setup, gpu=gpu
        )
        paired = read_paired(paired_path)
    noise = judge_noise(case, r.host_load, paired, offset=setup.offset, calibrated=setup.noise, gpu=gpu)
    fed = {k: v.model_dump(mode="json") for k, v in r.fed.items()}
    if paired_path is not None:  # the gate's pairs are timed steps too: the candidate's (B) and baseline's (A)
        gate = gate_fed(paired_path)
        for who, rec in (("B", gate.fed.get("paired")), ("A", gate.a_fed.get("paired"))):
            if rec is not None:
                fed[f"paired {who}"] = rec.model_dump(mode="json")
    findings = soundness.measurement_findings(
        fed,
        batch_size=case.batch_size,
        xla=case.xla,
        timed_ms={"measured": measured, "profiled": r.profiled_step_times_ms},
        steady=warmup.steady,
        warmup_steps=warmup.warmup_steps,
        final_cv=warmup.final_cv,
        cv_max=case.warmup_cv_max,
    )
    latency = latency_record(case, r, measured)
    if served := (latency or {}).get("serving"):  # the scenario's figures in words, for the task's log
        log.info("%s", serving.summary_line(served, case.batch_size))
        findings += [Finding(**f) for f in served.get("findings") or []]  # an unstable QPS search
    return ProfiledRun(
        work_dir=str(work_dir),
        samples_path=str(out / "result.json"),
        profile_dir=r.profile_dir,
        measured_steps=len(measured),
        median_step_ms=median,
        # the run's one throughput (serving.run_throughput_eps): a server's queries/s achieved, offline's examples
        # over the run, else examples/s at the median step (partial batches, where allowed, count as fed)
        throughput_eps=serving.run_throughput_eps(
            served, soundness.examples_per_step(fed, "measured", case.batch_size) / (median / 1000.0)
        ),
        profile_overhead_ratio=None if prof_median is None else prof_median / median,
        peak_rss_bytes=r.peak_rss_bytes,
        peak_device_bytes=r.peak_device_bytes,
        wall_s=r.wall_s,
        paired_path=paired_path,
        baseline_model=baseline,
        paired_wall_s=paired_wall,
        tflite_path=_tflite_file(out, r.tflite),
        noise=noise.model_dump(mode="json"),
        latency_ms=latency,
        findings=[f.model_dump(mode="json") for f in findings],
    )


#: most points of a QPS search's bisection (``tasks.runner.loadgen.QpsSearch``): from the first rate, doubling or
#: halving to bracket the bound, then bisecting to 5%; its confirmation adds ``loadgen.CONFIRM_POINTS`` more
SEARCH_MAX_POINTS = 8
#: a server point's queries are ``queries x 2**k`` for k up to this (``Case.server_min_duration_s`` at a high rate)
POINT_QUERY_DOUBLINGS = 10


def measured_steps(case: Case) -> int:
    """The measured steps the runner is asked for: ``Case.measured_steps``, but for a single-stream infer/tflite
    case with ``latency_bound_ms`` at least the batches a two-sided 95% interval of its ``latency_percentile``
    needs (``serving.queries_per_point``: 299 for p99), as a server point issues them: with fewer the bound can be
    neither met nor missed (not estimable). Offline and train cases, and a case without a bound, keep theirs."""
    if case.mode != "train" and case.scenario == "single-stream" and case.latency_bound_ms is not None:
        return serving.queries_per_point(case.measured_steps, case.latency_percentile)
    return case.measured_steps


def server_queries(case: Case) -> int:
    """Queries a server point of ``case`` issues at least: ``serving.queries_per_point`` (``measured_steps``, at
    least what the percentile's interval needs: 299 for p99) and, for a case with ``gate_percentile``, the
    per-query samples the compare stage's per-query tail test needs per run (``tail.min_arm_samples`` at the
    case's confidence: 528 for p99 at 99%), so that the test can decide."""
    n = serving.queries_per_point(case.measured_steps, case.latency_percentile)
    if case.gate_percentile is not None:
        from tasks.analysis.tail import min_arm_samples

        n = max(n, min_arm_samples(case.gate_percentile, case.confidence))
    return n


def scenario_options(case: Case, warmup: WarmupRecord) -> tuple[dict[str, Any], float, int]:
    """The ``RunnerSpec`` fields of an infer/tflite case's scenario (``Case.scenario``; ``tasks.runner.loadgen``),
    the seconds its server arrivals may take at most (0: not a server case) and its timed steps at most.

    A server point issues :func:`server_queries` queries; its met/missed rank is the upper bound's
    (``serving.upper_rank``); a search starts at ``target_qps``, else at half the capacity the warm-up's median
    step time gives (``serving.capacity_qps``), and tries at most :data:`SEARCH_MAX_POINTS` rates, the lowest
    ``start / 2**(points - 1)``, and ``loadgen.CONFIRM_POINTS`` re-measures of them: the arrivals' worst case
    sizes the time limit. A point lasts at least ``Case.server_min_duration_s``: at a fast rate it issues
    ``queries x 2**k`` queries (k at most :data:`POINT_QUERY_DOUBLINGS`), with each count's upper-bound rank given
    to the runner (``upper_ranks``)."""
    if case.mode == "train":
        return {}, 0.0, case.measured_steps
    opts: dict[str, Any] = {"scenario": case.scenario, "latency_bound_ms": case.latency_bound_ms}
    if case.scenario != "server":
        return opts, 0.0, measured_steps(case)
    n = server_queries(case)
    step_ms = statistics.median(warmup.step_times_ms) if warmup.step_times_ms else warmup.cold_step_ms
    start = case.target_qps or 0.5 * serving.capacity_qps(case.batch_size, step_ms)
    points = SEARCH_MAX_POINTS if case.search_qps else 1
    grid = [n * 2**k for k in range(POINT_QUERY_DOUBLINGS + 1)]  # a point's query count: one of these
    opts |= {
        "target_qps": start,
        "queries": n,
        "search": case.search_qps,
        "search_max_points": points,
        "upper_rank": serving.upper_rank(n, case.latency_percentile),
        "min_point_s": case.server_min_duration_s,
        "upper_ranks": {m: serving.upper_rank(m, case.latency_percentile) for m in grid},
    }
    # the slowest plan: every point below the last, each at least its minimum duration (twice it, rounded up),
    # and the confirmation's re-measures at the lowest of them
    lowest = start / 2 ** (points - 1)
    confirm = loadgen.CONFIRM_POINTS if case.search_qps else 0
    worst_s = sum(max(n / (start / 2**i), 2 * case.server_min_duration_s) for i in range(points))
    worst_s += confirm * max(n / lowest, 2 * case.server_min_duration_s)
    return opts, worst_s, grid[-1] * (points + confirm)


def latency_record(case: Case, r: ProfileResult, measured: list[float]) -> dict[str, Any] | None:
    """An infer/tflite run's ``latency_ms``: the per-batch summary with each percentile's interval and n
    (``percentiles.with_intervals``), and ``serving``: the scenario's figures and checks (``serving.summarize``:
    the server's per-query latencies with their intervals, achieved QPS, the search's points, the compute
    dtypes the runner read from the model's layers). None for a train run."""
    if r.latency_ms is None:
        return None
    out = percentiles.with_intervals(r.latency_ms.model_dump(), measured)
    if r.serving is not None:
        out["serving"] = serving.summarize(
            r.serving.model_dump(mode="json"),
            out,
            measured,
            batch_size=case.batch_size,
            percentile=case.latency_percentile,
            bound_ms=case.latency_bound_ms,
            precision=case.precision,
            compute_dtypes=(r.execution or {}).get("compute_dtypes"),
        )
    return out
