"""The ``perfwatch`` command line (typer + rich).

Every listing takes ``--format table|csv|json|markdown``. Commands read the store named by
``PERFWATCH_DATABASE_URL`` (default: the SQLite file under ``PERFWATCH_HOME``).

Start-up: importing this module (what ``perfwatch --help`` pays) loads typer and rich but
never pandas, SQLAlchemy (the store), scipy, Great Expectations, TensorFlow or the pydantic records; every
command imports what it needs in its body (``tests/unit/cli/test_cli_startup.py`` checks it;
``bench/cli_startup.py`` times it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from tasks.cli import (  # the command groups' modules: each defines ``register(app: typer.Typer)``, called below
    COLD_STEP_DEFAULT_TOLERANCE,
    DEFAULT_MEASURED_STEPS,
    MEMORY_DEFAULT_TOLERANCE,
    baseline,
    calibrate,
    changes,
    compare,
    db,
    doctor,
    env,
    hardware,
    history,
    ingest,
    publish,
    sweep,
)
from tasks.cli.context import STORE_ERROR_EXIT
from tasks.cli.context import settings as _settings
from tasks.cli.history import EXIT_CODES_HELP
from tasks.cli.render import Format, render
from tasks.settings import Settings

if TYPE_CHECKING:
    import pandas as pd
    from typer import _click  # the click typer vendors: TyperGroup.invoke takes its Context


class _StoreErrorsInOneLine(TyperGroup):
    """The one place that maps store errors, for every command and group: a ``StoreError`` (store unreachable,
    schema newer than this perfwatch, URL unreadable) is printed as one line on stderr naming the store
    (password masked), exit code ``STORE_ERROR_EXIT``, instead of a traceback or a command's own code."""

    def invoke(self, ctx: _click.Context) -> Any:  # as TyperGroup.invoke: the command's result
        try:
            return super().invoke(ctx)
        except Exception as e:
            engine = sys.modules.get("tasks.store.engine")  # not loaded: no command touched the store
            if engine is None or not isinstance(e, engine.StoreError):
                raise
            typer.echo(f"perfwatch: {e}", err=True)
            raise typer.Exit(STORE_ERROR_EXIT) from e


app = typer.Typer(
    help="perfwatch: scheduled TensorFlow profiling and step-time regression gates.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=_StoreErrorsInOneLine,
)
demo_app = typer.Typer(help="The demo's model store.", no_args_is_help=True)
app.add_typer(demo_app, name="demo")

FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="table, csv, json or markdown")]


def runs_frame(db_url: str, model: str | None = None, last: int | None = None) -> pd.DataFrame:
    """Runs as a DataFrame, oldest first: run_id, started_at, model, version, case, status, trigger,
    median_step_ms (our timer) with its 95% interval and n (``tasks.cli.figures.median_columns``:
    median_step_low_ms, median_step_high_ms, median_step_n, median_step_estimable; the samples read for the rows
    listed only), median_cpu_ms, median_wait_ms (process CPU time, run-queue wait, ms) with their n,
    throughput_eps (examples/s), the latency and scenario columns, verdict (``failed@<stage>`` for a failed run),
    error (first line). The named query ``sql/queries/runs.sql`` via ``tasks.store.queries.runs``."""
    import pandas as pd

    from tasks.cli.figures import median_columns
    from tasks.store.queries import runs as runs_query
    from tasks.store.reads import load_samples

    df = runs_query(model, last, db_url)
    ids = [int(i) for i, n in zip(df["run_id"], df["n_measured"], strict=True) if pd.notna(n) and n]
    samples = load_samples(db_url, ids) if ids else {}
    at = df.columns.get_loc("median_wait_ms") + 1  # after the three medians, each before its interval and n
    for k, (name, values) in enumerate(median_columns(df["run_id"], df.pop("n_measured"), samples).items()):
        df.insert(at + k, name, pd.Series(values, index=df.index, dtype=object))
    return df


def qps_cell(row: Mapping[str, Any]) -> str | None:
    """A ``runs`` table cell of a server run's rates (``tasks.store.queries.scenario_columns``): a search's
    ``max 473 q/s (issued; 8 rates, unstable: search_non_monotonic)``, ``max none (8 rates)``, or a fixed rate's
    ``49.8 achieved at 50 offered (issued 50)``; None for another scenario."""
    import pandas as pd

    def num(k: str) -> float | None:
        v = row.get(k)
        return None if v is None or pd.isna(v) else float(v)

    offered, issued, achieved = num("server_offered_qps"), num("server_issued_qps"), num("server_achieved_qps")
    if offered is None:
        return None
    points = num("server_points")
    if points is not None:
        best = num("server_max_qps")
        unstable = row.get("server_findings")
        note = f"{points:.0f} rates" + (f", unstable: {unstable}" if isinstance(unstable, str) and unstable else "")
        return f"max {best:.4g} q/s (issued; {note})" if best is not None else f"max none ({note})"
    issued_text = "?" if issued is None else f"{issued:.4g}"
    return f"{achieved or 0:.4g} achieved at {offered:.4g} offered (issued {issued_text})"


#: ``perfwatch runs``' columns a terminal too narrow for the table leaves out first, in this order
RUNS_DROPPED_FIRST = ("median_wait_ms", "median_cpu_ms", "throughput_def", "throughput_eps", "started_at")


@app.command()
def runs(
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    last: Annotated[int | None, typer.Option(help="Only the last N runs.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """List runs from the store: run id, model, version, case and its readable label, inputs fed, median step
    time (ms), median CPU time and run-queue wait per measured step (ms; the wait only where some run recorded
    it), throughput, verdict and its reason. The table leaves out the case's axes (mode, batch size, precision,
    xla, strategy, quantization), which the case name spells out (train-bs16-mixed_bfloat16-xla), the status
    (the verdict says failed@<stage>) and trigger, columns no listed run has a value in, and the label column
    when no case has a label, and the model column when one model is listed (the title names it); what each
    run was fed (inputs) and each verdict's story follow the table, one line per run with a ratio or a reason,
    each failed run's error, and each infer/tflite run's latency percentiles with their intervals and batch
    count. csv, json and markdown have every column, and decision: the verdict's story (json: an object; csv
    and markdown: its line). An unknown --model exits 1 naming the models there are."""
    # typer prints this docstring as the command's help: developer notes go in comments. The story is
    # tasks.services.story (story_line under the table, story_dict in json).
    import pandas as pd

    from tasks.cli.history import titled_cases, unknown_model_message

    url = _settings().database_url
    if model is not None and (msg := unknown_model_message(url, model)):
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(1)
    df = runs_frame(url, model, last)
    from tasks.services.story import led_by_figure, reason_text, story_dict, story_line
    from tasks.store.reads import verdict_stories

    ids = [int(i) for i in df["run_id"]]
    stories = verdict_stories(ids, url)
    title = "perfwatch runs"
    if fmt == Format.json:  # each run's verdict with its story (tasks.services.story.story_dict)
        df["decision"] = [story_dict(stories[i]) if i in stories else None for i in ids]
    elif fmt != Format.table:
        df["decision"] = [story_line(stories[i]) if i in stories else None for i in ids]
    if fmt == Format.table:  # the case name spells the axes out (it starts with the mode)
        from tasks.store.queries import AXIS_COLUMNS

        # status: the verdict says failed@<stage>; the error goes under the table, where it is read whole
        # trigger: in csv and json (the story under the table says a paired gate)
        df = df.drop(columns=[*AXIS_COLUMNS, "status", "trigger"], errors="ignore")
        errors = df.pop("error")
        from tasks.cli.figures import MEDIAN_COLUMNS, counted_cell, median_cell

        # each median with its interval and n: the step time's from its samples, CPU time and wait their n
        df["median_step_ms"] = [
            median_cell(p, lo, hi, n)
            for p, lo, hi, n in zip(
                df["median_step_ms"],
                df["median_step_low_ms"],
                df["median_step_high_ms"],
                df["median_step_n"],
                strict=True,
            )
        ]
        for col in ("median_cpu_ms", "median_wait_ms"):
            df[col] = [counted_cell(v, n) for v, n in zip(df[col], df.pop(col.replace("_ms", "_n")), strict=True)]
        # a GPU run's CPU time is the host thread's, most of it waiting for the GPU: no measure of the GPU's work
        df["median_cpu_ms"] = [
            f"{c} host, waits on GPU" if isinstance(c, str) and pd.notna(d) else c
            for c, d in zip(df["median_cpu_ms"], df["peak_device_bytes"], strict=True)
        ]
        df = df.drop(columns=list(MEDIAN_COLUMNS))
        for col in ("median_wait_ms", "median_cpu_ms", "inputs"):  # no run recorded it (older runs, no schedstat)
            if df[col].isna().all():
                df = df.drop(columns=[col])
        if df["safe_mode"].astype(bool).all():  # the default: a column only when some run turned it off
            df = df.drop(columns=["safe_mode"])
        from tasks.cli.figures import figure_texts, lead_columns, memory_text, p99_cell

        lat = [c for c in df.columns if c.startswith(("latency_", "server_"))]
        scenario = [c for c in ("scenario", "scenario_throughput_eps", "bound_outcome") if c in df.columns]
        records = df[lat].to_dict(orient="records")
        scenarios = [
            x if isinstance(x, str) else None for x in (df["scenario"] if "scenario" in df else [None] * len(df))
        ]
        p99 = [p99_cell(r) for r in records]
        qps = [qps_cell(r) for r in records]
        at = df.columns.get_loc("throughput_eps") + 1
        if any(c is not None for c in qps):  # server runs: the rates offered, issued and achieved, a search's max
            df.insert(at, "qps", qps)
        if any(c is not None for c in p99):  # infer/tflite runs: their p99 with its interval and n (server: per query)
            df.insert(at, "p99_latency_ms", p99)
        df = df.drop(columns=lat + scenario)
        # the case's metrics: line (Case.metrics) orders the figures each reason line leads with, and the
        # columns when every run listed shares one line
        lines = [m.split(",") if isinstance(m, str) else None for m in df.pop("metrics")]
        rss, dev = df.pop("peak_rss_bytes"), df.pop("peak_device_bytes")
        memory = [memory_text(r, d) for r, d in zip(rss, dev, strict=True)]
        leads = [
            figure_texts(
                m, median_ms=med, throughput_eps=eps, peak_rss_bytes=r, peak_device_bytes=d, latency=q, scenario=sc
            )
            if m
            else None
            for m, med, eps, r, d, q, sc in zip(
                lines, df["median_step_ms"], df["throughput_eps"], rss, dev, p99, scenarios, strict=True
            )
        ]
        shared = lines[0] if lines and all(m == lines[0] for m in lines) else None
        if shared and "memory_usage" in shared:
            df.insert(df.columns.get_loc("throughput_eps") + 1, "peak_memory", memory)
        df = df[lead_columns(list(df.columns), shared)]
        on_cpu = df.pop("metric") == "cpu"  # the deciding metric, in the verdict's cell (its own column in csv/json)
        # a regression another figure made (VerdictStory.led_by_other) names that figure in the cell, not the step
        # time's metric
        other = [led_by_figure(stories.get(int(i))) for i in df["run_id"]]
        df.loc[on_cpu, "verdict"] = df.loc[on_cpu, "verdict"].astype(str) + " (CPU time)"
        df["verdict"] = [f"regression (on {o})" if o else v for v, o in zip(df["verdict"], other, strict=True)]
        df = titled_cases(df, fmt, "case")  # the label beside the stable name, in one cell
        reasons = df.pop("reason")  # a sentence each: under the table, where it is read whole
        # what each run was fed: a secondary detail, long (names, shapes, dtypes, ranges), under the table so
        # the main columns keep their width at 100 columns
        fed = df.pop("inputs") if "inputs" in df.columns else pd.Series([None] * len(df))
        if len(df) and df["model"].nunique() == 1:  # one model: named in the title, its column room for the case
            title = f"perfwatch runs of {df['model'].iloc[0]}"
            df = df.drop(columns=["model"])
    # what a narrow terminal leaves out first: the secondary figures, never the verdict (a table that left out the
    # verdict and kept the median run-queue wait answered the wrong question at 100 columns)
    render(df, fmt, title=title, drop=RUNS_DROPPED_FIRST)
    if fmt == Format.table:  # under the table, whole: each verdict's story, each infer/tflite run's latency
        from tasks.analysis.percentiles import latency_text
        from tasks.store.series import run_latencies

        latencies = run_latencies(ids, url)
        by_feed: dict[str, list[int]] = {}
        for run_id, feed in zip(ids, fed, strict=True):
            if isinstance(feed, str) and feed:
                by_feed.setdefault(feed, []).append(run_id)
        for feed, runs_fed in by_feed.items():
            typer.echo(f"  inputs of run{'s' if len(runs_fed) > 1 else ''} {', '.join(map(str, runs_fed))}: {feed}")
        # each line leads with the figures of the case's metrics: line (Case.metrics), then the story
        for run_id, reason, lead, error in zip(ids, reasons, leads, errors, strict=True):
            first = f"[{'; '.join(lead)}] " if lead else ""
            story = stories.get(run_id)
            if story is not None and (story.ratio is not None or reason_text(story)):
                typer.echo(f"  run {run_id} {first}{story_line(story)}")
            elif isinstance(reason, str) and reason:
                typer.echo(f"  run {run_id}: {first}{reason}")
            if isinstance(error, str) and error:  # a failed run: the first line of its error
                typer.echo(f"  run {run_id} {story_line(story) if story else 'failed'}: {error}")
            if latency := latencies.get(run_id):
                served = latency.get("serving") or {}
                what = "service time per batch" if served.get("scenario") == "server" else "latency per batch"
                typer.echo(f"  run {run_id} {what}: {latency_text(latency)}")
                if served:  # the scenario's own figures: a server's rates and per-query latency, a search's max
                    from tasks.analysis.serving import summary_line

                    typer.echo(f"  run {run_id} {summary_line(served)}")


# Help panels of `perfwatch run --help`: its options are the Case's fields, grouped by what they set.
_CASE, _MEASURE, _SERVING = "Case: what is measured", "Measurement", "Serving scenario (infer, tflite)"
_VERDICT, _PAIRED = "Verdict and baseline", "Paired gate (--paired, release gates)"


@app.command("run", epilog=EXIT_CODES_HELP)
def run_cmd(
    typer_ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(
            help="Model name in the model store, or with --backbone keras.applications an architecture "
            "(resnet50, efficientnetb0, mobilenet_v3_small, ...)."
        ),
    ],
    version: Annotated[str, typer.Option(help="Integer version, or 'latest'.", rich_help_panel=_CASE)] = "latest",
    batch_size: Annotated[
        int, typer.Option(help="Examples per step (a training step or an inference batch).", rich_help_panel=_CASE)
    ] = 16,
    mode: Annotated[
        str,
        typer.Option(
            help="What a step is: train (forward, backward, update), infer "
            "(one batch's forward pass; prints latency p50/p90/p99 with their 95% intervals, n and "
            "throughput) or tflite.",
            rich_help_panel=_CASE,
        ),
    ] = "train",
    precision: Annotated[
        str, typer.Option(help="fp32, mixed_float16 or mixed_bfloat16.", rich_help_panel=_CASE)
    ] = "fp32",
    xla: Annotated[bool, typer.Option(help="Compile the step with XLA (jit_compile).", rich_help_panel=_CASE)] = False,
    strategy: Annotated[
        str, typer.Option(help="none, or mirrored (MirroredStrategy).", rich_help_panel=_CASE)
    ] = "none",
    quantization: Annotated[
        str, typer.Option(help="tflite mode: none, dynamic or int8.", rich_help_panel=_CASE)
    ] = "none",
    tflite_threads: Annotated[
        int | None,
        typer.Option(
            help="tflite mode: the interpreter's threads (names the case, -t4); default: the CPUs the runner may use.",
            rich_help_panel=_CASE,
        ),
    ] = None,
    min_top1_agreement: Annotated[
        float | None,
        typer.Option(
            help="Mixed precision, XLA or tflite: the least top-1 agreement (0..1) with the fp32 eager model's "
            "outputs on the same inputs; below it the run is a regression on output agreement.",
            rich_help_panel=_CASE,
        ),
    ] = None,
    max_output_rel_diff: Annotated[
        float | None,
        typer.Option(
            help="Mixed precision, XLA or tflite: the largest relative output difference from the fp32 eager model; "
            "above it the run is a regression on output agreement.",
            rich_help_panel=_CASE,
        ),
    ] = None,
    device: Annotated[
        str,
        typer.Option(
            help="auto, cpu (GPUs hidden, the CPU measured), gpu or tpu (refused where TensorFlow sees none); "
            "a non-auto kind names the case (train-bs16-gpu).",
            rich_help_panel=_CASE,
        ),
    ] = "auto",
    hardware: Annotated[
        str | None,
        typer.Option(
            help="A hardware label of the device kind, e.g. gpu-h100 (names the case).", rich_help_panel=_CASE
        ),
    ] = None,
    inputs: Annotated[
        str | None,
        typer.Option(
            help="How to feed the model, as JSON per input name: shape without the batch dimension, "
            'dtype, integer range [min, max), e.g. \'{"image": {"shape": [32, 32, 3]}}\'.',
            rich_help_panel=_CASE,
        ),
    ] = None,
    input_fn: Annotated[
        str | None,
        typer.Option(
            help="'package.module:function' returning a tf.data.Dataset of model-ready batches (the built-in "
            "ones: docs/models.md, Models, inputs and modes).",
            rich_help_panel=_CASE,
        ),
    ] = None,
    signature: Annotated[
        str, typer.Option(help="SavedModel signature called in infer mode.", rich_help_panel=_CASE)
    ] = "serving_default",
    safe_mode: Annotated[
        bool,
        typer.Option(
            help="Keras safe_mode when loading a .keras file; "
            "--no-safe-mode only for a model whose code (Lambda "
            "layers) you trust. Recorded with the run.",
            rich_help_panel=_CASE,
        ),
    ] = True,
    backbone: Annotated[
        str | None,
        typer.Option(
            help="keras.applications: MODEL names an architecture, built by the runner with random weights "
            "(weights=None, nothing downloaded) and versioned keras<version>-<config hash>.",
            rich_help_panel=_CASE,
        ),
    ] = None,
    input_shape: Annotated[
        str | None,
        typer.Option(
            help="--backbone only: one example's shape, e.g. 96,96,3 (default 224,224,3).", rich_help_panel=_CASE
        ),
    ] = None,
    classes: Annotated[
        int | None, typer.Option(help="--backbone only: output classes (default 1000).", rich_help_panel=_CASE)
    ] = None,
    deterministic: Annotated[
        bool,
        typer.Option(
            help="Run with TF op determinism (TF_DETERMINISTIC_OPS; names the case, -det).", rich_help_panel=_CASE
        ),
    ] = False,
    seed: Annotated[
        int,
        typer.Option(help="Seed of the synthetic inputs and weights (recorded with the run).", rich_help_panel=_CASE),
    ] = 0,
    label: Annotated[
        str | None,
        typer.Option(
            help="A readable name shown beside the case's stable name, e.g. 'slow image pipeline'; not part of "
            "the case's identity (a new label keeps its history and baseline).",
            rich_help_panel=_CASE,
        ),
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            help="The figures the verdict line leads with, in order, comma-separated: step_time, throughput, "
            "memory_usage, latency (default: step time, then throughput).",
            rich_help_panel=_CASE,
        ),
    ] = None,
    measured_steps: Annotated[
        int,
        typer.Option(
            help="Steps timed with the profiler off (a paired gate times as many of each version).",
            rich_help_panel=_MEASURE,
        ),
    ] = DEFAULT_MEASURED_STEPS,
    profiled_steps: Annotated[int, typer.Option(help="Steps run under the TF profiler.", rich_help_panel=_MEASURE)] = 5,
    warmup_reuse_days: Annotated[
        float,
        typer.Option(
            help="Reuse the steady-state step count of this case's newest warm-up on the same model bytes "
            "and environment within this many days instead of a warm-up process; 0: always warm "
            "up afresh.",
            rich_help_panel=_MEASURE,
        ),
    ] = 7.0,
    warmup_window: Annotated[
        int,
        typer.Option(
            help="The warm-up is steady when the coefficient of variation of its last this many steps is below "
            "--warmup-cv-max.",
            rich_help_panel=_MEASURE,
        ),
    ] = 5,
    warmup_cv_max: Annotated[
        float, typer.Option(help="The warm-up's steady coefficient of variation.", rich_help_panel=_MEASURE)
    ] = 0.05,
    warmup_max_steps: Annotated[int, typer.Option(help="Most steps of the warm-up.", rich_help_panel=_MEASURE)] = 60,
    telemetry_interval_ms: Annotated[
        int,
        typer.Option(
            help="How often device telemetry is sampled during the measured steps, ms (GPU: NVML; else host CPU "
            "and RSS); 1000 for server cases on a busy CPU host.",
            rich_help_panel=_MEASURE,
        ),
    ] = 100,
    allow_partial_batches: Annotated[
        bool,
        typer.Option(
            help="Time steps fed fewer examples than --batch-size (an input function's last batch) as fed; "
            "default: such a step fails the run.",
            rich_help_panel=_MEASURE,
        ),
    ] = False,
    scenario: Annotated[
        str,
        typer.Option(
            help="single-stream (one batch at a time), offline (batches back to back: throughput "
            "over the run) or server (Poisson arrivals at --target-qps; per-query latency, queueing included).",
            rich_help_panel=_SERVING,
        ),
    ] = "single-stream",
    target_qps: Annotated[
        float | None,
        typer.Option(
            help="server: the arrival rate, queries/s; with --search-qps the first rate tried.",
            rich_help_panel=_SERVING,
        ),
    ] = None,
    search_qps: Annotated[
        bool,
        typer.Option(
            help="server: bisect on the rate for the highest QPS whose --latency-percentile's 95% upper bound "
            "stays within --latency-bound-ms; every point is printed.",
            rich_help_panel=_SERVING,
        ),
    ] = False,
    latency_bound_ms: Annotated[
        float | None,
        typer.Option(
            help="single-stream/server: the latency bound, ms (met or missed per run).", rich_help_panel=_SERVING
        ),
    ] = None,
    latency_percentile: Annotated[
        float, typer.Option(help="The percentile the latency bound bounds (99: p99).", rich_help_panel=_SERVING)
    ] = 99.0,
    server_min_duration_s: Annotated[
        float,
        typer.Option(
            help="server: each rate's point lasts at least this long, s (more queries than --measured-steps "
            "where the rate is high).",
            rich_help_panel=_SERVING,
        ),
    ] = 1.0,
    tolerance: Annotated[
        float,
        typer.Option(help="Relative step-time change that counts (0.05: 5%).", rich_help_panel=_VERDICT),
    ] = 0.05,
    confidence: Annotated[
        float, typer.Option(help="Confidence level of the comparison's interval.", rich_help_panel=_VERDICT)
    ] = 0.99,
    lookback: Annotated[
        int, typer.Option(help="Accepted runs that form the history baseline.", rich_help_panel=_VERDICT)
    ] = 5,
    prior_between_sd: Annotated[
        float | None,
        typer.Option(
            help="History comparison: prior sd (log scale) of the drift of median step time between processes; "
            "default: estimated from the store's accepted runs, else 0.05.",
            rich_help_panel=_VERDICT,
        ),
    ] = None,
    max_other_cpu_share: Annotated[
        float,
        typer.Option(
            help="The host is busy (verdict inconclusive) when other processes took more than this share of its "
            "CPU time during the measurement.",
            rich_help_panel=_VERDICT,
        ),
    ] = 0.25,
    max_steal_share: Annotated[
        float,
        typer.Option(
            help="The host is busy (verdict inconclusive) when the hypervisor stole more than this share of its "
            "CPU time during the measurement.",
            rich_help_panel=_VERDICT,
        ),
    ] = 0.05,
    auto_accept: Annotated[
        bool,
        typer.Option(
            help="A sound run whose verdict is pass, no-baseline or improvement becomes the case's baseline (an "
            "environment change left undecided, env-changed, never does); --no-auto-accept keeps an ad-hoc run "
            "out of the baseline.",
            rich_help_panel=_VERDICT,
        ),
    ] = True,
    paired: Annotated[
        bool,
        typer.Option(
            help="Re-measure the baseline version in the same process (A/B), as a release gate does; with no "
            "baseline accepted, the newest earlier version measured; with none, exit 2 (nothing to pair with).",
            rich_help_panel=_PAIRED,
        ),
    ] = False,
    paired_blocks: Annotated[
        int | None,
        typer.Option(
            help="Most ABBA block pairs of the paired gate (it stops at the first look that decides); default: "
            "--measured-steps / --paired-block-steps.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
    paired_block_steps: Annotated[
        int,
        typer.Option(
            help="Steps per block of the paired gate (short blocks cancel more of the host's drift).",
            rich_help_panel=_PAIRED,
        ),
    ] = 1,
    paired_round_pairs: Annotated[
        int,
        typer.Option(
            help="Pairs between two looks of the sequential paired gate (the first look is at 32 pairs).",
            rich_help_panel=_PAIRED,
        ),
    ] = 16,
    paired_processes: Annotated[
        int | None,
        typer.Option(
            help="Most fresh processes of the paired gate, the unit of its interval: each times "
            "paired_blocks // paired_processes pairs, and the gate looks after each from the third on; "
            "1: one process (its interval from its steps). Unset: 6; a cross-environment gate: 40 process pairs.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
    baseline_runner: Annotated[
        str | None,
        typer.Option(
            help="A cross-environment gate: the command of side A's runner (another venv's or image's Python "
            "running perfwatch's runner); the gate runs this version in both environments.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
    baseline_env: Annotated[
        list[str] | None,
        typer.Option(
            help="A cross-environment gate: KEY=VALUE set for side A's runner only (repeat it), e.g. "
            "TF_NUM_INTRAOP_THREADS=1; the gate runs this version in both environments.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
    paired_offset_sd: Annotated[
        float | None,
        typer.Option(
            help="Sd (log scale) of the speed difference of two copies of one model in one process, which widens "
            "the paired interval; default: estimated from the store's A/A gates (perfwatch calibrate), else 0.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
    gate_percentile: Annotated[
        float | None,
        typer.Option(
            help="Also gate this percentile of the per-step times (99: p99 latency) from the same paired "
            "measurement; p99 needs 528 steps per version at confidence 0.99.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
    cold_step_tolerance: Annotated[
        float | None,
        typer.Option(
            help="Also gate the cold step (tracing, XLA compilation, one step) over the paired gate's processes: "
            "a slowdown past this relative change (0.5 = 50%) is a regression, and the gate goes on until it "
            f"decides; unset: judged at {COLD_STEP_DEFAULT_TOLERANCE}, the gate going on for it only while it looks "
            "past that.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
    memory_tolerance: Annotated[
        float | None,
        typer.Option(
            help="Also gate each version's resident memory (its load, build and cold step, where it was set up "
            "first) over the paired gate's processes, or each process's peak memory across environments: growth "
            "past this relative change (0.2 = 20%) is a regression, and the gate goes on until it decides; unset: "
            f"judged at {MEMORY_DEFAULT_TOLERANCE}, the gate going on for it only while it looks past that.",
            rich_help_panel=_PAIRED,
        ),
    ] = None,
) -> None:
    """Run the seven stages for one model version in this process, without Airflow, and print the run's
    figures and its verdict's story. Every option is the benchmark case's field of the same name, with its
    default (docs/models.md and docs/matrix.md). A failed stage is recorded in the
    store as a failed run; a bad option or a model or version that is not in the model store records nothing.
    """
    # typer prints this docstring as the command's help (exit codes: the epilog, EXIT_CODES_HELP, once).
    # The options are those tasks.stages.params.case_param_schema("cli") lists, with the Case's defaults and
    # limits (tests/unit/cli/test_run_options.py checks); the exit code is tasks.cli.history.exit_code's.
    import datetime as dt

    from pydantic import ValidationError

    from tasks.cli.stage_lines import progress_shown
    from tasks.records import Case, RunContext
    from tasks.stages.pipeline import RegressionDetected, raise_on_regression, run_case
    from tasks.store.engine import StoreError

    try:
        feeds = json.loads(inputs) if inputs is not None else None
    except json.JSONDecodeError as e:
        raise typer.BadParameter(
            f'--inputs is not JSON ({e}); expected e.g. \'{{"image": {{"shape": [32, 32, 3]}}}}\''
        ) from e
    try:
        case = Case.model_validate({**typer_ctx.params, "inputs": feeds})  # every option is the Case field
    except ValidationError as e:
        from tasks.cli.history import validation_message

        raise typer.BadParameter(validation_message(e, {"model": "MODEL"})) from e
    from tasks.cli.history import check_in_model_store

    if case.backbone is None:  # a keras.applications name is resolved by the runner's Keras, at the pull stage
        check_in_model_store(Settings.from_env().model_store, model, case.version)  # typo: nothing is recorded
    ctx = RunContext(
        dag_id="perfwatch_cli",
        dag_run_id=dt.datetime.now(dt.UTC).strftime("cli__%Y%m%dT%H%M%S%f"),
        trigger="cli",
        case=case,
    )
    try:
        settings = _settings(create=True)  # a first run makes the store
        with progress_shown():
            state = run_case(ctx, settings)
    except StoreError:
        raise  # one line, exit STORE_ERROR_EXIT (_StoreErrorsInOneLine)
    except Exception as e:  # noqa: BLE001 - every stage error is reported, and said whether it was recorded
        from tasks.analysis.failures import with_cause
        from tasks.stages.pipeline import failure_note

        note = failure_note(e)
        if note is not None and note.run_id is not None:
            where = f"recorded in the store as failed run {note.run_id} of {model!r}; see `perfwatch failures`"
        else:
            where = "the failure could NOT be recorded in the store" + (
                f": {note.detail}" if note is not None and note.detail else ""
            )
        typer.echo(f"error: {with_cause(f'{type(e).__name__}: {e}')}\n({where})", err=True)
        raise typer.Exit(2) from e
    v, run, archived = state.verdict, state.run, state.archived
    assert v is not None and run is not None and archived is not None  # run_case ran every stage
    story = run_story(state, settings.database_url)
    from tasks.analysis.percentiles import percentile_ci
    from tasks.cli.figures import figure_texts
    from tasks.store.reads import load_samples

    # the archived measured steps (the run's work dir is gone once it is archived)
    measured = load_samples(settings.database_url, [archived.run_id]).get(archived.run_id) or []
    figures = figure_texts(  # in the order of the case's metrics: line (Case.metrics)
        case.metrics,
        median_ms=run.median_step_ms,
        throughput_eps=run.throughput_eps,
        peak_rss_bytes=run.peak_rss_bytes,
        peak_device_bytes=run.peak_device_bytes,
        latency=run.latency_ms,
        throughput_note=" (as `runs`, `history`, the pages and /metrics give it)",
        median_ci=percentile_ci(measured, 50) if measured else None,  # the median with its interval and n
    )
    typer.echo(f"run {archived.run_id}: {', '.join(figures)}, archive {archived.archive_uri}")
    from tasks.services.story import story_lines

    for line in story_lines(story):  # the verdict's story, as gate, runs, history and the pages tell it
        typer.echo(line)
    # an unstable QPS search's findings are printed with the scenario's lines below (serving.serving_text)
    searched = {f.get("code") for f in ((run.latency_ms or {}).get("serving") or {}).get("findings") or []}
    for f in run.findings:  # the measurement's own warnings (recompiles, partial batches, an unsteady warm-up)
        if f.get("code") in searched:
            continue
        if f.get("severity") == "warning" and f"{f.get('code')}: " not in (v.reason or ""):
            typer.echo(f"  finding {f.get('code')}: {f.get('message')}")
    if case.scenario == "server" and case.gate_percentile is not None:  # which tail each gate measured
        label = f"p{case.gate_percentile:g}"
        if "tail" in v.evidence:
            typer.echo(
                f"  the paired {label} gate timed batches back to back: it gates the service time per batch, not "
                "the latency a query waits (no arrivals, no queueing)"
            )
        per_query = v.evidence.get("per_query_tail") or {}
        typer.echo(f"  {label} per query: " + str(per_query.get("reason") or per_query.get("skipped") or "not tested"))
    if lat := run.latency_ms:  # infer mode: the measured batches' latency (our timer), with intervals
        from tasks.analysis.percentiles import latency_text

        # the headline's median is the stored one (interpolated: the mean of the two middle steps of an even
        # count); these percentiles are nearest-rank (an observed batch), so p50 and the median may differ
        server = (lat.get("serving") or {}).get("scenario") == "server"
        what = "service time per batch" if server else "latency per batch"
        # the batches' own rate, named: not the run's throughput (the headline's, serving.run_throughput_eps)
        rate = (
            f"service capacity {lat['throughput_eps']:.1f} queries/s over the batches' busy time (queries served, "
            "padding not counted; not a rate the server delivered)"
            if server
            else f"{lat['throughput_eps']:.1f} examples/s over all batches (not the run's throughput above)"
        )
        typer.echo(
            f"{what} of {case.batch_size}: {latency_text(lat)}; max {lat['max']:.2f} ms; "
            f"{rate} (percentiles by nearest rank: p50 is a "
            "measured batch and may differ from the median above, the mean of the two middle ones)"
        )
        if served := lat.get("serving"):  # the scenario's figures (tasks.analysis.serving)
            from tasks.analysis.serving import serving_text

            for line in serving_text(served):
                typer.echo(f"  {line}")
    if case.backbone and state.pulled:  # a model by name: what the runner built, and that its weights are random
        typer.echo(
            f"model {state.pulled.version}: {state.pulled.source_uri}; agreement and accuracy-like figures "
            "compare untrained functions"
        )
        if built := state.pulled.built:
            typer.echo(
                f"  built {built['constructor']} under Keras {built['keras_version']}: {built['params']:,} parameters, "
                f"input {tuple(built['input_shape'])}, output {tuple(built['output_shape'])}, weights sha256 "
                f"{str(built.get('weights_sha256'))[:12]}, config sha256 {built['config_sha256'][:12]}"
            )
    if case.mode == "tflite" or case.precision != "fp32" or case.xla:  # agreement with the fp32 model's outputs
        from tasks.store.reads import run_tool_tables

        tables = run_tool_tables(settings.database_url, archived.run_id)
        if lite := tables.get("tflite"):
            typer.echo(tflite_summary(lite))
        if agree := tables.get("agreement"):
            typer.echo(agreement_summary(agree))
    from tasks.analysis.metric_gates import METRICS

    for key in METRICS:  # a paired gate's (cold step, model memory) or a cross-environment one's figures, each
        if gate := v.evidence.get(key):  # reason saying its tolerance (the case's, or its default)
            typer.echo(f"{key.replace('_', ' ')}: {gate['reason']}")
    from tasks.cli.env import env_change_summary

    if changed := env_change_summary(v.to_xcom()):
        typer.echo(changed)
    try:  # the answer and why its exit status: on stdout with the figures (a CI log of stdout keeps it)
        raise_on_regression(state)
    except RegressionDetected as e:
        typer.echo(str(e))
        raise typer.Exit(1) from e
    from tasks.cli.history import GATE_INCONCLUSIVE, exit_code

    # a no-baseline run that could have been compared (an earlier version measured; --paired with nothing to pair
    # with: tasks.stages.compare.uncompared_note) is undecided, as gate says of it
    uncompared = (v.evidence.get("uncompared") or {}).get("reason")
    if exit_code(v.verdict, uncompared=bool(uncompared)) == GATE_INCONCLUSIVE:  # undecided: not a pass for CI
        why = uncompared or v.reason or "no reason"
        typer.echo(f"exit {GATE_INCONCLUSIVE}: verdict {v.verdict} is undecided ({why})")
        raise typer.Exit(GATE_INCONCLUSIVE)


def run_story(state: Any, db_url: str) -> Any:
    """The ``tasks.records.VerdictStory`` of a finished ``RunState`` (``perfwatch run``), from its
    ``CompareRecord`` (``VerdictStory.from_compare``): the stored run id, the baseline run's version (a paired
    gate's re-measured version, else read from the store: ``tasks.store.reads.run_version``), the xplane
    files the parse stage read (its ``parsed.json`` ``xplane_paths``; none when that file is gone) and the run's
    acceptance as its case's baseline when the archive made it one (``tasks.store.reads.acceptances``)."""
    from pathlib import Path

    from tasks.records import VerdictStory, judged_profiles
    from tasks.store.reads import acceptances, run_version

    v = state.verdict
    paths: list[str] = []
    if state.parsed is not None and Path(state.parsed.parsed_path).is_file():
        paths = json.loads(Path(state.parsed.parsed_path).read_text()).get("xplane_paths") or []
    base = v.baseline_run_ids[0] if v.baseline_run_ids else None
    version = (v.evidence.get("paired") or {}).get("baseline_version") or run_version(db_url, base)
    run_id = state.archived.run_id
    story = VerdictStory.from_compare(v, run_id=run_id, baseline_version=version, profile=judged_profiles(paths))
    return story.model_copy(update={"accepted": acceptances([run_id], db_url).get(run_id)})


def tflite_summary(lite: dict[str, Any]) -> str:
    """One line of a tflite run's record (``tasks.runner.tflite``): what the model is (its ``label``, e.g.
    ``int8: int8 weights and activations, float32 I/O ...``; the quantization for a record without one),
    model size in bytes before and after conversion, conversion time (s), the agreement with the TF model on
    the same batches (max absolute difference; top-1 agreement, classifiers only) and, where recorded, the
    interpreter's threads and whether XNNPACK ran."""
    before, after = lite.get("size_bytes_before"), lite.get("size_bytes_after")
    size = (
        f"size {before / 2**20:.2f} MiB -> {after / 2**20:.2f} MiB (x{after / before:.2f})"
        if before and after
        else "size —"
    )
    agree = lite.get("agreement") or {}
    diff = agree.get("max_abs_diff")
    top1 = agree.get("top1_agreement")
    threads = ""
    if lite.get("num_threads") is not None:
        xnnpack = lite.get("xnnpack")
        xnn = "XNNPACK unknown" if xnnpack is None else ("XNNPACK on" if xnnpack else "XNNPACK off")
        threads = f"; {lite['num_threads']} interpreter thread(s), {xnn}"
    diff_text = "—" if diff is None else f"{diff:.3g}"
    return (
        f"tflite ({lite.get('label') or lite.get('quantization')}): {size}, converted in "
        f"{lite.get('conversion_s') or 0:.1f} s; agreement with TF: max |diff| {diff_text}, "
        f"top-1 {'—' if top1 is None else f'{100 * top1:.1f}%'}{threads}"
    )


def agreement_summary(agree: dict[str, Any]) -> str:
    """One line of a mixed-precision or XLA run's output agreement (``tasks.runner.agreement``, run_tables tool
    ``agreement``): ``outputs (mixed_float16, eager) against fp32, eager on 16 examples: max |diff| 0.00123, max
    relative diff 0.0021, top-1 100.0%`` (top-1 for classifier outputs only)."""
    diff, rel, top1 = agree.get("max_abs_diff"), agree.get("max_rel_diff"), agree.get("top1_agreement")
    diff_text = "—" if diff is None else f"{diff:.3g}"
    rel_text = "—" if rel is None else f"{rel:.3g}"
    return (
        f"outputs ({agree.get('candidate')}) against {agree.get('reference')} on {agree.get('examples')} examples: "
        f"max |diff| {diff_text}, max relative diff {rel_text}, top-1 {'—' if top1 is None else f'{100 * top1:.1f}%'}"
    )


@demo_app.command("build-store")
def demo_build_store(force: Annotated[bool, typer.Option(help="Rebuild existing versions.")] = False) -> None:
    """Write the demo model store (two MobileNetV2 versions) under PERFWATCH_MODEL_STORE."""
    from tasks.runner.zoo import build_store

    for p in build_store(Settings.from_env().model_store, force=force):
        typer.echo(f"model file: {p}")


@demo_app.command("build-zoo")
def demo_build_zoo(force: Annotated[bool, typer.Option(help="Rebuild existing models and images.")] = False) -> None:
    """Write the model zoo (a dynamic-shape CNN, a BERT-like encoder, an SSD-like detector, an LSTM, an
    export-only SavedModel, a Lambda-layer model: version 1 of zoo_* each) under PERFWATCH_MODEL_STORE,
    the example TFRecord images the built-in input functions read (PERFWATCH_IMAGES, else
    <PERFWATCH_HOME>/data/images), and <PERFWATCH_HOME>/zoo.yaml: every zoo case, a config for the nightly
    DAG (PERFWATCH_CONFIG)."""
    # the input functions: tasks.runner.input_fns; the zoo: tasks.runner.zoo
    import yaml

    from tasks.records import Case
    from tasks.runner.input_fns import images_dir
    from tasks.runner.zoo import ZOO, build_zoo, write_images, zoo_cases

    settings = Settings.from_env()
    cases = zoo_cases()
    for c in cases:
        Case.model_validate(c)  # a zoo case the Case would refuse fails here, before anything is built
    for name, path in build_zoo(settings.model_store, force=force).items():
        typer.echo(f"{name}: {path}  ({ZOO[name].about}; modes {', '.join(ZOO[name].modes)})")
    files = write_images(images_dir(), force=force)
    typer.echo(f"example images: {len(files)} TFRecord files in {images_dir()}")
    config = settings.home / "zoo.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump({"models": cases}, sort_keys=False, default_flow_style=None))
    typer.echo(
        f"zoo cases: {config} ({len(cases)} cases; run them all with PERFWATCH_CONFIG={config} and the "
        "nightly DAG, or one with e.g. `perfwatch run zoo_bert --mode infer --inputs "
        '\'{"attention_mask": {"min": 0, "max": 2}}\'`; docs/models.md: Models, inputs and modes)'
    )


@demo_app.command("baseline")
def demo_baseline(model: Annotated[str, typer.Option()] = "demo_mobilenet") -> None:
    """Between the demo's two DAG runs: say whether the newest run of version 1 became its case's baseline.
    When the compare stage refused to make it one by itself (a busy host, an unsteady warm-up, timed steps
    that compiled), print why and, unless an earlier run of version 1 is still its case's baseline (a second
    'make demo'), accept it explicitly, as a user would with 'perfwatch baseline accept RUN --by NAME --reason
    WHY', recorded as accepted by 'make demo', so that version 2's release gate has a baseline version to pair
    with. Exit 1 when version 1 has no successful run."""
    # why it was refused: the comparison's evidence["baseline_refused"]
    from sqlalchemy import select

    from tasks.cli.baseline import accept_run, baseline_frame
    from tasks.store import RunComparison, session_scope

    url = _settings().database_url
    df = runs_frame(url, model)
    v1 = df[(df["version"] == "1") & (df["status"] == "success")]
    if v1.empty:
        typer.echo(f"demo baseline: no successful run of {model} version 1", err=True)
        raise typer.Exit(1)
    run_id = int(v1.iloc[-1]["run_id"])
    active = baseline_frame(url, model)
    active = active[active["active"].astype(bool)]
    if run_id in set(active["run_id"]):
        typer.echo(f"demo baseline: version 1's run {run_id} is its case's baseline (accepted by itself)")
        return
    with session_scope(url) as s:
        evidence = s.scalar(select(RunComparison.evidence).where(RunComparison.run_id == run_id)) or {}
    refused = "; ".join(evidence.get("baseline_refused") or []) or f"its verdict was {v1.iloc[-1]['verdict']!r}"
    earlier = active[(active["version"] == "1") & (active["case"] == v1.iloc[-1]["case"])]
    if not earlier.empty:  # a second `make demo`: this run is judged against the earlier one, which stays
        typer.echo(
            f"demo baseline: version 1's newest run {run_id} was not made the baseline ({refused}); its case's "
            f"baseline stays version 1's run {int(earlier.iloc[0]['run_id'])}, which version 2's gate pairs with"
        )
        return
    reason = f"the demo's version 1, accepted explicitly although it was not made the baseline by itself: {refused}"
    accept_run(url, run_id, by="make demo", reason=reason)
    typer.echo(
        f"demo baseline: version 1's run {run_id} was not made the baseline by itself ({refused}); "
        f"the demo accepts it explicitly (perfwatch baseline accept {run_id} --by 'make demo' --reason ...)"
    )


@demo_app.command("follow")
def demo_follow() -> None:
    """Read an 'airflow dags test' log on stdin and print what 'make demo' shows of it, line by line as it
    comes: task starts and ends, failures, perfwatch's own lines with their UTC time, and a task's wait for its
    retry folded into a few lines."""
    # the filter: tasks.cli.follow
    from tasks.cli.follow import follow

    for line in follow(iter(sys.stdin.readline, "")):
        print(line, flush=True)


@demo_app.command("check")
def demo_check(model: Annotated[str, typer.Option()] = "demo_mobilenet") -> None:
    """Check the demo's outcome in the store: the newest run of v1 succeeded and the newest run of
    v2 was archived and flagged as a regression. Exit 1 otherwise."""
    from tasks.records import Verdict

    df = runs_frame(_settings().database_url, model)
    problems = []
    for version in ("1", "2"):
        mine = df[df["version"] == version]
        if mine.empty:
            problems.append(f"no run of version {version}")
            continue
        last = mine.iloc[-1]
        if last["status"] != "success":
            problems.append(f"version {version}: run {last['run_id']} failed: {last['error']}")
        elif version == "2" and last["verdict"] != Verdict.REGRESSION:
            problems.append(f"version 2: run {last['run_id']} verdict {last['verdict']!r}, expected 'regression'")
    if problems:
        typer.echo("demo check FAILED: " + "; ".join(problems), err=True)
        raise typer.Exit(1)
    v1 = df[df["version"] == "1"].iloc[-1]
    typer.echo(
        f"demo check: version 1 archived as run {v1['run_id']} (verdict {v1['verdict']}), "
        "version 2 flagged as a regression"
    )


# Command groups that live in their own modules, registered in this order (``perfwatch --help`` lists them so).
# Imported by name at the top, not by importlib.import_module: .ci/import_cycles.py sees these imports, and so a
# command module that imports this one back (calibrate did, for progress_shown) is a cycle that make check names.
for _module in (env, compare, history, baseline, db, changes, ingest, calibrate, publish, doctor, sweep, hardware):
    _module.register(app)


def main() -> None:  # pragma: no cover - console script shim
    """Console-script entry point."""
    sys.exit(app())
