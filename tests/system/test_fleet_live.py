"""A fleet with no shared disk: docker-compose.yml's Airflow services as processes on this host (as
``test_airflow_live`` starts them), two measuring hosts and one default worker, each with its own
``PERFWATCH_HOME`` and ``TMPDIR``, sharing nothing but an S3 API (moto's server on loopback: model store, scratch
space and archive are ``s3://`` URIs) and the databases (Airflow's metadata and the perfwatch store on
PostgreSQL). The runner is the fake one (``tests.helpers.fake_runner``: no TensorFlow, a real committed XSpace),
each profiled run holding its host for ``PERFWATCH_FAKE_HOLD_S`` (:data:`HOLD_S`) so that two measurements on one
host would overlap in time.

Both measuring hosts run compose's one measuring worker, ``airflow-worker-gpu``'s command (Celery concurrency 1 on
the ``gpu`` and ``cpu`` queues: every kind of such a host), with ``AIRFLOW__CELERY__WORKER_CONCURRENCY=2`` in their
environment, so only the command's ``--concurrency 1`` keeps one host's measurements apart; the
``perfwatch_profile`` pool has a slot per case, so the pool does not. The nightly DAG run that unpausing starts,
over a config of four cases, three of device ``auto`` (queue ``gpu``, ``PERFWATCH_PROFILE_QUEUE``) and one of
device ``cpu`` with ``queues: {cpu: cpu}`` (the DAG's ``on_cpu`` group): each case's ``measure`` task
(fingerprint, warm-up, profiled run) runs on a measuring host, parse, compare and archive on the default worker.
Checked: every case measured on its kind's queue by a measuring host and archived with its verdict and its
xplane in the S3 archive; the measurements of one host never overlap in time, whatever their kinds; both hosts
measured ``gpu`` cases (N hosts on one queue) and measured at once; each worker downloaded only what its stage
reads (a parse task's log names the samples and the profile, never the model); no worker kept a file of a run.
Needs PostgreSQL and Redis (skips, saying which, without them, as ``test_airflow_live``; ``.ci/run`` fails first
when CI cannot reach them).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from tests.helpers import fake_runner
from tests.helpers.s3 import moto_s3
from tests.system.test_airflow_live import (
    DAG_ID,
    PG_URL,
    REDIS_URL,
    Api,
    Local,
    Services,
    _airflow_db_url,
    _reachable,
    compose,
    free_port,
    task_log,
    wait_for,
    wait_run,
)

MEASURING = ("measure-host-1", "measure-host-2")  # both run compose's measuring worker: queues gpu and cpu
CASES = ("train-bs2", "train-bs4", "train-bs6", "train-bs8-cpu")  # the tiny model: three of device auto, one cpu
QUEUE_OF = {"train-bs2": "gpu", "train-bs4": "gpu", "train-bs6": "gpu", "train-bs8-cpu": "cpu"}
HOLD_S = 6.0  # each profiled run holds its host this long (s): longer than the pulls' stagger, so overlaps show
CONFIG = {
    "queues": {"cpu": "cpu"},
    "defaults": {
        "version": "1",
        "measured_steps": 20,
        "profiled_steps": 3,
        "warmup_max_steps": 20,
        "max_other_cpu_share": 1.0,
        "max_steal_share": 1.0,
        "warmup_cv_max": 1.0,
    },
    "models": [
        {"model": "tiny", "matrix": {"batch_size": [2, 4, 6]}},
        {"model": "tiny", "batch_size": 8, "device": "cpu"},
    ],
}


def _interval(ti: dict) -> tuple[dt.datetime, dt.datetime]:
    return dt.datetime.fromisoformat(ti["start_date"]), dt.datetime.fromisoformat(ti["end_date"])


def _overlap(a: dict, b: dict) -> bool:
    (s1, e1), (s2, e2) = _interval(a), _interval(b)
    return s1 < e2 and s2 < e1


def _run_files(root: Path) -> list[str]:
    """Files of a run anywhere under ``root``: models, runner results, profiles, parsed tables, Data Docs."""
    pats = ("*.keras", "*.xplane.pb", "result.json", "parsed.json", "*.html")
    return sorted(str(p.relative_to(root)) for pat in pats for p in root.rglob(pat))


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.airflow_live
@pytest.mark.timeout(900)
def test_measuring_hosts_and_no_shared_disk_on_a_live_celery_airflow(tmp_path):
    if not PG_URL:
        pytest.skip("the live fleet test needs PostgreSQL: set PERFWATCH_TEST_DATABASE_URL (.ci/run does)")
    for url, port, name in ((PG_URL, 5432, "PostgreSQL"), (REDIS_URL, 6379, "Redis")):
        if why := _reachable(url, port):
            pytest.skip(f"the live fleet test needs {name}, not reachable: {why}")
    import redis
    import yaml
    from sqlalchemy import select

    from tasks.store import Run, session_scope
    from tests.conftest import _fresh_pg_url

    redis.Redis.from_url(REDIS_URL).flushdb()
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    with moto_s3() as s3:
        model = fake_runner.write_model(tmp_path / "src" / "model.keras")
        s3.fs().put_file(str(model), f"{s3.bucket}/models/tiny/1/model.keras")
        local = Local(
            tmp=tmp_path,
            home=tmp_path / "unused-shared-home",  # compose's shared volume: no service gets it
            redis_url=REDIS_URL,
            api_port=free_port(),
            databases={"airflow": _airflow_db_url(), "perfwatch": _fresh_pg_url()},
        )
        specs = compose()["services"]
        services = {
            "airflow-init": specs["airflow-init"],
            "airflow-apiserver": specs["airflow-apiserver"],
            "airflow-scheduler": specs["airflow-scheduler"],
            "airflow-dag-processor": specs["airflow-dag-processor"],
            "airflow-worker": specs["airflow-worker"],
            **dict.fromkeys(MEASURING, specs["airflow-worker-gpu"]),  # one measuring worker per host, two hosts
        }

        def own(service: str) -> Path:
            return tmp_path / "hosts" / service

        def env(service: str, spec: dict) -> dict[str, str]:  # this service's host: its own dirs, S3 for the rest
            e = Local.env(local, service, spec)
            for d in ("home", "tmp"):
                (own(service) / d).mkdir(parents=True, exist_ok=True)
            e.update(s3.env)
            e.update(
                {
                    "PERFWATCH_HOME": str(own(service) / "home"),
                    "TMPDIR": str(own(service) / "tmp"),
                    "PERFWATCH_MODEL_STORE": s3.uri("models"),
                    "PERFWATCH_SCRATCH": s3.uri("scratch"),
                    "PERFWATCH_ARCHIVE": s3.uri("archive"),
                    "PERFWATCH_RUNNER_COMMAND": fake_runner.command(),
                    "PERFWATCH_CONFIG": str(cfg),
                    "PERFWATCH_FAKE_HOLD_S": str(HOLD_S),
                }  # AIRFLOW__CELERY__WORKER_CONCURRENCY stays Local.env's 2: only the command's --concurrency 1 is 1
            )
            e.pop("PERFWATCH_RUNNER_PYTHON", None)
            return e

        local.env = env  # type: ignore[method-assign]
        procs = Services(local)
        try:
            procs.run("airflow-init", services.pop("airflow-init"), timeout=600)
            # the API server first: the pool is resized before the scheduler starts. Airflow's scheduler takes the
            # pool rows FOR UPDATE NOWAIT and, under psycopg 3, does not recognise the lock-not-available error
            # (airflow.utils.sqlalchemy.is_lock_not_available_error reads psycopg2's pgcode): a PATCH that held
            # the row at that moment made the scheduler exit with LockNotAvailable (seen once in CI)
            procs.start("airflow-apiserver", services.pop("airflow-apiserver"), ())
            api = Api(f"http://127.0.0.1:{local.api_port}")
            wait_for("the API server", lambda: api.call("GET", "/api/v2/monitor/health")[0] == 200, procs, 300, 1)
            pw_file = tmp_path / "airflow" / "airflow-apiserver" / "simple_auth_manager_passwords.json.generated"
            api.login("airflow", json.loads(pw_file.read_text())["airflow"])
            # a slot per case: the pool never keeps two measurements apart, only each host's worker does
            pool = {"pool": "perfwatch_profile", "slots": len(CASES), "include_deferred": False}
            status, body = api.call("PATCH", "/api/v2/pools/perfwatch_profile?update_mask=slots", pool)
            assert status == 200, body
            for service, spec in services.items():
                worker = procs.command(spec)[1:3] == ["celery", "worker"]
                procs.start(service, spec, ("--celery-hostname", f"{service}@%h") if worker else ())
            wait_for(
                f"the dag-processor to parse {DAG_ID}",
                lambda: api.call("GET", f"/api/v2/dags/{DAG_ID}")[0] == 200,
                procs,
                300,
                1,
            )
            # unpausing starts the latest nightly run (no catchup): every case of the config
            status, _ = api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
            assert status == 200
            run_id = wait_for(
                "the nightly run",
                lambda: [r["dag_run_id"] for r in api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")[1]["dag_runs"]],
                procs,
                120,
                1,
            )[0]
            assert run_id.startswith("scheduled__"), run_id
            run = wait_run(api, procs, run_id, timeout=600)
            status, body = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=100")
            assert status == 200, body
            tis = body["task_instances"]
            # the night's paired confirmations (watch_trend found no tentative slowdown): mapped over none, skipped
            confirming = [t for t in tis if t["task_id"].startswith("confirm")]
            assert confirming and {t["state"] for t in confirming} <= {"skipped", "removed"}, confirming
            tis = [t for t in tis if not t["task_id"].startswith("confirm")]
            archived: list = []
            states = sorted((t["task_id"], t["map_index"], t["state"]) for t in tis)
            assert run["state"] == "success", f"{states}\n{procs.report()}"
            measures = [t for t in tis if t["task_id"].split(".")[-1] == "measure"]
            assert sorted(t["rendered_map_index"] for t in measures) == [f"tiny {c}" for c in CASES], measures
            shown = sorted((t["hostname"], t["queue"], *map(str, _interval(t))) for t in measures)
            for t in measures:  # each case measured on its kind's queue, by a measuring host
                queue = QUEUE_OF[t["rendered_map_index"].removeprefix("tiny ")]
                assert (t["task_id"], t["queue"]) == ({"gpu": "measure", "cpu": "on_cpu.measure"}[queue], queue), t
                assert t["hostname"] in MEASURING, t
            by_host = {h: [t for t in measures if t["hostname"] == h] for h in MEASURING}
            for host, mine in by_host.items():  # one host: one measurement at a time, of any kind
                overlapping = [
                    (a["queue"], b["queue"]) for i, a in enumerate(mine) for b in mine[i + 1 :] if _overlap(a, b)
                ]
                assert not overlapping, (host, overlapping, shown)
            # N hosts on one queue: both measured gpu cases, and the two hosts measured at once
            assert all(any(t["queue"] == "gpu" for t in mine) for mine in by_host.values()), shown
            a, b = by_host.values()
            assert any(_overlap(x, y) for x in a for y in b), shown
            for t in tis:  # nothing but the measurement on a measuring host
                assert (t["hostname"] in MEASURING) == (t["task_id"].split(".")[-1] == "measure"), (
                    t["task_id"],
                    t["hostname"],
                )
            for t in tis:  # each archive task returned the verdict the store holds
                if t["task_id"].split(".")[-1] == "archive":
                    status, xcom = api.call(
                        "GET",
                        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{t['task_id']}/xcomEntries/"
                        f"return_value?map_index={t['map_index']}&deserialize=true",
                    )
                    assert status == 200, xcom
                    archived.append(xcom["value"])
            parse_log = task_log(api, run_id, next(t for t in tis if t["task_id"] == "parse"))
            fetched = re.search(r"scratch: downloaded \d+ file\(s\) from s3://\S+: (.*)", parse_log)
            assert fetched and "run/result.json" in fetched[1] and ".xplane.pb" in fetched[1], parse_log[-2000:]
            assert "model" not in fetched[1]
        finally:
            procs.stop()
        with session_scope(local.databases["perfwatch"]) as s:
            runs = s.scalars(select(Run).where(Run.dag_run_id == run_id)).all()
            assert sorted((r.case_name, r.status) for r in runs) == [(c, "success") for c in CASES]
            verdicts = {r.case_name: r.verdict for r in runs}
            stored = sorted((r.archive_uri, r.verdict) for r in runs)
            uris = [r.archive_uri for r in runs]
        assert all(u.startswith(s3.uri("archive")) for u in uris), uris
        returned = [v if isinstance(v, dict) else json.loads(v) for v in archived]
        assert sorted((v["archive_uri"], v["verdict"]) for v in returned) == stored
        assert set(verdicts.values()) <= {"no-baseline", "inconclusive"}, verdicts  # a first run of each case
        archived = s3.keys("archive")
        for u in uris:
            prefix = u.removeprefix(f"s3://{s3.bucket}/")
            assert any(k.startswith(prefix) and k.endswith(".xplane.pb") for k in archived), (u, archived)
        assert s3.keys("scratch") == []  # every run's scratch went with its archive
    for service in ("airflow-worker", *MEASURING):  # no worker kept a model, a result, a profile or Data Docs
        assert _run_files(own(service)) == [], service
    assert not local.home.exists()
