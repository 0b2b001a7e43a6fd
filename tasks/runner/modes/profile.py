"""Profile mode: warm-up steps, measured steps with the profiler OFF, then the profiled window.

The cold step and ``warmup_steps`` steps (untimed for results) come first; the ``measured_steps`` steps are
the numbers compared against the baseline, sampled by ``tasks.runner.telemetry`` every ``telemetry_interval_ms``
(host CPU and RSS, per-GPU NVML series where NVML answers) with the host's load recorded around them
(``tasks.runner.measure.HostLoad``); then ``profiled_steps`` steps run under ``tf.profiler.experimental`` with
every step wrapped in ``Trace(case_mode, step_num=i, _r=1)`` (without ``_r=1`` xprof sees no step markers).
``infer`` and ``tflite`` add ``latency_ms`` (per-batch percentiles and throughput) and ``serving``: how the
measured queries reached the model (``spec.scenario``, ``tasks.runner.loadgen``): ``single-stream`` times the
measured steps one after another (as before scenarios existed); ``offline`` runs them back to back, each infer
batch issued before the previous one's outputs are fetched (``Step.pipelined``; a tflite invocation cannot be
issued early), its step times the intervals between results; ``server`` serves ``spec.queries`` Poisson
arrivals per rate (:func:`serve_points`, a QPS search with ``spec.search``), its step times each batch's service
time, with every query's latency from arrival to result in its point. With ``spec.cue_block_steps`` set
(single-stream) the measured steps are timed in blocks, each on the parent's cue (:func:`cued_steps`: a
cross-environment gate interleaves two processes' blocks). ``tflite`` has no profiler
window (the TF profiler cannot see the TFLite interpreter) and says so in ``profile_absent_reason``. Each
warm-up and measured step also records the process's CPU time and run-queue wait (``tasks.runner.counters``),
and every step what it was fed and whether it compiled, per phase (``fed``: ``cold``, ``warmup``, ``measured``,
``profiled``; ``tasks.runner.measure.FedLog``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from tasks.runner import counters, loadgen, measure, progress
from tasks.runner import tflite as tflite_mod
from tasks.runner.protocol import LatencySummary, ProfileResult, ServerPoint, Serving
from tasks.runner.spec import RunnerSpec
from tasks.runner.telemetry import Sampler


def run(spec: RunnerSpec, import_s: float) -> ProfileResult:
    """Measure and profile the model of ``spec`` (times in ms, our timer); ``import_s``: s the TF import took.

    Raises:
        RunnerError: the model failed to load or a step failed (names the model).
    """
    import tensorflow as tf

    started = measure.start(spec, import_s)
    step, phases = started.step, started.phases
    recorded = counters.Recorder(step)  # CPU time and run-queue wait around each warm-up and measured step
    t0 = time.perf_counter()
    warm = progress.run_steps("warm-up", recorded, spec.warmup_steps)
    phases["warmup_steps"] = time.perf_counter() - t0
    started.end_phase("warmup")
    warm_cpu, warm_wait = recorded.take()
    measure.reset_device_peak()  # the peak of the measured steps, not of the cold step's autotuning
    load = measure.HostLoad().start()
    sampler = Sampler(spec.telemetry_interval_ms).start()  # device telemetry (tasks.runner.telemetry)
    counted = sampler.count(recorded)
    t0 = time.perf_counter()
    points: list[ServerPoint] = []
    if spec.scenario == "server":
        points = serve_points(spec, counted)
        measured = [t for p in points for t in p.service_ms]  # per batch, the step's own time
    elif spec.scenario == "offline" and step.pipelined is not None:
        progress.emit("measure", n=0, of=spec.measured_steps, text=f"offline: {spec.measured_steps} batches")
        measured = step.pipelined(spec.measured_steps)  # per batch, the interval between results
        sampler.steps += len(measured)
    elif spec.cue_block_steps is not None:  # single-stream, each block on the parent's cue
        measured = cued_steps(counted, spec.measured_steps, spec.cue_block_steps, load)
    else:  # single-stream; offline where the step cannot be pipelined (tflite): batches back to back
        measured = progress.run_steps("measure", counted, spec.measured_steps)
    phases["measured_steps"] = time.perf_counter() - t0
    started.end_phase("measured")
    measured_cpu, measured_wait = recorded.take()
    telemetry = sampler.stop()
    host_load = load.result()
    fed_examples = started.fed["measured"]["examples"] if "measured" in started.fed else None
    latency = serving = None
    if spec.case_mode in ("infer", "tflite"):
        # server: the real examples are the queries served (one example each, LoadGen's sample); a batch of
        # fewer queries computes batch_size examples, the padding is no example served
        real = sum(len(p.latency_ms) for p in points) if spec.scenario == "server" else fed_examples
        latency = LatencySummary(**measure.latency_summary(measured, spec.batch_size, real))
        serving = Serving(
            scenario=spec.scenario,
            wall_s=phases["measured_steps"],
            examples=fed_examples if fed_examples is not None else spec.batch_size * len(measured),
            points=points,
            search=spec.search,
            latency_bound_ms=spec.latency_bound_ms,
            upper_rank=spec.upper_rank,
        )
    logdir = Path(spec.out_dir) / "profile"
    logdir.mkdir(parents=True, exist_ok=True)
    profiled: list[float] = []
    absent = None
    t_prof = time.perf_counter()
    if spec.case_mode == "tflite":  # the TF profiler cannot see the TFLite interpreter: no window
        absent = tflite_mod.PROFILE_ABSENT_REASON
    else:
        progress.emit(
            "profile",
            n=0,
            of=spec.profiled_steps,
            text=f"{spec.profiled_steps} steps under the TF profiler, then writing the XSpace",
        )
        tf.profiler.experimental.start(str(logdir))
        try:
            for i in range(spec.profiled_steps):
                with tf.profiler.experimental.Trace(spec.case_mode, step_num=i, _r=1):
                    profiled.append(step())
        finally:
            tf.profiler.experimental.stop()
        started.end_phase("profiled")
    phases["profiled_window"] = time.perf_counter() - t_prof  # profiler start, steps, XSpace written
    peak_rss, peak_device = measure.peak_rss_bytes(), measure.device_peak_bytes()  # before the agreement check
    agreement = None
    if step.agree is not None:  # outputs vs the fp32 eager model (tasks.runner.agreement), after the timings
        t0 = time.perf_counter()
        agreement = step.agree()
        phases["agreement"] = time.perf_counter() - t0
    return ProfileResult(
        **started.record(wait=recorded.wait_record()),
        phases_s=phases,
        telemetry=telemetry,
        host_load=host_load,
        latency_ms=latency,
        serving=serving,
        profile_absent_reason=absent,
        warmup_step_times_ms=warm,
        measured_step_times_ms=measured,
        measured_cpu_ms=measured_cpu,
        measured_wait_ms=measured_wait,
        warmup_cpu_ms=warm_cpu,
        warmup_wait_ms=warm_wait,
        profiled_step_times_ms=profiled,
        profile_dir=str(logdir),
        profiled_window_s=phases["profiled_window"],
        peak_rss_bytes=peak_rss,
        peak_device_bytes=peak_device,
        agreement=agreement,
        wall_s=time.perf_counter() - started.t_start,
    )


def cued_steps(
    step: Callable[[], float], n: int, block_steps: int, load: measure.HostLoad | None = None
) -> list[float]:
    """``n`` step times (ms, our timer) in blocks of ``block_steps`` (the last may be shorter), each block timed
    on the parent's cue (``RunnerSpec.cue_block_steps``): before it a ``CueEvent`` on stdout, then one line read
    on stdin; after the last block one more cue (``block == of``), answered before this returns. Fewer than
    ``n`` when the parent says ``stop`` (or closes stdin) before a block. ``load`` (the measured phase's host
    load) is paused while this waits, so the other process's blocks are not counted as load on these.

    Raises:
        RunnerError: a line on stdin that is neither ``more`` nor ``stop`` (quoted).
    """
    of = -(-n // block_steps)
    times: list[float] = []
    for block in range(of + 1):
        if load is not None:
            load.pause()
        if not progress.wait_for_cue(block, of, "profile") or block == of:
            break
        if load is not None:
            load.resume()
        times += [step() for _ in range(min(block_steps, n - len(times)))]
        progress.emit("measure", n=len(times), of=n, median_ms=statistics.median(times))
    return times


def serve_points(spec: RunnerSpec, step: Callable[[], float]) -> list[ServerPoint]:
    """The server scenario (``tasks.runner.loadgen``): ``spec.queries`` Poisson arrivals (more where the point
    must last ``spec.min_point_s``: ``loadgen.point_queries``) at ``spec.target_qps``
    (seed ``spec.seed`` + the point's index) served by ``step`` in arrival order, batches of up to
    ``batch_size`` waiting queries, on our timer (``time.perf_counter``, ``time.sleep`` while none waits); each
    point's host load recorded around it. With ``spec.search``, the next rate comes from
    ``loadgen.QpsSearch`` (met: the ``upper_rank``-th latency within ``latency_bound_ms`` at a valid point, one
    whose queue did not grow through the run, ``loadgen.overload_reason``; a miss without the
    queueing, ``loadgen.service_floor_missed``, ends a search that has not met) until it is done, its
    final rates re-measured (``confirm``: up to ``loadgen.CONFIRM_POINTS`` more points, each with its own seed).

    Raises:
        RunnerError: the step failed (as every measuring mode).
    """
    assert spec.target_qps is not None and spec.queries is not None  # RunnerSpec checks
    search = loadgen.QpsSearch(spec.target_qps, max_points=spec.search_max_points) if spec.search else None
    points: list[ServerPoint] = []
    qps: float | None = spec.target_qps
    while qps is not None:
        seed = spec.seed + len(points)
        n, rank = loadgen.point_queries(qps, spec.queries, spec.min_point_s, spec.upper_ranks)
        rank = rank if spec.upper_ranks else spec.upper_rank
        arrivals = loadgen.poisson_arrivals(qps, n, seed)
        progress.emit(
            "measure",
            n=len(points),
            of=spec.search_max_points + loadgen.CONFIRM_POINTS if search else 1,
            text=f"server: {n} queries arriving at {qps:.4g}/s (about {arrivals[-1]:.1f} s)",
        )
        load = measure.HostLoad().start()
        trace = loadgen.serve(arrivals, spec.batch_size, step, time.perf_counter, time.sleep, qps)
        invalid = loadgen.overload_reason(trace)
        met = loadgen.upper_bound_met(trace.latency_ms, rank, spec.latency_bound_ms)
        met = False if invalid is not None and met is not None else met  # its percentiles grow with the run
        upper = sorted(trace.latency_ms)[rank - 1] if rank is not None and rank <= trace.served else None
        points.append(
            ServerPoint(
                target_qps=qps,
                seed=seed,
                issued_qps=trace.issued_qps,
                achieved_qps=trace.achieved_qps,
                duration_s=trace.duration_s,
                latency_ms=trace.latency_ms,
                queue_ms=trace.queue_ms,
                service_ms=trace.service_ms,
                batch_queries=trace.batch_queries,
                arrivals_s=trace.arrivals_s,
                done_s=trace.done_s,
                upper_ms=upper,
                met=met,
                backlog_growth=loadgen.backlog_growth(trace.arrivals_s, trace.queue_ms),
                invalid=invalid,
                host_load=load.result(),
            )
        )
        if search is None:
            break
        search.record(
            qps, bool(met), loadgen.service_floor_missed(trace.latency_ms, trace.queue_ms, rank, spec.latency_bound_ms)
        )
        qps = search.next_qps()
    return points
