"""Sweep curves of a benchmark matrix: throughput and latency along one axis, and the best operating point.

Input: the latest successful run of each case of a model (``sql/queries/sweep.sql``), one plain dict
per case with every axis that names it (``tasks.store.queries.SERIES_COLUMNS``: ``mode``, ``batch_size``,
``precision``, ``xla``, ``strategy``, ``quantization``, ``scenario`` with the server's rate or search,
``tflite_threads``, ``deterministic``, ``device`` or hardware label, ``inputs`` hash), ``median_step_ms``
and ``p99_step_ms`` (ms, our timer, profiler off: a training step, or one batch's latency in
``infer``/``tflite`` mode) and ``throughput_eps`` (examples/s at the median step time), with the p99's
distribution-free 95% interval, the samples it rests on and whether they support that interval
(``p99_low_ms``, ``p99_high_ms``, ``p99_n``, ``p99_estimable``: ``tasks.analysis.percentiles.percentile_ci``).

A scenario case is judged by its scenario's own figures (issue 27, the serving team's audit): its throughput
is the scenario's (``throughput_of`` says which: examples over all batches for single-stream, over the whole
run for offline, the queries served per second at the reported point for server, a search's at its max QPS;
``batch_size / median`` only for a train case, the one figure every run has), and a server case's p99 is its
per-query p99 (``p99_of``: arrival to result, queueing included), never its batches' service time: at "513.3
examples/s, p99 13.52 ms" the server search case the audit read had its max QPS at 473 and a per-query p99 of
40.07 ms [38.1, 42.9].

The cases that agree on every other axis form a *series*, a curve along the swept axis and along it only
(``infer-bs4``, ``infer-bs4-offline`` and ``infer-bs4-server-q100`` are three series: another scenario is
another curve); the **knee** of a series is its case of highest throughput whose p99 step time is within the
latency budget *at 95% confidence*: the upper bound of its p99's interval is within the budget (without a
budget: its highest throughput). A case too short to bound its p99 (fewer than 299 measured steps at 95%)
cannot be shown within the budget and is never the knee under one; its p99 is *not estimable* and has no
point here (issue 27: the bound the sample supports, its one-sided ``p99_low_ms``, never a point it cannot
support), so nothing ranks or chooses by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SweepPoint:
    """One case on its series' curve.

    Attributes:
        series: the other axes' values that vary between the model's cases, e.g. ``mode=train
            precision=fp32`` or ``scenario=server-q100 device=auto``; ``all`` when only the swept axis varies.
        value: the case's value of the swept axis (e.g. batch size 16).
        case, run_id, version: the case name and the run it is read from.
        median_step_ms, p99_step_ms: step time (ms, our timer): median and p99 (nearest rank) of the
            run's measured steps; p99 None when the run kept no samples, and when it is not estimable.
        p99_low_ms, p99_high_ms: the p99's two-sided 95% interval (ms, order statistics); where not
            estimable, the one-sided bounds (at 97.5%) the sample has, None for the one it is too short for
            (a p99's upper bound under 299 steps); None where the samples are absent.
        p99_n: the measured steps the p99 rests on (None: unknown).
        p99_estimable: the measured steps support a two-sided 95% interval of the p99 (299 or more); None
            where unknown.
        throughput_eps: examples/s at the median step time.
        within_budget: the p99's upper bound <= the latency budget; None without a budget, or when the
            p99 has no upper bound (too few samples: not shown within the budget).
        knee: the series' best operating point (highest throughput within the budget).
        throughput_of: what ``throughput_eps`` is (module docstring): ``examples/s at the median step``,
            ``examples/s over all batches``, ``examples/s over the run``, ``queries/s achieved``.
        p99_of: what the p99 is of: ``per step``, ``per batch`` or ``per query`` (a server case).
        median_step_low_ms, median_step_high_ms, median_step_n: the median step time's 95% interval (ms) and
            the steps it rests on (None where the samples are absent or too few).
        max_qps: a server search case's max QPS (the issued rate of the highest rate that met its bound, q/s);
            None for every other case.
    """

    series: str
    value: Any
    case: str
    run_id: int
    version: str
    median_step_ms: float
    p99_step_ms: float | None
    p99_low_ms: float | None
    p99_high_ms: float | None
    p99_n: int | None
    p99_estimable: bool | None
    throughput_eps: float
    within_budget: bool | None
    knee: bool
    throughput_of: str = "examples/s at the median step"
    p99_of: str = "per step"
    median_step_low_ms: float | None = None
    median_step_high_ms: float | None = None
    median_step_n: int | None = None
    max_qps: float | None = None


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def _order(v: Any) -> tuple[int, float, str]:
    """Sort key for axis values of mixed kinds: numbers and bools by value, then text."""
    return (0, float(v), "") if isinstance(v, int | float) else (1, 0.0, str(v))


def sweep(
    points: Sequence[Mapping[str, Any]], axis: str, axes: Sequence[str], latency_budget_ms: float | None = None
) -> list[SweepPoint]:
    """The sweep of ``points`` along ``axis``: one :class:`SweepPoint` per case, ordered by series and
    then by the axis value, with each series' knee marked.

    Args:
        points: one mapping per case (the newest successful run of each): ``case``, ``run_id``,
            ``version``, ``median_step_ms``, ``p99_step_ms``, ``p99_low_ms``, ``p99_high_ms``, ``p99_n``,
            ``p99_estimable`` (each may be None; a p99 with ``p99_estimable`` False loses its point),
            ``throughput_eps`` and every name in ``axes``; optionally ``throughput_of``, ``p99_of``,
            ``median_step_low_ms``, ``median_step_high_ms``, ``median_step_n`` and ``max_qps``
            (:class:`SweepPoint`).
        axis: the swept axis, one of ``axes`` (e.g. ``batch_size``).
        axes: every axis that names a case (``tasks.store.queries.SERIES_COLUMNS``): the cases that agree on
            all but ``axis`` form a series, so a series varies ``axis`` alone.
        latency_budget_ms: highest upper bound of the p99 step time (ms) a knee may have; None: no budget.

    Returns:
        The points; a series with no case within the budget, or with runs at one value of ``axis`` only (a
        point, not a curve: nothing to trade off), has no knee (every ``knee`` False there).

    Raises:
        ValueError: ``axis`` is not one of ``axes``; ``points`` is empty; ``latency_budget_ms`` is not
            positive; a point lacks a field or has a median step time or throughput that is not positive.
    """
    if axis not in axes:
        raise ValueError(f"unknown sweep axis {axis!r}; the axes are {', '.join(axes)}")
    if not points:
        raise ValueError("no successful run to sweep")
    if latency_budget_ms is not None and not latency_budget_ms > 0:
        raise ValueError(f"latency budget {latency_budget_ms!r} ms must be positive")
    need = (
        "case",
        "run_id",
        "version",
        "median_step_ms",
        "p99_step_ms",
        "p99_low_ms",
        "p99_high_ms",
        "p99_n",
        "p99_estimable",
        "throughput_eps",
        *axes,
    )
    for p in points:
        if missing := [k for k in need if k not in p]:
            raise ValueError(f"sweep point {dict(p)} lacks {', '.join(missing)}")
        if not (p["median_step_ms"] > 0 and p["throughput_eps"] > 0):
            raise ValueError(
                f"case {p['case']!r}: median step time {p['median_step_ms']!r} ms and throughput "
                f"{p['throughput_eps']!r} examples/s must be positive"
            )
    others = [a for a in axes if a != axis and len({repr(p[a]) for p in points}) > 1]

    def series_of(p: Mapping[str, Any]) -> str:
        return " ".join(f"{a}={p[a]}" for a in others) or "all"

    def within(p: Mapping[str, Any]) -> bool | None:
        if latency_budget_ms is None or p["p99_high_ms"] is None:  # no bound: not shown within the budget
            return None
        high: float = p["p99_high_ms"]
        return high <= latency_budget_ms

    out: list[SweepPoint] = []
    by_series: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        by_series.setdefault(series_of(p), []).append(p)
    for series in sorted(by_series):
        curve = sorted(by_series[series], key=lambda p: (_order(p[axis]), p["case"]))
        eligible = [p for p in curve if (within(p) is True if latency_budget_ms is not None else True)]
        if len({repr(p[axis]) for p in curve}) < 2:  # one point of the axis: nothing to trade off, no knee
            eligible = []
        best = max(eligible, key=lambda p: p["throughput_eps"]) if eligible else None
        out += [
            SweepPoint(
                series=series,
                value=p[axis],
                case=p["case"],
                run_id=int(p["run_id"]),
                version=str(p["version"]),
                median_step_ms=float(p["median_step_ms"]),
                p99_step_ms=None
                if p["p99_step_ms"] is None or p["p99_estimable"] is False
                else float(p["p99_step_ms"]),
                p99_low_ms=None if p["p99_low_ms"] is None else float(p["p99_low_ms"]),
                p99_high_ms=None if p["p99_high_ms"] is None else float(p["p99_high_ms"]),
                p99_n=None if p["p99_n"] is None else int(p["p99_n"]),
                p99_estimable=None if p["p99_estimable"] is None else bool(p["p99_estimable"]),
                throughput_eps=float(p["throughput_eps"]),
                within_budget=within(p),
                knee=p is best,
                throughput_of=str(p.get("throughput_of") or "examples/s at the median step"),
                p99_of=str(p.get("p99_of") or "per step"),
                median_step_low_ms=_float(p.get("median_step_low_ms")),
                median_step_high_ms=_float(p.get("median_step_high_ms")),
                median_step_n=None if p.get("median_step_n") is None else int(p["median_step_n"]),
                max_qps=_float(p.get("max_qps")),
            )
            for p in curve
        ]
    return out
