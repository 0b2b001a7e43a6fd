"""``/perfwatch/alertmanager`` (POST): Alertmanager's webhook (payload version 4), macro alert to micro
diagnosis. Every firing alert labelled ``perfwatch_model`` (optionally ``perfwatch_version``,
``perfwatch_case``) triggers a run of the ``perfwatch_profile`` DAG for that model through Airflow's REST API
(:func:`trigger_profile_run`). The labels are checked with the rules the DAG's ``Case`` applies
(``tasks.records``: ``check_model_name``, ``canonical_version``, ``check_case_name``). Access:
``auth.alertmanager_access``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Header, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from tasks.records import canonical_version, check_case_name, check_model_name
from tasks.services.airflow_api import AirflowApi, AirflowApiError, airflow_token

from .auth import alertmanager_access

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

router = APIRouter()  #: ``/alertmanager``

PROFILE_DAG_ID = "perfwatch_profile"  #: the DAG a webhook alert triggers


class Alert(BaseModel):
    """One alert of Alertmanager's webhook payload (fields as Alertmanager documents them)."""

    status: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str = ""  # noqa: N815 - Alertmanager's spelling
    endsAt: str = ""  # noqa: N815
    generatorURL: str = ""  # noqa: N815
    fingerprint: str = ""


class AlertmanagerPayload(BaseModel):
    """Alertmanager's webhook payload, version 4 (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)."""

    version: str
    groupKey: str = ""  # noqa: N815
    truncatedAlerts: int = 0  # noqa: N815
    status: str = ""
    receiver: str = ""
    groupLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonLabels: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    commonAnnotations: dict[str, str] = Field(default_factory=dict)  # noqa: N815
    externalURL: str = ""  # noqa: N815
    alerts: list[Alert] = Field(default_factory=list)


def profile_request(alert: Alert) -> tuple[dict[str, Any] | None, str | None]:
    """The DAG run an alert asks for: ``({"dag_run_id", "conf", "note"}, None)``, or ``(None, why not)``.

    Labels: ``perfwatch_model`` (required), ``perfwatch_version`` (default ``latest``; ``0003`` is sent as ``3``),
    ``perfwatch_case`` (``train-bs<N>``: the batch size N; another case name, e.g. ``infer-bs16-xla``: that
    case of the model's config matrix, the DAG's Param ``case``; default the DAG's). The DAG run id is made from
    the alert's fingerprint and start, so Alertmanager's repeated notifications of one alert trigger one run.
    """
    labels = alert.labels
    if alert.status != "firing":
        return None, f"alert is {alert.status!r}, not firing"
    model = labels.get("perfwatch_model")
    if not model:
        return None, "no perfwatch_model label"
    try:
        check_model_name(model)
    except ValueError as e:
        return None, f"perfwatch_model {model!r} is not a model name the DAG accepts: {e}"
    conf: dict[str, Any] = {"model": model, "trigger": "manual"}
    version = labels.get("perfwatch_version", "latest")
    try:
        conf["version"] = canonical_version(version)
    except ValueError:
        return None, f"perfwatch_version {version!r}: expected an integer version or 'latest'"
    if case := labels.get("perfwatch_case"):
        try:
            mode, size, *axes = check_case_name(case).split("-")
        except ValueError:
            return None, (
                f"perfwatch_case {case!r}: expected a perfwatch case name, <mode>-bs<N>[-<axis>...] "
                "(train-bs<N> sets the batch size; another name picks that case of the model's config)"
            )
        if mode == "train" and not axes:
            conf["batch_size"] = int(size.removeprefix("bs"))
        else:
            conf["case"] = case
    ident = alert.fingerprint or hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]
    start = re.sub(r"[^0-9A-Za-z]", "", alert.startsAt)[:20]
    name = labels.get("alertname", "alert")
    return {
        "dag_run_id": f"alert__{name}__{ident}__{start}"[:250],
        "conf": conf,
        "note": f"Triggered by Alertmanager alert {name} ({alert.generatorURL or 'no generator URL'})",
    }, None


def _airflow_token(client: httpx.Client, base: str) -> str | None:
    """The bearer token for Airflow's API (``tasks.services.airflow_api.airflow_token``): ``PERFWATCH_AIRFLOW_TOKEN``,
    else one from ``POST /auth/token`` with ``PERFWATCH_AIRFLOW_USERNAME`` and ``PERFWATCH_AIRFLOW_PASSWORD``;
    None when neither is set."""
    return airflow_token(client, AirflowApi.from_env(base))


def trigger_profile_run(
    requests: list[dict[str, Any]], *, base_url: str | None = None, timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """Trigger a ``perfwatch_profile`` DAG run per request through Airflow's REST API
    (``POST /api/v2/dags/perfwatch_profile/dagRuns`` with ``logical_date`` null, the ``conf`` and a note).

    ``base_url``: Airflow's API server (``PERFWATCH_AIRFLOW_API_URL``, default ``http://localhost:8080``).
    A run whose ``dag_run_id`` exists already (HTTP 409: a repeated notification) counts as triggered.

    Returns:
        one dict per request: ``dag_run_id``, ``conf``, ``status`` (``triggered`` or ``exists``).

    Raises:
        AirflowApiError: the token or a trigger was refused, or the API could not be reached.
    """
    import httpx

    base = (base_url or os.environ.get("PERFWATCH_AIRFLOW_API_URL") or "http://localhost:8080").rstrip("/")
    out = []
    try:
        with httpx.Client(timeout=timeout_s) as client:
            token = _airflow_token(client, base)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            for req in requests:
                url = f"{base}/api/v2/dags/{PROFILE_DAG_ID}/dagRuns"
                r = client.post(url, headers=headers, json={"logical_date": None, **req})
                if r.status_code == 409:
                    out.append({**req, "status": "exists"})
                elif r.status_code in (200, 201):
                    out.append({**req, "status": "triggered"})
                else:
                    raise AirflowApiError(f"POST {url}: HTTP {r.status_code}: {r.text[:300]}")
    except httpx.HTTPError as e:
        raise AirflowApiError(f"Airflow's API at {base} could not be reached: {type(e).__name__}: {e}") from e
    return out


@router.post("/alertmanager")
def alertmanager_webhook(
    payload: AlertmanagerPayload, authorization: str | None = Header(default=None)
) -> JSONResponse:
    """Alertmanager's webhook: trigger a profiling DAG run for every firing alert labelled ``perfwatch_model``.

    Responses: 200 ``{"triggered": [...], "skipped": [{"alert", "reason"}]}``; 401 without the right bearer
    token; 400 for a payload version other than 4; 502 when Airflow's API refused a trigger (Alertmanager
    then retries); 503 when ``PERFWATCH_ALERTMANAGER_TOKEN`` is not set (the webhook is off).
    """
    alertmanager_access(authorization)
    if payload.version != "4":
        raise HTTPException(400, f"Alertmanager payload version {payload.version!r}: expected '4'")
    wanted: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for a in payload.alerts:
        req, why = profile_request(a)
        if req is None:
            skipped.append({"alert": a.labels.get("alertname", ""), "labels": a.labels, "reason": why})
        elif req["dag_run_id"] not in {w["dag_run_id"] for w in wanted}:
            wanted.append(req)
    try:
        triggered = trigger_profile_run(wanted) if wanted else []
    except AirflowApiError as e:
        log.error("perfwatch alertmanager webhook: %s", e)
        return JSONResponse({"error": str(e), "skipped": skipped}, status_code=502)
    return JSONResponse({"triggered": triggered, "skipped": skipped})
