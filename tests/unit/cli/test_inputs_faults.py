"""Issue 11, the stages-and-inputs faults: stage timeouts as settings whose errors say what happened (6),
limits in the user's terms (7), NVML failures that never look like a CPU host (10), only
performance-relevant environment variables in the comparability key (11), and unknown models (12).
Versions and names as real stores have them (9) are in tests/test_pull.py.

No TensorFlow: runner and probe processes are stood in for by small shell scripts; NVML is faked at the
pynvml boundary as in tests/test_fingerprint.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pynvml
import pytest
from pydantic import ValidationError
from sqlalchemy import func, select

from tasks.analysis import environment as envm
from tasks.cli.env import env_change_summary
from tasks.cli.history import with_env_changes
from tasks.records import Case, PulledModel, WarmupRecord
from tasks.runner import RunnerError, RunnerSpec, launch, probe
from tasks.settings import STEP_ALLOWANCE, TIMEOUT_DEFAULTS, Settings
from tasks.stages import fingerprint as fpm
from tasks.stages.warmup import limit_after_warmup, warm_up
from tasks.store import Model, session_scope
from tests.helpers import ROOT as REPO
from tests.helpers.builders import BASELINE_FINGERPRINT, add_run, archive_with_env, compare_candidate, with_changes
from tests.helpers.fakes import H100, FakeNVML


def _shim(tmp_path: Path, script: str) -> str:
    """An executable standing in for a Python interpreter: runs ``script`` (sh) whatever it is asked."""
    shim = tmp_path / "python"
    shim.write_text(f"#!/bin/sh\n{script}\n")
    shim.chmod(0o755)
    return str(shim)


def _text(res) -> str:
    """A CLI result's output as one line of words (rich wraps usage errors in a box)."""
    return " ".join(res.output.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


# ---------------------------------------------------------------- 6: stage timeouts


def test_every_runner_stage_timeout_is_a_setting():
    stages = ["env-fingerprint", "warm-up", "profiled-run", "paired-run"]
    assert list(TIMEOUT_DEFAULTS) == stages
    assert Settings.from_env({}).timeout_s("env-fingerprint") >= 300  # a fixed 120 s failed 9 of 14 loaded runs
    env = {var: str(10 * (i + 1)) for i, (var, _) in enumerate(TIMEOUT_DEFAULTS.values())}
    assert [Settings.from_env(env).timeout_s(stage) for stage in stages] == [10.0, 20.0, 30.0, 40.0]
    settings_page = (REPO / "docs" / "settings.md").read_text()
    assert all(f"`{var}`" in settings_page for var, _ in TIMEOUT_DEFAULTS.values())  # documented in the Settings table


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "inf", "nan"])
def test_a_bad_timeout_setting_is_named_when_its_stage_starts(raw):
    settings = Settings.from_env({"PERFWATCH_WARMUP_TIMEOUT_S": raw})  # other commands are not affected
    with pytest.raises(ValueError, match=rf"PERFWATCH_WARMUP_TIMEOUT_S='{raw}': expected a time limit in seconds"):
        settings.runner_limit("warm-up")


def test_measuring_stage_limits_grow_with_the_steps_they_time(monkeypatch):
    """100000 measured steps of a 60 ms model (the documented maximum) must not hit a fixed limit."""
    monkeypatch.setenv("PERFWATCH_PROFILE_TIMEOUT_S", "600")
    warm = WarmupRecord(
        warmup_steps=3, steady=True, final_cv=0.01, cold_step_ms=900.0, step_times_ms=[50.0, 60.0, 70.0], wall_s=1.0
    )
    limit, how = limit_after_warmup("profiled-run", warm, 100_000)
    assert limit == pytest.approx(600 + STEP_ALLOWANCE * 100_000 * 0.060)
    assert how == f"PERFWATCH_PROFILE_TIMEOUT_S=600 s + {STEP_ALLOWANCE:g} x 100000 steps x 60.0 ms"
    assert limit_after_warmup("paired-run", warm, 10, timeout_s=5.0) == (5.0, "timeout_s")


def test_fingerprint_timeout_says_stage_limit_setting_and_what_the_probe_printed(tmp_path, monkeypatch):
    """Fault 6: a fixed 120 s, not configurable, and the timeout error had an empty stderr tail."""
    monkeypatch.setenv("PERFWATCH_FINGERPRINT_TIMEOUT_S", "1")
    shim = _shim(tmp_path, "echo 'perfwatch probe: importing TensorFlow' >&2; exec sleep 8")
    with pytest.raises(RuntimeError) as err:
        fpm.take_fingerprint_in(shim)
    msg = str(err.value)
    assert msg.startswith(
        f"env-fingerprint timed out: the probe in {shim!r} ran past its limit of 1 s "
        "(PERFWATCH_FINGERPRINT_TIMEOUT_S=1 s)"
    )
    assert msg.endswith("stderr tail:\nperfwatch probe: importing TensorFlow")


def test_the_probe_says_what_it_is_doing_on_stderr():
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.runner.probe", "--no-tensorflow"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert "perfwatch probe: reading NVML" in proc.stderr and proc.stdout.startswith('{"data": ')


def test_warmup_timeout_says_stage_limit_setting_and_stderr_tail(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFWATCH_WARMUP_TIMEOUT_S", "1")
    shim = _shim(tmp_path, "echo 'loading model' >&2; echo 'tracing the training step' >&2; exec sleep 8")
    pulled = PulledModel(
        model="m",
        version="1",
        source_uri="/s/m/1",
        local_path=str(tmp_path / "model"),
        format="keras",
        digest="a" * 64,
        size_bytes=1,
    )
    with pytest.raises(RunnerError) as err:
        warm_up(pulled, Case(model="m"), tmp_path / "work", shim)
    msg = str(err.value)
    assert msg.startswith(
        f"warm-up timed out: the runner process for {tmp_path / 'model'} ran past its limit of 1 s "
        "(PERFWATCH_WARMUP_TIMEOUT_S=1 s) and was killed"
    )
    assert msg.endswith("stderr tail:\nloading model\ntracing the training step")
    assert (tmp_path / "work" / "warmup" / "warmup_stderr.log").read_text().startswith("loading model")  # kept


def test_runner_exit_without_result_names_the_stage(tmp_path):
    shim = _shim(tmp_path, "echo 'Killed' >&2; exit 137")
    spec = RunnerSpec(mode="profile", model_path="/m", out_dir=str(tmp_path / "run"), batch_size=1)
    with pytest.raises(
        RunnerError,
        match=r"^profiled run: runner \(profile\) for /m exited 137 without a result; "
        r"stderr tail:\nKilled$",
    ):
        launch(spec, shim, 30)


# ---------------------------------------------------------------- 7: limits in the user's terms


def test_measured_steps_up_to_the_documented_maximum_need_no_other_setting():
    """Fault 7: --measured-steps 20000 was refused with 'paired_blocks: Input should be <= 10000'."""
    case = Case(model="m", measured_steps=20_000)
    # the budget is whole processes of paired_blocks // paired_processes pairs each (6 of 3333)
    assert (case.paired_blocks, case.paired_timed_steps) == (20_000, 2 * 6 * 3333)
    assert Case(model="m", measured_steps=100_000, paired=True).paired_blocks == 100_000
    RunnerSpec(
        mode="paired",
        model_path="/b",
        baseline_model_path="/a",
        out_dir="/o",
        batch_size=1,
        blocks=case.paired_blocks,
        block_steps=1,
    )  # the runner takes what the case allows


def test_an_out_of_range_value_is_named_as_given_never_as_a_derived_setting():
    with pytest.raises(ValidationError) as err:
        Case(model="m", measured_steps=200_000)
    assert [e["loc"] for e in err.value.errors()] == [("measured_steps",)]
    with pytest.raises(
        ValidationError,
        match=r"paired_blocks=50000 x paired_block_steps=4 is 200000 timed steps "
        r"per version; at most 100000",
    ):
        Case(model="m", paired_blocks=50_000, paired_block_steps=4)


def test_cli_run_names_the_option_the_user_gave(home, cli):
    res = cli("run", "m", "--measured-steps", "200000")
    assert res.exit_code == 2
    assert "--measured-steps: Input should be less than or equal to 100000" in _text(res)
    assert "paired_blocks" not in res.output


# ---------------------------------------------------------------- 10: NVML failures


def _gpu_reading(monkeypatch, error: Exception) -> dict:
    FakeNVML([H100], init_error=error).install(monkeypatch)
    return fpm.take_fingerprint(include_tensorflow=False).data


def test_nvml_version_mismatch_is_unknown_not_absent(monkeypatch):
    """Fault 10: a driver/library mismatch recorded driver 'absent' and 0 GPUs, like a CPU host."""
    data = _gpu_reading(monkeypatch, pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    g = data["gpu"]
    marker = "unknown: NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM version mismatch."
    assert {
        k: g[k] for k in ("nvml", "driver_version", "cuda_driver_version", "count", "physical_count")
    } == dict.fromkeys(("nvml", "driver_version", "cuda_driver_version", "count", "physical_count"), marker)
    assert envm.not_comparable_reason(data) == f"gpu.count: {marker}"


def test_an_nvml_failure_is_comparable_with_no_other_reading(monkeypatch):
    broken = [_gpu_reading(monkeypatch, pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)) for _ in range(2)]
    cpu = with_changes(
        broken[0],
        {
            "gpu": {
                "nvml": "absent",
                "driver_version": "absent",
                "cuda_driver_version": "absent",
                "count": 0,
                "physical_count": 0,
                "devices": [],
            }
        },
    )
    keys = {envm.Fingerprint.from_data(d).comparability_key for d in [*broken, cpu]}
    assert len(keys) == 3  # neither the CPU host's key nor the other broken reading's
    assert envm.not_comparable_reason(cpu) is None
    for absent in (pynvml.NVMLError_LibraryNotFound(), pynvml.NVMLError_DriverNotLoaded()):
        assert envm.not_comparable_reason(_gpu_reading(monkeypatch, absent)) is None  # a CPU host, comparable


def test_a_broken_driver_never_joins_a_cpu_history(db_url, tmp_path, monkeypatch):
    cpu = with_changes(
        BASELINE_FINGERPRINT,
        {
            "gpu": {
                "nvml": "absent",
                "driver_version": "absent",
                "cuda_driver_version": "absent",
                "count": 0,
                "physical_count": 0,
                "devices": [],
            }
        },
    )
    base = archive_with_env(db_url, tmp_path, "cpu", cpu)
    gpu = _gpu_reading(monkeypatch, pynvml.NVMLError(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))["gpu"]
    broken = {**cpu, "gpu": gpu, "recorded": {**cpu["recorded"], "probe_id": "a" * 32}}
    recs, verdict = compare_candidate(db_url, tmp_path, "broken", broken, median=10.0)
    assert verdict.verdict == "env-changed" and verdict.baseline_run_ids == [base]  # not judged against it
    assert ("gpu.driver_version", "absent") in {(c["field"], c["old"]) for c in verdict.evidence["env_changes"]}
    assert "NVML failed on this host" in env_change_summary(verdict.to_xcom())


# ---------------------------------------------------------------- 11: which env vars matter


def test_only_performance_env_vars_enter_the_comparability_key():
    """Fault 11: a run outside Airflow differs from one inside only by TF_CPP_MIN_LOG_LEVEL."""
    base = envm.Fingerprint.from_data(BASELINE_FINGERPRINT)
    assert base.comparability_key == "2e0e9be660ebb330"  # the key stored before this change: histories continue
    quiet = with_changes(
        BASELINE_FINGERPRINT,
        {
            "env_vars.TF_CPP_MIN_LOG_LEVEL": "2",
            "env_vars.TF_GPU_THREAD_MODE": "absent",
            "env_vars.CUDA_VISIBLE_DEVICES": "GPU-5d1c0a6e",
        },
    )
    assert envm.Fingerprint.from_data(quiet).comparability_key == base.comparability_key
    for name, value in [
        ("TF_NUM_INTRAOP_THREADS", "1"),
        ("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
        ("CUDA_LAUNCH_BLOCKING", "1"),
        ("OMP_NUM_THREADS", "4"),
    ]:
        changed = with_changes(BASELINE_FINGERPRINT, {f"env_vars.{name}": value})
        assert envm.Fingerprint.from_data(changed).comparability_key != base.comparability_key, name
        assert envm.is_comparability(f"env_vars.{name}")
    assert not envm.is_comparability("env_vars.TF_CPP_MIN_LOG_LEVEL")


def test_every_performance_env_var_is_recorded_by_the_probe(monkeypatch):
    for name in envm.PERFORMANCE_ENV_VARS:
        monkeypatch.setenv(name, "7")
    env = probe._env_section()
    assert {name: env.get(name) for name in envm.PERFORMANCE_ENV_VARS} == dict.fromkeys(envm.PERFORMANCE_ENV_VARS, "7")


def test_log_level_alone_is_not_an_environment_change(db_url, tmp_path):
    """The verdict stays in the same history and the history draws no environment line."""
    inside = with_changes(BASELINE_FINGERPRINT, {"env_vars.TF_CPP_MIN_LOG_LEVEL": "2"})
    outside = with_changes(BASELINE_FINGERPRINT, {"env_vars.TF_CPP_MIN_LOG_LEVEL": "0"})
    base = archive_with_env(db_url, tmp_path, "airflow", inside)
    _, verdict = compare_candidate(db_url, tmp_path, "cli", outside, median=10.0)
    assert verdict.verdict != "env-changed" and verdict.baseline_run_ids == [base]


def test_history_marks_comparability_changes_not_fingerprint_changes(db_url, tmp_path):
    add_run(db_url, tmp_path, "a", fp="a", day=0)
    add_run(db_url, tmp_path, "b", fp="b", day=1)  # a new fingerprint and a new key (add_run: key-<fp>)
    from tasks.store import queries

    df = queries.history("m", db_url=db_url)
    df = pd.concat([df, df.iloc[[1]].assign(run_id=99, fingerprint_id="c" * 64)], ignore_index=True)
    df.loc[2, "env_changed"] = 1  # the query flags any fingerprint change: here only e.g. the log level
    out = with_env_changes(df)
    assert list(out["env_changed"]) == [0, 1, 0] and list(out["fingerprint_changed"]) == [0, 1, 1]


# ---------------------------------------------------------------- 12: unknown models


@pytest.fixture
def typo_store(home, cli, db_url, tmp_path):
    """A model store with model 'resnet' and a store with one run of it."""
    (home / "models" / "resnet" / "1").mkdir(parents=True)
    add_run(db_url, tmp_path, "r1", model="resnet", version="1")
    return cli


def _models(db_url: str) -> list[str]:
    with session_scope(db_url) as s:
        return list(s.scalars(select(Model.name)))


def test_run_of_a_misspelled_model_records_nothing(typo_store, db_url):
    """Fault 12: a misspelled `perfwatch run MODEL` left a permanent models row."""
    res = typo_store("run", "resnt", "--measured-steps", "20000")
    assert res.exit_code == 2
    assert "unknown model 'resnt'" in _text(res) and "models there: resnet" in _text(res)
    assert _models(db_url) == ["resnet"]
    res = typo_store("run", "resnet", "--version", "7")
    assert res.exit_code == 2 and "versions there: [1]" in _text(res)
    with session_scope(db_url) as s:
        from tasks.store import Run

        assert s.scalar(select(func.count()).select_from(Run)) == 1


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["runs", "--model", "resnt"], 1),
        (["gate", "resnt", "1"], 2),
        (["history", "resnt"], 1),
        (["regressions", "--model", "resnt"], 1),
        (["failures", "--model", "resnt"], 1),
        (["env-changes", "--model", "resnt"], 1),
        (["compare", "resnt", "--from", "1", "--to", "2"], 1),
    ],
)
def test_unknown_model_everywhere(typo_store, args, code):
    """Fault 12: `runs --model <typo>` printed an empty table and exited 0; `gate <typo> 2` said
    'no run of this version'."""
    res = typo_store(*args)
    assert res.exit_code == code, res.output
    assert "unknown model 'resnt' (did you mean 'resnet'?); models: resnet" in _text(res)


def test_zero_padded_versions_name_the_same_version_in_queries(typo_store):
    res = typo_store("gate", "resnet", "0001")
    assert "gate resnet v1:" in res.output and "no run of this version" not in res.output
