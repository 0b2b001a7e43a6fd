"""``perfwatch compare MODEL --from V --to V``: how step time moved between two versions, and which ops moved.

Reads the store only (``tasks.explain.compare_versions``): the latest successful run of each version,
their op self-times per profiled step (µs, xprof framework_op_stats), op categories, and each run's
diagnosis findings.
"""

from __future__ import annotations

import json
from typing import Annotated

import pandas as pd
import typer

from tasks.explain import ComparisonUnavailable, VersionComparison, compare_versions
from tasks.report import Format, render

#: Shown op columns; the (long) op name last, so the table form keeps it readable.
OPS_COLUMNS = ["delta_us_per_step", "relative_change", "share_of_change", "status", "baseline_us_per_step",
               "candidate_us_per_step", "category", "op_type", "host_or_device", "op_name"]


def _headline_text(vc: VersionComparison) -> str:
    h = vc.headline.set_index("side")
    f, t = h.loc["from"], h.loc["to"]
    ratio = t["median_step_ms"] / f["median_step_ms"] if f["median_step_ms"] else float("nan")
    return (f"median step time v{f['version']} (run {f['run_id']}) {f['median_step_ms']:.3f} ms -> "
            f"v{t['version']} (run {t['run_id']}) {t['median_step_ms']:.3f} ms: x{ratio:.3f} "
            f"({(ratio - 1):+.1%}); throughput {f['throughput_eps']:.1f} -> {t['throughput_eps']:.1f} examples/s; "
            f"case {t['case']}")


def register(app: typer.Typer) -> None:
    """Add the ``compare`` command to the perfwatch CLI."""

    @app.command("compare")
    def compare_cmd(model: Annotated[str, typer.Argument(help="Model name in the store.")],
                    from_version: Annotated[str, typer.Option("--from", help="Baseline version.")],
                    to_version: Annotated[str, typer.Option("--to", help="Candidate version.")],
                    case: Annotated[str | None, typer.Option(help="Case, e.g. train-bs16 (default: the newest "
                                                                  "run's case of --to).")] = None,
                    top: Annotated[int, typer.Option(help="Show the N ops that grew most (0: all).")] = 10,
                    fmt: Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")]
                    = Format.table) -> None:
        """Compare the latest successful runs of two versions: step time, throughput and verdicts; the ops
        whose self-time per step grew most (µs and relative, appeared/vanished) with their share of the
        step-time change; the change by op category; the diagnosis findings of each run."""
        from tasks.cli import _settings

        try:
            vc = compare_versions(_settings().database_url, model, from_version, to_version, case, top_n=top or 10)
        except (ComparisonUnavailable, ValueError) as e:
            typer.echo(f"perfwatch compare: {e}", err=True)
            raise typer.Exit(1) from e
        ops = vc.ops[OPS_COLUMNS] if not top else vc.ops[OPS_COLUMNS].head(top)
        sections = {"headline": vc.headline, "ops": ops, "categories": vc.categories, "findings": vc.findings}
        if fmt is Format.json:
            print(json.dumps({**vc.to_dict(), "ops": json.loads(ops.to_json(orient="records"))}, indent=2))
            return
        if fmt is Format.csv:
            for name, df in sections.items():
                print(f"# {name}")
                render(df, fmt)
            return
        a = vc.attribution
        titles = {"headline": f"{model}: v{from_version} vs v{to_version}",
                  "ops": "ops whose self-time per step grew most (µs per profiled step; share = of the "
                         f"{a.step_time_change_source.replace('_', ' ')} change)",
                  "categories": "by op category (µs per profiled step)",
                  "findings": "diagnosis findings"}
        print(_headline_text(vc))
        print("\n".join(ln.rstrip(":") for ln in a.summary.splitlines() if not ln.startswith(" ")))
        if fmt is Format.table:  # short headers and the op's type beside its name, so names are not cut
            sections["ops"] = pd.DataFrame({
                "Δ µs/step": ops["delta_us_per_step"], "relative": ops["relative_change"],
                "share": ops["share_of_change"], "status": ops["status"], "base µs/step": ops["baseline_us_per_step"],
                "cand µs/step": ops["candidate_us_per_step"], "category": ops["category"],
                "op (type, host/device)": ops["op_name"] + " (" + ops["op_type"] + ", " + ops["host_or_device"] + ")"})
        for name, df in sections.items():
            if fmt is Format.markdown:
                print(f"\n### {titles[name]}\n")
            render(df, fmt, title=titles[name])
