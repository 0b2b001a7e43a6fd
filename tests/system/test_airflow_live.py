"""A real Airflow: the services of docker-compose.yml as processes on this host, a DAG run through the REST API.

``test_dag_runs_on_a_live_celery_airflow`` runs ``airflow-init``'s command, then starts the other Airflow
services of ``docker-compose.yml`` (api-server, scheduler, dag-processor, a Celery worker on ``default``
and one on ``gpu``) with the commands and the ``environment`` compose gives their containers. Only what
differs between containers and processes of one host is changed (:meth:`Local.env`): hosts and ports
(PostgreSQL, Redis, the API server), paths (``/opt/perfwatch`` is this checkout, ``/perfwatch`` a tmp
``PERFWATCH_HOME``, the GPU worker's TF venv is this interpreter), one ``AIRFLOW_HOME`` per service (as
each container has its own), a shared log folder (so the API server reads the workers' task logs), a
log-server port and a host name per worker, and the sizes of the API server's and workers' process pools
(2 cores). A variable compose adds that cannot be made local fails the test, naming it: compose and
test cannot drift apart.

It then triggers ``perfwatch_profile`` through the stable REST API (JWT from ``POST /auth/token`` with
the simple auth manager's generated password), unpauses the DAG, and checks the task instances, where
they ran (``hostname``/``queue``: the measure task, fingerprint, warm-up and profiled run, on the ``gpu`` worker), the
stored run and its archived profile; a release gate of a heavier version must end ``failed`` with the
regression in the archive task's log, read through the REST API. ``perfwatch doctor`` runs first, with the
scheduler's environment: every check passes, its trivial task runs on both queues.

Needs PostgreSQL (``PERFWATCH_TEST_DATABASE_URL``: the perfwatch store; the Airflow metadata database
is ``PERFWATCH_TEST_AIRFLOW_DATABASE_URL``, default ``<that database>_airflow`` on the same server,
created when missing) and Redis (``PERFWATCH_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``;
the test empties that Redis database). Skips, saying which, when either cannot be reached. Every process
runs in its own process group, stopped (SIGTERM, then SIGKILL) when the test ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT as ROOT

BIN = Path(sys.executable).parent
COMPOSE = ROOT / "docker-compose.yml"
DAG_ID = "perfwatch_profile"
PG_URL = os.environ.get("PERFWATCH_TEST_DATABASE_URL")
REDIS_URL = os.environ.get("PERFWATCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
GPU_STAGES = {"measure"}  # fingerprint, warm-up and profiled run: one task, one host
# Case fields of the trigger's conf: a tiny, short run. The Airflow services share this host with the
# runner (on a real GPU worker they do not), so their CPU time must not turn the verdict inconclusive, nor keep
# v1 from becoming the baseline (a busy or unsteady run is not accepted by itself: issue 26).
TINY = {
    "model": "tiny",
    "batch_size": 4,
    "measured_steps": 10,
    "warmup_max_steps": 20,
    "max_other_cpu_share": 1.0,
    "max_steal_share": 1.0,
    "warmup_cv_max": 1.0,
}


def compose() -> dict:
    """docker-compose.yml as parsed by YAML (anchors and ``<<`` merge keys resolved)."""
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_is_valid_against_the_compose_specification():
    """docker-compose.yml against the Compose Specification's JSON schema (the copy check-jsonschema
    vendors from github.com/compose-spec/compose-spec, schema/compose-spec.json)."""
    from importlib.resources import files

    import jsonschema

    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    doc = compose()
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    assert not errors, "docker-compose.yml breaks the Compose Specification:\n" + "\n".join(errors)
    bad = json.loads(json.dumps(doc))  # the check can fail: a misspelt service key is rejected
    bad["services"]["airflow-scheduler"]["comand"] = "airflow scheduler"
    assert any("comand" in e.message for e in validator.iter_errors(bad))


def _worker_options(spec: dict) -> dict[str, str] | None:
    """``--queues`` and ``--concurrency`` of a compose service that runs ``airflow celery worker``, else None."""
    cmd = shlex.split(spec["command"]) if isinstance(spec.get("command"), str) else list(spec.get("command") or [])
    if cmd[:3] != ["airflow", "celery", "worker"]:
        return None
    return {k: v for k, v in zip(cmd[3:], cmd[4:], strict=False) if k.startswith("--")}


def test_compose_has_one_measuring_worker_per_host_serving_its_kinds_and_airflows_caps_raised():
    """The per-host rule in compose: the host's one measuring worker serves every measuring queue of its kinds
    (PERFWATCH_PROFILE_QUEUE's gpu and cpu) with concurrency 1, so a cpu case and a gpu case never measure on it at
    once; no other worker serves a measuring queue, none is opt-in. Airflow's caps are raised for a fleet's night."""
    services = compose()["services"]
    workers = {name: opts for name, spec in services.items() if (opts := _worker_options(spec)) is not None}
    env = services["airflow-worker-gpu"]["environment"]
    measuring = {env["PERFWATCH_PROFILE_QUEUE"], "cpu"}
    serving = {n: o for n, o in workers.items() if measuring & set(o.get("--queues", "default").split(","))}
    assert serving == {"airflow-worker-gpu": {"--queues": "gpu,cpu", "--concurrency": "1"}}, workers
    assert not any(spec.get("profiles") for spec in services.values()), "an opt-in service starts a second host"
    assert int(env["AIRFLOW__CORE__MAX_MAP_LENGTH"]) >= 3000  # 100 models x 30 cases
    assert int(env["AIRFLOW__CORE__PARALLELISM"]) >= 64 and int(env["PERFWATCH_MAX_ACTIVE_TASKS"]) >= 64
    assert float(env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT"]) > 0


_INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?::-(?P<default>[^}]*))?\}")


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${NAME}`` / ``${NAME:-default}`` interpolation of one value (``variables`` = the shell)."""
    return _INTERPOLATION.sub(lambda m: variables.get(m["name"]) or (m["default"] or ""), str(value))


def test_interpolation_follows_compose():
    assert interpolate("${A:-x}/${B:-y}/${C}", {"A": "a", "B": ""}) == "a/y/"


@dataclass
class Local:
    """Where this host runs what compose addresses by service name and container path."""

    tmp: Path
    home: Path  # PERFWATCH_HOME (compose: the perfwatch-data volume at /perfwatch)
    databases: dict[str, str]  # compose database name -> local SQLAlchemy URL
    redis_url: str
    api_port: int
    shell: dict[str, str] = field(default_factory=dict)  # what compose interpolates ${...} from

    def value(self, service: str, key: str, value: str) -> str:
        """``value`` of compose variable ``key`` with hosts, ports and paths made local.

        Raises:
            AssertionError: a URL host or an absolute path this mapping does not know.
        """
        value = interpolate(value, self.shell)
        scheme, url_sep, rest = value.partition("://")  # urlsplit rejects schemes like postgresql+psycopg_async
        u = urllib.parse.urlsplit("//" + rest)
        if url_sep and u.hostname:
            if u.hostname == "postgres":
                db = u.path.lstrip("/")
                assert db in self.databases, f"{service}: {key}={value}: no local database for {db!r}"
                t = urllib.parse.urlsplit(self.databases[db])
            elif u.hostname == "redis":
                t = urllib.parse.urlsplit(self.redis_url)
            elif u.hostname == "airflow-apiserver":
                t = urllib.parse.urlsplit(f"http://127.0.0.1:{self.api_port}{u.path}")
            else:
                raise AssertionError(f"{service}: {key}={value}: host {u.hostname!r} has no local stand-in")
            return f"{scheme}://{t.netloc}{t.path}" + (f"?{u.query}" if u.query else "")
        paths = {"/opt/perfwatch": ROOT, "/perfwatch": self.home, "/opt/tf-gpu/bin/python": Path(sys.executable)}
        for prefix, local in paths.items():
            if value == prefix or value.startswith(prefix + "/"):
                return str(local) + value[len(prefix) :]
        assert not value.startswith("/"), f"{service}: {key}={value}: path has no local stand-in"
        return value

    def env(self, service: str, spec: dict) -> dict[str, str]:
        """The process environment of compose ``service``: its ``environment``, made local, plus what a
        container has of its own (AIRFLOW_HOME, host name, log-server port) and pool sizes for 2 cores."""
        env = {k: self.value(service, k, v) for k, v in (spec.get("environment") or {}).items()}
        hook = self.tmp / "hostname_hook"
        env.update(
            {
                "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",  # the image's PATH has its venv first
                "HOME": os.environ.get("HOME", str(self.tmp)),
                "LANG": "C.UTF-8",
                "AIRFLOW_HOME": str(self.tmp / "airflow" / service),
                "PYTHONPATH": f"{env.get('PYTHONPATH', ROOT)}:{hook}",
                # containers have their own host names: the task instances' `hostname` says which worker ran them
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "live_hostname.hostname",
                "PERFWATCH_LIVE_HOSTNAME": service,
                # one host: the workers' log servers need ports of their own, the API server reads logs from disk
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.tmp / "task-logs"),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.api_port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            }
        )
        hook.mkdir(exist_ok=True)
        (hook / "live_hostname.py").write_text(
            "import os\n\n\ndef hostname():\n    return os.environ['PERFWATCH_LIVE_HOSTNAME']\n"
        )
        return env


def test_compose_environment_is_made_local(tmp_path):
    """Every Airflow service's compose environment maps to this host (no service host name, no container
    path left), keeping compose's URL schemes; a host the mapping does not know fails, naming it."""
    local = Local(
        tmp=tmp_path,
        home=tmp_path / "pw",
        redis_url="redis://127.0.0.1:6379/5",
        api_port=1234,
        databases={"airflow": "postgresql://u@127.0.0.1:5432/af", "perfwatch": "postgresql://u@127.0.0.1:5432/pw"},
    )
    envs = {
        s: local.env(s, spec)
        for s, spec in compose()["services"].items()
        if str(spec.get("image")).startswith("perfwatch-airflow")  # the GPU worker: -gpu
    }
    for service, env in envs.items():
        text = json.dumps(env)
        assert not re.search(r"@(postgres|redis)\b|airflow-apiserver:|\"/(opt/|perfwatch)", text), (service, text)
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "postgresql+psycopg://u@127.0.0.1:5432/af"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == "postgresql+psycopg_async://u@127.0.0.1:5432/af"
        assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://127.0.0.1:6379/5"
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:1234/execution/"
        assert env["PERFWATCH_MODEL_STORE"] == str(tmp_path / "pw" / "models")
    assert envs["airflow-worker-gpu"]["PERFWATCH_RUNNER_PYTHON"] == sys.executable
    assert envs["airflow-worker-gpu"]["PERFWATCH_PROFILE_QUEUE"] == "gpu"
    with pytest.raises(AssertionError, match="host 'flower' has no local stand-in"):
        local.value("x", "FLOWER_URL", "http://flower:5555/")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reachable(url: str, default_port: int) -> str | None:
    u = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((u.hostname or "127.0.0.1", u.port or default_port), timeout=3).close()
    except OSError as e:
        return f"{u.hostname}:{u.port or default_port}: {e}"
    return None


def _airflow_db_url() -> str:
    """The Airflow metadata database: PERFWATCH_TEST_AIRFLOW_DATABASE_URL, else ``<store db>_airflow`` on
    the store's server (created when missing); emptied (schema ``public`` dropped) for a fresh start."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    url = os.environ.get("PERFWATCH_TEST_AIRFLOW_DATABASE_URL")
    if not url:
        store = make_url(PG_URL)
        url = store.set(database=f"{store.database}_airflow").render_as_string(hide_password=False)
        server = create_engine(store.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with server.connect() as conn:
            if not conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": make_url(url).database}):
                conn.execute(text(f'CREATE DATABASE "{make_url(url).database}"'))
        server.dispose()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return url


class Services:
    """The compose services as process groups on this host; :meth:`stop` ends them all."""

    def __init__(self, local: Local):
        self.local, self.procs, self.logs = local, {}, {}
        (local.tmp / "service-logs").mkdir(exist_ok=True)

    def command(self, spec: dict) -> list[str]:
        cmd = spec["command"]
        return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)

    def start(self, service: str, spec: dict, extra_args: tuple[str, ...] = ()) -> None:
        log = self.logs[service] = self.local.tmp / "service-logs" / f"{service}.log"
        self.procs[service] = subprocess.Popen(
            self.command(spec) + list(extra_args),
            env=self.local.env(service, spec),
            cwd=ROOT,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def run(self, service: str, spec: dict, timeout: float) -> None:
        self.start(service, spec)
        try:
            rc = self.procs[service].wait(timeout)
        except subprocess.TimeoutExpired:
            rc = f"still running after {timeout:.0f} s"
        assert rc == 0, f"{service} ({spec['command']}) ended {rc}:\n{self.tail(service)}"

    def tail(self, service: str, n: int = 4000) -> str:
        return self.logs[service].read_text(errors="replace")[-n:]

    def check_alive(self) -> None:
        """Raises AssertionError naming a long-running service that exited, with its output."""
        for service, p in self.procs.items():
            if service != "airflow-init" and p.poll() is not None:
                raise AssertionError(f"{service} exited with {p.returncode}:\n{self.tail(service)}")

    def report(self) -> str:
        return "\n".join(f"--- {s} ---\n{self.tail(s, 2500)}" for s in self.procs)

    def stop(self) -> None:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # the group: task processes and runners a worker left
            p.wait()


class Api:
    """The stable REST API (``/api/v2``) with a JWT from the simple auth manager's ``POST /auth/token``."""

    def __init__(self, base: str):
        self.base, self.token = base, None

    def call(self, method: str, path: str, body: dict | None = None, *, accept: str = "application/json"):
        headers = {"Accept": accept, "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(
            self.base + path, method=method, headers=headers, data=None if body is None else json.dumps(body).encode()
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def login(self, username: str, password: str) -> None:
        status, body = self.call("POST", "/auth/token", {"username": username, "password": password})
        assert status == 201, f"POST /auth/token: {status} {body}"
        self.token = body["access_token"]


def wait_for(what: str, check, services: Services, timeout: float, every: float = 3.0):
    """Poll ``check()`` until it returns a truthy value; fails with the services' output after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        services.check_alive()
        with contextlib.suppress(OSError):
            if result := check():
                return result
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{services.report()}")


@pytest.fixture
def live(tmp_path, home, model_store):
    """The compose services running on this host: yields (api, local, services); stops them after."""
    if not PG_URL:
        pytest.skip("the live Airflow test needs PostgreSQL: set PERFWATCH_TEST_DATABASE_URL (.ci/run does)")
    for url, port, name in ((PG_URL, 5432, "PostgreSQL"), (REDIS_URL, 6379, "Redis")):
        if why := _reachable(url, port):
            pytest.skip(f"the live Airflow test needs {name}, not reachable: {why}")
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()  # no Celery messages of an earlier run
    from tests.conftest import _fresh_pg_url

    local = Local(
        tmp=tmp_path,
        home=home,
        redis_url=REDIS_URL,
        api_port=free_port(),
        databases={"airflow": _airflow_db_url(), "perfwatch": _fresh_pg_url()},
        shell={"AIRFLOW_JWT_SECRET": secrets.token_urlsafe(48), "AIRFLOW_API_SECRET_KEY": secrets.token_urlsafe(32)},
    )
    specs = compose()["services"]
    # what `docker compose up` starts (a service with `profiles:` only on request: there is none)
    airflow_services = {
        s: spec
        for s, spec in specs.items()
        if str(spec.get("image")).startswith("perfwatch-airflow")  # the GPU worker: -gpu and not spec.get("profiles")
    }
    assert {
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-worker",
        "airflow-worker-gpu",
    } <= set(airflow_services)
    services = Services(local)
    try:
        services.run("airflow-init", airflow_services.pop("airflow-init"), timeout=900)
        for service, spec in airflow_services.items():
            is_worker = services.command(spec)[1:3] == ["celery", "worker"]
            services.start(service, spec, ("--celery-hostname", f"{service}@%h") if is_worker else ())
        api = Api(f"http://127.0.0.1:{local.api_port}")
        wait_for("the API server", lambda: api.call("GET", "/api/v2/monitor/health")[0] == 200, services, 300)
        pw_file = local.tmp / "airflow" / "airflow-apiserver" / "simple_auth_manager_passwords.json.generated"
        api.login("airflow", json.loads(pw_file.read_text())["airflow"])
        yield api, local, services
    finally:
        services.stop()


def trigger(api: Api, run_id: str, conf: dict) -> None:
    """``POST /api/v2/dags/{dag_id}/dagRuns`` with ``conf`` (a manual DAG run named ``run_id``)."""
    status, body = api.call(
        "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"dag_run_id": run_id, "logical_date": None, "conf": conf}
    )
    assert status == 200, f"trigger {run_id}: {status} {body}"


def wait_run(api: Api, services: Services, run_id: str, timeout: float = 1200) -> dict:
    """The DAG run once it is ``success`` or ``failed``."""

    def finished():
        run = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")[1]
        return run if run["state"] in ("success", "failed") else None

    return wait_for(f"DAG run {run_id}", finished, services, timeout, every=5)


def task_instances(api: Api, run_id: str) -> dict[str, dict]:
    status, body = api.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances")
    assert status == 200, body
    return {ti["task_id"]: ti for ti in body["task_instances"]}


def task_log(api: Api, run_id: str, ti: dict) -> str:
    """The task instance's log through ``GET .../taskInstances/{task_id}/logs/{try_number}``, as text (the
    events, and each exception as ``type: message``)."""
    path = (
        f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/logs/{ti['try_number']}"
        f"?map_index={ti['map_index']}&full_content=true"
    )
    status, body = api.call("GET", path)
    assert status == 200, body
    lines = []
    for entry in body["content"]:  # structured lines: the event, and a failure's exceptions in error_detail
        lines.append(entry.get("event", ""))
        lines += [f"{e['exc_type']}: {e['exc_value']}" for e in entry.get("error_detail") or []]
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.airflow_live
@pytest.mark.timeout(3600)
def test_dag_runs_on_a_live_celery_airflow(live, home):
    from sqlalchemy import select

    from tasks.store import Run, session_scope

    api, local, services = live
    dag = wait_for(
        f"the dag-processor to parse {DAG_ID}",
        lambda: (r := api.call("GET", f"/api/v2/dags/{DAG_ID}"))[0] == 200 and r[1],
        services,
        600,
    )
    assert dag["is_paused"], "a new DAG starts paused"
    # perfwatch doctor with the scheduler's environment (its Airflow configuration signs the task tokens): the
    # api-server accepts them, and the trivial perfwatch_doctor DAG runs on both workers' queues (~10 s)
    env = {
        **local.env("airflow-scheduler", compose()["services"]["airflow-scheduler"]),
        "PERFWATCH_AIRFLOW_API_URL": api.base,
        "PERFWATCH_AIRFLOW_TOKEN": api.token,
    }
    doc = subprocess.run(
        [str(BIN / "perfwatch"), "doctor", "--dag-wait", "120"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert doc.returncode == 0, f"{doc.stdout}\n{doc.stderr}\n{services.report()}"
    for name in ("store", "model store", "airflow", "dags", "pool", "task token", "task"):
        assert re.search(rf"^ok   {name}: ", doc.stdout, re.M), (name, doc.stdout)
    assert "ping_profile_queue on airflow-worker-gpu" in doc.stdout, doc.stdout
    trigger(api, "live_v1", {**TINY, "version": "1"})  # queued while paused: runs once unpaused
    status, dag = api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    assert status == 200 and dag["is_paused"] is False, (status, dag)
    run1 = wait_run(api, services, "live_v1")

    tis = task_instances(api, "live_v1")
    # the night's paired confirmations (watch_trend found no tentative slowdown): mapped over none, skipped
    confirming = {t: ti["state"] for t, ti in tis.items() if t.startswith("confirm.")}
    assert confirming and set(confirming.values()) <= {"skipped", "removed"}, confirming
    tis = {t: ti for t, ti in tis.items() if t not in confirming}
    states = {t: ti["state"] for t, ti in tis.items()}
    assert run1["state"] == "success", f"{states}\n{services.report()}"
    assert set(states.values()) == {"success"}, states
    for task_id, ti in tis.items():  # where each ran: the stages that measure on the gpu worker
        on_gpu = task_id in GPU_STAGES
        assert ti["queue"] == ("gpu" if on_gpu else "default"), (task_id, ti["queue"])
        assert ti["hostname"] == ("airflow-worker-gpu" if on_gpu else "airflow-worker"), (task_id, ti["hostname"])
    with session_scope(local.databases["perfwatch"]) as s:
        run = s.scalars(select(Run).where(Run.dag_run_id == "live_v1")).one()
        assert (run.dag_id, run.status, run.verdict, run.trigger) == (DAG_ID, "success", "no-baseline", "manual")
        assert run.median_step_ms > 0
        archive_uri = run.archive_uri
    assert Path(archive_uri).is_relative_to(home / "archive")
    assert len(list(Path(archive_uri).glob("plugins/profile/*/*.xplane.pb"))) == 1

    # the heavier model in a release gate with the default budget of pairs (320): the sequential gate stops
    # once its interval decides, a few dozen pairs for this x2 slowdown; 10 pairs can be too few on a busy host
    trigger(api, "live_v2", {**TINY, "version": "2", "trigger": "release", "paired_blocks": 320})
    run2 = wait_run(api, services, "live_v2")
    tis = task_instances(api, "live_v2")
    assert run2["state"] == "failed", {t: ti["state"] for t, ti in tis.items()}
    assert tis["archive"]["state"] == "failed" and tis["measure"]["state"] == "success"
    log = task_log(api, "live_v2", tis["archive"])
    assert re.search(r"RegressionDetected: tiny v2 \(train-bs4\) regressed \(paired-abba\)", log), log[-3000:]
    with session_scope(local.databases["perfwatch"]) as s:
        run = s.scalars(select(Run).where(Run.dag_run_id == "live_v2")).one()
        assert (run.status, run.verdict, run.trigger, run.version_requested) == (
            "success",
            "regression",
            "release",
            "2",
        )
