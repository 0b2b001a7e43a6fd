"""bench/gates.py's own parts: reading a verdict's evidence, the rates and the last line, the background load.
The bench itself (real gates, minutes each) is not run here."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT as ROOT_DIR

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("bench_gates", ROOT_DIR / "bench" / "gates.py")
gates = sys.modules.setdefault("bench_gates", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(gates)


def verdict(v: str, *, pairs=None, spent=True, stats_verdict=None, busy=None, ratio=1.0):
    paired = {"n_candidate": 77, "blocks": 80, "host_busy": busy, "sequential": {"stopped": "decided"}}
    if spent:
        paired["spent"] = {"pairs": pairs, "max_pairs": 320}
    ev = {
        "paired": paired,
        "paired_offset": {"sd": 0.01},
        "noise": {
            "busy": bool(busy),
            "reason": "host busy: other processes took 80%" if busy else None,
            "host_load": {"other_cpu_share": 0.8 if busy else 0.02},
        },
        "metric": "cpu" if busy else "wall",
    }
    if stats_verdict:
        ev["verdict_statistics"] = {"verdict": stats_verdict}
    return {"verdict": v, "ratio": ratio, "ci_low": 0.9 * ratio, "ci_high": 1.1 * ratio, "evidence": ev}


def test_gate_reads_the_evidence_defensively():
    g = gates.gate_from_verdict(
        verdict("inconclusive", pairs=48, stats_verdict="regression", busy=True), load="1", variant="h750"
    )
    assert (g.verdict, g.statistics_verdict, g.pairs, g.budget, g.stopped, g.host_busy, g.offset_sd) == (
        "inconclusive",
        "regression",
        48,
        320,
        "decided",
        True,
        0.01,
    )
    assert (g.metric, g.other_cpu_share) == ("cpu", 0.8)
    assert g.busy_reason == "host busy: other processes took 80%" and "other processes took 80%" in gates._gate_line(g)
    old = gates.gate_from_verdict(verdict("pass", spent=False), load="0", variant=gates.AA)  # before `spent` existed
    assert (old.pairs, old.budget, old.statistics_verdict) == (77, 80, "pass")
    bare = gates.gate_from_verdict({"verdict": "no-baseline", "evidence": {}}, load="0", variant=gates.AA)
    assert bare.pairs is None and bare.ratio is None and bare.host_busy is None
    assert bare.metric is None and bare.other_cpu_share is None


def test_rates_and_the_last_line():
    true = {"h450": 1.031, "h750": 1.052, "h1500": 1.104}
    g = [
        gates.gate_from_verdict(verdict(v, pairs=p), load=load, variant=var)
        for load, var, v, p in [
            ("0", gates.AA, "pass", 100),
            ("0", gates.AA, "regression", 320),
            ("0", gates.AA, "pass", 64),
            ("0", gates.AA, "inconclusive", 320),
            ("0", "h750", "regression", 200),
            ("0", "h750", "inconclusive", 320),
            ("1", gates.AA, "inconclusive", 320),
            ("1", "h750", "regression", 32),
            ("3", gates.AA, "improvement", 48),
        ]
    ]
    g.append(gates.Gate(load="3", variant=gates.AA, verdict="error", error="RunnerError: boom"))
    assert gates.nearest_variant(true) == "h750" and gates.nearest_variant({}) is None
    assert gates.summary_line(g, true) == (
        "gates: false_alarm_max=25.0% detect5_load0=50.0% detect5_load1=100.0% pairs_median=200 gates=10"
    )
    report = "\n".join(gates.level_report("3", g, true))
    assert "false alarms 0.0% of 2" in report and "improvement 1, error 1" in report
    assert "detection of x1.052 50.0% of 2" in "\n".join(gates.level_report("0", g, true))
    empty = gates.summary_line([], {})
    assert empty == "gates: false_alarm_max=nan% detect5_load0=nan% detect5_load1=nan% pairs_median=nan gates=0"
    assert math.isnan(gates._rate([]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_background_load_starts_and_stops_its_own_processes():
    with gates.BackgroundLoad(2) as load:
        pids = [p.pid for p in load.procs]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        time.sleep(0.5)
        assert all(p.poll() is None for p in load.procs)  # busy, not exited
    assert load.procs == [] and not any(_alive(p) for p in pids)
    assert gates.BackgroundLoad(0).start().procs == []
    with pytest.raises(ValueError, match="busy processes"):
        gates.BackgroundLoad(-1)
    assert len(gates.loadavg().split()) == 3
