"""A small client of Airflow 3's stable REST API (``/api/v2``) for the commands that talk to Airflow.

Authentication as Airflow 3 requires it: a bearer JWT, either given (``PERFWATCH_AIRFLOW_TOKEN``) or
obtained from ``POST /auth/token`` with a user name and password (the simple auth manager's users;
FAB and other auth managers serve the same endpoint). Used by ``perfwatch publish`` (Asset events);
the Airflow UI plugin's Alertmanager webhook uses :func:`airflow_token` too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


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


def airflow_token(client, api: AirflowApi) -> str | None:
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
    return r.json()["access_token"]


def emit_asset_event(api: AirflowApi, uri: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Record an event of the Asset with URI ``uri`` in Airflow (``POST /api/v2/assets/events``), which
    schedules the DAGs that consume it. The asset id is looked up with ``GET /api/v2/assets?uri_pattern=``.

    Returns:
        Airflow's AssetEventResponse (``id``, ``asset_id``, ``uri``, ``extra`` (with ``from_rest_api``),
        ``timestamp``...).

    Raises:
        AirflowApiError: no Asset with that URI (no DAG declares it), a refused call, or an unreachable API.
    """
    import httpx

    try:
        with httpx.Client(timeout=api.timeout_s) as client:
            token = airflow_token(client, api)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            url = f"{api.base_url}/api/v2/assets"
            r = client.get(url, headers=headers, params={"uri_pattern": uri, "limit": 100})
            if r.status_code != 200:
                raise AirflowApiError(f"GET {url}: HTTP {r.status_code}: {r.text[:300]}")
            ids = [a["id"] for a in r.json().get("assets", []) if a.get("uri") == uri]
            if not ids:
                raise AirflowApiError(
                    f"Airflow at {api.base_url} has no Asset {uri}: no DAG declares it (the "
                    "perfwatch_profile DAG declares one per model of the nightly config, "
                    "PERFWATCH_CONFIG; add the model there)"
                )
            url = f"{api.base_url}/api/v2/assets/events"
            r = client.post(url, headers=headers, json={"asset_id": ids[0], "extra": extra})
            if r.status_code not in (200, 201):
                raise AirflowApiError(f"POST {url}: HTTP {r.status_code}: {r.text[:300]}")
            return r.json()
    except httpx.HTTPError as e:
        raise AirflowApiError(f"Airflow's API at {api.base_url} could not be reached: {type(e).__name__}: {e}") from e
