"""perfwatch's Airflow hooks: how the DAGs and the notifier read perfwatch's two Airflow connections, the way
Airflow providers read theirs (a ``BaseHook`` per kind of connection, named by a connection id).

* :class:`PerfwatchStoreHook`: the store. ``PERFWATCH_DB_CONN_ID``, when set, names an Airflow connection to use
  instead of ``PERFWATCH_DATABASE_URL`` (a PostgreSQL connection, say); :meth:`~PerfwatchStoreHook.get_url` is its
  URI as the SQLAlchemy URL perfwatch opens (``tasks.store.queries.sqlalchemy_url``). :func:`store_url` is what
  every DAG task and the notifier call, once each: that URL, else the settings' store; they hand it to the
  ``tasks.*`` entry points as ``db_url``. Nothing here sets ``os.environ``.
* :class:`PerfwatchWebhookHook`: the alert webhook, the connection ``PERFWATCH_ALERT_CONN_ID`` (default
  ``perfwatch_alerts``), a generic HTTP webhook (a Slack incoming webhook works as is), e.g.
  ``AIRFLOW_CONN_PERFWATCH_ALERTS='{"conn_type": "http", "host": "https://hooks.slack.com/services/T/B/X"}'``.
  ``host`` may be the full URL; otherwise ``schema`` (``http``/``https``, default ``https``), ``host``, ``port``
  and ``extra.endpoint`` (the path) make it. ``extra.headers`` are sent with the POST, and a ``password`` becomes
  ``Authorization: Bearer <password>`` (:func:`webhook_target`). The POST is ``tasks.services.alerts.post_webhook``.

The http provider's ``HttpHook`` is not used for the webhook: it reads a connection differently (the connection's
``extra`` as headers, login and password as basic auth, no ``extra.endpoint``, no path in ``schema``), so the
connections documented above would change meaning, and it would add a dependency.

The two connection types are not registered with Airflow's UI: Airflow 3's plugins cannot register hooks (that
takes a provider distribution's ``apache_airflow_provider`` entry point, ``get_provider_info``); a connection of
any type (``http``, ``postgres``, ...) works, as before.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import BaseHook

#: the environment variable naming the store's Airflow connection (unset: ``PERFWATCH_DATABASE_URL``)
STORE_CONN_VAR = "PERFWATCH_DB_CONN_ID"
#: the environment variable naming the alert webhook's Airflow connection (unset: :data:`DEFAULT_ALERT_CONN_ID`)
ALERT_CONN_VAR = "PERFWATCH_ALERT_CONN_ID"
DEFAULT_ALERT_CONN_ID = "perfwatch_alerts"


class PerfwatchStoreHook(BaseHook):
    """perfwatch's store as an Airflow connection (module docstring).

    Args:
        perfwatch_conn_id: the connection (default ``perfwatch_db``; the DAGs use :func:`store_url`, which names
            the one ``PERFWATCH_DB_CONN_ID`` says).
    """

    conn_name_attr = "perfwatch_conn_id"
    default_conn_name = "perfwatch_db"
    conn_type = "perfwatch_store"
    hook_name = "perfwatch store"

    def __init__(self, perfwatch_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.perfwatch_conn_id = perfwatch_conn_id

    def get_url(self) -> str:
        """The connection's URI as the SQLAlchemy URL of the store (``postgres://`` becomes ``postgresql+psycopg://``).

        Raises:
            AirflowNotFoundException: no such connection; ``tasks.store.queries.QueryError``: its URI is no URL.
        """
        from tasks.store.queries import sqlalchemy_url

        return sqlalchemy_url(self.get_connection(self.perfwatch_conn_id).get_uri())

    def get_conn(self) -> str:
        """The store's URL (:meth:`get_url`): perfwatch opens its own engines (``tasks.store``)."""
        return self.get_url()


def store_url() -> str:
    """The store a DAG task or callback uses: the URL of the Airflow connection ``PERFWATCH_DB_CONN_ID`` names
    (:class:`PerfwatchStoreHook`), else the settings' (``PERFWATCH_DATABASE_URL``, else the SQLite file)."""
    if conn_id := os.environ.get(STORE_CONN_VAR):
        return PerfwatchStoreHook(conn_id).get_url()
    from tasks.store.reads import store_url as settings_store

    return settings_store()


def webhook_target(conn: Any) -> tuple[str, dict[str, str]]:
    """``(url, headers)`` of the webhook an Airflow connection describes (module docstring).

    Raises:
        ValueError: the connection has no host.
    """
    extra = conn.extra_dejson or {}
    host = (conn.host or "").strip()
    if not host:
        raise ValueError(f"alert connection {conn.conn_id!r} has no host: expected the webhook URL in 'host'")
    if "://" in host:
        url = host
    else:
        scheme = conn.schema if conn.schema in ("http", "https") else "https"
        url = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
        if conn.schema and conn.schema not in ("http", "https"):  # the path of an http://host:port/path URI
            url += "/" + conn.schema.lstrip("/")
    if endpoint := extra.get("endpoint"):
        url = url.rstrip("/") + "/" + str(endpoint).lstrip("/")
    headers = {str(k): str(v) for k, v in (extra.get("headers") or {}).items()}
    if conn.password and "Authorization" not in headers:
        headers["Authorization"] = f"Bearer {conn.password}"
    return url, headers


class AlertConnectionMissing(LookupError):
    """The alert webhook's Airflow connection is not defined (the message names it and Airflow's error)."""


class PerfwatchWebhookHook(BaseHook):
    """perfwatch's alert webhook as an Airflow connection (module docstring).

    Args:
        perfwatch_alert_conn_id: the connection (default ``PERFWATCH_ALERT_CONN_ID``, else ``perfwatch_alerts``).
    """

    conn_name_attr = "perfwatch_alert_conn_id"
    default_conn_name = DEFAULT_ALERT_CONN_ID
    conn_type = "http"
    hook_name = "perfwatch alert webhook"

    def __init__(self, perfwatch_alert_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.perfwatch_alert_conn_id = (
            perfwatch_alert_conn_id or os.environ.get(ALERT_CONN_VAR) or self.default_conn_name
        )

        self._target: tuple[str, dict[str, str]] | None = None

    def get_conn(self) -> tuple[str, dict[str, str]]:
        """``(url, headers)`` of the webhook (:func:`webhook_target` of the connection), read once per hook.

        Raises:
            AlertConnectionMissing: no such connection; ValueError: it has no host.
        """
        if self._target is None:
            try:
                conn = self.get_connection(self.perfwatch_alert_conn_id)
            except Exception as e:  # noqa: BLE001 - Airflow raises AirflowNotFoundException, by version
                raise AlertConnectionMissing(
                    f"no Airflow connection {self.perfwatch_alert_conn_id!r} ({type(e).__name__}: {e})"
                ) from e
            self._target = webhook_target(conn)
        return self._target

    def post(self, payload: dict[str, Any], timeout_s: float = 10.0) -> int:
        """POST ``payload`` as JSON to the webhook (``tasks.services.alerts.post_webhook``); the HTTP status (2xx).

        Raises:
            AlertConnectionMissing: no such connection; ``tasks.services.alerts.AlertDeliveryError``: the webhook
                refused the payload or could not be reached.
        """
        from tasks.services.alerts import post_webhook

        url, headers = self.get_conn()
        return post_webhook(url, payload, headers, timeout_s=timeout_s)
