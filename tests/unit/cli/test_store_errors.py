"""A store that cannot be used stops every command that reads or writes it the same way: one line on stderr
naming the store (password masked) and exit code 3 (docs/cli.md: "3 the store cannot be used"). Every command of
the app is listed here, as using the store or not, so a new command is classified when it is added. A store
that is not there is created only by the commands that write runs (:data:`CREATES`); every other command says
"no store at ..." (exit 3) and creates nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from tasks.cli.main import STORE_ERROR_EXIT, app

#: every command that reads or writes the store, with arguments that reach the store
STORE_COMMANDS: dict[str, list[str]] = {
    "runs": [],
    "run": ["m", "--version", "1"],
    "compare": ["m", "--from", "1", "--to", "2"],
    "history": ["m"],
    "regressions": [],
    "failures": [],
    "env-changes": [],
    "gate": ["m", "2"],
    "query": ["runs"],
    "changes": ["m"],
    "creep": ["m"],
    "ingest": ["{logdir}", "--model", "m", "--version", "1"],
    "calibrate": ["m", "--version", "1"],
    "sweep": ["m"],
    "hardware": ["m"],
    "demo baseline": [],
    "demo check": [],
    "env show": ["1"],
    "env diff": ["1", "2"],
    "baseline show": ["m"],
    "baseline accept": ["1", "--by", "me", "--reason", "test"],
    "db upgrade": [],
    "db thin": ["--older-than", "30"],
    "db check": [],
}
#: the commands that may create a store that is not there yet (they write runs, or migrate it); every other
#: command in STORE_COMMANDS only reads one that exists
CREATES = {"run", "ingest", "calibrate", "db upgrade"}
#: commands that never open the store (the model store and Airflow only, or stdin)
NO_STORE = {"publish", "demo build-store", "demo build-zoo", "demo follow"}
#: ``doctor`` reports every check of the deployment, the store's among them, and exits 3 when the store failed
REPORTS = {"doctor": ["--no-airflow-config", "--airflow-url", "http://127.0.0.1:1", "--timeout", "1"]}


def _leaf_commands() -> set[str]:
    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path)

    return set(walk(typer.main.get_command(app), []))


def test_every_command_is_classified():
    assert _leaf_commands() == set(STORE_COMMANDS) | NO_STORE | set(REPORTS)


def _newer_schema(path: Path) -> str:
    """A SQLite store migrated by a newer perfwatch: an Alembic revision this one does not know."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('9999_from_the_future')")
    return f"sqlite:///{path}"


def _garbage(path: Path) -> str:
    """A file that is not a SQLite database where the store should be (``echo garbage > bad.db``)."""
    path.write_text("garbage\n")
    return f"sqlite:///{path}"


@pytest.fixture(params=["unreachable", "newer-schema", "not-a-url", "not-a-database"])
def broken_store(request, tmp_path, monkeypatch) -> tuple[str, str]:
    """(PERFWATCH_DATABASE_URL of a store that cannot be used, what its one line must say), with a model
    store holding ``m`` version 1 so that commands that check it first reach the store."""
    monkeypatch.setenv("PERFWATCH_HOME", str(tmp_path / "home"))
    for var in ("PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK"):
        monkeypatch.delenv(var, raising=False)
    version = tmp_path / "home" / "models" / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.keras").write_bytes(b"not read: the store fails first")
    url, says = {
        "unreachable": ("postgresql://perf:s3cret@127.0.0.1:1/nope", "perf:***@127.0.0.1:1/nope"),
        "newer-schema": (_newer_schema(tmp_path / "newer.db"), f"SQLite file {tmp_path / 'newer.db'}"),
        "not-a-url": ("perf:s3cret at nowhere", "PERFWATCH_DATABASE_URL"),
        "not-a-database": (_garbage(tmp_path / "bad.db"), f"SQLite file {tmp_path / 'bad.db'} cannot be used: file is"),
    }[request.param]
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", url)
    return url, says


@pytest.mark.parametrize("command", sorted(STORE_COMMANDS))
def test_a_store_that_cannot_be_used_stops_every_command_in_one_line_with_exit_3(broken_store, command, tmp_path):
    _, says = broken_store
    args = [a.format(logdir=tmp_path) for a in STORE_COMMANDS[command]]
    res = CliRunner().invoke(app, [*command.split(), *args])
    assert res.exit_code == STORE_ERROR_EXIT, (command, res.output)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfwatch: "), (command, res.output)
    assert says in lines[0] and "s3cret" not in lines[0], lines[0]


def test_doctor_reports_every_check_and_exits_3_when_the_store_cannot_be_used(broken_store):
    _, says = broken_store
    res = CliRunner().invoke(app, ["doctor", *REPORTS["doctor"]])
    assert res.exit_code == STORE_ERROR_EXIT, res.output
    (store,) = [ln for ln in res.output.splitlines() if ln.startswith("FAIL store: ")]
    assert says in store and "s3cret" not in res.output


@pytest.mark.parametrize("command", sorted(set(STORE_COMMANDS) - CREATES))
def test_a_read_command_never_creates_a_store_it_says_there_is_none(command, tmp_path, monkeypatch):
    """``PERFWATCH_DATABASE_URL=sqlite:////nonexistent/x.db perfwatch runs`` made /nonexistent/ and an empty store,
    then said "unknown model": a command that only reads says there is no store (exit 3) and leaves no file."""
    monkeypatch.setenv("PERFWATCH_HOME", str(tmp_path / "home"))
    for var in ("PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK"):
        monkeypatch.delenv(var, raising=False)
    missing = tmp_path / "nonexistent" / "x.db"
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{missing}")
    args = [a.format(logdir=tmp_path) for a in STORE_COMMANDS[command]]
    res = CliRunner().invoke(app, [*command.split(), *args])
    assert res.exit_code == STORE_ERROR_EXIT, (command, res.output)
    assert res.output.strip().splitlines() == [res.output.strip()], res.output
    assert res.output.startswith(f"perfwatch: no store at SQLite file {missing}: it is created by"), res.output
    assert not missing.parent.exists(), command


def test_db_upgrade_creates_the_store_a_read_command_then_reads_it(tmp_path, monkeypatch):
    store = tmp_path / "new" / "x.db"
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{store}")
    assert CliRunner().invoke(app, ["db", "upgrade"]).exit_code == 0 and store.is_file()
    res = CliRunner().invoke(app, ["runs", "--format", "json"])
    assert res.exit_code == 0 and res.output.strip() == "[]", res.output


#: the commands that only read a store (every other one in STORE_COMMANDS may write to it)
READS_ONLY = sorted(set(STORE_COMMANDS) - CREATES - {"baseline accept", "db thin", "demo baseline"})


@pytest.mark.parametrize("command", READS_ONLY)
def test_a_read_command_on_an_existing_store_leaves_no_file_in_the_home(command, tmp_path, monkeypatch):
    """``perfwatch runs`` on a migrated store left ``perfwatch.db.migrate.lock`` in PERFWATCH_HOME: a command that
    only reads creates no file there."""
    from tasks.settings import Settings
    from tasks.store import migrate

    home = tmp_path / "home"
    monkeypatch.setenv("PERFWATCH_HOME", str(home))
    for var in ("PERFWATCH_DATABASE_URL", "PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK"):
        monkeypatch.delenv(var, raising=False)
    migrate(Settings.from_env().database_url)
    for lock in home.glob("*.lock"):
        lock.unlink()
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    args = [a.format(logdir=tmp_path) for a in STORE_COMMANDS[command]]
    res = CliRunner().invoke(app, [*command.split(), *args])
    assert res.exit_code != STORE_ERROR_EXIT, (command, res.output)
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before, (command, res.output)
