"""Who may use the plugin's routes: Airflow's own login for the pages, bearer tokens for the services.

The pages and the archive files sit behind Airflow's own authentication (:func:`airflow_user`): the JWT of
Airflow's auth manager as a bearer token (``POST /auth/token``) or the ``_token`` cookie the Airflow UI sets
at login, and the auth manager must allow the user the Airflow website; a browser without a login is
redirected to Airflow's login page (``/api/v2/auth/login?next=...``), an API client gets 401 (403 for a bad
token or a user without access). ``/perfwatch/metrics`` is open by default, as Prometheus exporters usually
are, because Prometheus scrapes without an Airflow login and the metrics hold only what ``perfwatch runs``
shows (model and case names, timings, verdicts); set ``PERFWATCH_METRICS_TOKEN`` to require it as a bearer
token (Prometheus ``scrape_config`` ``authorization: {credentials: ...}``, :func:`metrics_access`). The
webhook, which starts work, requires the bearer token ``PERFWATCH_ALERTMANAGER_TOKEN`` (Alertmanager's
``http_config.authorization``); without it set the webhook is off (503, :func:`alertmanager_access`).
"""

from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING

from fastapi import Header, HTTPException, Request

from .urls import LOGIN_PATH, airflow_root, quote_segment

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser


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
    from airflow.api_fastapi.app import get_auth_manager, init_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    try:
        manager = get_auth_manager()
    except RuntimeError:  # standalone_app(): not inside Airflow's API server, which initialises it
        manager = init_auth_manager()
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


def metrics_access(authorization: str | None = Header(default=None)) -> None:
    """FastAPI dependency of ``/metrics``: open unless ``PERFWATCH_METRICS_TOKEN`` is set, then that bearer
    token is required.

    Raises:
        HTTPException: 401 without the token or with a wrong one.
    """
    expected = os.environ.get("PERFWATCH_METRICS_TOKEN")
    if expected and not bearer_ok(authorization, expected):
        raise HTTPException(
            401, "missing or wrong bearer token (PERFWATCH_METRICS_TOKEN)", headers={"WWW-Authenticate": "Bearer"}
        )


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
