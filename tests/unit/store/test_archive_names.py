"""Archive directory names (TensorBoard's run names under ``tensorboard --logdir <archive>/<model>``): they start
with the run id and sort by time; archives under the earlier names stay readable and untouched; a store
transaction retried with a new run id leaves one directory, named after the committed id."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.exc import OperationalError

import tasks.stages.archive as archive_mod
from tasks.stages.archive import archive_run, check_archive, run_dir_name
from tasks.store.engine import session_scope
from tasks.store.reads import run_locations
from tasks.store.schema import Run
from tests.helpers.builders import make_records

NAME = re.compile(r"^run(\d{6,})_(\d{8}T\d{4})_v1_train-bs16_[0-9a-f]{8}$")


def _archive(db_url, tmp_path, dag_run_id, started_at):
    ctx, *rest = make_records(tmp_path, dag_run_id=dag_run_id, model="resnet")
    return archive_run(db_url, str(tmp_path / "archive"), ctx.model_copy(update={"started_at": started_at}), *rest)


def test_names_start_with_the_run_id_and_sort_by_time(db_url, tmp_path):
    starts = [dt.datetime(2026, 11, 30, 15, 0, tzinfo=dt.UTC) + dt.timedelta(minutes=m) for m in (0, 7, 65)]
    runs = [_archive(db_url, tmp_path, f"r{i}", t) for i, t in enumerate(starts)]
    names = [Path(r.archive_uri).name for r in runs]
    for r, name, start in zip(runs, names, starts, strict=True):
        m = NAME.match(name)
        assert m, name
        assert int(m.group(1)) == r.run_id and m.group(2) == start.strftime("%Y%m%dT%H%M")
        assert (Path(r.archive_uri) / "plugins" / "profile").is_dir()  # what TensorBoard opens
    assert names[0].startswith("run000001_20261130T1500_v1_train-bs16_")
    assert sorted(names) == names  # the order the runs were stored in, i.e. in time
    assert sorted(p.name for p in (tmp_path / "archive" / "resnet").iterdir()) == names
    assert len({n.rsplit("_", 1)[1] for n in names}) == 3  # each run identity has its own key


def test_run_dir_name_from_a_local_time_is_utc_and_one_directory_name():
    ctx, *_ = make_records(Path("/nonexistent"), dag_run_id="manual__2026-11-30T15:00:00+00:00")
    ctx = ctx.model_copy(
        update={"started_at": dt.datetime(2026, 11, 30, 16, 30, tzinfo=dt.timezone(dt.timedelta(hours=1)))}
    )
    name = run_dir_name(1234567, ctx, "12")
    assert name.startswith("run1234567_20261130T1530_v12_train-bs16_") and "/" not in name


def test_archives_under_the_earlier_names_stay_readable(db_url, tmp_path):
    old = _archive(db_url, tmp_path, "old", dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    old_dir = Path(old.archive_uri).with_name("train-bs16__v1__d__old")  # how archives were named before
    shutil.move(old.archive_uri, old_dir)
    with session_scope(db_url) as s:
        s.execute(update(Run).where(Run.id == old.run_id).values(archive_uri=str(old_dir)))
    new = _archive(db_url, tmp_path, "new", dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    assert NAME.match(Path(new.archive_uri).name)
    assert list(old_dir.glob("plugins/profile/*/*.xplane.pb"))  # left where it was, still openable
    assert check_archive(str(tmp_path / "archive"), run_locations(db_url), grace_s=0) == []
    assert _archive(db_url, tmp_path, "old", dt.datetime(2026, 1, 1, tzinfo=dt.UTC)).archive_uri == str(old_dir)


def test_a_retried_transaction_leaves_one_directory_named_after_the_committed_run(db_url, tmp_path, monkeypatch):
    """The first transaction moves the copy into place, then fails (a write conflict) and is rolled back; the
    retry's run id is the same on SQLite and the next one on PostgreSQL (its sequence does not roll back)."""
    real = archive_mod.store_run
    failed = []

    def conflict_after_the_move(*args, **kwargs):
        move = kwargs["before_commit"]

        def move_then_conflict():
            move()
            if not failed:
                failed.append(next(p.name for p in (tmp_path / "archive" / "resnet").iterdir()))
                raise OperationalError("COMMIT", {}, Exception("simulated write conflict"))

        return real(*args, **{**kwargs, "before_commit": move_then_conflict})

    monkeypatch.setattr(archive_mod, "store_run", conflict_after_the_move)
    out = _archive(db_url, tmp_path, "r1", dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    assert failed and NAME.match(failed[0])
    assert [p.name for p in (tmp_path / "archive" / "resnet").iterdir()] == [Path(out.archive_uri).name]
    assert Path(out.archive_uri).name.startswith(f"run{out.run_id:06d}_")
    if db_url.startswith("postgresql"):
        assert failed[0] != Path(out.archive_uri).name  # moved again to the committed id's name
    assert check_archive(str(tmp_path / "archive"), run_locations(db_url), grace_s=0) == []
