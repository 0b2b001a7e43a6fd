"""Benchmark: real paired release gates, end to end through the product, under a background load it controls.

Run: ``.venv/bin/python bench/gates.py`` (the full grid of 3 loads x 4 variants at the default 1 gate per
cell: about 30 min on the 2-core dev machine; a gate took 35-60 s at load 0, about 2 min at 1 and 3 min at 3
busy processes per core, mostly its two runner processes' start, model loads and warm-up), ``--quick`` for a
smoke test (loads 0 and 1, the A/A and x1.05 gates, budget 96 pairs: about 7 min), ``--gates N`` for N gates
per cell (the rates are counts over N gates: use dozens for figures worth quoting; ``--loads`` and ``--heads``
narrow the grid).

What it does, in a fresh store under a temporary ``PERFWATCH_HOME`` (SQLite):

1. **Models.** A small CNN (32x32x3 input, three convolutions, a 512-wide dense layer, batch 32: tens of ms
   per training step on this CPU) as version 1, and variants that differ only in the width of the classifier
   head (``--heads``; a wider head is more work per step, like the 3000-class head of the issue's x1.053
   variant) as versions 2, 3, ... Built in a subprocess (TensorFlow is never imported here).
2. **True ratios.** Each variant against version 1 in ONE long runner process (the runner's ``paired`` mode,
   ``--true-pairs`` ABBA pairs of 1-step blocks), with no background load: the ratio is ``exp(mean log(B/A))``
   with its 95% interval (``tasks.analysis.stats.compare_paired``: batch means). These are the "true" ratios
   the gates are scored against ("about x1.03, x1.05, x1.10"; the exact figures are printed).
3. **Baseline.** Version 1 runs once through every stage (``tasks.stages.pipeline.run_case``), unpaired: its
   verdict is ``no-baseline`` and it becomes the active baseline.
4. **Gates.** Per load level (``--loads``: busy processes per core, 0, 1 and 3 by default, or ``tf``: two other
   TensorFlow training jobs, ``TFJobs``) the bench starts the
   background load itself (``BackgroundLoad``: single-threaded numpy matmul loops, one per busy process, each
   one core's worth of demand), waits ``LOAD_RAMP_S`` s, runs the gates, and stops the load (by process id).
   Each gate is a real release gate as ``perfwatch run MODEL --version V --paired`` runs it: the pipeline's
   stage functions (``tasks.stages.pipeline``: pull, profiled-run with the paired sequential gate, parse,
   baseline-compare, archive) with ``Case(paired=True, auto_accept=False)``; A/A gates are version 1 gated
   against itself, A/B gates a variant against version 1. The env-fingerprint record of the baseline run is
   reused by every gate (same host, same packages) and the warm-up stage runs for the first gate of each
   (load, variant) cell, its record reused by the cell's later gates: both only prepare the measurement; the
   verdict is decided by the paired gate and baseline-compare. Each gate's budget is the
   product's default (``--budget``, ``Case.paired_blocks``, 320 pairs); its profile process measures
   ``MEASURED_STEPS`` steps (they feed the history evidence and the profiled-window check, not the paired
   verdict). Gates of a load level are interleaved (A/A, x1.03, x1.05, x1.10, A/A, ...) so that drift hits
   every variant alike. All gates share one store, as a CI runner's store would: A/A gates found quiet feed the
   offset calibration of later gates (``tasks.analysis.calibration``).
5. **Reading the verdict.** Verdict, the metric that decided (``evidence["metric"]``: wall | cpu), ratio,
   interval, the verdict of the statistics alone (before the noise rule), host-busy flag, the share of the CPU
   other processes took, and the pairs spent (``evidence["paired"]["spent"]["pairs"]``; older evidence:
   ``n_candidate``/``blocks``) are read from the returned bundle, never recomputed here.

Printed per load level: /proc/loadavg at its start and end and the mean 1-minute load over its gates, the
false-alarm rate (A/A gates judged ``regression``), the detection rate per true ratio (A/B gates judged
``regression``), every cell's verdict counts (a real x1.10 must never ``pass``), and the median pairs spent.
Last line::

    gates: false_alarm_max=<pct>% detect5_load0=<pct>% detect5_load1=<pct>% pairs_median=<n> gates=<n>

(``false_alarm_max``: the highest A/A regression rate over the load levels; ``detect5_load0/1``: regression
rate of the variant nearest x1.05 at load 0 / 1 (``nan`` when not run); ``pairs_median``: over all gates.)
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = "gatebench"
BATCH = 32
MEASURED_STEPS = 40  #: the profile process's measured steps (the paired gate's budget is separate)
#: classifier widths of the variants (base: 10): about x1.03, x1.05, x1.10 on the dev machine (a 750-wide head
#: measured x1.061-x1.076 against the base, about +0.01% step time per class)
DEFAULT_HEADS = (300, 500, 1000)
BASE_HEAD = 10
DEFAULT_LOADS = (0, 1, 3)  #: busy processes per core
LOAD_RAMP_S = 5.0  #: seconds between starting the background load and the first gate
AA = "A/A"

MODEL_SCRIPT = """
import sys, keras
head, path = int(sys.argv[1]), sys.argv[2]
keras.utils.set_random_seed(1)
inp = keras.Input((32, 32, 3))
x = keras.layers.Conv2D(32, 3, activation="relu")(inp)
x = keras.layers.Conv2D(32, 3, activation="relu")(x)
x = keras.layers.MaxPooling2D()(x)
x = keras.layers.Conv2D(64, 3, activation="relu")(x)
x = keras.layers.GlobalAveragePooling2D()(x)
x = keras.layers.Dense(512, activation="relu")(x)
keras.Model(inp, keras.layers.Dense(head)(x)).save(path)
"""

BUSY_SCRIPT = """
import numpy as np
a = np.random.default_rng(0).standard_normal((200, 200))
while True:
    a = np.tanh(a @ a.T * 0.01)
"""


# ------------------------------------------------------------------------------------------- background load


class BackgroundLoad:
    """``n`` busy processes (``BUSY_SCRIPT``: a single-threaded numpy loop each) started and stopped by this
    object, by their process ids. Use as a context manager; ``n = 0`` starts nothing."""

    def __init__(self, n: int):
        if n < 0:
            raise ValueError(f"n = {n}: the number of busy processes must be >= 0")
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def start(self) -> BackgroundLoad:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", BUSY_SCRIPT], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            for _ in range(self.n)
        ]
        return self

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


TF_JOBS = 2  #: the ``tf`` load level's TensorFlow jobs (here and ``bench/busy.py``)
#: another team's TensorFlow job: a CNN trained on random batches, forever (default threading)
TF_JOB_SCRIPT = """
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras
keras.utils.set_random_seed(2)
inp = keras.Input((48, 48, 3))
x = keras.layers.Conv2D(32, 3, activation="relu")(inp)
x = keras.layers.Conv2D(64, 3, activation="relu")(x)
x = keras.layers.GlobalAveragePooling2D()(x)
m = keras.Model(inp, keras.layers.Dense(100)(x))
m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
xb = np.random.rand(64, 48, 48, 3).astype("float32"); yb = np.random.randint(0, 100, 64)
while True:
    m.train_on_batch(xb, yb)
"""


class TFJobs(BackgroundLoad):
    """``n`` other TensorFlow training processes (``TF_JOB_SCRIPT``), started and stopped by process id."""

    def start(self) -> TFJobs:
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", TF_JOB_SCRIPT], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            for _ in range(self.n)
        ]
        return self


def load_level(level: str, cpus: int) -> BackgroundLoad:
    """The background load of a level: ``"N"`` N busy processes per core, ``"tf"`` :data:`TF_JOBS` other
    TensorFlow training processes (:class:`TFJobs`: they contend for memory bandwidth, unlike busy loops)."""
    if level == "tf":
        return TFJobs(TF_JOBS)
    return BackgroundLoad(int(level) * cpus)


def loadavg() -> str:
    """``/proc/loadavg``'s first three fields (1, 5, 15-minute load), or ``os.getloadavg`` where it is absent."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------- reading verdicts


@dataclass(frozen=True)
class Gate:
    """One gate's outcome as the product reported it (``CompareRecord`` of baseline-compare)."""

    load: str  # busy processes per core ("0", "1", "3") or "tf" (other TensorFlow jobs)
    variant: str
    verdict: str  # pass | regression | improvement | inconclusive | ... | error
    statistics_verdict: str | None = None  # before the noise rule (evidence["verdict_statistics"])
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pairs: int | None = None
    budget: int | None = None
    stopped: str | None = None
    host_busy: bool | None = None
    busy_reason: str | None = None  # evidence["noise"]["reason"] ("host busy: ...")
    offset_sd: float | None = None
    wall_s: float = 0.0
    load1: float | None = None
    error: str | None = None
    stage_s: dict[str, float] = field(default_factory=dict)  # wall s per stage function run for this gate
    metric: str | None = None  # the metric that decided (evidence["metric"]: wall | cpu)
    other_cpu_share: float | None = None  # evidence["noise"]["host_load"]["other_cpu_share"]


def gate_from_verdict(
    verdict: Mapping[str, Any],
    *,
    load: str,
    variant: str,
    wall_s: float = 0.0,
    load1: float | None = None,
    stage_s: Mapping[str, float] | None = None,
) -> Gate:
    """A ``Gate`` from baseline-compare's record (``bundle["verdict"]``), reading the evidence defensively:
    pairs spent from ``evidence["paired"]["spent"]["pairs"]``, else ``n_candidate``, else ``blocks``; the
    budget from ``spent["max_pairs"]`` else ``blocks``; the statistics' own verdict from
    ``evidence["verdict_statistics"]`` (else the verdict); host busy from ``paired["host_busy"]`` or
    ``evidence["noise"]["busy"]``, and why from ``evidence["noise"]["reason"]``."""
    ev = verdict.get("evidence") or {}
    p = ev.get("paired") or {}
    spent = p.get("spent") or {}
    pairs = spent.get("pairs") or p.get("n_candidate") or p.get("blocks")
    noise = ev.get("noise") if isinstance(ev.get("noise"), Mapping) else {}
    busy = p.get("host_busy")
    if busy is None:
        busy = noise.get("busy")
    seq = p.get("sequential") or {}
    return Gate(
        load=load,
        variant=variant,
        verdict=str(verdict.get("verdict")),
        statistics_verdict=(ev.get("verdict_statistics") or {}).get("verdict") or verdict.get("verdict"),
        ratio=verdict.get("ratio"),
        ci_low=verdict.get("ci_low"),
        ci_high=verdict.get("ci_high"),
        pairs=int(pairs) if pairs else None,
        budget=spent.get("max_pairs") or p.get("blocks"),
        stopped=seq.get("stopped") or p.get("stopped_by"),
        host_busy=busy,
        busy_reason=noise.get("reason"),
        offset_sd=(ev.get("paired_offset") or {}).get("sd"),
        metric=ev.get("metric"),
        other_cpu_share=((noise.get("host_load") or {}) if isinstance(noise, Mapping) else {}).get("other_cpu_share"),
        wall_s=wall_s,
        load1=load1,
        stage_s=dict(stage_s or {}),
    )


def _rate(gates: Sequence[Gate], verdict: str = "regression") -> float:
    """Fraction of ``gates`` (errors left out) judged ``verdict``; nan when there are none."""
    done = [g for g in gates if g.verdict != "error"]
    return sum(g.verdict == verdict for g in done) / len(done) if done else math.nan


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal (``nan`` stays ``nan``)."""
    return "nan" if math.isnan(x) else f"{100 * x:.1f}"


def nearest_variant(true_ratios: Mapping[str, float], target: float = 1.05) -> str | None:
    """The A/B variant whose true ratio is nearest ``target`` (None without variants)."""
    return min(true_ratios, key=lambda v: abs(true_ratios[v] - target), default=None)


def summary_line(gates: Sequence[Gate], true_ratios: Mapping[str, float]) -> str:
    """The machine-readable last line (module docstring) from every gate and the variants' true ratios."""
    loads = list(dict.fromkeys(g.load for g in gates))
    fa = [r for load in loads if not math.isnan(r := _rate([g for g in gates if g.load == load and g.variant == AA]))]
    v5 = nearest_variant(true_ratios)

    def detect(load: str) -> float:
        return _rate([g for g in gates if g.load == load and g.variant == v5]) if v5 else math.nan

    pairs = [g.pairs for g in gates if g.pairs]
    med = f"{statistics.median(pairs):.0f}" if pairs else "nan"
    return (
        f"gates: false_alarm_max={pct(max(fa)) if fa else 'nan'}% detect5_load0={pct(detect('0'))}% "
        f"detect5_load1={pct(detect('1'))}% pairs_median={med} gates={len(gates)}"
    )


def level_report(load: str, gates: Sequence[Gate], true_ratios: Mapping[str, float]) -> list[str]:
    """Lines for one load level: false alarms, detection per true ratio, verdict counts, pairs spent."""
    here = [g for g in gates if g.load == load]
    out = []
    for variant in [AA, *true_ratios]:
        cell = [g for g in here if g.variant == variant]
        if not cell:
            continue
        counts = {
            v: sum(g.verdict == v for g in cell) for v in ("regression", "inconclusive", "pass", "improvement", "error")
        }
        busy = sum(bool(g.host_busy) for g in cell)
        on_cpu = sum(g.metric == "cpu" for g in cell)
        pairs = [g.pairs for g in cell if g.pairs]
        what = "false alarms" if variant == AA else f"detection of x{true_ratios[variant]:.3f}"
        med = f"{statistics.median(pairs):.0f}" if pairs else "-"
        out.append(
            f"  {variant:>6}: {what} {pct(_rate(cell))}% of {len(cell)}; "
            + ", ".join(f"{k} {n}" for k, n in counts.items() if n)
            + f"; host busy {busy}, decided on CPU time {on_cpu}; pairs median {med}"
        )
    pairs = [g.pairs for g in here if g.pairs]
    if pairs:
        out.append(
            f"  pairs spent at this load: median {statistics.median(pairs):.0f}, range {min(pairs)}-{max(pairs)}"
        )
    return out


# ------------------------------------------------------------------------------------------- running


def build_models(store: Path, heads: Iterable[int]) -> dict[str, tuple[str, int]]:
    """Write ``<store>/<MODEL>/<v>/model.keras``: version 1 the base (``BASE_HEAD`` classes), versions 2.. the
    variants. Returns variant name -> (version, head width); raises CalledProcessError when TF fails."""
    out = {AA: ("1", BASE_HEAD)}
    for version, head in enumerate([BASE_HEAD, *heads], start=1):
        path = store / MODEL / str(version) / "model.keras"
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-c", MODEL_SCRIPT, str(head), str(path)],
            check=True,
            capture_output=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        if version > 1:
            out[f"h{head}"] = (str(version), head)
    return out


@dataclass(frozen=True)
class TrueRatio:
    """A variant's step-time ratio over the base from one long in-process ABBA run (95% interval)."""

    ratio: float
    low: float
    high: float
    pairs: int
    base_median_ms: float


def run_paired(base: Path, variant: Path, pairs: int, work: Path, python: str):
    """One runner process in paired mode (``tasks.runner``'s ``PairedResult``): A = ``base``, B = ``variant``,
    ``pairs`` ABBA pairs of 1-step blocks after 20 warm-up steps each, batch :data:`BATCH`, in ``work``."""
    from tasks.runner import RunnerSpec, launch

    return launch(
        RunnerSpec(
            mode="paired",
            model_path=str(variant),
            baseline_model_path=str(base),
            out_dir=str(work),
            batch_size=BATCH,
            warmup_steps=20,
            blocks=pairs,
            block_steps=1,
        ),
        python,
    )


def measure_true_ratio(base: Path, variant: Path, pairs: int, work: Path, python: str) -> TrueRatio:
    """Run the runner's paired mode (``tasks.runner``) for ``pairs`` 1-step ABBA pairs, A = ``base``, B =
    ``variant``, and estimate the ratio with ``tasks.analysis.stats.compare_paired`` at 95%."""
    from tasks.analysis import stats

    r = run_paired(base, variant, pairs, work, python)
    a = [b.a_ms for b in r.blocks]
    b = [b.b_ms for b in r.blocks]
    res = stats.compare_paired(a, b, tolerance=0.05, confidence=0.95)
    return TrueRatio(
        ratio=res.ratio,
        low=res.ci_low,
        high=res.ci_high,
        pairs=len(a),
        base_median_ms=statistics.median(t for blk in a for t in blk),
    )


@dataclass
class Bench:
    """The bench's store, settings and per-cell prepared records."""

    home: Path
    budget: int
    env_record: dict[str, Any] = field(default_factory=dict)  # EnvRecord of the baseline run (XCom form)
    prepared: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)

    def settings(self):
        from tasks.settings import Settings

        return Settings.from_env({**os.environ, "PERFWATCH_HOME": str(self.home)})

    def case(self, version: str, *, paired: bool):
        from tasks.records import Case

        return Case(
            model=MODEL,
            version=version,
            batch_size=BATCH,
            measured_steps=MEASURED_STEPS,
            paired=paired,
            auto_accept=not paired,
            **({"paired_blocks": self.budget} if paired else {}),
        )

    def baseline(self) -> dict[str, Any]:
        """Version 1 through every stage, unpaired: the store's first accepted baseline."""
        from tasks.records import RunContext
        from tasks.stages.pipeline import run_case

        ctx = RunContext(dag_id="gatebench", dag_run_id="baseline", trigger="cli", case=self.case("1", paired=False))
        bundle = run_case(ctx, self.settings()).to_xcom()
        self.env_record = bundle["env"]
        return bundle["verdict"]

    def gate(self, load: str, variant: str, version: str, index: int) -> Gate:
        """One release gate through the stage functions (module docstring, step 4)."""
        from tasks.records import RunContext
        from tasks.stages import pipeline
        from tasks.stages.registry import stage

        settings = self.settings()
        t0 = time.perf_counter()
        timing: dict[str, float] = {}
        ctx = RunContext(
            dag_id="gatebench",
            dag_run_id=f"load{load}-{variant.replace('/', '')}-{index}",
            trigger="cli",
            case=self.case(version, paired=True),
        )
        try:
            bundle: dict[str, Any] = pipeline.run_stage(
                {"ctx": ctx.to_xcom()}, "pull-model-version", settings
            ).to_xcom()
            bundle["env"] = self.env_record  # the baseline run's fingerprint: same host, same packages
            prep = self.prepared.get((load, variant))
            stages = ["profiled-run", "parse", "baseline-compare", "archive"]
            if prep is None:
                stages.insert(0, "warm-up")
            else:
                bundle.update(prep)
            for stage_id in stages:
                t = time.perf_counter()
                bundle = pipeline.run_stage(bundle, stage_id, settings).to_xcom()
                timing[stage(stage_id).field] = time.perf_counter() - t
            self.prepared.setdefault((load, variant), {"warmup": bundle["warmup"]})
        except Exception as e:  # noqa: BLE001 - a failed gate is counted and shown, the bench goes on
            return Gate(
                load=load,
                variant=variant,
                verdict="error",
                wall_s=time.perf_counter() - t0,
                load1=os.getloadavg()[0],
                error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}",
                stage_s=timing,
            )
        return gate_from_verdict(
            bundle["verdict"],
            load=load,
            variant=variant,
            wall_s=time.perf_counter() - t0,
            load1=os.getloadavg()[0],
            stage_s=timing,
        )


def _gate_line(g: Gate) -> str:
    if g.verdict == "error":
        return f"    load {g.load} {g.variant:>6}: ERROR {g.error} ({g.wall_s:.0f} s)"
    ci = f"[{g.ci_low:.3f}, {g.ci_high:.3f}]" if g.ci_low is not None and g.ci_high is not None else "[-]"
    stat = f" (statistics: {g.statistics_verdict})" if g.statistics_verdict != g.verdict else ""
    ratio = f"{g.ratio:.3f}" if g.ratio is not None else "-"
    off = f" offset sd {g.offset_sd:.3f}" if g.offset_sd else ""
    stages = " + ".join(f"{k} {v:.0f}" for k, v in g.stage_s.items())
    return (
        f"    load {g.load} {g.variant:>6}: {g.verdict}{stat} on {g.metric} ratio {ratio} {ci}, "
        f"pairs {g.pairs}/{g.budget} "
        f"({g.stopped}){' HOST BUSY' if g.host_busy else ''}{off}; {g.wall_s:.0f} s ({stages}), "
        + (f"load1 {g.load1:.2f}" if g.load1 is not None else "load1 -")
        + (f", others' CPU share {g.other_cpu_share:.2f}" if g.other_cpu_share is not None else "")
        + (f"\n      {g.busy_reason}" if g.host_busy and g.busy_reason else "")
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Parse flags, run the bench (module docstring) and print its figures; last line machine-readable."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gates", type=int, default=1, help="gates per (load, variant) cell (default 1)")
    parser.add_argument(
        "--loads",
        default=",".join(map(str, DEFAULT_LOADS)),
        help="busy processes per core, or tf (other TensorFlow jobs), comma-separated (default 0,1,3)",
    )
    parser.add_argument(
        "--heads",
        default=",".join(map(str, DEFAULT_HEADS)),
        help="classifier widths of the A/B variants (default 300,500,1000)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="pairs per gate at most (default: the product's, Case.paired_blocks = 320)",
    )
    parser.add_argument("--true-pairs", type=int, default=600, help="pairs of each true-ratio run (default 600)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: loads 0,1; the A/A and x1.05 variants; budget 96; 200 true pairs; 1 gate",
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench's PERFWATCH_HOME (printed)")
    args = parser.parse_args(argv)
    from tasks.records import DEFAULT_MEASURED_STEPS

    loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    heads = [int(x) for x in args.heads.split(",") if x.strip()]
    budget = args.budget or DEFAULT_MEASURED_STEPS
    true_pairs, n_gates = args.true_pairs, args.gates
    if args.quick:
        loads, heads, budget, true_pairs, n_gates = [0, 1], [DEFAULT_HEADS[1]], args.budget or 96, 200, 1
    if n_gates < 1 or budget < 2 or true_pairs < 16 or any(not (x.isdigit() or x == "tf") for x in loads):
        parser.error("--gates >= 1, --budget >= 2, --true-pairs >= 16 and loads >= 0 are required")
    cpus = os.cpu_count() or 1
    t_start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="pw-gates-")
    home = Path(tmp) / "home"
    print(
        f"bench/gates.py {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}: {cpus} CPUs, loads {loads} busy "
        f"processes per core, heads {heads}, budget {budget} pairs, {n_gates} gate(s) per cell; home {home}; "
        f"/proc/loadavg {loadavg()}",
        flush=True,
    )
    bench = Bench(home=home, budget=budget)
    settings = bench.settings()
    variants = build_models(Path(settings.model_store), heads)
    true: dict[str, TrueRatio] = {}
    for name, (version, head) in variants.items():
        if name == AA:
            continue
        true[name] = measure_true_ratio(
            Path(settings.model_store) / MODEL / "1" / "model.keras",
            Path(settings.model_store) / MODEL / version / "model.keras",
            true_pairs,
            Path(tmp) / f"true-{name}",
            settings.runner_python,
        )
        t = true[name]
        print(
            f"true ratio {name} (head {head} vs {BASE_HEAD}): x{t.ratio:.4f} (95% CI {t.low:.4f}-{t.high:.4f}, "
            f"{t.pairs} pairs in one process; base median {t.base_median_ms:.1f} ms/step); loadavg {loadavg()}",
            flush=True,
        )
    ratios = {k: v.ratio for k, v in true.items()}
    base = bench.baseline()
    print(f"baseline: version 1 {base['verdict']} (accepted); {time.perf_counter() - t_start:.0f} s so far", flush=True)
    gates: list[Gate] = []
    for load in loads:
        with load_level(load, cpus):
            time.sleep(LOAD_RAMP_S if load != "0" else 0.0)
            start = loadavg()
            what = "other TensorFlow jobs" if load == "tf" else f"{int(load) * cpus} busy processes"
            print(f"\nload {load} ({what}): /proc/loadavg at start {start}", flush=True)
            for i in range(n_gates):
                for name, (version, _) in variants.items():
                    g = bench.gate(load, name, version, i)
                    gates.append(g)
                    print(_gate_line(g), flush=True)
            end = loadavg()
        level = [g for g in gates if g.load == load]
        mean1 = statistics.fmean(g.load1 for g in level if g.load1 is not None)
        print(f"load {load}: /proc/loadavg start {start}, end {end}; mean 1-min load at the gates' ends {mean1:.2f}")
        print("\n".join(level_report(load, gates, ratios)), flush=True)
    print(
        "\ntrue ratios: "
        + ", ".join(f"{k} x{v:.3f}" for k, v in ratios.items())
        + f"; x1.05 stands for {nearest_variant(ratios)}; total {time.perf_counter() - t_start:.0f} s; "
        f"/proc/loadavg {loadavg()}"
    )
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    print(summary_line(gates, ratios))


if __name__ == "__main__":
    main()
