"""Where the plugin sits in Airflow's URL space, shared by the pages, the login redirect and the app: the
mount point, Airflow's login path, and the two roots a link is built from (Airflow's, the plugin's)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import Request

URL_PREFIX = "/perfwatch"  #: where Airflow's API server mounts the app
UI_ROUTE = "perfwatch"  #: the external view's route in Airflow's UI: the pages are framed at ``/plugin/perfwatch``
LOGIN_PATH = "/api/v2/auth/login"  #: Airflow's public login redirect (``?next=`` the page asked for)


def airflow_root(request: Request) -> str:
    """The path of Airflow's API server root as the browser sees it (``""``, or its base-URL subpath):
    the mount's ``root_path`` without ``/perfwatch``."""
    return request.scope.get("root_path", "").removesuffix(URL_PREFIX)


def plugin_root(request: Request) -> str:
    """The plugin's own root path as the browser sees it (``/perfwatch`` or ``<subpath>/perfwatch``)."""
    return request.scope.get("root_path", "").rstrip("/")


def quote_segment(part: Any) -> str:
    """One URL path segment: every character but unreserved ones percent-encoded."""
    return quote(str(part), safe="")
