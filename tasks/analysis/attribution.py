"""Op-level attribution of a step-time change (pure pandas, no TF, no xprof).

Inputs are two framework_op_stats tables (``tasks.analysis.profile.OP_STATS_COLUMNS``; self-times in µs summed
over the profiled window) and each run's number of profiled steps. Self-time is normalised to
µs PER STEP so runs with different window lengths compare. IDLE rows are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import BaseModel

KEY = ["host_or_device", "op_type", "op_name"]
#: (category, regex on the op type with TF's ``_Mkl``/``_MklNative``/``_`` prefixes stripped); first match wins.
CATEGORY_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("data_input", re.compile(r"^(IteratorGetNext|Iterator|Dataset|.*Dataset(V\d)?$|OptionalGetValue|"
                              r"MultiDeviceIterator)")),
    ("convolution", re.compile(r"^(Fused)?(Conv[123]D|DepthwiseConv|Conv)")),
    ("matmul", re.compile(r"^(Fused)?(Batch)?MatMul|^Einsum")),
    ("normalization", re.compile(r"^(Fused)?BatchNorm|^FusedBatchNorm|^LayerNorm")),
    ("optimizer", re.compile(r"^(Resource)?(Sparse)?Apply|^Resource|^Assign(Add|Sub)VariableOp")),
    ("elementwise", re.compile(
        r"^(Add|AddV2|AddN|Sub|Mul|RealDiv|Div|DivNoNan|FloorDiv|Maximum|Minimum|Pow|Square|SquaredDifference|"
        r"Sqrt|Rsqrt|Exp|Log|Log1p|Neg|Abs|Sign|Floor|Ceil|Round|Cast|Relu|Relu6|Elu|Selu|LeakyRelu|Gelu|"
        r"Sigmoid|Tanh|Erf|Softplus|BiasAdd|Select|SelectV2|Equal|NotEqual|Greater|GreaterEqual|Less|"
        r"LessEqual|LogicalAnd|LogicalOr|LogicalNot|Reciprocal|Inv|ZerosLike|OnesLike)(Grad|V\d)?$")),
]
CATEGORIES = [c for c, _ in CATEGORY_RULES] + ["other"]
#: Fraction of the smaller scope's op paths two renamed top-level scopes must share to be paired.
MIN_SCOPE_OVERLAP = 0.5


def op_category(op_type: str) -> str:
    """Map a TF op type (e.g. ``Conv2D``, ``_MklNativeFusedConv2D``, ``ResourceApplyAdam``) to a category:
    convolution, matmul, elementwise, normalization, data_input, optimizer or other."""
    base = re.sub(r"^_(Mkl)?(Native)?", "", op_type or "")
    return next((cat for cat, rx in CATEGORY_RULES if rx.match(base)), "other")


class OpDelta(BaseModel):
    """One op's self-time per step (µs) in both runs. ``status``: both | appeared | vanished."""

    host_or_device: str
    op_type: str
    op_name: str
    category: str
    baseline_us_per_step: float  # 0.0 when the op is absent there (see status)
    candidate_us_per_step: float
    delta_us_per_step: float
    relative_change: float | None  # delta / baseline; None when the op is new
    status: str
    share_of_change: float | None = None  # delta / Attribution.step_time_change_us; None when that is 0


class CategoryDelta(BaseModel):
    category: str
    baseline_us_per_step: float
    candidate_us_per_step: float
    delta_us_per_step: float
    relative_change: float | None


class Attribution(BaseModel):
    """Ops ranked by |Δ self-time per step| (µs), op categories, and a plain-text summary.

    ``step_time_change_us``: Δ step time per step (µs) — from the step times when given, otherwise the
    sum of op self-time deltas (``step_time_change_source`` says which). ``top_share``: fraction of that
    change accounted for by the ``top_n`` ranked ops (None when the change is 0).
    """

    baseline_steps: int
    candidate_steps: int
    step_time_change_us: float
    step_time_change_source: str  # "step_time" | "op_self_time"
    op_self_time_change_us: float
    top_n: int
    top_share: float | None
    ops: list[OpDelta]
    appeared: list[str]
    vanished: list[str]
    categories: list[CategoryDelta]
    scope_renames: dict[str, str] = {}  # candidate top-level op scope -> baseline scope (see match_scopes)
    summary: str

    def ops_frame(self) -> pd.DataFrame:
        """Ranked ops, OpDelta fields as columns (µs per step)."""
        return pd.DataFrame([o.model_dump() for o in self.ops], columns=list(OpDelta.model_fields))

    def categories_frame(self) -> pd.DataFrame:
        """Op categories by |Δ|, CategoryDelta fields as columns (µs per step)."""
        return pd.DataFrame([c.model_dump() for c in self.categories], columns=list(CategoryDelta.model_fields))


def _split_scope(op_name: str) -> tuple[str, str, str] | None:
    """``(prefix, top-level scope, rest)`` of a TF op name: ``gradient_tape/model_1/conv/Conv2D`` gives
    ``("gradient_tape/", "model_1", "conv/Conv2D")``; None for names without a scope."""
    parts = op_name.split("/")
    i = 1 if parts[0] == "gradient_tape" and len(parts) > 2 else 0
    if len(parts) - i < 2:
        return None
    return "".join(p + "/" for p in parts[:i]), parts[i], "/".join(parts[i + 1:])


def match_scopes(baseline_names: Sequence[str], candidate_names: Sequence[str],
                 min_overlap: float = MIN_SCOPE_OVERLAP) -> dict[str, str]:
    """Pair top-level op-name scopes that exist in only one run: candidate scope -> baseline scope.

    A model's name scope often changes between versions while its layers stay (Keras names a model after
    its config, e.g. ``mobilenetv2_0.35_96`` -> ``mobilenetv2_0.75_96``), which would make every op look
    new. Scopes found in one run only are paired greedily by how many op paths below them they share; a
    pair needs at least ``min_overlap`` (fraction of the smaller scope's paths) in common.
    """
    def paths(names: Sequence[str]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for n in names:
            if (sp := _split_scope(n)) is not None:
                out.setdefault(sp[1], set()).add(sp[0] + sp[2])
        return out

    base, cand = paths(baseline_names), paths(candidate_names)
    base_only, cand_only = set(base) - set(cand), set(cand) - set(base)
    pairs = sorted(((len(base[b] & cand[c]), c, b) for b in base_only for c in cand_only), reverse=True)
    out: dict[str, str] = {}
    for shared, c, b in pairs:
        if c not in out and b not in out.values() and shared >= min_overlap * min(len(base[b]), len(cand[c])) \
                and shared > 0:
            out[c] = b
    return out


def _rename_scopes(df: pd.DataFrame, renames: dict[str, str]) -> pd.DataFrame:
    def rename(name: str) -> str:
        sp = _split_scope(name)
        return f"{sp[0]}{renames[sp[1]]}/{sp[2]}" if sp is not None and sp[1] in renames else name

    return df.assign(op_name=df["op_name"].map(rename)) if renames and not df.empty else df


def _frame(table: pd.DataFrame | Sequence[dict[str, Any]], name: str) -> pd.DataFrame:
    df = pd.DataFrame(table)
    missing = set(KEY + ["total_self_time_us"]) - set(df.columns)
    if missing and len(df):
        raise ValueError(f"{name} op table lacks columns {sorted(missing)}")
    return df


def _per_step(df: pd.DataFrame, steps: int, name: str) -> pd.Series:
    if not isinstance(steps, int) or steps <= 0:
        raise ValueError(f"{name}_steps must be a positive int, got {steps!r}")
    if df.empty:
        return pd.Series(dtype=float, index=pd.MultiIndex.from_tuples([], names=KEY))
    df = df[df["op_type"] != "IDLE"]
    return df.groupby(KEY)["total_self_time_us"].sum().astype(float) / steps


def _rel(delta: float, base: float) -> float | None:
    return delta / base if base > 0 else None


def attribute(baseline_ops: pd.DataFrame | Sequence[dict[str, Any]],
              candidate_ops: pd.DataFrame | Sequence[dict[str, Any]], *, baseline_steps: int,
              candidate_steps: int, baseline_step_ms: float | None = None,
              candidate_step_ms: float | None = None, top_n: int = 5) -> Attribution:
    """Attribute a step-time change to ops and op categories.

    ``*_ops``: framework_op_stats tables (DataFrame or records, total_self_time_us in µs over the window);
    ``*_steps``: profiled steps in each window; ``*_step_ms``: optional average step times (ms) — when
    both are given the top ops' share is of that change, else of the summed op self-time change.
    Op names are matched exactly, except that top-level name scopes present in one run only are paired
    (``match_scopes``: a renamed model scope) and the candidate's are renamed to the baseline's; the pairs
    are in ``scope_renames`` and the summary.
    Raises ValueError for non-positive step counts or tables missing the key columns.
    """
    base_df, cand_df = _frame(baseline_ops, "baseline"), _frame(candidate_ops, "candidate")
    renames = match_scopes(list(base_df.get("op_name", [])), list(cand_df.get("op_name", [])))
    base = _per_step(base_df, baseline_steps, "baseline")
    cand = _per_step(_rename_scopes(cand_df, renames), candidate_steps, "candidate")
    both = pd.concat({"b": base, "c": cand}, axis=1)
    status = pd.Series("both", index=both.index)
    status[both["b"].isna()] = "appeared"
    status[both["c"].isna()] = "vanished"
    both = both.fillna(0.0)
    both["d"] = both["c"] - both["b"]
    both["status"] = status
    both = both.reindex(both["d"].abs().sort_values(ascending=False, kind="stable").index)
    op_change = float(both["d"].sum())
    if baseline_step_ms is not None and candidate_step_ms is not None:
        change, source = (candidate_step_ms - baseline_step_ms) * 1e3, "step_time"
    else:
        change, source = op_change, "op_self_time"
    ops = [OpDelta(host_or_device=k[0], op_type=k[1], op_name=k[2], category=op_category(k[1]),
                   baseline_us_per_step=r.b, candidate_us_per_step=r.c, delta_us_per_step=r.d,
                   relative_change=_rel(r.d, r.b), status=r.status,
                   share_of_change=r.d / change if abs(change) > 1e-9 else None)
           for k, r in zip(both.index, both.itertuples(index=False), strict=True)]
    top_delta = sum(o.delta_us_per_step for o in ops[:top_n])
    top_share = top_delta / change if abs(change) > 1e-9 else None
    cats = pd.DataFrame([(o.category, o.baseline_us_per_step, o.candidate_us_per_step) for o in ops],
                        columns=["category", "b", "c"]).groupby("category")[["b", "c"]].sum()
    categories = sorted(
        (CategoryDelta(category=c, baseline_us_per_step=r.b, candidate_us_per_step=r.c,
                       delta_us_per_step=r.c - r.b, relative_change=_rel(r.c - r.b, r.b))
         for c, r in zip(cats.index, cats.itertuples(index=False), strict=True)),
        key=lambda c: -abs(c.delta_us_per_step))
    appeared = [o.op_name for o in ops if o.status == "appeared"]
    vanished = [o.op_name for o in ops if o.status == "vanished"]
    lines = [f"Step time changed by {change:+.1f} µs/step ({source.replace('_', ' ')}); op self-time "
             f"changed by {op_change:+.1f} µs/step."]
    lines += [f"Op scope {c!r} of the candidate matched to {b!r} of the baseline (shown by that name)."
              for c, b in sorted(renames.items())]
    if top_share is not None and ops:
        lines.append(f"The top {min(top_n, len(ops))} ops account for {top_share:.0%} of the change:")
    for o in ops[:top_n]:
        rel = f" ({o.relative_change:+.0%})" if o.relative_change is not None else f" ({o.status})"
        lines.append(f"  {o.delta_us_per_step:+.1f} µs/step{rel}  {o.op_name} [{o.op_type}, {o.category}]")
    if categories:
        c = categories[0]
        lines.append(f"Largest category change: {c.category} {c.delta_us_per_step:+.1f} µs/step.")
    if appeared or vanished:
        lines.append(f"{len(appeared)} ops appeared, {len(vanished)} vanished.")
    return Attribution(baseline_steps=baseline_steps, candidate_steps=candidate_steps,
                       step_time_change_us=change, step_time_change_source=source,
                       op_self_time_change_us=op_change, top_n=top_n, top_share=top_share, ops=ops,
                       appeared=appeared, vanished=vanished, categories=categories, scope_renames=renames,
                       summary="\n".join(lines))


# ------------------------------------------------------------------------------------- evidence

#: How many ops the verdict's evidence keeps per list (largest |Δ|, grew most, shrank most).
EVIDENCE_TOP_N = 5
#: How many appeared / vanished op names the evidence keeps (the counts are always complete).
EVIDENCE_NAMES_MAX = 20


@dataclass(frozen=True)
class RunOps:
    """A stored run's op table and the facts of its profiled window, as attribution needs them.

    ``ops``: framework_op_stats rows (``OP_STATS_COLUMNS``, self-times µs over the window);
    ``profiled_steps``: steps in the window (None when the run records none); ``profiler_avg_step_ms``:
    xprof's average step time over the window (ms, overview_page), None without step markers.
    """

    run_id: int
    ops: pd.DataFrame
    profiled_steps: int | None
    profiler_avg_step_ms: float | None


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
    scope -> baseline scope, ``tasks.analysis.attribution.match_scopes``), summary (text).
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


def attribute_against_run(baseline: RunOps | None, baseline_run_id: int, parsed_tables: Mapping[str, Any],
                          candidate_steps: int, candidate_step_ms: float | None, *,
                          top_n: int = EVIDENCE_TOP_N) -> dict[str, Any]:
    """Attribute the candidate's step-time change against a stored baseline run, for the verdict evidence.

    Baseline: ``baseline`` (``tasks.store.reads.run_ops``; None when the run is not in the store).
    Candidate: ``parsed_tables`` (the parse stage's ``parsed.json``; its ``op_stats`` records),
    ``candidate_steps`` profiled steps and ``candidate_step_ms`` (xprof's average step time, ms, or None).

    Returns ``{"available": True, "baseline_run_id", "baseline_profiled_steps", "candidate_profiled_steps",
    "baseline_step_ms", "candidate_step_ms", **attribution_evidence(...)}``, or ``{"available": False,
    "baseline_run_id", "reason"}`` when the baseline run is missing, has no op rows, or no profiled-step
    count, or the candidate has no op rows. Raises ValueError when ``candidate_steps`` is not a positive int.
    """
    if not isinstance(candidate_steps, int) or candidate_steps <= 0:
        raise ValueError(f"candidate_steps must be a positive int, got {candidate_steps!r}")
    unavailable = {"available": False, "baseline_run_id": baseline_run_id}
    if baseline is None:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} is not in the store"}
    if baseline.profiled_steps is None:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} records no profiled_steps in its params"}
    if baseline.ops.empty:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} has no op_stats rows"}
    cand_ops = list(parsed_tables.get("op_stats") or [])
    if not cand_ops:
        return {**unavailable, "reason": "the candidate's parsed profile has no op_stats rows"}
    a = attribute(baseline.ops, cand_ops, baseline_steps=baseline.profiled_steps, candidate_steps=candidate_steps,
                  baseline_step_ms=baseline.profiler_avg_step_ms, candidate_step_ms=candidate_step_ms, top_n=top_n)
    return {"available": True, "baseline_run_id": baseline_run_id, "baseline_profiled_steps": baseline.profiled_steps,
            "candidate_profiled_steps": candidate_steps, "baseline_step_ms": baseline.profiler_avg_step_ms,
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
