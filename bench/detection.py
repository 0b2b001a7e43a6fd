"""Benchmark (resampled, cached): how often perfwatch's final verdict alarms on real noise, and how often it
catches an injected slowdown. The fast companion of ``bench/gates.py`` (real gates end to end).

Run: ``.venv/bin/python bench/detection.py`` (analysis of the committed samples, a few minutes),
``--collect`` to re-collect the quiet-host samples first (real runner processes, about 25 min on the 2-core
machine), ``--collect-load`` to add self-vs-self processes measured under a background load the bench starts
itself (``bench/gates.py``'s ``BackgroundLoad``; ``--load-levels``, ``--per-level``), ``--real`` to also
judge the real heavier model variant, ``--trials N`` trials per level.

Samples (``bench/data/detection_samples.json``), all from the real runner (``python -m tasks.runner``) on the
demo model (MobileNetV2 α=0.35, 96×96×3, batch 16, random weights):

* ``history``: separate processes (mode ``profile``), a cold step, 10 warm-up steps, 100 measured steps;
* ``paired``: separate processes (mode ``paired``) measuring the model against ITSELF in ABBA order with
  1-step blocks, 320 block pairs each (the product's default budget); ``first_built`` (which version the
  runner drew to set up first); ``load_level`` (busy processes per core started by the bench, absent
  for the quiet-host collection), ``load1`` (1-min load average at the start) and, for processes collected
  since the runner records it, ``host_load`` (the runner's ``HostLoad`` over the pairs);
* ``heavy_history`` / ``heavy_paired``: the same for a heavier variant (input 98×98; B = heavy).

Every trial is judged by the product's own decision function, ``tasks.analysis.verdict.decide``, with every
rule that can change the verdict (the paired statistics of the sequential gate, the noise rule); nothing of
it is re-emulated here. What the bench supplies is what the product's stages would hand to ``decide``:

* paired (``paired-abba``): the gate's design is ``tasks.stages.profiled_run.gate_design`` with the offset
  and noise calibration ``tasks.stages.profiled_run.gate_setup`` would read from a store holding the OTHER
  self-vs-self processes as A/A gates (each judged whole by ``decide``, as the store would hold them). The gate
  stops at its first decisive look, measured in rounds of ``Case.paired_round_pairs`` pairs as the runner
  does (``verdict.look_decides`` decides each look, on the metric the verdict will decide on); its noise is
  ``tasks.analysis.verdict.judge_noise`` of the source
  process's host load and the gate's pair noise, as ``profiled_run`` judges it. Budget: the product's 320
  pairs, cut to the shortest process (``min(320, N)``): **no trial is longer than the data it is drawn from**.
  A trial draws one process and builds the gate's pairs by a moving-block bootstrap (Kuensch 1989) of
  ``BOOT_BLOCK`` = 37 consecutive pairs with random starts: **blocks longer than the statistic's batches (at
  most 16 pairs) and not aligned with them** (37 is no multiple of any batch size), so the drift correlation
  between neighbouring pairs is kept and batch edges do not coincide with block joins. Both ways are shown:
  ``centred`` (each process's pair ratios divided by its own mean ratio: a null world around ratio 1) and
  ``raw`` (uncentred: the pairs as measured, any offset or bias of the process included). The slowdown s
  multiplies every B step by (1+s);
* history (``history-lookback``): ``decide`` with ``case.lookback`` distinct baseline processes and a distinct
  candidate process (steps × (1+s)); the drift prior's input ``calibration_runs`` holds every process's
  median but the candidate's. No resampling of steps: a trial is whole processes;
* fixed110: candidate median > 1.10 × the newest baseline process's median (reference only).

A trial "alarms" when the final verdict is ``regression``. Last line::

    detection: false_alarm=<pct>% detect_5pct=<pct>% mde95=<pct>% centred_false_alarm=<pct>% \
centred_detect_5pct=<pct>% loaded_false_alarm_max=<pct>% pairs_median=<n> | history: false_alarm=<pct>% \
detect_5pct=<pct>% | fixed110: false_alarm=<pct>% detect_5pct=<pct>%

(the first group is the paired gate on the quiet-host processes' raw pairs, ``centred_*`` on the same pairs
centred; ``loaded_false_alarm_max``: the highest raw false-alarm rate over the processes of one load level
(``nan`` without any); mde95 = smallest injected level detected in >= 95% of quiet raw trials on a 1% grid
(bisection), ``>30`` if none; pairs_median = median pairs spent by the quiet raw trials at 0% and 5%.)
Trials draw their process from one load class at a time: quiet-host processes, then each load level's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.analysis import calibration, sequential, stats  # noqa: E402
from tasks.analysis.verdict import PairedBlocks, decide, judge_noise, look_decides  # noqa: E402
from tasks.records import Case, CompareInputs  # noqa: E402

DATA = ROOT / "bench" / "data" / "detection_samples.json"
LEVELS = (0.0, 0.02, 0.03, 0.05, 0.10)
BOOT_BLOCK = 37  #: pairs per bootstrap block: > sequential.MAX_BATCH_PAIRS (16) and a multiple of no batch size
PRODUCT_BUDGET = 320  #: the product's default gate budget (Case.paired_blocks for 320 measured steps)
MODEL_SCRIPT = """
import sys, keras
side, path = int(sys.argv[1]), sys.argv[2]
keras.utils.set_random_seed(1)
net = keras.applications.MobileNetV2(input_shape=(side, side, 3), alpha=0.35, weights=None, classes=10)
net.save(path)
"""
# Collection plan: rounds of (history base x2, paired base/base[, history heavy, paired base/heavy]).
ROUNDS = 6
HISTORY_PER_ROUND = 2
HEAVY_ROUNDS = (0, 2, 4)
HISTORY_STEPS = 100
WARMUP_STEPS = 10
COLLECT_BLOCKS = 320  # block pairs per self-vs-self process: the product's default budget, so no trial is cut
HEAVY_BLOCKS = 128
BATCH = 16


def _load1() -> float:
    return os.getloadavg()[0]


def _models(tmp: str) -> dict[str, str]:
    import subprocess

    models = {}
    for name, side in (("base", 96), ("heavy", 98)):
        models[name] = str(Path(tmp) / f"{name}.keras")
        subprocess.run(
            [sys.executable, "-c", MODEL_SCRIPT, str(side), models[name]],
            check=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            capture_output=True,
        )
    return models


def _paired_process(model: str, base: str, out_dir: str, blocks: int, t0: float) -> dict[str, Any]:
    """One self-vs-self (or A/B) paired runner process: its blocks, load and host load (when recorded)."""
    from tasks.runner import RunnerSpec, launch

    load = _load1()
    spec = RunnerSpec(
        mode="paired",
        model_path=model,
        baseline_model_path=base,
        out_dir=out_dir,
        batch_size=BATCH,
        warmup_steps=WARMUP_STEPS,
        blocks=blocks,
        block_steps=1,
    )
    r = launch(spec, sys.executable).model_dump(mode="json")
    return {
        "started": time.time() - t0,
        "load1": load,
        "host_load": r.get("host_load"),
        "first_built": r.get("first_built"),
        "blocks": [{"order": b["order"], "a_ms": b["a_ms"], "b_ms": b["b_ms"]} for b in r["blocks"]],
    }


def collect(path: Path) -> dict:
    """Run the quiet-host runner processes (module docstring) and write the samples to ``path`` (JSON)."""
    from tasks.runner import RunnerSpec, launch

    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="pw-detection-") as tmp:
        models = _models(tmp)
        out: dict = {
            "meta": {
                "model": "MobileNetV2 alpha=0.35 96x96x3 batch 16 (heavy: 98x98x3)",
                "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "cpus": os.cpu_count(),
                "warmup_steps": WARMUP_STEPS,
                "history_steps": HISTORY_STEPS,
                "block_steps": 1,
                "blocks": COLLECT_BLOCKS,
                "heavy_blocks": HEAVY_BLOCKS,
            },
            "history": [],
            "paired": [],
            "heavy_history": [],
            "heavy_paired": [],
        }

        def history(kind: str, i: int) -> None:
            load = _load1()
            spec = RunnerSpec(
                mode="profile",
                model_path=models[kind],
                out_dir=f"{tmp}/h_{kind}_{i}",
                batch_size=BATCH,
                warmup_steps=WARMUP_STEPS,
                measured_steps=HISTORY_STEPS,
                profiled_steps=0,
            )
            r = launch(spec, sys.executable).model_dump(mode="json")
            key = "history" if kind == "base" else "heavy_history"
            out[key].append({"started": time.time() - t0, "load1": load, "steps_ms": r["measured_step_times_ms"]})
            print(f"  {key}[{i}] load1={load:.2f} median {np.median(r['measured_step_times_ms']):.1f} ms", flush=True)

        for r in range(ROUNDS):
            for j in range(HISTORY_PER_ROUND):
                history("base", HISTORY_PER_ROUND * r + j)
            out["paired"].append(_paired_process(models["base"], models["base"], f"{tmp}/p_{r}", COLLECT_BLOCKS, t0))
            if r in HEAVY_ROUNDS:
                history("heavy", r)
                out["heavy_paired"].append(
                    _paired_process(models["heavy"], models["base"], f"{tmp}/ph_{r}", HEAVY_BLOCKS, t0)
                )
        out["meta"]["collect_s"] = round(time.time() - t0, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, separators=(",", ":")))
    return out


def collect_load(path: Path, levels: Sequence[int], per_level: int) -> dict:
    """Add ``per_level`` self-vs-self paired processes per load level (busy processes per core, started and
    stopped here by ``bench/gates.py``'s ``BackgroundLoad``) to the samples at ``path``."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gates import BackgroundLoad, loadavg

    data = json.loads(path.read_text())
    t0 = time.time()
    cpus = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="pw-detection-") as tmp:
        models = _models(tmp)
        for level in levels:
            with BackgroundLoad(level * cpus):
                time.sleep(5.0 if level else 0.0)
                for i in range(per_level):
                    p = _paired_process(models["base"], models["base"], f"{tmp}/l{level}_{i}", COLLECT_BLOCKS, t0)
                    p["load_level"] = level
                    p["loadavg_end"] = loadavg()
                    data["paired"].append(p)
                    print(
                        f"  paired at load {level}/core [{i}]: load1 {p['load1']:.2f} -> {p['loadavg_end']}; "
                        f"host load {json.dumps(p['host_load'])[:160]}",
                        flush=True,
                    )
    data["meta"].setdefault("load_collections", []).append(
        {
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "levels": list(levels),
            "per_level": per_level,
            "collect_s": round(time.time() - t0, 1),
        }
    )
    path.write_text(json.dumps(data, separators=(",", ":")))
    return data


# ---------------------------------------------------------------- analysis

_VAR_CACHE: dict[bytes, float] = {}
_product_log_median_var = stats._log_median_var


def _cached_log_median_var(x: np.ndarray, n_resamples: int, rng: np.random.Generator) -> float:
    """``stats._log_median_var`` memoised per process: the bootstrap variance of a log-median does
    not change when the run is scaled (an injected slowdown), so each process's variance is
    bootstrapped once (with the product's 999 resamples) instead of once per trial. Only the
    bootstrap's Monte Carlo noise differs from a fresh call."""
    key = np.round(x / np.median(x), 10).tobytes()
    if key not in _VAR_CACHE:
        _VAR_CACHE[key] = _product_log_median_var(x, n_resamples, rng)
    return _VAR_CACHE[key]


@dataclass(frozen=True)
class Process:
    """One self-vs-self paired process: per-pair A and B step times (ms, 1-step blocks), its load class and
    host load (the runner's, when recorded)."""

    a: np.ndarray
    b: np.ndarray
    load_class: str
    host_load: dict | None

    @property
    def log_centre(self) -> float:
        return float(np.mean(np.log(self.b / self.a)))


def processes(rows: list[dict]) -> list[Process]:
    """The paired processes of the samples file as ``Process``es; the load class is ``load<k>`` for those
    collected under k busy processes per core, else ``quiet``."""
    out = []
    for p in rows:
        a = np.array([float(np.median(b["a_ms"])) for b in p["blocks"]])
        b = np.array([float(np.median(b["b_ms"])) for b in p["blocks"]])
        level = p.get("load_level")
        out.append(
            Process(a=a, b=b, load_class="quiet" if level is None else f"load{level}", host_load=p.get("host_load"))
        )
    return out


def trial_case(procs: Sequence[Process]) -> Case:
    """The product's defaults, with the gate budget cut to the shortest process: ``min(320, N)`` pairs."""
    n = min(PRODUCT_BUDGET, min(p.a.size for p in procs))
    return Case(model="bench", paired_blocks=n)


def bootstrap_pairs(p: Process, n: int, rng: np.random.Generator, *, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    """n pairs from process ``p`` by the moving-block bootstrap (``BOOT_BLOCK`` consecutive pairs per block,
    random starts); n must not exceed the process's pairs. ``centred``: B divided by the process's mean ratio."""
    if n > p.a.size:
        raise ValueError(f"a trial of {n} pairs is longer than its process ({p.a.size} pairs)")
    block = min(BOOT_BLOCK, p.a.size)
    starts = rng.integers(p.a.size - block + 1, size=-(-n // block))
    idx = (starts[:, None] + np.arange(block)).ravel()[:n]
    b = p.b[idx] * (math.exp(-p.log_centre) if centred else 1.0)
    return p.a[idx], b


@dataclass(frozen=True)
class Setup:
    """What the store would give a gate before its first pair (``tasks.stages.profiled_run.GateSetup``)."""

    offset: calibration.Offset
    noise: calibration.NoiseCalibration


def stop_point(
    d: np.ndarray,
    case: Case,
    design: sequential.Design | None,
    *,
    host_load: dict | None = None,
    calibrated: calibration.NoiseCalibration | None = None,
) -> tuple[int, list[int], list[str]]:
    """Where the runner would stop: rounds of ``case.paired_round_pairs`` pairs, a look after each from
    ``sequential.MIN_LOOK_PAIRS`` on and at the budget, stop at the first look the product's stop rule decides
    (``tasks.analysis.verdict.look_decides``, as ``tasks.stages.profiled_run.paired_run`` asks it: the metric the
    verdict will decide on, here wall time or none, the samples having no CPU time; ``host_load`` the source
    process's, ``calibrated`` the gate's noise calibration). Returns the pairs, the looks and the metric each
    look was judged on. A fixed gate (no design) uses all pairs."""
    n = case.paired_blocks
    if design is None:
        return n, [n], []
    looks: list[int] = []
    stopping: list[str] = []
    for end in range(case.paired_round_pairs, n + case.paired_round_pairs, case.paired_round_pairs):
        end = min(end, n)
        if end < sequential.MIN_LOOK_PAIRS and end < n:
            continue
        looks.append(end)
        decided, metric = look_decides(
            d[:end], None, looks, design, case=case, host_load=host_load, calibrated=calibrated, gpu=False
        )
        stopping.append(metric)
        if decided or end >= n:
            return end, looks, stopping
    return n, looks, stopping


def judge(a: np.ndarray, b: np.ndarray, case: Case, setup: Setup, host_load: dict | None) -> dict[str, Any]:
    """One paired gate on pairs ``a``, ``b`` (ms) as the product decides it (module docstring); returns the
    final verdict, the statistics' own verdict, the pairs spent and ``evidence["paired"]``."""
    from tasks.stages.profiled_run import gate_design

    design = gate_design(case, setup.offset.sd)
    n, looks, stopping = stop_point(np.log(b / a), case, design, host_load=host_load, calibrated=setup.noise)
    paired = PairedBlocks(
        a=[[x] for x in a[:n]],
        b=[[x] for x in b[:n]],
        layout={
            "blocks": n,
            "block_steps": 1,
            "timed_steps": 2 * n,
            "wall_s": None,
            "orders": "",
            "stopped_by": None,
            "rounds": None,
        },
        gate={
            "design": design.model_dump(mode="json") if design else None,
            "look_pairs": looks,
            "stopping": stopping,
            "offset": setup.offset.model_dump(mode="json"),
            "calibrated_noise": setup.noise.model_dump(mode="json"),
        },
        host_load=host_load,
    )
    noise = judge_noise(case, host_load, paired, offset=setup.offset, calibrated=setup.noise, gpu=False)  # CPU host
    d = decide(
        list(b[:n]),
        case,
        CompareInputs(),
        env_data={},
        paired=paired,
        baseline_version="1",
        baseline_digest="same",
        noise=noise.model_dump(mode="json"),
    )
    p = d.evidence["paired"]
    return {
        "verdict": d.verdict,
        "statistics": (d.evidence.get("verdict_statistics") or {}).get("verdict", d.verdict),
        "pairs": (p.get("spent") or {}).get("pairs", n),
        "paired": p,
    }


def aa_setups(procs: Sequence[Process], case: Case) -> list[Setup]:
    """Per process i: the setup a store holding the OTHER processes as A/A gates gives (leave-one-out). Each
    other process is judged whole (its first ``case.paired_blocks`` pairs, raw) by :func:`judge` with a fresh
    store's setup, and its ``evidence["paired"]`` is what the store keeps."""
    fresh = Setup(offset=calibration.paired_offset_for_case(case, []), noise=calibration.calibrated_noise([]))
    n = case.paired_blocks
    gates = [judge(p.a[:n], p.b[:n], case, fresh, p.host_load)["paired"] for p in procs]
    return [
        Setup(
            offset=calibration.paired_offset_for_case(case, [g for j, g in enumerate(gates) if j != i]),
            noise=calibration.calibrated_noise([g for j, g in enumerate(gates) if j != i]),
        )
        for i in range(len(procs))
    ]


def paired_rates(
    procs: Sequence[Process], setups: Sequence[Setup], levels, trials: int, case: Case, rng, *, centred: bool
) -> dict[float, dict[str, Any]]:
    """Per injected level: alarm rate (final verdict ``regression``), verdict counts and median pairs spent. A
    trial draws one of ``procs``, bootstraps the gate's pairs from it and multiplies B by 1+s."""
    out = {}
    for s in levels:
        verdicts, pairs = [], []
        for _ in range(trials):
            i = int(rng.integers(len(procs)))
            a, b = bootstrap_pairs(procs[i], case.paired_blocks, rng, centred=centred)
            r = judge(a, b * (1 + s), case, setups[i], procs[i].host_load)
            verdicts.append(r["verdict"])
            pairs.append(r["pairs"])
        out[s] = {
            "alarm": verdicts.count("regression") / trials,
            "pairs_median": float(np.median(pairs)),
            "counts": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        }
    return out


def history_rates(
    runs: list[np.ndarray], levels, trials: int, case: Case, rng, candidates: list[np.ndarray] | None = None
) -> tuple[dict, dict]:
    """Alarm rates of the history verdict (``decide``, method history-lookback) and of the fixed 110% rule.

    Each trial draws a candidate process and ``case.lookback`` distinct other processes as the accepted
    baselines (fixed110: the newest of them alone); ``calibration_runs`` holds every process's median but the
    candidate's. ``candidates``: take the candidate from these instead (the real heavier variant)."""
    hist, fixed = {}, {}
    medians = [float(np.median(r)) for r in runs]
    for s in levels:
        h = f = 0
        for _ in range(trials):
            if candidates is None:
                c = int(rng.integers(len(runs)))
                others = [j for j in range(len(runs)) if j != c]
                cand = runs[c]
            else:
                others = list(range(len(runs)))
                cand = candidates[rng.integers(len(candidates))]
            base = [int(j) for j in rng.choice(others, size=min(case.lookback, len(others)), replace=False)]
            cand = cand * (1 + s)
            d = decide(
                list(cand),
                case,
                CompareInputs(
                    same_env=base,
                    samples={j: list(runs[j]) for j in base},
                    calibration_runs=[("1", medians[j]) for j in others],
                ),
                env_data={},
            )
            h += d.verdict == "regression"
            f += np.median(cand) > 1.10 * np.median(runs[base[0]])
        hist[s], fixed[s] = h / trials, f / trials
    return hist, fixed


def mde95(
    procs: Sequence[Process],
    setups: Sequence[Setup],
    trials: int,
    case: Case,
    rng,
    grid: Sequence[float] = tuple(x / 100 for x in range(1, 31)),
) -> tuple[float | None, dict[float, float]]:
    """Smallest level of ``grid`` detected (raw trials) at least 95% of the time, by bisection (detection grows
    with the slowdown); None when even the largest is not. Also returns every probed level's rate."""
    probed: dict[float, float] = {}

    def rate(s: float) -> float:
        if s not in probed:
            probed[s] = paired_rates(procs, setups, [s], trials, case, rng, centred=False)[s]["alarm"]
        return probed[s]

    lo, hi = 0, len(grid) - 1
    if rate(grid[hi]) < 0.95:
        return None, probed
    while lo < hi:
        mid = (lo + hi) // 2
        if rate(grid[mid]) >= 0.95:
            hi = mid
        else:
            lo = mid + 1
    return grid[lo], probed


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def analyse(data: dict, trials: int, real: bool) -> None:
    """Print the detection tables and the machine-readable last line (module docstring)."""
    t0 = time.perf_counter()
    stats._log_median_var = _cached_log_median_var  # see its docstring: speed only, same statistics
    procs = processes(data["paired"])
    case = trial_case(procs)
    meta = data["meta"]
    runs = [np.asarray(p["steps_ms"]) for p in data["history"]]
    meds = np.array([np.median(r) for r in runs])
    loads = [p["load1"] for p in data["history"] + data["paired"]]
    classes = {c: sum(p.load_class == c for p in procs) for c in sorted({p.load_class for p in procs})}
    print(
        f"samples: {meta['model']}, collected {meta['collected_at']} on {meta['cpus']} CPUs"
        + "".join(
            f"; + {c['per_level']} process(es) at load levels {c['levels']} per core ({c['at']})"
            for c in meta.get("load_collections", [])
        )
        + f"; 1-min load average at process start {min(loads):.1f}-{max(loads):.1f}"
    )
    print(
        f"history: {len(runs)} processes x {meta['history_steps']} measured steps; median step time "
        f"{meds.min():.1f}-{meds.max():.1f} ms, sd of log median between processes {np.std(np.log(meds), ddof=1):.3f}"
    )
    print(
        f"paired (same model as A and B): {len(procs)} processes ({', '.join(f'{k} {v}' for k, v in classes.items())}) "
        f"x {min(p.a.size for p in procs)}-{max(p.a.size for p in procs)} pairs of 1-step blocks; sd of pair log "
        f"ratio per process {', '.join(f'{np.std(np.log(p.b / p.a), ddof=1):.3f}' for p in procs)}; mean B/A "
        f"{', '.join(f'{math.exp(p.log_centre):.3f}' for p in procs)}"
    )
    print(
        f"gate: budget {case.paired_blocks} pairs (the product's {PRODUCT_BUDGET}, cut to the shortest process), "
        f"rounds of {case.paired_round_pairs}, tolerance {case.tolerance:.0%}, confidence {case.confidence:.0%}; "
        f"bootstrap blocks of {BOOT_BLOCK} pairs (statistic's batches at most {sequential.MAX_BATCH_PAIRS}); "
        f"{trials} trials per level; alarm = final verdict (tasks.analysis.verdict.decide) regression"
    )
    rng = np.random.default_rng(20260601)
    setups = aa_setups(procs, case)
    print(
        "offset / calibrated noise per process (from the others as A/A gates): "
        + ", ".join(f"{s.offset.sd:.4f} ({s.offset.source}) / {s.noise.sd_pair or float('nan'):.3f}" for s in setups)
    )
    quiet = [i for i, p in enumerate(procs) if p.load_class == "quiet"]
    q_procs, q_setups = [procs[i] for i in quiet], [setups[i] for i in quiet]
    raw = paired_rates(q_procs, q_setups, LEVELS, trials, case, rng, centred=False)
    cen = paired_rates(q_procs, q_setups, LEVELS, trials, case, rng, centred=True)
    loaded = {
        c: paired_rates(
            [p for p in procs if p.load_class == c],
            [s for p, s in zip(procs, setups, strict=True) if p.load_class == c],
            LEVELS,
            trials,
            case,
            rng,
            centred=False,
        )
        for c in classes
        if c != "quiet"
    }
    hist, fixed = history_rates(runs, LEVELS, max(100, trials // 2), case, rng)
    head = " | ".join(f"{c + ' raw':>10}" for c in loaded)
    print(
        f"\n{'slowdown':>8} | {'quiet raw':>10} | {'centred':>8} | {'pairs':>6} | {head}{' | ' if loaded else ''}"
        f"{'history':>8} | {'fixed110':>8} | quiet raw verdicts"
    )
    for s in LEVELS:
        r = raw[s]
        cols = " | ".join(f"{_pct(x[s]['alarm']):>9}%" for x in loaded.values())
        print(
            f"{s:8.0%} | {_pct(r['alarm']):>9}% | {_pct(cen[s]['alarm']):>7}% | {r['pairs_median']:>6.0f} | "
            f"{cols}{' | ' if loaded else ''}{_pct(hist[s]):>7}% | {_pct(fixed[s]):>7}% | "
            + ", ".join(f"{k} {v}" for k, v in r["counts"].items())
        )
    for c, x in loaded.items():
        print(
            f"{c} raw verdicts: "
            + "; ".join(f"{s:.0%}: " + ", ".join(f"{k} {v}" for k, v in x[s]["counts"].items()) for s in LEVELS)
        )
    print(
        "(row 0%: false-alarm rate; other rows: detection rate. quiet raw: moving-block bootstrap of the quiet-host "
        "processes' pairs as measured; centred: the same pairs centred on ratio 1 first; pairs: median pairs spent by "
        "the quiet raw gates; loadK raw: processes measured under K busy processes per core; history: the unpaired "
        "history verdict; fixed110: median > 110% of one baseline)"
    )
    mde, probed = mde95(q_procs, q_setups, trials, case, rng)
    mde_txt = f"{100 * mde:.0f}" if mde is not None else ">30"
    print(
        f"paired mde95 (quiet raw, bisection on a 1% grid, {trials} trials per probe: "
        + ", ".join(f"{100 * s:.0f}% {_pct(r)}%" for s, r in sorted(probed.items()))
        + f"): {mde_txt}%"
    )
    if real:
        _real(data, runs, case, trials, rng, setups)
    pairs = statistics.median([raw[0.0]["pairs_median"], raw[0.05]["pairs_median"]])
    loaded_fa = max((x[0.0]["alarm"] for x in loaded.values()), default=float("nan"))
    print(f"analysis took {time.perf_counter() - t0:.0f} s")
    print(
        f"detection: false_alarm={_pct(raw[0.0]['alarm'])}% detect_5pct={_pct(raw[0.05]['alarm'])}% "
        f"mde95={mde_txt}% centred_false_alarm={_pct(cen[0.0]['alarm'])}% "
        f"centred_detect_5pct={_pct(cen[0.05]['alarm'])}% loaded_false_alarm_max={_pct(loaded_fa)}% "
        f"pairs_median={pairs:.0f} | "
        f"history: false_alarm={_pct(hist[0.0])}% detect_5pct={_pct(hist[0.05])}% | "
        f"fixed110: false_alarm={_pct(fixed[0.0])}% detect_5pct={_pct(fixed[0.05])}%"
    )


def _real(data, runs, case, trials, rng, setups) -> None:
    """The real heavier variant (98x98 input): its true slowdown from all its pairs, each real A/B process judged
    as one gate, and resampled detection on it (raw bootstrap) against the same injected slowdown."""
    heavy = processes(data["heavy_paired"])
    d = np.concatenate([np.log(p.b / p.a) for p in heavy])
    true = float(np.exp(d.mean()))
    n = min(case.paired_blocks, min(p.a.size for p in heavy))
    hcase = case.model_copy(update={"paired_blocks": n})
    setup = setups[0]
    verdicts = [judge(p.a[:n], p.b[:n], hcase, setup, p.host_load)["verdict"] for p in heavy]
    rp = paired_rates(heavy, [setup] * len(heavy), [0.0], trials, hcase, rng, centred=False)[0.0]["alarm"]
    procs = processes(data["paired"])  # injected on the quiet-host processes only, as the heavy ones were quiet
    quiet = [i for i, p in enumerate(procs) if p.load_class == "quiet"]
    ip = paired_rates(
        [procs[i] for i in quiet], [setups[i] for i in quiet], [true - 1], trials, hcase, rng, centred=False
    )[true - 1]["alarm"]
    heavy_runs = [np.asarray(p["steps_ms"]) for p in data["heavy_history"]]
    rh, rf = history_rates(runs, [0.0], max(100, trials // 2), case, rng, candidates=heavy_runs)
    ih, if_ = history_rates(runs, [true - 1], max(100, trials // 2), case, rng)
    print(f"\nreal heavier variant (input 98x98): true slowdown x{true:.3f} from {d.size} in-process pairs")
    print(
        f"  paired ({n}-pair budget): verdicts of the {len(heavy)} real A/B processes {verdicts}; resampled real "
        f"detection {_pct(rp)}% vs injected x{true:.3f} {_pct(ip)}%"
    )
    print(f"  history: real detection {_pct(rh[0.0])}% vs injected {_pct(ih[true - 1])}%")
    print(f"  fixed110: real detection {_pct(rf[0.0])}% vs injected {_pct(if_[true - 1])}%")


def main() -> None:
    """Parse flags, collect when asked, then analyse (see module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collect", action="store_true", help="re-collect the quiet-host samples first")
    parser.add_argument(
        "--collect-load",
        action="store_true",
        help="add self-vs-self processes measured under a background load the bench starts",
    )
    parser.add_argument("--load-levels", default="1,3", help="busy processes per core for --collect-load")
    parser.add_argument("--per-level", type=int, default=2, help="processes per load level for --collect-load")
    parser.add_argument("--collect-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--real", action="store_true", help="also judge the real heavier variant")
    parser.add_argument("--trials", type=int, default=200, help="trials per level (default 200)")
    args = parser.parse_args()
    if args.collect or not DATA.exists():
        print(f"collecting real samples into {DATA} ...", flush=True)
        collect(DATA)
    if args.collect_load:
        print(f"adding processes under load into {DATA} ...", flush=True)
        collect_load(DATA, [int(x) for x in args.load_levels.split(",")], args.per_level)
    if args.collect_only:
        return
    analyse(json.loads(DATA.read_text()), args.trials, args.real)


if __name__ == "__main__":
    main()
