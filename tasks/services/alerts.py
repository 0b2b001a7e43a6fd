"""Alerts: what a DAG run's notification says, the missing-data check, and the webhook POST.

Airflow's notifier (``plugins/perfwatch/notifier.py``, a ``BaseNotifier``) decides *when* to send; this
module, plain Python, decides *what*: a Slack-compatible payload ``{"text": ..., "blocks": [...]}``
(Slack's incoming webhooks and most chat webhooks accept it; ``text`` is the plain fallback) built
from the store's record of the DAG run:

* a ``regression`` (or an ``inconclusive`` verdict of a failed DAG run): model, version, case, the verdict's
  story as every command tells it (``tasks.services.story.story_line``: verdict, ratio of the metric that
  decided with its interval, regression line, method, baseline, why), the three ops whose self-time
  grew most (``tasks.analysis.attribution.top_ops_text``) and a link to the run's page;
* an ``env-changed`` verdict (an environment change left undecided): the fingerprint fields that changed against
  the baseline, then what the judgement said (the reason's verdict part: ``tasks.records.env_change_judgement``;
  a judged change is a ``regression`` above, its reason naming them, or a quiet ``pass``);
* a failed stage: the stage and the cause of its error (``tasks.analysis.failures``: the op XLA refused, the
  missing custom class, a string input without an input_fn), else its first line; likewise a failed task's error;
* missing data: the models of the nightly config (``PERFWATCH_CONFIG``) without a successful run in
  the last ``PERFWATCH_MISSING_DATA_HOURS`` hours (default 36; :func:`check_missing_data`).

Links point at the run's page of the Airflow UI plugin, ``<base>/perfwatch/runs/<run id>``
(:func:`run_page_url`; the base is Airflow's ``[api] base_url`` or ``PERFWATCH_UI_URL``).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any

from tasks.analysis import failures
from tasks.analysis.attribution import top_ops_text
from tasks.records import Verdict, VerdictStory, case_label, env_change_judgement
from tasks.services.story import story_line
from tasks.settings import Settings

#: verdicts a notification reports even when the DAG run succeeded
NOTEWORTHY = (Verdict.REGRESSION, Verdict.ENV_CHANGED)
MISSING_DATA_HOURS = 36.0
_SLACK_TEXT_MAX = 2900  # Slack rejects a section text over 3000 characters


class AlertDeliveryError(RuntimeError):
    """The webhook refused the alert or could not be reached (the message has the URL without its path)."""


class MissingData(RuntimeError):
    """Models of the nightly config without a successful run in the window; ``missing`` lists them."""

    def __init__(self, message: str, missing: list[MissingModel]):
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class RunNote:
    """One stored run of a DAG run, as an alert shows it (ratio: candidate/baseline median step time)."""

    run_id: int
    model: str
    version: str
    case_name: str
    status: str
    verdict: str | None
    method: str | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    failed_stage: str | None
    error: str | None
    evidence: dict[str, Any]
    case_label: str | None = None  #: the case's readable label (``tasks.records.case_label`` of the run's params)
    #: the verdict's story (``tasks.store.reads.verdict_stories``), rendered by ``tasks.services.story``
    story: VerdictStory | None = None


def dag_run_notes(db_url: str, dag_id: str, dag_run_id: str) -> list[RunNote]:
    """Every run the DAG run stored (any status), in run id order, with its comparison."""
    from sqlalchemy import func, select

    from tasks.store import Model, ModelVersion, Run, RunComparison, session_scope

    q = (
        select(
            Run.id,
            Model.name,
            func.coalesce(ModelVersion.version, Run.version_requested),
            Run.case_name,
            Run.status,
            Run.verdict,
            RunComparison.method,
            RunComparison.ratio,
            RunComparison.ci_low,
            RunComparison.ci_high,
            Run.failed_stage,
            Run.error,
            RunComparison.evidence,
            Run.params,
        )
        .join(Model, Model.id == Run.model_id)
        .outerjoin(ModelVersion, ModelVersion.id == Run.model_version_id)
        .outerjoin(RunComparison, RunComparison.run_id == Run.id)
        .where(Run.dag_id == dag_id, Run.dag_run_id == dag_run_id)
        .order_by(Run.id)
    )
    from tasks.store.reads import verdict_stories

    with session_scope(db_url) as s:
        rows = s.execute(q).all()
    stories = verdict_stories([int(r[0]) for r in rows], db_url)
    notes = []
    for run_id, model, version, case, status, verdict, method, ratio, low, high, stage, error, ev, params in rows:
        notes.append(
            RunNote(
                run_id,
                model,
                version,
                case,
                status,
                verdict,
                method,
                ratio,
                low,
                high,
                stage,
                error,
                ev or {},
                case_label(params),
                stories.get(int(run_id)),
            )
        )
    return notes


def run_page_url(base_url: str | None, run_id: int) -> str | None:
    """The run's page of the perfwatch UI plugin: ``<base>/perfwatch/runs/<run_id>`` (None without a base)."""
    return f"{base_url.rstrip('/')}/perfwatch/runs/{run_id}" if base_url else None


def _first_line(text: str | None) -> str:
    """The error's cause line when it has one (``tasks.analysis.failures.headline``), else its first line."""
    return failures.headline(text)


def note_text(n: RunNote, base_url: str | None) -> str:
    """One mrkdwn paragraph for a run: what happened, the figures, and the link to its page."""
    version = f"v{n.version}" if n.version and n.version[0].isdigit() else f"version {n.version}"  # latest, keras...
    head = f"*{n.model}* {version} `{n.case_name}`" + (f" ({n.case_label})" if n.case_label else "")
    head += f" (run {n.run_id})"
    if n.status == "failed":
        body = f"failed at stage *{n.failed_stage}*: {_first_line(n.error)[:500]}"
    elif n.verdict == Verdict.ENV_CHANGED:  # the fields that changed, then what the judgement said of it
        changes = n.evidence.get("env_changes") or []
        body = "verdict *env-changed*: " + (
            "; ".join(f"{c['field']} {c['old']!r} → {c['new']!r}" for c in changes) or "the comparability key changed"
        )
        reason = (n.story.reason if n.story is not None else None) or n.evidence.get("reason")
        if judgement := env_change_judgement(reason, changes):
            body += f"; {judgement}"
    else:  # the verdict's story as every command tells it (tasks.services.story), then the ops that moved
        story = n.story or VerdictStory.from_evidence(
            run_id=n.run_id,
            verdict=n.verdict,
            method=n.method,
            metric=n.evidence.get("metric"),
            ratio=n.ratio,
            ci_low=n.ci_low,
            ci_high=n.ci_high,
            evidence=n.evidence,
            baseline_run_id=None,
        )
        body = f"verdict {story_line(story)}; {top_ops_text(n.evidence.get('attribution'))}"
    link = run_page_url(base_url, n.run_id)
    return f"{head}: {body}" + (f"\n<{link}|run page>" if link else "")


def slack_payload(title: str, paragraphs: list[str], context: str | None = None) -> dict[str, Any]:
    """``{"text": title + paragraphs (plain fallback), "blocks": [header, one section per paragraph, context]}``."""
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": title[:150]}}]
    blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": p[:_SLACK_TEXT_MAX]}} for p in paragraphs]
    if context:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context[:_SLACK_TEXT_MAX]}]})
    return {"text": "\n".join([title, *paragraphs]), "blocks": blocks}


def dag_run_alert(
    dag_id: str,
    dag_run_id: str,
    *,
    failed: bool,
    db_url: str | None = None,
    base_url: str | None = None,
    reason: str | None = None,
    task: str | None = None,
    error: str | None = None,
    log_url: str | None = None,
) -> dict[str, Any] | None:
    """The notification for a finished DAG run (or failed task): its regressions, env-changed verdicts,
    failed runs and (when it failed) inconclusive verdicts, from the store (``db_url``, default the settings'
    store); plus the failed task, its error and log link when given, or when the store has no run that
    explains the failure (the plan task, a trend alert). ``failed`` False (the run succeeded): None when no
    run of it is noteworthy (:data:`NOTEWORTHY`), so a quiet night sends nothing.

    Returns:
        a Slack-compatible payload (:func:`slack_payload`), or None.
    """
    db_url = db_url or Settings.from_env().database_url
    shown = NOTEWORTHY + ((Verdict.INCONCLUSIVE,) if failed else ())  # a busy host's undecided verdict fails the run
    notes = [n for n in dag_run_notes(db_url, dag_id, dag_run_id) if n.status == "failed" or n.verdict in shown]
    if not failed and not notes:
        return None
    # a note that did not fail has a verdict in `shown`
    kinds = sorted({n.verdict if n.status != "failed" and n.verdict else "failed stage" for n in notes})
    title = f"perfwatch: {dag_id} {'failed' if failed else 'finished'}" + (f" ({', '.join(kinds)})" if kinds else "")
    paragraphs = [note_text(n, base_url) for n in notes]
    if error or (failed and not notes):
        what = f"task *{task}* failed" if task else "the DAG run failed"
        log_link = f"\n<{log_url}|task log>" if log_url else ""
        # Airflow's DAG callbacks give a reason code ("task_failure"), not the task's exception: say where it is
        why = error or (f"{reason.replace('_', ' ')}; the task's log says why" if reason else None)
        paragraphs.append(f"{what}: {_first_line(why)[:1500]}{log_link}")
    return slack_payload(title, paragraphs, context=f"DAG run `{dag_run_id}`")


@dataclass(frozen=True)
class MissingModel:
    """A model of the nightly config without a successful run in the window; ``last_success_at`` (UTC)
    is its newest successful run's finish, None when it never had one."""

    model: str
    last_success_at: dt.datetime | None


def missing_window_h(env: dict[str, str] | None = None) -> float:
    """``PERFWATCH_MISSING_DATA_HOURS`` (hours, default 36).

    Raises:
        ValueError: not a number of hours > 0 (names the variable and its value).
    """
    raw = (os.environ if env is None else env).get("PERFWATCH_MISSING_DATA_HOURS", "").strip()
    if not raw:
        return MISSING_DATA_HOURS
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(
            f"PERFWATCH_MISSING_DATA_HOURS={raw!r}: expected a window in hours, a number > 0 "
            f"(default {MISSING_DATA_HOURS:g})"
        )
    return value


def missing_models(
    settings: Settings, window_h: float, now: dt.datetime | None = None
) -> tuple[list[str], list[MissingModel]]:
    """The models of the nightly config (``settings.config_path``), and those whose newest successful run
    (any trigger) finished more than ``window_h`` hours before ``now`` (UTC, default the current time), or
    never. The store side is the named query ``sql/queries/last_success.sql``.

    Raises:
        FileNotFoundError / ValueError: the config is missing or invalid (``tasks.matrix.load_config``).
    """
    import pandas as pd

    from tasks.matrix import load_config
    from tasks.store.queries import run_query

    now = now or dt.datetime.now(dt.UTC)
    models = sorted({c.model for c in load_config(settings.config_path)})
    last = run_query("last_success", settings.database_url)
    by_model = {r.model: r.last_success_at for r in last.itertuples()}
    out = []
    for m in models:
        at = by_model.get(m)
        at = None if at is None or pd.isna(at) else at.to_pydatetime()
        if at is None or now - at > dt.timedelta(hours=window_h):
            out.append(MissingModel(m, at))
    return models, out


def check_missing_data(
    settings: Settings | None = None,
    window_h: float | None = None,
    now: dt.datetime | None = None,
    *,
    db_url: str | None = None,
) -> list[dict[str, Any]]:
    """The missing-data check (the ``perfwatch_watch`` DAG's task): :func:`missing_models` over the window
    (default ``PERFWATCH_MISSING_DATA_HOURS``) on the store ``db_url`` (default: the settings'); returns the models
    checked with their last success.

    Raises:
        MissingData: some model has no successful run in the window (the message names each, with the
            time of its last success or "never").
    """
    settings = (settings or Settings.from_env()).with_store(db_url)
    window_h = missing_window_h() if window_h is None else window_h
    from tasks.store import migrate

    migrate(settings.database_url)
    checked, missing = missing_models(settings, window_h, now)
    if missing:
        parts = [
            f"{m.model} (last success {m.last_success_at:%Y-%m-%d %H:%M} UTC)"
            if m.last_success_at
            else f"{m.model} (never succeeded)"
            for m in missing
        ]
        raise MissingData(
            f"no successful perfwatch run in the last {window_h:g} h for: {', '.join(parts)}; "
            f"is the nightly DAG (perfwatch_profile) paused, failing or not scheduled?",
            missing,
        )
    return [{"model": m, "window_h": window_h} for m in checked]


def missing_data_alert(message: str, base_url: str | None = None) -> dict[str, Any]:
    """The notification of a failed missing-data check (``message``: the :class:`MissingData` text)."""
    return slack_payload(
        "perfwatch: missing data",
        [message],
        context=f"<{base_url.rstrip('/')}/perfwatch/|perfwatch history>" if base_url else None,
    )


def post_webhook(
    url: str, payload: dict[str, Any], headers: dict[str, str] | None = None, timeout_s: float = 10.0
) -> int:
    """POST ``payload`` as JSON to ``url``; returns the HTTP status (2xx).

    Raises:
        AlertDeliveryError: a non-2xx answer (status and body start) or no answer (the error).
    """
    import httpx

    try:
        r = httpx.post(url, json=payload, headers=headers or {}, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise AlertDeliveryError(f"alert webhook {_where(url)} could not be reached: {type(e).__name__}: {e}") from e
    if not 200 <= r.status_code < 300:
        raise AlertDeliveryError(f"alert webhook {_where(url)} answered HTTP {r.status_code}: {r.text[:300]}")
    return r.status_code


def _where(url: str) -> str:
    """``scheme://host[:port]`` of a URL: a webhook's path may hold its secret token."""
    import urllib.parse

    p = urllib.parse.urlsplit(url)
    return f"{p.scheme}://{p.netloc.rsplit('@', 1)[-1]}"
