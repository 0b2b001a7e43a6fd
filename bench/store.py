"""Benchmark the historical store at scale: named-query latency, store size, archive time.

Run: ``.venv/bin/python bench/store.py [--postgres-url URL] [--repeats 15] [--keep DIR]``.

1. Migrates an empty store (``tasks.store.migrate``) on SQLite (a temporary file) and, when a
   PostgreSQL URL is given (``--postgres-url``, default ``PERFWATCH_TEST_DATABASE_URL`` with the
   database renamed ``perfwatch_bench``, created if missing), on PostgreSQL — whose ``public``
   schema is dropped and recreated first. ``--no-postgres`` skips it.
2. Fills it with synthetic history: 100 models, 10,000 runs (100 per model, one a day, five versions,
   four environments; 2% failed, 5% regressions), 1,000,000 step samples and 1,000,000 op-stat rows
   (spread over the successful runs), a comparison per successful run and the baseline history.
   SQLite gets SQLAlchemy Core ``insert()`` executemany in batches; PostgreSQL gets ``COPY`` through
   psycopg. Then ``ANALYZE``, as autovacuum would.
3. Times every named query of ``sql/queries`` through ``tasks.store.queries.run_query`` (bound parameters,
   DataFrame out — what the CLI does) ``--repeats`` times with varying models/runs; reports the
   median latency in ms (and p90).
4. Times ``tasks.stages.archive.archive_run`` of one run (records as in tests/unit/store/test_store.py
   ``make_records``: 10 measured samples, one op) into the filled store, 5 times; reports the median.

Store size: SQLite file size (MiB, 2**20 bytes) and ``pg_database_size`` on PostgreSQL.
Last line: ``store: postgres_p50_max=<ms> ms sqlite_p50_max=<ms> ms archive=<ms> ms`` — the slowest
query median per database and the slower archive median of the two (``nan`` where skipped).
Targets: every named query under 50 ms median on PostgreSQL; archive of one run under 1 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from tasks.stages.archive import archive_run  # noqa: E402
from tasks.store import (  # noqa: E402
    Baseline,
    Environment,
    Model,
    ModelVersion,
    OpStat,
    Run,
    RunComparison,
    StepSample,
    get_engine,
    migrate,
    queries,  # noqa: E402
    redact,
)
from tests.helpers.builders import make_records  # noqa: E402

N_MODELS, RUNS_PER_MODEL, N_VERSIONS, N_ENVS = 100, 100, 5, 4
N_SAMPLES, N_OPS = 1_000_000, 1_000_000
PROFILED_PER_RUN = 2
T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.UTC)
OP_TYPES = ["Conv2D", "MatMul", "Relu", "BiasAdd", "FusedBatchNormV3", "AddV2", "Mul", "Softmax", "Cast", "Transpose"]


def synthesize(seed: int = 7) -> dict[str, list[dict]]:
    """Rows of every table, as dicts keyed by column name, with explicit ids."""
    rng = random.Random(seed)
    models = [{"id": m, "name": f"model_{m:03d}", "created_at": T0} for m in range(1, N_MODELS + 1)]
    versions = [
        {
            "id": (m - 1) * N_VERSIONS + v,
            "model_id": m,
            "version": str(v),
            "digest": f"{m:032x}{v:032x}",
            "source_uri": f"/models/model_{m:03d}/{v}",
            "format": "keras",
            "size_bytes": 1 << 20,
            "created_at": T0,
        }
        for m in range(1, N_MODELS + 1)
        for v in range(1, N_VERSIONS + 1)
    ]
    envs = [
        {
            "id": e,
            "fingerprint_id": f"{e:064x}",
            "comparability_key": f"key{e:012d}",
            "data": {"tf": {"version": f"2.{18 + e}.0"}, "gpu": {"count": 0}, "cpu": {"model": "bench"}},
            "created_at": T0,
        }
        for e in range(1, N_ENVS + 1)
    ]
    runs, comps, bases = [], [], []
    rid = 0
    for m in range(1, N_MODELS + 1):
        base_ms = 5.0 + m * 0.5
        prev_ok = None
        active: dict[int, dict] = {}
        for k in range(RUNS_PER_MODEL):
            rid += 1
            version = 1 + k * N_VERSIONS // RUNS_PER_MODEL
            env = 1 + (k // 25) % N_ENVS
            started = T0 + dt.timedelta(days=k, minutes=m)
            failed = rng.random() < 0.02
            verdict = (
                None
                if failed
                else ("no-baseline" if prev_ok is None else "regression" if rng.random() < 0.05 else "pass")
            )
            median = None if failed else base_ms * (1.3 if verdict == "regression" else 1.0) * rng.uniform(0.98, 1.02)
            runs.append(
                {
                    "id": rid,
                    "dag_id": "perfwatch_profile",
                    "dag_run_id": f"scheduled__{started.isoformat()}",
                    "case_name": "train-bs16",
                    "model_id": m,
                    "version_requested": str(version),
                    "model_version_id": (m - 1) * N_VERSIONS + version,
                    "environment_id": env,
                    "trigger": "scheduled",
                    "status": "failed" if failed else "success",
                    "failed_stage": "warm-up" if failed else None,
                    "error": "RunnerError: training step failed\nTraceback ..." if failed else None,
                    "params": {"model": f"model_{m:03d}", "batch_size": 16},
                    "started_at": started,
                    "finished_at": started + dt.timedelta(minutes=3),
                    "median_step_ms": median,
                    "mean_step_ms": median,
                    "p90_step_ms": None if failed else median * 1.05,
                    "throughput_eps": None if failed else 16_000 / median,
                    "cold_step_ms": None,
                    "warmup_steps": None,
                    "steady": None,
                    "profile_overhead_ratio": None,
                    "peak_rss_bytes": None,
                    "peak_device_bytes": None,
                    "profiler_avg_step_ms": median,
                    "input_bound_pct": None,
                    "verdict": verdict,
                    "archive_uri": None,
                }
            )
            if failed:
                continue
            ratio = None if prev_ok is None else median / prev_ok["median_step_ms"]
            comps.append(
                {
                    "id": rid,
                    "run_id": rid,
                    "baseline_run_id": None if prev_ok is None else prev_ok["id"],
                    "method": "none" if prev_ok is None else "history-lookback",
                    "verdict": verdict,
                    "ratio": ratio,
                    "ci_low": None if ratio is None else ratio * 0.97,
                    "ci_high": None if ratio is None else ratio * 1.03,
                    "median_limit_ms": None,
                    "gx_success": True,
                    "gx_result": {},
                    "evidence": {},
                    "created_at": started,
                }
            )
            if verdict != "regression":
                key = envs[env - 1]["comparability_key"]
                if env in active:
                    active[env]["superseded_at"] = started
                b = {
                    "id": len(bases) + 1,
                    "model_id": m,
                    "case_name": "train-bs16",
                    "comparability_key": key,
                    "run_id": rid,
                    "accepted_at": started,
                    "accepted_by": "perfwatch",
                    "reason": "automatic",
                    "superseded_at": None,
                }
                bases.append(b)
                active[env] = b
                prev_ok = runs[-1]
    ok_ids = [r["id"] for r in runs if r["status"] == "success"]
    medians = {r["id"]: r["median_step_ms"] for r in runs}
    samples, ops = [], []
    per_run, extra = divmod(N_SAMPLES, len(ok_ids))
    ops_per_run, ops_extra = divmod(N_OPS, len(ok_ids))
    opid = 0
    for i, r in enumerate(ok_ids):
        n = per_run + (1 if i < extra else 0)
        med = medians[r]
        for s in range(n - PROFILED_PER_RUN):
            samples.append({"run_id": r, "phase": "measured", "step": s, "step_time_ms": med * rng.uniform(0.9, 1.1)})
        for s in range(PROFILED_PER_RUN):
            samples.append({"run_id": r, "phase": "profiled", "step": s, "step_time_ms": med * 1.1})
        n_ops = ops_per_run + (1 if i < ops_extra else 0)
        for o in range(n_ops):
            opid += 1
            t = med * 1000 * PROFILED_PER_RUN / n_ops * rng.uniform(0.5, 1.5)
            ops.append(
                {
                    "id": opid,
                    "run_id": r,
                    "host_or_device": "Host",
                    "op_type": OP_TYPES[o % len(OP_TYPES)],
                    "op_name": f"model/layer_{o:03d}/{OP_TYPES[o % len(OP_TYPES)]}",
                    "occurrences": 2,
                    "total_self_time_us": t,
                    "avg_self_time_us": t / 2,
                    "self_time_share": 1.0 / n_ops,
                }
            )
    return {
        "models": models,
        "model_versions": versions,
        "environments": envs,
        "runs": runs,
        "comparisons": comps,
        "baselines": bases,
        "step_samples": samples,
        "op_stats": ops,
    }


TABLES = {
    "models": Model,
    "model_versions": ModelVersion,
    "environments": Environment,
    "runs": Run,
    "comparisons": RunComparison,
    "baselines": Baseline,
    "step_samples": StepSample,
    "op_stats": OpStat,
}


def fill_core(url: str, data: dict[str, list[dict]], batch: int = 50_000) -> None:
    """Bulk insert with SQLAlchemy Core ``insert()`` executemany, in batches (SQLite)."""
    with get_engine(url).begin() as conn:
        for name, cls in TABLES.items():
            rows = data[name]
            for i in range(0, len(rows), batch):
                conn.execute(insert(cls.__table__), rows[i : i + batch])
        conn.exec_driver_sql("ANALYZE")


def fill_copy(url: str, data: dict[str, list[dict]]) -> None:
    """Bulk load with PostgreSQL ``COPY ... FROM STDIN`` through psycopg, then fix the id sequences."""
    import json

    engine = get_engine(url)
    raw = engine.raw_connection()
    try:
        with raw.cursor() as cur:
            for name in TABLES:
                rows = data[name]
                cols = list(rows[0])
                with cur.copy(f"COPY {name} ({', '.join(cols)}) FROM STDIN") as cp:
                    for r in rows:
                        cp.write_row([json.dumps(v) if isinstance(v, dict) else v for v in r.values()])
                if "id" in cols:
                    cur.execute(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), (SELECT max(id) FROM {name}))")
        raw.commit()
    finally:
        raw.close()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


def query_cases(rng: random.Random, n: int) -> dict[str, list[dict]]:
    """``n`` parameter sets per named query, varied over models, versions, runs and windows."""
    out: dict[str, list[dict]] = {name: [] for name in queries.named_queries()}
    for _ in range(n):
        m = rng.randint(1, N_MODELS)
        model = f"model_{m:03d}"
        start = T0 + dt.timedelta(days=rng.randint(0, 60))
        first = (m - 1) * RUNS_PER_MODEL + 1
        out["history"].append({"model": model, "case_name": None, "limit": None})
        out["version_compare"].append({"model": model, "version_a": "2", "version_b": "3", "case_name": None})
        out["regressions"].append({"since": start, "until": start + dt.timedelta(days=30), "model": None})
        out["env_changes"].append({"since": start, "until": start + dt.timedelta(days=30), "model": None})
        out["failures"].append({"since": start, "until": start + dt.timedelta(days=30), "model": None, "limit": None})
        out["runs"].append({"model": None, "limit": 50})
        out["gate"].append({"model": model, "version": str(rng.randint(1, N_VERSIONS)), "case_name": None})
        a = first + rng.randint(0, RUNS_PER_MODEL - 2)
        out["top_op_regressions"].append({"run_a": a, "run_b": a + 1, "limit": 20})
    missing = [k for k, v in out.items() if not v]
    if missing:
        raise SystemExit(f"bench/store.py has no parameters for named queries {missing}; add them to query_cases")
    return out


def time_queries(url: str, repeats: int) -> dict[str, tuple[float, float, int]]:
    """name -> (median ms, p90 ms, rows of the last call)."""
    cases = query_cases(random.Random(11), repeats)
    out = {}
    for name, param_sets in cases.items():
        queries.run_query(name, url, **param_sets[0])  # warm the connection and the plan cache
        times, rows = [], 0
        for params in param_sets:
            t = time.perf_counter()
            rows = len(queries.run_query(name, url, **params))
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        out[name] = (statistics.median(times), times[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)], rows)
    return out


def time_archive(url: str, tmp: Path, tries: int = 5) -> float:
    """Median ms of archive_run of one make_records run into the filled store."""
    times = []
    for i in range(tries):
        recs = make_records(tmp, dag_run_id=f"bench{i}", model="model_001", verdict="pass")
        t = time.perf_counter()
        archive_run(url, str(tmp / "archive"), *recs)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def store_size_mib(url: str) -> float:
    """SQLite file size or pg_database_size, MiB."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return (
            sum(Path(u.database + sfx).stat().st_size for sfx in ("", "-wal") if Path(u.database + sfx).exists())
            / 2**20
        )
    with get_engine(url).connect() as conn:
        return conn.scalar(text("SELECT pg_database_size(current_database())")) / 2**20


def bench_one(label: str, url: str, data: dict, repeats: int, tmp: Path) -> tuple[float, float]:
    """Migrate, fill, time; prints the figures. Returns (slowest query median ms, archive median ms)."""
    t = time.perf_counter()
    migrate(url)
    (fill_copy if label == "postgresql" else fill_core)(url, data)
    print(
        f"[{label}] {redact(url)}: filled in {time.perf_counter() - t:.1f} s; store size {store_size_mib(url):.1f} MiB",
        flush=True,
    )
    results = time_queries(url, repeats)
    for name, (p50, p90, rows) in results.items():
        print(f"[{label}] {name:<20} p50 {p50:8.2f} ms  p90 {p90:8.2f} ms  ({rows} rows)", flush=True)
    arch = time_archive(url, tmp / label)
    print(f"[{label}] archive_run of one run into the filled store: median {arch:.1f} ms", flush=True)
    return max(p50 for p50, _, _ in results.values()), arch


def _bench_pg_url(given: str | None) -> str | None:
    if given:
        return given
    env = os.environ.get("PERFWATCH_TEST_DATABASE_URL")
    if not env:
        return None
    url = make_url(env).set(database="perfwatch_bench")
    from sqlalchemy import create_engine

    admin = create_engine(make_url(env), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = 'perfwatch_bench'")):
            conn.exec_driver_sql("CREATE DATABASE perfwatch_bench")
    admin.dispose()
    return url.render_as_string(hide_password=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--postgres-url", help="PostgreSQL URL of a scratch database (its public schema is dropped)")
    ap.add_argument("--no-postgres", action="store_true", help="SQLite only")
    ap.add_argument("--repeats", type=int, default=15, help="calls per named query")
    ap.add_argument("--keep", type=Path, help="keep the SQLite store and archive under this directory")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="perfwatch-bench-store-"))
    tmp.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    data = synthesize()
    print(
        f"synthesized {len(data['models'])} models, {len(data['runs'])} runs, {len(data['step_samples'])} step "
        f"samples, {len(data['op_stats'])} op-stat rows in {time.perf_counter() - t:.1f} s",
        flush=True,
    )
    sqlite_path = tmp / "bench.db"
    for p in (sqlite_path, Path(f"{sqlite_path}-wal"), Path(f"{sqlite_path}-shm")):
        p.unlink(missing_ok=True)
    sqlite_max, sqlite_arch = bench_one("sqlite", f"sqlite:///{sqlite_path}", data, args.repeats, tmp)
    pg_max = pg_arch = float("nan")
    pg_url = None if args.no_postgres else _bench_pg_url(args.postgres_url)
    if pg_url:
        with get_engine(pg_url).begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        pg_max, pg_arch = bench_one("postgresql", pg_url, data, args.repeats, tmp)
    else:
        print("[postgresql] skipped: no --postgres-url and no PERFWATCH_TEST_DATABASE_URL")
    archive = max(x for x in (sqlite_arch, pg_arch) if not math.isnan(x))
    if args.keep is None:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"store: postgres_p50_max={pg_max:.1f} ms sqlite_p50_max={sqlite_max:.1f} ms archive={archive:.1f} ms")


if __name__ == "__main__":
    main()
