"""The CPU set a run may use (affinity, cgroup CPU quota), TF's thread settings and the CPU's fp16/bf16 flags:
read into the fingerprint and the load record, and the usable CPUs in the comparability key (issue 26)."""

from __future__ import annotations

import copy
import os

import psutil
import pytest

from tasks.analysis import environment as envm
from tasks.runner import cpus, probe
from tasks.runner.measure import HostLoad
from tests.helpers.builders import BASELINE_FINGERPRINT


def _cgroup_tree(tmp_path, cgroup: str, mountinfo: str, files: dict[str, str]):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text(mountinfo.format(root=tmp_path))
    for rel, text in files.items():
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return proc


def test_cgroup_v2_quota_is_the_lowest_limit_of_the_cgroup_and_its_parents(tmp_path):
    proc = _cgroup_tree(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        "30 25 0:26 / {root}/cg rw,nosuid - cgroup2 cgroup2 rw\n",
        {
            "cg/kubepods/pod1/ctr/cpu.max": "max 100000\n",
            "cg/kubepods/pod1/cpu.max": "150000 100000\n",  # docker --cpus 1.5 on the pod
            "cg/kubepods/cpu.max": "400000 100000\n",
        },
    )
    quota = cpus.cgroup_cpu_quota(proc)
    assert quota["version"] == "v2" and quota["cpus"] == 1.5 and quota["path"].endswith("kubepods/pod1")
    assert cpus.usable_cpus([0, 1, 2, 3], quota["cpus"], 4) == 1.5
    assert cpus.usable_cpus([0], None, 4) == 1 and cpus.usable_cpus(None, None, 8) == 8


def test_cgroup_v1_quota_and_no_limit(tmp_path):
    proc = _cgroup_tree(
        tmp_path,
        "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n",
        "40 25 0:30 / {root}/cpu rw - cgroup cgroup rw,cpu,cpuacct\n",
        {"cpu/docker/abc/cpu.cfs_quota_us": "200000\n", "cpu/docker/abc/cpu.cfs_period_us": "100000\n"},
    )
    assert cpus.cgroup_cpu_quota(proc) == {
        "version": "v1",
        "quota_us": 200000,
        "period_us": 100000,
        "cpus": 2.0,
        "path": str(tmp_path / "cpu/docker/abc"),
    }
    (tmp_path / "cpu/docker/abc/cpu.cfs_quota_us").write_text("-1\n")
    assert cpus.cgroup_cpu_quota(proc) == {"version": "v1", "cpus": "absent"}
    assert cpus.cgroup_cpu_quota(tmp_path / "no-proc") == {"version": "absent", "cpus": "absent"}


def test_precision_flags_and_thread_settings():
    text = "processor: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16\n\nprocessor: 1\nflags: fpu\n"
    flags = cpus.precision_flags(text)
    assert flags["avx512_bf16"] and flags["amx_bf16"] and flags["amx_tile"] and not flags["avx512_fp16"]
    assert cpus.precision_flags("Features\t: fp asimd asimdhp bf16\n")["asimdhp"] is True
    assert cpus.precision_flags("no flags here\n") == "absent"
    assert cpus.cpu_ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    t = cpus.thread_settings({"TF_NUM_INTRAOP_THREADS": "4", "TF_NUM_INTEROP_THREADS": "two"})
    assert t["tf_intra_op_configured"] == 4 and t["tf_inter_op_configured"].startswith("unknown: TF_NUM_INTEROP")
    assert cpus.thread_settings({})["tf_intra_op_configured"] == 0


def _host(record, **fields):
    out = copy.deepcopy(record)
    out["host"].update(fields)
    return out


def test_usable_cpus_enter_the_key_only_where_fewer_than_the_hosts():
    """An unrestricted run keeps the key it had before the CPU set was recorded; a pinned or quota-limited
    run gets its own; and PERFWATCH_CPU_LOGICAL_DEVICES (the replicas of a mirrored CPU case) too."""
    old = BASELINE_FINGERPRINT  # recorded before these fields existed (cpu_count_logical 32)
    free = _host(
        old, cpu_affinity="0-31", cpu_affinity_count=32, cgroup_cpu_quota={"cpus": "absent"}, cpu_count_usable=32
    )
    pinned = _host(free, cpu_affinity="0", cpu_affinity_count=1, cpu_count_usable=1)
    quota = _host(free, cgroup_cpu_quota={"version": "v2", "cpus": 1.5}, cpu_count_usable=1.5)
    records = {"old": old, "free": free, "pinned": pinned, "quota": quota}
    keys = {name: envm.Fingerprint.from_data(d).comparability_key for name, d in records.items()}
    assert keys["old"] == keys["free"]
    assert len({keys["free"], keys["pinned"], keys["quota"]}) == 3
    change = {c.field: c for c in envm.diff_fingerprints(free, pinned)}
    assert change["host.cpu_count_usable"].affects_comparability and change["host.cpu_count_usable"].new == 1
    assert not change["host.cpu_affinity"].affects_comparability
    assert not any(c.affects_comparability for c in envm.diff_fingerprints(old, free))
    two = copy.deepcopy(old)
    two["env_vars"]["PERFWATCH_CPU_LOGICAL_DEVICES"] = "2"
    assert envm.Fingerprint.from_data(two).comparability_key != keys["old"]


@pytest.mark.skipif(psutil.cpu_count() < 2, reason="needs two CPUs to pin to one")
def test_a_taskset_pinned_run_is_recorded_as_such_and_not_comparable_with_unpinned(monkeypatch):
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    """`taskset -c 0` used to give the same environment as an unpinned run, and `cpus: 2` in its load record."""
    free = probe.collect(include_tensorflow=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    pinned = probe.collect(include_tensorflow=False)
    assert pinned["host"]["cpu_affinity"] == "0" and pinned["host"]["cpu_count_usable"] == 1
    assert pinned["threads"]["tf_default_threads"] == 1
    assert free["host"]["cpu_count_usable"] == free["host"]["cpu_count_logical"]
    assert envm.Fingerprint.from_data(pinned).comparability_key != envm.Fingerprint.from_data(free).comparability_key
    load = HostLoad().start().result()
    assert load["cpus"] == 1 and load["cpu_affinity"] == "0" and load["cpu_count_usable"] == 1
    assert load["tf_default_threads"] == 1 and load["tf_intra_op_configured"] == 0
    assert 0.0 <= load["other_cpu_share"] <= 1.0
