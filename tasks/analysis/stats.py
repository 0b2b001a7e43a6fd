"""Step-time comparison statistics: pure functions over plain numpy arrays (times in ms).

Everything is judged on the **ratio of medians**, candidate / baseline, worked on the log
scale (``log(b/a) = log b - log a``; step times are right-skewed and noise is multiplicative).
The "log-median" of a run is ``median(log x)`` (= log of the median for odd n).

Three ways to build a confidence interval (CI) for the ratio:

* :func:`median_ratio_ci` -- two-sample percentile bootstrap (Efron & Tibshirani 1993, ch. 13)
  via ``scipy.stats.bootstrap``. Sees only step-to-step noise: right for two samples from one
  process, too narrow for two separate processes.
* :func:`compare_to_history` (``history-lookback``) -- a random-effects model of the last K
  baseline runs (DerSimonian & Laird 1986): each run's log-median = true level + run effect
  (sd tau, process-to-process drift) + within-run noise (bootstrap variance). tau is the
  method-of-moments estimate, pooled with a prior when below it (scaled-inverse-chi^2 update,
  Gelman et al., *Bayesian Data Analysis*, 3rd ed., sec. 3.3), and floored; Student-t interval.
* :func:`compare_paired` (``paired-abba``) -- A and B measured in alternating ABBA blocks in one
  process; Student t interval (``scipy.stats.t``) on the block-by-block log ratios, its variance
  from batch means of neighbouring pairs (which keeps their correlation in). This is the interval
  of ONE look at a fixed number of pairs (gates under 32 pairs); the product's paired gates look
  after every round and stop early, which needs the repeated confidence intervals of
  ``tasks.analysis.sequential`` to keep their level.
  Process-level drift cancels within pairs and a linear trend cancels over ABBA. Chosen over
  Wilcoxon / Hodges-Lehmann because it composes with the process-level offset term (a known
  variance added to the mean's), works for small block counts (the exact signed-rank test
  cannot reach 99% confidence below 8 pairs: its smallest two-sided p-value is 2 / 2**n), and
  loses nothing on this noise: on the dev machine's self-vs-self pairs the Hodges-Lehmann
  estimate's spread was no smaller than the mean's (log step-time ratios are near-normal).

Verdict rule (:func:`verdict_from_ci`): thresholds are tests on the interval, never on single steps
or on the point estimate alone. Tolerance t, CI [low, high] of the ratio, band B = [1/(1+t), 1+t]
(symmetric on the log scale); two one-sided tests against two thresholds, the no-change line 1 and
the tolerance 1+t (an indifference zone, as in a sequential test of ratio <= 1 against ratio >= 1+t):

1. ``pass``        CI inside B: any change is shown to be within tolerance (equivalence, as in
                   TOST, Schuirmann 1987) -- includes a statistically significant but small change;
2. ``regression``  otherwise, if low > 1: the interval lies above 1 (significantly slower) and
                   reaches past 1+t (a slowdown beyond t is not ruled out);
3. ``improvement`` otherwise, if high < 1: the mirror image;
4. ``pass``        otherwise, if high <= 1+t: the interval holds 1 and lies below the tolerance
                   threshold: not slower than t (perhaps faster by more than t);
5. ``inconclusive`` otherwise: the CI holds 1 and reaches past 1+t.

Nothing else changes a verdict: a fraction of single steps over a line is not a test of a change in
the median (under load 18-45% of an unchanged model's steps exceed 110% of its median).

Why: with a calibrated two-sided CI at confidence c, a no-change run is flagged only when
low > 1, probability (1-c)/2 = 0.5% at c=0.99 (<= 1% false alarms). A true slowdown of exactly
1+t is flagged with probability >= Phi(log(1+t)/s - z) - (1-c)/2 (z = z_{(1+c)/2}; normal approx.), >= 95% once the
sd ``s`` of the log ratio is <= log(1+t) / (z_{(1+c)/2} + z_{0.95}) (0.0116 for t=5%, c=99%):
"when the noise allows". Requiring the point estimate to exceed 1+t instead would detect a
slowdown of exactly t only half of the time. ``inconclusive`` implies the CI half-width h
exceeds log(1+t)/2; at h <= log(1+t)/2 a verdict is guaranteed (a CI holding 1 then lies in B),
so ``needed_samples`` is the sample size that brings h down to log(1+t)/2 assuming the sd of
the estimate shrinks as 1/sqrt(n) (candidate steps for history, blocks for paired).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict
from scipy import stats

from tasks.records import Verdict

__all__ = [
    "Comparison",
    "RatioEstimate",
    "compare_paired",
    "compare_to_history",
    "fixed_threshold_verdict",
    "sign_flip_test",
    "median_ratio_ci",
    "verdict_from_ci",
    "MIN_STEPS",
    "MIN_BLOCKS",
]

MIN_STEPS = 5  #: fewest step times accepted per run
MIN_BLOCKS = 2  #: fewest ABBA blocks per version
PAIRED_BATCH = 16  #: block pairs per batch in the paired batch-means variance (compare_paired)
MIN_BATCHES = 8  #: fewest batches before the batch is shortened
RANDOMISATION_RESAMPLES = 9999  #: sign-flip resamples (exact test when 2^n is fewer)

ArrayLike = Sequence[float] | npt.NDArray[np.float64]


class RatioEstimate(BaseModel):
    """Ratio of medians (candidate / baseline) with its confidence interval."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ratio: float
    low: float
    high: float
    confidence: float
    method: str


class Comparison(BaseModel):
    """A verdict and its evidence (JSON-safe).

    Attributes:
        verdict: ``pass`` | ``regression`` | ``improvement`` | ``inconclusive``.
        method: ``history-lookback`` | ``paired-abba`` | ``fixed-threshold``.
        ratio, ci_low, ci_high: candidate/baseline median step-time ratio and its CI
            (CI ``None`` for ``fixed-threshold``).
        confidence: CI level (``None`` for ``fixed-threshold``); tolerance: t (0.05 = 5%).
        n_candidate, n_baseline: history: candidate steps, baseline runs; paired: B blocks,
            A blocks; fixed-threshold: candidate steps, baseline steps.
        needed_samples: when ``inconclusive``, estimated candidate steps (history) or blocks
            per version (paired) for a decisive CI; ``None`` otherwise or when more samples
            cannot help (between-run drift dominates).
        reason: the figures behind the verdict in words.
        details: method-specific figures (sds on the log scale, degrees of freedom).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    verdict: Verdict
    method: Literal["history-lookback", "paired-abba", "fixed-threshold"]
    ratio: float
    ci_low: float | None
    ci_high: float | None
    confidence: float | None
    tolerance: float
    n_candidate: int
    n_baseline: int
    needed_samples: int | None
    reason: str
    details: dict[str, float] = {}


# ---------------------------------------------------------------- input checks


def _samples(x: ArrayLike, name: str, min_n: int = MIN_STEPS) -> npt.NDArray[np.float64]:
    """``x`` as a 1-D float array of finite, positive step times, at least ``min_n`` long."""
    a = np.asarray(x, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of step times (ms), got shape {a.shape}")
    if a.size < min_n:
        raise ValueError(f"{name}: {a.size} step times, need at least {min_n}")
    bad = np.flatnonzero(~np.isfinite(a) | (a <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}] = {float(a[i])!r}: step times must be finite and > 0 ms")
    return a


def _check_levels(tolerance: float | None, confidence: float) -> None:
    if tolerance is not None and not 0 < tolerance < 1:
        raise ValueError(f"tolerance = {tolerance}: must be in (0, 1)")
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence = {confidence}: must be in (0.5, 1)")


def _log_median(x: npt.NDArray[np.float64]) -> float:
    return float(np.median(np.log(x)))


def _log_median_var(x: npt.NDArray[np.float64], n_resamples: int, rng: np.random.Generator) -> float:
    """Bootstrap variance of the log-median of one run (step-to-step noise only)."""
    res = stats.bootstrap(
        (np.log(x),),
        np.median,
        n_resamples=n_resamples,
        vectorized=True,
        method="percentile",
        batch=max(1, 2_000_000 // x.size),
        rng=rng,
    )
    return float(res.standard_error) ** 2


# ---------------------------------------------------------------- verdict rule


def verdict_from_ci(low: float, high: float, tolerance: float) -> Verdict:
    """Apply the verdict rule (module docstring) to a ratio CI ``[low, high]`` and tolerance t.

    Raises:
        ValueError: ``low > high`` or a non-positive bound.
    """
    if not 0 < low <= high:
        raise ValueError(f"CI [{low}, {high}]: need 0 < low <= high")
    if 1 / (1 + tolerance) <= low and high <= 1 + tolerance:
        return Verdict.PASS
    if low > 1:
        return Verdict.REGRESSION
    if high < 1:
        return Verdict.IMPROVEMENT
    if high <= 1 + tolerance:
        return Verdict.PASS
    return Verdict.INCONCLUSIVE


def _reason(
    verdict: Verdict,
    ratio: float,
    low: float,
    high: float,
    confidence: float,
    tolerance: float,
    what: str,
    quantity: str = "step-time",
) -> str:
    head = (
        f"{what}: median {quantity} ratio {ratio:.3f} (candidate/baseline), "
        f"{confidence:.0%} CI [{low:.3f}, {high:.3f}], tolerance band "
        f"[{1 / (1 + tolerance):.3f}, {1 + tolerance:.3f}]"
    )
    tail = {
        "pass": (
            "the CI lies inside the band: any change is within tolerance"
            if low >= 1 / (1 + tolerance)
            else f"the CI lies below {1 + tolerance:.3f}: not slower than the tolerance allows"
        ),
        "regression": f"the CI lies above 1 and reaches past the band: slower, possibly by more than {tolerance:.0%}",
        "improvement": "the CI lies below 1 and reaches past the band: faster",
        "inconclusive": "the CI holds 1 and reaches past the tolerance: too wide to decide",
    }[verdict]
    return f"{head}; {tail}."


# ---------------------------------------------------------------- estimators


def median_ratio_ci(
    candidate_ms: ArrayLike, baseline_ms: ArrayLike, confidence: float = 0.99, n_resamples: int = 9999, seed: int = 0
) -> RatioEstimate:
    """Ratio of medians with a two-sample percentile bootstrap CI (step-to-step noise only).

    Percentile rather than BCa: BCa's acceleration comes from the jackknife, which is
    inconsistent for the median (Efron 1982, sec. 3.4), and the percentile interval is
    transformation-respecting, so the log-ratio and ratio intervals agree.

    Args:
        candidate_ms, baseline_ms: shape (n,), (m,): per-step times in ms, n, m >= 5.
        confidence: two-sided CI level.
        n_resamples: bootstrap resamples (~10k keeps 99% percentile tails stable).
        seed: seed of the resampling RNG (results are reproducible).

    Returns:
        RatioEstimate(ratio, low, high, confidence, method="percentile-bootstrap").

    Raises:
        ValueError: an input is not 1-D, has < 5 values, or holds a NaN/inf/<= 0 value
            (message names the input and index), or ``confidence`` is outside (0.5, 1).
    """
    _check_levels(None, confidence)
    c = np.log(_samples(candidate_ms, "candidate_ms"))
    b = np.log(_samples(baseline_ms, "baseline_ms"))

    # a float for 1-D samples, one per resample for scipy's batches (numpy types np.median over an axis as Any)
    def stat(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], axis: int = -1) -> Any:
        return np.median(x, axis=axis) - np.median(y, axis=axis)

    res = stats.bootstrap(
        (c, b),
        stat,
        n_resamples=n_resamples,
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        method="percentile",
        batch=max(1, 2_000_000 // max(c.size, b.size)),
        rng=np.random.default_rng(seed),
    )
    lo, hi = res.confidence_interval
    return RatioEstimate(
        ratio=math.exp(stat(c, b)),
        low=math.exp(lo),
        high=math.exp(hi),
        confidence=confidence,
        method="percentile-bootstrap",
    )


def compare_to_history(
    candidate_ms: ArrayLike,
    baseline_runs: Sequence[ArrayLike],
    tolerance: float = 0.05,
    confidence: float = 0.99,
    *,
    prior_between_sd: float = 0.03,
    prior_df: float = 2.0,
    min_between_sd: float = 0.005,
    n_resamples: int = 999,
    seed: int = 0,
    quantity: str = "step-time",
) -> Comparison:
    """Compare one candidate run with the last K accepted baseline runs (unpaired, ``history-lookback``).

    Model (random effects, DerSimonian & Laird 1986) on log-medians ``y``: baseline run j has
    ``y_j = mu + b_j + e_j``, the candidate ``y_c = mu + delta + b_c + e_c``, with run effects
    ``b ~ N(0, tau^2)`` (process-to-process drift) and within-run noise ``e`` of variance ``v``
    (bootstrap variance of the log-median, ``scipy.stats.bootstrap``). Then::

        delta_hat = y_c - mean(y_j)                              ratio = exp(delta_hat)
        tau2_mm   = max(var(y_j, ddof=1) - mean(v_j), 0)         (method of moments, K-1 df)
        if tau2_mm < prior_between_sd**2:                         (pooled with the prior)
            tau2 = (prior_df * prior_between_sd**2 + (K-1) * tau2_mm) / (prior_df + K-1), df = prior_df + K-1
        else:                                                     (data alone)
            tau2 = tau2_mm, df = K-1
        tau2      = max(tau2, min_between_sd**2)
        var       = tau2 + v_c + (tau2 + mean(v_j)) / K
        CI        = exp(delta_hat -/+ t_{(1+c)/2, df} * sqrt(var))

    The prior (a pseudo-sample of ``prior_df`` runs with sd ``prior_between_sd``) keeps tau
    sane for small K. It is used one-sidedly, a deliberate choice: it can only *raise* tau,
    because pooling a too-small prior downwards raised false alarms to ~2% (K=5, true drift
    0.1, prior 0.03) in simulation; one-sided they stay near the nominal 0.5% (0.4-1.0%).
    The floor stops a lucky run of identical baselines from collapsing the CI. Set the prior
    from the environment
    (~0.01-0.03 on a quiet GPU host, ~0.1 measured on a busy 2-core CPU), ideally from the
    store's longer history of the same environment. More candidate steps shrink only ``v_c``;
    when ``tau2`` and the baseline term alone keep the CI too wide, ``needed_samples`` is ``None``.

    Args:
        candidate_ms: shape (n,), measured step times (ms) of the candidate run, n >= 5.
        baseline_runs: K >= 1 arrays, each shape (n_j,), n_j >= 5: per-step ms of accepted runs.
        tolerance, confidence: see the module docstring.
        prior_between_sd, prior_df, min_between_sd: prior and floor of tau (log scale);
            ``prior_df=0`` means no prior (then K >= 2 is required).
        n_resamples, seed: bootstrap of each run's log-median variance.
        quantity: what the values are, as the reason names the ratio (``step-time``; ``CPU-time`` for the
            per-step process CPU time, ``tasks.analysis.verdict.decide``).

    Returns:
        Comparison(method="history-lookback", n_candidate=n, n_baseline=K, details with
        tau, within-run sds, df).

    Raises:
        ValueError: no baseline runs (or one with ``prior_df=0``); a run with < 5 values or a
            NaN/inf/<= 0 value (message names ``candidate_ms`` or ``baseline_runs[j]`` and
            the index); tolerance/confidence out of range.
    """
    _check_levels(tolerance, confidence)
    cand = _samples(candidate_ms, "candidate_ms")
    k = len(baseline_runs)
    if k == 0 or (k == 1 and prior_df <= 0):
        raise ValueError(f"baseline_runs: {k} runs; need >= 1 (>= 2 when prior_df = 0)")
    runs = [_samples(r, f"baseline_runs[{j}]") for j, r in enumerate(baseline_runs)]
    rng = np.random.default_rng(seed)
    y = np.array([_log_median(r) for r in runs])
    v = np.array([_log_median_var(r, n_resamples, rng) for r in runs])
    y_c, v_c = _log_median(cand), _log_median_var(cand, n_resamples, rng)

    delta = y_c - y.mean()
    tau2_mm = max(float(y.var(ddof=1)) - float(v.mean()), 0.0) if k > 1 else 0.0
    if prior_df <= 0 or (k > 1 and tau2_mm >= prior_between_sd**2):
        tau2, df = tau2_mm, float(k - 1)  # the data show at least the prior's drift: data alone
    else:
        df = prior_df + k - 1
        tau2 = (prior_df * prior_between_sd**2 + (k - 1) * tau2_mm) / df
    tau2 = max(tau2, min_between_sd**2)
    fixed = tau2 + (tau2 + v.mean()) / k  # variance that more candidate steps cannot remove
    q = float(stats.t.ppf((1 + confidence) / 2, df))
    h = q * math.sqrt(fixed + v_c)
    low, high = math.exp(delta - h), math.exp(delta + h)
    verdict = verdict_from_ci(low, high, tolerance)

    needed, extra = None, ""
    if verdict == "inconclusive":
        room = (math.log1p(tolerance) / 2 / q) ** 2 - fixed
        if room > 0:
            needed = math.ceil(v_c * cand.size / room)
            extra = f" About {needed} candidate steps (now {cand.size}) would give a decisive CI."
        else:
            extra = (
                f" Run-to-run drift (tau {math.sqrt(tau2):.3f} on the log scale, K={k} runs) alone keeps "
                "the CI wider than the tolerance: more steps cannot decide; add baseline runs or use "
                "the paired ABBA gate."
            )
    reason = (
        _reason(
            verdict,
            math.exp(delta),
            low,
            high,
            confidence,
            tolerance,
            f"history-lookback vs {k} baseline runs",
            quantity,
        )
        + extra
    )
    return Comparison(
        verdict=verdict,
        method="history-lookback",
        ratio=math.exp(delta),
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        tolerance=tolerance,
        n_candidate=cand.size,
        n_baseline=k,
        needed_samples=needed,
        reason=reason,
        details={
            "between_run_sd": math.sqrt(tau2),
            "between_run_sd_data": math.sqrt(tau2_mm),
            "candidate_within_sd": math.sqrt(v_c),
            "baseline_within_sd": math.sqrt(float(v.mean())),
            "df": df,
        },
    )


def _block_medians(blocks: Sequence[ArrayLike | float], name: str) -> npt.NDArray[np.float64]:
    """Per-block medians; a block is a block median (scalar) or its per-step times (1-D)."""
    if len(blocks) < MIN_BLOCKS:
        raise ValueError(f"{name}: {len(blocks)} blocks, need at least {MIN_BLOCKS}")
    if isinstance(blocks, np.ndarray) and blocks.ndim == 1:  # block medians already: check them at once
        return _samples(blocks, name, min_n=1)
    out = []
    for i, blk in enumerate(blocks):
        a = np.asarray(blk, dtype=float)
        out.append(float(np.median(_samples(np.atleast_1d(a), f"{name}[{i}]", min_n=1))))
    return np.array(out)


def compare_paired(
    a_blocks: Sequence[ArrayLike | float],
    b_blocks: Sequence[ArrayLike | float],
    tolerance: float = 0.05,
    confidence: float = 0.99,
    *,
    offset_sd: float = 0.0,
) -> Comparison:
    """Paired A/B comparison of ABBA blocks measured in one process (``paired-abba``).

    Block i of A (baseline version) and block i of B (candidate) are adjacent in time
    (A1 B1 B2 A2 A3 B3 ...). With ``d_i = log median(B_i) - log median(A_i)``, n pairs::

        ratio = exp(mean d)
        batches: k = n // m consecutive batches of m = min(PAIRED_BATCH, n // MIN_BATCHES) pairs
                 (at least 1), batch means  e_j = mean of d over batch j
        se^2 = var(e, ddof=1) * m / n + offset_sd^2
        CI = exp(mean d -/+ t_{(1+c)/2, df} * se),  df = (k-1) * (se^2 / (var(e) * m / n))^2

    The variance of mean d comes from batch means (Schmeiser 1982, "Batch size effects in the
    analysis of simulation output", Oper. Res. 30(3)), not from sd(d)^2 / n: step time on a
    shared host drifts slowly (lag-1..4 autocorrelation of step times 0.45, 0.33, 0.26, 0.22 on
    the 2-core dev machine), ABBA cancels most of it but not all, and neighbouring pair ratios
    stay correlated: the variance of a mean of 4-8 consecutive pairs was 1.24-1.37x the
    independent value (``bench/detection.py`` samples), so the plain t interval was 10-15% too
    narrow. Batches of 16 pairs carry that correlation; the price is k-1 instead of n-1 degrees
    of freedom (19 for the default 320 pairs). The Student t quantile is ``scipy.stats.t``; a
    known process-level offset is added with
    Welch–Satterthwaite degrees of freedom (``offset_sd = 0``: the plain batch-means t interval).
    The offset is the sd of log(B/A) between processes for two *identical* models, which no
    number of blocks inside one process averages out; on the dev machine self-vs-self processes
    showed none (Cochran's Q p = 0.73, ``bench/detection.py``), so its default is 0 and the store
    estimates it from A/A gates (``tasks.analysis.calibration``). ``needed_samples`` is the smallest n whose
    half-width is at most ``log(1+t) / 2``; None when the offset alone is wider than that.

    Args:
        a_blocks, b_blocks: equal-length lists (n >= 2) of blocks in measurement order; each
            block is its median step time (ms, scalar) or its per-step times (ms, shape (m,)).
        tolerance, confidence: see the module docstring.

    Returns:
        Comparison(method="paired-abba", ratio = B/A, n_candidate = n_baseline = n).

    Raises:
        ValueError: fewer than 2 blocks, unequal lengths, an empty block, or a NaN/inf/<= 0
            value (message names ``a_blocks[i]``/``b_blocks[i]`` and the index in the block).
    """
    _check_levels(tolerance, confidence)
    a, b = _block_medians(a_blocks, "a_blocks"), _block_medians(b_blocks, "b_blocks")
    if a.size != b.size:
        raise ValueError(f"a_blocks has {a.size} blocks but b_blocks has {b.size}: blocks must pair up")
    if not (offset_sd >= 0 and math.isfinite(offset_sd)):
        raise ValueError(f"offset_sd = {offset_sd}: must be a finite sd >= 0 (log scale)")
    n = a.size
    d = np.log(b) - np.log(a)
    mean = float(d.mean())
    m = _batch_size(n)
    k = n // m
    e = d[: k * m].reshape(k, m).mean(axis=1)
    sd = float(e.std(ddof=1)) * math.sqrt(m)  # per-pair sd that the batch means imply (correlation included)
    h, df = _paired_half_width(sd, n, offset_sd, confidence)
    low, high = math.exp(mean - h), math.exp(mean + h)
    verdict = verdict_from_ci(low, high, tolerance)
    needed, extra = None, ""
    if verdict == "inconclusive":
        needed = _paired_needed_blocks(sd, offset_sd, confidence, math.log1p(tolerance) / 2)
        extra = (
            f" About {needed} blocks per version (now {n}) would give a decisive CI."
            if needed
            else " More blocks cannot help: the process-level offset (sd "
            f"{offset_sd:.3f}) alone is wider than the tolerance allows."
        )
    reason = _reason(
        verdict,
        math.exp(mean),
        low,
        high,
        confidence,
        tolerance,
        f"paired-abba over {n} block pairs ({k} batches of {m})",
    )
    return Comparison(
        verdict=verdict,
        method="paired-abba",
        ratio=math.exp(mean),
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        tolerance=tolerance,
        n_candidate=n,
        n_baseline=n,
        needed_samples=needed,
        reason=reason + extra,
        details={
            "sd_log_ratio": float(d.std(ddof=1)),
            "scale_log_ratio": noise_scale(d),
            "se_log_ratio": sd / math.sqrt(n),
            "batch_pairs": float(m),
            "offset_sd": offset_sd,
            "df": df,
        },
    )


def noise_scale(d: ArrayLike) -> float:
    """Robust per-pair scale of paired log ratios ``d`` (log scale): the normal-consistent median absolute
    deviation, 1.4826 x MAD (``scipy.stats.median_abs_deviation(scale="normal")``; Hampel 1974). It equals
    the sd for normal ratios, but a few stray slow steps barely move it, so that a gate's noise can be
    judged at its first looks (32 pairs), where one 3x step would double the plain sd.

    Raises:
        ValueError: fewer than 2 values or a non-finite one.
    """
    x = np.asarray(d, dtype=float)
    if x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"noise_scale needs at least 2 finite log ratios, got {x.size} ({x[:5].tolist()}...)")
    return float(stats.median_abs_deviation(x, scale="normal"))


def sign_flip_test(
    d: ArrayLike,
    null_log_ratio: float,
    alternative: Literal["greater", "less", "two-sided"],
    *,
    n_resamples: int = RANDOMISATION_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Randomisation (sign-flip) test of the mean pair log ratio against ``null_log_ratio``.

    A paired design's randomisation test (Fisher 1935, *The Design of Experiments*, sec. 21; Good,
    *Permutation Tests*, 2nd ed. 2000, sec. 3.1): under the sharp null "B = exp(null_log_ratio) x A in every
    pair" the labels of each pair are exchangeable, so each shifted log ratio ``d_i - null_log_ratio`` is as
    likely to carry either sign. ``scipy.stats.permutation_test`` with the one-sample statistic ``mean`` and
    ``permutation_type="samples"`` flips the signs (all ``2^n`` patterns when that is at most ``n_resamples``,
    else ``n_resamples`` random ones, p-value counted conservatively with the observed one included). It rests
    on the drawn order of the pairs, not on a normal model of the step times.

    Args:
        d: pair log ratios ``log B_i - log A_i``, shape (n,), n >= 2, finite.
        null_log_ratio: the log ratio under H0 (0: no change; ``log(1 + t)``: the tolerance threshold).
        alternative: ``greater`` (B slower than the null), ``less``, ``two-sided``.
        n_resamples, seed: random sign patterns and their generator's seed (reproducible).

    Returns:
        ``{"p", "null_log_ratio", "resamples", "alternative", "min_p"}``: ``resamples`` is the number of sign
        patterns in the null distribution; ``min_p`` the smallest p-value this n can give (``2^-n`` one-sided
        exact, doubled two-sided; ``1 / (n_resamples + 1)`` random).

    Raises:
        ValueError: fewer than 2 values or a non-finite one.
    """
    x = np.asarray(d, dtype=float)
    if x.ndim != 1 or x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"sign_flip_test needs at least 2 finite pair log ratios, got {x[:5].tolist()}...")
    res = stats.permutation_test(
        (x - null_log_ratio,),
        np.mean,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative=alternative,
        rng=np.random.default_rng(seed),
    )
    resamples = int(np.size(res.null_distribution))
    exact = 2.0**x.size <= n_resamples
    min_p = 2.0**-x.size if exact else 1.0 / (n_resamples + 1)
    return {
        "p": float(min(res.pvalue, 1.0)),
        "null_log_ratio": float(null_log_ratio),
        "resamples": resamples,
        "alternative": alternative,
        "min_p": float(min(1.0, 2 * min_p) if alternative == "two-sided" else min_p),
    }


def _batch_size(n: int) -> int:
    """Pairs per batch for n block pairs: PAIRED_BATCH, fewer when that leaves under MIN_BATCHES batches."""
    return max(1, min(PAIRED_BATCH, n // MIN_BATCHES))


def _paired_half_width(sd: float, n: int, offset_sd: float, confidence: float) -> tuple[float, float]:
    """Half-width (log scale) and Welch–Satterthwaite df of the paired interval (see compare_paired);
    ``sd``: per-pair sd implied by the batch means."""
    v_blocks = sd**2 / n
    v = v_blocks + offset_sd**2
    df = (n // _batch_size(n) - 1) * (v / v_blocks) ** 2 if v_blocks > 0 else math.inf
    q = (
        float(stats.t.ppf((1 + confidence) / 2, df))
        if math.isfinite(df)
        else float(stats.norm.ppf((1 + confidence) / 2))
    )
    return q * math.sqrt(v), df


def _paired_needed_blocks(sd: float, offset_sd: float, confidence: float, budget: float) -> int | None:
    """Smallest n (<= 100000) with half-width <= ``budget``: a normal-quantile start, then stepped up."""
    z = float(stats.norm.ppf((1 + confidence) / 2))
    room = budget**2 - (z * offset_sd) ** 2
    if room <= 0:
        return None
    n = max(2, math.ceil((z * sd) ** 2 / room))
    while n <= 100_000:
        if _paired_half_width(sd, n, offset_sd, confidence)[0] <= budget:
            return n
        n += max(1, n // 20)
    return None


def fixed_threshold_verdict(candidate_ms: ArrayLike, baseline_ms: ArrayLike, limit: float = 1.10) -> Comparison:
    """The naive rule "candidate median <= limit x baseline median" (benchmark reference only).

    Ignores noise entirely: with process-to-process drift of ~10% it raises 20-27% false alarms.

    Args:
        candidate_ms, baseline_ms: shape (n,), (m,): per-step times in ms, n, m >= 5.
        limit: allowed ratio of medians (> 0).

    Returns:
        Comparison(method="fixed-threshold", verdict ``regression`` if ratio > limit else
        ``pass``, no CI, tolerance = limit - 1).

    Raises:
        ValueError: bad input as in :func:`median_ratio_ci`, or ``limit <= 0``.
    """
    if not limit > 0:
        raise ValueError(f"limit = {limit}: must be > 0")
    c, b = _samples(candidate_ms, "candidate_ms"), _samples(baseline_ms, "baseline_ms")
    ratio = float(np.median(c) / np.median(b))
    verdict = Verdict.REGRESSION if ratio > limit else Verdict.PASS
    return Comparison(
        verdict=verdict,
        method="fixed-threshold",
        ratio=ratio,
        ci_low=None,
        ci_high=None,
        confidence=None,
        tolerance=limit - 1,
        n_candidate=c.size,
        n_baseline=b.size,
        needed_samples=None,
        reason=f"fixed-threshold: median ratio {ratio:.3f} {'>' if ratio > limit else '<='} "
        f"limit {limit:.3f}: {verdict}.",
    )
