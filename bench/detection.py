"""Benchmark: how well perfwatch's verdicts separate real slowdowns from this machine's noise.

Run: ``.venv/bin/python bench/detection.py`` (analysis of the cached samples, < 1 min),
``--collect`` to re-collect the samples first (real runner processes, about 8-10 min on the
2-core machine), ``--real`` to also judge the real heavier model variant.

Collection (``--collect``), all with the real runner (``python -m tasks.runner``) on the demo
model (MobileNetV2 α=0.35, 96×96×3, batch 16, random weights), interleaved in rounds so that
run-to-run drift (other jobs on the shared CPUs, thermal state, time) is in the data:

* ``history``: separate processes (mode ``profile``), each a cold step, 10 warm-up steps, then
  the measured steps, as the nightly run does;
* ``paired``: separate processes (mode ``paired``) measuring the model against ITSELF in ABBA
  blocks, as the release gate does;
* ``heavy_history`` / ``heavy_paired``: the same for a heavier variant of the same network
  (input 98×98 instead of 96×96; A = the base model, B = heavy in the paired runs), the real
  injected slowdown of ``--real``.

The 1-minute load average is recorded before every process. Samples are cached as JSON under
``bench/data/detection_samples.json``.

Analysis: trials inject a multiplicative slowdown s ∈ {0, 2, 3, 5, 10}% into resampled data,
resampling whole processes or whole block pairs, never single steps across processes (that
would erase the drift):

* paired (``tasks.stats.compare_paired``, the product's default block layout): draw one
  paired process, then draw ``blocks`` block pairs with replacement from that process's pairs
  (drift between processes is kept out of the pair by design, drift within a process is kept in
  the pair); multiply the B block by (1+s);
* history (``tasks.stats.compare_to_history`` with the calibrated prior of
  ``tasks.calibration``): draw K=5 distinct baseline processes and a distinct candidate process,
  multiply the candidate's steps by (1+s); the prior's between-run sd is estimated from every
  process except the candidate (the store's "longer history");
* fixed110: candidate median > 1.10 × the newest baseline process's median.

A trial "alarms" when the verdict is ``regression``. Last line::

    detection: false_alarm=<pct>% detect_5pct=<pct>% mde95=<pct>% | history: false_alarm=<pct>% \
detect_5pct=<pct>% | fixed110: false_alarm=<pct>% detect_5pct=<pct>%

(the first group is the paired method; mde95 = smallest injected level detected in >= 95% of
trials, ``>10`` if none).
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

from tasks import calibration, stats  # noqa: E402
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
# Collection plan: rounds of (history base, paired base/base[, history heavy, paired base/heavy]).
ROUNDS = 6
HISTORY_PER_ROUND = 2
HEAVY_ROUNDS = (0, 2, 4)
HISTORY_STEPS = 40
WARMUP_STEPS = 10
COLLECT_BLOCK_STEPS = 2
COLLECT_BLOCKS = 24
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
                              "blocks": COLLECT_BLOCKS},
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
                              blocks=COLLECT_BLOCKS, block_steps=COLLECT_BLOCK_STEPS)
            r = launch(spec, sys.executable)
            key = "paired" if kind == "base" else "heavy_paired"
            out[key].append({"started": time.time() - t0, "load1": load,
                             "blocks": [{"order": b["order"], "a_ms": b["a_ms"], "b_ms": b["b_ms"]}
                                        for b in r["blocks"]]})
            d = [np.log(np.median(b["b_ms"]) / np.median(b["a_ms"])) for b in r["blocks"]]
            print(f"  {key}[{i}] t={time.time() - t0:5.0f}s load1={load:.2f} mean B/A {np.exp(np.mean(d)):.3f}",
                  flush=True)

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
