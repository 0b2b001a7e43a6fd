"""The verdict of baseline-compare, decided from plain values (no store, no files, no GX).

``decide`` takes the candidate's measured step times (ms, our timer), the stored facts as the store
gathered them (``tasks.records.CompareInputs``: which baselines are usable is decided here), for a
paired gate the ABBA blocks of the baseline version (A) and the candidate (B) with the gate's record,
and the measurement's noise as the profiled run judged it (:func:`judge_noise`, ``ProfiledRun.noise``),
and returns the **final** verdict with its estimate, interval and evidence. Every rule that can change
a verdict is here (the GX suites of ``tasks.stages.expectations`` only validate it), so a benchmark that
calls ``decide`` runs the verdict as the product does:

* same-environment lookback history: ``stats.compare_to_history`` with the calibrated drift prior, method
  ``history-lookback``, on the metric that drifts least between processes (``calibration.history_metric``,
  ``evidence["history_metric"]``): wall time with ``calibration.prior_for_case``, or the per-step process CPU
  time (the candidate's ``measured_cpu``, the baselines' ``CompareInputs.cpu_samples``) with the prior from the
  accepted runs' CPU medians; the tolerance is then a CPU-time tolerance ("on CPU time: ... median CPU-time
  ratio ..."). On a busy host (an unpaired run) a CPU-time history verdict stands by the busy-host rule
  (:func:`busy_verdict_from_ci`: every line moved by ``calibration.CPU_BIAS_BOUND``), as a paired gate's;
* no baseline in this environment but one in another (an **environment change**: a TensorFlow, CUDA, cuDNN or
  driver upgrade): the change is judged (:func:`judge_change`, method ``cross-environment``): the random-effects
  interval of ``stats.compare_to_history`` across the change, this run against the lookback of accepted runs of
  the environment before it, with the drift prior of that environment's accepted runs (two processes of one
  version differ by several per cent: an interval from the steps of two processes would be far too narrow), on
  wall time; a paired gate whose sides are the two environments (``Case.baseline_runner``/``baseline_env``, a
  recorded way to run the old one) judges it instead; a paired gate of two versions in the new environment is
  combined with the interval across the change. Judged, the verdict is the usual ``pass``/``improvement``/
  ``regression``; undecided (the interval too wide, or the host busy) it is ``env-changed``, which never becomes
  the baseline by itself. Every such reason begins ``the environment changed: <field old -> new; ...>``
  (``evidence["env_changes"]``, ``evidence["env_change"]``: what judged it);
* neither: ``no-baseline``;
* paired gate: :func:`paired_comparison` (a gate of several processes: the interval across them,
  ``tasks.analysis.processes``, :func:`process_comparison`; one process: the sequential gate's final repeated
  confidence interval, ``tasks.analysis.sequential``; a gate under 32 pairs: ``stats.compare_paired``), method
  ``paired-abba``; the history verdict is kept as ``evidence["history"]``;
* every paired verdict is checked by a sign-flip **randomisation test** of its pair log ratios
  (:func:`randomisation_check`): a verdict the test does not confirm at the gate's level is ``inconclusive``;
* then the **noise rule**: on a quiet host wall time decides (``evidence["metric"] == "wall"``). On a busy
  host (``noise["busy"]``) whose per-step CPU time the profiled run found fit (``noise["metric"] == "cpu"``,
  ``calibration.choose_metric``) the verdict is the CPU-time gate's by the busy-host rule
  (:func:`busy_verdict_from_ci`: the quiet rule with ``calibration.CPU_BIAS_BOUND`` taken off each line: a
  ``regression``/``improvement`` beyond 1 +- the bound, a ``pass`` within the tolerance less the bound;
  ``evidence["metric"] == "cpu"``, "decided on CPU time: host busy (...)"); otherwise a ``pass``,
  ``regression`` or ``improvement`` becomes ``inconclusive`` with the reason "host busy: ...". The
  wall-time statistics' own verdict is kept in ``evidence["verdict_statistics"]``. Which metric that is
  comes from one rule, :func:`deciding_metric`, which the sequential gate's stop rule (:func:`look_decides`)
  also applies at every look, so the metric a gate stopped on is the metric it is judged on.

Thresholds are tests on the interval (``stats.verdict_from_ci``); a fraction of single steps over a
line never makes a regression.

Evidence keys that other tools read (stable; all JSON):

* ``evidence["paired"]`` (paired gates): the ``stats.Comparison`` fields (``verdict``, ``method``,
  ``ratio``, ``ci_low``, ``ci_high``, ``confidence``, ``tolerance``, ``n_candidate`` = ``n_baseline`` =
  pairs analysed, ``needed_samples`` = pairs that would decide when undecided, ``reason``,
  ``details``: ``sd_log_ratio``, ``scale_log_ratio`` (1.4826 x MAD of the pair log ratios: the noise
  the noise rule judges; gates stored before it lack it), ``se_log_ratio``, ``sd_pair`` (per-pair sd
  implied by the batch means), ``batch_pairs``, ``offset_sd``, ``df``, and for sequential gates ``boundary``,
  ``boundary_z``), the layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``,
  ``pairs_wall_s``, ``orders``, ``stopped_by``, ``rounds``), ``baseline_version``,
  ``baseline_digest``, ``a_median_ms``, ``b_median_ms``, ``host_busy`` (bool: the noise rule fired),
  ``sequential`` (``design``, ``looks``: per look pairs / ratio / ci_low / ci_high / verdict,
  ``stopped``: ``decided`` | ``budget`` | ``fixed`` | ``decided on CPU time`` (a busy gate that its CPU-time look
  stopped), ``stopping``: per look the metric whose look was judged (``wall`` | ``cpu``; ``none``: no metric
  was fit, the gate went on; ``tail``), ``method``), ``spent`` (``pairs``,
  ``timed_steps``, ``wall_s``: the cost actually spent) and ``cost`` (the same in words);
* ``evidence["processes"]`` (a gate of several processes): ``processes.Spread`` (``processes`` = K,
  ``pairs``, ``unit_ratios``, ``sd_means``, ``between_sd``, ``within_sd``, ``within_se``, ``icc``,
  ``design_effect``) with ``max_processes``, ``pairs_per_process`` and ``text``; its looks in
  ``evidence["paired"]["sequential"]["looks"]`` carry ``processes``; ``evidence["paired"]["spent"]["processes"]``;
* ``evidence["noise"]``: ``calibration.Noise`` (``busy``, ``reason``, ``host_load``, ``gate_sd``,
  ``calibrated_sd``, ``calibrated_gates``, ``noise_ratio``, ``bounds``), present whenever noise was
  assessed;
* ``evidence["paired_offset"]``: ``calibration.Offset``; ``evidence["history"]``: the history verdict
  of a paired run; ``evidence["verdict_statistics"]``: the verdict before the noise rule;
* ``evidence["history_metric"]``: ``calibration.HistoryMetric`` (the history's metric, the between-process sd
  and df of each metric, the reason), whenever the history compared; ``evidence["candidate_median_cpu_ms"]``,
  ``evidence["baseline_median_cpu_ms"]`` when it compared on CPU time; ``evidence["history"]["metric"]``
  (paired runs): the metric of the history verdict kept as evidence;
* ``evidence["metric"]``: ``wall`` | ``cpu``, the metric that decided; ``evidence["randomisation"]`` (paired):
  ``p``, ``null_log_ratio``, ``resamples``, ``alternative``, ``min_p``, ``level``, ``reachable``,
  ``rejected`` of the deciding metric; ``evidence["cpu"]`` (CPU decided): the CPU-time comparison;
  ``evidence["paired"]["details"]["cpu_scale_log_ratio"]``: the CPU-time pair scale (what calibrates it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tasks.analysis import calibration, processes, sequential, stats
from tasks.analysis.environment import diff_fingerprints
from tasks.records import CompareInputs, Verdict, env_change_reason

#: the verdicts the noise rule turns into inconclusive
DECIDED = (Verdict.PASS, Verdict.REGRESSION, Verdict.IMPROVEMENT)


@dataclass(frozen=True)
class PairedBlocks:
    """A paired gate's measurement: per-step ms of each block of A (baseline) and B (candidate), the
    layout (``blocks``, ``block_steps``, ``timed_steps``, ``wall_s``, ``pairs_wall_s``, ``orders``,
    ``stopped_by``, ``rounds``), the gate record written before the first pair (``design``: the
    ``sequential.Design`` fields or None for a fixed gate, ``look_pairs``, ``offset``,
    ``calibrated_noise``; None: an old result without one) and the host load over the pairs."""

    a: list[list[float]]
    b: list[list[float]]
    layout: dict[str, Any]
    gate: dict[str, Any] | None = None
    host_load: dict[str, Any] | None = None
    #: per block, per step process CPU time (ms) of A and B; None when the result has none
    a_cpu: list[list[float]] | None = None
    b_cpu: list[list[float]] | None = None
    #: per block, the gate's process it was measured in (0-based, in order); None: one process
    process: list[int] | None = None

    def by_process(self) -> list[list[int]]:
        """The block indices of each process, in order (one process: all blocks)."""
        if self.process is None:
            return [list(range(len(self.a)))]
        out: dict[int, list[int]] = {}
        for i, k in enumerate(self.process):
            out.setdefault(k, []).append(i)
        return [out[k] for k in sorted(out)]


@dataclass
class Decision:
    """What the statistics and the noise rule decided, before GX validates it.

    ``limit``: the step time (ms) at the tolerance threshold, ``(1 + tolerance) x`` the reference median
    (the baseline history's, or the paired A samples'); None without a comparison. ``reason``: the
    verdict in one sentence.
    """

    verdict: str
    method: str
    baseline_run_ids: list[int]
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    limit: float | None = None
    reason: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def busy_lines(tolerance: float) -> tuple[float, float]:
    """The busy-host rule's two lines on the CPU-time ratio (module docstring): ``(change, band)`` =
    ``(1 + b, (1 + tolerance) / (1 + b))`` with ``b = calibration.CPU_BIAS_BOUND``, the most load moved a
    CPU-time ratio (``bench/busy.py``). Beyond ``change`` (or below its reciprocal) a change stands that load
    cannot have faked; within ``band`` (and above its reciprocal) no change beyond the tolerance can hide,
    however load biased the ratio. ``band`` <= 1 (a tolerance no larger than the bias bound): nothing passes."""
    b = calibration.CPU_BIAS_BOUND
    return 1 + b, (1 + tolerance) / (1 + b)


def busy_verdict_from_ci(low: float, high: float, tolerance: float) -> Verdict:
    """The verdict rule on a busy host (module docstring), on the CPU-time ratio's interval ``[low, high]``:
    the quiet rule (``stats.verdict_from_ci``) with the load's bias bound taken off every line
    (:func:`busy_lines`: ``change`` = 1 + b, ``band`` = (1 + tolerance) / (1 + b)). ``pass`` when the interval
    lies within ``[1 / band, band]``; else ``regression`` when ``low > change``, ``improvement`` when
    ``high < 1 / change``; else ``pass`` when ``high <= band`` (no slowdown beyond the tolerance, even with
    the bias); else ``inconclusive``. So a CPU-time ratio that load may have moved by up to b neither fakes a
    regression of an unchanged model nor hides a slowdown beyond the tolerance (a x1.10 never passes).

    Raises:
        ValueError: ``low > high`` or a non-positive bound.
    """
    if not 0 < low <= high:
        raise ValueError(f"CI [{low}, {high}]: need 0 < low <= high")
    change, band = busy_lines(tolerance)
    if band > 1 and 1 / band <= low and high <= band:
        return Verdict.PASS
    if low > change:
        return Verdict.REGRESSION
    if high < 1 / change:
        return Verdict.IMPROVEMENT
    if band > 1 and high <= band:
        return Verdict.PASS
    return Verdict.INCONCLUSIVE


def gross_verdict_from_ci(low: float, high: float, tolerance: float) -> Verdict:
    """The verdict a busy host's wall-time interval ``[low, high]`` still supports when no metric is fit to judge
    a small change: ``regression`` when ``low`` lies above ``(1 + tolerance) x (1 + calibration.WALL_BIAS_BOUND)``
    (more than load has been measured to move a wall-time ratio, beyond the tolerance), ``improvement`` when
    ``high`` lies below its reciprocal, else ``inconclusive`` (never ``pass``: load may hide a slowdown). The one
    rule of both the stop rule (:func:`look_decides`, :func:`process_look_decides`) and the verdict.

    Raises:
        ValueError: ``low > high`` or a non-positive bound.
    """
    if not 0 < low <= high:
        raise ValueError(f"CI [{low}, {high}]: need 0 < low <= high")
    line = (1 + tolerance) * (1 + calibration.WALL_BIAS_BOUND)
    if low > line:
        return Verdict.REGRESSION
    if high < 1 / line:
        return Verdict.IMPROVEMENT
    return Verdict.INCONCLUSIVE


def deciding_metric(
    case: Any,
    host_load: Mapping[str, Any] | None,
    d_wall: Sequence[float],
    d_cpu: Sequence[float] | None,
    *,
    calibrated: calibration.NoiseCalibration | None,
    gpu: bool | None,
) -> calibration.Noise:
    """The metric that decides a paired gate over its pairs so far: the one rule that both the sequential gate's
    stop rule (:func:`look_decides`, at every look) and its verdict (:func:`judge_noise`, at the last look) apply,
    so a gate never stops on one metric and is judged on another.

    The noise (``calibration.assess_noise``) of ``host_load`` (the host load over these pairs: the gate's rounds so
    far, ``calibration.combined_load``) and of the pairs' robust wall-time scale (``stats.noise_scale`` of
    ``d_wall``, the per-pair log ratios B over A of the block medians, against ``calibrated``'s); then
    ``calibration.choose_metric`` with the CPU-time scale of ``d_cpu`` (None: no usable per-step CPU time) and
    ``gpu`` (``calibration.gpu_in_use``; None: unsure). ``case`` is a ``tasks.records.Case``
    (``max_other_cpu_share``, ``max_steal_share``).

    Returns the ``calibration.Noise`` with ``metric``: ``wall`` (a quiet host), ``cpu`` (a busy host whose CPU time
    is fit) or None (busy, and no metric is fit: nothing this gate measures can decide).

    Raises:
        ValueError: fewer than 2 ratios, a non-finite one, or ``d_cpu`` of another length than ``d_wall``.
    """
    if d_cpu is not None and len(d_cpu) != len(d_wall):
        raise ValueError(f"d_cpu has {len(d_cpu)} pair log ratios but d_wall has {len(d_wall)}: they must pair up")
    noise = calibration.assess_noise(
        dict(host_load) if host_load else None,
        gate_sd=stats.noise_scale(d_wall),
        gate_pairs=len(d_wall),
        calibration=calibrated,
        max_other_cpu_share=case.max_other_cpu_share,
        max_steal_share=case.max_steal_share,
    )
    return calibration.choose_metric(
        noise,
        cpu_sd=stats.noise_scale(d_cpu) if d_cpu else None,
        cpu_pairs=len(d_cpu) if d_cpu else None,
        calibration=calibrated,
        gpu=gpu,
    )


def environment_metric(
    case: Any,
    host_load: Mapping[str, Any] | None,
    wall: Sequence[processes.Unit],
    cpu: Sequence[processes.Unit | None] | None,
    *,
    gpu: bool | None,
) -> calibration.Noise:
    """The deciding metric of a cross-environment gate over its process pairs so far: the one rule both its looks
    (``tasks.stages.profiled_run._environment_gate``, then :func:`process_look_on`) and its verdict
    (:func:`judge_noise`) apply. :func:`deciding_metric` of each pair's one comparison (``wall``, ``cpu``: the
    pairs' ``processes.unit_from_sides``, whose ``mean`` is log median B over A; ``cpu`` None, or a pair None,
    without usable CPU time) and ``host_load`` (over the pairs' processes), with no calibrated noise: a case's
    calibrated gate noise is the scale of block pairs inside one process, which a pair of two processes in two
    environments, each with its own process offset, is not comparable with (it would read every such gate as
    noisy, hence busy).

    Raises:
        ValueError: as :func:`deciding_metric` (fewer than 2 pairs).
    """
    d_cpu = None if cpu is None or any(u is None for u in cpu) else [u.mean for u in cpu if u is not None]
    return deciding_metric(case, host_load, [u.mean for u in wall], d_cpu, calibrated=None, gpu=gpu)


def look_decides(
    d_wall: Sequence[float],
    d_cpu: Sequence[float] | None,
    looks: Sequence[int],
    design: sequential.Design,
    *,
    case: Any,
    host_load: Mapping[str, Any] | None,
    calibrated: calibration.NoiseCalibration | None,
    gpu: bool | None,
) -> tuple[bool, Literal["wall", "cpu", "none"]]:
    """Whether a sequential paired gate may stop at its newest look (``looks[-1]`` pairs), and the metric that
    look was judged on: the one :func:`deciding_metric` names for the first ``looks[-1]`` pairs and ``host_load``
    (the host load over them: ``calibration.combined_load`` of the rounds so far), the rule the verdict applies.

    ``wall``: the wall-time look (``sequential.look`` of ``d_wall``) is not ``inconclusive``; ``cpu``: the
    CPU-time look by the busy-host rule (:func:`busy_verdict_from_ci`) is not ``inconclusive``; ``none`` (no
    metric fit: the verdict would be ``inconclusive``, "host busy") never stops the gate: it measures on, to its
    budget, in case the load passes. A repeated confidence interval holds at every look at once, so stopping on
    either metric's look keeps each interval valid.

    Raises:
        ValueError: as ``sequential.look`` (look points that do not fit the ratios) and :func:`deciding_metric`.
    """
    n = int(looks[-1]) if looks else 0
    cpu = list(d_cpu[:n]) if d_cpu is not None else None
    metric = deciding_metric(case, host_load, list(d_wall[:n]), cpu, calibrated=calibrated, gpu=gpu).metric
    if metric == "cpu":
        assert d_cpu is not None  # choose_metric needs the CPU scale
        f = sequential.look(d_cpu, looks, design)
        return busy_verdict_from_ci(f.ci_low, f.ci_high, design.tolerance) != Verdict.INCONCLUSIVE, "cpu"
    if metric == "wall":
        return sequential.look(d_wall, looks, design).verdict != Verdict.INCONCLUSIVE, "wall"
    f = sequential.look(d_wall, looks, design)  # no metric fit: only a change load cannot fake stops it
    return gross_verdict_from_ci(f.ci_low, f.ci_high, design.tolerance) != Verdict.INCONCLUSIVE, "none"


def process_look_decides(
    wall: Sequence[processes.Unit],
    cpu: Sequence[processes.Unit | None],
    looks: Sequence[int],
    design: processes.ProcessDesign,
    *,
    d_wall: Sequence[float],
    d_cpu: Sequence[float] | None,
    case: Any,
    host_load: Mapping[str, Any] | None,
    calibrated: calibration.NoiseCalibration | None,
    gpu: bool | None,
) -> tuple[bool, Literal["wall", "cpu", "none"]]:
    """Whether a process-level paired gate may stop after its newest process (``looks[-1]`` units), and the metric
    that look was judged on: the one :func:`deciding_metric` names for every pair so far (``d_wall``, ``d_cpu``: the
    pair log ratios of the first ``looks[-1]`` processes, one after another; ``d_cpu`` None without usable CPU time)
    and ``host_load`` (the host load over those processes: ``calibration.combined_load``), the rule the verdict
    applies, as :func:`look_decides`; then ``processes.look`` across the units (``processes.Unit``) of each
    process's wall-time or CPU-time pair log ratios. ``none`` (no metric fit) never stops the gate.

    Raises:
        ValueError: as ``processes.look`` and :func:`deciding_metric`.
    """
    noise = deciding_metric(
        case, host_load, list(d_wall), list(d_cpu) if d_cpu is not None else None, calibrated=calibrated, gpu=gpu
    )
    return process_look_on(noise, wall, cpu, looks, design)


def process_look_on(
    noise: calibration.Noise,
    wall: Sequence[processes.Unit],
    cpu: Sequence[processes.Unit | None],
    looks: Sequence[int],
    design: processes.ProcessDesign,
) -> tuple[bool, Literal["wall", "cpu", "none"]]:
    """Whether a process-level gate may stop at its newest look, judged on ``noise.metric`` (:func:`deciding_metric`
    or, across environments, :func:`environment_metric`): ``processes.look`` across the units of wall time
    (``wall``) or CPU time (``cpu``, the busy-host rule); ``none`` (no metric fit) stops only on a change load
    cannot fake. Returns (decided, the metric judged).

    Raises:
        ValueError: as ``processes.look``.
    """
    if noise.metric == "cpu":
        usable = [u for u in cpu[: looks[-1]] if u is not None]
        f = processes.look(usable, looks, design)
        return busy_verdict_from_ci(f.ci_low, f.ci_high, design.tolerance) != Verdict.INCONCLUSIVE, "cpu"
    if noise.metric == "wall":
        return processes.look(wall, looks, design).verdict != Verdict.INCONCLUSIVE, "wall"
    f = processes.look(wall, looks, design)  # no metric fit: only a change load cannot fake stops it
    return gross_verdict_from_ci(f.ci_low, f.ci_high, design.tolerance) != Verdict.INCONCLUSIVE, "none"


def _busy_rule_text(verdict: Verdict, tolerance: float) -> str:
    """The busy-host rule (:func:`busy_verdict_from_ci`) applied, in words: its lines and what the CPU-time
    interval did against them."""
    change, band = busy_lines(tolerance)
    tail = {
        Verdict.REGRESSION: f"the CI lies above x{change:.3f}: slower by more than load can fake",
        Verdict.IMPROVEMENT: f"the CI lies below x{1 / change:.3f}: faster by more than load can fake",
        Verdict.PASS: f"the CI lies below x{band:.3f}: no slowdown beyond the tolerance can hide in it",
    }.get(
        verdict,
        f"the CI neither clears x{change:.3f} (a change load cannot fake) nor lies below x{band:.3f} (within "
        "the tolerance whatever load did)",
    )
    return (
        f"tolerance {tolerance:.0%} on CPU time, less the CPU bias bound {calibration.CPU_BIAS_BOUND:.1%} that "
        f"load may add or take: change beyond x{change:.3f}, pass below x{band:.3f}; {tail}"
    )


def randomisation_check(
    d: Sequence[float], verdict: Verdict, tolerance: float, confidence: float, *, busy: bool = False
) -> tuple[Verdict, dict[str, Any]]:
    """Check a paired verdict's interval with the sign-flip randomisation test of its pair log ratios ``d``
    (``stats.sign_flip_test``; Fisher 1935; Good, *Permutation Tests*): the test of the line the interval
    cleared must reject at the gate's level too, one-sided ``(1 - confidence) / 2``. The line: no change
    (log ratio 0) for a ``regression`` (greater) or ``improvement`` (less) on a quiet host, the tolerance
    ``log(1 + tolerance)`` for a ``pass`` (less); on a busy host (``busy``: the CPU-time rule, :func:`busy_lines`)
    ``+-log(1 + CPU_BIAS_BOUND)`` for a change and ``log((1 + tolerance) / (1 + CPU_BIAS_BOUND))`` for a
    ``pass``. An ``inconclusive`` verdict records the two-sided test
    of no change. A verdict whose test does not reject becomes ``inconclusive``; where ``len(d)`` pairs
    cannot reach the level at all (``min_p`` above it: fewer than 8 pairs at 99%, as for any exact paired
    randomisation test), the test is recorded (``reachable`` false) and the interval alone decides.

    Returns (the verdict after the check, ``{"p", "null_log_ratio", "resamples", "alternative", "min_p",
    "level", "reachable", "rejected"}``).
    """
    alpha = 1 - confidence
    change, band = busy_lines(tolerance) if busy else (1.0, 1 + tolerance)
    lines: dict[Verdict, tuple[float, Literal["greater", "less", "two-sided"]]] = {
        Verdict.REGRESSION: (math.log(change), "greater"),
        Verdict.IMPROVEMENT: (-math.log(change), "less"),
        Verdict.PASS: (math.log(band), "less"),
    }
    null, alternative = lines.get(verdict, (0.0, "two-sided"))
    level = alpha if alternative == "two-sided" else alpha / 2
    test = stats.sign_flip_test(d, null, alternative)
    reachable = test["min_p"] <= level
    rejected = test["p"] <= level
    out = {**test, "level": level, "reachable": reachable, "rejected": rejected}
    if verdict in DECIDED and reachable and not rejected:
        return Verdict.INCONCLUSIVE, out
    return verdict, out


def _randomisation_note(before: Verdict, after: Verdict, test: Mapping[str, Any]) -> str:
    if before == after:
        return ""
    return (
        f" The randomisation test of the {before} does not confirm it: sign flips of the pair "
        f"log ratios give p = {test['p']:.3g} against log ratio {test['null_log_ratio']:.4f} ({test['alternative']}, "
        f"{test['resamples']} sign patterns), above the gate's level {test['level']:.3g}: inconclusive."
    )


def _cpu_log_ratios(paired: PairedBlocks, n: int) -> list[float] | None:
    """Per-pair log ratios of the blocks' median CPU time (B over A) of the first ``n`` pairs; None when CPU
    time is absent for any of them or not > 0."""
    if paired.a_cpu is None or paired.b_cpu is None or len(paired.a_cpu) < n or len(paired.b_cpu) < n:
        return None
    out = []
    for a, b in zip(paired.a_cpu[:n], paired.b_cpu[:n], strict=True):
        if not a or not b or not all(x > 0 for x in a) or not all(x > 0 for x in b):
            return None
        out.append(math.log(statistics.median(b) / statistics.median(a)))
    return out


def _analysed_pairs(paired: PairedBlocks) -> int:
    gate = paired.gate or {}
    if is_process_gate(paired):  # every process measured is analysed: the gate looks after each
        return len(paired.a)
    return int(gate["look_pairs"][-1]) if gate.get("design") else len(paired.a)


def randomised_values(paired: PairedBlocks, metric: Literal["wall", "cpu"], n: int) -> list[float]:
    """What the randomisation test of a paired verdict flips (:func:`randomisation_check`): the pair log ratios
    of the first ``n`` pairs, or in a gate of several processes each process's mean log ratio (its unit: the
    pairs of one process are not exchangeable units of the design).

    Raises:
        ValueError: ``cpu`` where the blocks hold no usable CPU time.
    """
    if is_process_gate(paired):
        units = process_units(paired, metric)
        if units is None:
            raise ValueError("the paired result holds no usable per-step CPU time (a_cpu_ms/b_cpu_ms absent or <= 0)")
        return [u.mean for u in units]
    d = _wall_log_ratios(paired, n) if metric == "wall" else _cpu_log_ratios(paired, n)
    if d is None:
        raise ValueError("the paired result holds no usable per-step CPU time (a_cpu_ms/b_cpu_ms absent or <= 0)")
    return d


def cpu_comparison(
    paired: PairedBlocks, case: Any, offset: calibration.Offset
) -> tuple[stats.Comparison, dict[str, Any]]:
    """The paired gate on per-step process CPU time, by the busy-host rule (:func:`busy_verdict_from_ci`,
    then :func:`randomisation_check` with ``busy``): the repeated confidence interval of the CPU-time log
    ratios at the gate's last look (``sequential.look`` over its ``look_pairs``: valid whatever stopped the
    gate, since a repeated confidence interval holds at every look at once), or the fixed batch-means
    interval (``stats.compare_paired``) of a gate under 32 pairs, with ``offset`` added. Ratio: candidate
    over baseline CPU time per step; the tolerance is stated on CPU time, plus :data:`calibration.CPU_BIAS_BOUND`.

    Returns (the comparison, its randomisation test).

    Raises:
        ValueError: the blocks hold no usable CPU time (absent or not > 0).
    """
    n = _analysed_pairs(paired)
    d = _cpu_log_ratios(paired, n)
    if d is None:
        raise ValueError("the paired result holds no usable per-step CPU time (a_cpu_ms/b_cpu_ms absent or <= 0)")
    pairs_d = d
    gate = paired.gate or {}
    if is_process_gate(paired):
        pz = processes.ProcessDesign(**gate["design"])
        units = process_units(paired, "cpu")
        assert units is not None  # _cpu_log_ratios checked every block
        pf = processes.look(units, gate["look_processes"], pz)
        conf, tol, ratio, low, high = pz.confidence, pz.tolerance, pf.ratio, pf.ci_low, pf.ci_high
        details = {
            **_spread_details(pf),
            "se_log_ratio": pf.se_log_ratio,
            "boundary": pf.boundary,
            "df": float(pf.df),
        }
        what = (
            f"across processes, look at {pf.processes} processes, boundary {pf.boundary:.2f}; {spread_text(pf.spread)}"
        )
        if gate.get("environments"):
            what = f"cross-environment, process pairs as units; {gate['environments']}; " + what
        d = [u.mean for u in units]  # the randomisation test flips the units
    elif gate.get("design"):
        dz = sequential.Design(**gate["design"])
        f = sequential.look(d, gate["look_pairs"], dz)
        conf, tol, ratio, low, high = dz.confidence, dz.tolerance, f.ratio, f.ci_low, f.ci_high
        details = {"se_log_ratio": f.se_log_ratio, "sd_pair": f.sd_pair, "boundary": f.boundary, "df": float(f.df)}
        what = f"sequential look at {f.pairs} pairs, boundary {f.boundary:.2f}"
    else:
        assert paired.a_cpu is not None and paired.b_cpu is not None  # _cpu_log_ratios checked them
        r = stats.compare_paired(
            paired.a_cpu, paired.b_cpu, tolerance=case.tolerance, confidence=case.confidence, offset_sd=offset.sd
        )
        assert r.ci_low is not None and r.ci_high is not None
        conf, tol, ratio, low, high = case.confidence, case.tolerance, r.ratio, r.ci_low, r.ci_high
        details = {"se_log_ratio": r.details["se_log_ratio"], "df": r.details["df"]}
        what = f"fixed look at {n} pairs"
    verdict0 = busy_verdict_from_ci(low, high, tol)
    verdict, test = randomisation_check(d, verdict0, tol, conf, busy=True)
    reason = (
        f"CPU time, paired-abba ({what}): per-step process CPU-time ratio {ratio:.3f} (candidate/baseline), "
        f"{conf:.0%} CI [{low:.3f}, {high:.3f}], {_busy_rule_text(verdict0, tol)}."
        + _randomisation_note(verdict0, verdict, test)
    )
    res = stats.Comparison(
        verdict=verdict,
        method="paired-abba",
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        confidence=conf,
        tolerance=tol,
        n_candidate=n,
        n_baseline=n,
        needed_samples=None,
        reason=reason,
        details={
            **details,
            "scale_log_ratio": stats.noise_scale(pairs_d),
            "offset_sd": 0.0 if is_process_gate(paired) else offset.sd,
            "bias_bound": calibration.CPU_BIAS_BOUND,
        },
    )
    return res, test


def is_process_gate(paired: PairedBlocks) -> bool:
    """A paired gate whose unit is the process (``tasks.analysis.processes``: its design's ``kind``)."""
    return ((paired.gate or {}).get("design") or {}).get("kind") == "processes"


def process_units(paired: PairedBlocks, metric: Literal["wall", "cpu"]) -> list[processes.Unit] | None:
    """Each process's unit (``processes.unit_from_pairs``) of its pairs' log ratios of median wall time or CPU
    time (B over A), in the order the processes ran; None for ``cpu`` when a block lacks usable CPU time. A
    cross-environment gate (gate ``unit``: ``process-pair``): each pair's ``processes.unit_from_sides`` of its
    two processes' steps."""
    out = []
    sides = (paired.gate or {}).get("unit") == "process-pair"  # a cross-environment gate: one process per side
    for k, idx in enumerate(paired.by_process()):
        sub = _subset(paired, idx)
        if sides:
            a, b = (sub.a, sub.b) if metric == "wall" else (sub.a_cpu, sub.b_cpu)
            if a is None or b is None:
                return None
            out.append(processes.unit_from_sides([t for x in a for t in x], [t for x in b for t in x], f"pair {k}"))
            continue
        d = _wall_log_ratios(sub, len(idx)) if metric == "wall" else _cpu_log_ratios(sub, len(idx))
        if d is None:
            return None
        out.append(processes.unit_from_pairs(d, f"process {k}"))
    return out


def _spread_details(f: processes.ProcessLook) -> dict[str, float]:
    """The spread's figures as a ``stats.Comparison``'s ``details`` (numbers only; ``design_effect`` absent
    where the within se is 0)."""
    s = f.spread
    out = {
        "processes": float(s.processes),
        "between_sd": s.between_sd,
        "within_sd": s.within_sd,
        "within_se": s.within_se,
        "icc": s.icc,
        "sd_means": s.sd_means,
    }
    if s.design_effect is not None:
        out["design_effect"] = s.design_effect
    return out


def spread_text(s: processes.Spread) -> str:
    """The two levels of a gate across processes in words: K, the between- and within-process spread, the
    design effect."""
    deff = "n/a" if s.design_effect is None else f"{s.design_effect:.2f}"
    return (
        f"K = {s.processes} processes; between-process sd {s.between_sd:.4f}, within-process sd {s.within_sd:.4f} "
        f"per pair (log scale), design effect {deff}"
    )


def process_comparison(paired: PairedBlocks) -> tuple[stats.Comparison, processes.ProcessGate]:
    """A gate of several processes on wall time: ``processes.analyse`` of each process's unit over the gate's
    ``look_processes`` (``tasks.analysis.processes``: the interval across processes, looked at after each).
    ``details``: the spread (``processes``, ``between_sd``, ``within_sd``, ``within_se``, ``design_effect``,
    ``icc``, ``unit_ratios``, ``sd_means``), ``se_log_ratio`` (of the estimate, two-level), ``sd_pair``
    (``se_log_ratio x sqrt(pairs)``: what a one-process gate of this precision would have per pair),
    ``scale_log_ratio`` (the robust scale of all pair log ratios: what the noise rule judges), ``df``,
    ``boundary``, ``boundary_z``.

    Raises:
        ValueError: a block with a NaN/non-positive step time, or look points that do not fit the processes.
    """
    gate = paired.gate or {}
    dz = processes.ProcessDesign(**gate["design"])
    units = process_units(paired, "wall")
    assert units is not None  # wall time is always there
    # strict unless another look than the wall-time one's kept the gate going (as the one-process gate's rule): a
    # busy host's CPU time, a busy host where no metric was fit ("none"), a tail gate, or a per-process figure the
    # case gates (cold step, memory) still undecided at a look where step time had decided (``waited_for``)
    stopping = set(gate.get("stopping") or ())
    strict = stopping <= {"wall"} and not gate.get("waited_for")
    g = processes.analyse(units, gate["look_processes"], dz, strict=strict)
    f = g.final
    what = (
        f"paired-abba across processes: {len(g.looks)} look(s), stopped at {f.processes} of at most "
        f"{dz.max_processes} processes ({g.stopped}; {spread_text(f.spread)}; boundary {f.boundary:.2f} on {f.df} df)"
    )
    if gate.get("environments"):  # a cross-environment gate: what differs between its sides
        what = f"cross-environment, process pairs as units; {gate['environments']}; " + what
    reason = stats._reason(f.verdict, f.ratio, f.ci_low, f.ci_high, dz.confidence, dz.tolerance, what)
    if f.verdict == Verdict.INCONCLUSIVE:
        reason += (
            f" About {g.needed_processes} processes (now {f.processes}) would give a decisive interval at this "
            "between-process spread."
            if g.needed_processes
            else " More processes would hardly help at this spread."
        )
    d = [x for idx in paired.by_process()[: f.processes] for x in _wall_log_ratios(_subset(paired, idx), len(idx))]
    res = stats.Comparison(
        verdict=f.verdict,
        method="paired-abba",
        ratio=f.ratio,
        ci_low=f.ci_low,
        ci_high=f.ci_high,
        confidence=dz.confidence,
        tolerance=dz.tolerance,
        n_candidate=len(d),
        n_baseline=len(d),
        needed_samples=None if g.needed_processes is None else g.needed_processes * dz.pairs_per_process,
        reason=reason,
        details={
            **_spread_details(f),
            "sd_log_ratio": statistics.stdev(d),
            "scale_log_ratio": stats.noise_scale(d),
            "se_log_ratio": f.se_log_ratio,
            "sd_pair": f.se_log_ratio * math.sqrt(len(d)),
            "offset_sd": 0.0,
            "df": float(f.df),
            "boundary": f.boundary,
            "boundary_z": f.boundary_z,
        },
    )
    return res, g


def _subset(paired: PairedBlocks, idx: Sequence[int]) -> PairedBlocks:
    return PairedBlocks(
        a=[paired.a[i] for i in idx],
        b=[paired.b[i] for i in idx],
        layout={},
        a_cpu=[paired.a_cpu[i] for i in idx] if paired.a_cpu is not None else None,
        b_cpu=[paired.b_cpu[i] for i in idx] if paired.b_cpu is not None else None,
    )


def usable_baselines(samples: Mapping[int, list[float]], run_ids: list[int]) -> tuple[list[int], list[dict[str, Any]]]:
    """Split ``run_ids`` into those whose measured samples can be compared and the skipped ones.

    A run is skipped (``{"run_id", "reason"}``) with fewer than ``stats.MIN_STEPS`` measured
    steps or a NaN, infinite or non-positive step time (ms); the reason names the count or value.
    """
    good, skipped = [], []
    for rid in run_ids:
        xs = samples.get(rid, [])
        bad = [(i, t) for i, t in enumerate(xs) if t is None or not math.isfinite(t) or t <= 0]
        if len(xs) < stats.MIN_STEPS:
            skipped.append({"run_id": rid, "reason": f"{len(xs)} measured step times, need at least {stats.MIN_STEPS}"})
        elif bad:
            skipped.append(
                {"run_id": rid, "reason": f"step {bad[0][0]} = {bad[0][1]!r} ms: step times must be finite and > 0"}
            )
        else:
            good.append(rid)
    return good, skipped


def paired_comparison(
    paired: PairedBlocks, case: Any, offset: calibration.Offset
) -> tuple[stats.Comparison, sequential.GateAnalysis | processes.ProcessGate | None]:
    """The paired gate's comparison: a gate of several processes' (:func:`process_comparison`); the final
    repeated confidence interval of a one-process sequential gate
    (``paired.gate["design"]`` set: ``sequential.analyse`` over its ``look_pairs``), else the fixed
    batch-means t interval of ``stats.compare_paired`` with ``offset``. ``details["sd_pair"]`` is the
    per-pair sd of the log ratios implied by the batch means (what the interval uses);
    ``details["scale_log_ratio"]`` their robust scale (``stats.noise_scale``: what
    ``calibration.assess_noise`` judges).

    Raises:
        ValueError: unequal block counts, an empty block, a NaN/non-positive step time (named
            ``a_blocks[i]``/``b_blocks[i]``), or look points that do not fit the blocks.
    """
    gate = paired.gate or {}
    design = gate.get("design")
    if is_process_gate(paired):
        return process_comparison(paired)
    if not design:
        res = stats.compare_paired(
            paired.a, paired.b, tolerance=case.tolerance, confidence=case.confidence, offset_sd=offset.sd
        )
        n = res.n_candidate
        return res.model_copy(
            update={"details": {**res.details, "sd_pair": res.details["se_log_ratio"] * math.sqrt(n)}}
        ), None
    a = stats._block_medians(paired.a, "a_blocks")
    b = stats._block_medians(paired.b, "b_blocks")
    if a.size != b.size:
        raise ValueError(f"a_blocks has {a.size} blocks but b_blocks has {b.size}: blocks must pair up")
    d = [math.log(y / x) for x, y in zip(a, b, strict=True)]
    dz = sequential.Design(**design)
    # strict unless another look than the wall-time one's kept the gate going: a busy host's CPU time, a busy host
    # where no metric was fit ("none"), or a tail gate, which measures the whole budget (Case.gate_percentile)
    g = sequential.analyse(d, gate["look_pairs"], dz, strict=set(gate.get("stopping", ())) <= {"wall"})
    f = g.final
    what = (
        f"paired-abba, sequential: {len(g.looks)} look(s), stopped at {f.pairs} of at most {dz.max_pairs} pairs "
        f"({g.stopped}; {f.df + 1} batches of {f.batch}, boundary {f.boundary:.2f})"
    )
    reason = stats._reason(f.verdict, f.ratio, f.ci_low, f.ci_high, dz.confidence, dz.tolerance, what)
    if f.verdict == Verdict.INCONCLUSIVE:
        reason += (
            f" About {g.needed_pairs} pairs (now {f.pairs}) would give a decisive interval at this noise."
            if g.needed_pairs
            else f" More pairs cannot help: the process-level offset (sd {dz.offset_sd:.3f}) "
            "alone is wider than the tolerance allows."
        )
    sd_all = statistics.stdev(d[: f.pairs])
    res = stats.Comparison(
        verdict=f.verdict,
        method="paired-abba",
        ratio=f.ratio,
        ci_low=f.ci_low,
        ci_high=f.ci_high,
        confidence=dz.confidence,
        tolerance=dz.tolerance,
        n_candidate=f.pairs,
        n_baseline=f.pairs,
        needed_samples=g.needed_pairs,
        reason=reason,
        details={
            "sd_log_ratio": sd_all,
            "scale_log_ratio": stats.noise_scale(d[: f.pairs]),
            "se_log_ratio": f.se_log_ratio,
            "sd_pair": f.sd_pair,
            "batch_pairs": float(f.batch),
            "offset_sd": dz.offset_sd,
            "df": float(f.df),
            "boundary": f.boundary,
            "boundary_z": f.boundary_z,
        },
    )
    return res, g


def judge_noise(
    case: Any,
    host_load: dict[str, Any] | None,
    paired: PairedBlocks | None,
    *,
    offset: calibration.Offset,
    calibrated: calibration.NoiseCalibration,
    gpu: bool | None = None,
) -> calibration.Noise:
    """The measurement's noise, judged once (the profiled run records it as ``ProfiledRun.noise``; ``decide``
    applies it). With a paired gate: :func:`deciding_metric`, the rule its stop rule applied at every look, over
    the pairs :func:`paired_comparison` analysed (with ``offset``) and the host load its last look judged (the
    gate record's ``host_load``: ``calibration.combined_load`` of its rounds; the paired phase's for a fixed gate
    or a result without it), against the case's ``calibrated`` gate noise: which metric decides (on a busy host
    the pairs' CPU time, when fit; ``gpu``: ``calibration.gpu_in_use``, None = unsure, which never decides on CPU
    time). Without one: ``calibration.assess_noise`` of ``host_load`` (the runner's ``HostLoad`` over the
    measured steps). ``case`` is a ``tasks.records.Case`` (``max_other_cpu_share``, ``max_steal_share``).

    Where CPU time is
    fit its verdict stands, whatever it is (:func:`cpu_comparison`: ``decided_on`` ``cpu``), and the pipeline
    does not measure again: only a measurement that no metric can decide is retried (issue 23). An unpaired
    run on a busy host has no metric fit (its baselines have no paired CPU time).

    Raises:
        ValueError: as :func:`paired_comparison`, :func:`deciding_metric` and ``calibration.assess_noise``.
    """
    if paired is None:
        noise = calibration.assess_noise(
            host_load, max_other_cpu_share=case.max_other_cpu_share, max_steal_share=case.max_steal_share
        )
        if noise.busy:
            return noise.model_copy(
                update={"metric_reason": "no metric fit to decide: only a paired gate can decide on CPU time"}
            )
        return noise
    comparison, _ = paired_comparison(paired, case, offset)
    n = comparison.n_candidate
    # a sequential gate's looks judged the rounds' load (the gate record keeps the last look's): the verdict the same
    load = (paired.gate or {}).get("host_load") or paired.host_load
    if (paired.gate or {}).get("unit") == "process-pair":
        wall, cpu = process_units(paired, "wall"), process_units(paired, "cpu")
        assert wall is not None  # wall time is always recorded
        noise = environment_metric(case, load, wall, cpu, gpu=gpu)
    else:
        noise = deciding_metric(
            case, load, _wall_log_ratios(paired, n), _cpu_log_ratios(paired, n), calibrated=calibrated, gpu=gpu
        )
    if noise.metric == "cpu":
        return noise.model_copy(update={"decided_on": "cpu"})
    return noise


def decide(
    measured: Sequence[float],
    case: Any,
    inputs: CompareInputs,
    *,
    env_data: Mapping[str, Any],
    paired: PairedBlocks | None = None,
    baseline_version: str | None = None,
    baseline_digest: str | None = None,
    noise: Mapping[str, Any] | None = None,
    measured_cpu: Sequence[float] | None = None,
    gpu: bool | None = None,
) -> Decision:
    """Decide the final verdict (see the module docstring); ``case`` is a ``tasks.records.Case``.

    Args:
        measured: the candidate's measured step times (ms, our timer).
        measured_cpu: the candidate's per-step process CPU time over the same steps (ms, all threads, user +
            system; ``ProfileResult.measured_cpu_ms``); None or empty: not recorded (the history then decides on
            wall time).
        gpu: whether a GPU may carry the steps (``calibration.gpu_in_use`` of the run); None: unsure. Only
            ``False`` lets the history decide on CPU time (``calibration.history_metric``).
        inputs: the stored facts (``tasks.store.reads.gather_compare_inputs``); baselines whose samples are
            unusable (:func:`usable_baselines`) are left out here and named in ``evidence["skipped_baselines"]``.
        env_data: the candidate's fingerprint record (``EnvRecord.data``), diffed against
            ``inputs.other_env_data`` for ``env-changed``.
        paired: the paired gate's blocks (``tasks.stages.profiled_run.read_paired``); None: no gate.
        baseline_version, baseline_digest: the baseline model version the gate re-measured, and its bytes'
            sha256 (recorded in ``evidence["paired"]``).
        noise: ``calibration.Noise`` as a dict (:func:`judge_noise`, ``ProfiledRun.noise``): its ``busy``
            applies the noise rule; None: not assessed (no rule, no ``evidence["noise"]``).

    Raises:
        ValueError: the paired blocks are unequal in number or hold a NaN/non-positive step time
            (``stats.compare_paired`` names ``a_blocks[i]``/``b_blocks[i]``).
    """
    evidence: dict[str, Any] = {"candidate_median_ms": statistics.median(measured), "n_candidate": len(measured)}
    samples = inputs.samples
    same, skipped_same = usable_baselines(samples, inputs.same_env)
    other, skipped_other = usable_baselines(samples, inputs.other_env)
    if skipped_same or skipped_other:
        evidence["skipped_baselines"] = skipped_same + skipped_other
    d = Decision(verdict=Verdict.NO_BASELINE, method="none", baseline_run_ids=same or other, evidence=evidence)
    history_on = "wall"
    across: dict[str, Any] | None = None
    if same:
        history_on = _decide_history(d, measured, measured_cpu, case, inputs, same, gpu)
    elif other:
        _decide_across(d, measured, case, inputs, other, env_data)
        across = {"verdict": d.verdict, "method": d.method, "reason": d.reason, "limit": d.limit}
        across.update(ratio=d.ratio, ci_low=d.ci_low, ci_high=d.ci_high)
    elif evidence.get("skipped_baselines"):
        evidence["reason"] = "every baseline run was skipped: " + "; ".join(
            f"run {x['run_id']}: {x['reason']}" for x in evidence["skipped_baselines"]
        )
        d.reason = evidence["reason"]
    evidence["metric"] = history_on
    if paired is not None:
        _decide_paired(d, measured, case, paired, inputs.aa_gates, baseline_version, baseline_digest, noise)
        evidence["history"]["metric"] = history_on
        evidence["metric"] = "wall"
    if noise is not None:
        evidence["noise"] = dict(noise)
        if paired is not None and noise.get("busy") and noise.get("metric") == "cpu":
            _decide_on_cpu(d, case, paired, noise)
        elif (
            paired is None
            and noise.get("busy")
            and history_on == "cpu"
            and calibration.steal_exceeded(
                noise.get("host_load"), (noise.get("bounds") or {}).get("steal_share", calibration.MAX_STEAL_SHARE)
            )[1]
            is None
        ):
            _decide_history_busy(d, case, noise)
        elif (
            paired is not None
            and noise.get("busy")
            and d.ci_low is not None
            and d.ci_high is not None
            and (gross := gross_verdict_from_ci(d.ci_low, d.ci_high, case.tolerance)) != Verdict.INCONCLUSIVE
        ):
            line = (1 + case.tolerance) * (1 + calibration.WALL_BIAS_BOUND)
            evidence["verdict_statistics"] = {"verdict": d.verdict, "reason": d.reason}
            evidence["gross"] = {"line": line, "wall_bias_bound": calibration.WALL_BIAS_BOUND}
            d.verdict = gross
            d.reason = (
                f"decided on wall time although the host was busy ({noise.get('reason')}): the interval "
                f"[{d.ci_low:.3f}, {d.ci_high:.3f}] lies beyond x{line:.3f}, more than load has moved a wall-time "
                f"ratio here ({calibration.WALL_BIAS_BOUND:.0%} with the tolerance), a change load cannot fake; "
                f"the statistics said: {d.reason}"
            )
        elif noise.get("busy") and d.verdict in DECIDED:
            evidence["verdict_statistics"] = {"verdict": d.verdict, "reason": d.reason}
            d.verdict = Verdict.INCONCLUSIVE
            d.reason = f"{noise.get('reason')}; the statistics alone said {evidence['verdict_statistics']['verdict']}"
    if paired is not None and getattr(case, "gate_percentile", None) is not None:
        _gate_tail(d, case, paired, noise)
    if across is not None:
        judge_change(d, case, across, paired, noise)
    return d


def _decide_across(
    d: Decision,
    measured: Sequence[float],
    case: Any,
    inputs: CompareInputs,
    other: list[int],
    env_data: Mapping[str, Any],
) -> None:
    """The interval across an environment change: ``stats.compare_to_history`` (a random-effects model of the
    log medians, DerSimonian & Laird 1986) of this run against the usable lookback runs ``other`` of the
    environment before the change, with the drift prior of that environment's accepted runs
    (``calibration.prior_for_case`` of ``inputs.calibration_runs``): this run's own process offset and the
    baselines' count in the interval, as in a nightly history verdict. On wall time (what a user waits for; an
    upgrade may move CPU time and wall time apart). Records ``evidence["env_changes"]`` (the comparability fields
    that differ, ``tasks.analysis.environment.diff_fingerprints``), ``stats``, ``prior``, ``baseline_median_ms``;
    the verdict is the statistics' (:func:`judge_change` turns it into the final one)."""
    ev = d.evidence
    ev["env_changes"] = [
        c.model_dump(mode="json")
        for c in diff_fingerprints(dict(inputs.other_env_data or {}), dict(env_data))
        if c.affects_comparability
    ]
    prior = calibration.prior_for_case(case, inputs.calibration_runs)
    base = [inputs.samples[i] for i in other]
    result = stats.compare_to_history(
        measured,
        base,
        tolerance=case.tolerance,
        confidence=case.confidence,
        prior_between_sd=prior.between_sd,
        prior_df=prior.prior_df,
    )
    ref = statistics.median(statistics.median(x) for x in base)
    d.verdict, d.method = result.verdict, "cross-environment"
    d.ratio, d.ci_low, d.ci_high = result.ratio, result.ci_low, result.ci_high
    d.limit = ref * (1 + case.tolerance)
    d.reason = f"across the change, {len(base)} accepted run(s) of the previous environment: {result.reason}"
    ev.update(stats=result.model_dump(mode="json"), prior=prior.model_dump(mode="json"), baseline_median_ms=ref)


def judge_change(
    d: Decision,
    case: Any,
    across: Mapping[str, Any],
    paired: PairedBlocks | None,
    noise: Mapping[str, Any] | None,
) -> None:
    """The final verdict of a run across an environment change (issue 36 item 3; the one rule), from ``d`` as
    the statistics, the paired gate and the noise rule left it and ``across``, the interval across the change
    (:func:`_decide_across`: ``verdict``, ``reason``, ``ratio``, ``ci_low``, ``ci_high``, ``limit``, before the
    noise rule):

    * a cross-environment paired gate (``paired.gate["unit"] == "process-pair"``: side A run in the baseline
      environment, ``Case.baseline_runner``/``baseline_env``) judged the two environments: its verdict stands;
    * otherwise the interval across the change judges it (on a busy host a decided one is undecided, as every
      unpaired verdict); with a paired gate of two versions in the new environment, the worse of the two
      (``tail.combine``: ``regression`` when either is, undecided when either is), the figures of the one that
      decided (the gate's kept in ``evidence["verdict_paired"]``);
    * undecided (``inconclusive``) becomes ``env-changed``, which never becomes the baseline by itself
      (``tasks.records.AUTO_ACCEPT_VERDICTS``), with how to judge or accept it; ``pass``, ``improvement`` and
      ``regression`` stay (a regression across the change fails the run as any other).

    The reason begins ``the environment changed: <field old -> new; ...>`` (``tasks.records.env_change_reason``);
    ``evidence["env_change"]`` says what judged it (``by``) and the interval's own verdict.
    """
    from tasks.analysis import tail as tail_gate

    ev = d.evidence
    statistics_said = Verdict(across["verdict"])
    across_verdict = statistics_said
    busy = bool(noise is not None and noise.get("busy"))
    if busy and across_verdict in DECIDED:
        across_verdict = Verdict.INCONCLUSIVE
    if paired is not None and (paired.gate or {}).get("unit") == "process-pair":
        by = "cross-environment gate"
    elif paired is not None:
        by = "interval across the change and the paired gate"
        gate_verdict = Verdict(d.verdict)
        final = tail_gate.combine(gate_verdict, across_verdict)
        if final != gate_verdict:  # the interval across the change decided: its figures
            ev["verdict_paired"] = {"verdict": gate_verdict, "reason": d.reason, "ratio": d.ratio}
            ev["verdict_paired"].update(ci_low=d.ci_low, ci_high=d.ci_high, method=d.method)
            d.method, d.limit = "cross-environment", across["limit"]
            d.ratio, d.ci_low, d.ci_high = across["ratio"], across["ci_low"], across["ci_high"]
            d.reason = f"{across['reason']} The paired gate of the versions said {gate_verdict}: {d.reason}"
        d.verdict = final
    else:
        by = "interval across the change"
    ev["env_change"] = {"by": by, "verdict_statistics": statistics_said, "verdict": across_verdict}
    if d.verdict == Verdict.INCONCLUSIVE:
        d.verdict = Verdict.ENV_CHANGED
        d.reason = (
            f"{(d.reason or '').rstrip('.')}; not judged, so not made the case's baseline: a cross-environment "
            "gate judges the change where the previous environment can still run (perfwatch run "
            f"{case.model} --baseline-runner 'PREVIOUS_RUNNER'), else (if the change is acceptable: perfwatch "
            "baseline accept RUN_ID --by NAME --reason WHY)"
        )
    d.reason = env_change_reason(ev.get("env_changes") or [], f"{d.verdict}: {d.reason}")


def _gate_tail(d: Decision, case: Any, paired: PairedBlocks, noise: Mapping[str, Any] | None) -> None:
    """The tail gate of a paired verdict (``Case.gate_percentile``; ``tasks.analysis.tail``), after the median's
    verdict and the noise rule: the per-step times of the analysed pairs of each version, the percentile ratio's
    interval with the gate's process offset, on wall time. On a busy host a decided tail verdict becomes
    ``inconclusive`` (load lands on single steps: the tail is what it moves most). The verdict is
    ``tail.combine`` of both; where the tail changed it, the verdict's ratio, interval and limit are the
    tail's (``evidence["gated_on"]`` = ``p99``) and the median's kept in ``evidence["verdict_median"]``."""
    from tasks.analysis import tail as tail_gate

    ev = d.evidence
    n = int(ev["paired"]["n_candidate"])
    a = [t for blk in paired.a[:n] for t in blk]
    b = [t for blk in paired.b[:n] for t in blk]
    offset_sd = float((ev.get("paired_offset") or {}).get("sd") or 0.0)
    t = tail_gate.compare_tail(
        a, b, case.gate_percentile, confidence=case.confidence, tolerance=case.tolerance, offset_sd=offset_sd
    )
    verdict, reason = t.verdict, t.reason
    if noise is not None and noise.get("busy") and verdict in DECIDED:
        verdict = Verdict.INCONCLUSIVE
        reason = f"host busy: {t.label} gate left undecided (load lands on single steps, the tail); it said: {reason}"
    ev["tail"] = {**t.model_dump(mode="json"), "verdict_after_noise": verdict, "reason": reason}
    median = Verdict(d.verdict)
    final = tail_gate.combine(median, verdict)
    if final == median:
        d.reason = f"{d.reason}; {reason}" if d.reason else reason
        return
    ev["verdict_median"] = {"verdict": median, "reason": d.reason, "ratio": d.ratio, "ci_low": d.ci_low}
    ev["verdict_median"]["ci_high"] = d.ci_high
    ev["gated_on"] = t.label
    if verdict != Verdict.INCONCLUSIVE and t.ci_low is not None and t.ci_high is not None:
        d.ratio, d.ci_low, d.ci_high = t.ratio, t.ci_low, t.ci_high
        d.limit = float(t.a["point"]) * (1 + case.tolerance)
    if final == Verdict.INCONCLUSIVE and not t.enough:
        head = f"inconclusive ({reason.split(' (a two-sided')[0]})"
    else:
        head = f"{final} on the {t.label}"
    d.verdict = final
    d.reason = f"{head}: {reason} The median gate alone said {median}: {ev['verdict_median']['reason']}"


#: two server points are at one rate when their issued rates differ by less than this fraction (the schedule is
#: scaled to its target, ``tasks.runner.loadgen.poisson_arrivals``: one target, one rate, to rounding)
SAME_RATE = 1e-6


def gate_per_query(
    d: Decision,
    case: Any,
    candidate: Mapping[str, Any] | None,
    baseline: Mapping[str, Any] | None,
    noise: Mapping[str, Any] | None,
) -> None:
    """A server case's tail gate on what its users wait (``Case.gate_percentile``; issue 27, the serving team's
    audit): the per-query latency percentile of this run's reported point (``candidate``: its ``issued_qps`` and
    ``latency_ms``, arrival to result, queueing included; ``tasks.store.writes.server_point_record``) against the
    baseline run's at the same rate (``baseline``), by ``tasks.analysis.tail.compare_tail``: the Bonferroni
    combination of each run's order-statistic interval holds for independent samples (two runs) as for dependent
    ones, widened by the gate's process offset (``evidence["paired_offset"]``, as the paired tail gate is). The
    paired gate's own tail (``_gate_tail``) times back-to-back batches, the service time; this one is what a
    serving team reads.

    What it assumes, stated in the reason: the two runs are two processes at two times, so a host whose load changed
    between them moves the ratio; a busy candidate host (``noise["busy"]``) or a baseline point whose host was busy
    (its other processes' CPU share above ``case.max_other_cpu_share``) leaves a decided verdict ``inconclusive``.
    Recorded in ``evidence["per_query_tail"]``; the verdict becomes ``tail.combine`` of both, and where that
    changed it the ratio and interval are the per-query test's (``evidence["gated_on"]`` = ``p99 per query``).
    Nothing changes without a baseline point, when the two points are at different rates (a search case whose
    maxima differ: not like for like; said in the evidence) or when the baseline's point is invalid (its queue grew
    through the run: ``baseline["invalid"]``); this run's invalid point against a valid one is a regression
    whatever its percentiles (they grow with the run's length), ``inconclusive`` on a busy host (the capacity it
    lost may be the host's), recorded with ``invalid`` in place of the tail test's figures."""
    from tasks.analysis import tail as tail_gate

    ev = d.evidence
    label = f"p{case.gate_percentile:g} per query"
    if candidate is None or baseline is None:
        ev["per_query_tail"] = {
            "skipped": "the baseline run kept no per-query latencies (stored before they were kept, or no baseline)"
        }
        return
    rate_c, rate_b = float(candidate["issued_qps"]), float(baseline["issued_qps"])
    if abs(rate_c / rate_b - 1.0) > SAME_RATE:
        ev["per_query_tail"] = {
            "skipped": f"not like for like: this run's point issued {rate_c:.4g} q/s, the baseline's {rate_b:.4g} q/s "
            "(a per-query percentile grows with the rate)"
        }
        return
    if baseline.get("invalid"):
        ev["per_query_tail"] = {
            "skipped": f"the baseline run's point at {rate_b:.4g} q/s is invalid, so its percentiles are no result to "
            f"compare with: {baseline['invalid']}"
        }
        return
    t: tail_gate.TailComparison | None = None
    if candidate.get("invalid"):  # the server no longer keeps up with a rate it served: its percentiles grow
        verdict = Verdict.REGRESSION  # with the run's length, so no ratio of them is the change
        reason = (
            f"this run's server did not keep up at {rate_c:.4g} q/s where the baseline run's did: "
            f"{candidate['invalid']}"
        )
        if noise is not None and noise.get("busy"):
            verdict = Verdict.INCONCLUSIVE
            reason = (
                f"host busy: {label} gate left undecided (this run's host was busy: the capacity it lost may be "
                f"the host's); {reason}"
            )
        record: dict[str, Any] = {"invalid": candidate["invalid"]}
    else:
        offset_sd = float((ev.get("paired_offset") or {}).get("sd") or 0.0)
        t = tail_gate.compare_tail(
            baseline["latency_ms"],
            candidate["latency_ms"],
            case.gate_percentile,
            confidence=case.confidence,
            tolerance=case.tolerance,
            offset_sd=offset_sd,
        )
        verdict, reason = t.verdict, f"per query at {rate_c:.4g} q/s against the baseline run's: {t.reason}"
        base_share = (baseline.get("host_load") or {}).get("other_cpu_share")
        busy_base = isinstance(base_share, int | float) and base_share > case.max_other_cpu_share
        if verdict in DECIDED and ((noise is not None and noise.get("busy")) or busy_base):
            where = "this run's host" if noise is not None and noise.get("busy") else "the baseline run's host"
            verdict = Verdict.INCONCLUSIVE
            reason = (
                f"host busy: {label} gate left undecided ({where} was busy; two runs at two times); it said: {reason}"
            )
        reason += " (two runs, two processes: a change of the host between them moves the ratio)"
        record = t.model_dump(mode="json")
    ev["per_query_tail"] = {**record, "rate_qps": rate_c, "verdict_after_noise": verdict, "reason": reason}
    before = Verdict(d.verdict)
    final = tail_gate.combine(before, verdict)
    if final == before:
        d.reason = f"{d.reason}; {reason}" if d.reason else reason
        return
    ev["verdict_before_per_query"] = {"verdict": before, "reason": d.reason, "ratio": d.ratio}
    ev["gated_on"] = label
    if t is not None and verdict != Verdict.INCONCLUSIVE and t.ci_low is not None and t.ci_high is not None:
        d.ratio, d.ci_low, d.ci_high = t.ratio, t.ci_low, t.ci_high
        d.limit = float(t.a["point"]) * (1 + case.tolerance)
    d.verdict = final
    d.reason = f"{final} on the {label}: {reason} Before it the gate said {before}: {d.reason}"


def _usable_cpu(cpu: Sequence[float] | None, n: int) -> bool:
    """CPU time recorded for each of ``n`` steps, every value finite and > 0."""
    return cpu is not None and len(cpu) == n and n > 0 and all(math.isfinite(x) and x > 0 for x in cpu)


def _decide_history(
    d: Decision,
    measured: Sequence[float],
    measured_cpu: Sequence[float] | None,
    case: Any,
    inputs: CompareInputs,
    same: list[int],
    gpu: bool | None,
) -> Literal["wall", "cpu"]:
    """The history verdict against the usable same-environment baselines ``same``, on the metric
    ``calibration.history_metric`` chooses (recorded in ``evidence["history_metric"]``): wall time with the
    case's drift prior (``calibration.prior_for_case``), or CPU time with the prior estimated from the CPU
    medians of the accepted runs (``calibration.prior_from_runs``; the Case's ``prior_between_sd`` is a prior
    on wall-time drift). The tolerance is stated on the metric that decides. Returns that metric."""
    ev = d.evidence
    cal_cpu = inputs.calibration_cpu_ms or [None] * len(inputs.calibration_runs)
    runs = [(v, w, c) for (v, w), c in zip(inputs.calibration_runs, cal_cpu, strict=True)]
    hm = calibration.history_metric(
        runs,
        gpu=gpu,
        candidate_cpu=_usable_cpu(measured_cpu, len(measured)),
        baselines_cpu=all(_usable_cpu(inputs.cpu_samples.get(i), len(inputs.samples[i])) for i in same),
    )
    ev["history_metric"] = hm.model_dump(mode="json")
    wall_ref = statistics.median(statistics.median(inputs.samples[i]) for i in same)
    if hm.metric == "cpu":
        assert measured_cpu is not None  # the rule checked it
        prior = calibration.prior_from_runs((v, c) for v, _, c in runs if c is not None)
        assert prior is not None  # the rule needed df >= MIN_CALIBRATION_DF of these runs
        cand, base = list(measured_cpu), [inputs.cpu_samples[i] for i in same]
    else:
        prior = calibration.prior_for_case(case, inputs.calibration_runs)
        cand, base = list(measured), [inputs.samples[i] for i in same]
    ev["prior"] = prior.model_dump(mode="json")
    result = stats.compare_to_history(
        cand,
        base,
        tolerance=case.tolerance,
        confidence=case.confidence,
        prior_between_sd=prior.between_sd,
        prior_df=prior.prior_df,
        quantity="CPU-time" if hm.metric == "cpu" else "step-time",
    )
    ref = statistics.median(statistics.median(x) for x in base)
    d.verdict, d.method, d.reason = result.verdict, result.method, result.reason
    d.ratio, d.ci_low, d.ci_high = result.ratio, result.ci_low, result.ci_high
    d.limit = ref * (1 + case.tolerance)
    ev.update(stats=result.model_dump(mode="json"), baseline_median_ms=wall_ref)
    if hm.metric == "cpu":
        assert hm.cpu_sd is not None and hm.wall_sd is not None
        ev.update(candidate_median_cpu_ms=statistics.median(cand), baseline_median_cpu_ms=ref)
        d.reason = (
            f"on CPU time (between processes here it drifts sd {hm.cpu_sd:.3f} against wall time's "
            f"{hm.wall_sd:.3f}; the tolerance is on CPU time): {result.reason}"
        )
    return hm.metric


def _decide_history_busy(d: Decision, case: Any, noise: Mapping[str, Any]) -> None:
    """A busy host whose history verdict was on CPU time (an unpaired run): the busy-host rule on its interval
    (:func:`busy_verdict_from_ci`: the quiet rule with ``calibration.CPU_BIAS_BOUND`` taken off each line), as
    for a busy paired gate; the statistics' own verdict is kept in ``evidence["verdict_statistics"]``."""
    ev = d.evidence
    assert d.ratio is not None and d.ci_low is not None and d.ci_high is not None  # the history compared
    verdict = busy_verdict_from_ci(d.ci_low, d.ci_high, case.tolerance)
    ev["verdict_statistics"] = {"verdict": d.verdict, "reason": d.reason, "metric": "cpu"}
    busy = str(noise.get("reason") or "host busy").removeprefix("host busy: ")
    what = (
        f"history-lookback on CPU time: median CPU-time ratio {d.ratio:.3f} (candidate/baseline), "
        f"{case.confidence:.0%} CI [{d.ci_low:.3f}, {d.ci_high:.3f}], {_busy_rule_text(verdict, case.tolerance)}"
    )
    d.limit = ev["baseline_median_cpu_ms"] * busy_lines(case.tolerance)[1]  # CPU ms per step at the pass line
    if verdict in DECIDED:
        d.reason = f"decided on CPU time: host busy ({busy}); {what}."
    else:
        d.reason = f"host busy: {busy}; {what}. The statistics on CPU time alone said {d.verdict}"
    d.verdict = verdict


def _decide_on_cpu(d: Decision, case: Any, paired: PairedBlocks, noise: Mapping[str, Any]) -> None:
    """A busy host whose CPU time the profiled run found fit (``noise["metric"] == "cpu"``): the verdict,
    ratio and interval are the CPU-time ones (:func:`cpu_comparison`); the wall-time verdict is kept in
    ``evidence["verdict_statistics"]``."""
    ev = d.evidence
    res, test = cpu_comparison(paired, case, calibration.Offset.model_validate(ev["paired_offset"]))
    ev["verdict_statistics"] = {"verdict": d.verdict, "reason": d.reason, "metric": "wall"}
    ev["cpu"] = {**res.model_dump(mode="json"), "randomisation": test}
    ev["metric"], ev["randomisation"] = "cpu", test
    if is_process_gate(paired):  # the spread reported is the deciding metric's; wall time's is kept beside it
        units = process_units(paired, "cpu")
        assert units is not None  # cpu_comparison needed them
        ev["processes_wall"] = ev.get("processes")
        cpu_spread = processes.spread(units)
        ev["processes"] = {
            **cpu_spread.model_dump(mode="json"),
            "text": spread_text(cpu_spread),
            **{k: v for k, v in (ev.get("processes") or {}).items() if k in ("max_processes", "pairs_per_process")},
            "metric": "cpu",
        }
    busy = str(noise.get("reason") or "host busy").removeprefix("host busy: ")
    a_cpu = [t for blk in paired.a_cpu or [] for t in blk]
    d.ratio, d.ci_low, d.ci_high, d.verdict = res.ratio, res.ci_low, res.ci_high, res.verdict
    d.limit = statistics.median(a_cpu) * busy_lines(res.tolerance)[1]  # CPU ms per step at the pass line
    if res.verdict in DECIDED:
        d.reason = f"decided on CPU time: host busy ({busy}); {res.reason}"
    else:
        wall = ev["verdict_statistics"]["verdict"]
        d.reason = f"host busy: {busy}; {res.reason} The statistics on wall time alone said {wall}"


def _wall_log_ratios(paired: PairedBlocks, n: int) -> list[float]:
    """Per-pair log ratios of the blocks' median step time (B over A) of the first ``n`` pairs."""
    return [
        math.log(statistics.median(b) / statistics.median(a)) for a, b in zip(paired.a[:n], paired.b[:n], strict=True)
    ]


def _decide_paired(
    d: Decision,
    measured: Sequence[float],
    case: Any,
    paired: PairedBlocks,
    aa_gates: Sequence[dict[str, Any]],
    baseline_version: str | None,
    baseline_digest: str | None,
    noise: Mapping[str, Any] | None,
) -> None:
    ev = d.evidence
    ev["history"] = {
        "verdict": d.verdict,
        "method": d.method,
        "ratio": d.ratio,
        "ci_low": d.ci_low,
        "ci_high": d.ci_high,
    }
    recorded = (paired.gate or {}).get("offset")
    offset = (
        calibration.Offset.model_validate(recorded) if recorded else calibration.paired_offset_for_case(case, aa_gates)
    )
    ev["paired_offset"] = offset.model_dump(mode="json")
    res, gate = paired_comparison(paired, case, offset)
    d_wall = randomised_values(paired, "wall", res.n_candidate)
    verdict, test = randomisation_check(d_wall, res.verdict, res.tolerance, res.confidence or case.confidence)
    ev["randomisation"] = test
    d_cpu = _cpu_log_ratios(paired, res.n_candidate)
    res = res.model_copy(
        update={
            "verdict": verdict,
            "reason": res.reason + _randomisation_note(res.verdict, verdict, test),
            "details": {**res.details, **({"cpu_scale_log_ratio": stats.noise_scale(d_cpu)} if d_cpu else {})},
        }
    )
    d.verdict, d.method, d.reason = res.verdict, res.method, res.reason
    d.ratio, d.ci_low, d.ci_high = res.ratio, res.ci_low, res.ci_high
    a_all = [t for blk in paired.a for t in blk]
    b_all = [t for blk in paired.b[: res.n_candidate] for t in blk]
    d.limit = statistics.median(a_all) * (1 + case.tolerance)
    layout = paired.layout
    pairs, block_steps = len(paired.a), layout.get("block_steps") or 1
    timed = layout.get("timed_steps") or 2 * pairs * block_steps
    wall = layout.get("pairs_wall_s") or layout.get("wall_s") or 0.0
    design = (paired.gate or {}).get("design")
    seq = None
    if isinstance(gate, processes.ProcessGate):
        stopping = list((paired.gate or {}).get("stopping") or [])
        f = gate.final
        seq = {
            "design": design,
            "method": gate.method,
            "stopped": "decided on CPU time" if stopping[-1:] == ["cpu"] and gate.stopped == "open" else gate.stopped,
            "stopping": stopping,
            "waited_for": (paired.gate or {}).get("waited_for") or {},
            "looks": [
                {
                    "processes": x.processes,
                    "pairs": x.spread.pairs,
                    "ratio": x.ratio,
                    "ci_low": x.ci_low,
                    "ci_high": x.ci_high,
                    "boundary": x.boundary,
                    "verdict": x.verdict,
                }
                for x in gate.looks
            ],
        }
        ev["processes"] = {
            "metric": "wall",
            **f.spread.model_dump(mode="json"),
            "max_processes": (design or {}).get("max_processes"),
            "pairs_per_process": (design or {}).get("pairs_per_process"),
            "text": spread_text(f.spread),
        }
    elif gate is not None:
        stopping = list((paired.gate or {}).get("stopping") or [])
        seq = {
            "design": design,
            "method": gate.method,
            # a busy host's gate stops on its CPU-time look (look_decides): its wall-time looks may be open
            "stopped": "decided on CPU time" if stopping[-1:] == ["cpu"] and gate.stopped == "open" else gate.stopped,
            "stopping": stopping,
            "looks": [
                {
                    "pairs": x.pairs,
                    "ratio": x.ratio,
                    "ci_low": x.ci_low,
                    "ci_high": x.ci_high,
                    "boundary": x.boundary,
                    "verdict": x.verdict,
                }
                for x in gate.looks
            ],
        }
    if design and design.get("kind") == "processes":
        budget = design["max_processes"] * design["pairs_per_process"]
    else:
        budget = design["max_pairs"] if design else pairs
    k = len(paired.by_process())
    across = bool((paired.gate or {}).get("environments"))  # a cross-environment gate: one side per process
    ev["paired"] = {
        **res.model_dump(mode="json"),
        **layout,
        "baseline_version": baseline_version,
        "baseline_digest": baseline_digest,
        "a_median_ms": statistics.median(a_all),
        "b_median_ms": statistics.median(b_all),
        "host_busy": bool(noise.get("busy")) if noise is not None else None,
        "sequential": seq if seq else {"stopped": "fixed"},
        "spent": {
            "pairs": pairs,
            "max_pairs": budget,
            "timed_steps": timed,
            "wall_s": wall,
            **({"processes": k} if k > 1 else {}),
            **({"environments": True} if across else {}),
        },
        "cost": (
            f"{pairs} of at most {budget} step pairs x {block_steps} step(s) x 2 environments = {timed} extra timed "
            f"steps ({timed / max(len(measured), 1):.1f}x the {len(measured)} measured steps) in {wall:.1f} s, in "
            f"{k} process pairs, each environment in its own fresh process"
            if across
            else f"{pairs} of at most {budget} ABBA block pairs x {block_steps} step(s) x 2 versions = "
            f"{timed} extra timed steps ({timed / max(len(measured), 1):.1f}x the {len(measured)} "
            f"measured steps) in {wall:.1f} s, "
            + ("plus a second model load and warm-up" if k == 1 else f"in {k} processes, each loading both versions")
        ),
    }
