"""Noise awareness: the runner records the host's load, the gate's noise is judged against the case's
calibrated noise, and beyond the documented bounds the verdict is inconclusive ("host busy: ...") and
Airflow measures again later."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tasks.analysis import calibration, stats
from tasks.analysis.calibration import NoiseCalibration, assess_noise, calibrated_noise
from tasks.records import ArchiveRecord, Case, CompareRecord, EnvRecord, ProfiledRun, RunContext, RunState
from tasks.runner.measure import HostLoad, gpu_other_processes
from tasks.stages import pipeline
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tests.helpers import ROOT as ROOT_DIR
from tests.helpers.builders import QUIET_HOST_LOAD, _paired_file, make_records

QUIET = QUIET_HOST_LOAD


def test_host_load_sees_the_cpu_other_processes_take():
    """Two busy loops on this host while this process sleeps: they took most of the CPU time, we none."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        h = HostLoad().start()
        time.sleep(1.5)
        r = h.result()
    finally:
        for p in loops:
            p.kill()
            p.wait()
    assert r["other_cpu_share"] > 0.5 and r["own_cpu_share"] < 0.1
    assert r["cpus"] == os.cpu_count() and 1.4 < r["wall_s"] < 10 and 0 <= r["steal_share"] <= 1
    assert r["load1_start"] >= 0 and r["load1_end"] >= 0
    # GPU other processes only where NVML answers: absent, never 0 by default
    assert ("gpu_other_processes" in r) == (gpu_other_processes() is not None)
    assert assess_noise(r).busy


@pytest.mark.parametrize(
    ("load", "gate_sd", "cal", "busy", "words"),
    [
        (QUIET, None, None, False, []),
        ({**QUIET, "other_cpu_share": 0.48}, None, None, True, ["other processes took 48% of the host's CPU time"]),
        ({**QUIET, "steal_share": 0.12}, None, None, True, ["stole 12%"]),
        ({**QUIET, "gpu_other_processes": 2}, None, None, True, ["2 other process(es) ran on the GPU"]),
        (
            QUIET,
            0.30,
            NoiseCalibration(sd_pair=0.14, n_gates=5),
            True,
            ["2.1x the calibrated 0.140", "over 320 pairs", "at least 1.9x at 95%", "5 quiet gates"],
        ),
        (QUIET, 0.18, NoiseCalibration(sd_pair=0.14, n_gates=5), False, []),
        (QUIET, 0.30, NoiseCalibration(sd_pair=None, n_gates=2), False, []),  # not calibrated yet: not judged
        ({"error": "psutil is not installed"}, None, None, False, []),
        (None, None, None, False, []),
    ],
)
def test_noise_bounds(load, gate_sd, cal, busy, words):
    n = assess_noise(load, gate_sd=gate_sd, gate_pairs=320 if gate_sd is not None else None, calibration=cal)
    assert n.busy is busy and n.bounds["other_cpu_share"] == calibration.DEFAULT_MAX_OTHER_CPU_SHARE
    if busy:
        assert n.reason.startswith("host busy: ") and all(w in n.reason for w in words)
    else:
        assert n.reason is None
    assert json.loads(n.model_dump_json())["busy"] is busy


def test_the_bound_is_a_case_setting_and_bad_values_are_named():
    assert not assess_noise({**QUIET, "other_cpu_share": 0.48}, max_other_cpu_share=0.6).busy
    with pytest.raises(ValueError, match="max_other_cpu_share"):
        assess_noise(QUIET, max_other_cpu_share=0)
    stolen = {**QUIET, "steal_share": 0.12}
    assert "stole 12% of the CPU time (bound 5%)" in str(assess_noise(stolen).reason)
    lenient = assess_noise(stolen, max_steal_share=0.2)  # a VM with steady moderate steal, as its case allows
    assert not lenient.busy and lenient.bounds["steal_share"] == 0.2
    with pytest.raises(ValueError, match="max_steal_share"):
        assess_noise(QUIET, max_steal_share=1.5)
    with pytest.raises(ValueError, match="gate_sd"):
        assess_noise(QUIET, gate_sd=float("nan"), gate_pairs=32)
    with pytest.raises(ValueError, match="gate_pairs"):
        assess_noise(QUIET, gate_sd=0.2)


def test_the_noise_rule_allows_for_the_scale_estimated_from_few_pairs():
    """A gate stopped at 48 pairs with 1.8x the calibrated scale may be a quiet gate's chance high (its
    lower 95% bound, 1.37x, is within the 1.5x bound); measured over 320 pairs the same 1.8x is busy."""
    cal = NoiseCalibration(sd_pair=0.07, n_gates=5)
    early = assess_noise(QUIET, gate_sd=0.126, gate_pairs=48, calibration=cal)
    late = assess_noise(QUIET, gate_sd=0.126, gate_pairs=320, calibration=cal)
    assert early.noise_ratio == pytest.approx(1.8) == late.noise_ratio
    assert not early.busy and early.noise_ratio_low == pytest.approx(1.8 * math.exp(-1.645 * 1.166 / 48**0.5))
    assert late.busy and late.noise_ratio_low > calibration.MAX_NOISE_RATIO and late.gate_pairs == 320


def test_the_noise_scale_shrugs_off_stray_slow_steps_but_not_wider_noise():
    """1.4826 x MAD: about the sd for normal log ratios; three 3x steps in 48 pairs double the sd but
    move the scale little; noise twice as wide doubles both."""
    rng = np.random.default_rng(3)
    d = rng.normal(0, 0.07, 48)
    spiky = d.copy()
    spiky[[5, 20, 40]] += math.log(3)
    assert stats.noise_scale(d) == pytest.approx(np.std(d, ddof=1), rel=0.25)
    assert np.std(spiky, ddof=1) > 2 * np.std(d, ddof=1)
    assert stats.noise_scale(spiky) < 1.2 * stats.noise_scale(d)
    assert stats.noise_scale(2 * d) == pytest.approx(2 * stats.noise_scale(d))
    with pytest.raises(ValueError, match="at least 2 finite"):
        stats.noise_scale([0.1, float("nan")])


def _gate(scale, busy, n=320):
    return {
        "details": {"se_log_ratio": 2 * scale / n**0.5, "scale_log_ratio": scale},
        "n_candidate": n,
        "host_busy": busy,
    }


def test_calibrated_noise_is_the_median_of_quiet_gates():
    gates = [
        _gate(0.14, False),
        _gate(0.15, False),
        _gate(0.60, True),
        _gate(0.13, False),
        {"details": {"se_log_ratio": 0.01, "scale_log_ratio": 0.14}, "n_candidate": 320},  # no noise record
        {"details": {"se_log_ratio": 0.01}, "n_candidate": 320, "host_busy": False},
    ]  # stored before the scale
    cal = calibrated_noise(gates)
    assert cal.n_gates == 3 and cal.sd_pair == pytest.approx(0.14)
    assert calibrated_noise(gates[:2]).sd_pair is None  # fewer than MIN_NOISE_GATES


BUSY = assess_noise({**QUIET, "other_cpu_share": 0.62}).model_dump(mode="json")


@pytest.fixture
def baseline(db_url, tmp_path):
    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="base"))
    return db_url


def test_a_busy_host_makes_a_decided_gate_inconclusive_and_says_why(baseline, tmp_path):
    ctx, pulled, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand")
    case = ctx.case.model_copy(update={"paired_blocks": 64, "paired_block_steps": 1})
    run = run.model_copy(
        update={"paired_path": _paired_file(tmp_path / "paired.json", 1.15), "baseline_model": pulled, "noise": BUSY}
    )
    v = baseline_compare(baseline, case, env, run, parsed, tmp_path / "cand" / "work")
    assert v.verdict == "inconclusive" and v.reason.startswith("host busy: other processes took 62%")
    assert v.reason.endswith("the statistics alone said regression")
    assert v.evidence["verdict_statistics"]["verdict"] == "regression" and v.evidence["noise"]["busy"] is True
    assert v.evidence["paired"]["host_busy"] is True  # never used to calibrate the offset or the noise
    assert v.gx_success  # the threshold is not tested on a busy host's interval
    quiet = assess_noise(QUIET).model_dump(mode="json")
    v = baseline_compare(baseline, case, env, run.model_copy(update={"noise": quiet}), parsed, tmp_path / "w2")
    assert v.verdict == "regression" and v.evidence["paired"]["host_busy"] is False


def test_a_busy_host_makes_an_unpaired_verdict_inconclusive(baseline, tmp_path):
    ctx, _, env, _, run, parsed, _ = make_records(tmp_path, dag_run_id="cand", median=10.0)
    quiet = baseline_compare(baseline, ctx.case, env, run, parsed, tmp_path / "w1")
    busy = baseline_compare(baseline, ctx.case, env, run.model_copy(update={"noise": BUSY}), parsed, tmp_path / "w2")
    assert quiet.verdict in ("pass", "inconclusive") and busy.verdict == "inconclusive"
    assert busy.evidence["noise"]["reason"].startswith("host busy")


def _bundle(noise, verdict=None, paired_path=None):
    """A run state after profiled-run (and, with ``verdict``, after archive) with this noise; of the stage
    records only the fields read here (``model_construct``)."""
    b = RunState(
        ctx=RunContext(dag_id="d", dag_run_id="r", case=Case(model="m", measured_steps=10)),
        env=EnvRecord.model_construct(comparability_key="k1"),
        run=ProfiledRun.model_construct(noise=noise, paired_path=paired_path),
    )
    if verdict:
        b = b.model_copy(
            update={
                "verdict": CompareRecord.model_construct(verdict=verdict, evidence={"noise": noise}),
                "archived": ArchiveRecord.model_construct(run_id=7),
            }
        )
    return b


def test_profiled_run_raises_host_busy_only_while_a_retry_is_left(db_url, tmp_path, monkeypatch):
    from tasks.settings import Settings

    settings = Settings.from_env({"PERFWATCH_HOME": str(tmp_path / "h"), "PERFWATCH_DATABASE_URL": db_url})
    monkeypatch.setattr(pipeline, "run_stage", lambda state, stage_id, settings=None: state)
    gate = _bundle(BUSY, paired_path="/x/paired/result.json")
    with pytest.raises(pipeline.HostBusy, match="host busy: other processes took 62%.*measuring again later"):
        pipeline.profile_unless_busy(gate, settings, retry_left=True)
    assert pipeline.profile_unless_busy(gate, settings, retry_left=False).run.noise["busy"]  # last try: go on
    quiet = assess_noise(QUIET).model_dump(mode="json")
    assert pipeline.profile_unless_busy(_bundle(quiet, paired_path="/x"), settings, retry_left=True)
    # a first run is no-baseline however busy the host: nothing to measure again for
    assert pipeline.profile_unless_busy(_bundle(BUSY), settings, retry_left=True)
    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="base"))  # now a baseline
    with pytest.raises(pipeline.HostBusy):
        pipeline.profile_unless_busy(_bundle(BUSY), settings, retry_left=True)


def test_an_archived_busy_verdict_turns_the_run_red():
    with pytest.raises(pipeline.HostBusy, match="verdict inconclusive, host busy.*archived as run 7"):
        pipeline.raise_on_host_busy(_bundle(BUSY, "inconclusive"))
    pipeline.raise_on_host_busy(_bundle(assess_noise(QUIET).model_dump(mode="json"), "inconclusive"))
    pipeline.raise_on_host_busy(_bundle(BUSY, "regression"))  # a regression goes red by RegressionDetected


@pytest.mark.slow  # a fresh interpreter loads the DAGs with Airflow's DagBag
def test_dag_retries_the_profiled_run_later_for_a_busy_host():
    """The DAG's measure task (fingerprint, warm-up, profiled run) has retries with a delay (HostBusy is the only
    failure it retries)."""
    root = ROOT_DIR
    probe = (
        "import sys, json\nfrom airflow.dag_processing.dagbag import DagBag\n"
        "t = DagBag(dag_folder=sys.argv[1]).get_dag('perfwatch_profile').get_task('measure')\n"
        "print(json.dumps({'retries': t.retries, 'delay_s': t.retry_delay.total_seconds()}))"
    )
    env = {
        **os.environ,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "plugins")]),
    }  # the plugins folder, as Airflow puts it on sys.path (the DAGs import perfwatch.notifier)
    env.setdefault("AIRFLOW_HOME", str(root / ".airflow"))
    out = subprocess.run(
        [sys.executable, "-c", probe, str(root / "dags")], capture_output=True, text=True, env=env, check=True, cwd=root
    )
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["retries"] >= 1 and info["delay_s"] >= 300
