"""bench/fleet.py's list scheduling of a night's cases on K measuring workers, and its reading of bench/matrix.py's
per-case times. The bench itself (DAG parses in fresh interpreters, planning 800 cases) is not run here."""

from __future__ import annotations

import importlib.util
import json
import random
import sys

import pytest

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "bench" / "fleet.py")
assert _spec is not None and _spec.loader is not None
fleet = sys.modules.setdefault("bench_fleet", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(fleet)
CaseTime = fleet.CaseTime


def test_one_worker_measures_one_case_after_the_other():
    cases = [CaseTime("a", 1.0, 10.0, 2.0), CaseTime("b", 1.0, 20.0, 3.0), CaseTime("c", 5.0, 5.0, 1.0)]
    night = fleet.schedule(cases, 1)
    assert night.starts == (1.0, 11.0, 31.0)  # a waits for its pull; b and c for the worker
    assert night.wall_s == 37.0 and night.busy_s == 35.0
    assert night.utilization == pytest.approx(35 / 37)


def test_two_workers_measure_two_cases_at_once_and_longest_first_can_beat_the_planned_order():
    cases = [CaseTime(f"short{i}", 0.0, 1.0, 0.0) for i in range(4)] + [CaseTime("long", 0.0, 4.0, 0.0)]
    planned = fleet.schedule(cases, 2)
    assert planned.starts[:2] == (0.0, 0.0)  # on two hosts they overlap
    assert planned.wall_s == 6.0  # the long case is planned last: it starts at 2 s
    lpt = fleet.schedule(cases, 2, longest_first=True)
    assert lpt.wall_s == 4.0 == max(sum(c.measure for c in cases) / 2, 4.0)  # the lower bound: optimal here
    assert lpt.starts[-1] == 0.0


def test_any_list_schedule_is_within_the_sum_over_k_plus_the_longest_case():
    rng = random.Random(7)
    for _ in range(200):
        cases = [CaseTime(str(i), 0.0, rng.uniform(1, 300), 0.0) for i in range(rng.randint(1, 40))]
        k = rng.randint(1, 12)
        total, longest = sum(c.measure for c in cases), max(c.measure for c in cases)
        for lpt in (False, True):
            wall = fleet.schedule(cases, k, longest_first=lpt).wall_s
            assert max(total / k, longest) - 1e-9 <= wall <= total / k + longest + 1e-9


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="workers: expected at least 1"):
        fleet.schedule([CaseTime("a", 0, 1, 0)], 0)
    with pytest.raises(ValueError, match="case b: negative time"):
        fleet.schedule([CaseTime("b", 0, -1, 0)], 1)


def test_read_cases_takes_a_nights_stage_times(tmp_path):
    stages = {
        "pull-model-version": 1.0,
        "env-fingerprint": 2.0,
        "warm-up": 30.0,
        "profiled-run": 40.0,
        "parse": 5.0,
        "baseline-compare": 3.0,
        "archive": 1.0,
    }
    rows = [
        {"night": 1, "case": "train-bs8", "stages": stages, "error": None, "load": 1.2},
        {"night": 2, "case": "train-bs8", "stages": {**stages, "warm-up": 0.5}, "error": None, "load": 1.5},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cases, about = fleet.read_cases(path, None)  # the last night: warm-up reused
    assert cases == [CaseTime("train-bs8", 1.0, 42.5, 9.0)] and about["night"] == 2 and about["load_max"] == 1.5
    assert fleet.read_cases(path, 1)[0][0].measure == 72.0
    with pytest.raises(ValueError, match="no night 3"):
        fleet.read_cases(path, 3)
    path.write_text(json.dumps({**rows[0], "error": "warm-up: RuntimeError: boom"}) + "\n")
    with pytest.raises(ValueError, match="failed cases"):
        fleet.read_cases(path, None)
