"""Diagnosis rules: synthetic ParsedProfiles for each rule, plus the real profiles of the session."""

from __future__ import annotations

import pytest

from tasks.analysis import diagnose as dg
from tasks.analysis.profile import Diagnostic, ParsedProfile
from tasks.stages.parse import parse_profile
from tests.helpers.xplanes import session_profiles


def _profile(**kw) -> ParsedProfile:
    base = dict(
        profile_dir="p",
        xplane_paths=["p/h.xplane.pb"],
        xplane_bytes=1,
        hosts=["h"],
        hardware_type="GPU",
        device_type="GPU",
        device_core_count=1,
        num_steps=5,
        avg_step_time_ms=10.0,
        input_bound_pct=1.0,
        device_idle_pct=5.0,
        breakdown_avg_ms={
            "step_time_ms": 10.0,
            "device_compute_ms": 8.0,
            "host_compute_ms": 1.0,
            "kernel_launch_ms": 0.5,
            "input_ms": 0.1,
            "compile_ms": 0.0,
        },
        op_stats=[
            _op("Conv2D", "c", 40.0),
            _op("MatMul", "m", 35.0),
            _op("Relu", "r", 25.0),
            _op("IDLE", "IDLE", 10_000.0),
        ],
    )
    return ParsedProfile(**{**base, **kw})


def _op(op_type, name, total_us, side="Device"):
    return {
        "host_or_device": side,
        "op_type": op_type,
        "op_name": name,
        "occurrences": 5,
        "total_self_time_us": total_us,
        "avg_self_time_us": total_us / 5,
        "self_time_share": None,
    }


def _codes(parsed):
    return {f.code: f for f in dg.diagnose(parsed)}


def test_healthy_gpu_profile_has_no_findings():
    assert dg.diagnose(_profile()) == []


@pytest.mark.parametrize(
    "pct, severity, threshold",
    [
        (dg.INPUT_BOUND_HIGH_PCT + 1, "warning", dg.INPUT_BOUND_HIGH_PCT),
        (dg.INPUT_BOUND_MODERATE_PCT + 1, "info", dg.INPUT_BOUND_MODERATE_PCT),
    ],
)
def test_input_bound(pct, severity, threshold):
    f = _codes(_profile(input_bound_pct=pct))["input_bound"]
    assert (f.severity, f.figure, f.value, f.threshold) == (severity, "input_bound_pct", pct, threshold)
    assert f"{pct:.1f}%" in f.message
    assert "input_bound" not in _codes(_profile(input_bound_pct=dg.INPUT_BOUND_MODERATE_PCT - 0.1))


def test_host_bound_only_with_a_device():
    avg = {"step_time_ms": 10.0, "device_compute_ms": 2.0, "host_compute_ms": 6.0, "kernel_launch_ms": 1.0}
    f = _codes(_profile(breakdown_avg_ms=avg))["host_bound"]
    assert f.value == pytest.approx(70.0) and f.threshold == dg.HOST_BOUND_PCT
    cpu = _codes(_profile(breakdown_avg_ms=avg, hardware_type="CPU_ONLY", device_core_count=0))
    assert "host_bound" not in cpu and "cpu_only" in cpu


def test_compile_time_large():
    avg = {"step_time_ms": 10.0, "device_compute_ms": 7.0, "compile_ms": 3.0}
    f = _codes(_profile(breakdown_avg_ms=avg))["compile_time_large"]
    assert f.value == pytest.approx(30.0) and f.threshold == dg.COMPILE_PCT and "30.0%" in f.message


def test_op_dominates_ignores_idle():
    ops = [_op("Conv2D", "big_conv", 90.0), _op("Relu", "r", 10.0), _op("IDLE", "IDLE", 1e6)]
    f = _codes(_profile(op_stats=ops))["op_dominates"]
    assert f.value == pytest.approx(90.0) and f.threshold == dg.OP_DOMINANT_PCT and "big_conv" in f.message
    assert "op_dominates" not in _codes(_profile())  # largest op is 40% of busy self-time


def test_device_idle():
    f = _codes(_profile(device_idle_pct=80.0))["device_idle"]
    assert (f.value, f.threshold, f.severity) == (80.0, dg.DEVICE_IDLE_PCT, "warning")


def test_no_step_markers_synthetic():
    msg = "No step marker observed and hence the step time is unknown."
    p = _profile(
        avg_step_time_ms=None,
        breakdown_avg_ms=None,
        input_bound_pct=None,
        num_steps=0,
        diagnostics=[Diagnostic(tool="overview_page", severity="WARNING", message=msg)],
    )
    f = _codes(p)["no_step_markers"]
    assert f.figure == "avg_step_time_ms" and f.value is None and msg in f.message and "_r=1" in f.message


@pytest.mark.parametrize(
    "markers, says",
    [
        ([0, 1, 2], "although perfwatch's step markers are in the profile (3 marked steps, step_num 0..2)"),
        ([], "holds none of the step markers"),
    ],
)
def test_steps_not_found_in_a_runner_profile_gives_no_marker_advice(markers, says):
    msg = "No step marker observed and hence the step time is unknown."
    p = _profile(
        avg_step_time_ms=None,
        breakdown_avg_ms=None,
        input_bound_pct=None,
        num_steps=0,
        marker_steps=markers,
        diagnostics=[Diagnostic(tool="overview_page", severity="WARNING", message=msg)],
    )
    codes = _codes(p)
    f = codes["steps_not_found"]
    assert "no_step_markers" not in codes and f.value == len(markers) and f.figure == "marker_steps"
    assert says in f.message and "runner's timer" in f.message
    assert "_r=1" not in f.message and "Trace(" not in f.message and msg not in f.message  # no advice to add markers
    assert "steps_not_found" not in _codes(_profile(marker_steps=[0, 1]))  # xprof found the steps: nothing to say


@pytest.mark.slow
def test_real_profiles(tmp_path_factory):
    profiles = session_profiles(tmp_path_factory)
    with_markers = _codes(parse_profile(profiles["markers"].logdir))
    without = _codes(parse_profile(profiles["no_markers"].logdir))
    assert "cpu_only" in with_markers and "no_step_markers" not in with_markers
    assert {"cpu_only", "no_step_markers"} <= set(without) and "input_bound" not in without
    for f in [*with_markers.values(), *without.values()]:
        assert f.figure and f.message


def test_a_gpu_runs_profile_without_device_planes_names_cupti_not_a_cpu_profile():
    """Issue 39: a GPU run whose profiler saw no device (CUPTI not loaded) was called "a CPU-only profile"."""
    no_planes = _profile(hardware_type="CPU_ONLY", device_core_count=0)
    gpu = _codes_of(dg.diagnose(no_planes, gpu_run=True))
    assert "cpu_only" not in gpu and gpu["no_device_planes"].severity == dg.WARNING
    assert (
        "CUPTI" in gpu["no_device_planes"].message
        and "although this run measured a GPU" in gpu["no_device_planes"].message
    )
    assert "cpu_only" in _codes_of(dg.diagnose(no_planes)) and "no_device_planes" not in _codes_of(
        dg.diagnose(no_planes)
    )
    assert "no_device_planes" not in _codes_of(dg.diagnose(_profile(), gpu_run=True))  # device planes present


def _codes_of(findings):
    return {f.code: f for f in findings}
