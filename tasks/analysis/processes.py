"""The process as the unit of a paired gate: a two-level design over processes and the pairs inside them.

Two processes of one model version differ (here their medians drift 6-8% apart, and the ratio of two copies
of one model inside ONE process reads x1.03 in some processes and x0.99 in others): the pairs inside a
process are not independent evidence about the versions, the process is. So a gate runs ``K`` fresh
processes (each still ABBA inside, ``tasks.runner.modes.paired``; which version is set up first and each
quadruple's order drawn afresh in each process), and its interval is built across them.

Model (a one-way random-effects model, Searle, Casella & McCulloch 1992, *Variance Components*, ch. 3;
the two-level design of Kalibera & Jones 2013, "Rigorous benchmarking in reasonable time", ISMM)::

    d_kj = mu + u_k + e_kj,   u_k ~ N(0, tau^2) (process k's effect),   e_kj within-process noise,

``d_kj`` the log ratio (candidate over baseline) of pair j in process (unit) k. The unit's mean ``m_k`` has
variance ``tau^2 + s_k^2`` (``s_k``: its within-process standard error), and the estimate of ``mu`` is the
plain mean of the unit means (equal weights: every unit is planned with the same pairs). Its variance is
estimated without a model of the within-process correlation by the sample variance of the unit means over
``K`` (the analysis on cluster means, Donner & Klar 2000, *Design and Analysis of Cluster Randomization
Trials*, sec. 6.2; in a balanced one-way ANOVA this is ``MS_between / (K n)``, exact), with ``K - 1`` degrees
of freedom: slow drift, correlated neighbours and the process's own offset are all in it.

Reported beside every interval (:class:`Spread`): ``K``; the **within-process** spread (per-pair sd of the
log ratios inside a process, pooled, and the within standard error of a unit mean: batch means of
``sequential.batch_pairs`` pairs, Schmeiser 1982, so a slow drift inside a process counts as within); the
**between-process** sd ``tau`` (method of moments, ``max(0, var(m) - mean(s_k^2))``, as in DerSimonian &
Laird 1986); and the **design effect** (Kish 1965, *Survey Sampling*, sec. 5.4): the variance of the
estimate over what the within-process noise alone would give, ``var(m) / mean(s_k^2)`` (balanced:
``1 + n tau^2 / sigma^2``). A design effect of 3 means the pairs of one process are worth a third of what
they look: a one-process interval would have been sqrt(3) too narrow.

Sequential over processes: the gate looks after each process from :data:`MIN_LOOK_PROCESSES` on, with
the repeated confidence intervals of ``tasks.analysis.sequential`` (Lan-DeMets O'Brien-Fleming spending,
Jennison & Turnbull 2000 ch. 9) at information fraction ``k / max_processes`` (the estimate's information
grows with the units, ``1 / var = K / var(m)``), each look's z boundary turned into a Student t quantile
with ``K - 1`` df (Jennison & Turnbull 2000, sec. 11.5). So an unchanged candidate is flagged at some look
with probability at most ``(1 - confidence) / 2``, however many processes the gate takes.

Everything here is a pure function of plain values (per-unit log ratios), so baseline-compare recomputes the
interval that stopped the gate. The verdict rule is ``stats.verdict_from_ci`` (a busy host's CPU time:
``tasks.analysis.verdict.busy_verdict_from_ci``, which the caller applies to the same interval).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from tasks.analysis import sequential
from tasks.analysis.stats import verdict_from_ci
from tasks.records import Verdict

__all__ = [
    "METHOD",
    "MIN_LOOK_PROCESSES",
    "ProcessDesign",
    "ProcessGate",
    "ProcessLook",
    "Spread",
    "Unit",
    "analyse",
    "look",
    "needed_processes",
    "spread",
    "unit_from_pairs",
    "unit_from_sides",
]

METHOD = "two-level: mean of process means, cluster-level t (K - 1 df), Lan-DeMets O'Brien-Fleming over processes"
#: fewest units (processes, or process pairs of a cross-environment gate) at a look: 2 df of the between spread
MIN_LOOK_PROCESSES = 3

#: the widest a look's interval goes on the log scale, either side (e^40: about 2e17); past it says nothing more
LOG_CAP = 40.0


class ProcessDesign(BaseModel):
    """A process-level gate's fixed design, chosen before the first process.

    Attributes:
        confidence: two-sided level of every look's interval taken together.
        tolerance: the verdict rule's t (0.05 = 5%).
        max_processes: the budget in units (information fraction 1); at least :data:`MIN_LOOK_PROCESSES`.
        pairs_per_process: ABBA block pairs measured in each process (a cross-environment gate: steps timed
            per side and process, in blocks).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field("processes", description="tells this design from a one-process sequential.Design")
    confidence: float = Field(0.99, gt=0.5, lt=1)
    tolerance: float = Field(0.05, gt=0, lt=1)
    max_processes: int = Field(6, ge=MIN_LOOK_PROCESSES, le=1000)
    pairs_per_process: int = Field(40, ge=2, le=100_000)

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence


class Unit(BaseModel):
    """One unit of the design: a process (a same-environment gate) or a process pair (a cross-environment one).

    Attributes:
        mean: the unit's log ratio, candidate over baseline (a process: the mean of its pair log ratios; a
            process pair: log median B - log median A).
        within_se: standard error of ``mean`` from the noise inside the unit alone (log scale).
        within_sd: per-pair (per-step) sd of the log ratios inside the unit (log scale).
        pairs: pairs (steps per side) behind ``mean``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float
    within_se: float = Field(ge=0)
    within_sd: float = Field(ge=0)
    pairs: int = Field(ge=1)


class Spread(BaseModel):
    """The two levels of a gate's noise (module docstring); log scale.

    Attributes:
        processes: K, the units analysed; pairs: pairs (steps per side) over all of them.
        unit_ratios: exp(mean) of each unit, in measurement order.
        sd_means: sample sd of the unit means (what the interval uses).
        between_sd: tau, the sd of the process effect (method of moments, >= 0).
        within_sd: pooled per-pair sd inside a unit; within_se: root mean square of the units' within se.
        icc: tau^2 / (tau^2 + within_sd^2), the share of a pair's variance that is the process's.
        design_effect: var(unit means) / mean(within se^2) (Kish); None where the within se is 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    processes: int
    pairs: int
    unit_ratios: list[float]
    sd_means: float
    between_sd: float
    within_sd: float
    within_se: float
    icc: float
    design_effect: float | None


class ProcessLook(BaseModel):
    """The interval at one look after ``processes`` units (ratio = candidate / baseline).

    Attributes:
        processes, fraction (processes / max_processes), df (processes - 1), boundary_z (the Lan-DeMets c_k),
        boundary (its t multiplier), se_log_ratio (sd_means / sqrt(K)), ratio, ci_low, ci_high, verdict
        (``stats.verdict_from_ci``), spread (:class:`Spread` of these units).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    processes: int
    fraction: float
    df: int
    boundary_z: float
    boundary: float
    se_log_ratio: float
    ratio: float
    ci_low: float
    ci_high: float
    verdict: Verdict
    spread: Spread


class ProcessGate(BaseModel):
    """All looks of a process-level gate: ``final`` is the verdict's; ``stopped`` ``decided`` | ``budget`` |
    ``open``; ``needed_processes``: when undecided, about how many units would decide at this spread."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    looks: list[ProcessLook]
    final: ProcessLook
    stopped: str
    needed_processes: int | None
    method: str = METHOD


def _finite(x: Sequence[float] | npt.NDArray[np.float64], name: str, min_n: int) -> npt.NDArray[np.float64]:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or a.size < min_n:
        raise ValueError(f"{name}: expected a 1-D array of at least {min_n} values, got shape {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] = {float(a[bad[0]])!r}: must be finite")
    return a


def unit_from_pairs(d: Sequence[float] | npt.NDArray[np.float64], name: str = "process") -> Unit:
    """A process's unit from its pair log ratios ``d`` (``log B_j - log A_j``, measurement order, >= 2): the
    mean, the per-pair sd and the batch-means standard error of the mean (``sequential.batch_pairs`` pairs
    per batch, at least 2 batches; 2 pairs: the plain se).

    Raises:
        ValueError: fewer than 2 values, or a non-finite one (names ``name``).
    """
    x = _finite(d, name, 2)
    n = x.size
    m = min(sequential.batch_pairs(n), n // 2)
    k = n // m
    means = x[: k * m].reshape(k, m).mean(axis=1)
    se = float(means.std(ddof=1)) * math.sqrt(m) / math.sqrt(n)
    return Unit(mean=float(x.mean()), within_se=se, within_sd=float(x.std(ddof=1)), pairs=n)


def _log_median_var(x: npt.NDArray[np.float64]) -> float:
    """Large-sample variance of log median(x): ``pi / 2 * (MAD-scale of log x)^2 / n`` (the median of a normal
    sample has asymptotic variance ``pi sigma^2 / (2 n)``; Kendall & Stuart, vol. 1, sec. 10.10)."""
    lx = np.log(x)
    s = float(stats.median_abs_deviation(lx, scale="normal"))
    return math.pi / 2 * s * s / lx.size


def unit_from_sides(a_ms: Sequence[float], b_ms: Sequence[float], name: str = "process pair") -> Unit:
    """A process pair's unit (a cross-environment gate: side A's process and side B's): ``log median B -
    log median A`` of their timed steps (ms), its within se from each side's median's large-sample variance
    (:func:`_log_median_var`), and the per-step sd of log step time pooled over both sides.

    Raises:
        ValueError: fewer than 2 steps on a side, or a step time not finite and > 0 (names ``name``).
    """
    a = _finite(a_ms, f"{name} A", 2)
    b = _finite(b_ms, f"{name} B", 2)
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError(f"{name}: step times must be > 0 ms")
    se = math.sqrt(_log_median_var(a) + _log_median_var(b))
    sd = math.sqrt((np.log(a).var(ddof=1) + np.log(b).var(ddof=1)) / 2)
    return Unit(
        mean=math.log(float(np.median(b)) / float(np.median(a))),
        within_se=se,
        within_sd=sd,
        pairs=min(a.size, b.size),
    )


def spread(units: Sequence[Unit]) -> Spread:
    """The two-level spread of ``units`` (module docstring).

    Raises:
        ValueError: fewer than 2 units.
    """
    if len(units) < 2:
        raise ValueError(f"units: {len(units)} given, the between-process spread needs at least 2")
    m = np.array([u.mean for u in units])
    se2 = np.array([u.within_se**2 for u in units])
    sd2 = np.array([u.within_sd**2 for u in units])
    w = np.array([u.pairs - 1 for u in units], dtype=float)
    var_m = float(m.var(ddof=1))
    tau2 = max(0.0, var_m - float(se2.mean()))
    within_sd = math.sqrt(float((w * sd2).sum() / w.sum())) if w.sum() > 0 else float(math.sqrt(sd2.mean()))
    total = tau2 + within_sd**2
    return Spread(
        processes=len(units),
        pairs=sum(u.pairs for u in units),
        unit_ratios=[math.exp(x) for x in m],
        sd_means=math.sqrt(var_m),
        between_sd=math.sqrt(tau2),
        within_sd=within_sd,
        within_se=math.sqrt(float(se2.mean())),
        icc=tau2 / total if total > 0 else 0.0,
        design_effect=var_m / float(se2.mean()) if se2.mean() > 0 else None,
    )


def look(units: Sequence[Unit], look_processes: Sequence[int], design: ProcessDesign) -> ProcessLook:
    """The repeated confidence interval after the last of ``look_processes`` units (module docstring)::

        ratio = exp(mean m),  CI = exp(mean m -/+ b_k sd(m) / sqrt(K)),  b_k = t_{K-1}^{-1}(Phi(c_k))

    Args:
        units: the units in measurement order, at least ``look_processes[-1]`` of them.
        look_processes: units at every look so far, strictly increasing, each in
            [:data:`MIN_LOOK_PROCESSES`, ``design.max_processes``].
        design: the gate's design.

    Raises:
        ValueError: too few units for the last look, or look points out of range (named).
    """
    if not look_processes:
        raise ValueError("look_processes: need at least one look")
    k = int(look_processes[-1])
    if k > len(units):
        raise ValueError(f"look at {k} processes but only {len(units)} units were given")
    if look_processes[0] < MIN_LOOK_PROCESSES or k > design.max_processes:
        raise ValueError(
            f"look_processes {list(look_processes)}: each must be in [{MIN_LOOK_PROCESSES}, {design.max_processes}]"
        )
    c = sequential.boundaries(tuple(p / design.max_processes for p in look_processes), design.alpha)[-1]
    s = spread(units[:k])
    mean = float(np.mean([u.mean for u in units[:k]]))
    se = s.sd_means / math.sqrt(k)
    b = sequential.t_boundary(c, k - 1)
    # an early look of a long design (3 of 40 units) has a boundary of 1e11 and more: capped, its interval is
    # finite (stored as JSON) and still undecided
    low, high = math.exp(max(mean - b * se, -LOG_CAP)), math.exp(min(mean + b * se, LOG_CAP))
    return ProcessLook(
        processes=k,
        fraction=k / design.max_processes,
        df=k - 1,
        boundary_z=c,
        boundary=b,
        se_log_ratio=se,
        ratio=math.exp(mean),
        ci_low=low,
        ci_high=high,
        verdict=verdict_from_ci(low, high, design.tolerance),
        spread=s,
    )


def look_schedule(max_processes: int) -> list[int]:
    """Unit counts at which a gate of this budget looks when it never stops early: every unit from
    :data:`MIN_LOOK_PROCESSES` to ``max_processes``."""
    return list(range(MIN_LOOK_PROCESSES, max_processes + 1))


#: most looks whose boundaries :func:`needed_processes` integrates, at evenly spread fractions (the final
#: O'Brien-Fleming boundary changes little beyond this many; a look at a vanishing fraction spends an alpha that
#: underflows, and breaks the recursive integration)
NEEDED_MAX_LOOKS = 20


def needed_processes(sd_means: float, design: ProcessDesign, max_k: int = 1000) -> int | None:
    """About how many units a gate of this design would need at this spread of unit means (log scale) for
    its final interval to be at most ``log(1 + tolerance) / 2`` wide on each side, which always decides
    (``stats`` module docstring); the final boundary is that of a budget of that many units, looked at after
    each (at most :data:`NEEDED_MAX_LOOKS` of them, evenly spread, the last at the budget). ``None`` beyond
    ``max_k``."""
    budget = math.log1p(design.tolerance) / 2
    k = MIN_LOOK_PROCESSES
    while k <= max_k:
        pts = look_schedule(k)
        if len(pts) > NEEDED_MAX_LOOKS:  # evenly spread fractions j / 20: no look at a vanishing fraction
            pts = sorted({max(MIN_LOOK_PROCESSES, round(k * j / NEEDED_MAX_LOOKS)) for j in range(1, 21)})
        c = sequential.boundaries(tuple(p / k for p in pts), design.alpha)[-1]
        if sequential.t_boundary(c, k - 1) * sd_means / math.sqrt(k) <= budget:
            return k
        k += max(1, k // 10)
    return None


def analyse(
    units: Sequence[Unit], look_processes: Sequence[int], design: ProcessDesign, *, strict: bool = True
) -> ProcessGate:
    """All looks of a process-level gate (``look_processes`` as taken) and how it ended; as
    ``sequential.analyse`` (``strict``: earlier looks must all have been undecided, unless another metric's
    looks stopped the gate: a busy host's CPU time).

    Raises:
        ValueError: bad units or look points (:func:`look`), or (``strict``) a decisive look before the last.
    """
    if not look_processes:
        raise ValueError("look_processes: need at least one look")
    looks = [look(units, look_processes[: i + 1], design) for i in range(len(look_processes))]
    early = [x.processes for x in looks[:-1] if x.verdict != Verdict.INCONCLUSIVE]
    if early and strict:
        raise ValueError(
            f"look at {early[0]} processes already decided: a sequential gate stops at its first decisive look"
        )
    final = looks[-1]
    if final.verdict != Verdict.INCONCLUSIVE:
        stopped, need = "decided", None
    else:
        stopped = "budget" if final.processes >= design.max_processes else "open"
        need = needed_processes(final.spread.sd_means, design)
    return ProcessGate(looks=looks, final=final, stopped=stopped, needed_processes=need)
