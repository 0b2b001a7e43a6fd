"""``perfwatch env show`` / ``perfwatch env diff`` against a real store (typer's CliRunner)."""

from __future__ import annotations

import json

import pytest

from tasks.analysis.environment import COMPARABILITY_FIELDS
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.store.writes import record_failure
from tests.helpers.builders import (
    BASELINE_FINGERPRINT,
    CANDIDATE_FINGERPRINT,
    CHANGED,
    archive_with_env,
    env_record,
    make_records,
    with_changes,
)


def text(res) -> str:
    """stdout + stderr with rich's box characters and line wrapping removed."""
    return " ".join(res.output.replace("│", " ").split())


@pytest.fixture
def two_runs(db_url, tmp_path) -> tuple[int, int]:
    """A baseline run and a candidate after a driver + cuDNN upgrade, archived with its env-changed verdict."""
    base = archive_with_env(db_url, tmp_path, "base", BASELINE_FINGERPRINT)
    ctx, pulled, _, warm, run, parsed, _ = make_records(tmp_path, dag_run_id="cand", median=10.4)
    env = env_record(CANDIDATE_FINGERPRINT)
    verdict = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "cand" / "work")
    assert verdict.verdict == "env-changed"
    cand = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, verdict).run_id
    return base, cand


def test_diff_lists_exactly_the_changed_fields(cli, two_runs):
    base, cand = two_runs
    res = cli("env", "diff", base, cand, "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [
        {"field": f, "old": old, "new": new, "affects_comparability": True} for f, (old, new) in CHANGED.items()
    ]


def test_diff_all_adds_recorded_fields(cli, two_runs):
    base, cand = two_runs
    rows = json.loads(cli("env", "diff", base, cand, "--all", "-f", "json").stdout)
    assert {r["field"]: (r["old"], r["new"]) for r in rows if not r["affects_comparability"]} == {
        "recorded.hostname": ("gpu-worker-01", "gpu-worker-07"),
        "recorded.timestamp_utc": ("2026-01-05T02:00:11+00:00", "2026-01-06T02:00:09+00:00"),
    }
    assert sorted(r["field"] for r in rows if r["affects_comparability"]) == sorted(CHANGED)


def test_diff_table_says_not_comparable(cli, two_runs):
    base, cand = two_runs
    res = cli("env", "diff", base, cand)
    assert res.exit_code == 0, res.output
    assert f"run {base} → run {cand}: 2 field(s) differ, 2 affect comparability; NOT comparable" in res.stdout
    assert "535.104.05" in res.stdout and "535.129.03" in res.stdout and "hostname" not in res.stdout


def test_diff_shows_non_comparability_changes_as_such(cli, db_url, tmp_path):
    swapped = with_changes(BASELINE_FINGERPRINT, {"gpu.devices.0.uuid": "GPU-swapped"})
    a = archive_with_env(db_url, tmp_path, "a", BASELINE_FINGERPRINT)
    b = archive_with_env(db_url, tmp_path, "b", swapped)
    rows = json.loads(cli("env", "diff", a, b, "-f", "json").stdout)
    assert rows == [
        {
            "field": "gpu.devices.0.uuid",
            "old": BASELINE_FINGERPRINT["gpu"]["devices"][0]["uuid"],
            "new": "GPU-swapped",
            "affects_comparability": False,
        }
    ]
    assert "comparable (same comparability key)" in cli("env", "diff", a, b).stdout


def test_diff_of_identical_environments(cli, db_url, tmp_path):
    a = archive_with_env(db_url, tmp_path, "a", BASELINE_FINGERPRINT)
    b = archive_with_env(db_url, tmp_path, "b", BASELINE_FINGERPRINT)
    assert json.loads(cli("env", "diff", a, b, "-f", "json").stdout) == []
    res = cli("env", "diff", a, b)
    assert res.exit_code == 0 and "0 field(s) differ" in res.stdout


def test_show_flattens_the_fingerprint(cli, two_runs):
    _, cand = two_runs
    res = cli("env", "show", cand, "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {r["field"]: r for r in json.loads(res.stdout)}
    env = env_record(CANDIDATE_FINGERPRINT)
    assert rows["fingerprint_id"]["value"] == env.fingerprint_id
    assert rows["comparability_key"]["value"] == env.comparability_key
    assert rows["gpu.driver_version"] == {
        "field": "gpu.driver_version",
        "value": "535.129.03",
        "affects_comparability": True,
    }
    assert rows["gpu.devices.0.name"]["value"] == "NVIDIA A100-SXM4-40GB"
    assert rows["gpu.devices.0.name"]["affects_comparability"] is True
    assert rows["gpu.devices.0.uuid"]["affects_comparability"] is False
    assert rows["gpu.count"]["value"] == 1 and rows["tensorflow.built_with_xla"]["value"] is True
    assert rows["recorded.hostname"]["value"] == "gpu-worker-07"


def test_show_comparability_only_and_other_formats(cli, two_runs):
    base, _ = two_runs
    rows = json.loads(cli("env", "show", base, "--comparability-only", "-f", "json").stdout)
    fields = {r["field"] for r in rows}
    assert "recorded.hostname" not in fields and "gpu.devices.0.uuid" not in fields
    assert {f for f in COMPARABILITY_FIELDS if "*" not in f} <= fields
    csv = cli("env", "show", base, "-f", "csv").stdout
    assert csv.splitlines()[0] == "field,value,affects_comparability"
    assert "tensorflow.build.cudnn_version,8.6,True" in csv
    md = cli("env", "show", base, "-f", "markdown").stdout
    assert "| gpu.driver_version" in md and "535.104.05" in md
    table = cli("env", "show", base)
    assert table.exit_code == 0 and "comparability key" in table.stdout and "AMD EPYC 7742" in table.stdout


@pytest.mark.parametrize("args", [("show", 999), ("diff", 999, 1), ("diff", 1, 999)])
def test_unknown_run_is_a_clear_error(cli, db_url, tmp_path, args):
    archive_with_env(db_url, tmp_path, "a", BASELINE_FINGERPRINT)
    res = cli("env", *args)
    assert res.exit_code == 2
    assert "run 999 not found in the store" in text(res)


def test_failed_run_without_fingerprint_is_a_clear_error(cli, db_url, tmp_path):
    ctx = make_records(tmp_path)[0]
    run_id = record_failure(db_url, ctx, "pull-model-version", "FileNotFoundError: no model m")
    res = cli("env", "show", run_id)
    assert res.exit_code == 2
    assert f"run {run_id} has no stored environment fingerprint (it failed at stage pull-model-version)" in text(res)


def test_non_integer_run_id_is_rejected(cli):
    res = cli("env", "show", "latest")
    assert res.exit_code == 2 and "'RUN'" in text(res) and "integer" in text(res)
