"""bench/nightly.py and bench/processes.py's gates on a synthetic processes file: real gates spend the processes in
order as a run of gates would, a known slowdown on side B is caught, and the nightly judges a slower release by
its gate while a series of equal releases stays silent. The benches' figures (minutes, real processes) are not
run here."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest

from tasks.records import Case
from tests.helpers import ROOT as ROOT_DIR

sys.path.insert(0, str(ROOT_DIR / "bench"))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT_DIR / "bench" / f"{name}.py")
    mod = sys.modules.setdefault(f"bench_{name}", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(mod)
    return mod


nightly = _load("nightly")
bench_processes = _load("processes")

HOST = {"wall_s": 1.0, "cpus": 2, "other_cpu_share": 0.0, "steal_share": 0.0, "own_cpu_share": 0.5}


def _procs(n: int, *, level: str = "0", sd: float = 0.01, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for rep in range(n):
        a = 15.0 * np.exp(rng.normal(0, sd, 40))
        b = 15.0 * np.exp(rng.normal(0, sd, 40))
        out.append(
            {
                "level": level,
                "variant": "A/A",
                "rep": rep,
                "load1": 1.0,
                "wall_s": 5.0,
                "host_load": HOST,
                "a_ms": list(a),
                "b_ms": list(b),
                "a_cpu_ms": list(2 * a),
                "b_cpu_ms": list(2 * b),
            }
        )
    return out


def _case(k: int = 6) -> Case:
    return Case(model="bench", paired_processes=k, paired_blocks=k * 40, paired_block_steps=1)


def test_real_gates_spend_the_processes_in_order_and_each_had_its_whole_budget():
    procs = _procs(20)
    gates = bench_processes.real_gates(procs, _case(), 6)
    assert gates and all(3 <= g["k"] <= 6 for g in gates)
    spent = sum(g["k"] for g in gates)
    assert spent <= len(procs) and len(procs) - spent < 6  # no gate starts without 6 processes left
    assert all(g["pairs"] == 40 * g["k"] and g["wall_s"] == 5.0 * g["k"] for g in gates)


def test_a_slowdown_on_side_b_is_caught_and_an_aa_gate_is_not():
    procs = _procs(6)
    assert bench_processes.gate(procs, _case(), 1.10)["verdict"] == "regression"
    assert bench_processes.gate(procs, _case(), 1.0)["verdict"] == "pass"


def test_the_nightly_catches_a_slower_release_by_its_gate_and_stays_silent_without_one():
    procs = {"0": _procs(12)}
    rng = np.random.default_rng(1)
    kw = {"metric": "wall", "release_every": 7, "case": _case()}
    step = nightly.one_series(rng, procs, ("0",), "step5", **kw)
    assert step["first_alert"] == step["step_at"] and step["cause"] == "release gate"
    none = nightly.one_series(rng, procs, ("0",), "none", **kw)
    assert none["first_alert"] is None and none["step_at"] is None
    assert 1.0 < none["procs_per_night"] < 6.0  # one run a night, and a gate on release nights


def test_a_smoke_run_prints_the_figures(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"meta": {}, "processes": _procs(8)}))
    nightly.main(["--data", str(path), "--trials", "1"])
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("nightly: nights=quiet metric=wall false_alarm=") and "processes_per_night=" in last
    with pytest.raises(SystemExit):
        nightly.main(["--data", str(path), "--nights", "busy"])  # no busy1 processes in the file
