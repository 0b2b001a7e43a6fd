"""Watch the trend: change points in a nightly series, and the creep guard. Pure functions over plain values.

A per-run verdict judges one run against a baseline that moves with every accepted run, so it misses
two things that only the series shows: a step change hidden in the run-to-run noise (sd about 8%
between processes on the 2-core dev machine) and a slow creep that the auto-accepted baselines follow.

* **Change points** (:func:`detect_change_points`): Apache Otava's E-divisive means with its
  Student t significance test (``otava.analysis.compute_change_points``: Hunter, Fleming et al. 2023,
  https://doi.org/10.1145/3578244.3583719 — split the series in sliding windows, then merge away
  the points that are not significant at ``max_pvalue`` or smaller than ``min_magnitude``), run on the
  series of per-run values (median step time ms, p90 ms, median CPU time per step ms, throughput
  examples/s). Each change point gets the ratio of the segment after it to the segment before it
  (geometric means, the segments between its neighbouring change points) with a Welch t interval on
  the logs (scipy), and Otava's
  p-value. A segment of one run has no interval (``ci_low``/``ci_high`` None).
* **Persistence.** E-divisive is most sensitive at the ends of a series: a single slow night at the end
  splits off as a "change" of one run. So a change point is ``confirmed`` only when at least
  ``min_runs_after`` runs (default :data:`DEFAULT_MIN_RUNS_AFTER`; the DAG reads
  ``PERFWATCH_CHANGE_MIN_RUNS_AFTER``) follow it in its segment; fewer at the end of the series is
  ``tentative`` (``runs_to_confirm`` more runs would confirm it, if it holds), fewer before the next change
  point is ``transient`` (an excursion that ended). :func:`new_change_points` is what a nightly check alerts
  on: the confirmed points of the series that the series without its newest run did not have confirmed,
  so a change alerts once, on the night that confirms it; tentative and transient points never alert.
* **Per-op change points** (:func:`op_change_points`): the same search on each of a case's largest ops' series
  (:func:`watched_ops`; each run's op time per step, µs: ``attribution.op_times``), with a larger
  ``min_magnitude`` (an op spreads more than the step). :func:`ops_at` picks the ops that moved where a step-time
  change point is, so an alert names them (FBDetect does this per subroutine at Meta: Tang et al., "FBDetect:
  Catching Tiny Performance Regressions at Hyperscale", SOSP 2024).
* **Creep guard** (:func:`creep_guard`): the level of the active baseline (the median step times of
  the newest accepted runs) against the level of the baseline that was active a window ago (e.g.
  30 days): ratio of geometric means with a one-sided Welch t bound. ``creep`` when the lower bound
  lies above ``1 + tolerance``; ``ok`` when the upper bound lies below it; else ``inconclusive``
  (as every perfwatch threshold: a test on an estimate with its interval).

How well this works on this machine's real noise: ``bench/changes.py`` (the defaults below come from it).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # numpy and scipy are imported where used: `perfwatch --help` reads this module's defaults
    import numpy as np
    import numpy.typing as npt

#: metric -> +1 when a higher value is slower (times), -1 when a lower value is slower (throughput).
METRICS: dict[str, int] = {"median_step_ms": +1, "p90_step_ms": +1, "median_cpu_ms": +1, "throughput_eps": -1}
#: The series of one op (:func:`op_change_points`): its time per step, µs (``attribution.op_times``).
OP_METRIC = "op_us_per_step"
#: every series a change point can be looked for in, with its direction (as :data:`METRICS`)
DIRECTIONS: dict[str, int] = {**METRICS, OP_METRIC: +1}

#: Otava's significance threshold for the final change points (bench/changes.py: false alarms per series).
DEFAULT_MAX_PVALUE = 2e-5
#: Smallest relative change of the segment means reported as a change point (Otava's ``min_magnitude``).
DEFAULT_MIN_MAGNITUDE = 0.02
#: Otava's sliding window (runs) of the split step.
DEFAULT_WINDOW = 30
#: Fewest runs in a series before change points are looked for.
MIN_POINTS = 8
#: Two change points this many runs apart or closer are the same change seen on different nights.
SAME_CHANGE_RUNS = 2
#: Confidence of the ratio intervals of change points (two-sided).
DEFAULT_CONFIDENCE = 0.95
#: Fewest runs after a change point (in its segment) before it is confirmed and may alert.
DEFAULT_MIN_RUNS_AFTER = 3

#: a change point's standing (module docstring, "Persistence")
Status = Literal["confirmed", "tentative", "transient"]

#: Creep guard defaults: relative level change that counts, one-sided confidence of the bound, how many
#: accepted runs make a level, how far back the old baseline is.
CREEP_TOLERANCE = 0.05
CREEP_CONFIDENCE = 0.995
CREEP_RUNS = 7
CREEP_WINDOW_DAYS = 30


@dataclass(frozen=True)
class ChangePoint:
    """One change point of a series.

    Attributes:
        metric: the series (``median_step_ms``, ``p90_step_ms``, ``median_cpu_ms``: ms; ``throughput_eps``:
            examples/s; ``op_us_per_step``: one op's time per step, µs).
        index: position in the series of the first run after the change.
        run_id: that run's id.
        before, after: geometric means of the segments before and after (the series' unit).
        ratio: ``after / before``; ``ci_low``, ``ci_high``: its ``confidence`` interval (Welch t on the logs);
            None when a segment has a single run (no interval).
        p_value: Otava's two-sided t-test p-value of the split (segment means).
        n_before, n_after: runs in the two segments.
        slower: the change makes the model slower (a time went up, or throughput went down).
        status: ``confirmed`` (``n_after`` >= ``min_runs_after``), ``tentative`` (fewer, at the end of the
            series) or ``transient`` (fewer, before the next change point); only a confirmed point alerts.
        runs_to_confirm: for a tentative point, the runs still needed after the newest (0 otherwise).
    """

    metric: str
    index: int
    run_id: int
    before: float
    after: float
    ratio: float
    ci_low: float | None
    ci_high: float | None
    p_value: float
    n_before: int
    n_after: int
    slower: bool
    confidence: float = DEFAULT_CONFIDENCE
    status: Status = "confirmed"
    runs_to_confirm: int = 0

    def to_json(self) -> dict[str, Any]:
        """The change point as a JSON-safe dict."""
        return asdict(self)


def definition_segments(definitions: Sequence[str | None]) -> list[range]:
    """The stretches of one metric definition in a series, oldest first: the positions of each run of
    consecutive equal ``definitions`` (one per value, e.g. each run's ``runs.throughput_def``,
    ``tasks.records.THROUGHPUT_DEFS``). A change-point search, a series line or a comparison runs within one
    stretch: where a stored metric's definition changed, its values are two metrics (asv and Otava keep one
    benchmark one meaning), and the change of definition is no change of the model."""
    out: list[range] = []
    start = 0
    for i in range(1, len(definitions) + 1):
        if i == len(definitions) or definitions[i] != definitions[start]:
            out.append(range(start, i))
            start = i
    return out if definitions else []


def _series(values: Sequence[float], run_ids: Sequence[int], metric: str) -> npt.NDArray[np.float64]:
    import numpy as np

    if metric not in DIRECTIONS:
        raise ValueError(f"metric {metric!r}: expected one of {sorted(DIRECTIONS)}")
    if len(values) != len(run_ids):
        raise ValueError(f"{len(values)} values but {len(run_ids)} run ids: expected one run id per value")
    x = np.asarray(values, dtype=float)
    bad = np.flatnonzero(~np.isfinite(x) | (x <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{metric}[{i}] = {values[i]!r} (run {run_ids[i]}): expected a finite value > 0")
    return x


def _ratio_ci(
    before: npt.NDArray[np.float64], after: npt.NDArray[np.float64], confidence: float
) -> tuple[float, float | None, float | None]:
    import numpy as np

    lb, la = np.log(before), np.log(after)
    ratio = float(np.exp(la.mean() - lb.mean()))
    if len(lb) < 2 or len(la) < 2:  # one run on a side: no interval (never [0, inf])
        return ratio, None, None
    from scipy import stats as sps

    ci = sps.ttest_ind(la, lb, equal_var=False).confidence_interval(confidence)
    return ratio, float(np.exp(ci.low)), float(np.exp(ci.high))


def detect_change_points(
    values: Sequence[float],
    run_ids: Sequence[int],
    *,
    metric: str = "median_step_ms",
    max_pvalue: float = DEFAULT_MAX_PVALUE,
    min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
    window_len: int = DEFAULT_WINDOW,
    confidence: float = DEFAULT_CONFIDENCE,
    min_points: int = MIN_POINTS,
    min_runs_after: int = DEFAULT_MIN_RUNS_AFTER,
) -> list[ChangePoint]:
    """Change points of one series of runs, oldest first (Apache Otava's E-divisive means + t-test).

    Args:
        values: one value per run (``metric``'s unit: ms, or examples/s for throughput), oldest first.
        run_ids: the run of each value.
        metric: a key of :data:`DIRECTIONS` (which direction is slower).
        max_pvalue, min_magnitude, window_len: Otava's significance threshold, smallest relative change of
            the segment means, and split window (runs).
        confidence: of the ratio intervals (two-sided).
        min_points: a shorter series has no change points (empty list).
        min_runs_after: runs after a point (in its segment) that confirm it (``status``, module docstring).

    Returns:
        The change points, in series order, each with its ``status``.

    Raises:
        ValueError: lengths differ, a value is not finite and > 0 (names its index and run), an unknown metric,
            ``min_runs_after`` < 1.
    """
    import numpy as np

    if min_runs_after < 1:
        raise ValueError(f"min_runs_after = {min_runs_after!r}: expected a whole number of runs >= 1")
    x = _series(values, run_ids, metric)
    if len(x) < max(min_points, 4):
        return []
    from otava.analysis import compute_change_points

    # a list, not an ndarray: otava 0.8 slices its windows only from lists (ChangePointDetector)
    found, _weak = compute_change_points(
        x.tolist(), window_len=window_len, max_pvalue=max_pvalue, min_magnitude=min_magnitude
    )
    cuts = [int(cp.index) for cp in found]
    out = []
    for k, (cp, cut) in enumerate(zip(found, cuts, strict=True)):
        lo = cuts[k - 1] if k > 0 else 0
        hi = cuts[k + 1] if k + 1 < len(cuts) else len(x)
        before, after = x[lo:cut], x[cut:hi]
        ratio, ci_low, ci_high = _ratio_ci(before, after, confidence)
        status: Status = "confirmed"
        if len(after) < min_runs_after:
            status = "tentative" if hi == len(x) else "transient"
        out.append(
            ChangePoint(
                metric=metric,
                index=cut,
                run_id=int(run_ids[cut]),
                before=float(np.exp(np.log(before).mean())),
                after=float(np.exp(np.log(after).mean())),
                ratio=ratio,
                ci_low=ci_low,
                ci_high=ci_high,
                p_value=float(cp.stats.pvalue),
                n_before=len(before),
                n_after=len(after),
                slower=(ratio > 1) == (DIRECTIONS[metric] > 0),
                confidence=confidence,
                status=status,
                runs_to_confirm=min_runs_after - len(after) if status == "tentative" else 0,
            )
        )
    return out


#: Ops of a case whose series are searched (:func:`watched_ops`): the largest by time per step.
DEFAULT_TOP_OPS = 10
#: Smallest relative change of an op's segment means reported (Otava's ``min_magnitude`` for op series): an op's
#: time per step spreads more from run to run than the step time (bench/op_changes.py).
DEFAULT_OP_MIN_MAGNITUDE = 0.05


@dataclass(frozen=True)
class OpChangePoint:
    """A change point of one op's time per step in a nightly series (:func:`op_change_points`).

    Attributes:
        op: the op's key, (host_or_device, op_type, op_name) as xprof's framework_op_stats names it.
        point: the change point of its series (``metric`` ``op_us_per_step``; ``before``/``after`` in µs per step;
            ``index`` counts the runs that hold the op).
        runs: runs of the series that hold the op (its series' length).
        missing: runs of the series whose op table lacks it (left out of its series, never read as 0 µs).
    """

    op: tuple[str, str, str]
    point: ChangePoint
    runs: int
    missing: int


def watched_ops(per_run: Sequence[Mapping[tuple[str, str, str], float]], top: int = DEFAULT_TOP_OPS) -> list[Any]:
    """The ``top`` ops of a series with the largest 90th percentile of their time per step over its runs (an op
    absent from a run counts 0 µs there), largest first, ties by key. A percentile, not the newest run: an op that
    grew in the last nights and one that shrank away are both watched.

    ``per_run``: one mapping per run, op key -> µs per step (``attribution.op_times``).

    Raises:
        ValueError: ``top`` < 1.
    """
    import numpy as np

    if top < 1:
        raise ValueError(f"top = {top!r}: expected a whole number of ops >= 1")
    keys = sorted({k for r in per_run for k in r})
    if not keys:
        return []
    p90 = np.percentile([[r.get(k, 0.0) for r in per_run] for k in keys], 90, axis=1)
    order = sorted(range(len(keys)), key=lambda i: (-p90[i], keys[i]))
    return [keys[i] for i in order[:top] if p90[i] > 0]


def op_change_points(
    per_run: Sequence[Mapping[tuple[str, str, str], float]],
    run_ids: Sequence[int],
    *,
    top: int = DEFAULT_TOP_OPS,
    min_magnitude: float = DEFAULT_OP_MIN_MAGNITUDE,
    max_pvalue: float | None = None,
    **kwargs: Any,
) -> list[OpChangePoint]:
    """Change points of each watched op's time per step over a nightly series (Otava's E-divisive means, as
    :func:`detect_change_points`, on each op's own series): which op moved, at which run, by how much.

    Args:
        per_run: one mapping per run, oldest first: op key -> the op's time per step there (µs, each run's op shares
            scaled to its own measured median step time: ``attribution.op_times``); an op a run lacks is left out
            of that op's series (``OpChangePoint.missing``), not read as 0.
        run_ids: the run of each mapping.
        top: how many ops are watched (:func:`watched_ops`).
        min_magnitude: smallest relative change of an op's segment means reported.
        max_pvalue: Otava's significance threshold per op; default :data:`DEFAULT_MAX_PVALUE` / ``top``
            (Bonferroni over the watched ops. ``bench/op_changes.py --max-pvalue 2e-5 --max-pvalue 2e-6``, 400
            resampled series of 30 nights each: a confirmed op point in 5.2% of no-change series at 2e-5 per op and
            3.0% at 2e-6, the default for 10 ops, while 74.6% and 73.5% of the ops a real version moved were found
            within 5 nights).
        kwargs: the rest of :func:`detect_change_points`'s settings (``min_runs_after``, ...).

    Returns:
        The change points of every watched op, by op (largest first) then in series order.

    Raises:
        ValueError: lengths differ, ``top`` < 1, or a setting :func:`detect_change_points` refuses.
    """
    if len(per_run) != len(run_ids):
        raise ValueError(f"{len(per_run)} op tables but {len(run_ids)} run ids: expected one run id per table")
    out = []
    for op in watched_ops(per_run, top):
        held = [(rid, float(r[op])) for rid, r in zip(run_ids, per_run, strict=True) if r.get(op, 0.0) > 0]
        found = detect_change_points(
            [v for _, v in held],
            [rid for rid, _ in held],
            metric=OP_METRIC,
            min_magnitude=min_magnitude,
            max_pvalue=max_pvalue if max_pvalue is not None else DEFAULT_MAX_PVALUE / top,
            **kwargs,
        )
        out += [OpChangePoint(op=op, point=cp, runs=len(held), missing=len(per_run) - len(held)) for cp in found]
    return out


def point_row(cp: ChangePoint, newest: dt.date, *, unit: str = "") -> dict[str, Any]:
    """The columns a listing shows of ``cp``: ``before``/``after`` (named ``before<unit>``, e.g. ``before_us``),
    ``ratio``, ``ci_low``, ``ci_high``, ``p_value``, ``n_before``, ``n_after``, ``direction`` (``slower`` or
    ``faster``), ``status`` and ``confirms_on`` (a tentative point's confirming night, :func:`confirming_night` from
    ``newest``, the series' newest run's date, as an ISO date; None otherwise)."""
    night = confirming_night(cp, newest)
    return {
        f"before{unit}": cp.before,
        f"after{unit}": cp.after,
        "ratio": cp.ratio,
        "ci_low": cp.ci_low,
        "ci_high": cp.ci_high,
        "p_value": cp.p_value,
        "n_before": cp.n_before,
        "n_after": cp.n_after,
        "direction": "slower" if cp.slower else "faster",
        "status": cp.status,
        "confirms_on": night.isoformat() if night else None,
    }


def new_change_points(values: Sequence[float], run_ids: Sequence[int], **kwargs: Any) -> list[ChangePoint]:
    """The confirmed change points of the series that the same series without its newest run did not have
    confirmed (none within :data:`SAME_CHANGE_RUNS` runs of it): what a nightly check alerts on once, on the
    night whose run confirms the change (module docstring, "Persistence"). Takes the arguments of
    :func:`detect_change_points`."""
    now = confirmed(detect_change_points(values, run_ids, **kwargs))
    if not now:
        return []
    return unseen(now, confirmed(detect_change_points(values[:-1], run_ids[:-1], **kwargs)))


def confirmed(points: Sequence[ChangePoint]) -> list[ChangePoint]:
    """The points of ``points`` whose ``status`` is ``confirmed``."""
    return [cp for cp in points if cp.status == "confirmed"]


def unseen(now: Sequence[ChangePoint], before: Sequence[ChangePoint]) -> list[ChangePoint]:
    """The points of ``now`` with no point of ``before`` within :data:`SAME_CHANGE_RUNS` runs (same series)."""
    return [cp for cp in now if all(abs(cp.index - b.index) > SAME_CHANGE_RUNS for b in before)]


def interval_text(cp: ChangePoint) -> str:
    """``[low, high]`` of the ratio's interval (3 decimals), or ``[no interval: a segment of 1 run]``."""
    if cp.ci_low is None or cp.ci_high is None:
        return "[no interval: a segment of 1 run]"
    return f"[{cp.ci_low:.3f}, {cp.ci_high:.3f}]"


def confirming_night(cp: ChangePoint, newest: dt.date) -> dt.date | None:
    """The night whose run would confirm the tentative ``cp`` on a nightly schedule: ``newest`` (the date
    of the series' newest run) + ``runs_to_confirm`` days; None for a point that is not tentative."""
    if cp.status != "tentative":
        return None
    return newest + dt.timedelta(days=cp.runs_to_confirm)


@dataclass(frozen=True)
class CreepCheck:
    """The creep guard's result for one model and case.

    Attributes:
        verdict: ``creep`` (the lower bound of ``ratio`` lies above ``1 + tolerance``), ``ok`` (the upper
            bound lies below it), ``inconclusive``, or ``no-history`` (fewer than 2 runs on a side).
        ratio: level now / level a window ago (geometric means of the runs' median step times, ms);
            ``ci_low``/``ci_high``: one-sided ``confidence`` bounds (Welch t on the logs).
        now_ms, then_ms: the two levels (ms).
        now_runs, then_runs: the accepted runs that make each level, newest first.
        reason: one line in words.
        metric: what the levels are: ``median_step_ms`` (each run's median step time) or ``median_cpu_ms``
            (its median per-step process CPU time; ``tasks.analysis.calibration.history_metric`` chooses).
    """

    verdict: Literal["creep", "ok", "inconclusive", "no-history"]
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    now_ms: float | None
    then_ms: float | None
    tolerance: float
    confidence: float
    now_runs: list[int] = field(default_factory=list)
    then_runs: list[int] = field(default_factory=list)
    reason: str = ""
    metric: str = "median_step_ms"

    def to_json(self) -> dict[str, Any]:
        """The check as a JSON-safe dict."""
        return asdict(self)


def creep_guard(
    now_ms: Sequence[float],
    then_ms: Sequence[float],
    *,
    now_runs: Sequence[int] = (),
    then_runs: Sequence[int] = (),
    tolerance: float = CREEP_TOLERANCE,
    confidence: float = CREEP_CONFIDENCE,
    metric: str = "median_step_ms",
) -> CreepCheck:
    """Has the accepted baseline crept? Compares the active baseline's level with the level a window ago.

    Args:
        now_ms: median step times (ms) of the runs of the active baseline (newest accepted runs).
        then_ms: median step times (ms) of the runs that were the accepted baseline a window ago.
        now_runs, then_runs: their run ids (reported, not used in the arithmetic).
        tolerance: relative level change that counts (0.05 = 5%).
        confidence: one-sided confidence of the bounds on the ratio.
        metric: what ``now_ms``/``then_ms`` are (``median_step_ms``, or ``median_cpu_ms``: median CPU time per
            step, ms; the reason then says "CPU time").

    Raises:
        ValueError: a step time is not finite and > 0 (names which side and index), or a bad tolerance/confidence.
    """
    import numpy as np

    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance = {tolerance!r}: expected a fraction between 0 and 1 (0.05 = 5%)")
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence = {confidence!r}: expected a level between 0.5 and 1")
    for name, xs in (("now_ms", now_ms), ("then_ms", then_ms)):
        for i, v in enumerate(xs):
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name}[{i}] = {v!r}: expected a median step time in ms, finite and > 0")
    base: dict[str, Any] = dict(
        tolerance=tolerance, confidence=confidence, now_runs=list(now_runs), then_runs=list(then_runs), metric=metric
    )
    on = "on CPU time: " if metric == "median_cpu_ms" else ""
    if len(now_ms) < 2 or len(then_ms) < 2:
        return CreepCheck(
            "no-history",
            None,
            None,
            None,
            float(np.exp(np.mean(np.log(now_ms)))) if len(now_ms) else None,
            float(np.exp(np.mean(np.log(then_ms)))) if len(then_ms) else None,
            reason=f"{len(now_ms)} accepted run(s) now and {len(then_ms)} a window ago: need at least 2 on each side",
            **base,
        )
    ln, lt = np.log(np.asarray(now_ms, float)), np.log(np.asarray(then_ms, float))
    ratio = float(np.exp(ln.mean() - lt.mean()))
    from scipy import stats as sps

    ci = sps.ttest_ind(ln, lt, equal_var=False).confidence_interval(2 * confidence - 1)
    low, high = float(np.exp(ci.low)), float(np.exp(ci.high))
    limit = 1 + tolerance
    verdict: Literal["creep", "ok", "inconclusive"]
    if low > limit:
        verdict, why = (
            "creep",
            f"the baseline is {100 * (ratio - 1):+.1f}% (bound {100 * (low - 1):+.1f}%) "
            f"above its level a window ago, beyond the {100 * tolerance:g}% tolerance",
        )
    elif high < limit:
        verdict, why = (
            "ok",
            f"level {100 * (ratio - 1):+.1f}% (bound {100 * (high - 1):+.1f}%), within the "
            f"{100 * tolerance:g}% tolerance",
        )
    else:
        verdict, why = (
            "inconclusive",
            f"level {100 * (ratio - 1):+.1f}% [{100 * (low - 1):+.1f}%, "
            f"{100 * (high - 1):+.1f}%]: the bounds straddle the {100 * tolerance:g}% "
            "tolerance",
        )
    return CreepCheck(
        verdict, ratio, low, high, float(np.exp(ln.mean())), float(np.exp(lt.mean())), reason=on + why, **base
    )


def creep_is_new(now: CreepCheck, before: CreepCheck | None, shift_runs: Sequence[int] = ()) -> bool:
    """Whether tonight's ``creep`` verdict ``now`` alerts: a creep alerts once, on the night its verdict turns to
    ``creep`` (``before``, the guard at the previous run of the series, was not; None: there is none), and not
    when a confirmed slower change point of the series explains it (``shift_runs``: the runs of such points; one
    after the old baseline's runs is a level shift that alerted on the night it was confirmed). Without this
    rule a confirmed step alerted again every night for a window (30 days) as creep."""
    if now.verdict != "creep" or (before is not None and before.verdict == "creep"):
        return False
    newest_then = max(now.then_runs, default=None)
    return not any(newest_then is None or r > newest_then for r in shift_runs)


def ops_at(cp: ChangePoint, op_points: Sequence[OpChangePoint], positions: Mapping[int, int]) -> list[OpChangePoint]:
    """The op change points that moved where the step-time change point ``cp`` is: within
    :data:`SAME_CHANGE_RUNS` runs of it, in the direction of the change, largest relative change first.

    ``positions``: run id -> position in ``cp``'s series (an op's own series leaves out runs that lack it, so
    the positions come from the step-time series). An op point at a run not in ``positions`` is left out.
    """
    import math

    near = [
        o
        for o in op_points
        if o.point.run_id in positions
        and abs(positions[o.point.run_id] - cp.index) <= SAME_CHANGE_RUNS
        and o.point.slower == cp.slower
    ]
    return sorted(near, key=lambda o: (-abs(math.log(o.point.ratio)), o.op))


def moved_ops_text(ops: Sequence[OpChangePoint], n: int = 3) -> str:
    """``ops that moved there: NAME [TYPE] x1.600 [1.520, 1.690], ...``: the first ``n`` of ``ops`` (as
    :func:`ops_at` orders them) and how many more; '' without any."""
    if not ops:
        return ""
    shown = ", ".join(f"{o.op[2]} [{o.op[1]}] x{o.point.ratio:.3f} {interval_text(o.point)}" for o in ops[:n])
    more = f" and {len(ops) - n} more" if len(ops) > n else ""
    return f"ops that moved there: {shown}{more}"


def alerts(
    new_points: Sequence[ChangePoint],
    creep: CreepCheck | None,
    *,
    creep_alerts: bool = True,
    moved: Mapping[int, Sequence[OpChangePoint]] | None = None,
) -> list[str]:
    """What a nightly trend check alerts on, one line each: every new confirmed change point that makes the
    model slower (a faster, tentative or transient one is reported, never alerted), and a ``creep`` verdict when
    ``creep_alerts`` (:func:`creep_is_new`: once, and never for a confirmed step that alerted already).
    ``moved``: a change point's run id -> the op change points at it (:func:`ops_at`), named in its line."""
    out = [
        f"change point at run {cp.run_id}: {cp.metric} x{cp.ratio:.3f} {interval_text(cp)} "
        f"(p={cp.p_value:.2g}, {cp.n_before} runs before, {cp.n_after} after)"
        + (f"; {moved_ops_text(ops)}" if (ops := (moved or {}).get(cp.run_id)) else "")
        for cp in new_points
        if cp.slower and cp.status == "confirmed"
    ]
    if creep is not None and creep.verdict == "creep" and creep_alerts:
        out.append(f"creep: {creep.reason}")
    return out


# ------------------------------------------------------------------------------ one-sided verdicts: a sign test

#: A store's judged runs are called one-sided when a two-sided sign test of their regressions against their
#: improvements gives p below this (the house's false-alarm target: 1%).
ONE_SIDED_ALPHA = 0.01
#: the verdicts a sign test counts as judged (a comparison was made): every verdict but ``no-baseline``
JUDGED_VERDICTS = ("pass", "regression", "improvement", "inconclusive", "env-changed")


@dataclass(frozen=True)
class SignTest:
    """Are a case's (or model's) judged runs one-sided? Under a measurement process that is symmetric (an
    unchanged model is as likely to be called slower as faster), a run called ``regression`` is as likely as
    one called ``improvement``; k regressions and 0 improvements over N judged runs is then improbable.

    Attributes:
        judged: runs with a verdict of :data:`JUDGED_VERDICTS`; regressions, improvements: how many of them.
        p_value: two-sided exact binomial test (``scipy.stats.binomtest``) of ``regressions`` out of
            ``regressions + improvements`` against 1/2; 1.0 without any decided run.
        one_sided: ``p_value`` < ``alpha`` (:data:`ONE_SIDED_ALPHA`).
        direction: ``slower`` (regressions dominate), ``faster`` or None (not one-sided).
        reason: one line in words.
    """

    judged: int
    regressions: int
    improvements: int
    p_value: float
    one_sided: bool
    direction: Literal["slower", "faster"] | None
    alpha: float
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The test as a JSON-safe dict."""
        return asdict(self)


def sign_test(verdicts: Sequence[str | None], *, alpha: float = ONE_SIDED_ALPHA) -> SignTest:
    """The sign test of a store's verdicts (:class:`SignTest`), e.g. ``runs.verdict`` of a case's successful runs;
    verdicts outside :data:`JUDGED_VERDICTS` (``no-baseline``, None) are not counted.

    Raises:
        ValueError: ``alpha`` not in (0, 1).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha = {alpha!r}: expected a level between 0 and 1")
    judged = [v for v in verdicts if v in JUDGED_VERDICTS]
    k, m = judged.count("regression"), judged.count("improvement")
    p = 1.0
    if k + m:
        from scipy.stats import binomtest

        p = float(binomtest(k, k + m, 0.5).pvalue)
    one = p < alpha
    direction: Literal["slower", "faster"] | None = ("slower" if k > m else "faster") if one else None
    counts = f"{k} regression(s), {m} improvement(s) over {len(judged)} judged run(s)"
    if one:
        reason = (
            f"one-sided: {counts} (sign test p={p:.2g} < {alpha:g}); a symmetric measurement cannot produce this: "
            + (
                "the model got slower run after run, or the measurement is biased towards slower"
                if k > m
                else "the model got faster run after run, or the measurement is biased towards faster"
            )
        )
    else:
        reason = f"{counts} (sign test p={p:.2g}): not one-sided"
    return SignTest(len(judged), k, m, p, one, direction, alpha, reason)


# ------------------------------------------------------------ a nightly that confirms itself: the paired gate

#: how a tentative slowdown is re-measured tonight: ``version`` (the version before the point beside the newest
#: run's, one paired gate) or ``environment`` (the old environment beside the new: the case's cross-environment
#: gate, ``Case.baseline_runner``/``baseline_env``)
ConfirmKind = Literal["version", "environment"]


@dataclass(frozen=True)
class ConfirmChoice:
    """How (or why not) the tentative slowdown ``cp`` is confirmed by a paired gate tonight.

    Attributes:
        kind: :data:`ConfirmKind`, or None when no paired gate can confirm it (``reason`` says why).
        baseline_version: side A's model version (the version before the point); version: side B's (the newest
            run's).
        reason: one line in words.
    """

    kind: ConfirmKind | None
    baseline_version: str | None
    version: str | None
    reason: str


def confirm_choice(
    cp: ChangePoint,
    *,
    before_version: str | None,
    before_key: str | None,
    version: str | None,
    key: str | None,
    cross_environment: bool,
) -> ConfirmChoice | None:
    """How a paired gate confirms the change point ``cp`` tonight, before anything alerts: only a ``tentative``
    point that makes the model slower is confirmed (None for any other). ``before_version``/``before_key``: the
    model version and environment (comparability key) of the run before the point; ``version``/``key``: those of
    the series' newest run; ``cross_environment``: the case records an old-environment runner
    (``Case.cross_environment``).

    * the environment changed and the case can run the old one: ``environment`` (the old environment, and the
      version before the point, beside the new environment and the newest version);
    * the environment changed and it cannot: no gate (a version gate cannot see an environment's change);
    * the version changed: ``version`` (the version before the point beside the newest version, one paired
      gate in the newest environment);
    * neither changed: no gate (a paired gate would compare the version with itself, an A/A gate, which cannot
      confirm a slowdown of the series).

    Versions must be store versions (digits): a keras.applications build cannot be rebuilt in another version.
    """
    if cp.status != "tentative" or not cp.slower:
        return None
    pullable = all(str(v).isdigit() for v in (before_version, version))
    if not pullable:
        return ConfirmChoice(
            None, before_version, version, f"v{before_version} and v{version} are not both store versions to pull"
        )
    assert before_version is not None and version is not None  # digits
    if before_key != key:
        if cross_environment:
            return ConfirmChoice(
                "environment",
                before_version,
                version,
                f"the environment changed at run {cp.run_id}: the old environment (v{before_version}) beside the "
                f"new (v{version}), one cross-environment gate",
            )
        return ConfirmChoice(
            None,
            before_version,
            version,
            f"the environment changed at run {cp.run_id} and the case records no old-environment runner "
            "(baseline_runner, baseline_env) to run beside it",
        )
    if before_version != version:
        return ConfirmChoice(
            "version", before_version, version, f"v{before_version} beside v{version}, one paired gate"
        )
    return ConfirmChoice(
        None,
        before_version,
        version,
        f"the same version (v{version}) and environment on both sides of run {cp.run_id}: a paired gate would "
        "compare the version with itself",
    )


def confirm_outcome(
    change: str,
    verdict: str | None,
    ratio: float | None,
    ci_low: float | None,
    ci_high: float | None,
    run_id: int | None,
) -> tuple[bool, str]:
    """Whether a tentative slowdown alerts, from the verdict of the paired gate that re-measured it (its run
    ``run_id``; ``ratio`` [``ci_low``, ``ci_high``] the gate's interval), and the line that says so. ``change``:
    the point in words (``tentative change point at run 12 (median_step_ms x1.083)``); ``run_id`` None: the gate
    stored no run.

    ``regression`` confirms it: it alerts, naming the gate's interval. ``pass`` or ``improvement``: no alert, the
    point was not confirmed by a paired gate. Anything else (``inconclusive``, a failed run: ``verdict`` None):
    no alert tonight; the point stays tentative, and the persistence rule confirms it if it holds."""
    gate = verdict
    if ratio is not None and ci_low is not None and ci_high is not None:
        gate = f"{verdict} x{ratio:.3f} [{ci_low:.3f}, {ci_high:.3f}]"
    where = f"run {run_id}" if run_id is not None else "no run stored"
    if verdict == "regression":
        return True, f"{change} confirmed by a paired gate: {gate} ({where})"
    if verdict in ("pass", "improvement"):
        return False, f"{change} was not confirmed by a paired gate: {gate} ({where}); no alert"
    return False, f"{change}: the paired gate did not decide ({gate or 'failed'}, {where}); it stays tentative"
