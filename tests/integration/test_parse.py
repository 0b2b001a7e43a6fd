"""Parse stage against real profiles made by TF in a subprocess (one per pytest session)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist

import pytest

from tasks.analysis.profile import OP_STATS_COLUMNS, STEP_COLUMNS, ParsedProfile, cross_check
from tasks.records import ProfiledRun
from tasks.runner.protocol import SCHEMA_VERSION
from tasks.stages.parse import (
    ALL_TOOLS,
    ProfileNotFoundError,
    ProfileParseError,
    marker_steps,
    parse_profile,
    parse_run,
)
from tests.helpers import ROOT as ROOT_DIR
from tests.helpers.xplanes import session_profiles

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return session_profiles(tmp_path_factory)


@pytest.fixture(scope="module")
def parsed(profiles) -> ParsedProfile:
    return parse_profile(profiles["markers"].logdir)


@pytest.fixture(scope="module")
def parsed_no_markers(profiles) -> ParsedProfile:
    return parse_profile(profiles["no_markers"].logdir)


def _listing(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def _copy_session(profile, dest: Path) -> Path:
    """Copy a generated logdir to ``dest``; return its session dir (plugins/profile/<ts>)."""
    shutil.copytree(profile.logdir, dest)
    return next((dest / "plugins" / "profile").iterdir())


def test_step_time_and_breakdown(parsed, profiles):
    assert parsed.num_steps == 5
    assert parsed.avg_step_time_ms and parsed.avg_step_time_ms > 0
    steps = parsed.step_breakdown_frame()
    assert list(steps.columns) == list(STEP_COLUMNS.values())
    assert list(steps["step"]) == [0, 1, 2, 3, 4]  # the step_num given to Trace(..., _r=1)
    assert parsed.avg_step_time_ms == pytest.approx(steps["step_time_ms"].mean())
    parts = steps.drop(columns=["step", "step_time_ms"]).sum(axis=1)
    assert (parts - steps["step_time_ms"]).abs().max() < 0.01  # the breakdown adds up to the step time
    assert parsed.breakdown_avg_ms["host_compute_ms"] > 0
    assert 0 < parsed.input_bound_pct < 100
    assert parsed.input_bound_pct == pytest.approx(100 * steps["input_ms"].sum() / steps["step_time_ms"].sum())
    assert parsed.conclusion and "input" in parsed.conclusion
    stated = re.search(r"([\d.]+)% of the total step time sampled is waiting for input", parsed.conclusion)
    if stated:  # xprof words its conclusion by how input-bound the run was; when it states the share:
        assert float(stated.group(1)) == pytest.approx(parsed.input_bound_pct, abs=0.051)
    assert parsed.recommendation
    assert parsed.bottleneck in {"host", "both", "device"}
    assert not [d for d in parsed.diagnostics if "step marker" in d.message]
    # xprof times the same steps as the runner's own timer: its per-step median is within 25% of the timer's
    xprof_vs_timer = statistics.median(steps["step_time_ms"]) / statistics.median(profiles["markers"].step_ms)
    assert 0.75 < xprof_vs_timer < 1.25


def test_cpu_only_environment(parsed):
    assert parsed.hardware_type == "CPU_ONLY"
    assert parsed.device_core_count == 0 and not parsed.has_device
    assert parsed.hosts and len(parsed.hosts) == len(parsed.xplane_paths) == 1
    assert parsed.xplane_bytes == sum(Path(p).stat().st_size for p in parsed.xplane_paths)
    assert parsed.kernel_stats is None and "CPU-only" in parsed.kernel_stats_absent_reason
    assert parsed.kernel_stats_frame() is None
    assert parsed.skipped_tools == []
    assert parsed.parse_seconds > 0


def test_op_stats_table(parsed):
    ops = parsed.op_stats_frame()
    assert list(ops.columns) == OP_STATS_COLUMNS
    assert len(ops) > 20
    assert set(ops["host_or_device"]) == {"Host"}
    assert "IDLE" not in set(ops["op_type"]) and parsed.idle_time_us["Host"] > 0
    assert ops["self_time_share"].sum() == pytest.approx(1.0, abs=1e-6)
    assert ops["total_self_time_us"].is_monotonic_decreasing  # xprof's ranking is kept
    conv = ops[ops["op_type"].str.contains("Conv2D")]
    assert len(conv) >= 2 and (conv["occurrences"] == 5).all()  # once per profiled step
    assert ((ops["total_self_time_us"] - ops["avg_self_time_us"] * ops["occurrences"]).abs() < 0.01).all()
    assert ops.notna().all().all()


def test_input_pipeline_and_memory(parsed):
    assert len(parsed.input_steps) == 5
    stages = parsed.input_ops_frame()
    assert stages["op_name"].str.startswith("Iterator::Root").all() and len(stages) >= 3
    assert parsed.input_time_breakdown_us["preprocessing_us"] > 0
    assert parsed.input_recommendations and not any("<a" in r for r in parsed.input_recommendations)
    # this CPU build records allocator activity (mklcpu); absent elsewhere -> None + reason, never 0
    if parsed.memory is None:
        assert parsed.memory_absent_reason
    else:
        mem = parsed.memory_frame()
        assert (mem["peak_bytes_in_use"] > 0).all() and set(mem["host"]) == set(parsed.hosts)


def test_result_serialises_to_json(parsed):
    again = ParsedProfile.model_validate_json(parsed.model_dump_json())
    assert again == parsed
    json.loads(parsed.model_dump_json())


def test_no_step_markers(parsed_no_markers):
    p = parsed_no_markers
    assert p.avg_step_time_ms is None and p.num_steps == 0  # unknown, never 0
    assert p.input_bound_pct is None and p.breakdown_avg_ms is None
    assert any("No step marker observed" in d.message for d in p.diagnostics)
    assert len(p.op_stats) > 20  # op stats do not need step markers
    check = cross_check(
        [1.0 + 0.01 * i for i in range(40)],
        [1.2] * 5,
        [s["step_time_ms"] for s in p.step_breakdown],
        profiler_avg_step_ms=p.avg_step_time_ms,
    )
    assert check.profiler_median_ms is None and check.profiler_avg_step_ms is None and check.representative is True


def test_profile_dir_untouched_and_stale_cache_ignored(profiles, tmp_path):
    session = _copy_session(profiles["markers"], tmp_path / "run")
    before = _listing(tmp_path / "run")
    first = parse_profile(tmp_path / "run")
    assert _listing(tmp_path / "run") == before  # no cache files were written next to the xplane
    # a stale xprof cache from another profile must not change a later parse
    other = _copy_session(profiles["no_markers"], tmp_path / "other")
    from xprof.convert import _pywrap_profiler_plugin as pw

    pw.xspace_to_tools_data([str(next(other.glob("*.xplane.pb")))], "overview_page", {"use_saved_result": False})
    caches = [p for p in other.iterdir() if not p.name.endswith(".xplane.pb")]
    assert caches, "xprof is expected to write its cache next to the xplane"
    for c in caches:
        shutil.copy(c, session / c.name)
    second = parse_profile(tmp_path / "run")
    strip = {"parse_seconds"}
    assert second.model_dump(exclude=strip) == first.model_dump(exclude=strip)


def test_several_hosts(profiles, tmp_path):
    session = _copy_session(profiles["markers"], tmp_path / "run")
    xplane = next(session.glob("*.xplane.pb"))
    shutil.copy(xplane, session / "worker1.xplane.pb")
    p = parse_profile(tmp_path / "run")
    assert len(p.xplane_paths) == 2 and sorted(p.hosts) == sorted([xplane.name[:-10], "worker1"])
    assert p.avg_step_time_ms and p.avg_step_time_ms > 0
    assert p.memory is not None and {m["host"] for m in p.memory} == set(p.hosts)  # one host at a time


def test_newest_session_of_several(profiles, tmp_path):
    run = tmp_path / "run"
    session = _copy_session(profiles["markers"], run)
    shutil.copytree(
        next((profiles["no_markers"].logdir / "plugins" / "profile").iterdir()), session.parent / "0000_older_session"
    )
    p = parse_profile(run)
    assert p.avg_step_time_ms is not None and len(p.xplane_paths) == 1
    assert any("2 profiling sessions" in d.message for d in p.diagnostics)


def test_large_profile_keeps_summary_tables(profiles):
    p = parse_profile(profiles["markers"].logdir, max_full_parse_bytes=1024)
    assert {s.tool for s in p.skipped_tools} == {"input_pipeline_analyzer", "memory_profile", "kernel_stats"}
    assert all("max_full_parse_bytes" in s.reason for s in p.skipped_tools)
    assert p.avg_step_time_ms and p.op_stats
    assert p.memory is None and "max_full_parse_bytes" in p.memory_absent_reason
    assert p.input_ops == [] and p.kernel_stats is None


def test_tool_subset(profiles):
    p = parse_profile(profiles["markers"].logdir, tools=["framework_op_stats"])
    assert p.op_stats and p.avg_step_time_ms is None
    assert {s.tool for s in p.skipped_tools} == set(ALL_TOOLS) - {"framework_op_stats"}
    with pytest.raises(ValueError, match="unknown tools"):
        parse_profile(profiles["markers"].logdir, tools=["trace_viewer"])


def test_non_ascii_path(profiles, parsed, tmp_path):
    run = tmp_path / "ünïcødé 東京 prøfile"
    _copy_session(profiles["markers"], run)
    before = _listing(run)
    p = parse_profile(run)
    assert p.avg_step_time_ms == pytest.approx(parsed.avg_step_time_ms)
    assert p.xplane_paths[0].startswith(str(run))
    assert _listing(run) == before


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[: len(b) // 2], "Read less bytes than requested"),
        (lambda b: b"\xff\x00garbage" * 50, "Can't parse"),
    ],
)
def test_corrupt_xplane_raises_with_xprof_message(profiles, tmp_path, damage, message):
    session = _copy_session(profiles["markers"], tmp_path / "run")
    xplane = next(session.glob("*.xplane.pb"))
    xplane.write_bytes(damage(xplane.read_bytes()))
    with pytest.raises(ProfileParseError) as info:
        parse_profile(tmp_path / "run")
    assert message in info.value.xprof_message and message in str(info.value)
    assert info.value.tool == "overview_page"


def test_empty_xplane_and_missing_profile(tmp_path):
    with pytest.raises(ProfileNotFoundError, match="nothing-here"):
        parse_profile(tmp_path / "nothing-here")
    session = tmp_path / "run" / "plugins" / "profile" / "2024_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(b"")
    with pytest.raises(ProfileParseError, match="empty xplane"):
        parse_profile(tmp_path / "run")


def test_parse_stage_needs_no_tensorflow_or_airflow(profiles):
    code = (
        "import sys; from tasks.stages.parse import parse_profile; "
        "import tasks.analysis.diagnose, tasks.analysis.attribution; "
        f"p = parse_profile({str(profiles['markers'].logdir)!r}); assert p.avg_step_time_ms; "
        "bad = [m for m in ('tensorflow', 'airflow', 'keras') if m in sys.modules]; "
        "assert not bad, bad"
    )
    root = ROOT_DIR
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def _measured_around(center_ms: float, n: int = 39) -> list[float]:
    """n measured step times with a median of ``center_ms`` and a 20% log-normal spread (normal quantiles)."""
    return [center_ms * math.exp(0.2 * NormalDist().inv_cdf((i + 0.5) / n)) for i in range(n)]


def _profiled(tmp_path: Path, prof, measured: list[float] | None) -> ProfiledRun:
    samples = tmp_path / "result.json"
    data = {"schema_version": SCHEMA_VERSION, "profiled_step_times_ms": prof.step_ms}
    if measured is not None:
        data["measured_step_times_ms"] = measured
    samples.write_text(json.dumps(data))
    return ProfiledRun(
        work_dir=str(tmp_path),
        samples_path=str(samples),
        profile_dir=str(prof.logdir),
        measured_steps=len(measured or [1]),
        median_step_ms=1.0,
        throughput_eps=1.0,
        profile_overhead_ratio=1.0,
        peak_rss_bytes=1,
        peak_device_bytes=None,
        wall_s=1.0,
    )


def test_parse_run_writes_tables_and_record(profiles, tmp_path):
    prof = profiles["markers"]
    rec = parse_run(_profiled(tmp_path, prof, _measured_around(statistics.median(prof.step_ms))), tmp_path)
    tables = json.loads(Path(rec.parsed_path).read_text())
    assert rec.avg_step_time_ms == pytest.approx(tables["avg_step_time_ms"]) and rec.n_ops == len(tables["op_stats"])
    check = tables["cross_check"]
    assert rec.cross_check_ok is True and check["representative"] is True, check["message"]
    assert rec.cross_check_ratio == pytest.approx(check["overhead_ratio"]) == pytest.approx(1.0)
    assert check["profiler_steps"] == tables["num_steps"] and check["profiler_median_ms"] > 0
    assert any(f.startswith("cpu_only") for f in rec.findings) and tables["findings"]
    assert not any(f.startswith("unrepresentative_window") for f in rec.findings)
    assert all(isinstance(r["step"], int) for r in tables["step_breakdown"])


def test_parse_run_flags_a_window_unlike_the_measured_steps(profiles, tmp_path):
    prof = profiles["markers"]
    # the measured steps ran at a third of the window's pace: the window stands for another moment
    rec = parse_run(_profiled(tmp_path, prof, _measured_around(statistics.median(prof.step_ms) / 3)), tmp_path)
    assert rec.cross_check_ok is False and rec.cross_check_ratio == pytest.approx(3.0)
    [flag] = [f for f in rec.findings if f.startswith("unrepresentative_window")]
    assert "3.00x the measured median" in flag
    stored = json.loads(Path(rec.parsed_path).read_text())
    assert [f["value"] for f in stored["findings"] if f["code"] == "unrepresentative_window"] == [pytest.approx(3.0)]


def test_parse_run_needs_the_measured_steps(profiles, tmp_path):
    with pytest.raises(ValueError, match="no 'measured_step_times_ms'"):
        parse_run(_profiled(tmp_path, profiles["markers"], None), tmp_path)


def test_marker_steps_read_from_the_trace(profiles, tmp_path):
    session = _copy_session(profiles["markers"], tmp_path / "run")
    before = _listing(tmp_path / "run")
    assert marker_steps(sorted(session.glob("*.xplane.pb"))) == [0, 1, 2, 3, 4]  # Trace("train", step_num=i, _r=1)
    assert _listing(tmp_path / "run") == before  # xprof's caches stay out of the profile dir
    assert marker_steps(profiles["no_markers"].xplane_paths) == []


def test_parse_run_without_steps_says_so_and_keeps_the_runner_timer(profiles, tmp_path):
    """A runner profile in which xprof finds no steps: the run keeps its timings, the finding gives no advice to
    add markers (here the trace truly holds none: the factory's run without Trace)."""
    prof = profiles["no_markers"]
    rec = parse_run(_profiled(tmp_path, prof, _measured_around(statistics.median(prof.step_ms))), tmp_path)
    tables = json.loads(Path(rec.parsed_path).read_text())
    assert rec.avg_step_time_ms is None and tables["marker_steps"] == []
    [f] = [f for f in tables["findings"] if f["code"] == "steps_not_found"]
    assert "holds none of the step markers" in f["message"] and "_r=1" not in f["message"]
    assert not any(f.startswith("no_step_markers") for f in rec.findings)
    assert tables["cross_check"]["window_steps"] == len(prof.step_ms)  # the runner's window is still checked
