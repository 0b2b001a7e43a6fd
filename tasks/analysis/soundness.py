"""Is a measurement what its case says? Findings on the steps themselves, and whether a run may become a baseline.

The runner records, per phase, what every step was fed and which steps compiled (``tasks.runner.protocol.Fed``:
the distinct batch shapes with their step counts, ``compiled_steps``, ``retraced_steps``); the warm-up stage
records whether step time reached steady state (``tasks.records.WarmupRecord``). From those plain values:

* :func:`measurement_findings` — ``recompiled_timed_steps`` (warning: measured or profiled steps compiled; their
  step numbers, the count, and their median against the others' so the compile time is kept apart),
  ``recompiled_in_warmup`` (info: compiles after the cold step, before the timed steps),
  ``batch_shapes_vary`` (info: the measured steps were fed more than one set of shapes, with the counts),
  ``partial_batches`` (warning: steps fed fewer examples than ``batch_size``, where the case allowed it; the
  throughput is then of the examples fed), ``warmup_not_steady`` (warning: the warm-up never met its rule).
  Each is a ``tasks.analysis.findings.Finding``, the form of the profile's findings.
* :func:`baseline_refusals` — why a run must not become its case's baseline by itself: a busy host (the noise
  judged by ``tasks.analysis.verdict.judge_noise``), an unsteady warm-up, timed steps that compiled. A user
  can still accept such a run (``perfwatch baseline accept``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.analysis.findings import INFO, WARNING, Finding

#: finding codes that keep a run from becoming a baseline by itself (:func:`baseline_refusals`)
REFUSING_CODES = ("warmup_not_steady", "recompiled_timed_steps")
#: the phases whose steps are timed for results: a profile run's ``fed`` keys, and a paired gate's pairs of the
#: candidate (``paired B``) and the baseline (``paired A``) as the profiled-run stage names them
TIMED_PHASES = ("measured", "profiled", "paired B", "paired A")


def _steps_text(steps: Sequence[int], most: int = 12) -> str:
    shown = ", ".join(str(i) for i in steps[:most])
    return shown + (f", ... ({len(steps) - most} more)" if len(steps) > most else "")


def _shapes_text(distinct: Sequence[Mapping[str, Any]], most: int = 5) -> str:
    parts = [f"{d['shapes']} x{d['steps']}" for d in sorted(distinct, key=lambda d: -int(d["steps"]))[:most]]
    return "; ".join(parts) + (f"; ... ({len(distinct) - most} more)" if len(distinct) > most else "")


def _split_ms(times: Sequence[float] | None, compiled: Sequence[int]) -> str:
    """The compiled steps' median against the others' (ms), in words; "" without step times."""
    if not times:
        return ""
    hit = set(compiled)
    comp = [t for i, t in enumerate(times) if i in hit]
    rest = [t for i, t in enumerate(times) if i not in hit]
    if not comp:
        return ""
    if not rest:
        return f"; no timed step ran without compiling (median {statistics.median(comp):.2f} ms)"
    return (
        f"; those steps' median {statistics.median(comp):.2f} ms against {statistics.median(rest):.2f} ms for the "
        f"{len(rest)} that did not compile, about {sum(comp) - len(comp) * statistics.median(rest):.0f} ms of "
        "compile time in the timed steps"
    )


def measurement_findings(
    fed: Mapping[str, Mapping[str, Any]] | None,
    *,
    batch_size: int,
    xla: bool,
    timed_ms: Mapping[str, Sequence[float]] | None = None,
    steady: bool | None = None,
    warmup_steps: int | None = None,
    final_cv: float | None = None,
    cv_max: float | None = None,
) -> list[Finding]:
    """The findings on a run's steps (module docstring).

    Args:
        fed: phase -> ``tasks.runner.protocol.Fed`` as a dict (``cold``, ``warmup``, ``measured``, ``profiled``;
            a paired gate's ``paired B``, ``paired A``); None or empty: not recorded (no batch or compile findings).
        batch_size: the case's examples per step.
        xla: the case compiles its step with XLA (says why a new shape compiled).
        timed_ms: phase -> its step times (ms, our timer), to set the compiled steps' time apart.
        steady, warmup_steps, final_cv, cv_max: the warm-up's outcome (``WarmupRecord``) and the case's
            ``warmup_cv_max``; ``steady`` None: not known (no warm-up finding).

    Returns:
        the findings, possibly empty; ``value`` is a count of steps (or the warm-up's last CV), ``figure`` names
        the record it comes from.
    """
    out: list[Finding] = []
    fed = fed or {}
    timed_ms = timed_ms or {}
    why = "XLA compiles one executable per input shapes" if xla else "the step function was traced again"
    for phase in TIMED_PHASES:
        rec = fed.get(phase)
        if not rec or not rec.get("compiled_steps"):
            continue
        compiled = list(rec["compiled_steps"])
        retraced = list(rec.get("retraced_steps") or [])
        how = f" ({len(retraced)} retraced)" if retraced and xla else ""
        out.append(
            Finding(
                code="recompiled_timed_steps",
                severity=WARNING,
                figure=f"fed.{phase}.compiled_steps",
                value=float(len(compiled)),
                message=f"{len(compiled)} of {rec['steps']} {phase} steps compiled{how} (steps "
                f"{_steps_text(compiled)}; {why}, and they were fed {len(rec.get('distinct') or [])} distinct batch "
                f"shapes){_split_ms(timed_ms.get(phase), compiled)}: their step time is compile time, not what the "
                "case's step costs. Feed fixed shapes (pad or bucket to a few lengths, drop_remainder=True) or "
                "measure without xla.",
            )
        )
    warm = fed.get("warmup")
    if warm and warm.get("compiled_steps"):
        out.append(
            Finding(
                code="recompiled_in_warmup",
                severity=INFO,
                figure="fed.warmup.compiled_steps",
                value=float(len(warm["compiled_steps"])),
                message=f"{len(warm['compiled_steps'])} of {warm['steps']} warm-up steps compiled after the cold "
                f"step (steps {_steps_text(list(warm['compiled_steps']))}; {why}).",
            )
        )
    for phase in TIMED_PHASES:
        rec = fed.get(phase)
        if not rec:
            continue
        distinct = list(rec.get("distinct") or [])
        if len(distinct) > 1:
            out.append(
                Finding(
                    code="batch_shapes_vary",
                    severity=INFO,
                    figure=f"fed.{phase}.distinct",
                    value=float(len(distinct)),
                    message=f"The {rec['steps']} {phase} steps were fed {len(distinct)} distinct batch shapes "
                    f"(input name -> shape, x steps): {_shapes_text(distinct)}.",
                )
            )
        partial = [d for d in distinct if int(d["examples"]) != batch_size]
        if partial:
            n = sum(int(d["steps"]) for d in partial)
            out.append(
                Finding(
                    code="partial_batches",
                    severity=WARNING,
                    figure=f"fed.{phase}.distinct[examples]",
                    value=float(n),
                    message=f"{n} of {rec['steps']} {phase} steps were fed another number of examples than "
                    f"batch_size {batch_size} ({', '.join(str(d['examples']) for d in partial)}; the case allows "
                    f"partial batches): {rec['examples']} examples in all, and the throughput is of those.",
                )
            )
    if steady is False:
        cv = "no full window" if final_cv is None else f"last window CV {final_cv:.1%}"
        limit = "" if cv_max is None else f" (steady below {cv_max:.1%})"
        out.append(
            Finding(
                code="warmup_not_steady",
                severity=WARNING,
                figure="warmup.final_cv",
                value=final_cv,
                threshold=cv_max,
                message=f"The warm-up did not reach steady state in {warmup_steps} steps: {cv}{limit}. The measured "
                "steps may still be warming up; the run is not made a baseline by itself.",
            )
        )
    return out


def examples_per_step(fed: Mapping[str, Mapping[str, Any]] | None, phase: str, batch_size: int) -> float:
    """Mean examples per step of ``phase`` as fed (``Fed.examples / Fed.steps``), else ``batch_size`` (not
    recorded): what a throughput at the median step time is of."""
    rec = (fed or {}).get(phase)
    if not rec or not rec.get("steps"):
        return float(batch_size)
    return float(rec["examples"]) / float(rec["steps"])


def baseline_refusals(findings: Sequence[Mapping[str, Any]] | None, noise: Mapping[str, Any] | None) -> list[str]:
    """Why this run must not become its case's baseline by itself (empty: it may), each in one phrase: the
    host was busy (``noise["busy"]``, its reason: ``calibration.assess_noise``), or a finding in
    :data:`REFUSING_CODES` (``findings``: ``Finding`` dicts, e.g. ``ProfiledRun.findings``) with its message."""
    out: list[str] = []
    if noise and noise.get("busy"):
        out.append(str(noise.get("reason") or "host busy"))
    for f in findings or []:
        if f.get("code") in REFUSING_CODES:
            out.append(f"{f['code']}: {f.get('message')}")
    return out
