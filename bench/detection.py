"""Benchmark: how well perfwatch's verdicts separate real slowdowns from this machine's noise.

Run: ``.venv/bin/python bench/detection.py`` (analysis of the committed real samples, about a
minute), ``--collect`` to re-collect the samples first (real runner processes, about 25 min on
the 2-core machine), ``--real`` to also judge the real heavier model variant.

Collection (``--collect``), all with the real runner (``python -m tasks.runner``) on the demo
model (MobileNetV2 α=0.35, 96×96×3, batch 16, random weights), interleaved in rounds so that
run-to-run drift (other jobs on the shared CPUs, thermal state, time) is in the data:

* ``history``: separate processes (mode ``profile``), each a cold step, 10 warm-up steps, then
  100 measured steps, as the nightly run does (its default is 320 now; the history verdict is
  limited by the drift between processes, not by the steps in one);
* ``paired``: separate processes (mode ``paired``) measuring the model against ITSELF in ABBA
  order with 1-step blocks (A B B A A B ...), 256 block pairs each;
* ``heavy_history`` / ``heavy_paired``: the same for a heavier variant of the same network
  (input 98×98 instead of 96×96; A = the base model, B = heavy in the paired runs, 128 pairs),
  the real slowdown of ``--real``.

The 1-minute load average is recorded before every process. Samples are cached as JSON under
``bench/data/detection_samples.json``.

Analysis: trials inject a multiplicative slowdown s ∈ {0, 2, 3, 5, 10}% into resampled data,
resampling whole processes or block pairs inside one process, never single steps across
processes (that would erase the drift):

* paired (``tasks.analysis.stats.compare_paired`` with the product's default layout and the offset
  ``tasks.analysis.calibration`` would estimate from A/A gates): draw one self-vs-self process, centre
  its pair ratios on 1 and build a gate of ``Case.paired_blocks`` pairs from runs of
  consecutive pairs (moving-block bootstrap, see :func:`paired_rates`); multiply the B blocks
  by (1+s). A second column subsamples real pairs without centring, as a check;
* history (``tasks.analysis.stats.compare_to_history`` with the calibrated prior of
  ``tasks.analysis.calibration``): draw K=5 distinct baseline processes and a distinct candidate process,
  multiply the candidate's steps by (1+s); the prior's between-run sd is estimated from every
  process except the candidate (the store's "longer history");
* fixed110: candidate median > 1.10 × the newest baseline process's median.

A trial "alarms" when the verdict is ``regression`` (as baseline-compare gives it: the
statistics, or the GX ceiling breached by an ``inconclusive`` run). Last line::

    detection: false_alarm=<pct>% detect_5pct=<pct>% mde95=<pct>% | history: false_alarm=<pct>% \
detect_5pct=<pct>% | fixed110: false_alarm=<pct>% detect_5pct=<pct>%

(the first group is the paired method; mde95 = smallest injected level detected in >= 95% of
trials on a 1% grid, ``>30`` if none).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks.analysis import calibration, stats  # noqa: E402
from tasks.analysis.verdict import ceiling_ms  # noqa: E402
from tasks.records import Case  # noqa: E402

DATA = ROOT / "bench" / "data" / "detection_samples.json"
LEVELS = (0.0, 0.02, 0.03, 0.05, 0.10)
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
COLLECT_BLOCK_STEPS = 1
COLLECT_BLOCKS = 256  # block pairs per self-vs-self process (the bootstrap builds gates of any size)
HEAVY_BLOCKS = 128
BATCH = 16


def _load1() -> float:
    return os.getloadavg()[0]


def collect(path: Path) -> dict:
    """Run the real runner processes (module docstring) and write the samples to ``path`` (JSON)."""
    import subprocess

    from tasks.runner import RunnerSpec, launch

    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="pw-detection-") as tmp:
        models = {}
        for name, side in (("base", 96), ("heavy", 98)):
            models[name] = str(Path(tmp) / f"{name}.keras")
            subprocess.run([sys.executable, "-c", MODEL_SCRIPT, str(side), models[name]], check=True,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, capture_output=True)
        out: dict = {"meta": {"model": "MobileNetV2 alpha=0.35 96x96x3 batch 16 (heavy: 98x98x3)",
                              "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                              "cpus": os.cpu_count(), "warmup_steps": WARMUP_STEPS,
                              "history_steps": HISTORY_STEPS, "block_steps": COLLECT_BLOCK_STEPS,
                              "blocks": COLLECT_BLOCKS, "heavy_blocks": HEAVY_BLOCKS},
                     "history": [], "paired": [], "heavy_history": [], "heavy_paired": []}

        def history(kind: str, i: int) -> None:
            load = _load1()
            spec = RunnerSpec(mode="profile", model_path=models[kind], out_dir=f"{tmp}/h_{kind}_{i}",
                              batch_size=BATCH, warmup_steps=WARMUP_STEPS, measured_steps=HISTORY_STEPS,
                              profiled_steps=0)
            r = launch(spec, sys.executable)
            key = "history" if kind == "base" else "heavy_history"
            out[key].append({"started": time.time() - t0, "load1": load, "steps_ms": r["measured_step_times_ms"]})
            print(f"  {key}[{i}] t={time.time() - t0:5.0f}s load1={load:.2f} median "
                  f"{np.median(r['measured_step_times_ms']):.1f} ms", flush=True)

        def paired(kind: str, i: int) -> None:
            load = _load1()
            spec = RunnerSpec(mode="paired", model_path=models[kind], baseline_model_path=models["base"],
                              out_dir=f"{tmp}/p_{kind}_{i}", batch_size=BATCH, warmup_steps=WARMUP_STEPS,
                              blocks=COLLECT_BLOCKS if kind == "base" else HEAVY_BLOCKS,
                              block_steps=COLLECT_BLOCK_STEPS)
            r = launch(spec, sys.executable)
            key = "paired" if kind == "base" else "heavy_paired"
            out[key].append({"started": time.time() - t0, "load1": load,
                             "blocks": [{"order": b["order"], "a_ms": b["a_ms"], "b_ms": b["b_ms"]}
                                        for b in r["blocks"]]})
            d = [np.log(np.median(b["b_ms"]) / np.median(b["a_ms"])) for b in r["blocks"]]
            print(f"  {key}[{i}] t={time.time() - t0:5.0f}s load1={load:.2f} mean B/A {np.exp(np.mean(d)):.3f} "
                  f"sd of pair log ratio {np.std(d, ddof=1):.3f}", flush=True)

        for r in range(ROUNDS):
            for j in range(HISTORY_PER_ROUND):
                history("base", HISTORY_PER_ROUND * r + j)
            paired("base", r)
            if r in HEAVY_ROUNDS:
                history("heavy", r)
                paired("heavy", r)
        out["meta"]["collect_s"] = round(time.time() - t0, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, separators=(",", ":")))
    return out


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


def _history_alarm(cand: np.ndarray, bases: list[np.ndarray], prior: tuple[float, float],
                   case: Case) -> tuple[bool, bool]:
    """perfwatch's history verdict is ``regression``: the statistics say so, or (as in baseline-compare)
    an inconclusive run breaches the GX ceiling ``tasks.analysis.verdict.ceiling_ms`` over the median of the
    baseline medians. Returns (alarm of the product's verdict, alarm of the statistics alone)."""
    res = stats.compare_to_history(cand, bases, tolerance=case.tolerance, confidence=case.confidence,
                                   prior_between_sd=prior[0], prior_df=prior[1])
    limit = ceiling_ms(float(np.median([np.median(b) for b in bases])), res)
    stat = res.verdict == "regression"
    return stat or (res.verdict == "inconclusive" and np.median(cand) > limit), stat


def _paired_alarm(a: np.ndarray, b: np.ndarray, case: Case, offset_sd: float, ceiling: bool = True) -> bool:
    """perfwatch's paired verdict is ``regression``: ``stats.compare_paired`` on the block medians
    ``a``, ``b`` (shape (n,), ms; with the process-level offset ``offset_sd``) says so, or with
    ``ceiling`` an inconclusive run breaches the paired GX ceiling ``tasks.analysis.verdict.ceiling_ms`` over
    the median of A (here over block medians: the same as over steps for the default 1-step blocks)."""
    res = stats.compare_paired(a, b, tolerance=case.tolerance, confidence=case.confidence, offset_sd=offset_sd)
    if res.verdict == "regression":
        return True
    return ceiling and res.verdict == "inconclusive" and np.median(b) > ceiling_ms(float(np.median(a)), res)


def _prior(medians: list[float]) -> tuple[float, float]:
    """The calibrated prior (``tasks.analysis.calibration`` rule) from accepted runs of one version."""
    tau, df = calibration.estimate_between_sd(("1", m) for m in medians)
    if tau is None:
        return calibration.DEFAULT_PRIOR_BETWEEN_SD, calibration.DEFAULT_PRIOR_DF
    return tau, min(float(df), calibration.MAX_PRIOR_DF)


def _block_pairs(proc: dict, case: Case) -> tuple[np.ndarray, np.ndarray]:
    """A process's ABBA data regrouped into the product's block length (``paired_block_steps``):
    the block medians of A and of B (ms, shape (N,) each, in measurement order)."""
    per = case.paired_block_steps // len(proc["blocks"][0]["a_ms"]) or 1
    a, b = [], []
    for i in range(0, len(proc["blocks"]) - per + 1, per):
        grp = proc["blocks"][i:i + per]
        a.append(np.median(np.concatenate([g["a_ms"] for g in grp])))
        b.append(np.median(np.concatenate([g["b_ms"] for g in grp])))
    return np.array(a), np.array(b)


def _gate(pairs: tuple[np.ndarray, np.ndarray], case: Case) -> tuple[float, float, int]:
    """Block medians (A, B) judged as one gate, as the store would hold it: (ratio, per-pair sd whose
    square / n is the gate's batch-means sampling variance, n) -- ``tasks.analysis.calibration``'s A/A input."""
    res = stats.compare_paired(pairs[0], pairs[1], tolerance=case.tolerance, confidence=case.confidence)
    return res.ratio, res.details["se_log_ratio"] * np.sqrt(res.n_candidate), res.n_candidate


def _aa_gate(proc: dict, case: Case) -> tuple[float, float, int]:
    """A self-vs-self process as the A/A gate the store would hold: its first ``case.paired_blocks``
    block pairs judged as one gate."""
    a, b = _block_pairs(proc, case)
    return _gate((a[:case.paired_blocks], b[:case.paired_blocks]), case)


def aa_offsets(aa_procs: list[dict], case: Case) -> list[float]:
    """The offset the product would use when judging self-vs-self process i: ``tasks.analysis.calibration``'s
    estimate from the OTHER self-vs-self processes as A/A gates (what the store holds after a few A/A
    release gates), its default when fewer than ``MIN_AA_GATES`` remain."""
    gates = [_aa_gate(p, case) for p in aa_procs]
    out = []
    for i in range(len(gates)):
        sd, _ = calibration.estimate_paired_offset(g for j, g in enumerate(gates) if j != i)
        out.append(calibration.DEFAULT_PAIRED_OFFSET_SD if sd is None else sd)
    return out


def offset_test(procs: list[dict], case: Case) -> tuple[float, float, float, float, float]:
    """Is there a process-level offset or a bias between two copies of the same model? Each
    self-vs-self process i, judged whole as one gate, gives its mean pair log ratio ``m_i`` with
    batch-means variance ``v_i``. Heterogeneity (Cochran's Q, ``scipy.stats.chi2``, P-1 df) tests
    for an offset that differs between processes; the inverse-variance pooled mean tests for a
    bias common to all. Returns (Q, its p-value, pooled bias, its se, method-of-moments offset sd as
    in ``tasks.analysis.calibration.estimate_paired_offset``)."""
    from scipy import stats as sps

    gates = [_gate(_block_pairs(p, case), case) for p in procs]
    m = np.log([g[0] for g in gates])
    w = np.array([g[2] / g[1] ** 2 for g in gates])
    bias = float((w * m).sum() / w.sum())
    q = float((w * (m - bias) ** 2).sum())
    off, _ = calibration.estimate_paired_offset(gates)
    return q, float(sps.chi2.sf(q, len(gates) - 1)), bias, float(w.sum() ** -0.5), float(off or 0.0)


BOOT_BLOCK = 16  #: pairs per block of the moving-block bootstrap (about twice the batch of compare_paired)


def _trial_pairs(src: tuple[np.ndarray, np.ndarray], centre: float, n: int, rng,
                 subsample: bool) -> tuple[np.ndarray, np.ndarray]:
    """n block pairs (A, B block medians) for one trial from one process's pairs ``src``
    (see paired_rates)."""
    a, b = src
    if subsample:
        idx = np.sort(rng.choice(a.size, size=n, replace=False))
        return a[idx], b[idx]
    starts = rng.integers(a.size - BOOT_BLOCK + 1, size=-(-n // BOOT_BLOCK))
    idx = (starts[:, None] + np.arange(BOOT_BLOCK)).ravel()[:n]
    return a[idx], b[idx] * np.exp(-centre)


def paired_rates(procs: list[dict], levels, trials: int, case: Case, rng, offsets: list[float], *,
                 subsample: bool = False, ceiling: bool = True, blocks: int | None = None) -> dict:
    """Alarm rate of the paired verdict per injected level; a trial draws one self-vs-self process
    and builds a gate of n = ``blocks`` (default ``case.paired_blocks``) block pairs from it, then
    multiplies its B blocks by (1+s).

    Default, the null-world moving-block bootstrap (Kuensch 1989; null resampling as in Davison &
    Hinkley 1997, sec. 4.4): the process's pairs are centred on ratio 1 (its B blocks divided by
    its mean ratio) and n pairs are drawn as runs of ``BOOT_BLOCK`` consecutive pairs, so the
    slow drift that makes neighbouring pairs correlated stays in every trial. Centring is what
    the data allow: a self-vs-self process's mean ratio is its true offset plus sampling error,
    and resampling around it would count that error twice; ``offset_test`` shows no offset
    between processes (and prints the pooled bias).

    ``subsample``: draw n < N of the process's N pairs without replacement instead, not centred.
    The subsample mean varies about the process mean by ``(s^2/n)(N-n)/(N-1)`` and the process
    mean about the truth by ``s^2/N``; together ``s^2/n`` as for a fresh gate, and any real
    offset or bias of the process stays in; but the drift correlation between neighbours is
    broken up. ``offsets[i]`` is the process-level offset the product uses for process i."""
    pairs = [_block_pairs(p, case) for p in procs]
    centres = [float(np.log(_gate(ps, case)[0])) for ps in pairs]
    n = blocks or case.paired_blocks
    if subsample and any(ps[0].size <= n for ps in pairs):
        raise ValueError(f"a paired process has {min(ps[0].size for ps in pairs)} block pairs; subsampling needs "
                         f"more than {n}: re-collect with more blocks (--collect)")
    out = {}
    for s in levels:
        hits = 0
        for _ in range(trials):
            i = int(rng.integers(len(pairs)))
            a, b = _trial_pairs(pairs[i], centres[i], n, rng, subsample)
            hits += _paired_alarm(a, b * (1 + s), case, offsets[i], ceiling)
        out[s] = hits / trials
    return out


def history_rates(runs: list[np.ndarray], levels, trials: int, case: Case, rng,
                  candidates: list[np.ndarray] | None = None) -> tuple[dict, dict, dict]:
    """Alarm rates of the history verdict and of the fixed 110% rule per injected level.

    Each trial draws a candidate process and ``case.lookback`` distinct other processes as the
    accepted baselines (fixed110: the newest of them alone); the prior is calibrated on every
    process but the candidate. ``candidates``: take the candidate from these instead (real
    heavier variant; the prior then uses all ``runs``). Returns (history, history statistics
    without the GX ceiling, fixed110)."""
    hist, hstat, fixed = {}, {}, {}
    medians = [float(np.median(r)) for r in runs]
    for s in levels:
        h = hs = f = 0
        for _ in range(trials):
            if candidates is None:
                c = int(rng.integers(len(runs)))
                others = [j for j in range(len(runs)) if j != c]
                cand, prior = runs[c], _prior([medians[j] for j in others])
            else:
                others = list(range(len(runs)))
                cand, prior = candidates[rng.integers(len(candidates))], _prior(medians)
            base = [runs[j] for j in rng.choice(others, size=min(case.lookback, len(others)), replace=False)]
            cand = cand * (1 + s)
            alarm, stat_alarm = _history_alarm(cand, base, prior, case)
            h += alarm
            hs += stat_alarm
            f += np.median(cand) > 1.10 * np.median(base[0])
        hist[s], hstat[s], fixed[s] = h / trials, hs / trials, f / trials
    return hist, hstat, fixed


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def analyse(data: dict, trials: int, real: bool) -> None:
    """Print the detection tables and the machine-readable last line (module docstring)."""
    t0 = time.perf_counter()
    stats._log_median_var = _cached_log_median_var  # see its docstring: speed only, same statistics
    case = Case(model="bench")  # the product's defaults: tolerance, confidence, lookback, paired layout
    meta = data["meta"]
    runs = [np.asarray(p["steps_ms"]) for p in data["history"]]
    meds = np.array([np.median(r) for r in runs])
    loads = [p["load1"] for p in data["history"] + data["paired"]]
    print(f"samples: {meta['model']}, collected {meta['collected_at']} in {meta.get('collect_s', '?')} s on "
          f"{meta['cpus']} CPUs, 1-min load average {min(loads):.1f}-{max(loads):.1f} (other jobs share the CPUs)")
    print(f"history: {len(runs)} processes x {meta['history_steps']} measured steps; median step time "
          f"{meds.min():.1f}-{meds.max():.1f} ms, sd of log median between processes "
          f"{np.std(np.log(meds), ddof=1):.3f}; step-to-step CV within a process (median) "
          f"{np.median([r.std() / r.mean() for r in runs]):.3f}")
    d = [np.log(np.median(b["b_ms"]) / np.median(b["a_ms"])) for p in data["paired"] for b in p["blocks"]]
    per_proc = [np.exp(np.mean([np.log(np.median(b["b_ms"]) / np.median(b["a_ms"])) for b in p["blocks"]]))
                for p in data["paired"]]
    print(f"paired (same model as A and B): {len(data['paired'])} processes x {len(data['paired'][0]['blocks'])} "
          f"block pairs x {meta['block_steps']} steps; sd of block log ratio {np.std(d, ddof=1):.3f}; "
          f"per-process mean B/A {', '.join(f'{x:.3f}' for x in per_proc)}")
    print(f"product settings: tolerance {case.tolerance:.0%}, confidence {case.confidence:.0%}, lookback "
          f"{case.lookback}, paired {case.paired_blocks} block pairs x {case.paired_block_steps} steps "
          f"({case.paired_timed_steps} extra timed steps = {case.paired_timed_steps / case.measured_steps:.1f}x "
          f"the {case.measured_steps} measured steps); {trials} trials per level; alarm = verdict regression")
    rng = np.random.default_rng(20260601)
    q, p_off, bias, bias_se, off_all = offset_test(data["paired"], case)
    print(f"two copies of one model in one process: offset between processes: Cochran's Q {q:.1f} on "
          f"{len(data['paired']) - 1} df, p = {p_off:.2f}, method-of-moments sd {off_all:.4f}; common bias B/A "
          f"x{np.exp(bias):.4f} (se {bias_se:.4f} on the log scale)")
    offsets = aa_offsets(data["paired"], case)
    print(f"paired offset (tasks.analysis.calibration from the other self-vs-self processes as A/A gates of "
          f"{case.paired_blocks} pairs): {', '.join(f'{x:.4f}' for x in offsets)}")
    paired = paired_rates(data["paired"], LEVELS, trials, case, rng, offsets)
    longest = min(_block_pairs(p, case)[0].size for p in data["paired"])
    sub_n = min(case.paired_blocks, longest // 2)  # subsampling needs n < N
    window = paired_rates(data["paired"], LEVELS, trials, case, rng, offsets, subsample=True, blocks=sub_n)
    nocap = paired_rates(data["paired"], LEVELS, trials, case, rng, offsets, ceiling=False)
    fresh = paired_rates(data["paired"], LEVELS, trials, case, rng,
                         [calibration.DEFAULT_PAIRED_OFFSET_SD] * len(data["paired"]))
    hist, hstat, fixed = history_rates(runs, LEVELS, trials, case, rng)
    print(f"\n{'slowdown':>8} | {'paired':>8} | {'paired~' + ('' if sub_n == case.paired_blocks else str(sub_n)):>8} | {'paired-':>8} | {'history':>8} | "
          f"{'history-':>8} | {'fixed110':>8}")
    for s in LEVELS:
        print(f"{s:8.0%} | {_pct(paired[s]):>7}% | {_pct(window[s]):>7}% | {_pct(nocap[s]):>7}% | "
              f"{_pct(hist[s]):>7}% | {_pct(hstat[s]):>7}% | {_pct(fixed[s]):>7}%")
    print(f"paired on a fresh store (no A/A gates yet: default offset {calibration.DEFAULT_PAIRED_OFFSET_SD}): "
          + ", ".join(f"{s:.0%} {_pct(fresh[s])}%" for s in LEVELS))
    print("(row 0%: false-alarm rate; other rows: detection rate. paired: a process, then its pairs by the "
          "centred moving-block bootstrap; paired~N: a subsample of N of its pairs instead (fewer than the gate's "
          "when the processes are too short), not centred; "
          "paired-/history-: statistics alone, without the GX ceiling that baseline-compare adds)")
    sizes = (64, 100, 128, 160, 200, 240, 280, 320)
    cost = {n: paired_rates(data["paired"], (0.0, 0.05), max(200, trials // 2), case, rng, offsets, blocks=n)
            for n in sizes}
    print("paired cost curve (block pairs: false alarms / detection of 5%): "
          + ", ".join(f"{n}: {_pct(c[0.0])}/{_pct(c[0.05])}%" for n, c in cost.items()))
    grid = [x / 100 for x in range(1, 31)]
    fine = paired_rates(data["paired"], grid, max(200, trials // 4), case, rng, offsets)
    mde = next((s for s in grid if fine[s] >= 0.95), None)
    mde_txt = f"{100 * mde:.0f}" if mde is not None else ">30"
    print(f"paired mde95 (1% grid, {max(200, trials // 4)} trials each): {mde_txt}%")
    if real:
        _real(data, runs, case, trials, rng)
    print(f"analysis took {time.perf_counter() - t0:.0f} s")
    print(f"detection: false_alarm={_pct(paired[0.0])}% detect_5pct={_pct(paired[0.05])}% mde95={mde_txt}% | "
          f"history: false_alarm={_pct(hist[0.0])}% detect_5pct={_pct(hist[0.05])}% | "
          f"fixed110: false_alarm={_pct(fixed[0.0])}% detect_5pct={_pct(fixed[0.05])}%")


def _real(data, runs, case, trials, rng) -> None:
    """The real heavier variant (98x98 input): its measured true slowdown, and each method's detection
    rate on it against the resampled injection of the same size. Paired trials subsample (not
    centred: the slowdown is the point) n = min(``case.paired_blocks``, N/2) pairs of the N-pair
    heavy processes, the injected ones the same n from the self-vs-self processes."""
    hp = data["heavy_paired"]
    d = [np.log(np.median(b["b_ms"]) / np.median(b["a_ms"])) for p in hp for b in p["blocks"]]
    true = float(np.exp(np.mean(d)))
    se = float(np.std(d, ddof=1) / np.sqrt(len(d)))
    heavy = [np.asarray(p["steps_ms"]) for p in data["heavy_history"]]
    unp = float(np.median([np.median(h) for h in heavy]) / np.median([np.median(r) for r in runs]))
    print(f"\nreal heavier variant (input 98x98): true slowdown from {len(d)} in-process block pairs "
          f"x{true:.3f} (95% CI x{np.exp(np.log(true) - 2 * se):.3f}-x{np.exp(np.log(true) + 2 * se):.3f}); "
          f"from separate processes x{unp:.3f}")
    n = min(case.paired_blocks, min(_block_pairs(p, case)[0].size for p in hp) // 2)  # subsample: n < N
    all_aa, _ = calibration.estimate_paired_offset(_aa_gate(p, case) for p in data["paired"])
    off = calibration.DEFAULT_PAIRED_OFFSET_SD if all_aa is None else all_aa
    verdicts = [stats.compare_paired(a[:n], b[:n], tolerance=case.tolerance, confidence=case.confidence,
                                     offset_sd=off).verdict for a, b in (_block_pairs(p, case) for p in hp)]
    rp = paired_rates(hp, [0.0], trials, case, rng, [off] * len(hp), blocks=n, subsample=True)[0.0]
    rh, _, rf = history_rates(runs, [0.0], trials, case, rng, candidates=heavy)
    s = true - 1
    ip = paired_rates(data["paired"], [s], trials, case, rng, aa_offsets(data["paired"], case), blocks=n,
                      subsample=True)[s]
    ih, _, if_ = history_rates(runs, [s], trials, case, rng)
    print(f"  paired ({n} block pairs): verdicts of the {len(hp)} real A/B processes {verdicts}; resampled real "
          f"detection {_pct(rp)}% vs injected x{true:.3f} {_pct(ip)}%")
    print(f"  history: real detection {_pct(rh[0.0])}% vs injected {_pct(ih[s])}%")
    print(f"  fixed110: real detection {_pct(rf[0.0])}% vs injected {_pct(if_[s])}%")


def main() -> None:
    """Parse flags, collect when asked, then analyse (see module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collect", action="store_true", help="re-collect the samples with real runs first")
    parser.add_argument("--collect-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--real", action="store_true", help="also judge the real heavier variant")
    parser.add_argument("--trials", type=int, default=1000, help="trials per level (default 1000)")
    args = parser.parse_args()
    if args.collect or args.collect_only or not DATA.exists():
        print(f"collecting real samples into {DATA} ...", flush=True)
        collect(DATA)
    if args.collect_only:
        return
    analyse(json.loads(DATA.read_text()), args.trials, args.real)


if __name__ == "__main__":
    main()
