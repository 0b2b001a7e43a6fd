"""Profiles from real jobs: a tiny Keras ``fit`` and a custom loop profiled with ``tasks.runner.jobprofile``
(TensorFlow in a subprocess), then ``perfwatch ingest`` and ``perfwatch history``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import select

from tasks.runner.jobprofile import StepProfiler, parse_steps
from tasks.store import Run, RunComparison, session_scope
from tests.helpers import ROOT as ROOT

_JOBS = textwrap.dedent("""
    import sys, numpy as np, keras, tensorflow as tf
    from tasks.runner.jobprofile import StepProfiler, keras_callback
    out = sys.argv[1]
    keras.utils.set_random_seed(0)

    def model():
        inp = keras.Input((16, 16, 3))
        x = keras.layers.Conv2D(8, 3, activation="relu")(inp)
        x = keras.layers.GlobalAveragePooling2D()(x)
        m = keras.Model(inp, keras.layers.Dense(3)(x))
        m.compile(optimizer="sgd", loss="mse")
        return m

    x, y = np.random.rand(96, 16, 16, 3).astype("float32"), np.random.rand(96, 3).astype("float32")
    # Keras' own profile_batch (its batch markers lack _r=1)
    model().fit(x, y, batch_size=8, epochs=1, verbose=0,
                callbacks=[keras.callbacks.TensorBoard(log_dir=f"{out}/keras_tb", profile_batch=(2, 8))])
    # the same job twice with perfwatch's callback beside the TensorBoard callback (Keras layout)
    for run in ("keras_a", "keras_b"):
        model().fit(x, y, batch_size=8, epochs=2, verbose=0,
                    callbacks=[keras.callbacks.TensorBoard(log_dir=f"{out}/{run}", profile_batch=0),
                               keras_callback(f"{out}/{run}", steps=(3, 10))])
    # a custom loop, steps from PERFWATCH_PROFILE_STEPS
    m, opt = model(), keras.optimizers.SGD()
    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(m(xb) - yb))
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
        return loss
    with StepProfiler(logdir=f"{out}/loop") as prof:
        for i in range(12):
            with prof.step(i):
                float(train_step(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]))
""")


@pytest.fixture(scope="module")
def job_logs(tmp_path_factory) -> Path:
    """Log dirs of real jobs: keras_tb (Keras profile_batch), keras_a/keras_b (perfwatch's Keras callback),
    loop (StepProfiler in a custom loop, PERFWATCH_PROFILE_STEPS=2:9)."""
    out = tmp_path_factory.mktemp("jobs")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PERFWATCH_PROFILE_STEPS": "2:9",
        "CUDA_VISIBLE_DEVICES": "",
    }
    proc = subprocess.run([sys.executable, "-c", _JOBS, str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_steps_variable_and_disabled_profiler():
    assert parse_steps("10:15") == (10, 15)
    for bad in ("10", "15:10", "a:b", "-1:3"):
        with pytest.raises(ValueError, match="PERFWATCH_PROFILE_STEPS"):
            parse_steps(bad)
    off = StepProfiler(env={})
    assert not off.enabled
    with off.step(3):  # no profiler, no TensorFlow import needed
        pass
    assert StepProfiler(env={"PERFWATCH_PROFILE_STEPS": "1:2", "PERFWATCH_PROFILE_LOGDIR": "/x"}).logdir == "/x"


@pytest.mark.slow
def test_ingested_job_profiles_join_the_history(job_logs, home, db_url, cli):
    assert list((job_logs / "keras_a" / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))  # Keras layout
    first = cli(
        "ingest", job_logs / "keras_a", "--model", "recsys", "--version", "7", "--case", "fit-bs8", "--batch-size", "8"
    )
    assert first.exit_code == 0, first.output
    assert "(source external): verdict no-baseline" in first.output and "step time is xprof's" in first.output
    second = cli(
        "ingest", job_logs / "keras_b", "--model", "recsys", "--version", "7", "--case", "fit-bs8", "--batch-size", "8"
    )
    assert second.exit_code in (0, 1), second.output
    assert "verdict no-baseline" not in second.output  # judged against the first ingested run
    again = cli("ingest", job_logs / "keras_b", "--model", "recsys", "--version", "7", "--case", "fit-bs8")
    assert again.exit_code == 0 and "already stored" in again.output

    hist = cli("history", "recsys", "--format", "json")
    assert hist.exit_code == 0, hist.output
    rows = json.loads(hist.output)
    assert [(r["case_name"], r["source"], r["version"]) for r in rows] == [("fit-bs8", "external", "7")] * 2
    assert rows[1]["method"] and rows[1]["baseline_median_ms"] == pytest.approx(rows[0]["median_step_ms"])
    with session_scope(db_url) as s:
        runs = s.execute(
            select(
                Run.source,
                Run.dag_id,
                Run.median_step_ms,
                Run.throughput_eps,
                Run.cold_step_ms,
                Run.warmup_steps,
                Run.archive_uri,
            ).order_by(Run.id)
        ).all()
        evidence = s.scalars(select(RunComparison.evidence).order_by(RunComparison.id)).all()
    assert [r.source for r in runs] == ["external", "external"] and runs[0].dag_id == "perfwatch_ingest"
    assert runs[0].median_step_ms > 0 and runs[0].throughput_eps == pytest.approx(8000 / runs[0].median_step_ms)
    # nothing made up; steps 3..10 profiled, xprof times the complete ones (it may drop the first)
    assert runs[0].cold_step_ms is None and runs[0].warmup_steps in (3, 4)
    assert list(Path(runs[0].archive_uri).glob("plugins/profile/*/*.xplane.pb"))  # archived, TensorBoard-openable
    assert all(e["step_time_source"].startswith("xprof") for e in evidence)

    loop = cli("ingest", job_logs / "loop", "--model", "recsys-loop", "--version", "1")
    assert loop.exit_code == 0, loop.output
    assert 5 <= json.loads(cli("history", "recsys-loop", "-f", "json").output)[0]["n_measured"] <= 8  # steps 2..9

    # Keras' own profile_batch has no step markers xprof accepts: refused, recorded as a failed run
    tb = cli("ingest", job_logs / "keras_tb", "--model", "recsys", "--version", "7")
    assert tb.exit_code == 2 and "timed step(s), at least 5 are needed" in tb.output
    assert "recorded in the store as failed run" in tb.output
    (home / "empty").mkdir()
    nothing = cli("ingest", home / "empty", "--model", "recsys", "--version", "7")
    assert nothing.exit_code == 2 and "no profile under" in nothing.output
