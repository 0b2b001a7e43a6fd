"""Explain a step-time change by the ops that moved, from the historical store.

Reads a run's parsed xprof tables back from the store (``op_stats``: framework_op_stats self-times in µs
over the profiled window; ``step_breakdown``: overview_page per-step breakdown in ms; ``run_tables``: one
JSON row per other tool, see ``tasks.archive.RUN_TABLE_GROUPS``) and attributes the change between two
runs to ops and op categories with ``tasks.attribution.attribute`` (self-time normalised to µs per
profiled step: the run's ``params.profiled_steps``).

The step-time change the ops are measured against is xprof's average step time over the profiled window
(``runs.profiler_avg_step_ms`` / ``ParseRecord.avg_step_time_ms``, ms): the same window the op self-times
come from. When either run lacks it (no step markers), the summed op self-time change is used instead.

Used by baseline-compare (``attribute_against_run``, the verdict's ``evidence["attribution"]``), by
``raise_on_regression`` (``top_ops_text``) and by ``perfwatch compare`` (``compare_versions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import select

from tasks.attribution import Attribution, attribute
from tasks.parse import OP_STATS_COLUMNS
from tasks.store import Model, ModelVersion, OpStat, Run, RunTable, StepBreakdown, session_scope

#: How many ops the verdict's evidence keeps per list (largest |Δ|, grew most, shrank most).
EVIDENCE_TOP_N = 5
#: How many appeared / vanished op names the evidence keeps (the counts are always complete).
EVIDENCE_NAMES_MAX = 20


class ComparisonUnavailable(LookupError):
    """The store holds nothing to compare: unknown model, or no successful run of a version / case."""


# ------------------------------------------------------------------------------------- per-run tables


def op_table(db_url: str, run_id: int) -> pd.DataFrame:
    """The run's framework_op_stats rows (``OP_STATS_COLUMNS``; self-times µs over the profiled window,
    ``self_time_share`` 0..1). Empty frame when the run has none."""
    with session_scope(db_url) as s:
        rows = s.execute(select(*[getattr(OpStat, c) for c in OP_STATS_COLUMNS])
                         .where(OpStat.run_id == run_id).order_by(OpStat.id)).all()
    return pd.DataFrame([tuple(r) for r in rows], columns=OP_STATS_COLUMNS)


def step_breakdown_table(db_url: str, run_id: int) -> pd.DataFrame:
    """The run's overview_page per-step breakdown, wide: ``step`` plus one column per component (ms)."""
    with session_scope(db_url) as s:
        rows = s.execute(select(StepBreakdown.step_num, StepBreakdown.component, StepBreakdown.ms)
                         .where(StepBreakdown.run_id == run_id)).all()
    if not rows:
        return pd.DataFrame(columns=["step"])
    wide = pd.DataFrame(rows, columns=["step", "component", "ms"]).pivot(index="step", columns="component",
                                                                          values="ms")
    return wide.rename_axis(columns=None).reset_index()


def run_tool_tables(db_url: str, run_id: int) -> dict[str, dict[str, Any]]:
    """The run's ``run_tables`` rows as ``{tool: data}`` (tools: overview_page, framework_op_stats,
    input_pipeline_analyzer, memory_profile, kernel_stats, diagnosis, cross_check, parse)."""
    with session_scope(db_url) as s:
        return {t: d for t, d in s.execute(select(RunTable.tool, RunTable.data).where(RunTable.run_id == run_id))}


def run_findings(db_url: str, run_id: int) -> list[dict[str, Any]]:
    """The run's diagnosis findings (``tasks.diagnose.Finding`` fields) from ``run_tables`` 'diagnosis';
    empty when the run has none."""
    with session_scope(db_url) as s:
        data = s.scalar(select(RunTable.data).where(RunTable.run_id == run_id, RunTable.tool == "diagnosis"))
    return list((data or {}).get("findings") or [])


# ------------------------------------------------------------------------------------- attribution


def _op_brief(o: Mapping[str, Any]) -> dict[str, Any]:
    return {k: o[k] for k in ("op_name", "op_type", "category", "host_or_device", "baseline_us_per_step",
                              "candidate_us_per_step", "delta_us_per_step", "relative_change", "status",
                              "share_of_change")}


def attribution_evidence(a: Attribution, *, top_n: int = EVIDENCE_TOP_N) -> dict[str, Any]:
    """JSON-safe digest of an Attribution for the verdict's evidence (µs per step throughout).

    Keys: step_time_change_us / _source, op_self_time_change_us, top_n, top_share (share of the step-time
    change the ``top_n`` largest-|Δ| ops explain), top_ops (largest |Δ|), grew_most (largest positive Δ),
    shrank_most (largest negative Δ), grew_share (share the grew_most ops explain), appeared / vanished
    (counts and up to EVIDENCE_NAMES_MAX names), categories (all, by |Δ|), scope_renames (candidate op
    scope -> baseline scope, ``tasks.attribution.match_scopes``), summary (text).
    """
    ops = [o.model_dump(mode="json") for o in a.ops]
    grew = sorted((o for o in ops if o["delta_us_per_step"] > 0), key=lambda o: -o["delta_us_per_step"])[:top_n]
    shrank = sorted((o for o in ops if o["delta_us_per_step"] < 0), key=lambda o: o["delta_us_per_step"])[:top_n]
    change = a.step_time_change_us
    grew_share = sum(o["delta_us_per_step"] for o in grew) / change if grew and abs(change) > 1e-9 else None
    return {
        "step_time_change_us": change, "step_time_change_source": a.step_time_change_source,
        "op_self_time_change_us": a.op_self_time_change_us, "top_n": top_n,
        "top_share": (sum(o["delta_us_per_step"] for o in ops[:top_n]) / change
                      if ops and abs(change) > 1e-9 else None),
        "grew_share": grew_share,
        "top_ops": [_op_brief(o) for o in ops[:top_n]],
        "grew_most": [_op_brief(o) for o in grew], "shrank_most": [_op_brief(o) for o in shrank],
        "n_ops": len(ops), "n_appeared": len(a.appeared), "n_vanished": len(a.vanished),
        "appeared": a.appeared[:EVIDENCE_NAMES_MAX], "vanished": a.vanished[:EVIDENCE_NAMES_MAX],
        "categories": [c.model_dump(mode="json") for c in a.categories],
        "scope_renames": dict(a.scope_renames), "summary": a.summary,
    }


def _profiled_steps(params: Mapping[str, Any] | None) -> int | None:
    steps = (params or {}).get("profiled_steps")
    return steps if isinstance(steps, int) and steps > 0 else None


def attribute_against_run(db_url: str, baseline_run_id: int, parsed_tables: Mapping[str, Any],
                          candidate_steps: int, candidate_step_ms: float | None, *,
                          top_n: int = EVIDENCE_TOP_N) -> dict[str, Any]:
    """Attribute the candidate's step-time change against a stored baseline run, for the verdict evidence.

    Baseline: the run's ``op_stats`` rows, its ``params.profiled_steps`` and ``profiler_avg_step_ms`` (ms,
    xprof). Candidate: ``parsed_tables`` (the parse stage's ``parsed.json``; its ``op_stats`` records),
    ``candidate_steps`` profiled steps and ``candidate_step_ms`` (xprof's average step time, ms, or None).

    Returns ``{"available": True, "baseline_run_id", "baseline_profiled_steps", "candidate_profiled_steps",
    "baseline_step_ms", "candidate_step_ms", **attribution_evidence(...)}``, or ``{"available": False,
    "baseline_run_id", "reason"}`` when the baseline run is missing, has no op rows, or no profiled-step
    count, or the candidate has no op rows. Raises ValueError when ``candidate_steps`` is not a positive int.
    """
    if not isinstance(candidate_steps, int) or candidate_steps <= 0:
        raise ValueError(f"candidate_steps must be a positive int, got {candidate_steps!r}")
    with session_scope(db_url) as s:
        base = s.execute(select(Run.params, Run.profiler_avg_step_ms).where(Run.id == baseline_run_id)).first()
    unavailable = {"available": False, "baseline_run_id": baseline_run_id}
    if base is None:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} is not in the store"}
    base_steps = _profiled_steps(base.params)
    if base_steps is None:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} records no profiled_steps in its params"}
    base_ops = op_table(db_url, baseline_run_id)
    if base_ops.empty:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} has no op_stats rows"}
    cand_ops = list(parsed_tables.get("op_stats") or [])
    if not cand_ops:
        return {**unavailable, "reason": "the candidate's parsed profile has no op_stats rows"}
    a = attribute(base_ops, cand_ops, baseline_steps=base_steps, candidate_steps=candidate_steps,
                  baseline_step_ms=base.profiler_avg_step_ms, candidate_step_ms=candidate_step_ms, top_n=top_n)
    return {"available": True, "baseline_run_id": baseline_run_id, "baseline_profiled_steps": base_steps,
            "candidate_profiled_steps": candidate_steps, "baseline_step_ms": base.profiler_avg_step_ms,
            "candidate_step_ms": candidate_step_ms, **attribution_evidence(a, top_n=top_n)}


def top_ops_text(attribution: Mapping[str, Any] | None, n: int = 3) -> str:
    """One line naming the ``n`` ops whose self-time per step grew most, from ``evidence["attribution"]``,
    e.g. ``"top ops: conv (+120.0 µs/step, +40%, 35% of the change), ..."``; a line saying why when the
    attribution is absent or unavailable."""
    if not attribution:
        return "no op attribution"
    if not attribution.get("available"):
        return f"no op attribution ({attribution.get('reason', 'unavailable')})"
    parts = []
    for o in (attribution.get("grew_most") or [])[:n]:
        rel = f"{o['relative_change']:+.0%}" if o.get("relative_change") is not None else o["status"]
        share = f", {o['share_of_change']:.0%} of the change" if o.get("share_of_change") is not None else ""
        parts.append(f"{o['op_name']} ({o['delta_us_per_step']:+.1f} µs/step, {rel}{share})")
    if not parts:
        return "no op's self-time grew"
    renames = attribution.get("scope_renames") or {}
    note = "".join(f" (this run's op scope {new!r} is shown under the baseline's {old!r})"
                   for new, old in renames.items())
    return "top ops: " + ", ".join(parts) + note


# ------------------------------------------------------------------------------------- two versions


@dataclass(frozen=True)
class VersionComparison:
    """``perfwatch compare``'s pieces.

    headline: one row per side (``side`` from/to): run_id, version, case, started_at, median_step_ms (our
    timer), throughput_eps (examples/s), profiler_avg_step_ms (xprof), input_bound_pct, verdict.
    ops: op deltas (µs per profiled step) ranked by growth (largest Δ first); categories: by |Δ|;
    findings: diagnosis findings of both runs (side, run_id, code, severity, message, figure, value,
    threshold); attribution: the full Attribution (summary text, top_share...).
    """

    headline: pd.DataFrame
    ops: pd.DataFrame
    categories: pd.DataFrame
    findings: pd.DataFrame
    attribution: Attribution

    def to_dict(self) -> dict[str, Any]:
        """All pieces as JSON-safe records (NaN -> None, timestamps ISO 8601) plus the attribution summary."""
        import json

        def recs(df: pd.DataFrame) -> list[dict[str, Any]]:
            return json.loads(df.to_json(orient="records", date_format="iso"))

        return {"headline": recs(self.headline), "ops": recs(self.ops), "categories": recs(self.categories),
                "findings": recs(self.findings), "summary": self.attribution.summary,
                "step_time_change_us": self.attribution.step_time_change_us,
                "step_time_change_source": self.attribution.step_time_change_source,
                "top_share": self.attribution.top_share}


FINDING_COLUMNS = ["side", "run_id", "code", "severity", "message", "figure", "value", "threshold"]
HEADLINE_COLUMNS = ["side", "run_id", "version", "case", "started_at", "median_step_ms", "throughput_eps",
                    "profiler_avg_step_ms", "input_bound_pct", "verdict"]


def _latest_runs(db_url: str, model: str, version: str, case: str | None) -> list[dict[str, Any]]:
    with session_scope(db_url) as s:
        model_id = s.scalar(select(Model.id).where(Model.name == model))
        if model_id is None:
            known = sorted(s.scalars(select(Model.name)))
            raise ComparisonUnavailable(f"no model {model!r} in the store (models: {known or 'none'})")
        q = (select(Run.id.label("run_id"), ModelVersion.version, Run.case_name.label("case"), Run.started_at,
                    Run.median_step_ms, Run.throughput_eps, Run.profiler_avg_step_ms, Run.input_bound_pct,
                    Run.verdict, Run.params)
             .join(ModelVersion, ModelVersion.id == Run.model_version_id)
             .where(Run.model_id == model_id, Run.status == "success", ModelVersion.version == str(version))
             .order_by(Run.started_at.desc(), Run.id.desc()))
        if case:
            q = q.where(Run.case_name == case)
        return [dict(r) for r in s.execute(q).mappings()]


def compare_versions(db_url: str, model: str, from_version: str, to_version: str, case: str | None = None,
                     *, top_n: int = 10) -> VersionComparison:
    """Compare the latest successful run of ``from_version`` with that of ``to_version`` of ``model``.

    ``case`` (e.g. ``train-bs16``): compare runs of that case; default: the case of the newest successful
    run of ``to_version``, which ``from_version`` must also have. Op self-times are per profiled step (µs,
    each run's ``params.profiled_steps``); the step-time change is xprof's average step time (ms) over the
    profiled windows (op self-time when either lacks it). ``top_n``: how many ops the summary names; the
    ``ops`` frame holds every op.

    Raises ComparisonUnavailable naming the model / version / case when there is nothing to compare, and
    ValueError when a run records no ``profiled_steps``.
    """
    to_runs = _latest_runs(db_url, model, to_version, case)
    if not to_runs:
        raise ComparisonUnavailable(f"no successful run of {model} version {to_version}"
                                    + (f" in case {case}" if case else ""))
    case = case or to_runs[0]["case"]
    from_runs = _latest_runs(db_url, model, from_version, case)
    if not from_runs:
        other = sorted({r["case"] for r in _latest_runs(db_url, model, from_version, None)})
        raise ComparisonUnavailable(f"no successful run of {model} version {from_version} in case {case}"
                                    + (f" (it has runs in {other}; pass --case)" if other else ""))
    sides = {"from": from_runs[0], "to": to_runs[0]}
    steps = {}
    for side, r in sides.items():
        steps[side] = _profiled_steps(r["params"])
        if steps[side] is None:
            raise ValueError(f"run {r['run_id']} ({side} version {r['version']}) records no profiled_steps")
    a = attribute(op_table(db_url, sides["from"]["run_id"]), op_table(db_url, sides["to"]["run_id"]),
                  baseline_steps=steps["from"], candidate_steps=steps["to"],
                  baseline_step_ms=sides["from"]["profiler_avg_step_ms"],
                  candidate_step_ms=sides["to"]["profiler_avg_step_ms"], top_n=top_n)
    headline = pd.DataFrame([{"side": side, **{k: r[k] for k in HEADLINE_COLUMNS if k != "side"}}
                             for side, r in sides.items()], columns=HEADLINE_COLUMNS)
    ops = a.ops_frame().sort_values("delta_us_per_step", ascending=False, kind="stable").reset_index(drop=True)
    findings = pd.DataFrame([{"side": side, "run_id": r["run_id"], **{k: f.get(k) for k in FINDING_COLUMNS[2:]}}
                             for side, r in sides.items() for f in run_findings(db_url, r["run_id"])],
                            columns=FINDING_COLUMNS)
    return VersionComparison(headline=headline, ops=ops, categories=a.categories_frame(), findings=findings,
                             attribution=a)

