"""``perfwatch compare MODEL --from V --to V`` on a store filled without TensorFlow."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tasks.cli.main import app
from tasks.settings import Settings
from tasks.store import migrate
from tests.helpers.builders import CAND_OPS, CPU_ONLY, INPUT_BOUND, archive


@pytest.fixture
def store(home, tmp_path) -> dict[str, int]:
    url = Settings.from_env().database_url
    migrate(url)
    return {
        "from": archive(url, tmp_path, "v1", version="1", findings=[CPU_ONLY]),
        "to": archive(url, tmp_path, "v2", version="2", ops=CAND_OPS, findings=[INPUT_BOUND], avg_ms=11.6, median=12.0),
    }


def invoke(*args: str):
    return CliRunner().invoke(app, ["compare", *args])


def test_json_lists_grown_ops_share_and_findings(store):
    res = invoke("m", "--from", "1", "--to", "2", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [(h["side"], h["run_id"], h["version"]) for h in out["headline"]] == [
        ("from", store["from"], "1"),
        ("to", store["to"], "2"),
    ]
    assert out["headline"][1]["median_step_ms"] == pytest.approx(12.0)
    conv = out["ops"][0]
    assert (conv["op_name"], conv["status"]) == ("conv", "both")
    # op shares of each window scaled to the measured medians 10.0 -> 12.0 ms (conv: 20/36 -> 120/135 of them)
    delta = 120 / 135 * 12_000 - 20 / 36 * 10_000
    assert conv["delta_us_per_step"] == pytest.approx(delta)
    assert conv["share_of_change"] == pytest.approx(delta / 2000.0)
    assert [o["status"] for o in out["ops"]] == ["both", "appeared", "vanished", "both"]
    assert out["step_time_change_us"] == pytest.approx(2000.0)
    assert sum(o["delta_us_per_step"] for o in out["ops"]) == pytest.approx(2000.0)
    assert out["categories"][0]["category"] == "convolution"
    assert [(f["side"], f["code"]) for f in out["findings"]] == [("from", "cpu_only"), ("to", "input_bound")]


def test_top_limits_the_ops(store):
    out = json.loads(invoke("m", "--from", "1", "--to", "2", "--format", "json", "--top", "2").stdout)
    assert [o["op_name"] for o in out["ops"]] == ["conv", "bn"]


def test_table_and_csv_forms(store):
    table = invoke("m", "--from", "1", "--to", "2")
    assert table.exit_code == 0, table.output
    assert "median step time v1" in table.stdout and "x1.200 (+20.0%; two processes' medians)" in table.stdout
    assert "ops whose self-time per step grew most" in table.stdout and "input_bound" in table.stdout
    csv = invoke("m", "--from", "1", "--to", "2", "--format", "csv").stdout
    assert [ln for ln in csv.splitlines() if ln.startswith("# ")] == [
        "# headline",
        "# ops",
        "# categories",
        "# findings",
    ]


def test_missing_version_exits_1_with_reason(store):
    res = invoke("m", "--from", "1", "--to", "3")
    assert res.exit_code == 1
    assert "no successful run of m version 3" in res.stderr


def test_byte_identical_versions_are_called_drift_not_a_change(store, tmp_path):
    import hashlib

    from tasks.stages.archive import archive_run
    from tests.helpers.builders import records

    assert "byte-identical" not in invoke("m", "--from", "1", "--to", "2").stdout
    ctx, pulled, *rest = records(tmp_path, "v3", version="3", median=13.5)
    pulled = pulled.model_copy(update={"digest": hashlib.sha256(b"1").hexdigest()})  # v1's bytes, republished
    archive_run(Settings.from_env().database_url, str(tmp_path / "archive"), ctx, pulled, *rest)
    res = invoke("m", "--from", "1", "--to", "3")
    assert res.exit_code == 0, res.output
    assert "note: v1 and v3 are byte-identical (same sha256): the x1.350 is drift" in res.stdout
    assert "perfwatch run MODEL --version 3 --paired" in res.stdout
    assert json.loads(invoke("m", "--from", "1", "--to", "3", "--format", "json").stdout)["identical_bytes"] is True


KERAS_A, KERAS_B = "keras3.15.1-1a2b3c4d", "keras3.15.1-9f8e7d6c"


def test_keras_application_versions_are_compared_and_gated(home, tmp_path):
    """A keras.applications case's versions (keras<Keras version>-<8 hex>) have their own history: compare and
    gate look them up as written (they used to refuse anything but an integer)."""
    url = Settings.from_env().database_url
    migrate(url)
    archive(url, tmp_path, "k1", version=KERAS_A)
    archive(url, tmp_path, "k2", version=KERAS_B, median=12.0)
    res = invoke("m", "--from", KERAS_A, "--to", KERAS_B, "--format", "json")
    assert res.exit_code == 0, res.output
    assert [h["version"] for h in json.loads(res.stdout)["headline"]] == [KERAS_A, KERAS_B]
    gate = CliRunner().invoke(app, ["gate", "m", KERAS_B])
    assert gate.exit_code == 0, gate.output
    assert f"gate m {KERAS_B}: PASS" in gate.stderr
    bad = invoke("m", "--from", "keras3.15.1", "--to", KERAS_B)
    assert bad.exit_code == 1 and "keras<Keras version>-<8 hex>" in bad.stderr


def test_stored_version_forms():
    from tasks.records import stored_version

    assert stored_version("0003") == "3" and stored_version("latest") == "latest"
    assert stored_version(f" {KERAS_A} ") == KERAS_A
    for bad in ("keras3.15.1-1A2B3C4D", "keras-1a2b3c4d", "v3", "keras3.15.1-1a2b3c4"):
        with pytest.raises(ValueError, match="keras3.15.1-1a2b3c4d"):
            stored_version(bad)
