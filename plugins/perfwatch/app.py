"""The plugin's FastAPI app: the pages behind Airflow's login (each run shown only to users who may read its
DAG: ``auth.RunAccess``; and :func:`store_ready`: no page creates a store), their static assets (open), the
metrics and the webhook with their own access rules (``auth``); no OpenAPI schema or docs pages are served;
:data:`app` is what Airflow's API server mounts at ``/perfwatch``, :func:`standalone_app` the same routes
without Airflow's API server."""

from __future__ import annotations

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from . import assets, metrics, pages, webhook
from .auth import LoginRequired, airflow_user
from .urls import URL_PREFIX


class SlashRedirect:
    """ASGI middleware (an Airflow root middleware): answers ``/perfwatch`` (no trailing slash) with a
    307 redirect to ``/perfwatch/`` (query kept). The mount only matches ``/perfwatch/...``; without this
    Airflow's UI catch-all route would answer ``/perfwatch`` with its own page."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path", "") if scope["type"] == "http" else ""
        if scope["type"] == "http" and scope["path"].removeprefix(root) == URL_PREFIX:
            query = scope.get("query_string", b"").decode("latin-1")
            await RedirectResponse(f"{root}{URL_PREFIX}/" + (f"?{query}" if query else ""), status_code=307)(
                scope, receive, send
            )
            return
        await self.app(scope, receive, send)


def store_ready() -> None:
    """FastAPI dependency of the pages: the store (``PERFWATCH_DATABASE_URL``) exists and is migrated
    (``tasks.store.check_readable``); a page never creates a store.

    Raises:
        HTTPException: 503 naming the reason (no store yet, not migrated, unreachable, schema too new).
    """
    from tasks.store import StoreError, check_readable

    try:
        check_readable()
    except StoreError as e:
        raise HTTPException(503, f"perfwatch's store cannot be read: {e}") from e


def create_app(*, login: bool) -> FastAPI:
    """The plugin's app: the pages (behind :func:`airflow_user`) and the service routes. ``login``: a browser
    without a login is sent to Airflow's login page (inside Airflow's API server, which serves it)."""
    sub = FastAPI(title="perfwatch history", docs_url=None, redoc_url=None, openapi_url=None)  # no public schema
    sub.state.login = login
    sub.include_router(pages.router, dependencies=[Depends(airflow_user), Depends(store_ready)])
    sub.include_router(assets.router)  # style sheet and scripts: no data, no login (as Airflow's /static)
    sub.include_router(metrics.router)
    sub.include_router(webhook.router)
    sub.add_exception_handler(LoginRequired, lambda request, exc: RedirectResponse(exc.url, status_code=307))
    return sub


app = create_app(login=True)  #: mounted by Airflow's API server at ``URL_PREFIX``


def standalone_app() -> FastAPI:
    """The plugin's routes under ``/perfwatch`` as Airflow's API server mounts them, without Airflow's API
    server: ``uvicorn --factory plugins.perfwatch.app:standalone_app`` from the repository root (e.g. a
    metrics endpoint for Prometheus). Its pages accept the tokens of the Airflow deployment whose
    configuration it reads (same ``[api_auth] jwt_secret``) and answer 401 without one (it has no login page)."""
    root = FastAPI(title="perfwatch", docs_url=None, redoc_url=None, openapi_url=None)
    root.add_middleware(SlashRedirect)
    root.mount(URL_PREFIX, create_app(login=False))
    return root
