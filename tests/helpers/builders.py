"""Builders shared by tests: stage records of a finished run with real files behind them, runs archived in a
store, fingerprints, paired results and XCom bundles as the stages leave them, and row counts."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import math
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select

from tasks.analysis import sequential
from tasks.analysis.environment import Fingerprint
from tasks.records import (
    Case,
    CompareRecord,
    EnvRecord,
    ParseRecord,
    ProfiledRun,
    PulledModel,
    RunContext,
    WarmupRecord,
)
from tasks.runner.protocol import SCHEMA_VERSION
from tasks.settings import Settings
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.store import Artifact, Baseline, OpStat, Run, RunComparison, StepSample, session_scope
from tasks.store.writes import record_failure

#: a quiet host's load record (``tasks.runner.measure`` host load: 2 CPUs, other processes 2% of the CPU), the
#: base the noise and soundness tests vary one field of
QUIET_HOST_LOAD = {
    "wall_s": 10.0,
    "cpus": 2,
    "load1_start": 2.0,
    "load1_end": 2.1,
    "other_cpu_s": 0.4,
    "other_cpu_share": 0.02,
    "steal_share": 0.0,
    "own_cpu_share": 0.95,
}


def make_records(tmp: Path, *, dag_run_id="r1", verdict="no-baseline", model="m", median=10.0, key="k1", steps=None):
    """Stage records of one finished run, with real files (a fake xplane, samples, parsed tables); ``steps``: its
    measured step times (ms; default ten steps from ``median`` up by 0.01 ms), ``median`` then their median."""
    if steps is None:
        steps = [median + i * 0.01 for i in range(10)]
    else:
        steps, median = [float(t) for t in steps], statistics.median(steps)
    wd = tmp / dag_run_id
    prof = wd / "run" / "profile" / "plugins" / "profile" / "2026_01_01"
    prof.mkdir(parents=True, exist_ok=True)
    (prof / "host.xplane.pb").write_bytes(b"xplane-bytes")
    samples = {
        "schema_version": SCHEMA_VERSION,
        "measured_step_times_ms": steps,
        "warmup_step_times_ms": [20.0, 15.0],
        "profiled_step_times_ms": [11.0, 12.0],
    }
    (wd / "run" / "result.json").write_text(json.dumps(samples))
    parsed = {
        "op_stats": [
            {
                "host_or_device": "Host",
                "op_type": "Conv2D",
                "op_name": "conv",
                "occurrences": 2,
                "total_self_time_us": 100.0,
                "avg_self_time_us": 50.0,
                "self_time_share": 1.0,
            }
        ],
        "step_breakdown": [{"step": 0, "step_time_ms": 11.0, "input_ms": 1.0, "other_ms": None}],
        "overview_page": {"avg_step_time_ms": 11.5},
    }
    (wd / "parsed.json").write_text(json.dumps(parsed))
    ctx = RunContext(dag_id="d", dag_run_id=dag_run_id, trigger="test", case=Case(model=model, measured_steps=10))
    pulled = PulledModel(
        model=model,
        version="1",
        source_uri="/s/m/1",
        local_path=str(wd / "model"),
        format="keras",
        digest="a" * 64,
        size_bytes=3,
    )
    env = EnvRecord(fingerprint_id="f" * 64, comparability_key=key, data={"gpu": {"count": 0}})
    warm = WarmupRecord(
        warmup_steps=2, steady=True, final_cv=0.01, cold_step_ms=500.0, step_times_ms=[20, 15], wall_s=1.0
    )
    run = ProfiledRun(
        work_dir=str(wd),
        samples_path=str(wd / "run" / "result.json"),
        profile_dir=str(wd / "run" / "profile"),
        measured_steps=len(steps),
        median_step_ms=median,
        throughput_eps=1600.0,
        profile_overhead_ratio=1.1,
        peak_rss_bytes=1 << 30,
        peak_device_bytes=None,
        wall_s=2.0,
    )
    parse = ParseRecord(
        parsed_path=str(wd / "parsed.json"),
        avg_step_time_ms=11.5,
        input_bound_pct=3.0,
        n_ops=1,
        findings=[],
        cross_check_ratio=1.0,
        cross_check_ok=True,
    )
    comp = CompareRecord(
        verdict=verdict,
        method="none",
        baseline_run_ids=[],
        ratio=None,
        ci_low=None,
        ci_high=None,
        median_limit_ms=None,
        gx_success=True,
        evidence={"gx": {}},
    )
    return ctx, pulled, env, warm, run, parse, comp


def count(url, table, *where):
    """Rows of ``table`` (an ORM class) in the store at ``url`` that match ``where``."""
    with session_scope(url) as s:
        return s.scalar(select(func.count()).select_from(table).where(*where))


# runs archived in a store, on days after T0


T0 = dt.datetime(2026, 3, 1, 2, 0, tzinfo=dt.UTC)


def add_run(
    url: str,
    tmp: Path,
    name: str,
    *,
    model="m",
    version="1",
    verdict="pass",
    median=10.0,
    fp="f",
    env_data=None,
    day=0,
    batch_size=16,
    baseline=None,
    ratio=None,
    ops=None,
    method="none",
    reason=None,
    trigger="test",
    cpu_ms=None,
) -> int:
    """Archive one run (make_records) with the given version, environment, day, verdict and comparison
    (``method``: the stored ``comparisons.method``, e.g. ``paired-abba``; ``reason``: the verdict's reason;
    ``trigger``: the run's, e.g. ``calibrate`` for an A/A gate; ``cpu_ms``: each measured step's process CPU
    time, ms, recorded with the steps)."""
    ctx, pulled, env, warm, run, parse, comp = make_records(
        tmp, dag_run_id=name, verdict=verdict, model=model, median=median, key=f"key-{fp}"
    )
    ctx = ctx.model_copy(
        update={
            "started_at": T0 + dt.timedelta(days=day),
            "trigger": trigger,
            "case": ctx.case.model_copy(update={"batch_size": batch_size}),
        }
    )
    pulled = pulled.model_copy(update={"version": version})
    env = env.model_copy(update={"fingerprint_id": fp * 64, "data": env_data or {"tf": {"version": "2.20"}}})
    comp = comp.model_copy(
        update={
            "baseline_run_ids": [baseline] if baseline else [],
            "ratio": ratio,
            "ci_low": ratio and ratio - 0.1,
            "ci_high": ratio and ratio + 0.1,
            "method": method,
            "reason": reason,
            "evidence": {**comp.evidence, **({"reason": reason} if reason else {})},
        }
    )
    if cpu_ms is not None:
        samples = json.loads(Path(run.samples_path).read_text())
        samples["measured_cpu_ms"] = [float(cpu_ms)] * len(samples["measured_step_times_ms"])
        Path(run.samples_path).write_text(json.dumps(samples))
    if ops is not None:
        p = Path(parse.parsed_path)
        parsed = json.loads(p.read_text())
        parsed["op_stats"] = [
            {
                "host_or_device": "Host",
                "op_type": t,
                "op_name": n,
                "occurrences": 2,
                "total_self_time_us": us,
                "avg_self_time_us": us / 2,
                "self_time_share": 0.5,
            }
            for n, t, us in ops
        ]
        p.write_text(json.dumps(parsed))
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id


def add_failure(
    url: str,
    tmp: Path,
    name: str,
    *,
    model="m",
    day=0,
    stage="warm-up",
    error="RunnerError: training step failed\nTraceback (most recent call last): ...",
) -> int:
    ctx = make_records(tmp, dag_run_id=name, model=model)[0]
    ctx = ctx.model_copy(update={"started_at": T0 + dt.timedelta(days=day)})
    return record_failure(url, ctx, stage, error)


# paired (A/B) results as the profiled-run stage leaves them


def _blocks(ratio, n, steps, sd, seed, bad=None, cpu_ratio=None, cpu_sd=0.02):
    """n ABBA block pairs: A ~ 10 ms with ``sd`` step noise and a drifting level, B = ratio x that. With
    ``cpu_ratio``, also per-step CPU time (``a_cpu_ms``/``b_cpu_ms``): A ~ 18 ms with ``cpu_sd`` noise, B =
    cpu_ratio x that (drawn from a generator of its own: the wall times are those without it)."""
    rng = np.random.default_rng(seed)
    cpu_rng = np.random.default_rng(seed + 1000)
    out = []
    for i in range(n):
        level = 10.0 * (1 + 0.2 * i / n)  # drift across the process: cancels within pairs
        a = (level * rng.lognormal(0, sd, steps)).tolist()
        b = (ratio * level * rng.lognormal(0, sd, steps)).tolist()
        out.append({"pair": i, "order": "AB" if i % 2 == 0 else "BA", "a_ms": a, "b_ms": b})
        if cpu_ratio is not None:
            out[-1]["a_cpu_ms"] = (18.0 * cpu_rng.lognormal(0, cpu_sd, steps)).tolist()
            out[-1]["b_cpu_ms"] = (cpu_ratio * 18.0 * cpu_rng.lognormal(0, cpu_sd, steps)).tolist()
    if bad is not None:
        out[2]["b_ms"][min(1, steps - 1)] = bad
    return out


def _paired_file(
    path,
    ratio,
    *,
    budget=64,
    steps=1,
    sd=0.03,
    seed=0,
    bad=None,
    offset_sd=None,
    rounds=16,
    cpu_ratio=None,
    cpu_sd=0.02,
    host_load=None,
):
    """A paired result as the profiled-run stage leaves it: a sequential gate (budget >= 32 pairs) stops
    at its first decisive look (on wall time), as ``tasks.stages.profiled_run.paired_run`` does; a smaller
    budget is one fixed look. ``offset_sd``: the offset recorded in the gate (None: no gate record, the
    stage's offset comes from the case/store at compare time). ``cpu_ratio``, ``cpu_sd``: per-step CPU time
    in the blocks (``_blocks``); ``host_load``: the paired phase's ``HostLoad`` dict."""
    blocks = _blocks(ratio, budget, steps, sd, seed, bad, cpu_ratio, cpu_sd)
    design, looks = None, [budget]
    if budget >= sequential.MIN_LOOK_PAIRS:
        design = sequential.Design(max_pairs=budget, round_pairs=rounds, offset_sd=offset_sd or 0.0)
        d = [math.log(statistics.median(b["b_ms"]) / statistics.median(b["a_ms"])) for b in blocks]
        looks = []
        for p in sequential.look_schedule(budget, rounds):
            looks.append(p)
            if sequential.look(d, looks, design).verdict != "inconclusive":
                break
        blocks = blocks[: looks[-1]]
    gate = {
        "design": design.model_dump(mode="json") if design else None,
        "look_pairs": looks,
        "calibrated_noise": {"sd_pair": None, "n_gates": 0},
    }
    if offset_sd is not None:
        gate["offset"] = {"sd": offset_sd, "source": "case", "n_gates": 0, "capped": False, "skipped_busy": 0}
    path.write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "mode": "paired",
                "blocks": blocks,
                "block_steps": steps,
                "timed_steps": 2 * len(blocks) * steps,
                "wall_s": 3.0,
                "pairs_wall_s": 2.5,
                "stopped_by": "parent" if len(blocks) < budget else "budget",
                "gate": gate,
                **({"host_load": host_load} if host_load is not None else {}),
            }
        )
    )
    return str(path)


# op tables and findings of two versions (attribution, perfwatch compare)


def op(name: str, op_type: str, total_us: float, side: str = "Host") -> dict[str, Any]:
    return {
        "host_or_device": side,
        "op_type": op_type,
        "op_name": name,
        "occurrences": 5,
        "total_self_time_us": total_us,
        "avg_self_time_us": total_us / 5,
        "self_time_share": 0.1,
    }


BASE_OPS = [op("conv", "Conv2D", 100.0), op("relu", "Relu", 50.0), op("dense", "MatMul", 30.0)]


# per step (5 steps): conv 20 -> 120 µs, relu unchanged, dense vanished (-6), bn appeared (+5)
CAND_OPS = [op("conv", "Conv2D", 600.0), op("relu", "Relu", 50.0), op("bn", "FusedBatchNormV3", 25.0)]


CPU_ONLY = {
    "code": "cpu_only",
    "severity": "info",
    "message": "No device planes",
    "figure": "device_core_count",
    "value": 0.0,
    "threshold": None,
}


INPUT_BOUND = {
    "code": "input_bound",
    "severity": "warning",
    "message": "The run is HIGHLY input-bound",
    "figure": "input_bound_pct",
    "value": 31.0,
    "threshold": 20.0,
}


def records(
    tmp: Path,
    dag_run_id: str,
    *,
    version: str = "1",
    ops=BASE_OPS,
    findings=(),
    avg_ms: float = 11.5,
    profiled_steps: int = 5,
    median: float = 10.0,
    check: dict[str, Any] | None = None,
):
    """make_records' stage records with our op table, findings, version, xprof step time, step count and
    window check."""
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp, dag_run_id=dag_run_id, median=median)
    Path(parse.parsed_path).write_text(
        json.dumps(
            {
                "op_stats": list(ops),
                "findings": list(findings),
                "avg_step_time_ms": avg_ms,
                "step_breakdown": [{"step": 0, "step_time_ms": avg_ms, "input_ms": 1.0}],
                **({"cross_check": check} if check else {}),
            }
        )
    )
    case = ctx.case.model_copy(update={"version": version, "profiled_steps": profiled_steps})
    return (
        ctx.model_copy(update={"case": case}),
        pulled.model_copy(update={"version": version, "digest": hashlib.sha256(version.encode()).hexdigest()}),
        env,
        warm,
        run,
        parse.model_copy(update={"avg_step_time_ms": avg_ms, "n_ops": len(ops)}),
        comp,
    )


def archive(db_url: str, tmp: Path, dag_run_id: str, **kw) -> int:
    return archive_run(db_url, str(tmp / "archive"), *records(tmp, dag_run_id, **kw)).run_id


# fingerprints: a realistic GPU baseline, a candidate after a driver and cuDNN upgrade


_DEVICE = {
    "index": 0,
    "name": "NVIDIA A100-SXM4-40GB",
    "uuid": "GPU-5d1c0a6e-9f1b-4b7e-8c1e-2a9b3c4d5e6f",
    "memory_total_bytes": 42_949_672_960,
    "compute_capability": "8.0",
    "power_limit_mw": 400_000,
    "applications_clock_mhz": {"sm": 1410, "mem": 1215},
    "max_clock_mhz": {"sm": 1410, "mem": 1215},
    "ecc_mode": {"current": "enabled", "pending": "enabled"},
    "persistence_mode": "enabled",
    "mig_mode": {"current": "disabled", "pending": "disabled"},
    "mig_devices": [],
}


BASELINE_FINGERPRINT: dict[str, Any] = {
    "tensorflow": {
        "version": "2.12.0",
        "git_version": "v2.12.0-rc1-12-g0db597d0d75",
        "built_with_xla": True,
        "xla_jit": "off",
        "onednn_enabled": True,
        "op_determinism": False,
        "tensor_float_32": True,
        "build": {
            "cuda_version": "11.8",
            "cudnn_version": "8.6",
            "is_cuda_build": True,
            "is_rocm_build": False,
            "is_tensorrt_build": True,
        },
    },
    "gpu": {
        "nvml": "ok",
        "driver_version": "535.104.05",
        "cuda_driver_version": "12.2",
        "count": 1,
        "physical_count": 1,
        "devices": [_DEVICE],
    },
    "host": {
        "cpu_model": "AMD EPYC 7742 64-Core Processor",
        "cpu_count_logical": 32,
        "cpu_count_physical": 16,
        "cpu_governor": "performance",
        "memory_total_bytes": 270_000_000_000,
        "os": "Linux",
        "os_release": "Ubuntu 22.04.3 LTS",
        "kernel": "5.15.0-91-generic",
        "machine": "x86_64",
        "python_version": "3.11.7",
        "image_digest": "absent",
    },
    "packages": {
        "tensorflow": "2.12.0",
        "tensorflow-cpu": "absent",
        "keras": "2.12.0",
        "numpy": "1.23.5",
        "xprof": "absent",
        "installed_count": 180,
        "installed_sha256": "ab" * 32,
    },
    "env_vars": {
        "CUDA_DEVICE_ORDER": "absent",
        "CUDA_VISIBLE_DEVICES": "0",
        "NVIDIA_TF32_OVERRIDE": "absent",
        "OMP_NUM_THREADS": "absent",
        "TF_DETERMINISTIC_OPS": "absent",
        "TF_ENABLE_AUTO_MIXED_PRECISION": "absent",
        "TF_ENABLE_ONEDNN_OPTS": "absent",
        "TF_XLA_FLAGS": "absent",
        "XLA_FLAGS": "absent",
    },
    "recorded": {
        "hostname": "gpu-worker-01",
        "timestamp_utc": "2026-01-05T02:00:11+00:00",
        "python_executable": "/opt/tf/bin/python",
    },
}


# The candidate: the node's driver was upgraded and TF rebuilt against a newer cuDNN; also a
# different worker host and time, which only the ``recorded`` section holds.
CHANGED = {"gpu.driver_version": ("535.104.05", "535.129.03"), "tensorflow.build.cudnn_version": ("8.6", "8.9")}


def with_changes(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of fingerprint ``data`` with dotted-path fields set (list indices as digits)."""
    out = copy.deepcopy(data)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(leaf) if isinstance(node, list) else leaf] = value
    return out


def env_record(data: dict[str, Any]) -> EnvRecord:
    """The env-fingerprint stage's record for ``data`` (hashes computed as the stage does)."""
    return EnvRecord(**Fingerprint.from_data(data).model_dump())


CANDIDATE_FINGERPRINT = with_changes(
    BASELINE_FINGERPRINT,
    {
        **{field: new for field, (_, new) in CHANGED.items()},
        "recorded.hostname": "gpu-worker-07",
        "recorded.timestamp_utc": "2026-01-06T02:00:09+00:00",
    },
)


def archive_with_env(
    db_url: str, tmp: Path, dag_run_id: str, data: dict[str, Any], *, median: float = 10.0, verdict=None, steps=None
) -> int:
    """Archive one run (make_records' files, its measured ``steps`` when given) fingerprinted as ``data``; returns
    its run id."""
    ctx, pulled, _, warm, run, parsed, comp = make_records(tmp, dag_run_id=dag_run_id, median=median, steps=steps)
    return archive_run(
        db_url, str(tmp / "archive"), ctx, pulled, env_record(data), warm, run, parsed, verdict or comp
    ).run_id


def compare_candidate(
    db_url: str, tmp: Path, dag_run_id: str, data: dict[str, Any], median: float, *, steps=None, noise=None
):
    """baseline_compare for a candidate run fingerprinted as ``data`` (its measured ``steps`` when given; ``noise``:
    the profiled run's judged noise, ``ProfiledRun.noise``); returns (records, CompareRecord)."""
    ctx, pulled, _, warm, run, parsed, _ = make_records(tmp, dag_run_id=dag_run_id, median=median, steps=steps)
    if noise is not None:
        run = run.model_copy(update={"noise": noise})
    env = env_record(data)
    verdict = baseline_compare(db_url, ctx.case, env, run, parsed, tmp / dag_run_id / "work")
    return (ctx, pulled, env, warm, run, parsed), verdict


# a run's settings and XCom bundle, and what the store and the archive hold after it


def settings_for(tmp: Path, db_url: str, archive: Path | None = None) -> Settings:
    return Settings.from_env(
        {
            "PERFWATCH_HOME": str(tmp / "home"),
            "PERFWATCH_DATABASE_URL": db_url,
            "PERFWATCH_ARCHIVE": str(archive or tmp / "archive"),
            "PERFWATCH_WORK": str(tmp / "work"),
            "PERFWATCH_MODEL_STORE": str(tmp / "models"),
        }
    )


KEYS = ["pulled", "env", "warmup", "run", "parsed", "verdict"]


def compared_bundle(st: Settings, dag_run_id: str, *, xplane_bytes: int = 0, **kw) -> dict:
    """The bundle the archive task receives: every stage done, files in the run's scratch dir."""
    ctx, *recs = make_records(st.home / "made", dag_run_id=dag_run_id, **kw)
    src, dst = st.home / "made" / dag_run_id, st.work_root / ctx.slug
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(src, dst)
    if xplane_bytes:
        (next(dst.rglob("*.xplane.pb"))).write_bytes(os.urandom(xplane_bytes))
    bundle = {"ctx": ctx.to_xcom(), **{k: r.to_xcom() for k, r in zip(KEYS, recs, strict=True)}}
    return json.loads(json.dumps(bundle).replace(json.dumps(str(src))[1:-1], json.dumps(str(dst))[1:-1]))


def files(root: Path | str) -> list[str]:
    root = Path(root)
    return (
        sorted(f"{p.relative_to(root)}:{p.stat().st_size}" for p in root.rglob("*") if p.is_file())
        if root.exists()
        else []
    )


def snapshot(st: Settings) -> dict:
    """Row counts per table and status, the archive's files (path:size) and the scratch dirs."""
    url = st.database_url
    with session_scope(url) as s:
        runs = sorted(s.execute(select(Run.id, Run.status, Run.failed_stage, Run.archive_uri)).all())
    return {
        "runs": runs,
        "samples": count(url, StepSample),
        "ops": count(url, OpStat),
        "artifacts": count(url, Artifact),
        "comparisons": count(url, RunComparison),
        "baselines": count(url, Baseline),
        "archive": files(st.archive_root),
        "scratch": sorted(p.name for p in st.work_root.iterdir()) if st.work_root.exists() else [],
    }


class SimClock:
    """A simulated monotonic clock for ``tasks.runner.loadgen.serve``: each step advances it by its service time
    (``service_s``, cycled), ``sleep`` by what was asked; nothing really waits."""

    def __init__(self, service_s: float | list[float]) -> None:
        self.t = 0.0
        self.services = service_s if isinstance(service_s, list) else [service_s]
        self.k = 0

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(0.0, s)

    def step(self) -> float:
        s = self.services[self.k % len(self.services)]
        self.k += 1
        self.t += s
        return s * 1000.0


def server_point(
    qps: float,
    service_s: float,
    *,
    batch_size: int = 4,
    n: int = 320,
    seed: int = 0,
    spread: float = 1.5,
    host_load: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One server point as the runner writes it (a ``tasks.runner.protocol.ServerPoint`` dict): ``n`` Poisson
    arrivals at ``qps`` (seed ``seed``) served on a simulated clock (``tasks.runner.loadgen``), batches of up to
    ``batch_size`` taking ``service_s`` and ``service_s x spread`` in turn; ``host_load`` over
    :data:`QUIET_HOST_LOAD`."""
    from tasks.runner import loadgen

    sim = SimClock([service_s, service_s * spread])
    t = loadgen.serve(loadgen.poisson_arrivals(qps, n, seed), batch_size, sim.step, sim.clock, sim.sleep, qps)
    return {
        "target_qps": qps,
        "seed": seed,
        "issued_qps": t.issued_qps,
        "achieved_qps": t.achieved_qps,
        "duration_s": t.duration_s,
        "latency_ms": t.latency_ms,
        "queue_ms": t.queue_ms,
        "service_ms": t.service_ms,
        "batch_queries": t.batch_queries,
        "arrivals_s": t.arrivals_s,
        "done_s": t.done_s,
        "backlog_growth": loadgen.backlog_growth(t.arrivals_s, t.queue_ms),
        "invalid": loadgen.overload_reason(t),
        "host_load": {**QUIET_HOST_LOAD, **(host_load or {})},
    }


def server_points(rates: list[tuple[float, float]], *, batch_size: int = 4, n: int = 320, host_load=None) -> list:
    """Server points (:func:`server_point`), each ``(rate q/s, service s per batch)``, seeds 0, 1, ...;
    ``host_load[i]`` the i-th point's."""
    return [
        server_point(qps, service_s, batch_size=batch_size, n=n, seed=i, host_load=host_load[i] if host_load else None)
        for i, (qps, service_s) in enumerate(rates)
    ]


def archive_server_run(db_url: str, tmp: Path, dag_run_id: str, points: list[dict[str, Any]], **kw) -> int:
    """Archive the run of :func:`server_run_records`. Returns the run id."""
    ctx, pulled, env, warm, run, parse, comp = server_run_records(tmp, dag_run_id, points, **kw)
    return archive_run(db_url, str(tmp / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id


def server_run_records(
    tmp: Path,
    dag_run_id: str,
    points: list[dict[str, Any]],
    *,
    search: bool = False,
    bound_ms: float | None = None,
    batch_size: int = 4,
    model: str = "m",
    target_qps: float | None = None,
    **case_kw,
):
    """The stage records of a server-scenario infer run whose runner result holds ``points``
    (:func:`server_points`): its step times the batches' service times, its ``latency_ms`` the stage's
    (``tasks.stages.profiled_run.latency_record``: per-batch percentiles and the scenario's summary); ``case_kw``
    more Case fields (``gate_percentile``...)."""
    from tasks.stages.profiled_run import latency_record

    ctx, pulled, env, warm, run, parse, comp = make_records(tmp, dag_run_id=dag_run_id, model=model)
    case = ctx.case.model_copy(
        update={
            "mode": "infer",
            "batch_size": batch_size,
            "scenario": "server",
            "target_qps": None if search else (target_qps or points[0]["target_qps"]),
            "search_qps": search,
            "latency_bound_ms": bound_ms,
            **case_kw,
        }
    )
    service = [t for p in points for t in p["service_ms"]]
    samples = json.loads(Path(run.samples_path).read_text())
    queries = sum(len(p["latency_ms"]) for p in points)
    samples.update(
        case_mode="infer",
        inputs={"x": {"shape": [batch_size, 4], "dtype": "float32", "min": None, "max": None}},
        measured_step_times_ms=service,
        latency_ms={
            **{f"p{q}": float(np.percentile(service, q, method="inverted_cdf")) for q in (50, 90, 99)},
            "max": max(service),
            "throughput_eps": queries / (sum(service) / 1000.0),
        },
        serving={
            "scenario": "server",
            "wall_s": sum(p["duration_s"] for p in points),
            "examples": batch_size * len(service),
            "points": points,
            "search": search,
            "latency_bound_ms": bound_ms,
        },
    )
    Path(run.samples_path).write_text(json.dumps(samples))
    from tasks.analysis.serving import run_throughput_eps

    latency = latency_record(case, _as_result(samples), service)
    median = statistics.median(service)
    run = run.model_copy(
        update={
            "measured_steps": len(service),
            "median_step_ms": median,
            "throughput_eps": run_throughput_eps((latency or {}).get("serving"), batch_size / (median / 1000.0)),
            "latency_ms": latency,
        }
    )
    return ctx.model_copy(update={"case": case}), pulled, env, warm, run, parse, comp


def _as_result(samples: dict[str, Any]) -> Any:
    """The parts of a runner result ``latency_record`` reads (``latency_ms``, ``serving``, ``execution``)."""
    from types import SimpleNamespace

    from tasks.runner.protocol import LatencySummary, Serving

    return SimpleNamespace(
        latency_ms=LatencySummary(**samples["latency_ms"]), serving=Serving(**samples["serving"]), execution=None
    )


def archive_scenario_run(
    db_url: str,
    tmp: Path,
    dag_run_id: str,
    scenario: str,
    step_ms: list[float],
    *,
    wall_s: float | None = None,
    batch_size: int = 4,
    bound_ms: float | None = None,
    model: str = "m",
) -> int:
    """Archive a single-stream or offline infer run whose measured steps are ``step_ms`` (offline: the intervals
    between results, its measured phase ``wall_s``, default their sum), its ``latency_ms`` the stage's
    (``latency_record``). Returns the run id."""
    from tasks.stages.profiled_run import latency_record

    ctx, pulled, env, warm, run, parse, comp = make_records(tmp, dag_run_id=dag_run_id, model=model)
    case = ctx.case.model_copy(
        update={"mode": "infer", "batch_size": batch_size, "scenario": scenario, "latency_bound_ms": bound_ms}
    )
    samples = json.loads(Path(run.samples_path).read_text())
    samples.update(
        case_mode="infer",
        inputs={"x": {"shape": [batch_size, 4], "dtype": "float32", "min": None, "max": None}},
        measured_step_times_ms=step_ms,
        latency_ms={
            **{f"p{q}": float(np.percentile(step_ms, q, method="inverted_cdf")) for q in (50, 90, 99)},
            "max": max(step_ms),
            "throughput_eps": batch_size * len(step_ms) / (sum(step_ms) / 1000.0),
        },
        serving={
            "scenario": scenario,
            "wall_s": wall_s if wall_s is not None else sum(step_ms) / 1000.0,
            "examples": batch_size * len(step_ms),
        },
    )
    Path(run.samples_path).write_text(json.dumps(samples))
    from tasks.analysis.serving import run_throughput_eps

    median = statistics.median(step_ms)
    latency = latency_record(case, _as_result(samples), step_ms)
    run = run.model_copy(
        update={
            "measured_steps": len(step_ms),
            "median_step_ms": median,
            "throughput_eps": run_throughput_eps((latency or {}).get("serving"), batch_size / (median / 1000.0)),
            "latency_ms": latency,
        }
    )
    return archive_run(
        db_url, str(tmp / "archive"), ctx.model_copy(update={"case": case}), pulled, env, warm, run, parse, comp
    ).run_id
