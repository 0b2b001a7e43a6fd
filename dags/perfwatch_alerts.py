"""perfwatch's Airflow notifier: alerts to a webhook named by an Airflow connection.

``PerfwatchNotifier`` is an Airflow ``BaseNotifier``; the DAGs use it as

* ``perfwatch_profile``: DAG ``on_failure_callback`` (a regression, a failed stage, a busy host or a
  trend alert made the DAG run fail) and ``on_success_callback`` with ``only_noteworthy=True`` (sends
  only when a run of it has the verdict ``env-changed`` or ``regression``; a quiet night sends nothing);
* ``perfwatch_watch``: task ``on_failure_callback`` of the missing-data check.

What the message says is plain Python in ``tasks.services.alerts`` (a Slack-compatible payload
``{"text", "blocks"}`` built from the store's record of the DAG run: verdict, step-time ratio and
interval, top ops, a link to the run's page).

Configuration: the Airflow connection ``PERFWATCH_ALERT_CONN_ID`` (default ``perfwatch_alerts``), a
generic HTTP webhook (a Slack incoming webhook works as is), e.g.
``AIRFLOW_CONN_PERFWATCH_ALERTS='{"conn_type": "http", "host": "https://hooks.slack.com/services/T/B/X"}'``.
``host`` may be the full URL; otherwise ``schema`` (``http``/``https``, default ``https``), ``host``,
``port`` and ``extra.endpoint`` (the path) make it. ``extra.headers`` are sent with the POST, and a
``password`` becomes ``Authorization: Bearer <password>``. Without the connection nothing is sent and
the alert is logged as a warning. Run links use ``PERFWATCH_UI_URL``, else Airflow's ``[api] base_url``.
"""

from __future__ import annotations

import logging
import os

from airflow.sdk import BaseNotifier

log = logging.getLogger(__name__)

DEFAULT_CONN_ID = "perfwatch_alerts"


def webhook_target(conn) -> tuple[str, dict[str, str]]:
    """``(url, headers)`` of the webhook an Airflow connection describes (see the module doc).

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


def store_url_from_connection(context=None) -> None:
    """When ``PERFWATCH_DB_CONN_ID`` names an Airflow connection, export its URI as ``PERFWATCH_DATABASE_URL``
    for this process (``tasks/`` reads settings, never Airflow). The DAGs' ``on_execute_callback``; the
    notifier calls it too, since callbacks run in other processes than the tasks."""
    conn_id = os.environ.get("PERFWATCH_DB_CONN_ID")
    if conn_id:
        from airflow.sdk import BaseHook

        from tasks.store.queries import sqlalchemy_url

        os.environ["PERFWATCH_DATABASE_URL"] = sqlalchemy_url(BaseHook.get_connection(conn_id).get_uri())


def ui_base_url() -> str | None:
    """Base URL of the Airflow UI for run links: ``PERFWATCH_UI_URL``, else ``[api] base_url``."""
    if url := os.environ.get("PERFWATCH_UI_URL"):
        return url
    from airflow.sdk import conf

    return conf.get("api", "base_url", fallback=None) or None


class PerfwatchNotifier(BaseNotifier):
    """Send perfwatch's alert for a DAG run (or failed task) to the webhook of an Airflow connection.

    Args:
        conn_id: the connection (default ``PERFWATCH_ALERT_CONN_ID``, else ``perfwatch_alerts``); templated.
        only_noteworthy: as an ``on_success_callback``: send only when a run of the DAG run has a
            noteworthy verdict (``tasks.services.alerts.NOTEWORTHY``).
        missing_data: the message is the failed missing-data check's (the task's exception).
    """

    template_fields = ("conn_id",)

    def __init__(self, conn_id: str | None = None, *, only_noteworthy: bool = False, missing_data: bool = False):
        super().__init__()
        self.conn_id = conn_id or os.environ.get("PERFWATCH_ALERT_CONN_ID") or DEFAULT_CONN_ID
        self.only_noteworthy = only_noteworthy
        self.missing_data = missing_data

    def get_template_env(self, dag=None):
        """Airflow's template env, also when a DAG callback's context holds a ``SerializedDAG`` (``airflow dags
        test`` / ``dag.test()`` hand one over, and it has no template env: apache/airflow#64649, open in 3.3);
        then Airflow's default env, as the upstream fix (apache/airflow#67862) does."""
        return super().get_template_env(dag=dag if hasattr(dag, "get_template_env") else None)

    def payload(self, context) -> dict | None:
        """The alert for ``context`` (a DAG or task callback's context), or None when there is nothing to say."""
        from tasks.services.alerts import dag_run_alert, missing_data_alert

        store_url_from_connection()
        base = ui_base_url()
        exc = context.get("exception")
        if self.missing_data:
            return missing_data_alert(str(exc or context.get("reason") or "missing-data check failed"), base)
        ti = context.get("ti")
        return dag_run_alert(
            context["dag"].dag_id,
            context["run_id"],
            failed=not self.only_noteworthy,
            base_url=base,
            reason=context.get("reason"),
            task=getattr(ti, "task_id", None),
            error=f"{type(exc).__name__}: {exc}" if exc is not None else None,
            log_url=getattr(ti, "log_url", None),
        )

    def notify(self, context) -> None:
        """Build the alert and POST it (``tasks.services.alerts.post_webhook``); raises AlertDeliveryError
        when the webhook refuses it (Airflow logs a failed callback)."""
        from airflow.sdk import BaseHook

        from tasks.services.alerts import post_webhook

        body = self.payload(context)
        if body is None:
            return
        try:
            conn = BaseHook.get_connection(self.conn_id)
        except Exception as e:  # noqa: BLE001 - Airflow raises AirflowNotFoundException, by version
            log.warning(
                "perfwatch alert NOT sent: no Airflow connection %r (%s: %s); the alert was:\n%s",
                self.conn_id,
                type(e).__name__,
                e,
                body["text"],
            )
            return
        url, headers = webhook_target(conn)
        post_webhook(url, body, headers)
        log.info("perfwatch alert sent to connection %r: %s", self.conn_id, body["text"].splitlines()[0])
