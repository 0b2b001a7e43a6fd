"""The fault suite of the store and the archive: retried tasks, kill -9, a full disk, racing processes,
a store that is newer, unreachable or stopped mid-run. After each fault it counts the rows and lists the
archive and scratch directories: nothing lost, nothing duplicated, nothing half-written.

Stages run through ``tasks.stages.pipeline`` with the XCom bundle as Airflow hands it (JSON round trip,
each task getting its upstream task's bundle). Stage records come from ``tests.unit.store.test_store.make_records``
(real files, no TensorFlow) except in the one ``slow`` test, which profiles the tiny real model.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select, text

from tasks.settings import Settings
from tasks.stages import pipeline, registry
from tasks.store import (
    Baseline,
    Run,
    get_engine,
    migrate,
    session_scope,
)
from tasks.store.writes import record_failure
from tests.conftest import PG_URL, _fresh_pg_url
from tests.helpers import ROOT as ROOT
from tests.helpers.airflow import DAG_PYTHONPATH
from tests.helpers.builders import KEYS, compared_bundle, count, files, make_records, settings_for, snapshot


def task(stage_id: str):
    """The DAG task of a stage (``dags/perfwatch_profile.py``): the run state's XCom dict in, its dict out."""

    def run(bundle: dict, settings: Settings | None = None) -> dict:
        return pipeline.run_stage(bundle, stage_id, settings).to_xcom()

    run.__name__ = stage_id
    return run


STAGES = [task(s.id) for s in registry.STAGES]
archive = task("archive")


# ------------------------------------------------------------------------------------------------ helpers


def env_for(st: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": DAG_PYTHONPATH,  # the plugins folder too: the DAGs import perfwatch.notifier
        "PERFWATCH_HOME": str(st.home),
        "PERFWATCH_DATABASE_URL": st.database_url,
        "PERFWATCH_ARCHIVE": st.archive_root,
        "PERFWATCH_WORK": str(st.work_root),
        "PERFWATCH_MODEL_STORE": st.model_store,
    }


def xcom(bundle: dict) -> dict:
    """The bundle as the next task receives it through XCom (JSON)."""
    return json.loads(json.dumps(bundle))


def upstream(bundle: dict, i: int) -> dict:
    """What task ``i`` (0 = pull ... 6 = archive) of the DAG receives: the bundle up to its upstream."""
    return xcom({k: v for k, v in bundle.items() if k == "ctx" or (k in KEYS and KEYS.index(k) < i)})


def partials(st: Settings) -> list[Path]:
    return list(Path(st.archive_root).glob("*/*.partial"))


# ------------------------------------------------------------------------------- item 1: retried tasks


def test_every_task_of_a_finished_run_retried_keeps_it(db_url, tmp_path):
    st = settings_for(tmp_path, db_url)
    done = archive(compared_bundle(st, "r1"), st)
    before = snapshot(st)
    assert before["runs"] == [(done["archived"]["run_id"], "success", None, done["archived"]["archive_uri"])]
    assert before["samples"] == 14 and before["scratch"] == [] and before["archive"]
    full = xcom(done)
    for i, stage in enumerate(STAGES):  # an operator clears each task in turn (airflow tasks test ...)
        out = stage(upstream(full, i), st)
        assert out["archived"] == done["archived"], stage.__name__
        assert snapshot(st) == before, stage.__name__
    assert partials(st) == []


def test_retried_archive_of_a_regression_keeps_the_run_and_goes_red_again(db_url, tmp_path):
    st = settings_for(tmp_path, db_url)
    bundle = compared_bundle(st, "r1", verdict="regression")
    bundle["verdict"].update(ratio=1.3, ci_low=1.2, ci_high=1.4, method="history")
    done = archive(xcom(bundle), st)
    before = snapshot(st)
    again = archive(xcom(bundle), st)  # the work dir is gone: the bug was FileNotFoundError here
    assert again["archived"] == done["archived"] and snapshot(st) == before
    with pytest.raises(pipeline.RegressionDetected, match=f"archived as run {done['archived']['run_id']}"):
        pipeline.raise_on_regression(again)


def test_a_failure_record_never_replaces_a_success(db_url, tmp_path):
    from tasks.store.writes import SuccessAlreadyStored

    st = settings_for(tmp_path, db_url)
    bundle = compared_bundle(st, "r1")
    done = archive(bundle, st)
    before = snapshot(st)
    with pytest.raises(SuccessAlreadyStored, match=f"run {done['archived']['run_id']} .* is already stored"):
        record_failure(db_url, pipeline.RunContext.model_validate(bundle["ctx"]), "archive", "OSError: boom")
    assert snapshot(st) == before


def test_retries_of_a_failed_run_replace_its_record_and_keep_the_first_error(db_url, tmp_path):
    not_a_dir = tmp_path / "archive-is-a-file"
    not_a_dir.write_text("")
    st_bad, st = settings_for(tmp_path, db_url, archive=not_a_dir), settings_for(tmp_path, db_url)
    bundle = compared_bundle(st, "r1")
    with pytest.raises(OSError) as first:
        archive(xcom(bundle), st_bad)
    note = pipeline.failure_note(first.value)
    (row,) = snapshot(st)["runs"]
    assert note.run_id == row[0] and row[1:3] == ("failed", "archive")
    assert snapshot(st)["scratch"] == [], "a failed run leaves no scratch dir"
    with pytest.raises(pipeline.StageInputMissing, match="clear the DAG run's tasks from profiled-run on"):
        archive(xcom(bundle), st)  # retried alone: its inputs went with the scratch dir
    with session_scope(db_url) as s:
        (failed,) = s.scalars(select(Run)).all()
        assert failed.failed_stage == "archive" and "StageInputMissing" in failed.error
        assert "earlier attempt failed at [archive]" in failed.error and "archive-is-a-file" in failed.error
    bundle = compared_bundle(st, "r1")  # the run's tasks cleared from profiled-run on: the files are back
    ok = archive(xcom(bundle), st)
    after = snapshot(st)
    assert after["runs"] == [(ok["archived"]["run_id"], "success", None, ok["archived"]["archive_uri"])]
    assert after["samples"] == 14 and after["scratch"] == [] and partials(st) == []


def test_a_failed_run_leaves_no_scratch_dir(db_url, tmp_path):
    st = settings_for(tmp_path, db_url)
    (Path(st.model_store) / "m" / "1").mkdir(parents=True)
    ctx = make_records(tmp_path, dag_run_id="f1")[0].model_copy(
        update={"case": make_records(tmp_path, dag_run_id="f1")[0].case.model_copy(update={"version": "7"})}
    )
    with pytest.raises(LookupError):
        task("pull-model-version")({"ctx": ctx.to_xcom()}, st)
    assert [r[1:3] for r in snapshot(st)["runs"]] == [("failed", "pull-model-version")]
    assert not (st.work_root / ctx.slug).exists()


# --------------------------------------------------------------------------- item 2: kill -9, full disk

_KILLABLE = """
import json, sys, time
from pathlib import Path
import tasks.stages.archive as archive
from tasks.stages import pipeline

bundle, signal_file, where = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), sys.argv[3]
real_store_run = archive.store_run

def hanging_store_run(*args, **kwargs):
    if where == "copied":        # the profile is copied into <run>.partial; the transaction not begun
        signal_file.write_text("copied")
        time.sleep(600)
    move = kwargs["before_commit"]
    def move_then_hang():        # moved into place inside the open transaction; not committed
        move()
        signal_file.write_text("moved")
        time.sleep(600)
    return real_store_run(*args, **{**kwargs, "before_commit": move_then_hang})

archive.store_run = hanging_store_run
pipeline.run_stage(bundle, "archive")
"""


@pytest.mark.parametrize("where", ["copied", "moved"])
def test_kill_9_during_archive_then_later_runs_and_db_check_clean_up(db_url, tmp_path, where):
    from tasks.cli.db import find_leftovers

    st = settings_for(tmp_path, db_url)
    bundle = compared_bundle(st, "killed")
    (tmp_path / "bundle.json").write_text(json.dumps(bundle))
    signal_file = tmp_path / "signal"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLABLE, str(tmp_path / "bundle.json"), str(signal_file), where],
        env=env_for(st),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 180
        while not signal_file.exists():
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the archive stage never got to the kill point"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(0.5)  # PostgreSQL notices the dead connection and rolls its transaction back
    assert snapshot(st)["runs"] == [], "a killed transaction writes nothing"
    model_dir = Path(st.archive_root) / "m"
    if where == "copied":  # what kill -9 leaves: nobody was there to clean up
        assert len(partials(st)) == 1
        assert [f.kind for f in find_leftovers(st)] == ["partial"]  # its writer is dead: stale at once
    else:  # moved into place, never committed: a directory without a run (young: may be in flight)
        assert partials(st) == [] and len([p for p in model_dir.iterdir()]) == 1
        assert find_leftovers(st) == []
    assert {f.kind for f in find_leftovers(st, grace_hours=0)} == {
        "scratch",
        "partial" if where == "copied" else "orphan-archive",
    }
    later = archive(compared_bundle(st, "later"), st)  # a later run of any model sweeps the partial
    assert partials(st) == []
    retried = archive(xcom(bundle), st)  # the killed task retried: its scratch dir is still there
    after = snapshot(st)
    assert [r[1] for r in after["runs"]] == ["success", "success"]
    assert {r[3] for r in after["runs"]} == {later["archived"]["archive_uri"], retried["archived"]["archive_uri"]}
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(Path(r[3]).name for r in after["runs"])
    assert after["samples"] == 28 and after["scratch"] == [] and find_leftovers(st, grace_hours=0) == []


@pytest.fixture
def tiny_disk(tmp_path) -> Path:
    """A 3 MiB tmpfs (``mount -t tmpfs -o size=3m``), unmounted afterwards; skipped where mounting is refused."""
    mnt = tmp_path / "tiny-disk"
    mnt.mkdir()
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True, text=True
        )
        refused = proc.stderr.strip() if proc.returncode != 0 else None
    except OSError as e:
        refused = str(e)
    if refused is not None:
        pytest.skip(f"cannot mount a 3 MiB tmpfs as the full archive disk (needs root): {refused}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_archive_disk_leaves_no_partial_and_a_failed_run(db_url, tmp_path, tiny_disk):
    st = settings_for(tmp_path, db_url, archive=tiny_disk)
    with pytest.raises(OSError, match="No space left on device") as err:
        archive(compared_bundle(st, "big", xplane_bytes=4 << 20), st)
    assert pipeline.failure_note(err.value).run_id is not None
    after = snapshot(st)
    assert [r[1:3] for r in after["runs"]] == [("failed", "archive")]
    assert after["archive"] == [] and partials(st) == [] and after["scratch"] == []
    assert shutil.disk_usage(tiny_disk).used < 256 << 10, "the disk is free again"
    ok = archive(compared_bundle(st, "small"), st)  # the next run fits
    assert ok["archived"]["archive_uri"].startswith(str(tiny_disk))
    assert [r[1] for r in snapshot(st)["runs"]] == ["failed", "success"]


# ------------------------------------------------------------------- item 3: racing on a fresh store

_RACER = """
import json, sys, time
from pathlib import Path
from tasks.store import migrate
from tasks.stages import pipeline
from tasks.settings import Settings

bundle, ready, go = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), Path(sys.argv[3])
ready.write_text("ready")
while not go.exists():
    time.sleep(0.005)
settings = Settings.from_env()
migrate(settings.database_url)          # what `perfwatch run`, `perfwatch runs` and every DAG run do first
print(json.dumps(pipeline.run_stage(bundle, "archive", settings).archived.to_xcom()))
"""


def _head() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from tasks.store import MIGRATIONS_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(cfg).get_current_head()


def _race(st: Settings, tmp_path: Path, n: int = 4) -> list[subprocess.CompletedProcess]:
    procs = []
    for i in range(n):
        b = compared_bundle(st, f"race{i}", verdict="pass")
        (tmp_path / f"b{i}.json").write_text(json.dumps(b))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _RACER,
                    str(tmp_path / f"b{i}.json"),
                    str(tmp_path / f"ready{i}"),
                    str(tmp_path / "go"),
                ],
                env=env_for(st),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + 180
    while not all((tmp_path / f"ready{i}").exists() for i in range(n)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    (tmp_path / "go").write_text("go")
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=300), *p.communicate()) for p in procs]


def _assert_all_won(st: Settings, results: list[subprocess.CompletedProcess]) -> None:
    from alembic.runtime.migration import MigrationContext

    assert [r.returncode for r in results] == [0] * len(results), [r.stderr[-2000:] for r in results]
    ids = sorted(json.loads(r.stdout.strip().splitlines()[-1])["run_id"] for r in results)
    after = snapshot(st)
    assert [r[0] for r in after["runs"]] == ids and {r[1] for r in after["runs"]} == {"success"}
    assert after["samples"] == 14 * len(results) and after["scratch"] == [] and partials(st) == []
    assert count(st.database_url, Baseline, Baseline.superseded_at.is_(None)) == 1
    with get_engine(st.database_url).connect() as conn:
        assert MigrationContext.configure(conn).get_current_heads() == (_head(),)


def test_four_processes_race_on_a_fresh_sqlite_file(tmp_path):
    st = settings_for(tmp_path, f"sqlite:///{tmp_path / 'fresh.db'}")
    _assert_all_won(st, _race(st, tmp_path))


@pytest.mark.postgres
def test_four_processes_race_on_a_fresh_postgresql_database(tmp_path):
    if not PG_URL:
        pytest.skip("PostgreSQL store tests need PERFWATCH_TEST_DATABASE_URL (set by .ci/run)")
    st = settings_for(tmp_path, _fresh_pg_url())  # an empty schema: no tables, no alembic_version
    _assert_all_won(st, _race(st, tmp_path))


def test_threads_migrating_at_once_all_succeed(tmp_path):
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    errors: list[BaseException] = []

    def go():
        try:
            migrate(url)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ------------------------------------------------------ items 4, 5: a newer, unreachable or stopped store


def test_a_store_from_a_newer_perfwatch_is_one_line(cli, db_url):
    from tasks.store.engine import StoreSchemaTooNew

    with get_engine(db_url).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0042_from_the_future'"))
    for args in (["runs"], ["baseline", "show", "m"], ["db", "check"]):
        res = cli(*args)
        assert res.exit_code == 3, (args, res.output)
        (line,) = res.output.strip().splitlines()
        assert "schema revision '0042_from_the_future'" in line and "newer perfwatch" in line
        assert "Traceback" not in res.output
    with pytest.raises(StoreSchemaTooNew) as e:
        migrate(db_url)
    assert e.value.revision == "0042_from_the_future" and e.value.head == _head()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_store_is_one_line_with_host_port_and_no_password(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tasks.cli.main import app

    port = _closed_port()
    url = f"postgresql://perfwatch:s3cret-pw@127.0.0.1:{port}/perfwatch"
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", url)
    for args in (["runs"], ["baseline", "show", "m"], ["db", "upgrade"], ["db", "check"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 3, (args, res.output)
        (line,) = res.output.strip().splitlines()
        assert f"host 127.0.0.1 port {port}" in line and "cannot connect to the store" in line
        assert "s3cret-pw" not in res.output and "***" in line


def test_a_sqlite_store_that_cannot_be_opened_is_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tasks.cli.main import app

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'a-file' / 'perfwatch.db'}")
    db = tmp_path / "a-file" / "perfwatch.db"
    res = CliRunner().invoke(app, ["db", "upgrade"])  # a command that makes the store: it cannot
    assert res.exit_code == 3, res.output
    (line,) = res.output.strip().splitlines()
    assert f"cannot connect to the store at SQLite file {db}" in line
    res = CliRunner().invoke(app, ["runs"])  # a read: there is no store, and reading never creates one
    assert res.exit_code == 3, res.output
    (line,) = res.output.strip().splitlines()
    assert f"no store at SQLite file {db}" in line


def test_a_stage_that_cannot_record_its_failure_says_so(tmp_path):
    port = _closed_port()
    st = settings_for(tmp_path, f"postgresql+psycopg://u:pw@127.0.0.1:{port}/db")
    bundle = compared_bundle(st, "r1")
    with pytest.raises(Exception, match="cannot connect to the store") as err:
        archive(xcom(bundle), st)
    note = pipeline.failure_note(err.value)
    assert note.run_id is None and "cannot connect to the store" in note.detail
    assert any("could NOT be recorded" in n for n in err.value.__notes__)
    assert snapshot_scratch(st) == [Path(bundle["run"]["work_dir"]).name], "kept for a retry"
    assert files(st.archive_root) == []


def snapshot_scratch(st: Settings) -> list[str]:
    return sorted(p.name for p in st.work_root.iterdir())


def test_the_cli_never_claims_an_unrecorded_failure_was_recorded(cli, home, monkeypatch):
    import zipfile

    import tasks.stages.pipeline as pl

    (home / "models" / "tiny" / "1").mkdir(parents=True)
    with zipfile.ZipFile(home / "models" / "tiny" / "1" / "model.keras", "w") as z:
        z.writestr("config.json", "{}")

    def fails(ctx, settings=None):
        raise RuntimeError("the store went away before the failure could be written")

    monkeypatch.setattr(pl, "run_case", fails)
    res = cli("run", "tiny", "--measured-steps", "5")
    assert res.exit_code == 2
    assert "could NOT be recorded" in res.output and "recorded in the store as failed run" not in res.output


@pytest.mark.postgres
def test_postgres_scheme_urls_work_like_postgresql(db_url, cli, monkeypatch):
    from sqlalchemy.engine import make_url

    if not db_url.startswith("postgresql"):
        pytest.skip("a postgres:// URL needs the PostgreSQL store")
    for scheme in ("postgres", "postgresql"):
        monkeypatch.setenv(
            "PERFWATCH_DATABASE_URL", make_url(db_url).set(drivername=scheme).render_as_string(hide_password=False)
        )
        res = cli("runs", "--format", "json")
        assert res.exit_code == 0 and json.loads(res.stdout) == [], res.output


class _Proxy:
    """A TCP forwarder to PostgreSQL that can be stopped, as a store host going away mid-run."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked in the other thread
        self.server.close()
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


@pytest.mark.postgres
def test_store_stopped_mid_archive_leaves_nothing_and_the_retry_succeeds(db_url, tmp_path, monkeypatch):
    from sqlalchemy.engine import make_url

    import tasks.stages.archive as archive_mod

    if not db_url.startswith("postgresql"):
        pytest.skip("stopping the store mid-run needs the PostgreSQL store (a SQLite file cannot go away)")
    u = make_url(db_url)
    proxy = _Proxy(u.host or "127.0.0.1", u.port or 5432)
    st_via_proxy = settings_for(tmp_path, u.set(host="127.0.0.1", port=proxy.port).render_as_string(False))
    st = settings_for(tmp_path, db_url)
    bundle = compared_bundle(st, "r1")
    real_store_run = archive_mod.store_run

    def store_goes_away(*args, **kwargs):
        move = kwargs["before_commit"]

        def move_then_stop():  # the copy is in place, the transaction open: the store host goes away
            move()
            proxy.stop()

        return real_store_run(*args, **{**kwargs, "before_commit": move_then_stop})

    monkeypatch.setattr(archive_mod, "store_run", store_goes_away)
    with pytest.raises(Exception, match="the store at host 127.0.0.1") as err:
        archive(xcom(bundle), st_via_proxy)
    assert pipeline.failure_note(err.value).run_id is None
    assert any("could NOT be recorded" in n for n in err.value.__notes__)
    mid = snapshot(st)
    assert mid["runs"] == [] and mid["archive"] == [] and partials(st) == [] and mid["scratch"] != []
    monkeypatch.setattr(archive_mod, "store_run", real_store_run)
    ok = archive(xcom(bundle), st)  # the store is back; the task is retried
    after = snapshot(st)
    assert after["runs"] == [(ok["archived"]["run_id"], "success", None, ok["archived"]["archive_uri"])]
    assert after["samples"] == 14 and after["scratch"] == [] and partials(st) == []


# ------------------------------------------------------------------------------------ item 8: baselines


def test_baseline_show_with_a_superseded_baseline(cli, db_url, tmp_path):
    st = settings_for(tmp_path, db_url)
    first = archive(compared_bundle(st, "r1"), st)["archived"]["run_id"]
    second = archive(compared_bundle(st, "r2", verdict="pass"), st)["archived"]["run_id"]
    table = cli("baseline", "show", "m")
    assert table.exit_code == 0, table.output
    assert f"active baseline of m train-bs16 (env k1): run {second} v1" in table.output
    rows = json.loads(cli("baseline", "show", "m", "--format", "json").stdout)
    assert [(r["run_id"], r["active"], r["superseded_at"] is None) for r in rows] == [
        (second, True, True),
        (first, False, False),
    ]
    for fmt in ("csv", "markdown"):
        assert cli("baseline", "show", "m", "--format", fmt).exit_code == 0


# --------------------------------------------------------------- a real DAG run, failed then retried


@pytest.mark.slow
def test_real_run_failed_at_archive_then_every_task_retried(tmp_path, model_files):
    """The tiny model through the seven stage functions; the archive fails (its root is a file); then
    every task is retried in DAG order, each with its upstream's new bundle (clearing the DAG run from
    its first task); then every task of the finished run is retried once more: nothing changes.
    SQLite only: the same paths on PostgreSQL are the fast tests above (this one is TensorFlow-bound)."""
    not_a_dir = tmp_path / "archive-is-a-file"
    not_a_dir.write_text("")
    db_url = f"sqlite:///{tmp_path / 'store.db'}"
    migrate(db_url)
    st = settings_for(tmp_path, db_url)
    (Path(st.model_store) / "tiny" / "1").mkdir(parents=True)
    shutil.copy(model_files["tiny"], Path(st.model_store) / "tiny" / "1" / "model.keras")
    from tasks.records import Case, RunContext

    ctx = RunContext(
        dag_id="perfwatch_profile",
        dag_run_id="manual__1",
        trigger="manual",
        case=Case(model="tiny", version="1", batch_size=2, measured_steps=5, warmup_max_steps=10),
    )
    bundle = {"ctx": ctx.to_xcom()}
    for stage in STAGES[:-1]:
        bundle = xcom(stage(bundle, st))
    with pytest.raises(OSError):
        archive(bundle, settings_for(tmp_path, db_url, archive=not_a_dir))
    failed = snapshot(st)
    assert [r[1:3] for r in failed["runs"]] == [("failed", "archive")] and failed["scratch"] == []
    bundle = {"ctx": ctx.to_xcom()}
    for stage in STAGES:  # cleared from pull-model-version on
        bundle = xcom(stage(bundle, st))
    done = snapshot(st)
    assert [r[1] for r in done["runs"]] == ["success"] and done["runs"][0][0] == bundle["archived"]["run_id"]
    assert done["samples"] > 5 and done["scratch"] == [] and partials(st) == []
    assert [p for p in done["archive"] if p.endswith(".xplane.pb") or ".xplane.pb:" in p]
    for i, stage in enumerate(STAGES):
        assert stage(upstream(bundle, i), st)["archived"] == bundle["archived"]
        assert snapshot(st) == done, stage.__name__


@pytest.mark.slow
def test_airflow_tasks_test_of_a_finished_runs_archive_keeps_it(home, model_store, tmp_path):
    """The operator's retry of item 1, for real: `airflow tasks test perfwatch_profile archive <run> --map-index 0`
    after the DAG run finished exits 0 and changes nothing in the store, the archive or the scratch space."""
    from tests.helpers.airflow import BIN, _airflow_env

    env = _airflow_env(home, tmp_path / "airflow")
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, cwd=ROOT)
    conf = {"model": "tiny", "version": "1", "batch_size": 2, "measured_steps": 5}
    proc = subprocess.run(
        [str(BIN / "airflow"), "dags", "test", "perfwatch_profile", "-c", json.dumps(conf)],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    st = Settings.from_env(env)
    before = snapshot(st)
    ((run_id, status, _, archive_uri),) = before["runs"]
    assert status == "success" and before["scratch"] == [] and partials(st) == []
    with session_scope(st.database_url) as s:
        dag_run_id = s.scalar(select(Run.dag_run_id))
    proc = subprocess.run(
        [str(BIN / "airflow"), "tasks", "test", "perfwatch_profile", "archive", dag_run_id, "--map-index", "0"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "already archived" in proc.stdout + proc.stderr
    assert snapshot(st) == before and partials(st) == []
