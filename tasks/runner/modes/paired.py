"""Paired mode: the A/B release gate, both versions in this ONE process, timed in ABBA block pairs.

Loads the baseline version (A, ``baseline_model_path``) and the candidate (B, ``model_path``), each with its
own ``tf.data`` iterator, optimizer and compiled step (which of the two is set up first: the spec's
``first_built``, else drawn); records what each one's build and cold step added to the resident set; runs each
one's cold step and ``warmup_steps`` warm-up steps, then ``blocks`` block pairs
of ``block_steps`` steps each. The order is drawn per quadruple (``random.SystemRandom``): pairs 2k and 2k+1
are AB, BA or BA, AB with probability 1/2 each (recorded in ``BlockPair.order``), so process-level drift
cancels within a pair and a linear trend over each quadruple, every batch of an even number of pairs holds as
many AB as BA, and no rhythm of the host's load can line up with the order. Every timed step also records the
process's CPU time and run-queue wait (``tasks.runner.counters``). Cost: ``2 * blocks * block_steps`` timed
steps plus two warm-ups.

With ``round_pairs`` set the pairs are measured in rounds and the *parent* decides after each one whether to
go on (a sequential gate, ``tasks.runner.driver``): the runner writes each round as a round event
(``tasks.runner.protocol.RoundEvent``) and reads one line on stdin, ``more`` or ``stop``; it stops by itself
once ``blocks`` pairs are done (``final``, nothing is read) and treats a closed stdin as ``stop``. With
``cue_start`` it waits once, after the warm-ups, for the parent's cue before its first pair (a gate of several
processes starts them in batches, ``tasks.runner.interleave.Relay``). The
decision never lives here: the runner only measures. The host's load is recorded over every round and all
pairs (``tasks.runner.measure.HostLoad``).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator
from typing import Any, Literal

from tasks.runner import counters, measure, progress
from tasks.runner.protocol import (
    MORE,
    STOP,
    BlockPair,
    InputFeed,
    PairedResult,
    RoundEvent,
    RoundSummary,
    StopReason,
    event_line,
)
from tasks.runner.spec import RunnerError, RunnerSpec

Order = Literal["AB", "BA"]
_QUADRUPLES: tuple[tuple[Order, Order], ...] = (("AB", "BA"), ("BA", "AB"))


def pair_orders(rng: random.Random) -> Iterator[Order]:
    """The order of each pair, endless: per quadruple AB, BA or BA, AB, drawn from ``rng`` with probability
    1/2 each, so pairs 2k and 2k+1 always hold one AB and one BA."""
    while True:
        yield from rng.choice(_QUADRUPLES)


def run(spec: RunnerSpec) -> PairedResult:
    """Run the gate of ``spec`` (module docstring); times in ms, our timer.

    Raises:
        RunnerError: a model failed to load or its step failed (names the model), or an unknown command on
            stdin after a round.
    """
    t_start = time.perf_counter()
    assert spec.baseline_model_path is not None  # checked by RunnerSpec
    # Which version is loaded, traced and warmed up first (``first_built``) is not fixed: in A/A gates on the
    # 2-core dev machine the version set up first ran about 1% faster (issue 12), and a fixed order would put that
    # bias on every gate in one direction, unseen by A/A calibration. The parent of a gate of several processes
    # alternates it from a random start (RunnerSpec.first_built), so the bias cancels across the processes and the
    # order's one-time costs on each version's cold step and memory can be taken out (tasks.analysis.metric_gates);
    # a process without it draws it.
    first_built: Literal["A", "B"] = (
        spec.first_built if spec.first_built is not None else random.SystemRandom().choice(("A", "B"))
    )
    paths = {"A": spec.baseline_model_path, "B": spec.model_path}
    setup_order = sorted("AB", key=lambda w: w != first_built)
    # each version's resident memory: what its load and build, then its cold step, added to the process's
    # resident set (tasks.runner.measure.rss_bytes; the version set up first also adds the process's one-time costs)
    built: dict[str, measure.Step] = {}
    grown: dict[str, int | None] = {}
    for who in setup_order:
        r0 = measure.rss_bytes()
        built[who] = measure.build_step(spec, paths[who])
        r1 = measure.rss_bytes()
        grown[who] = r1 - r0 if r0 is not None and r1 is not None else None
    cold: dict[str, float] = {}
    for who in setup_order:
        r0 = measure.rss_bytes()
        cold[who] = measure.cold_step(built[who], paths[who], spec.case_mode)
        r1, g = measure.rss_bytes(), grown[who]
        grown[who] = g + r1 - r0 if g is not None and r0 is not None and r1 is not None else None
    fed: dict[str, dict[str, Any]] = {who: {} for who in setup_order}  # per version, phase -> protocol.Fed

    def end_phase(who: str, phase: str) -> None:
        if (rec := built[who].take_fed()) is not None:
            fed[who][phase] = rec

    for who in setup_order:
        end_phase(who, "cold")
    steps = {who: counters.Recorder(built[who]) for who in setup_order}
    warm, warm_cpu, warm_wait = {}, {}, {}
    for who in setup_order:
        warm[who] = progress.run_steps(f"warm-up {who}", steps[who], spec.warmup_steps)
        warm_cpu[who], warm_wait[who] = steps[who].take()
        end_phase(who, "warmup")
    # a gate's processes started in batches: this one waits for its turn (tasks.runner.interleave.Relay)
    go = progress.wait_for_cue(0, 1, "paired") if spec.cue_start else True
    step_a, step_b = built["A"], built["B"]
    orders = pair_orders(random.SystemRandom())
    blocks: list[BlockPair] = []
    rounds: list[RoundSummary] = []
    per_round = spec.round_pairs or spec.blocks
    stopped_by: StopReason = "budget" if go else "parent"
    t_pairs = time.perf_counter()
    on_gpu = measure.device_peak_bytes() is not None
    peaks: dict[str, int | None] = {"A": None, "B": None}  # each version's own GPU allocator peak over its blocks
    phase = measure.HostLoad().start()
    while go and len(blocks) < spec.blocks:
        load = measure.HostLoad().start()
        first = len(blocks)
        for i in range(first, min(spec.blocks, first + per_round)):
            order = next(orders)
            times: dict[str, list[float]] = {}
            cpu: dict[str, list[float]] = {}
            wait: dict[str, list[float]] = {}
            for who in order:
                if on_gpu:
                    measure.reset_device_peak()
                times[who] = [steps[who]() for _ in range(spec.block_steps)]
                cpu[who], wait[who] = steps[who].take()
                if on_gpu:
                    peaks[who] = max(peaks[who] or 0, measure.device_peak_bytes() or 0)
            blocks.append(
                BlockPair(
                    pair=i,
                    order=order,
                    a_ms=times["A"],
                    b_ms=times["B"],
                    a_cpu_ms=cpu["A"],
                    b_cpu_ms=cpu["B"],
                    a_wait_ms=wait["A"],
                    b_wait_ms=wait["B"],
                )
            )
        final = len(blocks) >= spec.blocks
        info = RoundSummary(
            round=len(rounds),
            pairs=len(blocks),
            host_load=load.result(),
            wall_s=time.perf_counter() - t_pairs,
            final=final,
        )
        rounds.append(info)
        if spec.round_pairs is None:
            continue
        sys.stdout.write(event_line(RoundEvent(**info.model_dump(), blocks=blocks[first:])))
        sys.stdout.flush()
        if final:
            break
        command = sys.stdin.readline().strip()
        if command in ("", STOP):  # "" is a closed stdin: the parent is gone
            stopped_by = "parent" if command else "stdin closed"
            break
        if command != MORE:
            raise RunnerError(
                f"paired mode: unknown command {command!r} on stdin after round {info.round}; "
                f"expected {MORE!r} or {STOP!r}"
            )
    for who in setup_order:
        end_phase(who, "paired")
    # how far each side's run-queue wait can be trusted (unavailable, threads that ended mid-step), as the
    # single-model modes record it: the candidate's (B) as "wait", the baseline's as "a_wait"
    case = measure.case_record(spec, step_b)
    case["threads"] = {**case["threads"], "wait": steps["B"].wait_record(), "a_wait": steps["A"].wait_record()}
    return PairedResult(
        **case,
        fed=fed["B"],
        a_fed=fed["A"],
        a_inputs={name: InputFeed(**feed) for name, feed in step_a.inputs.items()},
        batch_size=spec.batch_size,
        seed=spec.seed,
        deterministic=spec.deterministic,
        baseline_model_path=spec.baseline_model_path,
        candidate_model_path=spec.model_path,
        cold_step_ms=cold["B"],
        a_cold_step_ms=cold["A"],
        b_cold_step_ms=cold["B"],
        a_model_rss_bytes=grown["A"],
        b_model_rss_bytes=grown["B"],
        first_built=first_built,
        a_warmup_step_times_ms=warm["A"],
        b_warmup_step_times_ms=warm["B"],
        a_warmup_cpu_ms=warm_cpu["A"],
        b_warmup_cpu_ms=warm_cpu["B"],
        a_warmup_wait_ms=warm_wait["A"],
        b_warmup_wait_ms=warm_wait["B"],
        block_steps=spec.block_steps,
        blocks=blocks,
        max_blocks=spec.blocks,
        round_pairs=spec.round_pairs,
        rounds=rounds,
        stopped_by=stopped_by,
        host_load=phase.result(),
        pairs_wall_s=time.perf_counter() - t_pairs,
        timed_steps=2 * len(blocks) * spec.block_steps,
        peak_rss_bytes=measure.peak_rss_bytes(),
        peak_device_bytes=peaks["B"],
        a_peak_device_bytes=peaks["A"],
        b_peak_device_bytes=peaks["B"],
        wall_s=time.perf_counter() - t_start,
    )
