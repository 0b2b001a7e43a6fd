"""The host-load window's pause (``tasks.runner.measure.HostLoad.pause``): a process that waits for its turn to
measure leaves the other process's turn out of its load."""

from __future__ import annotations

import subprocess
import sys
import time

from tasks.runner.measure import HostLoad

BURN = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.6: pass"


def test_a_paused_window_leaves_out_what_another_process_did_meanwhile():
    load = HostLoad().start()
    time.sleep(0.1)
    load.pause()
    subprocess.run([sys.executable, "-c", BURN], check=True)  # another process's turn: 0.6 s of CPU
    load.resume()
    time.sleep(0.1)
    r = load.result()
    assert 0.15 < r["wall_s"] < 0.45  # the two windows, not the burn between them
    assert r["other_cpu_s"] < 0.45  # at most what others did in 0.2 s on this host's CPUs, never the 0.6 s burn


def test_an_unpaused_window_counts_the_other_process():
    load = HostLoad().start()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    r = load.result()
    assert r["wall_s"] >= 0.6 and r["other_cpu_s"] >= 0.5
    assert load.result()["wall_s"] == r["wall_s"]  # a second reading adds nothing
