"""Retention of raw step samples: thin old runs' ``step_samples`` down to their stored quantiles.

A year of 100 models x 30 cases at 320 samples a night is ~350M ``step_samples`` rows (issue 24). Every run
keeps its per-phase summary in ``step_quantiles`` (written by the archive, backfilled by migration 0007), and
the named queries read spread and counts from there, so deleting an old run's raw samples changes none of
what ``history``, ``sweep``, ``top_op_regressions`` or ``version_compare`` return for it. Thinning never
deletes a run, a comparison (the verdict), a baseline, op stats or telemetry: only ``step_samples`` rows, and
only of runs whose every phase with samples has its ``step_quantiles`` row (written here first when missing, with
the run's copy of its measured summary: ``runs.n_measured``, ``p10_step_ms``, ``p90_step_ms``, 0011).

Kept raw whatever their age: the runs that are an active baseline (``baselines.superseded_at IS NULL``), which
baseline-compare bootstraps against. An older lookback baseline that was thinned is skipped by the verdict
with its reason (``tasks.analysis.verdict.usable_baselines``: too few measured step times).

Setting: ``PERFWATCH_SAMPLES_RETENTION_DAYS`` (``tasks.settings.Settings.samples_retention_days``), used by
``perfwatch db thin`` when ``--older-than`` is not given.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import CursorResult, delete, exists, select, update

from tasks.store.engine import session_scope
from tasks.store.schema import Baseline, Run, StepQuantiles, StepSample, utcnow

THIN_BATCH_RUNS = 500
"""Runs thinned per transaction: each batch commits on its own, so an interrupted thin keeps what it did and
a second one goes on from there (it is idempotent)."""


@dataclass(frozen=True)
class ThinReport:
    """What :func:`thin_samples` did: ``cutoff`` (UTC; runs started before it were candidates), ``runs``
    thinned, ``samples`` (``step_samples`` rows) deleted, ``summarised`` (run, phase) summaries it had to
    write first, and ``kept_baselines`` old runs kept raw because they are an active baseline."""

    cutoff: dt.datetime
    runs: int
    samples: int
    summarised: int
    kept_baselines: int


def thin_samples(
    db_url: str,
    older_than_days: float,
    *,
    now: dt.datetime | None = None,
    batch_runs: int = THIN_BATCH_RUNS,
) -> ThinReport:
    """Delete the raw ``step_samples`` of every run started more than ``older_than_days`` days before ``now``
    (default: the current UTC time), except active baselines' runs, keeping each run's ``step_quantiles``
    (marked ``thinned_at``). Idempotent; commits every ``batch_runs`` runs.

    Raises:
        ValueError: ``older_than_days`` is not a number of days > 0, or ``batch_runs`` < 1.
        sqlalchemy.exc.SQLAlchemyError: the store cannot be written.
    """
    from tasks.store.writes import step_quantiles

    if not older_than_days > 0 or older_than_days == float("inf"):
        raise ValueError(f"older_than_days={older_than_days!r}: expected a number of days > 0")
    if batch_runs < 1:
        raise ValueError(f"batch_runs={batch_runs!r}: expected at least 1 run per batch")
    now = now or utcnow()
    cutoff = now - dt.timedelta(days=older_than_days)
    active = exists().where(Baseline.run_id == Run.id, Baseline.superseded_at.is_(None))
    has_samples = exists().where(StepSample.run_id == Run.id)
    old = select(Run.id).where(Run.started_at < cutoff, has_samples)
    with session_scope(db_url) as s:
        candidates = list(s.scalars(old.where(~active).order_by(Run.id)))
        kept = len(s.scalars(old.where(active)).all())
    runs = samples = summarised = 0
    for i in range(0, len(candidates), batch_runs):
        ids = candidates[i : i + batch_runs]
        with session_scope(db_url) as s:
            have = set(
                s.execute(select(StepQuantiles.run_id, StepQuantiles.phase).where(StepQuantiles.run_id.in_(ids)))
            )
            present = s.execute(
                select(StepSample.run_id, StepSample.phase)
                .where(StepSample.run_id.in_(ids))
                .group_by(StepSample.run_id, StepSample.phase)
            ).all()
            lacking = {(rid, phase) for rid, phase in present if (rid, phase) not in have}
            missing: dict[tuple[int, str], tuple[list[float], list[float | None], list[float | None]]] = {}
            if lacking:  # runs stored without their summary: summarise them before the samples go
                rows = s.execute(
                    select(
                        StepSample.run_id,
                        StepSample.phase,
                        StepSample.step_time_ms,
                        StepSample.cpu_ms,
                        StepSample.wait_ms,
                    )
                    .where(StepSample.run_id.in_({rid for rid, _ in lacking}))
                    .order_by(StepSample.run_id, StepSample.phase, StepSample.step)
                ).all()
                for rid, phase, t, cpu, wait in rows:
                    if (rid, phase) in lacking:
                        acc = missing.setdefault((rid, phase), ([], [], []))
                        acc[0].append(t)
                        acc[1].append(cpu)
                        acc[2].append(wait)
            summaries = {key: step_quantiles(*acc) for key, acc in missing.items()}
            s.add_all(StepQuantiles(run_id=rid, phase=phase, **row) for (rid, phase), row in summaries.items())
            for (rid, phase), row in summaries.items():
                if phase == "measured":  # the run's own copy of its measured summary (0010, 0011)
                    s.execute(
                        update(Run)
                        .where(Run.id == rid)
                        .values(n_measured=row["n"], p10_step_ms=row["p10_ms"], p90_step_ms=row["p90_ms"])
                    )
            s.flush()
            s.execute(update(StepQuantiles).where(StepQuantiles.run_id.in_(ids)).values(thinned_at=now))
            result = s.execute(delete(StepSample).where(StepSample.run_id.in_(ids)))
            deleted = cast(CursorResult[Any], result).rowcount  # a DELETE's result is a CursorResult
        runs += len(ids)
        samples += int(deleted or 0)
        summarised += len(missing)
    return ThinReport(cutoff=cutoff, runs=runs, samples=samples, summarised=summarised, kept_baselines=kept)
