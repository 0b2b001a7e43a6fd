"""The ONE renderer of a verdict's story (``tasks.records.VerdictStory``): text lines for the CLI (``perfwatch
run``, ``gate``, ``runs``, ``history``, ``compare``), a dict for their JSON, an HTML fragment for the plugin's
run and model pages, the alerts' paragraph and the metrics' labels. Every form is built from the same pieces
(:func:`verdict_text`, :func:`figure_text`, :func:`ratio_text`, :func:`interval_text`, the story's reason and
``method_text``), so each says the same verdict, reason, ratio and interval
(``tests/unit/services/test_story.py`` renders one story through each).

A ratio is candidate over baseline of the metric that decided (``wall``: step time, our timer; ``cpu``: the
runner process's CPU time per step), shown with 3 decimals and its interval at the comparison's confidence,
e.g. ``step-time ratio 2.523 [2.410, 2.640] at 99%``.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Mapping
from typing import Any

from tasks.records import ENV_CHANGED_REASON, Acceptance, VerdictStory, ratio_name
from tasks.records import env_changes_text as changes_text

MISSING = "—"  #: a missing figure, as the pages show it

#: the advice a verdict's reason carries when a run that looked sound was not made the baseline by itself
#: (``tasks.stages.compare``: ``(if it is sound after all: ...)``; an environment change left undecided,
#: ``tasks.analysis.verdict.judge_change``: ``(if the change is acceptable: ...)``; written before the run has an
#: id): stale once someone accepted the run
ACCEPT_ADVICE = re.compile(r"\s*\(if [^():]*: perfwatch baseline accept RUN_ID[^)]*\)")


def _utc_minutes(t: dt.datetime) -> str:
    return (t if t.tzinfo is None else t.astimezone(dt.UTC)).strftime("%Y-%m-%d %H:%M")


def acceptance_text(a: Acceptance) -> str:
    """``accepted as the baseline by make demo on 2026-12-02 03:31 UTC`` (``, superseded on ... UTC`` when a
    later baseline replaced it)."""
    out = f"accepted as the baseline by {a.by} on {_utc_minutes(a.at)} UTC"
    return out + (f", superseded on {_utc_minutes(a.superseded_at)} UTC" if a.superseded_at is not None else "")


def no_baseline_text(s: VerdictStory, *, advice: bool = True) -> str:
    """The reason of a ``no-baseline`` verdict stored without one (nothing to compare with, and the run's
    measurement was sound): ``no baseline yet: ...`` with what became of it: the case's baseline now (its
    acceptance, ``s.accepted``), else (with ``advice``) the advice to accept it (``perfwatch baseline accept <run
    id> ...``)."""
    head = "no baseline yet: nothing to compare this run with (the case's first run in its environment)"
    if s.accepted is not None:
        accepted = acceptance_text(s.accepted)
        return f"{head}; it became the case's baseline ({accepted}): the next run is compared with it"
    if not advice:
        return f"{head}; it is not the case's baseline"
    run = str(s.run_id) if s.run_id is not None else "RUN_ID"
    return (
        f"{head}; it is not the case's baseline (if it is sound: perfwatch baseline accept {run} --by NAME "
        "--reason WHY; else the next sound run becomes it)"
    )


def reason_text(s: VerdictStory, *, advice: bool = True) -> str | None:
    """The verdict's reason as every form shows it: the stored reason, with its advice to accept the run as the
    baseline (:data:`ACCEPT_ADVICE`) replaced by the acceptance when the run is or was one (``s.accepted``), else
    naming the run's id instead of ``RUN_ID`` (without ``advice``: left out, as a release gate shows the run it
    answers with: a gate never suggests making its candidate its own baseline); a ``no-baseline`` verdict stored
    without a reason has :func:`no_baseline_text`; an ``env-changed`` reason stored with the fields' names only
    (``the environment changed: gpu.driver_version``, before issue 36) names each field old -> new
    (:func:`env_changes_text`), as a verdict across an environment change does now; None for any other verdict
    without a reason."""
    reason = s.reason
    if not reason:
        if s.status == "success" and s.verdict == "no-baseline":
            return no_baseline_text(s, advice=advice)
        return None
    legacy = (ENV_CHANGED_REASON, f"{ENV_CHANGED_REASON}: " + ", ".join(c.field for c in s.env_changes))
    if (changes := env_changes_text(s)) is not None and reason in legacy:  # stored before the fields' values
        return f"{ENV_CHANGED_REASON}: {changes}"
    if s.accepted is not None and ACCEPT_ADVICE.search(reason):
        accepted = f" ({acceptance_text(s.accepted)})"
        return ACCEPT_ADVICE.sub(lambda _: accepted, reason)
    if not advice:
        return ACCEPT_ADVICE.sub("", reason)
    if s.run_id is not None:
        run_id = str(s.run_id)
        return ACCEPT_ADVICE.sub(lambda m: m[0].replace("RUN_ID", run_id), reason)
    return reason


def env_changes_text(s: VerdictStory) -> str | None:
    """A verdict across an environment change: its differing comparability fields, old -> new, "; "-joined
    (``gpu.driver_version 535.104.05 -> 535.129.03; tensorflow.build.cudnn_version 8.6 -> 8.9``; a field one side
    lacks shows ``absent``: ``tasks.records.env_changes_text``); None when the story names none."""
    if not s.env_changes:
        return None
    return changes_text(s.env_changes)


def verdict_text(s: VerdictStory) -> str:
    """The verdict as one word: the ``Verdict`` value (``regression``), ``failed@<stage>`` for a failed run,
    ``no verdict`` for a run stored without one."""
    if s.status == "failed":
        return f"failed@{s.failed_stage or 'unknown stage'}"
    return s.verdict or "no verdict"


def led_by_figure(s: VerdictStory | None) -> str | None:
    """The figure that made a regression step time did not (:attr:`VerdictStory.led_by_other`), by name: the words
    of the first of ``regressed_on`` before its figure (``model's resident memory``, ``output agreement``); None
    otherwise."""
    if s is None or not s.led_by_other:
        return None
    return s.regressed_on[0].split(":", 1)[0].split(" (", 1)[0].removeprefix("the ")


def ratio_text(s: VerdictStory) -> str | None:
    """The ratio with 3 decimals (``2.523``); None without one."""
    return None if s.ratio is None else f"{s.ratio:.3f}"


def interval_text(s: VerdictStory) -> str | None:
    """The ratio's interval (``[2.410, 2.640]``); None without both bounds."""
    return None if s.ci_low is None or s.ci_high is None else f"[{s.ci_low:.3f}, {s.ci_high:.3f}]"


def figure_text(s: VerdictStory) -> str | None:
    """The verdict's figure: ``step-time ratio 2.523 [2.410, 2.640] at 99%`` (``CPU-time ratio`` when CPU time
    decided; the interval and level where known); None without a ratio. Where a tail gate decided
    (``VerdictStory.gated_on``) the figure is that tail's, with each side's percentile, interval and n (issue
    27): ``p99 per query ratio 36.672 [31.801, 39.133] at 99% (baseline p99 29.71 ms [28.91, 32.56] n=640,
    candidate p99 1089.70 ms [1082.06, 1100.28] n=640; each side's interval at 99.5%)``."""
    ratio = ratio_text(s)
    if ratio is None:
        return None
    text = f"{s.gated_on + ' ratio' if s.gated_on else ratio_name(s.metric)} {ratio}"
    if (interval := interval_text(s)) is not None:
        text += f" {interval}" + (f" at {s.confidence:.0%}" if s.confidence is not None else "")
    if s.gated_on and s.tail_sides:
        sides = [f"{who} {side_text(s.tail_sides.get(who) or {})}" for who in ("baseline", "candidate")]
        level = (s.tail_sides.get("candidate") or {}).get("confidence")
        at = f"; each side's interval at {round(100 * level, 4):g}%" if isinstance(level, int | float) else ""
        text += f" ({', '.join(sides)}{at})"
    return text


def side_text(ci: Mapping[str, Any]) -> str:
    """One side of a tail gate (a ``PercentileCI`` dict, ms): ``p99 29.71 ms [28.91, 32.56] n=640``; a side too
    short for a two-sided interval gives the bound it has (``p99 >= 28.91 ms n=100, no upper bound``)."""
    label = f"p{ci['percentile']:g}" if isinstance(ci.get("percentile"), int | float) else "percentile"
    n, low, high, point = ci.get("n"), ci.get("low"), ci.get("high"), ci.get("point")
    if ci.get("estimable") and low is not None and high is not None and point is not None:
        return f"{label} {point:.2f} ms [{low:.2f}, {high:.2f}] n={n}"
    bound = f">= {low:.2f} ms" if low is not None else "unbounded"
    return f"{label} {bound} n={n}, no upper bound"


def threshold_text(s: VerdictStory) -> str | None:
    """``regression line 1.050 (tolerance 5%)``; None when the tolerance is not known."""
    if s.threshold is None or s.tolerance is None:
        return None
    return f"regression line {s.threshold:.3f} (tolerance {s.tolerance:.0%})"


def baseline_text(s: VerdictStory) -> str | None:
    """``baseline run 3 (v1)``; None without a baseline."""
    if s.baseline_run_id is None and s.baseline_version is None:
        return None
    run = f"baseline run {s.baseline_run_id}" if s.baseline_run_id is not None else "baseline"
    return run + (f" (v{s.baseline_version})" if s.baseline_version else "")


def story_line(s: VerdictStory, *, advice: bool = True) -> str:
    """The story on one line, as listings print it under their table: ``regression: step-time ratio 2.523
    [2.410, 2.640] at 99%, regression line 1.050 (tolerance 5%); paired ABBA sequential gate: both versions in
    one process, 64 pairs of at most 100; baseline run 3 (v1); why: <reason>`` (the reason by
    :func:`reason_text` with ``advice``)."""
    head = verdict_text(s)
    figures = ", ".join(x for x in (figure_text(s), threshold_text(s)) if x)
    if s.led_by_other:  # another figure regressed, step time did not: the headline names it, step time follows
        step = f"step time: {figures}" + (f" ({s.step_verdict})" if s.step_verdict else "")
        parts = [f"{head} on {'; '.join(s.regressed_on)}"] + ([step] if figures else [])
    else:
        parts = [f"{head}: {figures}" if figures else head]
        if s.verdict == "regression" and s.regressed_on:
            parts.append(f"also a regression on {'; '.join(s.regressed_on)}")
    parts += [x for x in (s.method_text, baseline_text(s)) if x]
    if reason := reason_text(s, advice=advice):
        parts.append(f"why: {reason}")
    return "; ".join(parts)


def story_lines(s: VerdictStory) -> list[str]:
    """The story as a few lines (``perfwatch run``'s and ``gate``'s output): the verdict with its figure and the
    regression line (where another figure than step time made a regression, ``VerdictStory.led_by_other``: the
    verdict on that figure, then step time's figure on its own line), then ``how:`` (the method and what it spent,
    the baseline), ``why:`` (the reason) and ``profile judged:`` (the xplane files parsed), each only when known."""
    figures = ", ".join(x for x in (figure_text(s), threshold_text(s)) if x)
    if s.led_by_other:  # another figure regressed, step time did not: the headline names it, step time follows
        out = [f"verdict {verdict_text(s)} on {'; '.join(s.regressed_on)}"]
        if figures:
            out.append(f"  step time: {figures}" + (f" ({s.step_verdict})" if s.step_verdict else ""))
    else:
        out = [f"verdict {verdict_text(s)}" + (f": {figures}" if figures else "")]
        if s.verdict == "regression" and s.regressed_on:
            out.append(f"  also a regression on {'; '.join(s.regressed_on)}")
    how = "; ".join(x for x in (s.method_text, baseline_text(s)) if x)
    if how:
        out.append(f"  how: {how}")
    if reason := reason_text(s):
        out.append(f"  why: {reason}")
    if s.profile:
        out.append(f"  profile judged: {', '.join(s.profile)}")
    return out


def story_dict(s: VerdictStory) -> dict[str, Any]:
    """The story for JSON: every ``VerdictStory`` field, plus ``verdict_text``, ``figure`` (:func:`figure_text`),
    ``threshold`` (``1 + tolerance``), ``method_text`` and ``text`` (:func:`story_line`)."""
    return {
        **s.model_dump(mode="json"),
        "reason": reason_text(s),
        "verdict_text": verdict_text(s),
        "figure": figure_text(s),
        "threshold": s.threshold,
        "method_text": s.method_text,
        "text": story_line(s),
    }


def story_labels(s: VerdictStory) -> dict[str, str]:
    """The story as Prometheus label values (``perfwatch_latest_decision_info``): verdict, metric, method,
    ratio, interval, reason (empty strings where unknown; the reason cut at 200 characters)."""
    return {
        "verdict": verdict_text(s),
        "metric": s.metric or "",
        "method": s.method or "",
        "ratio": ratio_text(s) or "",
        "interval": interval_text(s) or "",
        "reason": (reason_text(s) or "")[:200],
    }


def story_html(s: VerdictStory, *, heading: str | None = "Verdict", level: int = 2) -> str:
    """The story as an HTML fragment for the plugin's pages: ``<section class="verdict-story">`` with an optional
    heading (``<h{level}>``; id ``verdict`` at level 2) and a ``<dl>`` of verdict, the figures beside step time that
    regressed (``regression on`` / ``also a regression on``), figure (ratio and interval), regression line, method,
    baseline, why (the reason) and the judged profile; every text escaped; missing items left out."""
    e = html.escape
    items = [
        (
            "verdict",
            f"<span class='verdict v-{e(verdict_text(s).split('@')[0].split(' ')[0])}'>{e(verdict_text(s))}</span>",
        )
    ]
    if s.verdict == "regression" and s.regressed_on:  # the figures beside step time that regressed, named first
        items.append(("regression on" if s.led_by_other else "also a regression on", e("; ".join(s.regressed_on))))
    items += [
        (k, e(v))
        for k, v in (
            ("ratio", figure_text(s)),
            ("threshold", threshold_text(s)),
            ("method", s.method_text),
            ("baseline", baseline_text(s)),
            ("why", reason_text(s)),
        )
        if v
    ]
    if s.profile:
        items.append(("profile judged", ", ".join(f"<code>{e(p)}</code>" for p in s.profile)))
    anchor = " id='verdict'" if level == 2 else ""
    head = f"<h{level}{anchor}>{e(heading)}</h{level}>" if heading else ""
    body = "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f"<section class='verdict-story'>{head}<dl>{body}</dl></section>"
