"""watch-trend: after archiving, look at each case's nightly series, not only at tonight's run.

For each model and case a DAG run stored, :func:`watch_case` reads the series of successful runs
(``tasks.store.series.run_series``) and

* finds the change points of the median step time that the series did not have confirmed before tonight's
  run (``tasks.analysis.changes.new_change_points``: Apache Otava's E-divisive means with a t-test; a point is
  confirmed once ``PERFWATCH_CHANGE_MIN_RUNS_AFTER`` runs, default 3, follow it) — only when tonight's run is
  the newest of the series, so a case whose run failed tonight alerts nothing twice. A change point with fewer
  runs after it at the end of the series (a single slow night, say) is reported as tentative, with the
  night that would confirm it; a tentative slowdown gets the paired gate that re-measures it tonight
  (:func:`confirmations`, :func:`confirm_state`), whose verdict decides whether it alerts (:func:`judge_night`);
* runs the creep guard (``tasks.analysis.changes.creep_guard``): the level of the active baseline
  (the newest ``creep_runs`` accepted runs) against the level of the baseline accepted
  ``window_days`` days ago, in the same environment.

Both look at the metric that drifts least between processes (``tasks.analysis.calibration.history_metric``,
the history verdict's rule): each run's median per-step process CPU time (``median_cpu_ms``) when, over the
accepted runs of the newest run's environment, it drifts clearly less than the median step time, no GPU may
carry the steps, and every run of the series recorded it; else the median step time (``median_step_ms``).
The report names the metric (``TrendReport.metric``) and the rule's figures.

:func:`raise_on_trend_alert` raises :class:`TrendAlert` naming every new slowdown, creep (once:
``changes.creep_is_new``) and confirmed tentative slowdown (``tasks.analysis.changes.alerts``), so the DAG run goes
red and Airflow's alerting fires; a faster change point is reported, not alerted. Each report also carries the
sign test of the case's verdicts (``changes.sign_test``: one-sided or not).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from tasks.analysis import calibration, changes
from tasks.records import Case, Confirmation, RunContext, RunState
from tasks.settings import Settings
from tasks.store.queries import fingerprint_data
from tasks.store.reads import stored_run, verdict_stories
from tasks.store.series import SeriesRun, baseline_levels, dag_run_cases, run_series

log = logging.getLogger(__name__)


#: environment variable: runs after a change point that confirm it (``changes.DEFAULT_MIN_RUNS_AFTER``)
MIN_RUNS_AFTER_ENV = "PERFWATCH_CHANGE_MIN_RUNS_AFTER"


def min_runs_after(env: dict[str, str] | None = None) -> int:
    """``PERFWATCH_CHANGE_MIN_RUNS_AFTER`` (runs, default ``changes.DEFAULT_MIN_RUNS_AFTER``).

    Raises:
        ValueError: not a whole number >= 1 (names the variable and its value).
    """
    raw = (os.environ if env is None else env).get(MIN_RUNS_AFTER_ENV, "").strip()
    if not raw:
        return changes.DEFAULT_MIN_RUNS_AFTER
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{MIN_RUNS_AFTER_ENV}={raw!r}: expected a whole number of runs >= 1")
    return n


def tentative_json(cp: changes.ChangePoint, newest: dt.date) -> dict[str, Any]:
    """A tentative change point as reported: ``ChangePoint.to_json()`` and ``confirms_on``, the night
    (ISO date) whose run would confirm it on a nightly schedule (``changes.confirming_night``)."""
    night = changes.confirming_night(cp, newest)
    return {**cp.to_json(), "confirms_on": night.isoformat() if night else None}


class TrendAlert(RuntimeError):
    """A new change point that makes a model slower, or a baseline creep; the message names each."""


@dataclass(frozen=True)
class TrendReport:
    """The trend check of one model and case (JSON for XCom via ``to_json``).

    Attributes:
        model, case_name: what was checked; run_id: tonight's run (None when it stored none).
        runs: runs in the series (successful, with a median step time).
        new_change_points: ``ChangePoint.to_json()`` of each new confirmed change point (of ``metric``, ms).
        tentative_change_points: the series' tentative points (too few runs after them, at its end), each
            with ``confirms_on`` (:func:`tentative_json`); reported, never alerted.
        creep: ``CreepCheck.to_json()`` of the creep guard (of ``metric``).
        alerts: one line per alert (empty: nothing to alert on).
        metric: the series looked at: ``median_step_ms`` (each run's median step time) or ``median_cpu_ms``
            (its median per-step process CPU time); history_metric: ``calibration.HistoryMetric`` as a dict, the
            rule that chose it (None without runs).
        moved_ops: a new slower change point's run id (a string, as JSON keys are) -> the op change points at it
            (``moved_ops``: op key, then ``ChangePoint`` fields in µs per step, and ``missing_runs``), largest
            first; each alert line names the first three.
    """

    model: str
    case_name: str
    run_id: int | None
    runs: int
    new_change_points: list[dict[str, Any]] = field(default_factory=list)
    tentative_change_points: list[dict[str, Any]] = field(default_factory=list)
    creep: dict[str, Any] = field(default_factory=dict)
    alerts: list[str] = field(default_factory=list)
    metric: str = "median_step_ms"
    history_metric: dict[str, Any] | None = None
    confirmations: list[dict[str, Any]] = field(default_factory=list)
    sign_test: dict[str, Any] = field(default_factory=dict)
    moved_ops: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-safe dict."""
        return asdict(self)


def creep_check(
    db_url: str,
    model: str,
    case_name: str,
    *,
    now: dt.datetime | None = None,
    window_days: float = changes.CREEP_WINDOW_DAYS,
    creep_runs: int = changes.CREEP_RUNS,
    tolerance: float = changes.CREEP_TOLERANCE,
    confidence: float = changes.CREEP_CONFIDENCE,
    metric: Literal["median_step_ms", "median_cpu_ms"] = "median_step_ms",
) -> changes.CreepCheck:
    """The creep guard of one case at ``now`` (UTC, default now): the ``creep_runs`` newest accepted runs
    against the ``creep_runs`` accepted runs that formed the baseline ``window_days`` days earlier, in the
    environment of the active baseline, on ``metric`` (each run's median step time, or its median CPU time
    per step: ``tasks.store.series.baseline_levels``). Raises LookupError for an unknown model."""
    now = now or dt.datetime.now(dt.UTC)
    key, cur = baseline_levels(db_url, model, case_name, runs=creep_runs, at=now, metric=metric)
    _, old = (
        baseline_levels(
            db_url,
            model,
            case_name,
            runs=creep_runs,
            at=now - dt.timedelta(days=window_days),
            comparability_key=key,
            metric=metric,
        )
        if key
        else (None, [])
    )
    old = [r for r in old if r[0] not in {c[0] for c in cur}]  # a run is on one side only
    return changes.creep_guard(
        [m for _, m in cur],
        [m for _, m in old],
        now_runs=[r for r, _ in cur],
        then_runs=[r for r, _ in old],
        tolerance=tolerance,
        confidence=confidence,
        metric=metric,
    )


def series_metric(db_url: str, model: str, case_name: str, series: list[SeriesRun]) -> calibration.HistoryMetric:
    """The metric of a case's series by the history verdict's rule (``calibration.history_metric``): the two
    metrics' between-process drift over the newest ``calibration.CALIBRATION_WINDOW`` accepted runs of the
    newest run's environment (``tasks.store.series.baseline_levels``, their figures from ``series``), whether a
    GPU may carry the steps (any of those runs or the newest allocated GPU memory, else the newest run's
    fingerprint: ``calibration.gpu_in_use``), and whether the newest run ("candidate") and every other run of
    the series recorded CPU time. ``series``: ``run_series(..., cpu=True)`` of the case, oldest first, not
    empty."""
    newest = series[-1]
    by_id = {r.run_id: r for r in series}
    key = newest.comparability_key
    _, levels = (
        baseline_levels(db_url, model, case_name, runs=calibration.CALIBRATION_WINDOW, comparability_key=key)
        if key
        else (None, [])
    )
    accepted = [by_id[rid] for rid, _ in levels if rid in by_id]
    peak = next((r.peak_device_bytes for r in [newest, *accepted] if r.peak_device_bytes is not None), None)
    env = (
        fingerprint_data({newest.fingerprint_id}, db_url).get(newest.fingerprint_id) if newest.fingerprint_id else None
    )
    return calibration.history_metric(
        [(str(r.version), r.median_step_ms, r.median_cpu_ms) for r in accepted],
        gpu=calibration.gpu_in_use(env or {}, peak),
        candidate_cpu=newest.median_cpu_ms is not None,
        baselines_cpu=all(r.median_cpu_ms is not None for r in series[:-1]),
    )


def watch_case(
    db_url: str,
    model: str,
    case_name: str,
    run_id: int | None = None,
    *,
    new_points: bool = True,
    now: dt.datetime | None = None,
    case: Case | None = None,
    **creep_kwargs: Any,
) -> TrendReport:
    """The trend check of one case (module docstring). ``run_id``: tonight's run; new change points are
    looked for only when it is the newest run of the series (None: the newest run, whichever it is), and
    not at all with ``new_points=False`` (tonight's run failed); the runs that confirm one:
    :func:`min_runs_after`. ``case``: the case as planned tonight; with it, each tentative slowdown gets the
    paired gate that confirms it tonight (``changes.confirm_choice``), without it none is planned.
    The creep guard alerts once (``changes.creep_is_new``). ``creep_kwargs`` go to :func:`creep_check`.
    Raises LookupError for an unknown model; ValueError for a bad ``PERFWATCH_CHANGE_MIN_RUNS_AFTER``."""
    series = run_series(db_url, model, case_name, cpu=True)
    ids = [r.run_id for r in series]
    rule = series_metric(db_url, model, case_name, series) if series else None
    metric: Literal["median_step_ms", "median_cpu_ms"] = (
        "median_cpu_ms" if rule is not None and rule.metric == "cpu" else "median_step_ms"
    )
    # CPU time is chosen only when every run of the series recorded it
    values = [cast(float, r.median_cpu_ms) if metric == "median_cpu_ms" else r.median_step_ms for r in series]
    after = min_runs_after()
    points = changes.detect_change_points(values, ids, metric=metric, min_runs_after=after) if series else []
    new: list[changes.ChangePoint] = []
    tentative: list[dict[str, Any]] = []
    confirming: list[Confirmation] = []
    if new_points and ids and (run_id is None or ids[-1] == run_id):
        new = changes.new_change_points(values, ids, metric=metric, min_runs_after=after)
        tentative = [tentative_json(cp, series[-1].started_at.date()) for cp in points if cp.status == "tentative"]
        confirming = confirmations(model, case_name, series, points, case)
    creep = creep_check(db_url, model, case_name, now=now, metric=metric, **creep_kwargs)
    # the guard as it stood before tonight's run was accepted: a creep alerts on the night it turns
    before = (
        creep_check(
            db_url,
            model,
            case_name,
            now=series[-1].started_at - dt.timedelta(seconds=1),
            metric=metric,
            **creep_kwargs,
        )
        if creep.verdict == "creep" and len(series) > 1
        else None
    )
    shifts = [cp.run_id for cp in changes.confirmed(points) if cp.slower]
    moved = moved_ops(db_url, model, case_name, ids, new, after)
    return TrendReport(
        model=model,
        case_name=case_name,
        run_id=run_id,
        runs=len(series),
        new_change_points=[cp.to_json() for cp in new],
        tentative_change_points=tentative,
        creep=creep.to_json(),
        alerts=changes.alerts(new, creep, creep_alerts=changes.creep_is_new(creep, before, shifts), moved=moved),
        metric=metric,
        history_metric=rule.model_dump(mode="json") if rule is not None else None,
        confirmations=[c.to_xcom() for c in confirming],
        sign_test=changes.sign_test([r.verdict for r in series]).to_json(),
        moved_ops={
            str(rid): [{"op": list(o.op), **o.point.to_json(), "missing_runs": o.missing} for o in ops]
            for rid, ops in moved.items()
        },
    )


def moved_ops(
    db_url: str, model: str, case_name: str, ids: Sequence[int], new: Sequence[changes.ChangePoint], after: int
) -> dict[int, list[changes.OpChangePoint]]:
    """Which ops moved where each new slower change point is (``changes.ops_at`` over the case's op series,
    ``tasks.services.op_changes``): change point run id -> its op change points, none read without such a point.
    ``ids``: the step-time series' run ids, oldest first; ``after``: the runs that confirm a point."""
    slower = [cp for cp in new if cp.slower and cp.status == "confirmed"]
    if not slower:
        return {}
    from tasks.services.op_changes import op_series

    positions = {rid: i for i, rid in enumerate(ids)}
    out: dict[int, list[changes.OpChangePoint]] = {}
    for s in op_series(db_url, model, case_name).values():
        found = changes.op_change_points(s.per_run, [r.run_id for r in s.runs], min_runs_after=after)
        for cp in slower:
            if ops := changes.ops_at(cp, found, positions):
                out[cp.run_id] = ops
    return out


def confirmations(
    model: str,
    case_name: str,
    series: Sequence[SeriesRun],
    points: Sequence[changes.ChangePoint],
    case: Case | None,
) -> list[Confirmation]:
    """The :class:`~tasks.records.Confirmation` of each tentative slowdown of ``points`` (the change points of
    ``series``, oldest first): the version and environment of the run before the point against the newest run's,
    chosen by ``changes.confirm_choice``; none without ``case`` (its settings are not known)."""
    if case is None or not series:
        return []
    newest = series[-1]
    out = []
    for cp in points:
        prev = series[cp.index - 1]
        choice = changes.confirm_choice(
            cp,
            before_version=prev.version,
            before_key=prev.comparability_key,
            version=newest.version,
            key=newest.comparability_key,
            cross_environment=case.cross_environment,
        )
        if choice is not None:
            out.append(
                Confirmation(
                    model=model,
                    case_name=case_name,
                    change_run_id=cp.run_id,
                    metric=cp.metric,
                    ratio=cp.ratio,
                    kind=choice.kind,
                    baseline_version=choice.baseline_version,
                    version=choice.version,
                    reason=choice.reason,
                )
            )
    return out


#: a confirmation run's DAG run id is the night's with this suffix: its identity in the store
#: (``RunContext``: dag_id, dag_run_id, model, version as planned, case) is never tonight's run's
CONFIRM_RUN_SUFFIX = ".confirm"


def confirm_state(planned: RunState, confirmation: Confirmation) -> RunState:
    """The run state of the paired gate that confirms ``confirmation`` tonight (``kind`` set), from the state
    ``planned`` for its case tonight: trigger ``confirm``, the case's version pinned to the newest run's (B), side
    A the version before the point (``RunContext.paired_version``; for an ``environment`` gate only when the
    version changed too: the case's cross-environment gate runs A in the old environment), the same measuring
    queue; its stages are a run's like any other, through the same measuring pool.

    Raises:
        ValueError: ``confirmation`` has no gate (``kind`` None).
    """
    if confirmation.kind is None or confirmation.version is None or confirmation.baseline_version is None:
        raise ValueError(f"{confirmation.change}: no paired gate can confirm it ({confirmation.reason})")
    ctx = planned.ctx
    case = Case.model_validate({**ctx.case.model_dump(), "version": confirmation.version})
    paired: str | None = confirmation.baseline_version
    if confirmation.kind == "environment" and paired == confirmation.version:
        paired = None  # the same version on both sides, A in the old environment
    return RunState(
        ctx=RunContext(
            dag_id=ctx.dag_id,
            dag_run_id=ctx.dag_run_id + CONFIRM_RUN_SUFFIX,
            trigger="confirm",
            case=case,
            paired_version=paired,
        ),
        label=f"{planned.label or f'{case.model} {case.name}'} (confirm run {confirmation.change_run_id})",
        queue=planned.queue,
        confirms=confirmation,
    )


def watch_dag_run(
    db_url: str, dag_id: str, dag_run_id: str, cases: Mapping[tuple[str, str], Case] | None = None, **kwargs: Any
) -> list[TrendReport]:
    """:func:`watch_case` for every model and case the DAG run stored (successful or failed); ``cases``: the
    planned Case of each (model, case name), for the confirmations."""
    return [
        watch_case(
            db_url, model, case, run_id, new_points=status == "success", case=(cases or {}).get((model, case)), **kwargs
        )
        for model, case, run_id, status in dag_run_cases(db_url, dag_id, dag_run_id)
    ]


def raise_on_trend_alert(reports: list[TrendReport]) -> None:
    """Raise :class:`TrendAlert` when any report has an alert (the message lists them by model and case)."""
    lines = [f"{r.model} ({r.case_name}): {a}" for r in reports for a in r.alerts]
    if lines:
        raise TrendAlert("trend alert: " + "; ".join(lines) + " (`perfwatch changes MODEL` shows the series)")


def check_dag_run(
    dag_id: str,
    dag_run_id: str,
    planned: Sequence[Mapping[str, Any]] = (),
    settings: Settings | None = None,
    *,
    db_url: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The DAG's watch-trend task: :func:`watch_dag_run` on the store ``db_url``, else of ``settings`` (default: from
    the environment) with the cases ``planned`` tonight (the plan's run states), logged. Alerts nothing itself: the
    night's alerts wait for the confirmations (:func:`judge_night`).

    Returns:
        ``{"reports": [TrendReport.to_json()], "confirm": [RunState.to_xcom()]}``: the reports, and the run state
        of each paired gate to run tonight (:func:`confirm_state`), for the DAG to measure like any case.
    """
    settings = (settings or Settings.from_env()).with_store(db_url)
    states = [RunState.model_validate(p) for p in planned]
    by_case = {(st.ctx.case.model, st.ctx.case.name): st for st in states}
    reports = watch_dag_run(settings.database_url, dag_id, dag_run_id, {k: st.ctx.case for k, st in by_case.items()})
    confirm = []
    for r in reports:
        log.info(
            "trend %s (%s): %d runs of %s, %d new change point(s), %d tentative%s, creep %s%s; verdicts: %s",
            r.model,
            r.case_name,
            r.runs,
            r.metric,
            len(r.new_change_points),
            len(r.tentative_change_points),
            "".join(
                f" (run {t['run_id']} x{t['ratio']:.3f}: confirmed by the night of {t['confirms_on']} if it holds)"
                for t in r.tentative_change_points
            ),
            r.creep.get("verdict"),
            f": {r.creep.get('reason')}" if r.creep else "",
            r.sign_test.get("reason"),
        )
        for c in (Confirmation.model_validate(d) for d in r.confirmations):
            if c.kind is None:
                log.info(
                    "trend %s (%s): %s: no paired gate can confirm it: %s", r.model, r.case_name, c.change, c.reason
                )
                continue
            log.info("trend %s (%s): %s: confirming tonight: %s", r.model, r.case_name, c.change, c.reason)
            confirm.append(confirm_state(by_case[(r.model, r.case_name)], c).to_xcom())
    return {"reports": [r.to_json() for r in reports], "confirm": confirm}


def gate_outcome(db_url: str, state: RunState) -> tuple[bool, str, int | None]:
    """How the confirming gate of ``state`` (a :func:`confirm_state`) came out, read from the store at ``db_url``
    (its run by the run's identity, ``stored_run``; its verdict's story, ``verdict_stories``): whether its
    tentative slowdown alerts and the line that says so (``changes.confirm_outcome``), and the gate's run (None:
    none stored, e.g. it failed before archiving).

    Raises:
        ValueError: ``state`` is not a confirming gate's (no ``confirms``).
    """
    c = state.confirms
    if c is None:
        raise ValueError(f"{state.ctx.dag_run_id}: not a confirming gate's run state (no confirms)")
    stored = stored_run(db_url, state.ctx)
    story = verdict_stories([stored.run_id], db_url).get(stored.run_id) if stored else None
    alert, line = changes.confirm_outcome(
        c.change,
        story.verdict if story else None,
        story.ratio if story else None,
        story.ci_low if story else None,
        story.ci_high if story else None,
        stored.run_id if stored else None,
    )
    return alert, line, stored.run_id if stored else None


@dataclass(frozen=True)
class ConfirmedNow:
    """One tentative slowdown and what its paired gate, run now in this process, said (:func:`confirm_now`).

    Attributes:
        confirmation: the point and the gate planned for it (``kind`` None: no gate can confirm it, nothing ran).
        run_id: the gate's stored run (None: no gate ran, or it failed before a run was stored).
        alert: the gate confirmed the slowdown (``regression``): it alerts.
        line: what to print: ``changes.confirm_outcome``'s line, or why no gate ran or why it failed.
    """

    confirmation: Confirmation
    run_id: int | None
    alert: bool
    line: str


def planned_cases(settings: Settings, model: str, names: Sequence[str]) -> tuple[list[Case], list[str]]:
    """The Cases of ``model`` named ``names`` as the nightly plans them, from the config (``settings.config_path``,
    ``PERFWATCH_CONFIG``; a name the config lacks is the default Case's when it matches), and the names whose
    settings are not known (no gate can be planned for them).

    Raises:
        ValueError: the config does not parse (``tasks.matrix.load_config`` names the entry and field).
    """
    from tasks.matrix import config_exists, load_config

    path = settings.config_path
    by_name = {c.name: c for c in (load_config(path) if config_exists(path) else []) if c.model == model}
    default = Case(model=model)
    by_name.setdefault(default.name, default)
    return [by_name[n] for n in names if n in by_name], [n for n in names if n not in by_name]


def confirm_now(settings: Settings, model: str, cases: Sequence[Case]) -> list[ConfirmedNow]:
    """Run, in this process and one after another, the paired gate that confirms each tentative slowdown at the
    end of ``model``'s series of each of ``cases`` (``perfwatch changes MODEL --confirm``): the nightly's rule
    (:func:`watch_case` with the case, :func:`confirmations`, :func:`confirm_state`; trigger ``confirm``, a run
    of the case like any other, stored, joining its series), judged as ``judge_night`` judges it
    (``changes.confirm_outcome``). A point no gate can confirm is returned with its reason and nothing runs; a
    gate whose stage fails is recorded failed (as every run is) and leaves the point tentative.

    Raises:
        LookupError: ``model`` has no runs in the store.
    """
    from tasks.stages.pipeline import run_case

    out = []
    stamp = dt.datetime.now(dt.UTC).strftime("cli__%Y%m%dT%H%M%S%f")
    for case in cases:
        report = watch_case(settings.database_url, model, case.name, case=case)
        for c in (Confirmation.model_validate(d) for d in report.confirmations):
            if c.kind is None:
                out.append(ConfirmedNow(c, None, False, f"{c.change}: no paired gate can confirm it: {c.reason}"))
                continue
            # one DAG-run-like identity per gate: its stored run is found by it (stored_run)
            ctx = RunContext(dag_id="perfwatch_cli", dag_run_id=f"{stamp}.{c.change_run_id}", trigger="cli", case=case)
            state = confirm_state(RunState(ctx=ctx), c)
            log.info("trend %s (%s): %s: confirming now: %s", model, case.name, c.change, c.reason)
            failed = ""
            try:
                run_case(state.ctx, settings)
            except Exception as e:  # noqa: BLE001 - recorded as a failed run by its stage; the point stays tentative
                failed = f": {type(e).__name__}: {e}"
            alert, line, run_id = gate_outcome(settings.database_url, state)
            out.append(ConfirmedNow(c, run_id, alert, line + failed))
    return out


def judge_night(trend: Mapping[str, Any], settings: Settings | None = None, *, db_url: str | None = None) -> list[str]:
    """The DAG's last trend task, after the confirmations ran: the verdict of each paired gate of ``trend["confirm"]``
    (as stored: ``tasks.store.reads.verdict_stories``) decides whether its tentative slowdown alerts
    (``changes.confirm_outcome``); then :func:`raise_on_trend_alert` on the reports of ``trend["reports"]`` with
    the confirmed slowdowns added to their alerts. Returns the line of each confirmation (logged).

    Raises:
        TrendAlert: a report alerts, or a paired gate confirmed a tentative slowdown (the gate's interval named).
    """
    settings = (settings or Settings.from_env()).with_store(db_url)  # db_url: the store, as check_dag_run
    reports = [TrendReport(**r) for r in trend.get("reports", [])]
    found: dict[tuple[str, str], list[str]] = {}
    lines = []
    for d in trend.get("confirm", []):
        state = RunState.model_validate(d)
        alert, line, _ = gate_outcome(settings.database_url, state)
        c = cast(Confirmation, state.confirms)  # gate_outcome raised without it
        log.info("trend %s (%s): %s", c.model, c.case_name, line)
        lines.append(line)
        if alert:
            found.setdefault((c.model, c.case_name), []).append(line)
    raise_on_trend_alert(
        [
            r
            if (r.model, r.case_name) not in found
            else TrendReport(**{**r.to_json(), "alerts": [*r.alerts, *found[(r.model, r.case_name)]]})
            for r in reports
        ]
    )
    return lines
