"""``/perfwatch/alertmanager`` (POST): Alertmanager's webhook (payload version 4), macro alert to micro
diagnosis. Every firing alert labelled ``perfwatch_model`` (optionally ``perfwatch_version``,
``perfwatch_case``) triggers a run of the ``perfwatch_profile`` DAG for that model through Airflow's REST API
(:func:`trigger_profile_run`). The labels are checked with the rules the DAG's ``Case`` applies
(``tasks.records``: ``check_model_name``, ``canonical_version``, ``check_case_name``) and against what the
DAG would find (``tasks.services.publish.missing_target``: the model and version in the model store, a named
case in the config).

Order of checks, cheapest and safest first: the bearer token (``auth.alertmanager_access``) before a byte of
the body is read; then the body's ``Content-Length`` (required; at most :data:`MAX_BODY_BYTES`, else 411 /
413 without reading it); then the payload. Alertmanager's ``truncatedAlerts`` (alerts it left out of the
payload, ``max_alerts``) are reported in the response and logged as a warning.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from tasks.records import canonical_version, check_case_name, check_model_name
from tasks.services.airflow_api import AirflowApi, AirflowApiError, airflow_token
from tasks.services.publish import missing_target

from .auth import alertmanager_access

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

router = APIRouter()  #: ``/alertmanager``

PROFILE_DAG_ID = "perfwatch_profile"  #: the DAG a webhook alert triggers

MAX_BODY_BYTES = 1 << 20
"""The largest webhook body read, bytes (1 MiB; ``PERFWATCH_ALERTMANAGER_MAX_BYTES`` overrides it). An
Alertmanager notification is a few KiB per alert; a larger group is cut by the receiver's ``max_alerts``."""


def max_body_bytes() -> int:
    """The body limit in bytes: ``PERFWATCH_ALERTMANAGER_MAX_BYTES`` (a positive integer), else :data:`MAX_BODY_BYTES`.

    Raises:
        ValueError: the variable is set but not a positive integer (names it and the value).
    """
    raw = os.environ.get("PERFWATCH_ALERTMANAGER_MAX_BYTES")
    if raw is None or raw == "":
        return MAX_BODY_BYTES
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"PERFWATCH_ALERTMANAGER_MAX_BYTES={raw!r}: expected a positive integer (bytes)")
    return int(raw)


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


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, read only when its ``Content-Length`` is given and at most ``limit`` bytes; reading
    stops (413) past ``limit`` bytes whatever the header said.

    Raises:
        HTTPException: 411 without a ``Content-Length`` (e.g. chunked), 400 for one that is not a number,
            413 beyond ``limit``.
    """
    length = request.headers.get("content-length")
    if length is None:
        raise HTTPException(411, f"a Content-Length is required (at most {limit} bytes); the body was not read")
    if not length.isdigit():
        raise HTTPException(400, f"Content-Length {length[:40]!r}: expected a number of bytes")
    if int(length) > limit:
        raise HTTPException(
            413,
            f"body of {int(length)} bytes is over the webhook's limit of {limit} bytes "
            "(PERFWATCH_ALERTMANAGER_MAX_BYTES; Alertmanager's webhook_config max_alerts cuts a notification); "
            "the body was not read",
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"body over the webhook's limit of {limit} bytes")
    return bytes(body)


@router.post("/alertmanager")
async def alertmanager_webhook(request: Request) -> JSONResponse:
    """Alertmanager's webhook: trigger a profiling DAG run for every firing alert labelled ``perfwatch_model``
    whose model (version, case) the DAG would find (``tasks.services.publish.missing_target``).

    Checked in this order, so that no unauthenticated or oversized body is read: the bearer token, the body's
    ``Content-Length`` (:data:`MAX_BODY_BYTES`), the payload.

    Responses: 200 ``{"triggered": [...], "skipped": [{"alert", "labels", "reason"}], "truncated_alerts": N}``
    (``warning`` too when Alertmanager left N > 0 alerts out of the payload); 401 without the right bearer
    token; 411 / 413 without a ``Content-Length`` or over the limit; 400 for a payload version other than 4 or
    a body that is not JSON; 422 for a payload of the wrong shape, and when nothing was triggered because an
    alert names a model, version or case the DAG does not have (the body says which; Alertmanager does not
    retry a 4xx); 502 when Airflow's API refused a trigger (Alertmanager then retries); 503 when
    ``PERFWATCH_ALERTMANAGER_TOKEN`` is not set (the webhook is off).
    """
    alertmanager_access(request.headers.get("authorization"))
    try:
        limit = max_body_bytes()
    except ValueError as e:
        raise HTTPException(500, str(e)) from e
    raw = await _read_body(request, limit)
    try:
        payload = AlertmanagerPayload.model_validate_json(raw)
    except ValidationError as e:
        if any(err["type"] == "json_invalid" for err in e.errors()):
            raise HTTPException(400, f"the body is not JSON: {e.errors()[0]['msg']}") from e
        raise HTTPException(422, e.errors(include_url=False, include_input=False)) from e
    if payload.version != "4":
        raise HTTPException(400, f"Alertmanager payload version {payload.version!r}: expected '4'")
    extra: dict[str, Any] = {"truncated_alerts": payload.truncatedAlerts}
    if payload.truncatedAlerts:
        extra["warning"] = (
            f"Alertmanager left {payload.truncatedAlerts} alert(s) of group {payload.groupKey!r} out of this "
            f"notification (webhook_config max_alerts): they trigger nothing; {len(payload.alerts)} were sent"
        )
        log.warning("perfwatch alertmanager webhook: %s", extra["warning"])
    wanted: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    unknown = 0
    for a in payload.alerts:
        req, why = profile_request(a)
        if req is not None and (why := await run_in_threadpool(missing_target, req["conf"])) is not None:
            req, unknown = None, unknown + 1
        if req is None:
            skipped.append({"alert": a.labels.get("alertname", ""), "labels": a.labels, "reason": why})
        elif req["dag_run_id"] not in {w["dag_run_id"] for w in wanted}:
            wanted.append(req)
    if skipped:
        log.info("perfwatch alertmanager webhook: skipped %s", "; ".join(str(s["reason"]) for s in skipped))
    if unknown and not wanted:
        return JSONResponse(
            {"error": "no DAG run triggered: the alerts name what the DAG does not have", "skipped": skipped, **extra},
            status_code=422,
        )
    try:
        triggered = await run_in_threadpool(trigger_profile_run, wanted) if wanted else []
    except AirflowApiError as e:
        log.error("perfwatch alertmanager webhook: %s", e)
        return JSONResponse({"error": str(e), "skipped": skipped, **extra}, status_code=502)
    return JSONResponse({"triggered": triggered, "skipped": skipped, **extra})
