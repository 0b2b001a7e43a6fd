"""Sequential paired gates: measure ABBA pairs in rounds and stop as soon as the interval decides.

A paired gate (``tasks.analysis.stats`` module docstring) is judged on the pair log ratios
``d_i = log B_i - log A_i`` (candidate over baseline, one pair per ABBA block pair). Instead of a
fixed number of pairs, the gate looks at the data after every round of pairs and stops at the first
look whose interval decides (``stats.verdict_from_ci`` is ``pass``, ``regression`` or
``improvement``), or when the step budget (``max_pairs``) is spent.

Looking repeatedly at a fixed-sample interval would inflate the false-alarm rate (with 19 looks at a
99% t interval, the chance that some look excludes the truth is several times 1%). This module uses
**repeated confidence intervals** from a **group-sequential design** (Jennison & Turnbull 1989,
"Interim analyses: the repeated confidence interval approach", JRSS B 51(3); Jennison & Turnbull
2000, *Group Sequential Methods with Applications to Clinical Trials*, ch. 9) whose two-sided
boundaries come from **Lan–DeMets alpha spending of O'Brien–Fleming type** (Lan & DeMets 1983,
"Discrete sequential boundaries for clinical trials", Biometrika 70(3)), spent on each side at half
the two-sided level, as ``ldbounds`` and ``gsDesign`` (``sfLDOF``) do::

    alpha_side(t) = 2 - 2 * Phi(z_{1 - alpha/4} / sqrt(t)),   t = pairs so far / max_pairs  (information fraction)

(``alpha_side(1) = alpha / 2``; both sides together spend ``alpha``; five equally spaced looks at
``alpha = 0.05`` give the published 4.877, 3.357, 2.680, 2.290, 2.031.)

The boundary ``c_k`` of look k is the z value whose crossing probability, given no crossing at the
earlier looks, spends ``alpha(t_k) - alpha(t_{k-1})``; it is computed by the recursive numerical
integration of Armitage, McPherson & Rowe (1969, JRSS A 132(2)) (Jennison & Turnbull 2000, ch. 19)
on a grid, with ``scipy.stats.norm`` for the normal tails and ``scipy.optimize.brentq`` for the root.
The looks need not be planned: each boundary depends only on the information fractions of the looks
taken so far, so a gate may stop early or take looks at any pair counts (Lan–DeMets' point). The
spending is O'Brien–Fleming-type: very wide early boundaries (c = 8.8 at 10% of the budget, 99%), so
that only gross changes stop early, and a final boundary close to the fixed-sample one (2.69 instead
of 2.58 for 19 looks at 99%), so that the full budget loses little power against a fixed gate.

Unknown variance, correlated neighbours. Step time on a shared host drifts slowly and neighbouring
pair ratios stay correlated (``stats.compare_paired``), so the standard error at a look comes from
**batch means** (Schmeiser 1982) of :func:`batch_pairs` consecutive pairs (even, so that each batch
holds as many AB as BA pairs; at least :data:`MIN_BATCHES` batches; at most
:data:`MAX_BATCH_PAIRS` = 16 pairs, the batch the fixed gate used). Each look's nominal one-sided
significance level ``1 - Phi(c_k)`` is turned into a Student t quantile with the batches' degrees of
freedom — the "significance level approach" for group-sequential t tests (Jennison & Turnbull 2000,
sec. 11.5) — so few batches widen the interval instead of breaking its level. A process-level offset
between model copies (``tasks.analysis.calibration``) is added in quadrature to the standard error
(it does not shrink with pairs; an approximation, exact for one look).

The interval of look k, on the ratio scale::

    ratio = exp(mean d),   CI = exp(mean d -/+ b_k * sqrt(se_k^2 + offset_sd^2)),   b_k = t_{df_k}^{-1}(Phi(c_k))

Guarantee: with a valid normal approximation for the batch means, the probability that *any* look's
interval excludes the true ratio is at most ``alpha = 1 - confidence`` (two-sided), so an unchanged
candidate is flagged ``regression`` (interval above 1) at some look with probability at most
``alpha / 2`` (0.5% at 99%), however many looks the gate takes, and a true slowdown beyond the
tolerance passes with at most that probability too.

Everything here is a pure function of plain values (the pair log ratios and the look points), so the
baseline-compare stage recomputes exactly the interval that stopped the gate.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field
from scipy import optimize, stats

from tasks.analysis.stats import verdict_from_ci
from tasks.records import Verdict

__all__ = [
    "Design",
    "GateAnalysis",
    "Look",
    "MAX_BATCH_PAIRS",
    "MIN_BATCHES",
    "METHOD",
    "analyse",
    "batch_pairs",
    "boundaries",
    "look",
    "needed_pairs",
    "spent_alpha",
]

METHOD = "group-sequential RCI, Lan-DeMets O'Brien-Fleming spending, batch-means t"
MAX_BATCH_PAIRS = 16  #: pairs per batch once there are enough pairs (the fixed gate's batch)
MIN_BATCHES = 16  #: batches per look while pairs are few (batch size shrinks, never below 2 pairs)
MIN_LOOK_PAIRS = 2 * MIN_BATCHES  #: fewest pairs at a look (16 batches of 2 pairs)
_GRID = 601  #: grid points of the recursive integration (boundaries agree to ~1e-4 with 1201)


class Design(BaseModel):
    """A sequential gate's fixed design, chosen before the first pair.

    Attributes:
        confidence: two-sided level of every look's interval taken together (0.99: at most 1% of
            gates have any look whose interval excludes the truth).
        tolerance: the verdict rule's t (``stats.verdict_from_ci``; 0.05 = 5%).
        max_pairs: the step budget in ABBA block pairs (information fraction 1).
        round_pairs: pairs measured between two looks.
        offset_sd: process-level offset between model copies (log scale, >= 0), added in quadrature.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    confidence: float = Field(0.99, gt=0.5, lt=1)
    tolerance: float = Field(0.05, gt=0, lt=1)
    max_pairs: int = Field(320, ge=MIN_LOOK_PAIRS, le=100_000)
    round_pairs: int = Field(16, ge=2, le=100_000)
    offset_sd: float = Field(0.0, ge=0, lt=1)

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence


class Look(BaseModel):
    """The interval at one look (ratio = candidate / baseline).

    Attributes:
        pairs: pairs analysed; fraction: pairs / max_pairs; batch: pairs per batch; df: batches - 1.
        boundary_z: the Lan–DeMets boundary c_k (z scale); boundary: the t-scale multiplier b_k.
        se_log_ratio: batch-means standard error of mean d (log scale, offset not included).
        sd_pair: per-pair sd of d implied by the batch means (correlation included).
        ratio, ci_low, ci_high, verdict: the estimate, the repeated confidence interval, and the
            verdict rule applied to it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    pairs: int
    fraction: float
    batch: int
    df: int
    boundary_z: float
    boundary: float
    se_log_ratio: float
    sd_pair: float
    ratio: float
    ci_low: float
    ci_high: float
    verdict: Verdict


class GateAnalysis(BaseModel):
    """The gate as a whole: every look, the one it ended on, why it ended, what it would still need.

    Attributes:
        looks: one :class:`Look` per look, in order; ``final``: the last one (the verdict's interval).
        stopped: ``decided`` (a look's interval decided), ``budget`` (max_pairs spent undecided),
            ``open`` (neither yet: more pairs may be measured).
        needed_pairs: when undecided, about how many pairs a gate with this noise would need for a
            decisive interval (``None`` when decided, or when the offset alone is too wide).
        method: :data:`METHOD`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    looks: list[Look]
    final: Look
    stopped: str
    needed_pairs: int | None
    method: str = METHOD


def spent_alpha(t: float, alpha: float) -> float:
    """Two-sided level spent by information fraction ``t`` (clipped to [0, 1]): both sides of the Lan–DeMets
    O'Brien–Fleming-type spending ``2 - 2 Phi(z_{1-alpha/4} / sqrt(t))`` per side; 0 at t = 0,
    ``alpha`` at t = 1."""
    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    return float(4.0 * stats.norm.sf(stats.norm.isf(alpha / 4.0) / math.sqrt(t)))


@functools.lru_cache(maxsize=512)
def boundaries(fractions: tuple[float, ...], alpha: float) -> tuple[float, ...]:
    """Two-sided symmetric z boundaries ``c_1..c_K`` for looks at the given information fractions.

    Recursive numerical integration (Armitage, McPherson & Rowe 1969): the sub-density of the score
    ``S = Z sqrt(t)`` on the continuation region of look k-1 is carried to look k by the Brownian
    increment ``N(0, t_k - t_{k-1})``; ``c_k`` solves (``brentq`` on the log scale, so tiny early
    spends stay accurate) crossing probability = ``spent_alpha(t_k) - spent_alpha(t_{k-1})``.

    Args:
        fractions: strictly increasing, in (0, 1]; shape (K,).
        alpha: two-sided level in (0, 1).

    Raises:
        ValueError: empty, not strictly increasing, or outside (0, 1].
    """
    if not fractions:
        raise ValueError("fractions: need at least one look")
    f = np.asarray(fractions, dtype=float)
    if np.any(f <= 0) or np.any(f > 1 + 1e-12) or np.any(np.diff(f) <= 0):
        raise ValueError(f"fractions {list(fractions)}: must be strictly increasing and in (0, 1]")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha = {alpha}: must be in (0, 1)")
    out: list[float] = []
    grid = dens = None
    prev_t, prev_spent = 0.0, 0.0
    for t in f:
        t = float(min(t, 1.0))
        spend = spent_alpha(t, alpha) - prev_spent
        if grid is None:
            c = float(stats.norm.isf(spend / 2.0))
            lim = c * math.sqrt(t)
            grid = np.linspace(-lim, lim, _GRID)
            dens = stats.norm.pdf(grid / math.sqrt(t)) / math.sqrt(t)
        else:
            sd = math.sqrt(t - prev_t)
            w = np.full(grid.size, grid[1] - grid[0]) * dens
            w[0] /= 2
            w[-1] /= 2  # trapezoid weights times the sub-density

            def log_cross(
                c: float,
                w: npt.NDArray[np.float64] = w,
                sd: float = sd,
                t: float = t,
                grid: npt.NDArray[np.floating[Any]] = grid,
            ) -> float:
                lim = c * math.sqrt(t)
                p = float(np.sum(w * (stats.norm.sf((lim - grid) / sd) + stats.norm.cdf((-lim - grid) / sd))))
                return math.log(max(p, 1e-320))

            target = math.log(max(spend, 1e-300))
            c = float(optimize.brentq(lambda c, target=target: log_cross(c) - target, 0.1, 60.0, xtol=1e-9))
            lim = c * math.sqrt(t)
            new = np.linspace(-lim, lim, _GRID)
            dens = (stats.norm.pdf((new[:, None] - grid[None, :]) / sd) / sd * w[None, :]).sum(axis=1)
            grid = new
        out.append(c)
        prev_t, prev_spent = t, prev_spent + spend
    return tuple(out)


def batch_pairs(n: int) -> int:
    """Pairs per batch at a look with n pairs: even, at least 2, at most :data:`MAX_BATCH_PAIRS`, and
    small enough to leave :data:`MIN_BATCHES` batches (``min(16, max(2, 2 * (n // 32))))``)."""
    return min(MAX_BATCH_PAIRS, max(2, 2 * (n // (2 * MIN_BATCHES))))


def _log_ratios(d: Sequence[float] | npt.NDArray[np.float64], name: str = "log_ratios") -> npt.NDArray[np.float64]:
    a = np.asarray(d, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of pair log ratios, got shape {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] = {float(a[bad[0]])!r}: pair log ratios must be finite")
    return a


def t_boundary(c: float, df: float) -> float:
    """The z boundary ``c`` carried to Student's t on ``df`` degrees of freedom: the t quantile with the same upper
    tail probability, ``t_df^{-1}(Phi(c))``."""
    return float(stats.t.isf(stats.norm.sf(c), df))


def look(d: Sequence[float] | npt.NDArray[np.float64], look_pairs: Sequence[int], design: Design) -> Look:
    """The repeated confidence interval at the last of ``look_pairs`` (module docstring).

    Args:
        d: pair log ratios ``log B_i - log A_i`` in measurement order, at least ``look_pairs[-1]`` of them.
        look_pairs: pairs at every look so far, strictly increasing, the current one last; each at
            least :data:`MIN_LOOK_PAIRS` and at most ``design.max_pairs``.
        design: the gate's design.

    Raises:
        ValueError: a non-finite d, too few d for the last look, or look points out of range (named).
    """
    d = _log_ratios(d)
    if not look_pairs:
        raise ValueError("look_pairs: need at least one look")
    n = int(look_pairs[-1])
    if n > d.size:
        raise ValueError(f"look at {n} pairs but only {d.size} pair log ratios were given")
    if look_pairs[0] < MIN_LOOK_PAIRS or n > design.max_pairs:
        raise ValueError(f"look_pairs {list(look_pairs)}: each must be in [{MIN_LOOK_PAIRS}, {design.max_pairs}]")
    fractions = tuple(p / design.max_pairs for p in look_pairs)
    c = boundaries(fractions, design.alpha)[-1]
    x = d[:n]
    m = batch_pairs(n)
    k = n // m
    means = x[: k * m].reshape(k, m).mean(axis=1)
    sd_pair = float(means.std(ddof=1)) * math.sqrt(m)
    se = sd_pair / math.sqrt(n)
    b = t_boundary(c, k - 1)
    mean = float(x.mean())
    h = b * math.sqrt(se**2 + design.offset_sd**2)
    low, high = math.exp(mean - h), math.exp(mean + h)
    return Look(
        pairs=n,
        fraction=n / design.max_pairs,
        batch=m,
        df=k - 1,
        boundary_z=c,
        boundary=b,
        se_log_ratio=se,
        sd_pair=sd_pair,
        ratio=math.exp(mean),
        ci_low=low,
        ci_high=high,
        verdict=verdict_from_ci(low, high, design.tolerance),
    )


def needed_pairs(sd_pair: float, design: Design, max_n: int = 1_000_000) -> int | None:
    """About how many pairs a gate of this design (rounds of ``round_pairs``) would need, at per-pair sd
    ``sd_pair``, for its final-look interval to be at most ``log(1 + tolerance) / 2`` wide on each
    side, which always decides (``stats`` module docstring). The final boundary is taken as the one of
    a budget equal to that many pairs (each look then at the same fractions as this design's).
    ``None`` when the offset alone is wider than that, or beyond ``max_n``."""
    budget = math.log1p(design.tolerance) / 2
    fractions = _fractions(design.max_pairs, design.round_pairs)
    c = boundaries(fractions, design.alpha)[-1]
    n = max(MIN_LOOK_PAIRS, design.round_pairs)
    while n <= max_n:
        k = n // batch_pairs(n)
        if t_boundary(c, k - 1) * math.sqrt(sd_pair**2 / n + design.offset_sd**2) <= budget:
            return n
        n += max(design.round_pairs, n // 20)
    return None


def _fractions(max_pairs: int, round_pairs: int) -> tuple[float, ...]:
    """Information fractions of a gate that looks after every round from MIN_LOOK_PAIRS on."""
    return tuple(p / max_pairs for p in look_schedule(max_pairs, round_pairs))


def look_schedule(max_pairs: int, round_pairs: int) -> list[int]:
    """Pair counts at which a gate of this budget looks when it never stops early: every multiple of
    ``round_pairs`` from :data:`MIN_LOOK_PAIRS` on, and ``max_pairs`` last."""
    pts = [p for p in range(round_pairs, max_pairs, round_pairs) if p >= MIN_LOOK_PAIRS]
    return [*pts, max_pairs]


def analyse(
    d: Sequence[float] | npt.NDArray[np.float64], look_pairs: Sequence[int], design: Design, *, strict: bool = True
) -> GateAnalysis:
    """All looks of a gate (``look_pairs`` as they were taken) and how it ended.

    ``stopped``: ``decided`` when the last look decided, ``budget`` when it was at ``max_pairs``
    undecided, else ``open``. With ``strict`` (a gate that stopped on these ratios) earlier looks must all
    have been undecided (a gate stops at its first decisive look); a decided earlier look raises. Without it
    (a gate that another metric's looks stopped: a busy host's CPU time, ``tasks.analysis.verdict.look_decides``)
    earlier decided looks are allowed, and the last look's interval is still valid (a repeated confidence
    interval holds at every look at once).

    Raises:
        ValueError: bad ``d`` or look points (see :func:`look`), or (``strict``) a decisive look before the last.
    """
    if not look_pairs:
        raise ValueError("look_pairs: need at least one look")
    looks = [look(d, look_pairs[: i + 1], design) for i in range(len(look_pairs))]
    early = [x.pairs for x in looks[:-1] if x.verdict != "inconclusive"]
    if early and strict:
        raise ValueError(
            f"look at {early[0]} pairs already decided: a sequential gate stops at its first decisive look"
        )
    final = looks[-1]
    if final.verdict != "inconclusive":
        stopped, need = "decided", None
    else:
        stopped = "budget" if final.pairs >= design.max_pairs else "open"
        need = needed_pairs(final.sd_pair, design)
    return GateAnalysis(looks=looks, final=final, stopped=stopped, needed_pairs=need)
