"""Who may use the plugin's routes: Airflow's own login and its auth manager's DAG permissions for the pages,
bearer tokens for the services.

The pages and the archive files sit behind Airflow's own authentication (:func:`airflow_user`): the JWT of
Airflow's auth manager as a bearer token (``POST /auth/token``) or the ``_token`` cookie the Airflow UI sets
at login, and the auth manager must allow the user the Airflow website; a browser without a login is
redirected to Airflow's login page (``/api/v2/auth/login?next=...``), an API client gets 401 (403 for a bad
token or a user without access). Past the login each stored run is shown only to a user the auth manager lets
read the DAG that made it (``runs.dag_id``; :class:`RunAccess`, Airflow's ``filter_authorized_dag_ids``: Airflow 3
leaves a plugin's authorization to the plugin): the listings leave the others out and their pages and archive
files answer 404, as for a run that does not exist. A run made outside Airflow (``perfwatch run``, dag_id
``perfwatch_cli``) is checked the same way, so only users the auth manager lets read every DAG see it.

``/perfwatch/metrics`` (every model's names, timings, verdicts and reasons) is closed by default
(:func:`metrics_access`): with ``PERFWATCH_METRICS_TOKEN`` set it takes that bearer token (Prometheus
``scrape_config`` ``authorization: {credentials_file: ...}``), else an Airflow login whose user may read every
DAG; ``PERFWATCH_METRICS_PUBLIC=true`` opens it to anyone who can reach it (the explicit opt-out). The
webhook, which starts work, requires the bearer token ``PERFWATCH_ALERTMANAGER_TOKEN`` (Alertmanager's
``http_config.authorization``); without it set the webhook is off (503, :func:`alertmanager_access`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from fastapi import Depends, HTTPException, Request

from .urls import LOGIN_PATH, airflow_root, quote_segment

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager

METRICS_PUBLIC = "PERFWATCH_METRICS_PUBLIC"
"""The environment variable that opens ``/perfwatch/metrics`` to anonymous clients when ``true`` (``false`` or
unset: closed, :func:`metrics_access`)."""


class LoginRequired(Exception):
    """A browser asked for a page without a valid Airflow login; ``url``: Airflow's login page."""

    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


def bearer_ok(authorization: str | None, expected: str) -> bool:
    """Whether an ``Authorization`` header is ``Bearer <expected>``: the scheme in any case (``bearer``,
    ``BEARER``; RFC 7235 section 2.1: auth-schemes are case-insensitive) followed by one or more spaces, the
    token compared in constant time (case-sensitive)."""
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    ok_scheme = scheme.lower() == "bearer"
    return secrets.compare_digest(credentials.lstrip(" ").encode(), expected.encode()) and ok_scheme


async def airflow_user(request: Request) -> BaseUser:
    """FastAPI dependency: the Airflow user of the request, authenticated as
    Airflow's own API and UI do (``airflow.api_fastapi.core_api.security.get_user``: a bearer JWT, else the
    ``_token`` cookie) and allowed the Airflow website by the auth manager (``AccessView.WEBSITE``).

    Raises:
        LoginRequired: no valid login and the request is a browser's page load inside Airflow's API server
            (answered with a redirect to Airflow's login page, which comes back here after the login).
        HTTPException: 401 without a token (or an expired one), 403 for an invalid token or a user the
            auth manager does not allow the website.
    """
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    manager = _auth_manager()
    try:
        user = await get_user(request=request, _oauth_token=None, bearer_credentials=await bearer_scheme(request))
    except HTTPException as e:
        browser = request.method == "GET" and "text/html" in request.headers.get("accept", "")
        if browser and request.app.state.login and e.status_code in (401, 403):
            raise LoginRequired(f"{airflow_root(request)}{LOGIN_PATH}?next={quote_segment(request.url)}") from e
        raise
    if not manager.is_authorized_view(access_view=AccessView.WEBSITE, user=user):
        raise HTTPException(403, f"user {user.get_name()!r} may not see the Airflow website, so not perfwatch's pages")
    return user


def _auth_manager() -> BaseAuthManager[Any]:
    """Airflow's auth manager: the API server's, else (``standalone_app()``, outside Airflow's API server, which
    initialises it) one made from this deployment's configuration (``[core] auth_manager``)."""
    from airflow.api_fastapi.app import get_auth_manager, init_auth_manager

    try:
        return get_auth_manager()
    except RuntimeError:
        return init_auth_manager()


class RunAccess:
    """Which stored runs one Airflow user may see: those whose ``dag_id`` the auth manager lets the user read
    (``filter_authorized_dag_ids``, method GET; the auth manager's own rule: per-DAG permissions with the FAB or
    Keycloak auth managers, the role with the simple one). The one place the pages decide whose runs to show.

    ``manager``: Airflow's auth manager; ``user``: the request's user (:func:`airflow_user`). Answers are cached
    for the request.
    """

    def __init__(self, manager: BaseAuthManager[Any], user: BaseUser):
        self.manager, self.user = manager, user
        self._readable: dict[str, bool] = {}

    def readable_dags(self, dag_ids: Iterable[str]) -> set[str]:
        """The ones of ``dag_ids`` the user may read."""
        wanted = set(dag_ids)
        if unknown := wanted - self._readable.keys():
            allowed = self.manager.filter_authorized_dag_ids(dag_ids=unknown, user=self.user, method="GET")
            self._readable.update({d: d in allowed for d in unknown})
        return {d for d in wanted if self._readable[d]}

    def readable_runs(self, run_ids: Iterable[int], db_url: str | None = None) -> set[int]:
        """The ones of ``run_ids`` (stored runs' ids) the user may see: runs of a DAG the user may read. An id
        not in the store (``db_url``, default the settings') is left out."""
        from tasks.store.reads import run_dag_ids

        dags = run_dag_ids(sorted({int(i) for i in run_ids}), db_url)
        readable = self.readable_dags(dags.values())
        return {i for i, d in dags.items() if d in readable}

    def may_see(self, run_id: int, db_url: str | None = None) -> bool:
        """Whether the user may see stored run ``run_id`` (False for an id not in the store)."""
        return int(run_id) in self.readable_runs([run_id], db_url)


def run_access(user: Annotated[BaseUser, Depends(airflow_user)]) -> RunAccess:
    """FastAPI dependency of the pages: the :class:`RunAccess` of the request's Airflow user."""
    return RunAccess(_auth_manager(), user)


Readable = Annotated[RunAccess, Depends(run_access)]
"""A route parameter of this type gets the request's :class:`RunAccess` (``access: Readable``)."""


def metrics_public() -> bool:
    """Whether ``PERFWATCH_METRICS_PUBLIC`` opens ``/perfwatch/metrics`` to anonymous clients.

    Raises:
        ValueError: a value other than ``true`` or ``false`` (any case; unset or empty reads as false).
    """
    value = os.environ.get(METRICS_PUBLIC, "").strip().lower()
    if value not in ("", "true", "false"):
        raise ValueError(f"{METRICS_PUBLIC}={os.environ[METRICS_PUBLIC]!r}: expected true or false")
    return value == "true"


async def metrics_access(request: Request) -> None:
    """FastAPI dependency of ``/metrics``, closed by default: with ``PERFWATCH_METRICS_TOKEN`` set, that bearer
    token is required; else an Airflow login (:func:`airflow_user`) whose user the auth manager lets read every
    DAG (the metrics hold every model's runs); ``PERFWATCH_METRICS_PUBLIC=true`` (and no token set) opens it.

    Raises:
        HTTPException: 401 without the token or with a wrong one, or (no token set) without an Airflow login;
            403 for a user who may not read every DAG; 500 for a ``PERFWATCH_METRICS_PUBLIC`` that is not
            true or false.
    """
    expected = os.environ.get("PERFWATCH_METRICS_TOKEN")
    if expected:
        if not bearer_ok(request.headers.get("authorization"), expected):
            raise HTTPException(
                401, "missing or wrong bearer token (PERFWATCH_METRICS_TOKEN)", headers={"WWW-Authenticate": "Bearer"}
            )
        return
    try:
        if metrics_public():
            return
    except ValueError as e:
        raise HTTPException(500, str(e)) from None
    try:
        user = await airflow_user(request)
    except HTTPException as e:
        if e.status_code != 401:
            raise
        raise HTTPException(
            401,
            f"{e.detail}: /perfwatch/metrics takes an Airflow login, or the bearer token PERFWATCH_METRICS_TOKEN "
            f"when the API server sets it ({METRICS_PUBLIC}=true opens it to anyone)",
            headers={"WWW-Authenticate": "Bearer"},
        ) from None
    if not _auth_manager().is_authorized_dag(method="GET", user=user):  # no details: every DAG
        raise HTTPException(403, f"user {user.get_name()!r} may not read every DAG, so not every model's metrics")


def alertmanager_access(authorization: str | None) -> None:
    """The webhook's rule, checked by the webhook on a valid payload (``Authorization`` header as given):
    the bearer token ``PERFWATCH_ALERTMANAGER_TOKEN`` is required.

    Raises:
        HTTPException: 503 when ``PERFWATCH_ALERTMANAGER_TOKEN`` is not set (the webhook is off), 401 without
            the token or with a wrong one.
    """
    expected = os.environ.get("PERFWATCH_ALERTMANAGER_TOKEN")
    if not expected:
        raise HTTPException(
            503,
            "the Alertmanager webhook is off: set PERFWATCH_ALERTMANAGER_TOKEN and send it "
            "as a bearer token (Alertmanager webhook_config http_config.authorization)",
        )
    if not bearer_ok(authorization, expected):
        raise HTTPException(401, "missing or wrong bearer token (PERFWATCH_ALERTMANAGER_TOKEN)")
