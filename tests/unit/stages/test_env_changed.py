"""baseline-compare across environments, end to end through the store, without TensorFlow.

A baseline run is archived with a realistic GPU fingerprint (driver 535.104.05, TF built against
cuDNN 8.6); a candidate fingerprinted after a driver and cuDNN upgrade must get the verdict
``env-changed`` whose evidence names exactly those two fields with old and new values.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tasks.analysis.environment import Fingerprint, comparability_fields
from tasks.cli.env import env_change_summary
from tasks.records import EnvRecord
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.store import Environment, Run, session_scope
from tests.unit.store.test_store import make_records

_DEVICE = {
    "index": 0,
    "name": "NVIDIA A100-SXM4-40GB",
    "uuid": "GPU-5d1c0a6e-9f1b-4b7e-8c1e-2a9b3c4d5e6f",
    "memory_total_bytes": 42_949_672_960,
    "compute_capability": "8.0",
    "power_limit_mw": 400_000,
    "applications_clock_mhz": {"sm": 1410, "mem": 1215},
    "max_clock_mhz": {"sm": 1410, "mem": 1215},
    "ecc_mode": {"current": "enabled", "pending": "enabled"},
    "persistence_mode": "enabled",
    "mig_mode": {"current": "disabled", "pending": "disabled"},
    "mig_devices": [],
}

BASELINE_FINGERPRINT: dict[str, Any] = {
    "tensorflow": {
        "version": "2.12.0",
        "git_version": "v2.12.0-rc1-12-g0db597d0d75",
        "built_with_xla": True,
        "xla_jit": "off",
        "onednn_enabled": True,
        "op_determinism": False,
        "tensor_float_32": True,
        "build": {
            "cuda_version": "11.8",
            "cudnn_version": "8.6",
            "is_cuda_build": True,
            "is_rocm_build": False,
            "is_tensorrt_build": True,
        },
    },
    "gpu": {
        "nvml": "ok",
        "driver_version": "535.104.05",
        "cuda_driver_version": "12.2",
        "count": 1,
        "physical_count": 1,
        "devices": [_DEVICE],
    },
    "host": {
        "cpu_model": "AMD EPYC 7742 64-Core Processor",
        "cpu_count_logical": 32,
        "cpu_count_physical": 16,
        "cpu_governor": "performance",
        "memory_total_bytes": 270_000_000_000,
        "os": "Linux",
        "os_release": "Ubuntu 22.04.3 LTS",
        "kernel": "5.15.0-91-generic",
        "machine": "x86_64",
        "python_version": "3.11.7",
        "image_digest": "absent",
    },
    "packages": {
        "tensorflow": "2.12.0",
        "tensorflow-cpu": "absent",
        "keras": "2.12.0",
        "numpy": "1.23.5",
        "xprof": "absent",
        "installed_count": 180,
        "installed_sha256": "ab" * 32,
    },
    "env_vars": {
        "CUDA_DEVICE_ORDER": "absent",
        "CUDA_VISIBLE_DEVICES": "0",
        "NVIDIA_TF32_OVERRIDE": "absent",
        "OMP_NUM_THREADS": "absent",
        "TF_DETERMINISTIC_OPS": "absent",
        "TF_ENABLE_AUTO_MIXED_PRECISION": "absent",
        "TF_ENABLE_ONEDNN_OPTS": "absent",
        "TF_XLA_FLAGS": "absent",
        "XLA_FLAGS": "absent",
    },
    "recorded": {
        "hostname": "gpu-worker-01",
        "timestamp_utc": "2026-01-05T02:00:11+00:00",
        "python_executable": "/opt/tf/bin/python",
    },
}

# The candidate: the node's driver was upgraded and TF rebuilt against a newer cuDNN; also a
# different worker host and time, which only the ``recorded`` section holds.
CHANGED = {"gpu.driver_version": ("535.104.05", "535.129.03"), "tensorflow.build.cudnn_version": ("8.6", "8.9")}


def with_changes(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of fingerprint ``data`` with dotted-path fields set (list indices as digits)."""
    out = copy.deepcopy(data)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(leaf) if isinstance(node, list) else leaf] = value
    return out


def env_record(data: dict[str, Any]) -> EnvRecord:
    """The env-fingerprint stage's record for ``data`` (hashes computed as the stage does)."""
    return EnvRecord(**Fingerprint.from_data(data).model_dump())


CANDIDATE_FINGERPRINT = with_changes(
    BASELINE_FINGERPRINT,
    {
        **{field: new for field, (_, new) in CHANGED.items()},
        "recorded.hostname": "gpu-worker-07",
        "recorded.timestamp_utc": "2026-01-06T02:00:09+00:00",
    },
)


def archive_with_env(
    db_url: str, tmp: Path, dag_run_id: str, data: dict[str, Any], *, median: float = 10.0, verdict=None
) -> int:
    """Archive one run (make_records' files) fingerprinted as ``data``; returns its run id."""
    ctx, pulled, _, warm, run, parsed, comp = make_records(tmp, dag_run_id=dag_run_id, median=median)
    return archive_run(
        db_url, str(tmp / "archive"), ctx, pulled, env_record(data), warm, run, parsed, verdict or comp
    ).run_id


def compare_candidate(db_url: str, tmp: Path, dag_run_id: str, data: dict[str, Any], median: float):
    """baseline_compare for a candidate run fingerprinted as ``data``; returns (records, CompareRecord)."""
    ctx, pulled, _, warm, run, parsed, _ = make_records(tmp, dag_run_id=dag_run_id, median=median)
    env = env_record(data)
    verdict = baseline_compare(db_url, ctx.case, env, run, parsed, tmp / dag_run_id / "work")
    return (ctx, pulled, env, warm, run, parsed), verdict


@pytest.fixture
def baseline_run(db_url, tmp_path) -> int:
    """A store with one accepted baseline run (verdict no-baseline) on BASELINE_FINGERPRINT."""
    return archive_with_env(db_url, tmp_path, "base", BASELINE_FINGERPRINT, median=10.0)


def test_fixture_differs_in_exactly_the_changed_comparability_fields():
    old, new = comparability_fields(BASELINE_FINGERPRINT), comparability_fields(CANDIDATE_FINGERPRINT)
    assert {k for k in old if old[k] != new[k]} == set(CHANGED)


def test_driver_and_cudnn_upgrade_is_env_changed(db_url, tmp_path, baseline_run):
    recs, verdict = compare_candidate(db_url, tmp_path, "cand", CANDIDATE_FINGERPRINT, median=10.4)
    assert verdict.verdict == "env-changed" and verdict.method == "cross-environment"
    assert verdict.baseline_run_ids == [baseline_run]
    assert [(c["field"], c["old"], c["new"]) for c in verdict.evidence["env_changes"]] == [
        ("gpu.driver_version", "535.104.05", "535.129.03"),
        ("tensorflow.build.cudnn_version", "8.6", "8.9"),
    ]
    assert all(c["affects_comparability"] for c in verdict.evidence["env_changes"])
    # The cross-environment ratio is still measured (candidate median 10.4+ vs 10.0+ ms): informational.
    assert verdict.ratio == pytest.approx(10.445 / 10.045, rel=1e-3)
    assert verdict.ci_low <= verdict.ratio <= verdict.ci_high
    assert verdict.median_limit_ms is None  # no step-time ceiling across environments

    # Archived, the verdict keeps its evidence and the run starts the new environment's history.
    ctx, pulled, env, warm, run, parsed = recs
    run_id = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, verdict).run_id
    with session_scope(db_url) as s:
        assert s.scalar(select(func.count()).select_from(Environment)) == 2
        stored = s.scalar(select(Run).where(Run.id == run_id))
        assert stored.verdict == "env-changed"
    _, again = compare_candidate(db_url, tmp_path, "cand2", CANDIDATE_FINGERPRINT, median=10.4)
    assert again.baseline_run_ids == [run_id] and again.verdict != "env-changed"
    assert "env_changes" not in again.evidence


def test_env_changed_summary_names_fields_and_values(db_url, tmp_path, baseline_run):
    _, verdict = compare_candidate(db_url, tmp_path, "cand", CANDIDATE_FINGERPRINT, median=10.4)
    text = env_change_summary(verdict.to_xcom())
    assert text.startswith(f"environment changed since baseline run {baseline_run}: ")
    assert "gpu.driver_version '535.104.05' → '535.129.03'" in text
    assert "tensorflow.build.cudnn_version '8.6' → '8.9'" in text
    assert "hostname" not in text
    assert env_change_summary({**verdict.to_xcom(), "verdict": "pass"}) is None


def test_swapped_card_of_same_model_stays_comparable(db_url, tmp_path, baseline_run):
    """A different GPU uuid is a new environment row but the same comparability key: same history."""
    swapped = with_changes(BASELINE_FINGERPRINT, {"gpu.devices.0.uuid": "GPU-00000000-1111-2222-3333-444444444444"})
    assert Fingerprint.from_data(swapped).fingerprint_id != Fingerprint.from_data(BASELINE_FINGERPRINT).fingerprint_id
    _, verdict = compare_candidate(db_url, tmp_path, "cand", swapped, median=10.0)
    assert verdict.verdict != "env-changed" and verdict.method != "cross-environment"
    assert verdict.baseline_run_ids == [baseline_run]


def test_no_baseline_anywhere(db_url, tmp_path):
    _, verdict = compare_candidate(db_url, tmp_path, "cand", CANDIDATE_FINGERPRINT, median=10.0)
    assert (verdict.verdict, verdict.baseline_run_ids) == ("no-baseline", [])
    assert "env_changes" not in verdict.evidence


def test_runs_with_the_same_fingerprint_share_one_environment_row(db_url, tmp_path):
    """Done-when of issue 3: the demo's two runs (v1, v2 on one machine) share one environments row.

    Runs on one machine differ only in the ``recorded`` section (time), which is not part of the
    fingerprint id, so the second archive reuses the first row.
    """
    later = with_changes(BASELINE_FINGERPRINT, {"recorded.timestamp_utc": "2026-01-05T02:09:40+00:00"})
    assert env_record(later).fingerprint_id == env_record(BASELINE_FINGERPRINT).fingerprint_id
    first = archive_with_env(db_url, tmp_path, "v1", BASELINE_FINGERPRINT)
    second = archive_with_env(db_url, tmp_path, "v2", later, median=12.0)
    with session_scope(db_url) as s:
        envs = s.execute(select(Environment.id, Environment.fingerprint_id)).all()
        run_envs = dict(s.execute(select(Run.id, Run.environment_id)).all())
    assert len(envs) == 1
    assert run_envs == {first: envs[0].id, second: envs[0].id}
    assert envs[0].fingerprint_id == env_record(BASELINE_FINGERPRINT).fingerprint_id
    # A different fingerprint gets a row of its own.
    third = archive_with_env(db_url, tmp_path, "v3", CANDIDATE_FINGERPRINT)
    with session_scope(db_url) as s:
        assert s.scalar(select(func.count()).select_from(Environment)) == 2
        assert s.scalar(select(Run.environment_id).where(Run.id == third)) != envs[0].id
