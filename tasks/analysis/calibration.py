"""Calibrating the history comparison: how much step time drifts between processes here.

``tasks.analysis.stats.compare_to_history`` needs a prior for the between-run sd (tau, log scale) of a
run's median step time: the drift between separate processes of the SAME model version in the
SAME environment (other jobs on the host, clocks, memory placement). It differs by orders of
magnitude between a quiet GPU host (~0.01-0.03) and a busy shared CPU (~0.1 measured on the
2-core dev machine), so a fixed default is wrong somewhere.

The rule (:func:`prior_for_case`):

1. ``Case.prior_between_sd`` set: that value is the prior (source ``case``), ``prior_df`` 2.
2. Otherwise it is estimated from the store (source ``store``): the newest
   :data:`CALIBRATION_WINDOW` (50) accepted runs (``baselines`` rows, active and superseded) of
   the same model, case and environment comparability key. Their log median step times are
   grouped by model version (versions differ in true speed; only repeats of one version show
   drift) and the pooled within-version variance is taken::

       tau^2 = sum_g sum_i (y_gi - mean_g)^2 / sum_g (n_g - 1),   df = sum_g (n_g - 1)

   It is used when ``df >= MIN_CALIBRATION_DF`` (5, e.g. six accepted runs of one version), as a
   prior worth ``min(df, MAX_PRIOR_DF)`` (30) pseudo-runs. The within-run noise of each median is
   not subtracted, so the estimate errs slightly high (fewer false alarms): with 50 steps at 10%
   step-to-step variation it adds ~0.018^2 to tau^2, small against tau ~0.1.
3. Too little history: :data:`DEFAULT_PRIOR_BETWEEN_SD` (0.05, between a quiet GPU host and
   this busy CPU), ``prior_df`` 2 (source ``default``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

__all__ = ["CALIBRATION_WINDOW", "DEFAULT_PAIRED_OFFSET_SD", "DEFAULT_PRIOR_BETWEEN_SD", "MAX_PRIOR_DF",
           "MIN_AA_GATES", "MIN_CALIBRATION_DF", "Offset", "Prior", "estimate_between_sd", "estimate_paired_offset",
           "paired_offset_for_case", "prior_for_case", "prior_from_runs"]

CALIBRATION_WINDOW = 50  #: newest accepted runs looked at
MIN_CALIBRATION_DF = 5  #: fewest within-version degrees of freedom for a store estimate
MAX_PRIOR_DF = 30.0  #: cap on the prior's weight (pseudo-runs)
DEFAULT_PRIOR_BETWEEN_SD = 0.05  #: prior sd (log scale) when neither the case nor the store gives one
DEFAULT_PRIOR_DF = 2.0
#: sd (log scale) of the speed difference between two identical model copies in one process, when
#: the store has too few A/A gates. 0: bench/detection.py found none on the 2-core dev machine
#: (its 6 self-vs-self processes of 256 pairs scatter as their within-process noise predicts:
#: Cochran's Q 2.8 on 5 df, p = 0.73; 4 more of 96 pairs run by hand agreed; an earlier 0.034 from
#: 6 short processes under outside load was not reproduced). A host where copies do differ shows
#: it in its A/A gates, and the store's estimate then replaces this default.
DEFAULT_PAIRED_OFFSET_SD = 0.0
MIN_AA_GATES = 3  #: fewest A/A paired gates (same model bytes as A and B) for a store estimate


class Prior(BaseModel):
    """The between-run sd prior handed to ``compare_to_history``.

    Attributes:
        between_sd: prior tau, sd of log median step time between processes (dimensionless).
        prior_df: its weight in pseudo-runs.
        source: ``case`` (set on the Case), ``store`` (estimated by the rule), ``default``.
        n_runs: accepted runs looked at (store) ; df: within-version degrees of freedom.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    between_sd: float
    prior_df: float
    source: Literal["case", "store", "default"]
    n_runs: int = 0
    df: int = 0


def estimate_between_sd(runs: Iterable[tuple[str, float]]) -> tuple[float | None, int]:
    """Pooled within-version sd of log median step time.

    Args:
        runs: ``(model version, median step time in ms)`` of accepted runs.

    Returns:
        (tau or ``None`` when df < :data:`MIN_CALIBRATION_DF`, df = sum over versions of n - 1).

    Raises:
        ValueError: a median that is NaN, infinite or <= 0 (names the version and value).
    """
    groups: dict[str, list[float]] = {}
    for version, median in runs:
        if median is None or not math.isfinite(median) or median <= 0:
            raise ValueError(f"accepted run of version {version!r} has median step time {median!r} ms; "
                             "expected a finite value > 0")
        groups.setdefault(str(version), []).append(math.log(median))
    ss = sum(float(((np.asarray(y) - np.mean(y)) ** 2).sum()) for y in groups.values())
    df = sum(len(y) - 1 for y in groups.values())
    if df < MIN_CALIBRATION_DF:
        return None, df
    return math.sqrt(ss / df), df


def prior_from_runs(runs: Iterable[tuple[str, float]]) -> Prior | None:
    """Rule step 2 on ``(version, median step ms)`` of accepted runs (``tasks.store.reads.calibration_runs``,
    newest :data:`CALIBRATION_WINDOW`); ``None`` when there is too little history."""
    runs = list(runs)
    tau, df = estimate_between_sd(runs)
    if tau is None:
        return None
    return Prior(between_sd=tau, prior_df=min(float(df), MAX_PRIOR_DF), source="store", n_runs=len(runs), df=df)


def prior_for_case(case, runs: Iterable[tuple[str, float]]) -> Prior:
    """The prior for ``case`` (a ``tasks.records.Case``) by the module's rule, given the accepted runs of
    its model, case and environment as ``(version, median step ms)``."""
    if case.prior_between_sd is not None:
        return Prior(between_sd=case.prior_between_sd, prior_df=DEFAULT_PRIOR_DF, source="case")
    return prior_from_runs(runs) or Prior(between_sd=DEFAULT_PRIOR_BETWEEN_SD, prior_df=DEFAULT_PRIOR_DF,
                                          source="default")


class Offset(BaseModel):
    """The process-level offset handed to ``stats.compare_paired`` (``offset_sd``, log scale).

    ``source``: ``case`` (``Case.paired_offset_sd``), ``store`` (estimated from A/A gates),
    ``default`` (:data:`DEFAULT_PAIRED_OFFSET_SD`); ``n_gates``: A/A gates used.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    sd: float
    source: Literal["case", "store", "default"]
    n_gates: int = 0


def estimate_paired_offset(gates: Iterable[tuple[float, float, int]]) -> tuple[float | None, int]:
    """Process-level offset sd from A/A paired gates (the same model bytes measured as A and B).

    Each gate gives its mean block log ratio ``d`` (``log ratio``), the sd of its block log ratios
    and its block count n. With no offset, E[d^2] = sd^2 / n; the offset variance is the excess
    (method of moments, floored at 0)::

        offset^2 = max(0, mean(d_g^2) - mean(sd_g^2 / n_g))

    Returns (offset sd, or ``None`` with fewer than :data:`MIN_AA_GATES` gates; gates used).

    Raises:
        ValueError: a ratio that is not finite and > 0, or n < 2 (names the gate index).
    """
    d2, noise = [], []
    for i, (ratio, sd, n) in enumerate(gates):
        if not (math.isfinite(ratio) and ratio > 0) or n < 2 or not math.isfinite(sd):
            raise ValueError(f"A/A gate {i}: ratio {ratio!r}, block sd {sd!r}, blocks {n!r}; expected a finite "
                             "ratio > 0, a finite sd and at least 2 blocks")
        d2.append(math.log(ratio) ** 2)
        noise.append(sd**2 / n)
    if len(d2) < MIN_AA_GATES:
        return None, len(d2)
    return math.sqrt(max(0.0, float(np.mean(d2)) - float(np.mean(noise)))), len(d2)


def _gate_sd(paired: dict) -> float:
    """Per-pair sd of a stored paired gate such that sd^2 / n is its sampling variance: from the
    batch-means standard error when the gate has one, else the plain sd of its block log ratios."""
    d, n = paired["details"], paired["n_candidate"]
    return d["se_log_ratio"] * math.sqrt(n) if "se_log_ratio" in d else d["sd_log_ratio"]


def paired_offset_for_case(case, aa_gates: Iterable[dict]) -> Offset:
    """The offset for ``case``: ``Case.paired_offset_sd`` when set; else estimated from A/A release gates
    (``aa_gates``: stored ``evidence["paired"]`` dicts of gates whose baseline bytes equal the candidate's,
    newest first, ``tasks.store.reads.aa_gates``); else the default."""
    if case.paired_offset_sd is not None:
        return Offset(sd=case.paired_offset_sd, source="case")
    sd, n = estimate_paired_offset((p["ratio"], _gate_sd(p), p["n_candidate"]) for p in aa_gates)
    if sd is not None:
        return Offset(sd=sd, source="store", n_gates=n)
    return Offset(sd=DEFAULT_PAIRED_OFFSET_SD, source="default")
