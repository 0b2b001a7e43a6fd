"""``perfwatch compare MODEL --from V --to V``: how step time moved between two versions, and which ops moved.

Reads the store only (``compare_versions``): the run that answers for each version by ``perfwatch gate``'s rule
(:func:`answering_run`: the newest paired ABBA verdict of the version, else its newest run; the newest successful
run where that one failed), their op self-times per profiled step (µs, xprof framework_op_stats), op categories,
and each run's diagnosis findings. The comparison page of the plugin compares versions the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tasks.cli.render import Format, render

if TYPE_CHECKING:  # the store, pandas and the analysis are imported where used: `perfwatch --help` must stay quick
    import pandas as pd

    from tasks.analysis.attribution import Attribution

#: Shown op columns; the (long) op name last, so the table form keeps it readable.
OPS_COLUMNS = [
    "delta_us_per_step",
    "relative_change",
    "share_of_change",
    "status",
    "baseline_us_per_step",
    "candidate_us_per_step",
    "category",
    "op_type",
    "host_or_device",
    "op_name",
]


class ComparisonUnavailable(LookupError):
    """The store holds nothing to compare: unknown model, or no successful run of a version / case."""


def _latest(db_url: str, model: str, version: str, case: str | None) -> list[Any]:
    from tasks.store import reads

    try:
        return reads.latest_runs(db_url, model, version, case)
    except LookupError as e:
        raise ComparisonUnavailable(str(e)) from e


@dataclass(frozen=True)
class VersionComparison:
    """``perfwatch compare``'s pieces.

    headline: one row per side (``side`` from/to): run_id, version, case, case_label (``tasks.records.case_label``
    of the run's params), started_at, median_step_ms (our
    timer), throughput_eps (examples/s) and throughput_def (what it measures: ``tasks.records.THROUGHPUT_DEFS``),
    profiler_avg_step_ms (xprof), input_bound_pct, verdict.
    ops: op deltas (µs per profiled step) ranked by growth (largest Δ first); categories: by |Δ|;
    findings: diagnosis findings of both runs (side, run_id, code, severity, message, figure, value,
    threshold); attribution: the full Attribution (summary text, top_share...); identical_bytes: both runs
    measured the same model bytes (equal sha256 digests), so any difference is drift between processes;
    selection: for a comparison of versions, one line per side saying which run stands for the version and why
    (:func:`answering_run`; empty for two runs given by id), then which case was compared and which were left
    out (no ``case`` given); warnings: the two runs were measured in different environments (the
    comparability fields that differ, old -> new).
    """

    headline: pd.DataFrame
    ops: pd.DataFrame
    categories: pd.DataFrame
    findings: pd.DataFrame
    attribution: Attribution
    identical_bytes: bool = False
    selection: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """All pieces as JSON-safe records (NaN -> None, timestamps ISO 8601) plus the attribution's summary, basis
        (metric and runs), change and counts of appeared, vanished and below-cut ops."""
        import json

        def recs(df: pd.DataFrame) -> list[dict[str, Any]]:
            records: list[dict[str, Any]] = json.loads(df.to_json(orient="records", date_format="iso"))
            return records

        return {
            "headline": recs(self.headline),
            "ops": recs(self.ops),
            "categories": recs(self.categories),
            "findings": recs(self.findings),
            "summary": self.attribution.summary,
            "identical_bytes": self.identical_bytes,
            "change_basis": self.attribution.basis,
            "metric": self.attribution.metric,
            "step_time_change_us": self.attribution.step_time_change_us,
            "step_time_change_source": self.attribution.step_time_change_source,
            "top_share": self.attribution.top_share,
            "n_appeared": len(self.attribution.appeared),
            "n_vanished": len(self.attribution.vanished),
            "n_below_cut": len(self.attribution.below_cut),
            "selection": list(self.selection),
            "warnings": list(self.warnings),
        }


#: the headline's columns a narrow terminal loses first (xprof's figures, the start time, the throughput)
HEADLINE_DROPPED_FIRST = [
    "profiler_avg_step_ms",
    "input_bound_pct",
    "started_at",
    "throughput_eps",
    "throughput_def",
    "case_label",
]
FINDING_COLUMNS = ["side", "run_id", "code", "severity", "message", "figure", "value", "threshold"]
HEADLINE_COLUMNS = [
    "side",
    "run_id",
    "version",
    "case",
    "case_label",
    "started_at",
    "median_step_ms",
    "throughput_eps",
    "throughput_def",
    "profiler_avg_step_ms",
    "input_bound_pct",
    "verdict",
]


def answering_run(db_url: str, model: str, version: str, case: str) -> tuple[Mapping[str, Any], str]:
    """The run that stands for ``version`` of ``model`` in ``case`` when two versions are compared: the run
    ``perfwatch gate MODEL VERSION`` answers with (``sql/queries/gate.sql``, the one rule: the newest paired ABBA
    verdict of the version, else its newest run; A/A calibration gates left out), or, where that run failed, the
    version's newest successful run (a failed run has no numbers to compare).

    Returns:
        (the run, a ``tasks.store.reads.latest_runs`` row; one line saying which run it is and why, e.g. ``v2:
        run 3, as perfwatch gate tiny 2 answers: the newest paired ABBA gate of the version; the newer run 4
        (inconclusive, history-lookback) is not a paired gate and does not override it``).

    Raises:
        ComparisonUnavailable: no model of that name, or no successful run of the version in the case.
    """
    from tasks.cli.history import answered_by
    from tasks.records import version_label
    from tasks.store import queries, reads

    successful = _latest(db_url, model, version, case)
    if not successful:
        raise ComparisonUnavailable(f"no successful run of {model} version {version} in case {case}")
    rows = queries.run_query("gate", db_url, model=model, version=version, case_name=case)
    label, gate = version_label(version), f"perfwatch gate {model} {version}"
    if rows.empty:  # only A/A calibration gates of the version: its newest successful run
        run = successful[0]
        return run, f"{label}: run {run['run_id']}, its newest successful run (`{gate}` has no run to answer with)"
    r = rows.iloc[0]
    if r["status"] == "success":
        rid = int(r["run_id"])
        run = (
            next((x for x in successful if int(x["run_id"]) == rid), None) or reads.successful_runs(db_url, [rid])[rid]
        )
        stories = reads.verdict_stories([rid, int(r["newest_run_id"])], db_url)
        return run, f"{label}: run {rid}, as `{gate}` answers: {answered_by(r, stories)}"
    run = successful[0]
    return run, (
        f"{label}: run {run['run_id']}, its newest successful run (`{gate}` answers with run {int(r['run_id'])}, "
        f"which failed at {r['failed_stage']}: it has no numbers to compare)"
    )


def compare_versions(
    db_url: str, model: str, from_version: str, to_version: str, case: str | None = None, *, top_n: int = 10
) -> VersionComparison:
    """Compare the run that answers for ``from_version`` with the one that answers for ``to_version`` of
    ``model`` (:func:`answering_run`: ``perfwatch gate``'s rule, so ``compare`` and ``gate`` name the same run;
    the comparison's ``selection`` says which and why).

    ``case`` (e.g. ``train-bs16``): compare runs of that case; default: the newest case of ``to_version``
    that ``from_version`` also has, the others named in the selection (left out). Where the two answering runs
    were measured in different environments (comparability keys differ), ``from_version``'s newest run in the
    case in ``to_version``'s environment stands for it instead (said in the selection), else the comparison
    carries a warning naming the fields that differ. Op times are µs per step: each op's share of
    its run's profiled-window op self-time (per profiled step, ``params.profiled_steps``) scaled to the run's
    measured median step time (profiler off), so the op deltas add up to the change of the measured medians
    that the headline reports, on wall time (``tasks.analysis.attribution.attribute_runs``, the attribution the
    run page's verdict evidence holds for the same two runs; ``Attribution.basis`` names them; raw window
    self-times when a run lacks its median). The attribution's warnings name a profiled window that is not
    representative of its run's measured steps (``tasks.analysis.attribution.window_warnings``). ``top_n``: how
    many ops the summary names; the ``ops`` frame holds every op.

    Raises ComparisonUnavailable naming the model / version / case when there is nothing to compare, and
    ValueError when a run records no ``profiled_steps``.
    """
    from tasks.records import version_label as vl

    to_runs = _latest(db_url, model, to_version, case)
    if not to_runs:
        raise ComparisonUnavailable(
            f"no successful run of {model} version {to_version}" + (f" in case {case}" if case else "")
        )
    notes: list[str] = []
    if case is None:  # the newest case of to_version that from_version has too; the others are said
        to_cases = list(dict.fromkeys(r["case"] for r in to_runs))
        from_cases = list(dict.fromkeys(r["case"] for r in _latest(db_url, model, from_version, None)))
        common = [c for c in to_cases if c in from_cases]
        if not common:
            raise ComparisonUnavailable(
                f"no case that both {vl(from_version)} and {vl(to_version)} of {model} have a successful run of "
                f"({vl(to_version)}: {to_cases}; {vl(from_version)}: {from_cases or 'none'})"
            )
        case = common[0]
        left = [f"{c} (both: pass --case {c})" for c in common[1:]]
        left += [f"{c} ({vl(to_version)} only)" for c in to_cases if c not in from_cases]
        left += [f"{c} ({vl(from_version)} only)" for c in from_cases if c not in to_cases]
        if left:
            notes.append(
                f"case {case} compared (the newest case of {vl(to_version)} that {vl(from_version)} also has); "
                "left out: " + ", ".join(left)
            )
    from_runs = _latest(db_url, model, from_version, case)
    if not from_runs:
        other = sorted({r["case"] for r in _latest(db_url, model, from_version, None)})
        raise ComparisonUnavailable(
            f"no successful run of {model} version {from_version} in case {case}"
            + (f" (it has runs in {other}; pass --case)" if other else "")
        )
    (a, why_a), (b, why_b) = (answering_run(db_url, model, v, case) for v in (from_version, to_version))
    a, why_a, warning = _same_environment(db_url, a, why_a, b, from_runs, from_version, to_version)
    vc = _compare_sides(db_url, {"from": a, "to": b}, top_n=top_n)
    return replace(vc, selection=(why_a, why_b, *notes), warnings=(warning,) if warning else ())


def _same_environment(
    db_url: str,
    a: Mapping[str, Any],
    why_a: str,
    b: Mapping[str, Any],
    from_runs: list[Any],
    from_version: str,
    to_version: str,
) -> tuple[Mapping[str, Any], str, str | None]:
    """The from side measured in the to side's environment: ``a`` (the run that answers for ``from_version``)
    where its comparability key is ``b``'s; else the newest successful run of ``from_version`` in the case
    (``from_runs``) that has ``b``'s key, said in the selection line; else ``a`` with a warning naming the
    comparability fields that differ (old -> new, ``absent`` where a side lacks one).

    Returns:
        (the from run, its selection line, the warning or None).
    """
    from tasks.analysis.environment import diff_fingerprints
    from tasks.records import version_label as vl
    from tasks.store import reads

    envs = reads.run_environments(db_url, [int(r["run_id"]) for r in (*from_runs, a, b)])
    ka, kb = envs.get(int(a["run_id"])), envs.get(int(b["run_id"]))
    if ka is None or kb is None or ka[0] == kb[0]:
        return a, why_a, None
    changes = [c for c in diff_fingerprints(ka[1], kb[1]) if c.affects_comparability]
    fields = "; ".join(f"{c.field} {c.old} -> {c.new}" for c in changes) or "the comparability key"
    same = next((r for r in from_runs if envs.get(int(r["run_id"]), ("",))[0] == kb[0]), None)
    if same is not None:
        return (
            same,
            f"{vl(from_version)}: run {same['run_id']}, its newest successful run in the environment of "
            f"{vl(to_version)}'s run {b['run_id']} (run {a['run_id']}, which `perfwatch gate` answers with, was "
            f"measured in another environment: {fields})",
            None,
        )
    return (
        a,
        why_a,
        f"WARNING: runs {a['run_id']} ({vl(from_version)}) and {b['run_id']} ({vl(to_version)}) were measured in "
        f"different environments ({fields}), and {vl(from_version)} has no run in the environment of run "
        f"{b['run_id']}: the change mixes the model's with the environment's; measure both in one environment "
        f"(perfwatch run MODEL --version {to_version} --paired)",
    )


def compare_runs(db_url: str, run_a: int, run_b: int, *, top_n: int = 10) -> VersionComparison:
    """Compare two stored runs, ``run_a`` (from, the baseline side) and ``run_b`` (to), of any versions or
    cases, as :func:`compare_versions` compares two versions' newest runs: the same headline, op deltas
    (µs per step, scaled to the two runs' measured medians so they add up to the change of the medians),
    categories and findings (the history pages' comparison page).

    Raises ComparisonUnavailable naming the run that is not a successful run in the store, and ValueError
    when a run records no ``profiled_steps``.
    """
    from tasks.store import reads

    rows = reads.successful_runs(db_url, [run_a, run_b])
    for rid in (run_a, run_b):
        if rid not in rows:
            raise ComparisonUnavailable(f"run {rid} is not a successful run in the store: nothing to compare")
    return _compare_sides(db_url, {"from": rows[run_a], "to": rows[run_b]}, top_n=top_n)


def _compare_sides(db_url: str, sides: dict[str, Any], *, top_n: int) -> VersionComparison:
    """The comparison of two ``latest_runs``-shaped rows, ``sides["from"]`` and ``sides["to"]``."""
    import pandas as pd

    from tasks.analysis.attribution import attribute_runs
    from tasks.records import RunOps, case_label
    from tasks.records import version_label as vl
    from tasks.store import reads

    run_ops: dict[str, RunOps] = {}
    for side, r in sides.items():
        ops = reads.run_ops(db_url, r["run_id"])
        if ops is None:  # deleted since it was listed
            raise ComparisonUnavailable(f"run {r['run_id']} ({side} version {r['version']}) is no longer in the store")
        run_ops[side] = ops
    a = attribute_runs(
        run_ops["from"],
        run_ops["to"],
        labels=(
            f"run {sides['from']['run_id']} ({vl(sides['from']['version'])})",
            f"run {sides['to']['run_id']} ({vl(sides['to']['version'])})",
        ),
        top_n=top_n,
    )
    headline = pd.DataFrame(
        [
            {"side": side, **{k: r[k] for k in HEADLINE_COLUMNS if k not in ("side", "case_label")}}
            | {"case_label": case_label(r["params"])}
            for side, r in sides.items()
        ],
        columns=HEADLINE_COLUMNS,
    )
    ops = a.ops_frame().sort_values("delta_us_per_step", ascending=False, kind="stable").reset_index(drop=True)
    findings = pd.DataFrame(
        [
            {"side": side, "run_id": r["run_id"], **{k: f.get(k) for k in FINDING_COLUMNS[2:]}}
            for side, r in sides.items()
            for f in reads.run_findings(db_url, r["run_id"])
        ],
        columns=FINDING_COLUMNS,
    )
    digests = reads.run_digests(db_url, [r["run_id"] for r in sides.values()])
    same = digests.get(sides["from"]["run_id"]) is not None and (
        digests.get(sides["from"]["run_id"]) == digests.get(sides["to"]["run_id"])
    )
    return VersionComparison(
        headline=headline,
        ops=ops,
        categories=a.categories_frame(),
        findings=findings,
        attribution=a,
        identical_bytes=same,
    )


def _headline_text(vc: VersionComparison) -> str:
    from tasks.records import case_title, throughput_pair_text  # never two definitions compared
    from tasks.records import version_label as vl

    h = vc.headline.set_index("side")
    f, t = h.loc["from"], h.loc["to"]
    ratio = t["median_step_ms"] / f["median_step_ms"] if f["median_step_ms"] else float("nan")
    text = (
        f"median step time {vl(f['version'])} (run {f['run_id']}) {f['median_step_ms']:.3f} ms -> "
        f"{vl(t['version'])} (run {t['run_id']}) {t['median_step_ms']:.3f} ms: x{ratio:.3f} "
        f"({(ratio - 1):+.1%}; two processes' medians); "
        f"{throughput_pair_text(f['throughput_eps'], f['throughput_def'], t['throughput_eps'], t['throughput_def'])}; "
        f"case {case_title(t['case'], t['case_label'])}"
    )
    if vc.identical_bytes:
        text += (
            f"\nnote: {vl(f['version'])} and {vl(t['version'])} are byte-identical (same sha256): the x{ratio:.3f} is "
            "drift between the two runs' processes, not a change of the model. A paired gate measures both "
            f"in one process: perfwatch run MODEL --version {t['version']} --paired"
        )
    return text


#: a medians' ratio within this relative distance of the verdict's ratio is the same figure, as printed (3 decimals)
SAME_FIGURE = 0.0005


def verdict_figure(vc: VersionComparison, story: Any) -> dict[str, Any]:
    """Which of ``perfwatch compare``'s figures is the verdict's, and why another differs: the candidate's
    (``to``) run's verdict story (``tasks.records.VerdictStory``, ``tasks.store.reads.verdict_stories``)
    beside the ratio of the two runs' measured medians that the headline prints (two processes, each timed on
    its own).

    Returns:
        ``medians_ratio`` (to/from median step time; None when a median is missing), ``verdict`` (the story,
        ``tasks.services.story.story_dict``; None when the run has none), ``marked`` (the verdict's figure
        line, marked ``<- the verdict's figure``) and ``note`` (one line: they agree, or why they differ: a
        paired gate measured both versions in one process so drift between processes cancels; a history
        verdict compared with its lookback baselines; the verdict's baseline is another run or version; CPU
        time decided).
    """
    from tasks.services.story import baseline_text, figure_text, story_dict

    h = vc.headline.set_index("side")
    f, t = h.loc["from"], h.loc["to"]
    medians = (
        float(t["median_step_ms"] / f["median_step_ms"])
        if f["median_step_ms"] and t["median_step_ms"] == t["median_step_ms"]
        else None
    )
    out: dict[str, Any] = {"medians_ratio": medians, "verdict": None, "marked": None, "note": None}
    if story is None or story.ratio is None:
        out["note"] = (
            f"run {t['run_id']} has no verdict ratio ({story.verdict if story else 'no comparison'}): the medians' "
            "ratio above is the only figure"
        )
        out["verdict"] = story_dict(story) if story is not None else None
        return out
    out["verdict"] = story_dict(story)
    base = f" against {baseline_text(story)}" if baseline_text(story) else ""
    if story.led_by_other:  # another figure than step time made the regression: it is the verdict's figure
        out["marked"] = (
            f"verdict of run {t['run_id']}: regression on {'; '.join(story.regressed_on)} <- the verdict's figure; "
            f"step time: {figure_text(story)} ({story.step_verdict or 'no verdict'}){base} ({story.method_text})"
        )
    else:
        out["marked"] = (
            f"verdict of run {t['run_id']}: {story.verdict}, {figure_text(story)}{base} ({story.method_text}) "
            "<- the verdict's figure"
        )
    medians_text = f"x{medians:.3f}" if medians is not None else "the medians' ratio"
    why = []
    if medians is not None and abs(medians / story.ratio - 1) <= SAME_FIGURE and story.metric != "cpu":
        out["note"] = f"the verdict's ratio and the medians' {medians_text} agree"
        return out
    if story.metric == "cpu":
        why.append("the verdict is on the runner's CPU time per step (a busy host), the medians on wall time")
    if story.method == "paired-abba":
        why.append(
            "the verdict's paired gate timed both versions in one process, block by block (ABBA), so drift between "
            f"processes cancels; {medians_text} divides the medians of two runs, each timed in its own process"
        )
    elif story.method == "history-lookback":
        why.append(
            f"the verdict compares run {t['run_id']} with the median of its lookback baselines "
            f"({story.baseline_runs or 'several'} accepted runs) and allows for drift between processes; "
            f"{medians_text} divides the medians of two single runs"
        )
    if story.baseline_version and str(story.baseline_version) != str(f["version"]):
        why.append(f"its baseline is v{story.baseline_version}, not v{f['version']}")
    elif (
        story.baseline_run_id is not None
        and story.baseline_run_id != int(f["run_id"])
        and story.method != "paired-abba"
    ):
        why.append(f"its baseline is run {story.baseline_run_id}, not run {f['run_id']}")
    out["note"] = f"why {medians_text} differs from the verdict's {story.ratio:.3f}: " + "; ".join(
        why or ["other samples"]
    )
    return out


def register(app: typer.Typer) -> None:
    """Add the ``compare`` command to the perfwatch CLI."""

    @app.command("compare")
    def compare_cmd(
        model: Annotated[str, typer.Argument(help="Model name in the store.")],
        from_version: Annotated[
            str,
            typer.Option("--from", help="Baseline version (3, or keras3.15.1-1a2b3c4d for a keras.applications case)."),
        ],
        to_version: Annotated[str, typer.Option("--to", help="Candidate version (as --from).")],
        case: Annotated[
            str | None,
            typer.Option(help="Case, e.g. train-bs16 (default: the newest case of --to that --from also has)."),
        ] = None,
        top: Annotated[int, typer.Option(help="Show the N ops that grew most (0: all).")] = 10,
        fmt: Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")] = Format.table,
    ) -> None:
        """Compare two versions, each by the run perfwatch gate answers with (its newest paired ABBA verdict,
        else its newest run; its newest successful run where that one failed), said for each: step time (the
        medians' ratio, two processes), throughput and verdicts, the verdict's own figure marked with why the
        two differ; the ops
        whose self-time per step grew most (µs and relative, appeared/vanished) with their share of the
        step-time change; the change by op category; the diagnosis findings of each run."""
        import pandas as pd

        from tasks.cli.context import settings as _settings
        from tasks.cli.history import unknown_model_message
        from tasks.records import stored_version

        try:
            url = _settings().database_url
            if msg := unknown_model_message(url, model):
                raise ComparisonUnavailable(msg)
            from_version, to_version = stored_version(from_version), stored_version(to_version)
            vc = compare_versions(url, model, from_version, to_version, case, top_n=top or 10)
        except (ComparisonUnavailable, ValueError) as e:
            typer.echo(f"perfwatch compare: {e}", err=True)
            raise typer.Exit(1) from e
        ops = vc.ops[OPS_COLUMNS] if not top else vc.ops[OPS_COLUMNS].head(top)
        sections = {"headline": vc.headline, "ops": ops, "categories": vc.categories, "findings": vc.findings}
        from tasks.store.reads import verdict_stories

        to_run = int(vc.headline.set_index("side").loc["to", "run_id"])
        figure = verdict_figure(vc, verdict_stories([to_run], url).get(to_run))
        if fmt in (Format.json, Format.csv):  # the warning beside the data, where a script's reader looks
            for line in vc.warnings:
                typer.echo(f"perfwatch compare: {line}", err=True)
        if fmt is Format.json:
            print(
                json.dumps(
                    {**vc.to_dict(), "ops": json.loads(ops.to_json(orient="records")), "verdict_figure": figure},
                    indent=2,
                )
            )
            return
        if fmt is Format.csv:
            for name, df in sections.items():
                print(f"# {name}")
                render(df, fmt)
            return
        a = vc.attribution
        titles = {
            "headline": f"{model}: v{from_version} vs v{to_version}",
            "ops": "ops whose self-time per step grew most (µs per profiled step; share = of the "
            f"{a.step_time_change_source.replace('_', ' ')} change)",
            "categories": "by op category (µs per profiled step)",
            "findings": "diagnosis findings",
        }
        for line in vc.warnings:  # first, above the figures it qualifies
            print(line)
        print(_headline_text(vc))
        for line in (figure["marked"], figure["note"]):  # which figure is the verdict's, and why another differs
            if line:
                print(line)
        for line in vc.selection:  # which run stands for each version: gate's rule
            print(line)
        print(f"op deltas: {a.basis}")
        print("\n".join(ln.rstrip(":") for ln in a.summary.splitlines() if not ln.startswith(" ")))
        if fmt is Format.table:  # short headers and the op's type beside its name, so names are not cut
            sections["ops"] = pd.DataFrame(
                {
                    "#": range(1, len(ops) + 1),
                    "Δ µs/step": ops["delta_us_per_step"],
                    "relative": ops["relative_change"],
                    "share": ops["share_of_change"],
                    "status": ops["status"],
                    "base µs/step": ops["baseline_us_per_step"],
                    "cand µs/step": ops["candidate_us_per_step"],
                    "category": ops["category"],
                    "op (type, host/device)": ops["op_name"]
                    + " ("
                    + ops["op_type"]
                    + ", "
                    + ops["host_or_device"]
                    + ")",
                }
            )
        for name, df in sections.items():
            if fmt is Format.markdown:
                print(f"\n### {titles[name]}\n")
            # too narrow a terminal: an op's name goes under the table, whole, after its rank; the headline keeps
            # the runs, versions, medians and verdicts
            render(df, fmt, title=titles[name], under=["op (type, host/device)"], drop=HEADLINE_DROPPED_FIRST)
