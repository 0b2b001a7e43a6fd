"""A small client of Airflow 3's stable REST API (``/api/v2``) for the commands that talk to Airflow.

Authentication as Airflow 3 requires it: a bearer JWT, either given (``PERFWATCH_AIRFLOW_TOKEN``) or
obtained from ``POST /auth/token`` with a user name and password (the simple auth manager's users;
FAB and other auth managers serve the same endpoint). Used by ``perfwatch publish`` (:func:`send_release`) and
``perfwatch doctor`` (:class:`AirflowClient`, the seam its tests fake); the Airflow UI plugin's Alertmanager
webhook uses :func:`airflow_token` too. :func:`airflow_task_id` names the profile DAG's task that ran a stage of
a stored run (the pages' task-log links).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # httpx is imported where used
    import httpx

PROFILE_DAG_ID = "perfwatch_profile"  #: the DAG of the nightly and manual profiling runs
RELEASE_DAG_ID = "perfwatch_release"  #: the DAG of the release gates (the models' Asset events)


class AirflowApiError(RuntimeError):
    """Airflow's API refused or could not be reached; the message says which call and why."""


@dataclass(frozen=True)
class AirflowApi:
    """Where Airflow's API server is and how to authenticate.

    Attributes:
        base_url: the API server, e.g. ``http://localhost:8080`` (no ``/api/v2``).
        token: a JWT to send as is; else ``username``/``password`` are exchanged at ``/auth/token``.
        timeout_s: per request, seconds.
    """

    base_url: str
    token: str | None = None
    username: str | None = None
    password: str | None = None
    timeout_s: float = 30.0

    @classmethod
    def from_env(cls, base_url: str | None = None, **overrides: Any) -> AirflowApi:
        """Settings from ``PERFWATCH_AIRFLOW_API_URL`` (default ``http://localhost:8080``),
        ``PERFWATCH_AIRFLOW_TOKEN``, ``PERFWATCH_AIRFLOW_USERNAME``, ``PERFWATCH_AIRFLOW_PASSWORD``;
        ``base_url`` and ``overrides`` that are not None win."""
        env = os.environ
        values: dict[str, Any] = {
            "token": env.get("PERFWATCH_AIRFLOW_TOKEN"),
            "username": env.get("PERFWATCH_AIRFLOW_USERNAME"),
            "password": env.get("PERFWATCH_AIRFLOW_PASSWORD"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        base = base_url or env.get("PERFWATCH_AIRFLOW_API_URL") or "http://localhost:8080"
        return cls(base_url=base.rstrip("/"), **values)


def airflow_token(client: httpx.Client, api: AirflowApi) -> str | None:
    """The bearer token for ``api``: ``api.token``, else one from ``POST /auth/token``; None when neither a
    token nor a user name is set (an API server without authentication).

    Raises:
        AirflowApiError: the user name and password were refused (the HTTP status and body).
    """
    if api.token:
        return api.token
    if not api.username:
        return None
    r = client.post(f"{api.base_url}/auth/token", json={"username": api.username, "password": api.password or ""})
    if r.status_code not in (200, 201):
        raise AirflowApiError(
            f"POST {api.base_url}/auth/token as {api.username!r}: HTTP {r.status_code}: {r.text[:300]}"
        )
    token: str = r.json()["access_token"]
    return token


class AirflowClient:
    """One session with Airflow's API server: an ``httpx.Client`` and the bearer token of :func:`airflow_token`
    (obtained at the first call). A context manager; :meth:`call` is the one method the callers use, so a fake
    with the same method stands in for Airflow in tests.
    """

    def __init__(self, api: AirflowApi):
        import httpx

        self.api = api
        self._client = httpx.Client(timeout=api.timeout_s)
        self._token: str | None = None
        self._authenticated = False

    def __enter__(self) -> AirflowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        token: str | None = None,
    ) -> tuple[int, Any]:
        """``method path`` (``/api/v2/...`` under ``api.base_url``, or an absolute URL) with the session's bearer
        token (``token``: this one instead). Returns ``(HTTP status, the JSON body, or the text when not JSON)``.

        Raises:
            AirflowApiError: the API could not be reached, or the user name and password were refused.
        """
        import httpx

        try:
            if token is None and not self._authenticated:
                self._token, self._authenticated = airflow_token(self._client, self.api), True
            bearer = token or self._token
            headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
            url = path if "://" in path else f"{self.api.base_url}{path}"
            r = self._client.request(method, url, headers=headers, json=json, params=params)
        except httpx.HTTPError as e:
            raise AirflowApiError(
                f"Airflow's API at {self.api.base_url} could not be reached: {type(e).__name__}: {e}"
            ) from e
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text


def dag_state(client: AirflowClient, dag_id: str = PROFILE_DAG_ID) -> dict[str, Any] | None:
    """Airflow's record of ``dag_id`` (``GET /api/v2/dags/{dag_id}``: ``is_paused``, ``is_stale``, ...), or
    None when Airflow has none (HTTP 404: the dag-processor has not parsed the DAG file yet, or it failed to).

    Raises:
        AirflowApiError: another refusal (the HTTP status and body), or the API could not be reached.
    """
    status, body = client.call("GET", f"/api/v2/dags/{dag_id}")
    if status == 404:
        return None
    if status != 200:
        raise AirflowApiError(f"GET /api/v2/dags/{dag_id}: HTTP {status}: {str(body)[:300]}")
    state: dict[str, Any] = body
    return state


def not_parsed_message(dag_id: str = RELEASE_DAG_ID) -> str:
    """What to do when Airflow has no DAG ``dag_id`` yet."""
    return f"the DAG {dag_id} has not been parsed yet (dag-processor): wait or check its log"


def paused_message(dag_id: str = PROFILE_DAG_ID, what: str = "the gate") -> str:
    """What to do when ``dag_id`` is paused (its runs, e.g. a release gate, wait until it is unpaused)."""
    return f"the DAG is paused: unpause it (airflow dags unpause {dag_id}) or {what} will wait"


def send_release(api: AirflowApi, uri: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Start the release gate of the published version ``extra`` (``model``, ``version``, ``digest``, ...; the
    Asset event's extra) in Airflow's DAG ``perfwatch_release``, so that it really runs:

    * the DAG is unpaused: an event of the Asset with URI ``uri`` (``POST /api/v2/assets/events``), which
      schedules the DAG (the asset id is looked up with ``GET /api/v2/assets?uri_pattern=``);
    * the DAG is paused: Airflow queues no Asset event for a paused DAG (the event would be recorded and no run
      would ever start), so a DAG run is triggered instead (``POST /api/v2/dags/perfwatch_release/dagRuns``, conf:
      ``model``, ``version``, ``trigger`` release, ``case`` all: the gate an event would plan); Airflow keeps
      it queued and starts it once the DAG is unpaused.

    Returns:
        ``{"via": "asset-event", "event": <Airflow's AssetEventResponse>}`` or ``{"via": "dag-run", "dag_run":
        <Airflow's DAGRunResponse>}`` (``dag_run_id``, ``state`` queued, ...).

    Raises:
        AirflowApiError: no Asset with that URI (the message says why: the DAG has not been parsed yet, or its
            config has no such model), no DAG ``perfwatch_release`` yet, a refused call, or an unreachable API.
    """
    import datetime as dt

    with AirflowClient(api) as client:
        status, body = client.call("GET", "/api/v2/assets", params={"uri_pattern": uri, "limit": 100})
        if status != 200:
            raise AirflowApiError(f"GET {api.base_url}/api/v2/assets: HTTP {status}: {str(body)[:300]}")
        ids = [a["id"] for a in body.get("assets", []) if a.get("uri") == uri]
        dag = dag_state(client, RELEASE_DAG_ID)
        if not ids or dag is None:
            if dag is None:
                raise AirflowApiError(f"Airflow at {api.base_url}: {not_parsed_message()}")
            raise AirflowApiError(
                f"Airflow at {api.base_url} has no Asset {uri}: no DAG declares it (the "
                f"{RELEASE_DAG_ID} DAG declares one per model of the nightly config, "
                "PERFWATCH_CONFIG; add the model there)"
            )
        if dag.get("is_paused"):
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
            conf = {"model": extra["model"], "version": str(extra["version"]), "trigger": "release", "case": "all"}
            run_id = f"release__{extra['model']}__v{extra['version']}__{stamp}"
            body = {"dag_run_id": run_id, "logical_date": None, "conf": conf, "note": "perfwatch publish (DAG paused)"}
            status, run = client.call("POST", f"/api/v2/dags/{RELEASE_DAG_ID}/dagRuns", json=body)
            if status not in (200, 201):
                raise AirflowApiError(
                    f"POST {api.base_url}/api/v2/dags/{RELEASE_DAG_ID}/dagRuns: HTTP {status}: {str(run)[:300]}"
                )
            return {"via": "dag-run", "dag_run": run}
        status, event = client.call("POST", "/api/v2/assets/events", json={"asset_id": ids[0], "extra": extra})
        if status not in (200, 201):
            raise AirflowApiError(f"POST {api.base_url}/api/v2/assets/events: HTTP {status}: {str(event)[:300]}")
        return {"via": "asset-event", "event": event}


def airflow_task_id(
    stage_id: str, device: str = "auto", hardware: str | None = None, *, config_path: str | Path | None = None
) -> str:
    """The profile DAG's task id that ran stage ``stage_id`` (``tasks.stages.registry``: the three measuring stages
    are ``measure``) of a case of ``device`` and ``hardware`` (a stored run's ``Case`` fields): the task in the
    group of the case's measuring queue (``tasks.stages.devices.group_id``, ``on_gpu.measure``), as the config at
    ``config_path`` (default ``PERFWATCH_CONFIG``) and ``PERFWATCH_PROFILE_QUEUE`` route it now; the plain id
    when the config cannot be read or has no queue for the kind.

    Raises:
        ValueError: ``stage_id`` is not a stage.
    """
    from tasks.settings import Settings
    from tasks.stages.devices import PROFILE_QUEUE_ENV, config_queues, group_id, queue_of
    from tasks.stages.registry import stage

    task = stage(stage_id).task_id
    default = os.environ.get(PROFILE_QUEUE_ENV, "default")
    try:
        queues = config_queues(config_path or Settings.from_env().config_path)
    except Exception:  # noqa: BLE001 - a link, not a plan: a config that cannot be read routes nothing
        queues = {}
    queue = queue_of(device, hardware, queues, default)
    group = group_id(queue, default) if queue else None
    return f"{group}.{task}" if group else task
