"""perfwatch_doctor: one trivial task per queue that ``perfwatch doctor`` triggers to see that a task can run
through this Airflow (scheduler -> executor -> worker -> the api-server's execution API), e.g. after a
start-up (``make airflow``) or a deployment. Never scheduled; created unpaused, so a trigger runs at once.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import dag, task

# the queues the profile DAG uses (dags/perfwatch_profile.py): Airflow's default and the measuring stages' one
PROFILE_QUEUE = os.environ.get("PERFWATCH_PROFILE_QUEUE", "default")


@dag(
    dag_id="perfwatch_doctor",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    is_paused_upon_creation=False,
    max_active_runs=2,
    tags=["perfwatch", "monitoring"],
    default_args={"retries": 0},
    doc_md=__doc__,
)
def perfwatch_doctor():
    @task(task_id="ping")
    def ping() -> str:
        """Says where it ran (the worker's host name)."""
        import socket

        return socket.gethostname()

    ping()
    if PROFILE_QUEUE != "default":
        ping.override(task_id="ping_profile_queue", queue=PROFILE_QUEUE)()


perfwatch_doctor()
