"""Op-level attribution of a step-time change (pure pandas, no TF, no xprof).

Inputs are two framework_op_stats tables (``tasks.analysis.profile.OP_STATS_COLUMNS``; self-times in µs summed
over the profiled window), each run's number of profiled steps and its MEASURED median step time (ms, profiler
off). Self-time is normalised to µs per profiled step, then each op's share of its window's op self-time is
scaled to the run's measured median: ``op µs/step = window self-time per step × measured median / window op
self-time per step``. The op deltas then add up to the measured step-time change, whatever the short profiled
windows happened to run at (a 5-step window on a busy host ran 0.49-3.57× the measured median: unscaled, a ×2.04
slowdown read as -52,409 µs/step). IDLE rows are ignored; host and device rows are summed alike (on a GPU their
self-times overlap in time, so shares there are of the summed self-time, not of the wall step).

One attribution, one metric: wall time. xprof's self-times are wall durations and each run's op shares are scaled
to that same run's measured median wall step time, so the op deltas split the change between two named runs'
medians (``Attribution.basis`` says which). The run page (the verdict's evidence, ``attribute_against_run``) and
``perfwatch compare`` (``attribute_runs``) both get them here; a verdict decided on CPU time or by a paired gate
is another measurement and is never used to scale them. xprof keeps a profile's 500 largest ops
(``tasks.analysis.profile.op_table_capped``): an op missing from a table at that cap is ``below-cut`` there, not
appeared or vanished.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, overload

import pandas as pd
from pydantic import BaseModel

from tasks.analysis.profile import XPROF_MAX_OP_ROWS, op_table_capped
from tasks.records import RunOps

KEY = ["host_or_device", "op_type", "op_name"]
#: (category, regex on the op type with TF's ``_Mkl``/``_MklNative``/``_`` prefixes stripped); first match wins.
CATEGORY_RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "data_input",
        re.compile(
            r"^(IteratorGetNext|Iterator|Dataset|.*Dataset(V\d)?$|OptionalGetValue|"
            r"MultiDeviceIterator)"
        ),
    ),
    ("convolution", re.compile(r"^(Fused)?(Conv[123]D|DepthwiseConv|Conv)")),
    ("matmul", re.compile(r"^(Fused)?(Batch)?MatMul|^Einsum")),
    ("normalization", re.compile(r"^(Fused)?BatchNorm|^FusedBatchNorm|^LayerNorm")),
    ("optimizer", re.compile(r"^(Resource)?(Sparse)?Apply|^Resource|^Assign(Add|Sub)VariableOp")),
    (
        "elementwise",
        re.compile(
            r"^(Add|AddV2|AddN|Sub|Mul|RealDiv|Div|DivNoNan|FloorDiv|Maximum|Minimum|Pow|Square|SquaredDifference|"
            r"Sqrt|Rsqrt|Exp|Log|Log1p|Neg|Abs|Sign|Floor|Ceil|Round|Cast|Relu|Relu6|Elu|Selu|LeakyRelu|Gelu|"
            r"Sigmoid|Tanh|Erf|Softplus|BiasAdd|Select|SelectV2|Equal|NotEqual|Greater|GreaterEqual|Less|"
            r"LessEqual|LogicalAnd|LogicalOr|LogicalNot|Reciprocal|Inv|ZerosLike|OnesLike)(Grad|V\d)?$"
        ),
    ),
]
CATEGORIES = [c for c, _ in CATEGORY_RULES] + ["other"]
#: Fraction of the smaller scope's op paths two renamed top-level scopes must share to be paired.
MIN_SCOPE_OVERLAP = 0.5


def op_category(op_type: str) -> str:
    """Map a TF op type (e.g. ``Conv2D``, ``_MklNativeFusedConv2D``, ``ResourceApplyAdam``) to a category:
    convolution, matmul, elementwise, normalization, data_input, optimizer or other."""
    base = re.sub(r"^_(Mkl)?(Native)?", "", op_type or "")
    return next((cat for cat, rx in CATEGORY_RULES if rx.match(base)), "other")


#: an op's status in an attribution: in both tables; in the candidate's / the baseline's only, the other table
#: complete; in one only, the other table at xprof's cap (below its cut there, or gone: ``op_table_capped``)
STATUSES = ("both", "appeared", "vanished", "below-cut")


class OpDelta(BaseModel):
    """One op's time per step (µs) in both runs. ``status``: one of :data:`STATUSES` (0.0 µs/step on the side
    that lacks the op).

    ``*_us_per_step``: the op's share of its window's op self-time × the run's measured median (µs per step;
    the raw window self-time per profiled step when the attribution is unscaled, see
    ``Attribution.step_time_change_source``); ``*_window_us_per_step``: the raw self-time per profiled step.
    """

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
    baseline_window_us_per_step: float = 0.0
    candidate_window_us_per_step: float = 0.0


class CategoryDelta(BaseModel):
    category: str
    baseline_us_per_step: float
    candidate_us_per_step: float
    delta_us_per_step: float
    relative_change: float | None


class Attribution(BaseModel):
    """Ops ranked by |Δ time per step| (µs), op categories, and a plain-text summary.

    ``basis``: one sentence naming the metric (wall time) and the two runs (labels and measured medians, ms) the
    op figures are scaled to, e.g. ``wall time: the measured median step times (profiler off) of baseline run 1
    (v1), 108.860 ms, and run 2 (v2), 212.775 ms, each split by its own profiled window's op self-time shares``.
    ``step_time_change_us``: Δ step time per step (µs). ``step_time_change_source``: ``measured_median`` when
    both measured medians were given (the op figures are scaled to them and their deltas add up to this
    change), else ``op_self_time`` (the raw window self-times, whose deltas add up to
    ``op_self_time_change_us`` and need not match any measured change). ``*_scale``: measured µs per step /
    window op self-time µs per step of each run (None unscaled). ``top_share``: fraction of the change
    accounted for by the ``top_n`` ranked ops (None when the change is 0). ``warnings``: why the figures may
    mislead (an unrepresentative profiled window, no measured medians). ``appeared`` / ``vanished``: ops in one
    table only where the other is complete; ``below_cut``: ops in one table only where the other is at xprof's
    cap, ``baseline_cut_us`` / ``candidate_cut_us`` the smallest op kept by that run's table (µs per step, as the
    op figures; None when the table is complete): a missing op had less there, or none.
    """

    baseline_steps: int
    candidate_steps: int
    step_time_change_us: float
    basis: str = ""
    metric: str = "wall"  # the op self-times and measured medians are wall time
    step_time_change_source: str  # "measured_median" | "op_self_time"
    op_self_time_change_us: float  # Δ of the raw window op self-time per profiled step (µs)
    baseline_measured_ms: float | None = None
    candidate_measured_ms: float | None = None
    baseline_scale: float | None = None
    candidate_scale: float | None = None
    warnings: list[str] = []
    top_n: int
    top_share: float | None
    ops: list[OpDelta]
    appeared: list[str]
    vanished: list[str]
    below_cut: list[str] = []
    baseline_cut_us: float | None = None
    candidate_cut_us: float | None = None
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
    return "".join(p + "/" for p in parts[:i]), parts[i], "/".join(parts[i + 1 :])


def match_scopes(
    baseline_names: Sequence[str], candidate_names: Sequence[str], min_overlap: float = MIN_SCOPE_OVERLAP
) -> dict[str, str]:
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
        if (
            c not in out
            and b not in out.values()
            and shared >= min_overlap * min(len(base[b]), len(cand[c]))
            and shared > 0
        ):
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


@overload
def _measured(value: float, name: str) -> float: ...
@overload
def _measured(value: float | None, name: str) -> float | None: ...
def _measured(value: float | None, name: str) -> float | None:
    if value is None:
        return None
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive measured median step time (ms) or None, got {value!r}")
    return float(value)


def attribute(
    baseline_ops: pd.DataFrame | Sequence[dict[str, Any]],
    candidate_ops: pd.DataFrame | Sequence[dict[str, Any]],
    *,
    baseline_steps: int,
    candidate_steps: int,
    baseline_measured_ms: float | None = None,
    candidate_measured_ms: float | None = None,
    baseline_capped: bool = False,
    candidate_capped: bool = False,
    labels: tuple[str, str] = ("the baseline", "the candidate"),
    top_n: int = 5,
    warnings: Sequence[str] = (),
) -> Attribution:
    """Attribute a step-time change to ops and op categories.

    ``*_ops``: framework_op_stats tables (DataFrame or records, total_self_time_us in µs over the window);
    ``*_steps``: profiled steps in each window; ``*_measured_ms``: each run's measured median step time (ms,
    profiler off, wall time). With both medians each run's ops are scaled to its median (module docstring): an
    op's ``*_us_per_step`` is its share of the window's op self-time × the median, the deltas add up to
    ``(candidate_measured_ms - baseline_measured_ms) × 1000`` µs and the top ops' share is of that change.
    Without them (or when a window holds no op self-time) the raw window self-times per profiled step are
    compared and a warning says so. ``*_capped``: that run's table is at xprof's cap (``op_table_capped``): an
    op the other run has and it lacks is ``below-cut``, not appeared / vanished. ``labels``: how the basis and
    the summary name the (baseline, candidate) runs, e.g. ``("baseline run 1 (v1)", "run 2 (v2)")``.
    ``warnings``: more to state with the result (e.g. unrepresentative windows, ``window_warnings``).
    Op names are matched exactly, except that top-level name scopes present in one run only are paired
    (``match_scopes``: a renamed model scope) and the candidate's are renamed to the baseline's; the pairs
    are in ``scope_renames`` and the summary.
    Raises ValueError for non-positive step counts, a non-positive or non-finite measured median, or tables
    missing the key columns.
    """
    base_ms = _measured(baseline_measured_ms, "baseline_measured_ms")
    cand_ms = _measured(candidate_measured_ms, "candidate_measured_ms")
    base_df, cand_df = _frame(baseline_ops, "baseline"), _frame(candidate_ops, "candidate")
    renames = match_scopes(list(base_df.get("op_name", [])), list(cand_df.get("op_name", [])))
    base = _per_step(base_df, baseline_steps, "baseline")
    cand = _per_step(_rename_scopes(cand_df, renames), candidate_steps, "candidate")
    notes = list(warnings)
    base_total, cand_total = float(base.sum()), float(cand.sum())
    # the op figures are scaled to the (baseline, candidate) measured medians, ms, when both exist and both windows
    # hold op self-time; None: unscaled
    medians = (
        (base_ms, cand_ms)
        if base_ms is not None and cand_ms is not None and base_total > 0 and cand_total > 0
        else None
    )
    base_scale: float | None = None
    cand_scale: float | None = None
    if medians is not None:
        base_scale, cand_scale = medians[0] * 1e3 / base_total, medians[1] * 1e3 / cand_total
        basis = (
            f"wall time: the measured median step times (profiler off) of {labels[0]}, {medians[0]:.3f} ms, and "
            f"{labels[1]}, {medians[1]:.3f} ms, each split by its own profiled window's op self-time shares"
        )
    else:
        why = (
            "no measured median step time was given for "
            + " and ".join(n for n, v in ((labels[0], base_ms), (labels[1], cand_ms)) if v is None)
            if base_ms is None or cand_ms is None
            else "a window holds no op self-time"
        )
        basis = (
            f"wall time: the raw op self-times per profiled step of {labels[0]}'s and {labels[1]}'s profiled "
            f"windows ({why}): they need not match a measured change"
        )
        notes.append(
            f"op figures are the profiled windows' raw self-times per step: {why}, so the op deltas need not add up "
            "to the measured change"
        )
    raw = pd.concat({"b": base, "c": cand}, axis=1)
    status = pd.Series("both", index=raw.index)
    status[raw["b"].isna()] = "below-cut" if baseline_capped else "appeared"
    status[raw["c"].isna()] = "below-cut" if candidate_capped else "vanished"
    raw = raw.fillna(0.0)
    both = raw * [base_scale, cand_scale] if medians is not None else raw.copy()
    both["d"] = both["c"] - both["b"]
    both["status"] = status
    both["rb"], both["rc"] = raw["b"], raw["c"]
    both = both.reindex(both["d"].abs().sort_values(ascending=False, kind="stable").index)
    op_change = float((raw["c"] - raw["b"]).sum())
    if medians is not None:
        change, source = (medians[1] - medians[0]) * 1e3, "measured_median"
    else:
        change, source = op_change, "op_self_time"
    ops = [
        OpDelta(
            host_or_device=k[0],
            op_type=k[1],
            op_name=k[2],
            category=op_category(k[1]),
            baseline_us_per_step=r.b,
            candidate_us_per_step=r.c,
            delta_us_per_step=r.d,
            relative_change=_rel(r.d, r.b),
            status=r.status,
            share_of_change=r.d / change if abs(change) > 1e-9 else None,
            baseline_window_us_per_step=r.rb,
            candidate_window_us_per_step=r.rc,
        )
        for k, r in zip(both.index, both.itertuples(index=False), strict=True)
    ]
    top_delta = sum(o.delta_us_per_step for o in ops[:top_n])
    top_share = top_delta / change if abs(change) > 1e-9 else None
    cats = (
        pd.DataFrame(
            [(o.category, o.baseline_us_per_step, o.candidate_us_per_step) for o in ops], columns=["category", "b", "c"]
        )
        .groupby("category")[["b", "c"]]
        .sum()
    )
    categories = sorted(
        (
            CategoryDelta(
                category=c,
                baseline_us_per_step=r.b,
                candidate_us_per_step=r.c,
                delta_us_per_step=r.c - r.b,
                relative_change=_rel(r.c - r.b, r.b),
            )
            for c, r in zip(cats.index, cats.itertuples(index=False), strict=True)
        ),
        key=lambda c: -abs(c.delta_us_per_step),
    )
    appeared = [o.op_name for o in ops if o.status == "appeared"]
    vanished = [o.op_name for o in ops if o.status == "vanished"]
    below_cut = [o.op_name for o in ops if o.status == "below-cut"]
    # the smallest op each capped table kept (µs per step, as the op figures): what a missing op had less than
    kept = {"b": both.loc[status != "appeared", "b"], "c": both.loc[status != "vanished", "c"]}
    cuts = {
        side: float(kept[side][kept[side] > 0].min()) if capped and (kept[side] > 0).any() else None
        for side, capped in (("b", baseline_capped), ("c", candidate_capped))
    }
    if medians is not None:
        lines = [
            f"Measured median step time changed by {change:+.1f} µs/step ({medians[0]:.3f} -> {medians[1]:.3f} ms, "
            f"x{medians[1] / medians[0]:.3f}; wall time, {labels[0]} -> {labels[1]}); each op's share of its "
            f"profiled window's op self-time is scaled to its run's measured median (x{base_scale:.3f} baseline, "
            f"x{cand_scale:.3f} candidate), so the op deltas add up to that change. Unscaled, the windows' op "
            f"self-time changed by {op_change:+.1f} µs/step."
        ]
    else:
        lines = [f"Op self-time in the profiled windows changed by {op_change:+.1f} µs/step (unscaled)."]
    lines += [
        f"Op scope {c!r} of the candidate matched to {b!r} of the baseline (shown by that name)."
        for c, b in sorted(renames.items())
    ]
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
    if below_cut:
        capped = [(label, cut) for label, cut in ((labels[0], cuts["b"]), (labels[1], cuts["c"])) if cut is not None]
        tables = (
            f"the op table of {capped[0][0]} is"
            if len(capped) == 1
            else "the op tables of " + " and ".join(label for label, _ in capped) + " are"
        )
        lines.append(
            f"{len(below_cut)} ops are in one run's op table only: xprof keeps a profile's {XPROF_MAX_OP_ROWS} "
            f"largest ops, and {tables} at that cap (smallest kept op: "
            + " and ".join(f"{cut:.1f}" for _, cut in capped)
            + " µs/step); each is below the cut there or gone, shown as 0 µs/step there (status below-cut), "
            "not as appeared or vanished."
        )
    lines += [f"Warning: {w}" for w in notes]
    return Attribution(
        baseline_steps=baseline_steps,
        candidate_steps=candidate_steps,
        basis=basis,
        step_time_change_us=change,
        step_time_change_source=source,
        op_self_time_change_us=op_change,
        baseline_measured_ms=base_ms,
        candidate_measured_ms=cand_ms,
        baseline_scale=base_scale,
        candidate_scale=cand_scale,
        warnings=notes,
        top_n=top_n,
        top_share=top_share,
        ops=ops,
        appeared=appeared,
        vanished=vanished,
        below_cut=below_cut,
        baseline_cut_us=cuts["b"],
        candidate_cut_us=cuts["c"],
        categories=categories,
        scope_renames=renames,
        summary="\n".join(lines),
    )


def attribute_runs(
    baseline: RunOps,
    candidate: RunOps,
    *,
    labels: tuple[str, str] | None = None,
    top_n: int = 5,
) -> Attribution:
    """The attribution of the change from ``baseline`` to ``candidate`` (``tasks.records.RunOps``: a stored run's
    from ``tasks.store.reads.run_ops``, or baseline-compare's candidate before it is archived), on wall time:
    each run's op table scaled to its own measured median (``attribute``); a table at xprof's cap
    (``op_table_capped`` of its ops and ``idle_rows``) makes the ops it lacks ``below-cut``. The warnings name a
    profiled window that is not representative of its run's measured steps (``window_warnings``).

    ``labels``: how the basis, the summary and the warnings name the two runs (default ``the baseline run N``
    and ``run N``, or ``the candidate`` for a run not stored yet). The one attribution of two runs: the verdict's
    evidence (``attribute_against_run``, the run page) and ``perfwatch compare`` both come from here.

    Raises:
        ValueError: a run records no profiled steps (names it), or a measured median is not positive.
    """
    names = labels or (
        f"the baseline run {baseline.run_id}" if baseline.run_id is not None else "the baseline",
        f"run {candidate.run_id}" if candidate.run_id is not None else "the candidate",
    )
    steps: list[int] = []
    for name, side in zip(names, (baseline, candidate), strict=True):
        if side.profiled_steps is None:
            raise ValueError(f"{name} records no profiled_steps: its op self-times cannot be put per step")
        steps.append(side.profiled_steps)
    return attribute(
        baseline.ops,
        candidate.ops,
        baseline_steps=steps[0],
        candidate_steps=steps[1],
        baseline_measured_ms=baseline.measured_median_ms,
        candidate_measured_ms=candidate.measured_median_ms,
        baseline_capped=op_table_capped(len(baseline.ops), baseline.idle_rows),
        candidate_capped=op_table_capped(len(candidate.ops), candidate.idle_rows),
        labels=names,
        top_n=top_n,
        warnings=window_warnings({names[0]: baseline.window_check, names[1]: candidate.window_check}),
    )


def op_times(
    run: RunOps, *, rename: Mapping[str, str] | None = None, step_ms: float | None = None
) -> tuple[pd.Series, bool]:
    """One run's time per step of each op, µs: the op's share of its profiled window's op self-time (xprof
    framework_op_stats, IDLE left out, host and device rows alike) times the run's measured median step time (ms,
    profiler off; our timer), as :func:`attribute` scales a side; ``step_ms``: another per-step figure of the run
    to split instead (ms, e.g. its median CPU time per step). ``rename``: top-level op scopes to rename first
    (``match_scopes``, e.g. to another run's names). Without a median (or with a window holding no op self-time)
    the raw window self-time per profiled step.

    Returns:
        (a Series of µs/step indexed by ``KEY`` (host_or_device, op_type, op_name), whether it is scaled to the
        measured median).

    Raises:
        ValueError: the run records no profiled steps, or its measured median is not a positive number.
    """
    label = f"run {run.run_id}" if run.run_id is not None else "the run"
    if run.profiled_steps is None:
        raise ValueError(f"{label} records no profiled_steps: its op self-times cannot be put per step")
    median = _measured(step_ms if step_ms is not None else run.measured_median_ms, f"{label}'s measured median")
    df = _frame(run.ops, label)
    per_step = _per_step(_rename_scopes(df, dict(rename or {})), run.profiled_steps, label)
    total = float(per_step.sum())
    if median is None or total <= 0:
        return per_step, False
    return per_step * (median * 1e3 / total), True


def window_warnings(checks: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """One warning per profiled window that is not representative of its run's measured steps.

    ``checks``: label (e.g. ``"the baseline run 12"``, ``"run 3 (v2)"``) -> that run's window check
    (``CrossCheck`` fields as stored in ``run_tables`` 'cross_check' / ``parsed.json``; None when absent). A check
    with ``representative`` False gives a warning with its figures (window median / measured median, the band); a
    missing check, or one from before perfwatch compared windows with the measured steps, gives a note that it was
    not checked.
    """
    out = []
    for label, c in checks.items():
        if not c or "representative" not in c:
            out.append(
                f"the profiled window of {label} was not checked against its measured steps (no window check stored)"
            )
        elif c["representative"] is False:
            med = c["measured_median_ms"]
            out.append(
                f"the profiled window of {label} is not representative: median {c['window_median_ms']:.3f} ms "
                f"= {c['overhead_ratio']:.2f}x its measured median {med:.3f} ms"
                + (f" (xprof: {c['profiler_ratio']:.2f}x)" if c.get("profiler_ratio") is not None else "")
                + (
                    f", band [{c['band_low_ms'] / med:.2f}x, {c['band_high_ms'] / med:.2f}x]"
                    if c.get("band_low_ms") is not None
                    else ""
                )
                + "; its op shares may not hold for the measured steps"
            )
    return out


# ------------------------------------------------------------------------------------- evidence

#: How many ops the verdict's evidence keeps per list (largest |Δ|, grew most, shrank most).
EVIDENCE_TOP_N = 5
#: How many appeared / vanished op names the evidence keeps (the counts are always complete).
EVIDENCE_NAMES_MAX = 20


def _op_brief(o: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: o[k]
        for k in (
            "op_name",
            "op_type",
            "category",
            "host_or_device",
            "baseline_us_per_step",
            "candidate_us_per_step",
            "delta_us_per_step",
            "relative_change",
            "status",
            "share_of_change",
            "baseline_window_us_per_step",
            "candidate_window_us_per_step",
        )
    }


def attribution_evidence(a: Attribution, *, top_n: int = EVIDENCE_TOP_N) -> dict[str, Any]:
    """JSON-safe digest of an Attribution for the verdict's evidence (µs per step throughout).

    Keys: change_basis (``Attribution.basis``: the metric and the two runs), metric (``wall``),
    step_time_change_us / _source, op_self_time_change_us, baseline_/candidate_measured_ms and _scale
    (``Attribution``), warnings, top_n, top_share (share of the step-time
    change the ``top_n`` largest-|Δ| ops explain), top_ops (largest |Δ|), grew_most (largest positive Δ),
    shrank_most (largest negative Δ), grew_share (share the grew_most ops explain), appeared / vanished /
    below_cut (counts ``n_*`` and up to EVIDENCE_NAMES_MAX names), baseline_/candidate_cut_us, categories (all,
    by |Δ|), scope_renames (candidate op scope -> baseline scope, ``tasks.analysis.attribution.match_scopes``),
    summary (text).
    """
    ops = [o.model_dump(mode="json") for o in a.ops]
    grew = sorted((o for o in ops if o["delta_us_per_step"] > 0), key=lambda o: -o["delta_us_per_step"])[:top_n]
    shrank = sorted((o for o in ops if o["delta_us_per_step"] < 0), key=lambda o: o["delta_us_per_step"])[:top_n]
    change = a.step_time_change_us
    grew_share = sum(o["delta_us_per_step"] for o in grew) / change if grew and abs(change) > 1e-9 else None
    return {
        "change_basis": a.basis,
        "metric": a.metric,
        "step_time_change_us": change,
        "step_time_change_source": a.step_time_change_source,
        "op_self_time_change_us": a.op_self_time_change_us,
        "baseline_measured_ms": a.baseline_measured_ms,
        "candidate_measured_ms": a.candidate_measured_ms,
        "baseline_scale": a.baseline_scale,
        "candidate_scale": a.candidate_scale,
        "warnings": list(a.warnings),
        "top_n": top_n,
        "top_share": (
            sum(o["delta_us_per_step"] for o in ops[:top_n]) / change if ops and abs(change) > 1e-9 else None
        ),
        "grew_share": grew_share,
        "top_ops": [_op_brief(o) for o in ops[:top_n]],
        "grew_most": [_op_brief(o) for o in grew],
        "shrank_most": [_op_brief(o) for o in shrank],
        "n_ops": len(ops),
        "n_appeared": len(a.appeared),
        "n_vanished": len(a.vanished),
        "n_below_cut": len(a.below_cut),
        "appeared": a.appeared[:EVIDENCE_NAMES_MAX],
        "vanished": a.vanished[:EVIDENCE_NAMES_MAX],
        "below_cut": a.below_cut[:EVIDENCE_NAMES_MAX],
        "baseline_cut_us": a.baseline_cut_us,
        "candidate_cut_us": a.candidate_cut_us,
        "categories": [c.model_dump(mode="json") for c in a.categories],
        "scope_renames": dict(a.scope_renames),
        "summary": a.summary,
    }


def _window_digest(c: Mapping[str, Any] | None) -> dict[str, Any] | None:
    keys = (
        "representative",
        "overhead_ratio",
        "profiler_ratio",
        "window_median_ms",
        "measured_median_ms",
        "band_low_ms",
        "band_high_ms",
    )
    return {k: c.get(k) for k in keys} if c and "representative" in c else None


def attribute_against_run(
    baseline: RunOps | None,
    baseline_run_id: int,
    parsed_tables: Mapping[str, Any],
    candidate_steps: int,
    candidate_measured_ms: float | None,
    *,
    top_n: int = EVIDENCE_TOP_N,
) -> dict[str, Any]:
    """Attribute the candidate's step-time change against a stored baseline run, for the verdict evidence (what
    the run page shows): ``attribute_runs``, the attribution ``perfwatch compare`` gives for the same two runs.

    Baseline: ``baseline`` (``tasks.records.RunOps``, ``tasks.store.reads.run_ops``; None when the run is not
    in the store): its op table, profiled steps, measured median and window check. Candidate:
    ``parsed_tables`` (the parse stage's ``parsed.json``: ``op_stats`` records, ``idle_time_us`` and
    ``cross_check``), ``candidate_steps`` profiled steps and ``candidate_measured_ms`` (its measured median step
    time, ms, ``ProfiledRun.median_step_ms``). The op figures are on wall time, scaled to the two runs' own
    measured medians (``change_basis`` names them); the verdict's ratio (CPU time, a paired gate's) is never used
    to scale them: it is another measurement, which the verdict's story states.

    Returns ``{"available": True, "baseline_run_id", "baseline_profiled_steps", "candidate_profiled_steps",
    "baseline_run_measured_ms", "baseline_window", "candidate_window", **attribution_evidence(...)}``, or
    ``{"available": False, "baseline_run_id", "reason"}`` when the baseline run is missing, has no op rows, or
    no profiled-step count, or the candidate has no op rows. Raises ValueError when ``candidate_steps`` is not a
    positive int or a median is not positive.
    """
    if not isinstance(candidate_steps, int) or candidate_steps <= 0:
        raise ValueError(f"candidate_steps must be a positive int, got {candidate_steps!r}")
    unavailable = {"available": False, "baseline_run_id": baseline_run_id}
    if baseline is None:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} is not in the store"}
    if baseline.profiled_steps is None:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} records no profiled_steps in its params"}
    if not baseline.ops:
        return {**unavailable, "reason": f"baseline run {baseline_run_id} has no op_stats rows"}
    cand_ops = list(parsed_tables.get("op_stats") or [])
    if not cand_ops:
        return {**unavailable, "reason": "the candidate's parsed profile has no op_stats rows"}
    cand_check = parsed_tables.get("cross_check")
    candidate = RunOps(
        run_id=None,
        ops=cand_ops,
        profiled_steps=candidate_steps,
        profiler_avg_step_ms=None,
        measured_median_ms=_measured(candidate_measured_ms, "candidate_measured_ms"),
        window_check=cand_check,
        idle_rows=len(parsed_tables.get("idle_time_us") or {}),
    )
    a = attribute_runs(
        baseline, candidate, labels=(f"the baseline run {baseline_run_id}", "the candidate"), top_n=top_n
    )
    return {
        "available": True,
        "baseline_run_id": baseline_run_id,
        "baseline_profiled_steps": baseline.profiled_steps,
        "candidate_profiled_steps": candidate_steps,
        "baseline_run_measured_ms": baseline.measured_median_ms,
        "baseline_window": _window_digest(baseline.window_check),
        "candidate_window": _window_digest(cand_check),
        **attribution_evidence(a, top_n=top_n),
    }


def top_ops_text(attribution: Mapping[str, Any] | None, n: int = 3) -> str:
    """One line naming the ``n`` ops whose self-time per step grew most, from ``evidence["attribution"]``,
    e.g. ``"top ops: conv (+120.0 µs/step, +40%, 35% of the change), ..."`` (µs per step as the attribution
    gives them: scaled to the measured medians), followed by the warning about an unrepresentative profiled
    window when there is one; a line saying why when the attribution is absent or unavailable."""
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
    note = "".join(
        f" (this run's op scope {new!r} is shown under the baseline's {old!r})" for new, old in renames.items()
    )
    unrepresentative = [w for w in attribution.get("warnings") or [] if "not representative" in w]
    if unrepresentative:
        note += f" (warning: {'; '.join(unrepresentative)})"
    return "top ops: " + ", ".join(parts) + note
