"""bench/changes.py's data: the per-process series of both metrics from busy_samples.json, nights from quiet
processes or every load level, both metrics judged on the same resampled steps, and the old default (the quiet
processes of detection_samples.json, wall time). The bench's figures themselves (minutes) are not run here."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest

from tests.helpers import ROOT as ROOT_DIR

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("bench_changes", ROOT_DIR / "bench" / "changes.py")
changes = sys.modules.setdefault("bench_changes", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(changes)


def _busy_file(tmp_path, levels=("0", "0", "tf", "busy3", "0-end", "0-end")):
    rng = np.random.default_rng(0)
    hist = []
    for i, level in enumerate(levels):
        wall = (20.0 if level.startswith("0") else 60.0) * np.exp(rng.normal(0, 0.1, 100))
        hist.append(
            {"level": level, "rep": i, "load1": 2.0 + i, "wall_ms": list(wall), "cpu_ms": list(25.0 + wall / 100)}
        )
    path = tmp_path / "busy.json"
    path.write_text(json.dumps({"meta": {}, "paired": [], "history": hist}))
    return path


def test_busy_history_processes_carry_both_metrics_and_their_level(tmp_path):
    procs = changes.busy_processes(_busy_file(tmp_path))
    assert [p.level for p in procs] == ["0", "0", "tf", "busy3", "0-end", "0-end"]
    assert all(set(p.steps) == {"wall", "cpu"} and len(p) == 100 for p in procs)
    assert [p.level for p in changes.pool(procs, "quiet")] == ["0", "0", "0-end", "0-end"]
    assert len(changes.pool(procs, "mixed")) == 6


def test_a_night_resamples_the_same_steps_for_both_metrics(tmp_path):
    procs = changes.busy_processes(_busy_file(tmp_path, levels=("0",)))
    medians, level = changes.night(np.random.default_rng(3), procs, ["wall", "cpu"])
    assert level == "0" and medians["cpu"] == pytest.approx(25.0 + medians["wall"] / 100)


def test_unequal_metrics_in_a_process_are_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"history": [{"level": "0", "wall_ms": [1.0, 2.0], "cpu_ms": [1.0]}]}))
    with pytest.raises(ValueError, match=r"history\[0\] has 2 wall and 1 CPU steps"):
        changes.busy_processes(path)


def test_the_default_draws_from_the_quiet_detection_processes_only():
    procs = changes.detection_processes()
    quiet = changes.pool(procs, "quiet")
    assert len(quiet) == 18 and {p.level for p in procs} - {"0"} == {"busy1", "busy3"}
    assert all(set(p.steps) == {"wall"} for p in procs)


def test_a_smoke_run_prints_each_metric_and_the_load_levels(tmp_path, capsys):
    changes.main(["--data", "busy", "--samples", str(_busy_file(tmp_path)), "--trials", "1", "--nights", "mixed"])
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("changes: data=busy nights=mixed wall_false_alarm=") and "cpu_detect_creep=" in out[-1]
    assert any(line.startswith("nights by load level: ") and "tf" in line for line in out)
    assert any(line.lstrip().startswith("cpu    none: any alert") for line in out)
    with pytest.raises(SystemExit):
        changes.main(["--metric", "cpu"])  # detection_samples.json has wall time only
