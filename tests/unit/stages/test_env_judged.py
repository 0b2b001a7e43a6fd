"""An environment change is judged, not only named (issue 36 item 3), end to end through the store.

The case's accepted runs are in environment A (driver 535.104.05, cuDNN 8.6); the candidate runs after a driver and
cuDNN upgrade (environment B), with no accepted run there yet. Each run is one process of 100 steps (5% step-to-step
noise; 2% on a quiet host) whose median is offset from the version's true speed by that process's own drift: log
offsets of sd about 0.05 for a realistic host (two processes of one version differ by 6-8% here) and a fifth of that
(0.01) for a quiet one.
The verdict must judge the change with an interval across processes: a 20% slowdown is a ``regression`` naming the
changed fields and never becomes the baseline; an unchanged speed on a quiet host passes and becomes B's baseline;
an unchanged speed that the drift cannot tell from a slowdown stays ``env-changed``, is not accepted, and says how to
accept it.
"""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select

from tasks.analysis import calibration, stats
from tasks.analysis.environment import Fingerprint
from tasks.cli.baseline import accept_run
from tasks.cli.history import exit_code
from tasks.records import AUTO_ACCEPT_VERDICTS, Verdict, VerdictStory
from tasks.services.story import reason_text
from tasks.stages.archive import archive_run
from tasks.store import Baseline, session_scope
from tests.helpers.builders import (
    BASELINE_FINGERPRINT,
    CANDIDATE_FINGERPRINT,
    QUIET_HOST_LOAD,
    archive_with_env,
    compare_candidate,
)

#: log offsets of eight processes' medians from the version's speed (sd 0.049: medians 6-8% apart)
DRIFT = [0.0, 0.06, -0.05, 0.03, -0.07, 0.04, -0.02, 0.01]
CHANGES = "gpu.driver_version 535.104.05 -> 535.129.03; tensorflow.build.cudnn_version 8.6 -> 8.9"
KEY_B = Fingerprint.from_data(CANDIDATE_FINGERPRINT).comparability_key


def process(seed: int, speed: float, offset: float, step_sd: float = 0.05) -> list[float]:
    """One process's 100 measured step times (ms): lognormal step noise (``step_sd``) around ``speed`` x
    exp(``offset``)."""
    rng = np.random.default_rng(seed)
    return list(10.0 * speed * np.exp(offset + rng.normal(0.0, step_sd, 100)))


def old_environment(db_url, tmp_path, scale: float, step_sd: float = 0.05) -> list[int]:
    """Eight accepted runs of version 1 in environment A, their drift ``scale`` x :data:`DRIFT`."""
    return [
        archive_with_env(db_url, tmp_path, f"a{i}", BASELINE_FINGERPRINT, steps=process(i, 1.0, scale * o, step_sd))
        for i, o in enumerate(DRIFT)
    ]


def archive_candidate(db_url, tmp_path, name, speed, offset=0.005, seed=99, noise=None, step_sd=0.05):
    steps = process(seed, speed, offset, step_sd)
    recs, verdict = compare_candidate(db_url, tmp_path, name, CANDIDATE_FINGERPRINT, 0.0, steps=steps, noise=noise)
    ctx, pulled, env, warm, run, parsed = recs
    run_id = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, verdict).run_id
    return run_id, verdict


def baselines_in_b(db_url) -> list[int]:
    with session_scope(db_url) as s:
        return list(s.scalars(select(Baseline.run_id).where(Baseline.comparability_key == KEY_B)))


def test_a_slowdown_across_the_change_is_a_regression_that_names_the_changed_fields(db_url, tmp_path):
    """Before issue 36 item 3 this run was ``env-changed`` and became B's baseline: a 20% slower upgrade accepted."""
    old = old_environment(db_url, tmp_path, 1.0)
    run_id, verdict = archive_candidate(db_url, tmp_path, "b", 1.20)
    assert verdict.verdict == Verdict.REGRESSION and verdict.method == "cross-environment"
    assert verdict.ci_low > 1.0 and verdict.ci_high > 1.05
    assert verdict.baseline_run_ids == old[::-1][:5]  # the lookback of environment A, newest first
    assert verdict.reason.startswith(f"the environment changed: {CHANGES}; ")
    assert [c["field"] for c in verdict.evidence["env_changes"]] == [
        "gpu.driver_version",
        "tensorflow.build.cudnn_version",
    ]
    story = VerdictStory.from_compare(verdict, run_id=run_id)
    assert [(c.field, c.old, c.new) for c in story.env_changes] == [
        ("gpu.driver_version", "535.104.05", "535.129.03"),
        ("tensorflow.build.cudnn_version", "8.6", "8.9"),
    ]
    assert reason_text(story).startswith(f"the environment changed: {CHANGES}; ")
    assert exit_code(verdict.verdict) == 1 and not verdict.gx_success  # GX's threshold fails as for any regression
    assert baselines_in_b(db_url) == []


def test_the_interval_across_the_change_holds_the_between_process_drift(db_url, tmp_path):
    """The interval comes from processes (the accepted runs of A and their drift), not from steps inside two runs:
    it is several times wider than the two runs' step-level bootstrap, and says how many processes it rests on."""
    old_environment(db_url, tmp_path, 1.0)
    _, verdict = compare_candidate(db_url, tmp_path, "b", CANDIDATE_FINGERPRINT, 0.0, steps=process(99, 1.0, 0.005))
    steps = stats.median_ratio_ci(process(99, 1.0, 0.005), process(7, 1.0, DRIFT[7]), confidence=0.99)
    assert np.log(verdict.ci_high / verdict.ci_low) > 3 * np.log(steps.high / steps.low)
    assert verdict.evidence["stats"]["n_baseline"] == 5 and verdict.evidence["prior"]["source"] == "store"
    assert verdict.evidence["prior"]["between_sd"] == pytest.approx(0.05, abs=0.01)


def test_an_unchanged_speed_on_a_quiet_host_passes_and_becomes_the_new_baseline(db_url, tmp_path):
    old_environment(db_url, tmp_path, 0.2, step_sd=0.02)
    run_id, verdict = archive_candidate(db_url, tmp_path, "b", 1.0, offset=0.0, step_sd=0.02)
    assert verdict.verdict == Verdict.PASS and verdict.method == "cross-environment"
    assert 1 / 1.05 < verdict.ci_low < 1.0 < verdict.ci_high < 1.05
    assert verdict.reason.startswith(f"the environment changed: {CHANGES}; ")
    assert VerdictStory.from_compare(verdict, run_id=run_id).env_changes  # the fields stay named on a pass
    assert baselines_in_b(db_url) == [run_id]
    _, again = compare_candidate(
        db_url, tmp_path, "b2", CANDIDATE_FINGERPRINT, 0.0, steps=process(98, 1.0, 0.0, step_sd=0.02)
    )
    assert again.method == "history-lookback" and again.baseline_run_ids == [run_id]


def test_an_undecided_change_stays_env_changed_is_not_accepted_and_says_how_to_accept(db_url, tmp_path):
    old_environment(db_url, tmp_path, 1.0)
    run_id, verdict = archive_candidate(db_url, tmp_path, "b", 1.0)
    assert verdict.verdict == Verdict.ENV_CHANGED and Verdict.ENV_CHANGED not in AUTO_ACCEPT_VERDICTS
    assert verdict.ci_low < 1.0 < 1.05 < verdict.ci_high
    assert exit_code(verdict.verdict) == 2
    assert baselines_in_b(db_url) == []
    story = VerdictStory.from_compare(verdict, run_id=run_id)
    text = reason_text(story)
    assert text.startswith(f"the environment changed: {CHANGES}; ")
    assert f"perfwatch baseline accept {run_id} --by NAME --reason WHY" in text
    # a later night in B is again judged across the change, not against the unaccepted run
    _, later = compare_candidate(db_url, tmp_path, "b2", CANDIDATE_FINGERPRINT, 0.0, steps=process(98, 1.0, 0.0))
    assert later.method == "cross-environment" and run_id not in later.baseline_run_ids
    # a person accepts it: B's history starts from it
    accept_run(db_url, run_id, "ana", "TF upgrade reviewed")
    assert baselines_in_b(db_url) == [run_id]
    _, after = compare_candidate(db_url, tmp_path, "b3", CANDIDATE_FINGERPRINT, 0.0, steps=process(97, 1.0, 0.0))
    assert after.method == "history-lookback" and after.baseline_run_ids == [run_id]


def test_a_busy_host_leaves_the_change_undecided(db_url, tmp_path):
    """The statistics alone say regression; a busy host's wall time cannot judge it: env-changed, not accepted."""
    old_environment(db_url, tmp_path, 1.0)
    busy = calibration.assess_noise({**QUIET_HOST_LOAD, "other_cpu_share": 0.7}, max_other_cpu_share=0.25)
    run_id, verdict = archive_candidate(db_url, tmp_path, "b", 1.20, noise=busy.model_dump(mode="json"))
    assert verdict.verdict == Verdict.ENV_CHANGED
    assert verdict.evidence["verdict_statistics"]["verdict"] == Verdict.REGRESSION
    assert "host busy" in verdict.reason and verdict.reason.startswith(f"the environment changed: {CHANGES}; ")
    assert baselines_in_b(db_url) == []
