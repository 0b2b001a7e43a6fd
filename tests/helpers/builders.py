"""Builders shared by tests: stage records of a finished run with real files behind them, and row counts."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import func, select

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
from tasks.store import session_scope


def make_records(tmp: Path, *, dag_run_id="r1", verdict="no-baseline", model="m", median=10.0, key="k1"):
    """Stage records of one finished run, with real files (a fake xplane, samples, parsed tables)."""
    wd = tmp / dag_run_id
    prof = wd / "run" / "profile" / "plugins" / "profile" / "2026_01_01"
    prof.mkdir(parents=True, exist_ok=True)
    (prof / "host.xplane.pb").write_bytes(b"xplane-bytes")
    samples = {
        "schema_version": SCHEMA_VERSION,
        "measured_step_times_ms": [median + i * 0.01 for i in range(10)],
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
        measured_steps=10,
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
