"""perfwatch_watch: the missing-data alert.

Hourly, finds the models of the nightly config (``PERFWATCH_CONFIG``) without a successful run in the
last ``PERFWATCH_MISSING_DATA_HOURS`` hours (default 36) and fails, so that ``PerfwatchNotifier``
sends the alert (``tasks.services.alerts.check_missing_data``): a nightly DAG that is paused, failing
or not scheduled is noticed within the hour after the window, not days later by a human. The store is the
Airflow connection ``PERFWATCH_DB_CONN_ID`` names, when set (``perfwatch.hooks.store_url``).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowFailException
from perfwatch.hooks import store_url
from perfwatch.notifier import PerfwatchNotifier


@dag(
    dag_id="perfwatch_watch",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["perfwatch", "monitoring"],
    default_args={"retries": 0},
    doc_md=__doc__,
)
def perfwatch_watch():
    @task(on_failure_callback=PerfwatchNotifier(missing_data=True))
    def missing_data() -> list[dict]:
        """Models of the nightly config without a successful run in the window: fail and alert."""
        from tasks.services.alerts import MissingData, check_missing_data

        try:
            return check_missing_data(db_url=store_url())
        except MissingData as e:
            raise AirflowFailException(str(e)) from e

    missing_data()


perfwatch_watch()
