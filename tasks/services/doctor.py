"""``perfwatch doctor``: is this deployment able to run perfwatch, and if not, why not.

Checks, each a :class:`Check` (``ok`` True / False, or None when it could not be made or there is nothing yet):

* ``store``: the SQL store is reachable and migrated (``tasks.store.check_readable``; never creates one; a
  store not created or migrated yet is a note: the first DAG run does it);
* ``model store``: the model store (``PERFWATCH_MODEL_STORE``) can be listed (absent: a note);
* ``airflow``: the API server answers (``/api/v2/monitor/health``: scheduler and dag-processor health);
* ``dags``: ``perfwatch_profile``, ``perfwatch_watch`` and ``perfwatch_doctor`` are parsed, no import errors;
* ``pool``: the ``perfwatch_profile`` pool exists (the profiled run's one-at-a-time slot);
* ``task token``: a task token signed with this machine's Airflow configuration (``[api_auth] jwt_secret``,
  as the scheduler's executor signs them: :func:`sign_task_token`) is accepted by the api-server's execution
  API (``[core] execution_api_server_url``). A 403 there is the JWT secret mismatch of apache/airflow#59373;
* ``task``: a run of the trivial ``perfwatch_doctor`` DAG succeeds. A task that failed without ever starting
  (no host name, no pid, an empty log) is what a worker whose token the api-server refuses leaves behind,
  and is named so.

Airflow is reached only through its REST API (:class:`tasks.services.airflow_api.AirflowClient`, the seam the
tests fake) and its command line (``airflow config list``, :func:`read_airflow_config`): ``tasks/`` never
imports Airflow.
"""

from __future__ import annotations

import configparser
import datetime as dt
import shutil
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tasks.services.airflow_api import (
    PROFILE_DAG_ID,
    RELEASE_DAG_ID,
    AirflowApiError,
    not_parsed_message,
    paused_message,
)
from tasks.settings import Settings

DOCTOR_DAG_ID = "perfwatch_doctor"  #: the trivial DAG ``perfwatch doctor`` triggers (dags/perfwatch_doctor.py)
PROFILE_POOL = "perfwatch_profile"  #: the pool of the profiled run (make airflow-init creates it)
DAG_IDS = (PROFILE_DAG_ID, RELEASE_DAG_ID, "perfwatch_watch", DOCTOR_DAG_ID)
JWT_MISMATCH = (
    "the Airflow components do not share one JWT secret: the api-server refuses the task tokens the "
    "scheduler signs, so tasks fail before they start, with an empty log (apache/airflow#59373); give the "
    "api-server, scheduler, dag-processor and workers the same [api_auth] jwt_secret "
    "(AIRFLOW__API_AUTH__JWT_SECRET)"
)


class Api(Protocol):
    """What the doctor needs of Airflow's API (``AirflowClient.call``)."""

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> tuple[int, Any]: ...


@dataclass(frozen=True)
class Check:
    """One finding: ``name`` (e.g. ``"pool"``), ``ok`` (True; False: a problem; None: not checked, or not there
    yet on a fresh deployment, e.g. no store before the first DAG run) and ``detail`` (what was found, or the
    cause and what to do)."""

    name: str
    ok: bool | None
    detail: str

    def line(self) -> str:
        """``ok   pool: ...`` / ``FAIL pool: ...`` / ``note pool: ...``."""
        mark = {True: "ok  ", False: "FAIL", None: "note"}[self.ok]
        return f"{mark} {self.name}: {self.detail}"


# ------------------------------------------------------------------------------------------------ perfwatch side


def check_store(settings: Settings) -> Check:
    """The SQL store (``PERFWATCH_DATABASE_URL``) exists, is reachable and migrated (read only)."""
    from sqlalchemy.exc import ArgumentError

    from tasks.store import StoreError, StoreMissing, StoreNotMigrated, check_readable, redact

    try:
        revision = check_readable(settings.database_url)
    except (StoreMissing, StoreNotMigrated) as e:  # a fresh deployment: the first DAG run migrates it
        return Check("store", None, f"not yet: {e}")
    except StoreError as e:
        return Check("store", False, str(e))
    except ArgumentError:  # the value itself is not shown: it may hold a password
        return Check("store", False, "the store URL (PERFWATCH_DATABASE_URL) is not a database URL")
    return Check("store", True, f"{redact(settings.database_url)} at schema revision {revision}")


def check_model_store(settings: Settings) -> Check:
    """The model store (``PERFWATCH_MODEL_STORE``, any fsspec URI) exists and can be listed."""
    from tasks.modelstore import filesystem

    try:
        fs, root = filesystem(settings.model_store)
        if not fs.isdir(root):
            return Check(
                "model store",
                None,
                f"not yet: {settings.model_store} does not exist (PERFWATCH_MODEL_STORE; perfwatch publish or "
                "make demo creates it)",
            )
        models = sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(root, detail=True) if e["type"] == "directory"
        )
    except Exception as e:  # noqa: BLE001 - any filesystem error is the finding
        return Check("model store", False, f"{settings.model_store} cannot be read: {type(e).__name__}: {e}")
    return Check(
        "model store", True, f"{settings.model_store}: {len(models)} model(s) ({', '.join(models[:8]) or 'none yet'})"
    )


# -------------------------------------------------------------------------------------------------- Airflow side


def read_airflow_config(airflow: str | None = None, timeout_s: float = 120.0) -> dict[str, dict[str, str]]:
    """This machine's effective Airflow configuration (``airflow config list --show-values``: airflow.cfg, the
    ``AIRFLOW__*`` variables and the defaults, as every Airflow component started here would read it), as
    ``{section: {option: value}}``.

    ``airflow``: the command (default: the ``airflow`` beside this interpreter, else on ``PATH``).

    Raises:
        FileNotFoundError: no ``airflow`` command.
        RuntimeError: the command failed (its exit code and the end of its output).
    """
    exe = airflow or (
        str(Path(sys.executable).with_name("airflow")) if Path(sys.executable).with_name("airflow").exists() else None
    )
    exe = exe or shutil.which("airflow")
    if not exe:
        raise FileNotFoundError("no airflow command beside this Python or on PATH")
    proc = subprocess.run([exe, "config", "list", "--show-values"], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{exe} config list exited {proc.returncode}: {(proc.stderr or proc.stdout)[-500:]}")
    return parse_airflow_config(proc.stdout)


def parse_airflow_config(text: str) -> dict[str, dict[str, str]]:
    """``airflow config list --show-values`` output (INI, comments ``#``) as ``{section: {option: value}}``."""
    parser = configparser.ConfigParser(interpolation=None, strict=False, comment_prefixes=("#",))
    parser.read_string(text)
    return {s: dict(parser.items(s, raw=True)) for s in parser.sections()}


def execution_api_url(config: dict[str, dict[str, str]]) -> str:
    """Where this machine's executors send tasks to report: ``[core] execution_api_server_url``, else
    ``[api] base_url`` + ``/execution/`` (``http://localhost:8080`` when the base URL is unset or a path), as
    Airflow's ``get_execution_api_server_url`` makes it."""
    core = config.get("core", {})
    if url := core.get("execution_api_server_url"):
        return url
    base = config.get("api", {}).get("base_url") or "/"
    if base.startswith("/"):
        base = f"http://localhost:8080{base}"
    return f"{base.rstrip('/')}/execution/"


def sign_task_token(config: dict[str, dict[str, str]], *, valid_for_s: float = 60.0) -> str | None:
    """A task token as this machine's scheduler signs one (Airflow's ``JWTGenerator`` of the executor):
    claims ``sub`` (a random task id), ``aud`` (``[execution_api] jwt_audience``, first value), ``iss``
    (``[api_auth] jwt_issuer`` when set), ``iat``/``nbf``/``exp`` (now, now + ``valid_for_s`` seconds), ``jti``;
    HMAC with ``[api_auth] jwt_secret`` and ``[api_auth] jwt_algorithm`` (default HS512).

    Returns None when the configuration signs with a private key file (``jwt_private_key_path``) or has no
    secret: then only the task check can tell.
    """
    import jwt

    auth = config.get("api_auth", {})
    secret = auth.get("jwt_secret")
    if auth.get("jwt_private_key_path") or not secret:
        return None
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": str(uuid.uuid4()),
        "jti": uuid.uuid4().hex,
        "nbf": now,
        "iat": now,
        "exp": int(now + valid_for_s),
    }
    audience = config.get("execution_api", {}).get("jwt_audience") or "urn:airflow.apache.org:task"
    if aud := audience.split(",")[0].strip():
        claims["aud"] = aud
    if iss := (auth.get("jwt_issuer") or "").split(",")[0].strip():
        claims["iss"] = iss
    algorithm = (auth.get("jwt_algorithm") or "HS512").split(",")[0].strip()
    with warnings.catch_warnings():  # the key is Airflow's (its generated one is 16 bytes): signed as Airflow does
        warnings.filterwarnings("ignore", message="The HMAC key is .* below the minimum recommended")
        return jwt.encode(claims, secret, algorithm=algorithm)


def check_task_token(api: Api, config: dict[str, dict[str, str]] | None) -> Check:
    """Whether the api-server's execution API accepts a task token signed with this machine's configuration
    (:func:`sign_task_token`; ``GET <execution API>/task-instances/count?dag_id=perfwatch_doctor``): 200 it
    does; 403 ``Invalid auth token`` is a JWT secret mismatch (:data:`JWT_MISMATCH`)."""
    if config is None:
        return Check("task token", None, "this machine's Airflow configuration could not be read")
    token = sign_task_token(config)
    url = execution_api_url(config)
    if token is None:
        return Check(
            "task token", None, "tokens are signed with a private key here (jwt_private_key_path): not checked"
        )
    try:
        status, body = api.call(
            "GET", f"{url.rstrip('/')}/task-instances/count", params={"dag_id": DOCTOR_DAG_ID}, token=token
        )
    except AirflowApiError as e:
        return Check(
            "task token", False, f"the execution API at {url} cannot be reached ([core] execution_api_server_url): {e}"
        )
    if status == 200:
        return Check("task token", True, f"the execution API at {url} accepts this machine's task tokens")
    if status == 403 and "invalid auth token" in str(body).lower():
        return Check(
            "task token", False, f"the execution API at {url} refuses this machine's task tokens: {JWT_MISMATCH}"
        )
    return Check("task token", False, f"GET {url}task-instances/count: HTTP {status}: {str(body)[:200]}")


def check_airflow(api: Api) -> Check:
    """The API server answers ``/api/v2/monitor/health``; the scheduler's and dag-processor's health from it."""
    try:
        status, body = api.call("GET", "/api/v2/monitor/health")
    except AirflowApiError as e:
        return Check("airflow", False, str(e))
    if status != 200 or not isinstance(body, dict):
        return Check("airflow", False, f"GET /api/v2/monitor/health: HTTP {status}: {str(body)[:200]}")
    parts = {k: (body.get(k) or {}).get("status") for k in ("metadatabase", "scheduler", "dag_processor")}
    bad = [f"{k} {v}" for k, v in parts.items() if v not in ("healthy", None)]
    detail = ", ".join(f"{k} {v or 'not reported'}" for k, v in parts.items())
    return Check("airflow", not bad, detail if not bad else f"{detail}: start the unhealthy component(s)")


def check_dags(api: Api, wait_s: float = 0.0, sleep: Callable[[float], None] = time.sleep) -> Check:
    """perfwatch's DAGs are parsed (``GET /api/v2/dags/{id}``; waits up to ``wait_s`` seconds for the
    dag-processor), and Airflow records no import error of a perfwatch DAG file (``GET /api/v2/importErrors``)."""
    deadline = time.monotonic() + wait_s
    while True:
        missing, paused = [], []
        for dag_id in DAG_IDS:
            status, body = api.call("GET", f"/api/v2/dags/{dag_id}")
            if status == 404:
                missing.append(dag_id)
            elif status == 200 and body.get("is_paused") and dag_id in (PROFILE_DAG_ID, RELEASE_DAG_ID):
                paused.append(dag_id)
            elif status != 200:
                return Check("dags", False, f"GET /api/v2/dags/{dag_id}: HTTP {status}: {str(body)[:200]}")
        if not missing or time.monotonic() >= deadline:
            break
        sleep(2.0)
    status, body = api.call("GET", "/api/v2/importErrors", params={"limit": 100})
    errors = body.get("import_errors", []) if status == 200 and isinstance(body, dict) else []
    ours = [e for e in errors if "perfwatch" in str(e.get("filename", ""))]
    problems = [f"{e.get('filename')}: {str(e.get('stack_trace', '')).strip().splitlines()[-1:]}" for e in ours]
    if missing:
        why = "; ".join(not_parsed_message(d) for d in missing)
        return Check("dags", False, why + (f"; import errors: {'; '.join(problems)}" if problems else ""))
    if problems:
        return Check("dags", False, f"import errors: {'; '.join(problems)}")
    detail = f"{', '.join(DAG_IDS)} parsed"
    if paused:
        detail += "".join(f"; {paused_message(d, 'its runs')}" for d in paused)
    return Check("dags", True, detail)


def check_pool(api: Api) -> Check:
    """The ``perfwatch_profile`` pool exists (``GET /api/v2/pools/perfwatch_profile``)."""
    status, body = api.call("GET", f"/api/v2/pools/{PROFILE_POOL}")
    if status == 404:
        return Check(
            "pool",
            False,
            f"no pool {PROFILE_POOL}: the profiled runs wait forever; create it: "
            f'airflow pools set {PROFILE_POOL} 1 "perfwatch: one profiled run at a time"',
        )
    if status != 200:
        return Check("pool", False, f"GET /api/v2/pools/{PROFILE_POOL}: HTTP {status}: {str(body)[:200]}")
    return Check("pool", True, f"{PROFILE_POOL}: {body.get('slots')} slot(s)")


def _log_text(api: Api, run_id: str, ti: dict[str, Any]) -> str:
    """What the task itself logged (``GET .../logs/{try}``), as text: Airflow's own framing is left out (the
    ``::group::Log message source details`` block naming the log files, and the ``::group::`` /
    ``::endgroup::`` markers), so a task that never ran reads as ''."""
    path = (
        f"/api/v2/dags/{DOCTOR_DAG_ID}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/logs/"
        f"{max(int(ti.get('try_number') or 1), 1)}"
    )
    status, body = api.call("GET", path, params={"map_index": ti.get("map_index", -1), "full_content": "true"})
    if status != 200 or not isinstance(body, dict):
        return ""
    content = body.get("content")
    events = [str(e.get("event", "")) if isinstance(e, dict) else str(e) for e in content or []]
    if isinstance(content, str):
        events = content.splitlines()
    lines, in_sources = [], False
    for event in events:
        if event.startswith("::group::Log message source details"):
            in_sources = True
        elif event.startswith("::endgroup::"):
            in_sources = False
        elif not in_sources and not event.startswith("::group::") and event.strip():
            lines.append(event)
    return "\n".join(lines)


def diagnose_failed_task(ti: dict[str, Any], log: str, token: Check | None) -> str:
    """Why a task instance of the doctor DAG failed, from what Airflow shows of it: ``ti`` (the REST API's
    task instance: ``state``, ``hostname``, ``pid``, ``start_date``), its ``log`` text and the task-token check.

    A task that failed without starting (no host name, no pid) and left no log is what a worker whose task
    token the api-server refuses leaves behind (its ``PATCH .../run`` gets 403 and the supervisor gives up
    before the task runs): :data:`JWT_MISMATCH`, for certain when ``token`` failed the same way.
    """
    name = ti.get("task_id", "?")
    never_started = not ti.get("hostname") and ti.get("pid") is None and not ti.get("start_date")
    if token is not None and token.ok is False and "JWT" in token.detail:
        return f"task {name} failed: {JWT_MISMATCH}"
    if never_started and not log:
        return (
            f"task {name} failed before it started (no host, no pid) and left an empty log: most likely "
            f"{JWT_MISMATCH}; else the worker could not reach the execution API "
            "([core] execution_api_server_url): see the scheduler's and the worker's log"
        )
    last = log.strip().splitlines()[-1] if log.strip() else "empty log"
    return f"task {name} failed on {ti.get('hostname') or 'an unknown host'}: {last[:300]}"


def check_task(
    api: Api,
    token: Check | None = None,
    timeout_s: float = 120.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Check:
    """Trigger a run of ``perfwatch_doctor`` (unpaused first if needed) and wait up to ``timeout_s`` seconds for
    it; a failure is explained by :func:`diagnose_failed_task`, a run that does not finish by the state its
    task instances are left in (nobody took a queued task: no worker for its queue, or the executor is full)."""
    status, dag = api.call("GET", f"/api/v2/dags/{DOCTOR_DAG_ID}")
    if status != 200:
        return Check("task", None, f"{not_parsed_message(DOCTOR_DAG_ID)}: no trivial task to run")
    if dag.get("is_paused"):
        api.call("PATCH", f"/api/v2/dags/{DOCTOR_DAG_ID}", json={"is_paused": False})
    run_id = f"doctor__{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}"
    status, body = api.call(
        "POST",
        f"/api/v2/dags/{DOCTOR_DAG_ID}/dagRuns",
        json={"dag_run_id": run_id, "logical_date": None, "note": "perfwatch doctor"},
    )
    if status not in (200, 201):
        return Check("task", False, f"triggering {DOCTOR_DAG_ID}: HTTP {status}: {str(body)[:200]}")
    started = time.monotonic()
    state = "queued"
    while time.monotonic() - started < timeout_s:
        status, run = api.call("GET", f"/api/v2/dags/{DOCTOR_DAG_ID}/dagRuns/{run_id}")
        state = run.get("state", "?") if status == 200 and isinstance(run, dict) else "?"
        if state in ("success", "failed"):
            break
        sleep(2.0)
    status, body = api.call("GET", f"/api/v2/dags/{DOCTOR_DAG_ID}/dagRuns/{run_id}/taskInstances")
    tis = body.get("task_instances", []) if status == 200 and isinstance(body, dict) else []
    took = time.monotonic() - started
    if state == "success":
        where = ", ".join(f"{t['task_id']} on {t.get('hostname') or '?'}" for t in tis)
        return Check("task", True, f"{DOCTOR_DAG_ID} run {run_id} succeeded in {took:.0f} s ({where})")
    if state == "failed":
        failed = [t for t in tis if t.get("state") in ("failed", "upstream_failed")] or tis
        why = "; ".join(diagnose_failed_task(t, _log_text(api, run_id, t), token) for t in failed[:2])
        return Check("task", False, f"{DOCTOR_DAG_ID} run {run_id} failed: {why}")
    waiting = ", ".join(f"{t['task_id']} {t.get('state') or 'none'} (queue {t.get('queue')})" for t in tis) or "none"
    return Check(
        "task",
        False,
        f"{DOCTOR_DAG_ID} run {run_id} did not finish within {timeout_s:.0f} s (run {state}; tasks: {waiting}): "
        "is the scheduler running, and a worker serving each queue?",
    )


def run_doctor(
    api: Api,
    settings: Settings | None = None,
    config: dict[str, dict[str, str]] | None = None,
    *,
    task_timeout_s: float = 120.0,
    dag_wait_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Check]:
    """Every check, in order (see the module doc): the perfwatch side, then Airflow's through ``api`` and this
    machine's Airflow ``config`` (:func:`read_airflow_config`; None: the token check is skipped). The Airflow
    checks stop at the first (``airflow``) when the API server cannot be reached."""
    settings = settings or Settings.from_env()
    checks = [check_store(settings), check_model_store(settings), check_airflow(api)]
    if checks[-1].ok is False and "could not be reached" in checks[-1].detail:
        return checks + [Check(n, None, "Airflow's API not reached") for n in ("dags", "pool", "task token", "task")]
    try:
        checks += [check_dags(api, dag_wait_s, sleep), check_pool(api)]
        token = check_task_token(api, config)
        checks += [token, check_task(api, token, task_timeout_s, sleep)]
    except AirflowApiError as e:
        checks.append(Check("airflow", False, str(e)))
    return checks
