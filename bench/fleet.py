"""Benchmark: does a platform team's night fit? 100 models x 8 cases: DAG parse time, planning time, and the night's
wall time on K measuring workers.

Run: ``.venv/bin/python bench/fleet.py`` (options: ``--models N`` (default 100), ``--workers 1,2,4,...``,
``--cases-json FILE`` the per-case times, ``--night N`` which night of that file, ``--night-hours H`` (default 8),
``--repeats R`` parse and planning repeats (default 5), ``--night-total-s S`` scale the recorded cases' times so
that one model's cases sum to S seconds, keeping their shares: e.g. times recorded on a busy host, scaled to a
quiet host's night).

1. Writes a config of ``--models`` models (``fleet_m000``...), each with the demo's benchmark matrix
   (``config/perfwatch.yaml``'s demo_mobilenet entry: 8 cases), to a temporary file; ``PERFWATCH_CONFIG`` points
   at it, as a deployment's would. Nothing is committed: the config is made here.
2. **DAG parse time, the dag-processor's measure.** ``R`` fresh interpreters each do what Airflow 3's
   dag-processor does with ``dags/perfwatch_profile.py`` in its parsing process (``airflow.dag_processing.
   processor._parse_file``): import the Airflow modules the file names (``parsing_pre_import_modules``,
   not timed, as the processor's parent has them loaded), then load the file into a ``DagBag`` (the ``duration``
   that ``airflow dags report`` prints, ``FileLoadStat.duration``) and serialize its DAGs
   (``DagSerialization.to_dict``). Reported: the median DagBag duration and DagBag + serialization (wall, the
   processor's ``last_duration`` less its fork), against the target of 2 s, and their CPU time (the process's:
   what the figure is on a quiet host, whatever the load), beside the same for the shipped config.
3. **Planning time.** The ``plan`` task's work, ``tasks.stages.pipeline.plan_cases`` for a scheduled run (the
   store migration check on an up-to-date SQLite store, the config read and its matrices expanded by
   ``tasks/matrix.py``, one run-state XCom dict per case), timed ``R`` times in this process after one untimed
   call (imports, the store created); the median (wall and CPU) against the target of 10 s.
4. **A night on K measuring workers.** Each case's stage times come from ``bench/matrix.py --cases-json``
   (JSON lines, one per case and night; default ``bench/data/matrix_cases.jsonl``, recorded on the 2-core dev
   machine, the night given by ``--night``, default the last: the night on which nothing changed). Every model
   is given those 8 cases' times. A case is pull (any worker), then fingerprint + warm-up + profiled run on one
   measuring worker, alone on its host (the per-host rule), then parse, compare and archive (any worker; those
   are not the bottleneck and run at once). The measuring parts are list-scheduled (``schedule``): each case in
   turn goes to the measuring worker that is free first, and starts when that worker is free and its pull has
   ended. Two orders: the planned order (what Airflow does: mapped task instances of equal priority go in map
   index order) and longest-first (LPT, Graham 1969: within 4/3 of the best possible). Printed per K: the
   night's wall time (last archive), the sum of the cases' times, the lower bound max(sum of measuring times / K,
   the longest case), the workers' utilization, and whether it fits in ``--night-hours``.
5. **Airflow's own caps.** The parsed DAG's ``max_active_tasks`` (``PERFWATCH_MAX_ACTIVE_TASKS``, default 128;
   Airflow's own default, ``[core] max_active_tasks_per_dag``, is 16) and ``[core] parallelism`` (per scheduler,
   default 32) as this environment sets them (``AIRFLOW__CORE__PARALLELISM``; docker-compose.yml: 128): no more
   task instances run at once, so K measuring hosts above the smaller of the two are idle and the night is
   simulated on that many; ``[core] max_map_length`` (default 1024; compose 4096) against the night's cases
   (above it the plan task refuses the night by name).

Each figure has the host's 1-min load beside it. Last line, JSON: ``{"bench": "fleet", "models": ..., "cases": ...,
"parse_s": ..., "parse_serialize_s": ..., "parse_cpu_s": ..., "plan_s": ..., "plan_cpu_s": ..., "sum_case_s": ...,
"walls_s": {"K": ...}, "min_workers_for_night": ..., "airflow_caps": {"max_active_tasks": ..., "parallelism": ...,
"max_map_length": ...}, "load": ...}``.

Last run (2026-12-01, 2-core dev machine, ``--night-total-s 930``: the shipped config's unchanged night on a quiet
host): parse 0.78 s DagBag, 1.16 s with serialization, 0.68 s CPU (load 2.9-3.0; shipped config 0.44 / 0.77 /
0.63 s); planning 800 cases 0.18 s (0.10 s CPU); the cases sum to 25 h 50 m; wall 24 h 57 m on 1 worker, 6 h 16 m
on 4 (the first K that fits 8 h), 3 h 10 m on 8, 28 min on 64. With Airflow's caps (2026-12-02, ``--repeats 1``, the
recorded night unscaled, load 1.5): the DAG's max_active_tasks 128 but ``[core] parallelism`` left at its 32, so
K = 64 measured no faster than K = 32 (3 h 30 m both, "Airflow's caps let 32 of the 64 measure"); compose sets 128.
"""

from __future__ import annotations

import argparse
import copy
import heapq
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DAG_FILE = ROOT / "dags" / "perfwatch_profile.py"
CASES_JSON = ROOT / "bench" / "data" / "matrix_cases.jsonl"
MEASURING = ("env-fingerprint", "warm-up", "profiled-run")  #: the stages on the case's measuring host
BEFORE = ("pull-model-version",)
AFTER = ("parse", "baseline-compare", "archive")
PARSE_TARGET_S, PLAN_TARGET_S = 2.0, 10.0


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass(frozen=True)
class CaseTime:
    """One case's times in seconds: ``before`` (pull, any worker), ``measure`` (fingerprint + warm-up + profiled
    run, on a measuring worker), ``after`` (parse, compare, archive, any worker)."""

    name: str
    before: float
    measure: float
    after: float

    @property
    def total(self) -> float:
        return self.before + self.measure + self.after


@dataclass(frozen=True)
class Night:
    """A simulated night: ``wall_s`` (the last case's archive ends), ``busy_s`` (sum of the measuring times),
    ``workers`` and each case's measuring start (s from the night's start), in the cases' order."""

    wall_s: float
    busy_s: float
    workers: int
    starts: tuple[float, ...]

    @property
    def utilization(self) -> float:
        """Share of the K workers' wall time spent measuring (0..1)."""
        return self.busy_s / (self.workers * self.wall_s) if self.wall_s > 0 else 0.0


def schedule(cases: Sequence[CaseTime], workers: int, *, longest_first: bool = False) -> Night:
    """List scheduling of the cases' measuring parts on ``workers`` identical measuring workers.

    Each case's pull starts at 0 (pulls run on the general workers, which are not the bottleneck); in list order
    (``cases`` as given, or by measuring time descending with ``longest_first``: LPT) each case goes to the
    measuring worker that is free first and starts measuring when that worker is free and its pull has ended;
    its parse/compare/archive follow at once. Returns the :class:`Night` (starts in the order of ``cases``).

    Raises:
        ValueError: ``workers`` < 1 or a negative time (names the case).
    """
    if workers < 1:
        raise ValueError(f"workers: expected at least 1, got {workers}")
    for c in cases:
        if min(c.before, c.measure, c.after) < 0:
            raise ValueError(f"case {c.name}: negative time {c}")
    order = sorted(range(len(cases)), key=lambda i: -cases[i].measure) if longest_first else range(len(cases))
    free = [0.0] * workers  # a heap of the times each worker becomes free
    starts = [0.0] * len(cases)
    wall = 0.0
    for i in order:
        c = cases[i]
        start = max(heapq.heappop(free), c.before)
        heapq.heappush(free, start + c.measure)
        starts[i] = start
        wall = max(wall, start + c.measure + c.after)
    return Night(wall_s=wall, busy_s=sum(c.measure for c in cases), workers=workers, starts=tuple(starts))


def read_cases(path: Path, night: int | None) -> tuple[list[CaseTime], dict[str, Any]]:
    """The cases of one night of a ``bench/matrix.py --cases-json`` file (default: its last night) and what the
    file says about them (night, measured steps, load range). Raises ValueError for an empty file or a night
    that is not there, or a failed case (its times are not a case's)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path}: no cases (expected bench/matrix.py --cases-json lines)")
    nights = sorted({r["night"] for r in rows})
    n = nights[-1] if night is None else night
    chosen = [r for r in rows if r["night"] == n]
    if not chosen:
        raise ValueError(f"{path}: no night {n} (nights there: {nights})")
    failed = [r["case"] for r in chosen if r.get("error")]
    if failed:
        raise ValueError(f"{path}: night {n} has failed cases {failed}: their times are not a case's")
    cases = [
        CaseTime(
            name=r["case"],
            before=sum(r["stages"].get(s, 0.0) for s in BEFORE),
            measure=sum(r["stages"].get(s, 0.0) for s in MEASURING),
            after=sum(r["stages"].get(s, 0.0) for s in AFTER),
        )
        for r in chosen
    ]
    loads = [r.get("load") for r in chosen if r.get("load") is not None]
    about = {"night": n, "nights": nights, "load_min": min(loads, default=None), "load_max": max(loads, default=None)}
    return cases, about


def fleet_config(models: int, path: Path) -> Path:
    """Write a config of ``models`` models, each with the shipped demo entry's matrix (8 cases), to ``path``."""
    shipped = yaml.safe_load((ROOT / "config" / "perfwatch.yaml").read_text())
    demo = next(e for e in shipped["models"] if e.get("model") == "demo_mobilenet")
    entries = [{**copy.deepcopy(demo), "model": f"fleet_m{i:03d}"} for i in range(models)]  # no YAML aliases
    path.write_text(yaml.safe_dump({"defaults": shipped.get("defaults", {}), "models": entries}, sort_keys=False))
    return path


_PARSE = r"""
import json, sys, time
path = sys.argv[1]
from airflow.dag_processing.processor import _pre_import_airflow_modules
import structlog
_pre_import_airflow_modules(path, structlog.get_logger())  # the processor's parent has these loaded
from pathlib import Path
from airflow.dag_processing.dagbag import BundleDagBag
from airflow.serialization.serialized_objects import DagSerialization
t0, c0 = time.perf_counter(), time.process_time()
bag = BundleDagBag(dag_folder=path, bundle_path=Path(path).parent, bundle_name="dags-folder", load_op_links=False)
t1, c1 = time.perf_counter(), time.process_time()
data = [DagSerialization.to_dict(d) for d in bag.dags.values()]
t2, c2 = time.perf_counter(), time.process_time()
stat = bag.dagbag_stats[0]
from airflow.configuration import conf
dag = next(iter(bag.dags.values()), None)
print(json.dumps({"dagbag_s": stat.duration.total_seconds(), "load_s": t1 - t0, "serialize_s": t2 - t1,
                  "load_cpu_s": c1 - c0, "serialize_cpu_s": c2 - c1,
                  "dags": stat.dag_num, "tasks": stat.task_num,
                  "max_active_tasks": dag.max_active_tasks if dag else None,
                  "parallelism": conf.getint("core", "parallelism"),
                  "max_map_length": conf.getint("core", "max_map_length"),
                  "errors": {k: v[-300:] for k, v in bag.import_errors.items()}}))
"""


def parse_times(config: Path, repeats: int) -> dict[str, Any]:
    """DAG parse of ``dags/perfwatch_profile.py`` with ``PERFWATCH_CONFIG=config`` in ``repeats`` fresh
    interpreters: medians of the DagBag duration and of DagBag + serialization (s), the DAG's task count, the
    loads. Raises RuntimeError when the file does not parse (the import error)."""
    env = {
        **os.environ,
        "PERFWATCH_CONFIG": str(config),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    runs, loads = [], []
    for _ in range(repeats):
        loads.append(_load())
        out = subprocess.run(
            [sys.executable, "-c", _PARSE, str(DAG_FILE)], env=env, capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if r["errors"] or r["dags"] != 1:
            raise RuntimeError(f"{DAG_FILE} did not parse with {config}: {r['errors']}")
        runs.append(r)
    return {
        "dagbag_s": statistics.median(r["dagbag_s"] for r in runs),
        "with_serialize_s": statistics.median(r["load_s"] + r["serialize_s"] for r in runs),
        "cpu_s": statistics.median(r["load_cpu_s"] + r["serialize_cpu_s"] for r in runs),
        "all_dagbag_s": [round(r["dagbag_s"], 3) for r in runs],
        "tasks": runs[0]["tasks"],
        "caps": {k: runs[0][k] for k in ("max_active_tasks", "parallelism", "max_map_length")},
        "loads": loads,
    }


def plan_times(config: Path, repeats: int) -> dict[str, Any]:
    """``plan_cases`` for a scheduled run with ``config``, in a temporary ``PERFWATCH_HOME`` (SQLite store,
    migrated by the first, untimed, call): median and all times (s), the number of cases and the loads."""
    home = Path(tempfile.mkdtemp(prefix="perfwatch-bench-fleet-"))
    saved = {k: os.environ.get(k) for k in ("PERFWATCH_HOME", "PERFWATCH_CONFIG", "PERFWATCH_DATABASE_URL")}
    os.environ.update({"PERFWATCH_HOME": str(home), "PERFWATCH_CONFIG": str(config)})
    os.environ.pop("PERFWATCH_DATABASE_URL", None)
    try:
        from tasks.settings import Settings
        from tasks.stages.pipeline import plan_cases

        settings = Settings.from_env()
        n = len(plan_cases("perfwatch_profile", "scheduled__warm", "scheduled", {}, settings))
        times, cpus, loads = [], [], []
        for i in range(repeats):
            loads.append(_load())
            t0, c0 = time.perf_counter(), time.process_time()
            states = plan_cases("perfwatch_profile", f"scheduled__{i}", "scheduled", {}, settings)
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            assert len(states) == n
        return {
            "plan_s": statistics.median(times),
            "cpu_s": statistics.median(cpus),
            "all_s": [round(t, 3) for t in times],
            "cases": n,
            "loads": loads,
        }
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _hms(s: float) -> str:
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m" if s >= 3600 else f"{s / 60:.1f} min"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--workers", default="1,2,4,8,16,32,64", help="comma-separated K values")
    ap.add_argument("--cases-json", type=Path, default=CASES_JSON, help="bench/matrix.py --cases-json output")
    ap.add_argument("--night", type=int, default=None, help="the night of that file (default: its last)")
    ap.add_argument("--night-hours", type=float, default=8.0, help="the window a night must fit in")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--night-total-s",
        type=float,
        default=None,
        help="scale the recorded cases' times so one model's cases sum to this (e.g. a quiet host's bench/matrix.py "
        "night), keeping their shares",
    )
    args = ap.parse_args(argv)
    ks = sorted({int(k) for k in args.workers.split(",")})
    print(f"host: {os.cpu_count()} CPUs, 1-min load at start {_load():.2f}", flush=True)

    with tempfile.TemporaryDirectory(prefix="perfwatch-fleet-") as tmp:
        config = fleet_config(args.models, Path(tmp) / "fleet.yaml")
        shipped_parse = parse_times(ROOT / "config" / "perfwatch.yaml", args.repeats)
        parse = parse_times(config, args.repeats)
        plan = plan_times(config, args.repeats)
    ok = "ok" if parse["with_serialize_s"] < PARSE_TARGET_S else "MISSES"
    print(
        f"DAG parse, {args.models} models x 8 cases ({parse['tasks']} tasks, {args.models} release Assets): DagBag "
        f"{parse['dagbag_s']:.3f} s, with serialization {parse['with_serialize_s']:.3f} s wall, "
        f"{parse['cpu_s']:.3f} s CPU (median of {args.repeats} fresh interpreters, DagBag: {parse['all_dagbag_s']}; "
        f"target < {PARSE_TARGET_S} s: {ok}); load {min(parse['loads']):.2f}-{max(parse['loads']):.2f}",
        flush=True,
    )
    print(
        f"DAG parse, the shipped config: DagBag {shipped_parse['dagbag_s']:.3f} s, with serialization "
        f"{shipped_parse['with_serialize_s']:.3f} s wall, {shipped_parse['cpu_s']:.3f} s CPU; load "
        f"{min(shipped_parse['loads']):.2f}-{max(shipped_parse['loads']):.2f}",
        flush=True,
    )
    ok = "ok" if plan["plan_s"] < PLAN_TARGET_S else "MISSES"
    print(
        f"planning, {plan['cases']} cases: {plan['plan_s']:.3f} s wall, {plan['cpu_s']:.3f} s CPU (median of "
        f"{args.repeats}: {plan['all_s']}; target < {PLAN_TARGET_S} s: {ok}); load "
        f"{min(plan['loads']):.2f}-{max(plan['loads']):.2f}",
        flush=True,
    )

    one, about = read_cases(args.cases_json, args.night)
    if args.night_total_s is not None:
        factor = args.night_total_s / sum(c.total for c in one)
        one = [CaseTime(c.name, c.before * factor, c.measure * factor, c.after * factor) for c in one]
        print(f"cases' times scaled by {factor:.3f} so that one model's {len(one)} cases sum to {args.night_total_s} s")
    cases = [
        CaseTime(f"fleet_m{m:03d} {c.name}", c.before, c.measure, c.after) for m in range(args.models) for c in one
    ]
    total = sum(c.total for c in cases)
    measure = sum(c.measure for c in cases)
    longest = max(c.before + c.measure + c.after for c in cases)
    print(
        f"cases' times: {args.cases_json.name} night {about['night']} ({len(one)} cases, recorded at load "
        f"{about['load_min']}-{about['load_max']}), each of the {args.models} models given them: "
        f"{len(cases)} cases, sum {total:.0f} s ({_hms(total)}), of which measuring {measure:.0f} s; "
        f"longest case {longest:.0f} s"
    )
    caps = parse["caps"]
    at_once = min(caps["max_active_tasks"], caps["parallelism"])
    mapped = "ok" if len(cases) <= caps["max_map_length"] else "EXCEEDS: plan refuses the night"
    print(
        f"Airflow's caps as this environment sets them: the DAG's max_active_tasks {caps['max_active_tasks']} "
        f"(PERFWATCH_MAX_ACTIVE_TASKS; Airflow's default 16), [core] parallelism {caps['parallelism']} (per "
        f"scheduler; default 32): at most {at_once} task instances at once, so at most {at_once} measuring hosts "
        f"busy; [core] max_map_length {caps['max_map_length']} (default 1024) for {len(cases)} cases: {mapped}"
    )
    head = f"{'K':>4} {'planned order':>14} {'longest first':>14} {'lower bound':>12} {'util':>6}"
    print(f"{head}  fits {args.night_hours:g} h?")
    walls: dict[str, float] = {}
    fits_at = None
    for k in ks:
        planned = schedule(cases, min(k, at_once))
        lpt = schedule(cases, min(k, at_once), longest_first=True)
        bound = max(measure / min(k, at_once), longest)
        walls[str(k)] = round(planned.wall_s, 1)
        fits = planned.wall_s <= args.night_hours * 3600
        if fits and fits_at is None:
            fits_at = k
        capped = f"; Airflow's caps let {at_once} of the {k} measure" if k > at_once else ""
        print(
            f"{k:>4} {_hms(planned.wall_s):>14} {_hms(lpt.wall_s):>14} {_hms(bound):>12} {planned.utilization:>6.0%}  "
            f"{'yes' if fits else 'no'} (sum of cases {_hms(total)}, x{total / planned.wall_s:.1f} by the fleet"
            f"{capped})"
        )
    print(
        json.dumps(
            {
                "bench": "fleet",
                "models": args.models,
                "cases": len(cases),
                "parse_s": round(parse["dagbag_s"], 3),
                "parse_serialize_s": round(parse["with_serialize_s"], 3),
                "parse_cpu_s": round(parse["cpu_s"], 3),
                "plan_s": round(plan["plan_s"], 3),
                "plan_cpu_s": round(plan["cpu_s"], 3),
                "sum_case_s": round(total, 1),
                "walls_s": walls,
                "min_workers_for_night": fits_at,
                "airflow_caps": caps,
                "load": _load(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
