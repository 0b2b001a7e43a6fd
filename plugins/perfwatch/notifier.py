"""perfwatch's Airflow notifier: alerts to a webhook named by an Airflow connection.

``PerfwatchNotifier`` is an Airflow ``BaseNotifier``; the DAGs import it as ``perfwatch.notifier`` (Airflow puts
the plugins folder on ``sys.path``) and use it as

* ``perfwatch_profile``: DAG ``on_failure_callback`` (a regression, a failed stage, a busy host or a
  trend alert made the DAG run fail) and ``on_success_callback`` with ``only_noteworthy=True`` (sends
  only when a run of it has the verdict ``env-changed`` or ``regression``; a quiet night sends nothing);
* ``perfwatch_watch``: task ``on_failure_callback`` of the missing-data check.

What the message says is plain Python in ``tasks.services.alerts`` (a Slack-compatible payload
``{"text", "blocks"}`` built from the store's record of the DAG run: verdict, step-time ratio and
interval, top ops, a link to the run's page). The store is :func:`perfwatch.hooks.store_url`'s (the connection
``PERFWATCH_DB_CONN_ID`` names, else ``PERFWATCH_DATABASE_URL``).

Configuration: the Airflow connection ``PERFWATCH_ALERT_CONN_ID`` (default ``perfwatch_alerts``), a generic HTTP
webhook read by :class:`perfwatch.hooks.PerfwatchWebhookHook` (its docstring gives the connection's format), e.g.
``AIRFLOW_CONN_PERFWATCH_ALERTS='{"conn_type": "http", "host": "https://hooks.slack.com/services/T/B/X"}'``.
Without the connection nothing is sent and the alert is logged as a warning. Run links use ``PERFWATCH_UI_URL``,
else Airflow's ``[api] base_url``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from airflow.sdk import BaseNotifier

from .hooks import ALERT_CONN_VAR, DEFAULT_ALERT_CONN_ID, AlertConnectionMissing, PerfwatchWebhookHook, store_url

log = logging.getLogger(__name__)


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
        self.conn_id = conn_id or os.environ.get(ALERT_CONN_VAR) or DEFAULT_ALERT_CONN_ID
        self.only_noteworthy = only_noteworthy
        self.missing_data = missing_data

    def get_template_env(self, dag: Any = None) -> Any:
        """Airflow's template env, also when a DAG callback's context holds a ``SerializedDAG`` (``airflow dags
        test`` / ``dag.test()`` hand one over, and it has no template env: apache/airflow#64649, open in 3.3);
        then Airflow's default env, as the upstream fix (apache/airflow#67862) does."""
        return super().get_template_env(dag=dag if hasattr(dag, "get_template_env") else None)

    def payload(self, context: Any) -> dict[str, Any] | None:
        """The alert for ``context`` (a DAG or task callback's context), or None when there is nothing to say."""
        from tasks.services.alerts import dag_run_alert, missing_data_alert

        base = ui_base_url()
        exc = context.get("exception")
        if self.missing_data:
            return missing_data_alert(str(exc or context.get("reason") or "missing-data check failed"), base)
        ti = context.get("ti")
        return dag_run_alert(
            context["dag"].dag_id,
            context["run_id"],
            failed=not self.only_noteworthy,
            db_url=store_url(),  # callbacks run in other processes than the tasks: the store is read here too
            base_url=base,
            reason=context.get("reason"),
            task=getattr(ti, "task_id", None),
            error=f"{type(exc).__name__}: {exc}" if exc is not None else None,
            log_url=getattr(ti, "log_url", None),
        )

    def notify(self, context: Any) -> None:
        """Build the alert and POST it (:meth:`perfwatch.hooks.PerfwatchWebhookHook.post`); raises
        AlertDeliveryError when the webhook refuses it (Airflow logs a failed callback)."""
        body = self.payload(context)
        if body is None:
            return
        hook = PerfwatchWebhookHook(self.conn_id)
        try:
            hook.get_conn()
        except AlertConnectionMissing as e:
            log.warning("perfwatch alert NOT sent: %s; the alert was:\n%s", e, body["text"])
            return
        hook.post(body)
        log.info("perfwatch alert sent to connection %r: %s", self.conn_id, body["text"].splitlines()[0])
