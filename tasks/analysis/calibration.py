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

Paired gates (:func:`paired_offset_for_case`): the process-level offset between two copies of one
model is calibrated from **A/A gates** (the same model bytes as A and B) that ran **within the normal
noise range** (``host_busy`` false in their evidence; gates without that record, or measured on a busy
host, are never used), with a **robust estimator** (the offset that makes the median of the gates'
standardised squared log ratios equal the median of chi-square(1), so a few gates hit by load cannot
drive it) and a **cap** (:data:`MAX_PAIRED_OFFSET_SD`): an offset that large would mean the gates
themselves were disturbed, and an uncapped one (0.062-0.072 learnt under load on the dev machine)
widened every later interval to about +-20%, after which no gate could decide anything.

Noise awareness (:func:`assess_noise`): a measurement is judged against documented bounds on the
host's load while it ran (``tasks.runner.measure.HostLoad``) and, for a paired gate, on its own noise
(the robust per-pair scale of its log ratios, 1.4826 x MAD: ``tasks.analysis.stats.noise_scale``)
against the calibrated noise of the case (:func:`calibrated_noise`: the median of that scale over the
newest quiet gates of the case and environment). Beyond a bound the
host counts as busy, because a busy host biases step-time ratios, not only widens them: delays that
other processes add to both versions alike can pull the ratio towards 1, and contention can also push it
away (ABBA pairs of two small CNNs, issue 23: wall-time ratio x1.303 quiet, x1.536 at 1-min load 8, so
load can fake a regression on wall time). The bounds:

* other processes took more than ``Case.max_other_cpu_share`` (default
  :data:`DEFAULT_MAX_OTHER_CPU_SHARE` = 0.25) of the host's CPU time (wall x logical CPUs) --
  real gates on the 2-core dev machine measured 0.02-0.04 when quiet, 0.38-0.57 beside other test
  jobs, 0.70-0.81 with two busy-loop processes and 0.74-0.87 with four;
* the hypervisor stole more than ``Case.max_steal_share`` (default :data:`MAX_STEAL_SHARE` = 0.05) of it;
* a GPU showed more than :data:`MAX_GPU_OTHER_PROCESSES` (0) other processes (only where NVML answers);
* the gate's per-pair noise scale was more than :data:`MAX_NOISE_RATIO` (1.5) times the calibrated
  one (only with at least :data:`MIN_NOISE_GATES` quiet gates in the store that recorded the scale).
  The gate's scale is an estimate from the pairs it measured, so the rule compares its one-sided 95%
  lower bound, ``scale x exp(-NOISE_Z x MAD_RELATIVE_SE / sqrt(pairs))`` (the MAD's asymptotic
  standard error), with the bound: at 48 pairs the scale must reach 2.0x the calibrated one, at 320
  pairs 1.7x. The scale is robust because the plain sd is not fit for the rule: a gate is judged at
  the look it stops at, often 32-80 pairs, where a single 3x step doubles the plain sd. An earlier rule on the
  batch-means sd (7-19 degrees of freedom, and the drift correlation, which varies from process to
  process) turned 14-23% of quiet gates `inconclusive` on the dev machine's resampled real pairs
  (``bench/detection.py``, quiet processes with no other process on the CPU), whatever the slowdown.
  What load does to it (``bench/detection.py``'s samples, 320 pairs each): quiet self-vs-self processes
  had a scale of 0.061-0.097 (plain sd 0.093-0.124), processes beside 1 busy loop per core 0.156-0.179
  (sd 0.21-0.25), beside 3 per core 0.072-0.082 (sd 0.18-0.20: the delays come as rare long stalls,
  which the robust scale by design ignores). The rule on the gate's noise therefore catches a
  broadly noisier host; stalls from CPU contention are caught by the other-processes bound (76% of
  the CPU there).

The 1-minute load average is recorded but not judged: it counts the runner's own threads (a quiet
2-core host running a TF step reads about 2).

What decides when (:func:`choose_metric`), from ``bench/busy.py``'s table (docs/verdicts.md): on
a quiet host, wall time, as above: it is what a user waits for. On a busy host, a paired gate decides on its
pairs' per-step process CPU time (all threads, user + system). Measured beside 1 and 3 busy loops per core and
two other TensorFlow jobs (other processes took 58-78% of the CPU): its pair scale stayed 0.047-0.064 where
wall time's grew to 0.124-0.221 (0.076-0.122 quiet; issue 23's MobileNetV2 under load 5-14: 0.045-0.099 against
0.24-0.84), and its ratio moved at most 1.7% from the quiet CPU-time ratio where the wall-time ratio moved
up to 5.8% (issue 23's CNN pair: +18% on wall time at load 8, so load fakes regressions on wall time too).
It is used when it was recorded, the steps are not on a GPU (:func:`gpu_in_use`; there CPU time is not the
work, so busy stays ``inconclusive`` and says so; the device time in the profile and NVML's other-process
count are what a GPU case has), its pair scale passes the wall scale's rule against its own calibration
(``NoiseCalibration.cpu_sd_pair``, else the cap :data:`MAX_CPU_SCALE`) and steal is within its bound. The
tolerance is then a tolerance on CPU time, and every line of the quiet rule moves by the bias bound
:data:`CPU_BIAS_BOUND` (``tasks.analysis.verdict.busy_verdict_from_ci``): a ``regression`` needs the CPU-time
interval above ``1 + b``, an ``improvement`` below its reciprocal, a ``pass`` the interval within
``(1 + tolerance) / (1 + b)``; so load can neither fake a regression of an unchanged model nor hide a slowdown
beyond the tolerance. How a CPU-time ratio relates to the wall-time ratio: for the bench's CNN variants the
quiet CPU-time ratio lay within -1.4% to +1.2% of the wall-time ratio (``log CPU / log wall`` 1.03-1.08 for
the x1.05-x1.25 variants), for issue 23's CNN pair +3.3%, for the demo's MobileNetV2 pair +18% (x2.07 against
x1.76): CPU time counts the work of all threads, and a change that adds more parallel work than the rest of
the step moves it more than the wall time. A busy gate whose metric is fit keeps its verdict, whatever it is;
only a busy gate with no metric fit (``Noise.decided_on`` None) is measured again (``HostBusy``).

What the nightly history decides on (:func:`history_metric`): the history verdict and the change points judge
one process against others, so what limits them is the drift of a run's median between processes of one
version, not the step-to-step noise within one. The rule estimates that drift per metric from the same
accepted runs, as :func:`estimate_between_sd` does (pooled within-version sd of the log medians of the newest
:data:`CALIBRATION_WINDOW` accepted runs of the case and environment, over the runs that recorded both wall
and CPU time), and takes CPU time only when it drifts clearly less: its sd below :data:`HISTORY_CPU_MARGIN`
(0.8) x the wall sd, both with ``df >= MIN_CALIBRATION_DF``, no GPU (:func:`gpu_in_use`), and CPU time
recorded by the candidate and every baseline used. Otherwise wall time, what a user waits for. The margin
keeps two noisy estimates from flipping the metric night to night; a CPU series that load biases from night
to night drifts more, so it is refused by the same comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import optimize, stats

if TYPE_CHECKING:
    from tasks.records import Case

__all__ = [
    "CALIBRATION_WINDOW",
    "CPU_BIAS_BOUND",
    "DEFAULT_MAX_OTHER_CPU_SHARE",
    "DEFAULT_PAIRED_OFFSET_SD",
    "DEFAULT_PRIOR_BETWEEN_SD",
    "HISTORY_CPU_MARGIN",
    "MAX_CPU_SCALE",
    "MAX_GPU_OTHER_PROCESSES",
    "MAX_NOISE_RATIO",
    "MAX_PAIRED_OFFSET_SD",
    "MAX_PRIOR_DF",
    "MAX_STEAL_SHARE",
    "MIN_AA_GATES",
    "MIN_CALIBRATION_DF",
    "MIN_NOISE_GATES",
    "HistoryMetric",
    "Noise",
    "NoiseCalibration",
    "Offset",
    "Prior",
    "assess_noise",
    "calibrated_noise",
    "choose_metric",
    "combined_load",
    "estimate_between_sd",
    "estimate_paired_offset",
    "gate_is_quiet",
    "gpu_in_use",
    "history_metric",
    "paired_offset_for_case",
    "prior_for_case",
    "prior_from_runs",
    "steal_exceeded",
]

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
#: cap on the estimated offset (log scale): 1% between two copies of one model in one process. Above it
#: a 5% tolerance can hardly be resolved (z_{0.995} x 0.01 already takes half of log(1.05) / 2), and a
#: larger estimate means disturbed A/A gates rather than a real offset (none was measured here).
MAX_PAIRED_OFFSET_SD = 0.01
_CHI2_1_MEDIAN = float(stats.chi2.median(1))  # 0.4549: median of a squared standard normal

DEFAULT_MAX_OTHER_CPU_SHARE = 0.25  #: share of the host's CPU time other processes may take (Case default)
MAX_STEAL_SHARE = 0.05  #: share of the host's CPU time the hypervisor may steal (``Case.max_steal_share`` default)
MAX_GPU_OTHER_PROCESSES = 0  #: other processes allowed on a GPU during the measurement (NVML)
MAX_NOISE_RATIO = 1.5  #: a gate's per-pair noise scale may be at most this many times the calibrated one
#: asymptotic relative standard error of the normal-consistent MAD is MAD_RELATIVE_SE / sqrt(n) (its variance
#: 1.3605 sigma^2 / n for normal data; Hampel, Ronchetti, Rousseeuw & Stahel 1986, sec. 2.3)
MAD_RELATIVE_SE = 1.166
NOISE_Z = 1.645  #: one-sided 95%: the noise rule fires when even the lower bound of the gate's scale is too high
MIN_NOISE_GATES = 3  #: fewest quiet stored gates for a calibrated noise
#: How far load may move the per-step CPU-time ratio of a paired gate, as a share of the ratio: on a busy host
#: every line of the verdict rule on CPU time moves by it (``tasks.analysis.verdict.busy_lines``: a change
#: beyond ``1 + b``, a pass within ``(1 + tolerance) / (1 + b)``). Measured by ``bench/busy.py`` (2026-12-01,
#: the gates CNN and four wider-head variants, x1.02-x1.25, at 1 and 3 busy loops per core and beside two other
#: TensorFlow jobs; 2 processes of 160 pairs per cell): the CPU-time ratio moved -1.7% to +0.8% from the quiet
#: CPU-time ratio (the wall-time ratio -5.8% to +2.0%), and lay -2.1% to +1.2% from the quiet wall-time ratio;
#: issue 23's CNN pair moved +1.0%. 0.025 covers the largest with the cells' own uncertainty (about +-0.8%).
CPU_BIAS_BOUND = 0.025
#: the most a busy host is taken to move a paired gate's wall-time ratio (fraction): measured +18% (issue 23's CNN
#: pair, x1.303 quiet, x1.536 at 1-min load 8) and -5.8% to +2.0% (``bench/busy.py``'s variants beside 1 and 3
#: busy loops per core and two TensorFlow jobs); 0.30 leaves a margin over the largest. A busy gate whose wall-time
#: interval lies beyond ``(1 + tolerance) x (1 + WALL_BIAS_BOUND)`` is a change load cannot fake
#: (``tasks.analysis.verdict.gross_verdict_from_ci``): a new team's x12 slower release read [10.97, 14.59] and was
#: left inconclusive because neither metric was fit to judge a small change.
WALL_BIAS_BOUND = 0.30
#: Bound on a busy gate's CPU-time pair scale (log scale) while the store has too few gates that recorded
#: one: the quiet wall-time pair scale's upper range (0.061-0.097, ``bench/detection.py``); CPU time per step
#: under load 5-14 measured 0.045-0.099 (issue 23), i.e. as steady as quiet wall time.
MAX_CPU_SCALE = 0.10
#: The history decides on CPU time only when its between-process sd is below this many times the wall sd
#: (:func:`history_metric`): two estimates of tau from 5-30 degrees of freedom scatter by roughly
#: ``1 / sqrt(2 df)`` (13-32%) each, so a smaller margin would flip the metric night to night on noise alone.
HISTORY_CPU_MARGIN = 0.8


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
            raise ValueError(
                f"accepted run of version {version!r} has median step time {median!r} ms; expected a finite value > 0"
            )
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


def prior_for_case(case: Case, runs: Iterable[tuple[str, float]]) -> Prior:
    """The prior for ``case`` (a ``tasks.records.Case``) by the module's rule, given the accepted runs of
    its model, case and environment as ``(version, median step ms)``."""
    if case.prior_between_sd is not None:
        return Prior(between_sd=case.prior_between_sd, prior_df=DEFAULT_PRIOR_DF, source="case")
    return prior_from_runs(runs) or Prior(
        between_sd=DEFAULT_PRIOR_BETWEEN_SD, prior_df=DEFAULT_PRIOR_DF, source="default"
    )


class Offset(BaseModel):
    """The process-level offset handed to the paired statistics (``offset_sd``, log scale).

    ``source``: ``case`` (``Case.paired_offset_sd``), ``store`` (estimated from quiet A/A gates),
    ``default`` (:data:`DEFAULT_PAIRED_OFFSET_SD`); ``n_gates``: A/A gates used; ``capped``: the
    estimate was above :data:`MAX_PAIRED_OFFSET_SD` and the cap is used; ``skipped_busy``: A/A gates
    left out because they ran on a busy host (or have no noise record).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    sd: float
    source: Literal["case", "store", "default"]
    n_gates: int = 0
    capped: bool = False
    skipped_busy: int = 0


def estimate_paired_offset(gates: Iterable[tuple[float, float, int]]) -> tuple[float | None, int]:
    """Process-level offset sd from A/A paired gates (the same model bytes measured as A and B), robustly.

    Each gate g gives its mean pair log ratio ``d_g`` (``log ratio``), its per-pair sd ``s_g`` (such
    that ``s_g^2 / n_g`` is the sampling variance ``v_g`` of ``d_g``) and its pair count ``n_g``. With
    an offset of sd ``tau``, ``d_g^2 / (v_g + tau^2)`` is chi-square(1); the estimate is the ``tau >= 0``
    at which the *median* of these over the gates equals chi-square(1)'s median 0.4549 (a median form
    of the Paule-Mandel moment equation, solved with ``scipy.optimize.brentq``), 0 when the gates scatter
    no more than their own noise. A median rather than a mean: one gate hit by a load burst moves it
    little. Not capped here (see :func:`paired_offset_for_case`).

    Returns (offset sd, or ``None`` with fewer than :data:`MIN_AA_GATES` gates; gates used).

    Raises:
        ValueError: a ratio that is not finite and > 0, or n < 2 (names the gate index).
    """
    d2, v = [], []
    for i, (ratio, sd, n) in enumerate(gates):
        if not (math.isfinite(ratio) and ratio > 0) or n < 2 or not (math.isfinite(sd) and sd >= 0):
            raise ValueError(
                f"A/A gate {i}: ratio {ratio!r}, per-pair sd {sd!r}, pairs {n!r}; expected a finite "
                "ratio > 0, a finite sd >= 0 and at least 2 pairs"
            )
        d2.append(math.log(ratio) ** 2)
        v.append(sd**2 / n)
    if len(d2) < MIN_AA_GATES:
        return None, len(d2)
    d2a, va = np.asarray(d2), np.asarray(v)

    def excess(tau2: float) -> float:
        return float(np.median(d2a / np.maximum(va + tau2, 1e-300))) - _CHI2_1_MEDIAN

    if excess(0.0) <= 0:
        return 0.0, len(d2)
    hi = max(float(d2a.max()), 1e-12)
    while excess(hi) > 0:
        hi *= 4
    return math.sqrt(float(optimize.brentq(excess, 0.0, hi, xtol=1e-14))), len(d2)


def gate_is_quiet(paired: dict[str, Any]) -> bool:
    """A stored paired gate (``evidence["paired"]``) counts for calibration only when it says it ran
    within the normal noise range: ``host_busy`` is present and false."""
    return paired.get("host_busy") is False


def _gate_sd(paired: dict[str, Any]) -> float:
    """Per-pair sd of a stored paired gate such that sd^2 / n is its sampling variance: from the
    batch-means standard error when the gate has one, else the plain sd of its block log ratios."""
    d, n = paired["details"], paired["n_candidate"]
    sd: float = d["se_log_ratio"] * math.sqrt(n) if "se_log_ratio" in d else d["sd_log_ratio"]
    return sd


def paired_offset_for_case(case: Case, aa_gates: Iterable[dict[str, Any]]) -> Offset:
    """The offset for ``case``: ``Case.paired_offset_sd`` when set; else estimated from the quiet A/A
    gates among ``aa_gates`` (stored ``evidence["paired"]`` dicts of gates whose baseline bytes equal the
    candidate's, newest first, ``tasks.records.CompareInputs.aa_gates``) by
    :func:`estimate_paired_offset`, capped at :data:`MAX_PAIRED_OFFSET_SD`; else the default."""
    if case.paired_offset_sd is not None:
        return Offset(sd=case.paired_offset_sd, source="case")
    gates = list(aa_gates)
    quiet = [p for p in gates if gate_is_quiet(p)]
    skipped = len(gates) - len(quiet)
    sd, n = estimate_paired_offset((p["ratio"], _gate_sd(p), p["n_candidate"]) for p in quiet)
    if sd is not None:
        return Offset(
            sd=min(sd, MAX_PAIRED_OFFSET_SD),
            source="store",
            n_gates=n,
            capped=sd > MAX_PAIRED_OFFSET_SD,
            skipped_busy=skipped,
        )
    return Offset(sd=DEFAULT_PAIRED_OFFSET_SD, source="default", skipped_busy=skipped)


# ---------------------------------------------------------------------------------------- noise awareness


class NoiseCalibration(BaseModel):
    """The calibrated noise of a case's paired gates: ``sd_pair`` (median robust per-pair scale of the log
    ratios, ``details["scale_log_ratio"]``, of the newest quiet gates, log scale; ``None`` with fewer than
    :data:`MIN_NOISE_GATES`), ``n_gates``; ``cpu_sd_pair``, ``cpu_gates``: the same of the per-step CPU-time
    log ratios (``details["cpu_scale_log_ratio"]``) over the newest gates that recorded it, whatever their load
    (CPU time is the metric of a busy host: its normal noise is its noise under the load this host has)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sd_pair: float | None
    n_gates: int
    cpu_sd_pair: float | None = None
    cpu_gates: int = 0


def calibrated_noise(paired_gates: Iterable[dict[str, Any]]) -> NoiseCalibration:
    """:class:`NoiseCalibration` from stored gates (``evidence["paired"]`` dicts, newest first, any
    versions; ``tasks.records.CompareInputs.paired_gates``): only quiet ones (:func:`gate_is_quiet`)
    that recorded the robust scale (``details["scale_log_ratio"]``; older gates have only sds, which are
    not comparable with it)."""
    gates = list(paired_gates)

    def median_of(key: str, use: Callable[[dict[str, Any]], bool]) -> tuple[float | None, int]:
        xs = [float((p.get("details") or {})[key]) for p in gates if use(p) and key in (p.get("details") or {})]
        xs = [x for x in xs if math.isfinite(x) and x > 0]
        return (float(np.median(xs)) if len(xs) >= MIN_NOISE_GATES else None), len(xs)

    sd, n = median_of("scale_log_ratio", gate_is_quiet)
    cpu_sd, cpu_n = median_of("cpu_scale_log_ratio", lambda p: True)
    return NoiseCalibration(sd_pair=sd, n_gates=n, cpu_sd_pair=cpu_sd, cpu_gates=cpu_n)


class Noise(BaseModel):
    """How noisy a measurement was, against the documented bounds (module docstring).

    Attributes:
        busy: a bound was exceeded; reason: ``host busy: ...`` naming each exceeded bound with its
            figures (None when not busy).
        host_load: the runner's ``HostLoad`` dict over the measured steps or the paired phase (None
            when the runner recorded none).
        gate_sd: the gate's robust per-pair noise scale of the log ratios (paired only); calibrated_sd,
            calibrated_gates: the case's calibrated value and how many quiet gates gave it.
        noise_ratio: gate_sd / calibrated_sd (None without both); noise_ratio_low: its one-sided 95% lower
            bound over ``gate_pairs`` pairs (what the rule compares with :data:`MAX_NOISE_RATIO`).
        bounds: the bounds applied (other_cpu_share, steal_share, gpu_other_processes, noise_ratio).
        metric: the metric fit to decide (:func:`choose_metric`): ``wall`` on a quiet host, ``cpu`` on a busy
            one whose CPU time is fit, None when none is. decided_on: the metric whose verdict stands: ``wall``
            on a quiet host, ``cpu`` when the busy host's CPU-time verdict stands (set by
            ``tasks.analysis.verdict.judge_noise``), None: undecided on a busy host (Airflow measures again).
        metric_reason: why CPU time is or is not fit on a busy host (None on a quiet host).
        cpu_sd, cpu_sd_low, cpu_bound: the gate's robust CPU-time pair scale, its one-sided 95% lower bound,
            and the bound it was held to (:data:`MAX_NOISE_RATIO` x ``cpu_calibrated_sd``, else
            :data:`MAX_CPU_SCALE`); cpu_calibrated_sd, cpu_calibrated_gates: the case's CPU calibration.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    busy: bool
    reason: str | None
    host_load: dict[str, Any] | None
    gate_sd: float | None = None
    calibrated_sd: float | None = None
    calibrated_gates: int = 0
    noise_ratio: float | None = None
    noise_ratio_low: float | None = None
    gate_pairs: int | None = None
    bounds: dict[str, float]
    metric: Literal["wall", "cpu"] | None = None
    decided_on: Literal["wall", "cpu"] | None = None
    metric_reason: str | None = None
    cpu_sd: float | None = None
    cpu_sd_low: float | None = None
    cpu_bound: float | None = None
    cpu_calibrated_sd: float | None = None
    cpu_calibrated_gates: int = 0


def assess_noise(
    host_load: dict[str, Any] | None,
    *,
    gate_sd: float | None = None,
    gate_pairs: int | None = None,
    calibration: NoiseCalibration | None = None,
    max_other_cpu_share: float = DEFAULT_MAX_OTHER_CPU_SHARE,
    max_steal_share: float = MAX_STEAL_SHARE,
) -> Noise:
    """Judge a measurement's noise against the bounds (module docstring).

    Args:
        host_load: ``HostLoad.result()`` of the runner (keys ``other_cpu_share``, ``steal_share``,
            optional ``gpu_other_processes``; a dict with ``error`` or None: nothing to judge).
        gate_sd: a paired gate's robust per-pair scale of the log ratios (``details["scale_log_ratio"]``,
            log scale), None for an unpaired run.
        gate_pairs: the pairs ``gate_sd`` was estimated from (its sampling error sets the allowance);
            required with ``gate_sd``.
        calibration: the case's calibrated gate noise (:func:`calibrated_noise`).
        max_other_cpu_share: ``Case.max_other_cpu_share``, in (0, 1].
        max_steal_share: ``Case.max_steal_share``, in (0, 1].

    Raises:
        ValueError: ``max_other_cpu_share`` or ``max_steal_share`` outside (0, 1], a negative or non-finite
            ``gate_sd``, or ``gate_sd`` without ``gate_pairs`` >= 2.
    """
    if not 0 < max_other_cpu_share <= 1:
        raise ValueError(f"max_other_cpu_share = {max_other_cpu_share}: must be in (0, 1]")
    if not 0 < max_steal_share <= 1:
        raise ValueError(f"max_steal_share = {max_steal_share}: must be in (0, 1]")
    if gate_sd is not None and not (math.isfinite(gate_sd) and gate_sd >= 0):
        raise ValueError(f"gate_sd = {gate_sd!r}: must be a finite sd >= 0 (log scale)")
    if gate_sd is not None and (gate_pairs is None or gate_pairs < 2):
        raise ValueError(f"gate_pairs = {gate_pairs!r}: a gate's noise scale needs the pairs it came from (>= 2)")
    bounds = {
        "other_cpu_share": max_other_cpu_share,
        "steal_share": max_steal_share,
        "gpu_other_processes": MAX_GPU_OTHER_PROCESSES,
        "noise_ratio": MAX_NOISE_RATIO,
    }
    why = []
    load = host_load if host_load and "error" not in host_load else None
    if load:
        if load.get("other_cpu_share", 0.0) > max_other_cpu_share:
            why.append(
                f"other processes took {load['other_cpu_share']:.0%} of the host's CPU time "
                f"(bound {max_other_cpu_share:.0%}; 1-min load {load.get('load1_start', 0):.1f} -> "
                f"{load.get('load1_end', 0):.1f} on {load.get('cpus')} CPUs)"
            )
        if stolen := steal_exceeded(load, max_steal_share)[1]:
            why.append(stolen)
        if load.get("gpu_other_processes", 0) > MAX_GPU_OTHER_PROCESSES:
            why.append(
                f"{load['gpu_other_processes']} other process(es) ran on the GPU (bound {MAX_GPU_OTHER_PROCESSES})"
            )
    cal_sd = calibration.sd_pair if calibration else None
    ratio = low = None
    if calibration is not None and cal_sd and gate_sd is not None and gate_pairs is not None:
        ratio = gate_sd / cal_sd
        low = _scale_low(ratio, gate_pairs)
    if calibration is not None and low is not None and low > MAX_NOISE_RATIO:
        why.append(
            f"the gate's pair noise (scale {gate_sd:.3f} of the log ratios over {gate_pairs} pairs) is "
            f"{ratio:.1f}x the calibrated {cal_sd:.3f} of this case, at least {low:.1f}x at 95% "
            f"({calibration.n_gates} quiet gates; bound {MAX_NOISE_RATIO}x)"
        )
    return Noise(
        busy=bool(why),
        reason=("host busy: " + "; ".join(why)) if why else None,
        host_load=host_load,
        gate_sd=gate_sd,
        calibrated_sd=cal_sd,
        calibrated_gates=calibration.n_gates if calibration else 0,
        noise_ratio=ratio,
        noise_ratio_low=low,
        gate_pairs=gate_pairs if gate_sd is not None else None,
        bounds=bounds,
        metric=None if why else "wall",
        decided_on=None if why else "wall",
    )


def combined_load(loads: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The host load over consecutive windows (a paired gate's rounds so far, ``RoundSummary.host_load``) as one
    ``HostLoad.result()`` over them all reads it: ``wall_s`` and ``other_cpu_s`` summed; ``other_cpu_share``,
    ``steal_share`` and ``own_cpu_share`` weighted by each window's CPU capacity (``wall_s x cpus``, s);
    ``load1_start`` of the first window, ``load1_end`` and ``cpus`` of the last, the most ``gpu_other_processes``
    seen, the other keys (the CPU set, TF's threads) of the first. What a gate's look and its verdict judge
    (``tasks.analysis.verdict.deciding_metric``): the pairs so far, not the newest round alone. None without
    windows; a window without a reading (None, or a dict with ``error``: no psutil) makes the whole unread (that
    window's dict, or None)."""
    windows: list[Mapping[str, Any]] = []
    for x in loads:
        if not x or "error" in x:
            return dict(x) if x else None
        windows.append(x)
    if not windows:
        return None
    wall = [float(x.get("wall_s", 1.0)) for x in windows]
    cap = [w * float(x.get("cpus", 1)) for w, x in zip(wall, windows, strict=True)]
    total = math.fsum(cap) or 1.0
    out: dict[str, Any] = {**windows[0], "wall_s": math.fsum(wall)}
    for key in ("other_cpu_share", "steal_share", "own_cpu_share"):
        if all(key in x for x in windows):
            out[key] = math.fsum(float(x[key]) * c for x, c in zip(windows, cap, strict=True)) / total
    if all("other_cpu_s" in x for x in windows):
        out["other_cpu_s"] = math.fsum(float(x["other_cpu_s"]) for x in windows)
    for key in ("load1_end", "cpus"):
        if key in windows[-1]:
            out[key] = windows[-1][key]
    gpu = [int(x["gpu_other_processes"]) for x in windows if "gpu_other_processes" in x]
    if gpu:
        out["gpu_other_processes"] = max(gpu)
    return out


def _scale_low(scale: float, pairs: int) -> float:
    """One-sided 95% lower bound of a robust scale (or scale ratio) estimated from ``pairs`` pairs."""
    return scale * math.exp(-NOISE_Z * MAD_RELATIVE_SE / math.sqrt(pairs))


def gpu_in_use(env_data: Mapping[str, Any] | None, peak_device_bytes: int | None) -> bool | None:
    """Whether a GPU may carry the case's steps: True when the run allocated GPU memory (``peak_device_bytes``
    of the profiled run, TF's GPU:0 allocator; None on CPU) or the fingerprint (``EnvRecord.data``) shows a
    GPU visible to CUDA (``gpu.count`` > 0); None (unsure) when the fingerprint is given but its GPU count is
    missing or unknown; False otherwise (no fingerprint given: the run's own record decides)."""
    if peak_device_bytes is not None:
        return True
    if env_data is None:
        return False
    count = (env_data.get("gpu") or {}).get("count")
    if isinstance(count, bool) or not isinstance(count, int):
        return None
    return count > 0


def steal_exceeded(host_load: Mapping[str, Any] | None, bound: float = MAX_STEAL_SHARE) -> tuple[float, str | None]:
    """The hypervisor's steal share of the CPU time over a measurement (``HostLoad.result()``'s
    ``steal_share``; 0 when not recorded) and, beyond ``bound`` (``Case.max_steal_share``, the ``steal_share``
    of ``Noise.bounds``), why neither metric is fit to decide; None within the bound. Steal lengthens wall time,
    and CPU time is not clear of it either: on the dev VM ``bench/steal.py`` found a third of the stolen time
    inside a busy thread's CPU time (docs/verdicts.md, Steal)."""
    load = host_load if host_load and "error" not in host_load else None
    steal = float((load or {}).get("steal_share", 0.0))
    if steal > bound:
        return steal, f"the hypervisor stole {steal:.0%} of the CPU time (bound {bound:.0%})"
    return steal, None


def choose_metric(
    noise: Noise,
    *,
    cpu_sd: float | None,
    cpu_pairs: int | None,
    calibration: NoiseCalibration | None,
    gpu: bool | None,
) -> Noise:
    """Which metric decides a paired gate (the rule; module docstring, "What decides when").

    Quiet host (``noise.busy`` false): wall time, as always. Busy host: the per-step process CPU time of the
    pairs, when (a) it was recorded (``cpu_sd`` given), (b) the steps are not device-bound (``gpu`` is
    False: on a GPU, or where one may be used, CPU time is not the work), (c) its robust pair scale is not
    itself busy, by the wall scale's rule: its one-sided 95% lower bound over ``cpu_pairs`` pairs at most
    :data:`MAX_NOISE_RATIO` x the calibrated CPU scale (``calibration.cpu_sd_pair``), else at most
    :data:`MAX_CPU_SCALE`, and (d) the hypervisor's steal share is within its bound (``Noise.bounds``: stolen time
    is missing from CPU time too). Otherwise no metric is fit (``metric`` None). Why: per-step CPU time was
    3-9x steadier than wall time under load and its ratio moved +1.0% with load, where the wall-time ratio
    moved +18% (issue 23); what it may still be off by is :data:`CPU_BIAS_BOUND`, which the verdict rule
    on a busy host (``tasks.analysis.verdict.busy_verdict_from_ci``) adds to the tolerance.

    Returns ``noise`` with ``metric``, ``metric_reason`` and the ``cpu_*`` figures set (``decided_on`` is set
    by ``tasks.analysis.verdict.judge_noise``, which applies the CPU verdict).

    Raises:
        ValueError: ``cpu_sd`` negative or not finite, or given without ``cpu_pairs`` >= 2.
    """
    if not noise.busy:
        return noise.model_copy(update={"metric": "wall", "decided_on": "wall"})
    if cpu_sd is not None and not (math.isfinite(cpu_sd) and cpu_sd >= 0):
        raise ValueError(f"cpu_sd = {cpu_sd!r}: must be a finite scale >= 0 (log scale)")
    if cpu_sd is not None and (cpu_pairs is None or cpu_pairs < 2):
        raise ValueError(f"cpu_pairs = {cpu_pairs!r}: a CPU-time scale needs the pairs it came from (>= 2)")
    cal = calibration.cpu_sd_pair if calibration else None
    bound = MAX_NOISE_RATIO * cal if cal else MAX_CPU_SCALE
    why = []
    low = None
    if cpu_sd is None or cpu_pairs is None:
        why.append("no per-step CPU time was recorded")
    else:
        low = _scale_low(cpu_sd, cpu_pairs)
        if low > bound:
            of = (
                f"{MAX_NOISE_RATIO}x the calibrated {cal:.3f} of {calibration.cpu_gates} gates"
                if cal and calibration
                else "the cap without calibration"
            )
            why.append(
                f"CPU time is noisy too (pair scale {cpu_sd:.3f}, at least {low:.3f} at 95% over {cpu_pairs} "
                f"pairs; bound {bound:.3f}: {of})"
            )
    if gpu is None:
        why.append("the environment may use a GPU (its GPU count is unknown): CPU time may not be the work")
    elif gpu:
        why.append("a GPU case: CPU time is not the work there (device time is)")
    steal, stolen = steal_exceeded(noise.host_load, noise.bounds.get("steal_share", MAX_STEAL_SHARE))
    if stolen:
        why.append(stolen)
    reason = (
        "no metric fit to decide: " + "; ".join(why)
        if why
        else f"CPU time is fit: pair scale {cpu_sd:.3f} (at least {low:.3f} at 95%) within {bound:.3f}, no GPU, "
        f"steal {steal:.0%}"
    )
    return noise.model_copy(
        update={
            "metric": None if why else "cpu",
            "decided_on": None,
            "metric_reason": reason,
            "cpu_sd": cpu_sd,
            "cpu_sd_low": low,
            "cpu_bound": bound,
            "cpu_calibrated_sd": cal,
            "cpu_calibrated_gates": calibration.cpu_gates if calibration else 0,
        }
    )


# ------------------------------------------------------------------------------- the nightly history's metric


class HistoryMetric(BaseModel):
    """Which metric the nightly history (the history verdict, the change points, the creep guard) decides on
    (:func:`history_metric`), with the figures the rule compared.

    Attributes:
        metric: ``wall`` (per-step wall time, what a user waits for) or ``cpu`` (the runner process's CPU time
            per step, all threads, user + system).
        wall_sd, cpu_sd: between-process sd of the log median per run (dimensionless, log scale) of each metric,
            pooled within model versions over the accepted runs that recorded both
            (:func:`estimate_between_sd`); None with fewer than :data:`MIN_CALIBRATION_DF` degrees of freedom.
        wall_df, cpu_df: their within-version degrees of freedom (sum over versions of runs - 1).
        runs: accepted runs that recorded both metrics (what the two estimates come from).
        margin: :data:`HISTORY_CPU_MARGIN`: CPU time decides only when ``cpu_sd < margin x wall_sd``.
        reason: the choice in words, naming each condition that kept wall time.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: Literal["wall", "cpu"]
    wall_sd: float | None
    wall_df: int
    cpu_sd: float | None
    cpu_df: int
    runs: int
    margin: float = HISTORY_CPU_MARGIN
    reason: str


def history_metric(
    runs: Iterable[tuple[str, float, float | None]],
    *,
    gpu: bool | None,
    candidate_cpu: bool,
    baselines_cpu: bool,
) -> HistoryMetric:
    """The metric that drifts least between processes of one version (module docstring, "What the nightly
    history decides on"): the rule for the history verdict (``tasks.analysis.verdict.decide``) and the trend
    check (``tasks.services.trend.watch_case``).

    Algorithm: of the accepted runs that recorded both metrics, the pooled within-version sd of the log median
    wall time and of the log median CPU time (:func:`estimate_between_sd`, each with its df). CPU time is
    chosen only when all of these hold, else wall time:

    1. the steps are not on a GPU (``gpu`` False; :func:`gpu_in_use`: on a GPU CPU time is not the work, and
       None, unsure, counts as a GPU);
    2. the candidate recorded CPU time for its measured steps (``candidate_cpu``) and so did every baseline
       run the verdict compares it with (``baselines_cpu``; old runs and ingested ones have none);
    3. both estimates have ``df >= MIN_CALIBRATION_DF``;
    4. ``cpu_sd < HISTORY_CPU_MARGIN x wall_sd``.

    Args:
        runs: ``(model version, median wall step time ms, median CPU time per step ms or None)`` of the newest
            accepted runs of the case and environment (``tasks.records.CompareInputs.calibration_runs`` with
            ``calibration_cpu_ms``; medians of each run's measured steps, ``runs.median_step_ms`` and
            ``step_samples.cpu_ms``); a run with None takes no part in either estimate.
        gpu: :func:`gpu_in_use` of the candidate (True, False, None = unsure).
        candidate_cpu, baselines_cpu: CPU time is there for the candidate's measured steps, and for those of
            every baseline run used.

    Raises:
        ValueError: a median that is NaN, infinite or <= 0 (as :func:`estimate_between_sd`).
    """
    both = [(str(v), w, c) for v, w, c in runs if c is not None]
    wall_sd, wall_df = estimate_between_sd((v, w) for v, w, _ in both)
    cpu_sd, cpu_df = estimate_between_sd((v, c) for v, _, c in both)
    why = []
    if gpu is None:
        why.append("the environment may use a GPU (its GPU count is unknown): CPU time may not be the work")
    elif gpu:
        why.append("a GPU case: CPU time is not the work there (device time is)")
    if not candidate_cpu:
        why.append("the candidate recorded no CPU time per step")
    if not baselines_cpu:
        why.append("a baseline run recorded no CPU time per step")
    if wall_sd is None or cpu_sd is None:
        why.append(
            f"too little history to compare the drift of the two metrics ({len(both)} accepted runs with both, "
            f"{min(wall_df, cpu_df)} within-version df; need {MIN_CALIBRATION_DF})"
        )
    elif not cpu_sd < HISTORY_CPU_MARGIN * wall_sd:
        why.append(
            f"CPU time does not drift clearly less than wall time between processes (sd {cpu_sd:.3f} against "
            f"{wall_sd:.3f}; it must be below {HISTORY_CPU_MARGIN} x)"
        )
    if why:
        reason = "wall time: " + "; ".join(why)
    else:
        assert wall_sd is not None and cpu_sd is not None  # no reason was given against them
        reason = (
            f"CPU time: it drifts less between processes of one version than wall time (sd {cpu_sd:.3f} against "
            f"{wall_sd:.3f} of the log median, {cpu_df} df over {len(both)} accepted runs; below "
            f"{HISTORY_CPU_MARGIN} x), no GPU, recorded by the candidate and every baseline"
        )
    return HistoryMetric(
        metric="wall" if why else "cpu",
        wall_sd=wall_sd,
        wall_df=wall_df,
        cpu_sd=cpu_sd,
        cpu_df=cpu_df,
        runs=len(both),
        reason=reason,
    )
