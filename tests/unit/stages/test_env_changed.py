"""baseline-compare across environments, end to end through the store, without TensorFlow.

A baseline run is archived with a realistic GPU fingerprint (driver 535.104.05, TF built against
cuDNN 8.6); a candidate fingerprinted after a driver and cuDNN upgrade is judged across the change, and
with one accepted run of the old environment and no drift calibrated (the default prior) the interval is
too wide: the verdict ``env-changed`` (undecided), whose evidence names exactly those two fields with old
and new values. How a change is decided: ``test_env_judged.py``.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from tasks.analysis.environment import Fingerprint, comparability_fields
from tasks.cli.baseline import accept_run
from tasks.cli.env import env_change_summary
from tasks.stages.archive import archive_run
from tasks.store import Environment, Run, session_scope
from tests.helpers.builders import (
    BASELINE_FINGERPRINT,
    CANDIDATE_FINGERPRINT,
    CHANGED,
    archive_with_env,
    compare_candidate,
    env_record,
    with_changes,
)


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
    # The ratio across the change (candidate median 10.4+ vs 10.0+ ms), its interval wider than the tolerance.
    assert verdict.ratio == pytest.approx(10.445 / 10.045, rel=1e-3)
    assert verdict.ci_low < 1.0 and verdict.ci_high > 1.05
    assert verdict.median_limit_ms == pytest.approx(10.045 * 1.05)

    # Archived, the verdict keeps its evidence; undecided, the run is not the new environment's baseline until
    # a person accepts it.
    ctx, pulled, env, warm, run, parsed = recs
    run_id = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, verdict).run_id
    with session_scope(db_url) as s:
        assert s.scalar(select(func.count()).select_from(Environment)) == 2
        stored = s.scalar(select(Run).where(Run.id == run_id))
        assert stored.verdict == "env-changed"
    _, again = compare_candidate(db_url, tmp_path, "cand2", CANDIDATE_FINGERPRINT, median=10.4)
    assert again.verdict == "env-changed" and again.baseline_run_ids == [baseline_run]
    accept_run(db_url, run_id, "ana", "driver and cuDNN upgrade reviewed")
    _, again = compare_candidate(db_url, tmp_path, "cand3", CANDIDATE_FINGERPRINT, median=10.4)
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
