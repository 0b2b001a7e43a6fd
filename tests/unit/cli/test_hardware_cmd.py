"""`perfwatch hardware`: the environments one case was measured on, side by side (issue 24, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.analysis.environment import Fingerprint
from tasks.analysis.gains import compared_version, side_by_side
from tasks.cli.hardware import hardware_frame
from tasks.runner.devices import device_section
from tasks.stages.archive import archive_run
from tasks.store import queries
from tests.helpers.builders import BASELINE_FINGERPRINT, env_record, make_records, with_changes

A100 = {**BASELINE_FINGERPRINT, "device": device_section("gpu", BASELINE_FINGERPRINT)}
_h100 = with_changes(BASELINE_FINGERPRINT, {"gpu.devices.0.name": "NVIDIA H100 80GB HBM3", "recorded.hostname": "h"})
H100 = {**_h100, "device": device_section("gpu", _h100)}
_newer_tf = with_changes(_h100, {"tensorflow.version": "2.13.0", "gpu.driver_version": "550.54.15"})
H100_NEWER_TF = {**_newer_tf, "device": device_section("gpu", _newer_tf)}


def _run(url, tmp, name, data, median, *, case_name="train-bs16-gpu", energy=None, version="1", batch_size=16):
    """One successful run of 'demo' ``version`` on the environment ``data``: 40 steps around ``median`` ms."""
    from tasks.records import check_case_name

    ctx, pulled, _, warm, run, parse, comp = make_records(tmp, dag_run_id=name, model="demo", median=median)
    if version != "1":
        pulled = pulled.model_copy(update={"version": version, "digest": version[0] * 64})
    samples = json.loads(Path(run.samples_path).read_text())
    samples["measured_step_times_ms"] = [median * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(40)]
    if energy is not None:  # power measured: a telemetry record whose summary gives this J/example
        samples["telemetry"] = {
            "interval_ms": 100,
            "window_s": 1.0,
            "steps": 10,
            "samples": [{"device": "gpu0", "t_s": 0.1 * i, "step": i, "power_w": energy * 160.0} for i in range(5)],
        }
    Path(run.samples_path).write_text(json.dumps(samples))
    check_case_name(case_name)
    case = ctx.case.model_copy(update={"device": "gpu", "batch_size": batch_size})
    assert case.name == case_name
    ctx = ctx.model_copy(update={"case": case})
    run = run.model_copy(update={"throughput_eps": 16 / median * 1000})
    return archive_run(url, str(tmp / "archive"), ctx, pulled, env_record(data), warm, run, parse, comp).run_id


@pytest.fixture
def two_envs(db_url, tmp_path):
    """demo train-bs16-gpu: two runs on an A100 (10 ms), one on an H100 (5 ms, J/example measured), one on an
    H100 with a newer TF and driver (4 ms)."""
    _run(db_url, tmp_path, "a1", A100, 10.0)
    _run(db_url, tmp_path, "a2", A100, 10.2)
    _run(db_url, tmp_path, "h1", H100, 5.0, energy=0.5)
    _run(db_url, tmp_path, "h2", H100_NEWER_TF, 4.0)
    return db_url


def test_hardware_query_one_row_per_run_on_both_databases(two_envs):
    df = queries.hardware("demo", db_url=two_envs)
    assert len(df) == 4 and set(df["case_name"]) == {"train-bs16-gpu"}
    assert df["env_key"].nunique() == 3
    assert list(df.columns[:4]) == ["run_id", "case_name", "env_key", "environment_id"]
    assert queries.hardware("demo", "train-bs16", db_url=two_envs).empty  # the SQL matches the exact name


def test_hardware_side_by_side_ratio_interval_and_flags(two_envs):
    df, notes = hardware_frame("demo", "train-bs16", db_url=two_envs)  # the case without its device part matches
    assert notes == [] and set(df["version"]) == {"1"}  # one version measured: nothing to say
    by = {r.hardware: r for r in df.itertuples()}
    a100 = by["gpu: NVIDIA A100-SXM4-40GB"]
    assert a100.reference and a100.ratio == 1.0 and a100.runs == 2  # first measured: the default reference
    assert a100.median_step_ms == pytest.approx(10.1)
    h100 = df[(df["hardware"] == "gpu: NVIDIA H100 80GB HBM3") & df["differs_beyond_hardware"].isna()].iloc[0]
    assert h100.ratio == pytest.approx(0.5, rel=0.03) and h100.ratio_low < h100.ratio < h100.ratio_high < 0.6
    assert h100.method == "percentile-bootstrap"
    assert h100.throughput_eps == pytest.approx(3200.0)
    assert h100.energy_per_example_j == pytest.approx(0.5 * 160.0 * 1.0 / 160)  # mean W x window / examples
    flagged = df[df["differs_beyond_hardware"].notna()].iloc[0]
    assert "tensorflow.version: 2.12.0 -> 2.13.0" in flagged.differs_beyond_hardware
    assert "gpu.driver_version" in flagged.differs_beyond_hardware
    assert "gpu.devices.0.name" not in flagged.differs_beyond_hardware  # the hardware itself is not a flag
    key = Fingerprint.from_data(H100).comparability_key
    again, _ = hardware_frame("demo", "train-bs16-gpu", reference=key[:8], db_url=two_envs)
    ref = again[again["reference"]].iloc[0]
    assert ref.env_key == key
    assert again[again["env_key"] == a100.env_key].iloc[0].ratio == pytest.approx(2.0, rel=0.03)


def test_hardware_cli_prints_the_table_and_the_flag(two_envs, cli):
    out = cli("hardware", "demo", "--case", "train-bs16-gpu", "--format", "csv")
    assert out.exit_code == 0, out.output
    assert "ratio_low" in out.output and "NVIDIA H100 80GB HBM3" in out.output
    table = cli("hardware", "demo")
    assert table.exit_code == 0, table.output
    assert "differs in more than the hardware: " in table.output and "tensorflow.version" in table.output
    assert table.output.count("note:") == 1  # only the environment that differs beyond its hardware
    bad = cli("hardware", "demo", "--reference", "nvidia")  # matches all three
    assert bad.exit_code == 1 and "matches 3 environments" in bad.output
    assert cli("hardware", "demo", "--case", "infer-bs8").exit_code == 1


def test_hardware_table_fits_120_columns_and_each_row_says_what_differs_beyond_hardware(two_envs, cli, monkeypatch):
    """The table was 150 columns wide at COLUMNS=120 (env key, reference, method and three ratio columns, the
    differing fields folded over a dozen lines): it fits, the ratio and its interval share a cell, and each row
    says what differs from the reference environment besides the hardware (``same``, ``reference``, the fields)."""
    monkeypatch.setenv("COLUMNS", "120")
    res = cli("hardware", "demo")
    assert res.exit_code == 0, res.output
    table = [ln for ln in res.stdout.splitlines() if ln[:1] in "┏┃┡│└"]
    assert table and all(len(ln) <= 120 for ln in table), res.stdout
    assert "…" not in res.stdout and "case train-bs16, version 1" in res.stdout
    rows: list[list[str]] = []
    for ln in table:
        if ln.startswith("│"):
            cells = [c.strip() for c in ln.strip("│").split("│")]
            if cells[0]:
                rows.append(cells)
            else:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    beyond = {r[1]: r[-1] for r in rows if "A100" in r[1]} | {r[-2]: r[-1] for r in rows if "H100" in r[1]}
    assert beyond["gpu: NVIDIA A100-SXM4-40GB"] == "reference"
    assert {v for k, v in beyond.items() if k != "gpu: NVIDIA A100-SXM4-40GB"} == {
        "same",
        "gpu.driver_version, tensorflow.version",
    }
    assert any(r[-2].startswith("0.495 [0.490,") for r in rows), rows
    assert "gpu.driver_version: 535.104.05 -> 550.54.15; tensorflow.version: 2.12.0 -> 2.13.0" in res.stdout


def _rows(*runs):
    """hardware query rows: (run_id, env_key, version, median ms)."""
    return [
        {
            "run_id": i,
            "case_name": "infer-bs1",
            "env_key": key,
            "environment_id": {"a": 1, "b": 2}[key],
            "version": version,
            "median_step_ms": median,
            "throughput_eps": 1000.0 / median,
            "peak_device_bytes": None,
            "peak_rss_bytes": 100 * i,
            "energy_per_example_j": None,
        }
        for i, key, version, median in runs
    ]


def _steps(rows):
    return {r["run_id"]: [r["median_step_ms"] * (1 + 0.001 * (k % 3 - 1)) for k in range(20)] for r in rows}


def test_versions_are_never_pooled():
    # the user's report: run 1 (v1, 114.859 ms) and run 2 (v2, 245.754 ms) in one environment read as one row
    # "runs 2, median_step_ms 180.307", a figure no run measured
    rows = _rows((1, "a", "1", 114.859), (2, "a", "2", 245.754))
    envs = {1: A100}
    got = side_by_side(rows, envs, _steps(rows))
    ((row),) = got.rows
    assert (row["version"], row["runs"], row["median_step_ms"]) == ("2", 1, 245.754)
    assert got.notes == [
        "infer-bs1: compared at version 2, the newest measured on every environment; also measured: 1 "
        "(--version V compares another)"
    ]
    ((v1),) = side_by_side(rows, envs, _steps(rows), version="1").rows
    assert (v1["version"], v1["runs"], v1["median_step_ms"], v1["peak_memory_bytes"]) == ("1", 1, 114.859, 100)
    with pytest.raises(
        ValueError, match=r"nothing to compare at version 3: infer-bs1: no run of version 3 \(measured: 1, 2\)"
    ):
        side_by_side(rows, envs, _steps(rows), version="3")


def test_the_version_compared_is_the_newest_measured_on_every_environment():
    # A100 measured v1, v2 and v10; H100 v1 and v2: compared at v2 (numbers, not text: 10 > 2 > 1), never 10
    rows = _rows(
        (1, "a", "1", 10.0), (2, "b", "1", 5.0), (3, "a", "2", 20.0), (4, "b", "2", 10.0), (5, "a", "10", 30.0)
    )
    envs = {1: A100, 2: H100}
    got = side_by_side(rows, envs, _steps(rows))
    assert [(r["hardware"], r["version"], r["median_step_ms"]) for r in got.rows] == [
        ("gpu: NVIDIA A100-SXM4-40GB", "2", 20.0),
        ("gpu: NVIDIA H100 80GB HBM3", "2", 10.0),
    ]
    assert got.rows[1]["ratio"] == pytest.approx(0.5, rel=0.01)  # within v2: the hardware's ratio
    assert "compared at version 2, the newest measured on every environment; also measured: 1, 10" in got.notes[0]
    v10 = side_by_side(rows, envs, _steps(rows), version="10")  # only the A100 measured it: the H100 is left out
    assert [(r["env_key"], r["reference"]) for r in v10.rows] == [("a", True)]
    assert v10.notes == [
        "infer-bs1: gpu: NVIDIA H100 80GB HBM3 (b) has no run of version 10 (it measured 1, 2): left out"
    ]
    # the reference's versions decide when it is given: the H100 has no 10, so 2 again
    assert {r["version"] for r in side_by_side(rows, envs, _steps(rows), reference="H100").rows} == {"2"}
    assert compared_version({"1": {"a", "b"}, "3": {"a"}}) == "1"  # measured on both beats newer on one
    assert compared_version({"1": {"a"}, "3": {"b"}}) == "3"  # none on both: the newest on the most
    assert compared_version({"1": {"a"}, "3": {"b"}}, within="a") == "1"
    assert compared_version({"1": {"a"}}, version="2") is None


def test_hardware_cli_compares_one_version(db_url, tmp_path, cli):
    _run(db_url, tmp_path, "r1", A100, 114.859)
    _run(db_url, tmp_path, "r2", A100, 245.754, version="2")
    res = cli("hardware", "demo", "--format", "json")
    assert res.exit_code == 0, res.output
    ((row),) = json.loads(res.stdout)
    assert (row["version"], row["runs"], row["median_step_ms"]) == ("2", 1, pytest.approx(245.754))
    assert "note: train-bs16: compared at version 2" in res.stderr and "also measured: 1" in res.stderr
    res = cli("hardware", "demo", "--version", "1", "--format", "json")
    assert res.exit_code == 0, res.output
    ((row),) = json.loads(res.stdout)
    assert (row["version"], row["runs"], row["median_step_ms"]) == ("1", 1, pytest.approx(114.859))
    bad = cli("hardware", "demo", "--version", "7")
    assert bad.exit_code == 1 and "nothing to compare at version 7" in bad.output


def test_hardware_reads_the_samples_of_the_compared_runs_only(two_envs, tmp_path, monkeypatch, cli):
    """`perfwatch hardware demo --case train-bs16` on a store with another case and an older version: step samples
    are read for the case's runs of the compared version (v2, measured on every environment), never for the other
    case's runs nor v1's; the table shows memory in MiB/GiB, csv and json keep bytes."""
    from tasks.analysis.gains import compared_runs

    v2 = sorted(
        _run(two_envs, tmp_path, f"v2{i}", d, m, version="2")
        for i, (d, m) in enumerate([(A100, 9.0), (A100, 9.1), (H100, 4.5), (H100_NEWER_TF, 3.9)])
    )
    _run(two_envs, tmp_path, "o1", A100, 20.0, version="2", case_name="train-bs32-gpu", batch_size=32)
    real, read = queries.hardware_inputs, []

    def spy(*args, **kwargs):
        df, envs, steps = real(*args, **kwargs)
        read.append(sorted(steps))
        return df, envs, steps

    monkeypatch.setattr(queries, "hardware_inputs", spy)
    df, _ = hardware_frame("demo", "train-bs16", db_url=two_envs)
    assert set(df["version"]) == {"2"} and len(df) == 3
    everything = queries.hardware("demo", db_url=two_envs)
    assert read == [v2] and len(everything) == 9  # 4 of the 9 runs: not v1's 4 nor train-bs32's
    rows = everything.drop(columns="energy_per_example_j").to_dict(orient="records")
    v1 = {int(r["run_id"]) for r in rows if r["version"] == "1"}
    assert compared_runs(rows, {}, version="1") == v1
    table = cli("hardware", "demo", "--case", "train-bs16")
    assert table.exit_code == 0, table.output
    assert "1.00 GiB" in table.output and "1073741824" not in table.output  # make_records' peak RSS: 1 GiB
    csv = cli("hardware", "demo", "--case", "train-bs16", "--format", "csv")
    assert "peak_memory_bytes" in csv.output and "1073741824" in csv.output


def test_a_throughput_median_never_spans_two_definitions():
    """Issue 40 item 8: an environment's throughput is the median of its runs' figures of one definition (the
    newest run's: ``runs.throughput_def``), never of two; the rows that measured another are named in a note and
    the row says which definition its figure is."""
    rows = _rows((1, "a", "1", 10.0), (2, "a", "1", 10.0), (3, "a", "1", 10.0))
    for r, (eps, definition) in zip(
        rows, ((500.0, "median_step"), (90.0, "server_achieved"), (95.0, "server_achieved")), strict=True
    ):
        r |= {"throughput_eps": eps, "throughput_def": definition}
    got = side_by_side(rows, {1: A100}, _steps(rows))
    ((row),) = got.rows
    assert (row["throughput_eps"], row["throughput_def"]) == (92.5, "server_achieved")
    assert got.notes == [
        "infer-bs1: gpu: NVIDIA A100-SXM4-40GB (a): throughput of 2 of 3 runs (queries/s achieved); 1 measured "
        "another definition: left out of it"
    ]
