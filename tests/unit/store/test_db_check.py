"""``perfwatch db check [--repair]``: partial archive copies, archive directories without a run, runs whose
archive is missing and scratch leftovers are reported; --repair removes all but the runs (history stays)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

import psutil
import pytest

from tasks.stages import pipeline
from tests.helpers.builders import compared_bundle, settings_for, snapshot

HOUR = 3600


def _age(path: Path, seconds: float) -> None:
    """Back-date ``path`` and everything under it by ``seconds``."""
    t = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (t, t))


def _partial(root: Path, name: str, owner: dict | None) -> Path:
    d = root / "m" / f"{name}.partial"
    (d / "plugins").mkdir(parents=True)
    (d / "plugins" / "half.xplane.pb").write_bytes(b"half")
    if owner is not None:
        (d / ".perfwatch-partial.json").write_text(json.dumps(owner))
    return d


@pytest.fixture
def messy(db_url, tmp_path, monkeypatch):
    """A store with one good run, one whose archive was deleted, and every kind of leftover beside
    things that are in use (a partial being written, a fresh scratch dir) and must not be reported."""
    st = settings_for(tmp_path, db_url)
    for var, value in (
        ("PERFWATCH_HOME", st.home),
        ("PERFWATCH_ARCHIVE", st.archive_root),
        ("PERFWATCH_WORK", st.work_root),
        ("PERFWATCH_MODEL_STORE", st.model_store),
    ):
        monkeypatch.setenv(var, str(value))
    good = pipeline.run_stage(compared_bundle(st, "good"), "archive", st).archived.to_xcom()
    lost = pipeline.run_stage(compared_bundle(st, "lost"), "archive", st).archived.to_xcom()
    shutil.rmtree(lost["archive_uri"])
    arch = Path(st.archive_root)
    ghost = arch / "m" / "train-bs16__v1__d__ghost"
    (ghost / "plugins").mkdir(parents=True)
    _age(ghost, 2 * HOUR)
    (arch / "m" / "train-bs16__v1__d__just-moved").mkdir()  # between a move and its commit: in flight
    dead = psutil.Popen(["true"])  # a pid that has exited
    dead.wait()
    me = psutil.Process()
    here = socket.gethostname()
    stale = _partial(
        arch,
        "killed",
        {
            "host": here,
            "pid": dead.pid,
            "pid_started": dead.create_time() - 5,
            "started_at": "2026-01-01T00:00:00+00:00",
        },
    )
    other = _partial(
        arch, "other-host", {"host": "elsewhere", "pid": 1, "pid_started": 0, "started_at": "2020-01-01T00:00:00+00:00"}
    )
    live = _partial(
        arch,
        "being-written",
        {"host": here, "pid": me.pid, "pid_started": me.create_time(), "started_at": "2020-01-01T00:00:00+00:00"},
    )
    work = st.work_root
    good_scratch = work / "d__good__m__vlatest__train-bs16"
    assert good_scratch.name == pipeline.RunContext.model_validate(
        compared_bundle(st, "slugcheck")["ctx"]
    ).slug.replace("slugcheck", "good")
    shutil.rmtree(work / "d__slugcheck__m__vlatest__train-bs16")
    good_scratch.mkdir(parents=True)
    abandoned = work / "d__abandoned__m__vlatest__train-bs16"
    (abandoned / "run").mkdir(parents=True)
    _age(abandoned, 30 * HOUR)
    (work / "d__running__m__vlatest__train-bs16").mkdir()
    return {
        "st": st,
        "good": good,
        "lost": lost,
        "ghost": ghost,
        "stale": stale,
        "other": other,
        "live": live,
        "good_scratch": good_scratch,
        "abandoned": abandoned,
    }


def _check(cli, *args) -> tuple[int, list[dict]]:
    res = cli("db", "check", "--format", "json", *args)
    return res.exit_code, json.loads(res.stdout)


def test_db_check_reports_every_kind_of_leftover_and_nothing_in_use(cli, messy):
    code, rows = _check(cli)
    assert code == 1
    found = {(r["kind"], r["path"]) for r in rows}
    assert found == {
        ("missing-archive", messy["lost"]["archive_uri"]),
        ("orphan-archive", str(messy["ghost"])),
        ("partial", str(messy["stale"])),
        ("partial", str(messy["other"])),
        ("scratch", str(messy["good_scratch"])),
        ("scratch", str(messy["abandoned"])),
    }
    assert not any(r["removed"] for r in rows)
    by_path = {r["path"]: r for r in rows}
    assert "is gone" in by_path[str(messy["stale"])]["detail"]
    assert by_path[messy["lost"]["archive_uri"]]["run_id"] == messy["lost"]["run_id"]
    table = cli("db", "check")
    assert table.exit_code == 1 and "6 found, 0 removed, 6 left" in table.stdout and "--repair" in table.stdout


def test_db_check_repair_removes_leftovers_and_keeps_every_run(cli, messy):
    st = messy["st"]
    runs_before = snapshot(st)["runs"]
    code, rows = _check(cli, "--repair")
    assert code == 1  # the run whose archive is missing stays: its history is never deleted
    assert {r["kind"] for r in rows if r["removed"]} == {"orphan-archive", "partial", "scratch"}
    assert [r["kind"] for r in rows if not r["removed"]] == ["missing-archive"]
    for key in ("ghost", "stale", "other", "good_scratch", "abandoned"):
        assert not messy[key].exists(), key
    assert messy["live"].exists() and Path(messy["good"]["archive_uri"]).is_dir()
    assert (st.work_root / "d__running__m__vlatest__train-bs16").exists()
    assert snapshot(st)["runs"] == runs_before and snapshot(st)["samples"] == 28
    code, rows = _check(cli)
    assert code == 1 and [r["kind"] for r in rows] == ["missing-archive"]


def test_db_check_on_a_clean_store_exits_0(cli, db_url, tmp_path, monkeypatch):
    st = settings_for(tmp_path, db_url)
    monkeypatch.setenv("PERFWATCH_ARCHIVE", st.archive_root)
    monkeypatch.setenv("PERFWATCH_WORK", str(st.work_root))
    pipeline.run_stage(compared_bundle(st, "r1"), "archive", st)
    res = cli("db", "check")
    assert res.exit_code == 0 and "nothing left over" in res.stdout, res.output
