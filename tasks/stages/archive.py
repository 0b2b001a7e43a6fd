"""archive: keep the evidence — one SQL transaction and a TensorBoard-openable profile archive.

The profile directory is copied to ``<archive>/<model>/<run dir>/plugins/profile/...`` so that
``tensorboard --logdir <archive>/<model>`` lists every run of the model, each as a session named
by :func:`run_dir_name` (``run000123_20261130T1500_v2_train-bs16_1a2b3c4d``: run id first, so the
sessions sort by time; directories archived under the earlier ``<case>__v<version>__<dag>__<run>``
names stay where they are and their stored URIs keep pointing there); a paired gate's result (every block
pair's per-step wall time, CPU time and run-queue wait, ``tasks.runner.protocol.PairedResult``) is kept as
``paired/result.json`` (artifact ``paired-result``), and a tflite run's converted model as ``tflite/model.tflite``
(artifact ``tflite``; the stored tflite record's ``tflite_path`` then names it, relative to the run's archive
directory, instead of the work dir that is deleted after the run). Staging, copy, the store
transaction and the cleanup sit in one guarded block: the copy is written to ``<staging>.partial``
(with an owner file naming host, pid and start time), moved into place inside the store
transaction, and on any failure (a full disk, a lost store, an interrupt) the partial copy is
deleted, so neither a half-written archive nor an orphan artifact is left. A copy left by a killed
process (``kill -9`` leaves no chance to clean up) is swept by the next archive on any model, or by
``perfwatch db check --repair``: at once when its writer is known dead on this host, else after
``STALE_PARTIAL_S``.

Archiving is idempotent: a run already stored as a success is returned as stored and nothing is
copied or written again. A regression never stops the archive: the DAG run fails after this stage.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fsspec
import psutil
from fsspec.implementations.local import LocalFileSystem

from tasks.analysis.telemetry import real_examples
from tasks.analysis.telemetry import summarize as summarize_telemetry
from tasks.records import (
    ArchiveRecord,
    CompareRecord,
    EnvRecord,
    ParseRecord,
    ProfiledRun,
    PulledModel,
    RunContext,
    WarmupRecord,
    safe_name,
)
from tasks.runner.protocol import load_json
from tasks.stages.scratch import newest_modified
from tasks.store.reads import RunLocation, stored_run
from tasks.store.writes import SuccessAlreadyStored, store_run

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"
OWNER_FILE = ".perfwatch-partial.json"
#: where a paired gate's runner result lies in the run's archive directory (artifact ``paired-result``)
PAIRED_RESULT = "paired/result.json"
#: where a tflite run's ``.tflite`` file lies in the run's archive directory (artifact ``tflite``)
TFLITE_MODEL = "tflite/model.tflite"
STALE_PARTIAL_S = 3600.0
"""A partial copy whose writer cannot be checked (another host, no owner file) is stale after this
many seconds; an archive copy takes seconds to minutes."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _owner() -> dict[str, Any]:
    me = psutil.Process()
    return {
        "host": socket.gethostname(),
        "pid": me.pid,
        "pid_started": me.create_time(),
        "started_at": dt.datetime.now(dt.UTC).isoformat(),
    }


def _writer_alive(owner: dict[str, Any]) -> bool:
    """Whether the process named in an owner file still runs (same pid and start time)."""
    try:
        return abs(psutil.Process(int(owner["pid"])).create_time() - float(owner["pid_started"])) < 1.0
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _age_s(fs: Any, path: str, owner: dict[str, Any] | None) -> float | None:
    """Seconds since the directory ``path`` was started (owner file) or last written: the newest write of it or
    of anything below it (``tasks.stages.scratch.newest_modified``; an S3 prefix has no time of its own, its
    objects' ``LastModified`` say when it was written); None when unknown (nothing carries a time, or it cannot
    be listed), which every caller treats as too young to remove."""
    if owner and owner.get("started_at"):
        try:
            return (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(owner["started_at"])).total_seconds()
        except (TypeError, ValueError):
            pass
    try:
        newest = newest_modified(fs, path)
    except (NotImplementedError, OSError, ValueError):
        return None
    return None if newest is None else time.time() - newest


def partial_state(fs: Any, path: str, *, grace_s: float = STALE_PARTIAL_S) -> tuple[bool, str]:
    """Whether the partial copy at ``path`` is stale (its writer is gone), and why.

    Stale when its owner file names a process on this host that no longer runs (pid and start
    time), or when the writer cannot be checked (another host, no owner file) and it is older than
    ``grace_s`` seconds. A partial of unknown age whose writer cannot be checked is kept.
    """
    owner = None
    try:
        owner = json.loads(fs.cat_file(f"{path}/{OWNER_FILE}"))
    except (OSError, ValueError, FileNotFoundError):
        pass
    if owner and owner.get("host") == socket.gethostname():
        if _writer_alive(owner):
            return False, f"being written by pid {owner.get('pid')} on this host"
        return True, f"its writer, pid {owner.get('pid')} on this host, is gone"
    age = _age_s(fs, path, owner)
    where = f"written on host {owner.get('host')}" if owner else "no owner file"
    if age is None:
        return False, f"{where}, age unknown: kept"
    if age > grace_s:
        return True, f"{where}, {age / 3600:.1f} h old (stale after {grace_s / 3600:.1f} h)"
    return False, f"{where}, {age:.0f} s old (stale after {grace_s:.0f} s)"


def run_key(ctx: RunContext) -> str:
    """8 hex digits of the sha256 of the run's identity (dag_id, dag_run_id, model, version as planned, case): the
    last part of its archive directory's name, by which a retried archive finds the copy an earlier attempt of the
    same run moved into place without committing."""
    parts = (ctx.dag_id, ctx.dag_run_id, ctx.case.model, ctx.case.version, ctx.case.name)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def run_dir_name(run_id: int, ctx: RunContext, version: str) -> str:
    """The archive directory (and TensorBoard session) name of a stored run:
    ``run<run id, 6+ digits>_<DAG run start, UTC, %Y%m%dT%H%M>_v<version>_<case>_<run_key>``, e.g.
    ``run000123_20261130T1500_v2_train-bs16_1a2b3c4d``; names sort by run id, i.e. by when the runs
    were stored (``safe_name`` keeps it one directory name)."""
    stamp = ctx.started_at.astimezone(dt.UTC).strftime("%Y%m%dT%H%M")
    return safe_name(f"run{run_id:06d}_{stamp}_v{version}_{ctx.case.name}_{run_key(ctx)}")


def _remove(fs: Any, path: str) -> None:
    """Remove ``path`` if it exists; a failure is logged, never raised (cleanup must not mask the cause)."""
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except OSError as e:
        log.warning("could not remove %s: %s", path, e)


def _move_tree(fs: Any, src: str, dest: str) -> None:
    """Move the directory ``src`` to ``dest`` on ``fs``: a rename on a file system; on an object store (no
    directories, no rename: fsspec's recursive ``mv`` also tries to copy the directory names themselves and fails
    with NoSuchKey on S3) every object is copied to its new key, then the old keys are removed."""
    if isinstance(fs, LocalFileSystem):
        fs.mv(src, dest, recursive=True)
        return
    fs.invalidate_cache()
    for f in fs.find(src):
        fs.copy(f, f"{dest}/{f[len(src) :].lstrip('/')}")
    fs.rm(src, recursive=True)
    fs.invalidate_cache()


def sweep_partials(archive_root: str, *, grace_s: float = STALE_PARTIAL_S) -> list[str]:
    """Remove the stale partial copies (``<archive>/<model>/<run dir>.partial``, see ``partial_state``)
    of every model; returns the paths removed. Errors are logged, never raised."""
    fs, root = fsspec.core.url_to_fs(archive_root)
    removed: list[str] = []
    try:
        partials = fs.glob(f"{root.rstrip('/')}/*/*{PARTIAL_SUFFIX}")
    except OSError as e:
        log.warning("could not list partial archive copies under %s: %s", archive_root, e)
        return removed
    for path in partials:
        stale, why = partial_state(fs, path, grace_s=grace_s)
        if stale:
            log.warning("removing a half-written archive copy %s (%s)", path, why)
            _remove(fs, path)
            removed.append(path)
    return removed


def archive_run(
    db_url: str,
    archive_root: str,
    ctx: RunContext,
    pulled: PulledModel,
    env: EnvRecord,
    warmup: WarmupRecord,
    run: ProfiledRun,
    parsed: ParseRecord,
    verdict: CompareRecord,
    *,
    auto_accept: bool = True,
    extra_dirs: dict[str, str] | None = None,
) -> ArchiveRecord:
    """Write everything about a finished run into the store (one transaction) and the archive.

    Idempotent: when the run of ``ctx``'s identity is already stored as a success, that run is
    returned and nothing is read, copied or written. Before copying, stale partial copies of earlier
    runs are swept (``sweep_partials``).

    Args:
        extra_dirs: name -> local directory also copied into the run's archive dir (e.g. the
            Great Expectations Data Docs as ``gx``).

    Returns:
        ArchiveRecord with the run id and the archive URI of the run directory.

    Raises:
        FileNotFoundError: the run's samples, parsed tables or profile are not where the records say.
        OSError: the copy failed (e.g. no space left on the archive's disk); the partial copy is removed.
        tasks.store.engine.StoreUnreachable: the store cannot be reached (nothing is written or kept).
        sqlalchemy.exc.SQLAlchemyError: the store transaction failed (the archive copy is removed).
    """
    done = stored_run(db_url, ctx)
    if done is not None and done.status == "success":
        return ArchiveRecord(run_id=done.run_id, archive_uri=done.archive_uri or "", verdict=done.verdict or "")
    samples = load_json(run.samples_path)  # the whole result, version-checked: the store keeps what it names
    parsed_tables: dict[str, Any] = json.loads(Path(parsed.parsed_path).read_text())
    xplanes = sorted(Path(run.profile_dir).glob("plugins/profile/*/*.xplane.pb"))
    gx_result = (
        json.loads(Path(verdict.gx_results_path).read_text())
        if verdict.gx_results_path
        else verdict.evidence.get("gx", {})
    )
    fs, root = fsspec.core.url_to_fs(archive_root)
    model_dir = f"{root.rstrip('/')}/{ctx.case.model}"
    key = run_key(ctx)
    staging_name = f"{ctx.case.name}__v{pulled.version}__{ctx.dag_id}__{ctx.dag_run_id}__{key}"
    staging = f"{model_dir}/{safe_name(staging_name)}{PARTIAL_SUFFIX}"
    artifacts = [("xplane", x.relative_to(run.profile_dir).as_posix(), x.stat().st_size, _sha256(x)) for x in xplanes]
    paired_result = Path(run.paired_path) if run.paired_path else None
    if paired_result is not None:  # every block pair's step times, CPU times and waits (the work dir goes)
        artifacts.append(("paired-result", PAIRED_RESULT, paired_result.stat().st_size, _sha256(paired_result)))
    lite = samples.get("tflite") or {}
    lite_file = (  # the measuring host's path, relocated to this host (ProfiledRun.tflite_path); else the record's,
        # relative to the runner's out dir (the result's directory) or absolute (an older runner)
        Path(run.tflite_path)
        if run.tflite_path
        else (Path(run.samples_path).parent / lite["tflite_path"] if lite.get("tflite_path") else None)
    )
    if lite_file is not None:  # the converted model the tflite run timed (the work dir goes)
        if not lite_file.is_file():
            raise FileNotFoundError(f"the tflite run's model {lite_file} (its record's tflite_path) is not there")
        artifacts.append(("tflite", TFLITE_MODEL, lite_file.stat().st_size, _sha256(lite_file)))
        samples = {**samples, "tflite": {**lite, "tflite_path": TFLITE_MODEL}}  # relative to the run's archive dir
    sweep_partials(archive_root)
    final: str | None = None  # the directory named after the run id (known inside the store transaction)
    moved: str | None = None  # where the copy lies once moved into place

    def name_for(run_id: int) -> str:  # called by store_run with the new run's id
        nonlocal final
        name = run_dir_name(run_id, ctx, pulled.version)
        final = f"{model_dir}/{name}"
        return final if "://" not in archive_root else f"{archive_root.rstrip('/')}/{ctx.case.model}/{name}"

    def move_into_place() -> None:  # inside the store transaction; again on a retried transaction
        nonlocal moved
        if moved == final:
            return
        assert final is not None  # name_for ran before this (store_run names the run, then commits)
        if moved is None:
            fs.rm(f"{staging}/{OWNER_FILE}")
        if fs.exists(final):  # an orphan copy that died before its commit with the same run id
            fs.rm(final, recursive=True)
        _move_tree(fs, moved or staging, final)  # a retried transaction may bring a new run id
        moved = final
        for other in fs.ls(model_dir, detail=False):  # copies of earlier attempts of this run, never committed
            if other.rstrip("/").endswith(f"_{key}") and other.rstrip("/") != final:
                _remove(fs, other)

    try:
        _remove(fs, staging)  # this run's own earlier attempt
        fs.makedirs(staging, exist_ok=True)
        fs.pipe_file(f"{staging}/{OWNER_FILE}", json.dumps(_owner()).encode())
        if (Path(run.profile_dir) / "plugins").is_dir():  # a tflite run has no profile to keep
            fs.put(str(Path(run.profile_dir) / "plugins"), f"{staging}/plugins", recursive=True)
        if paired_result is not None:
            fs.makedirs(f"{staging}/{Path(PAIRED_RESULT).parent.as_posix()}", exist_ok=True)
            fs.put_file(str(paired_result), f"{staging}/{PAIRED_RESULT}")
        if lite_file is not None:
            fs.makedirs(f"{staging}/{Path(TFLITE_MODEL).parent.as_posix()}", exist_ok=True)
            fs.put_file(str(lite_file), f"{staging}/{TFLITE_MODEL}")
        for name, local in (extra_dirs or {}).items():
            fs.put(local, f"{staging}/{name}", recursive=True)
        run_id = store_run(
            db_url,
            ctx,
            pulled,
            env,
            warmup,
            run,
            parsed,
            verdict,
            samples=samples,
            parsed_tables=parsed_tables,
            gx_result=gx_result,
            telemetry_summary=(
                summarize_telemetry(samples["telemetry"], ctx.case.batch_size, real_examples(samples))
                if samples.get("telemetry")
                else None
            ),
            artifacts=artifacts,
            archive_uri=name_for,
            auto_accept=auto_accept,
            before_commit=move_into_place,
        )
    except SuccessAlreadyStored:  # a concurrent attempt stored it first: keep theirs
        _remove(fs, staging)
        done = stored_run(db_url, ctx)
        if done is None:  # the store said it holds that success: it cannot be gone
            raise
        return ArchiveRecord(run_id=done.run_id, archive_uri=done.archive_uri or "", verdict=done.verdict or "")
    except BaseException:
        _remove(fs, staging)
        if moved:  # moved into place, then the commit failed
            _remove(fs, moved)
        raise
    return ArchiveRecord(run_id=run_id, archive_uri=name_for(run_id), verdict=verdict.verdict)


# ------------------------------------------------------------------------------------- perfwatch db check


@dataclass(frozen=True)
class Leftover:
    """Something on disk or in the store that a finished or killed run should not have left.

    Attributes:
        kind: ``partial`` (a half-written archive copy), ``orphan-archive`` (an archive directory no
            stored run points to), ``missing-archive`` (a successful run whose archive directory is
            gone), ``scratch`` (a run's work directory under ``PERFWATCH_WORK``).
        path: the directory (or, for ``missing-archive``, the run's archive URI).
        detail: why it is reported, in words.
        repairable: ``perfwatch db check --repair`` removes it (a stored run's history never is).
        run_id: the stored run it belongs to, when there is one.
    """

    kind: Literal["partial", "orphan-archive", "missing-archive", "scratch"]
    path: str
    detail: str
    repairable: bool
    run_id: int | None = None


def check_archive(
    archive_root: str, runs: Iterable[RunLocation], *, grace_s: float = STALE_PARTIAL_S
) -> list[Leftover]:
    """The archive's leftovers: stale partial copies (``partial_state``), run directories no stored run
    points to (last written more than ``grace_s`` seconds ago, by the newest object under it on an object
    store: a younger one may be an archive in flight, between its move and its commit; one of unknown age is
    kept too), and successful runs whose archive directory is missing. What is in flight is not reported."""
    fs, root = fsspec.core.url_to_fs(archive_root)
    root = root.rstrip("/")
    runs = list(runs)
    referenced = {r.archive_uri.rstrip("/") for r in runs if r.archive_uri}
    out: list[Leftover] = []
    for path in sorted(fs.glob(f"{root}/*/*") if fs.isdir(root) else []):
        if not fs.isdir(path):
            continue
        if path.endswith(PARTIAL_SUFFIX):
            stale, why = partial_state(fs, path, grace_s=grace_s)
            if stale:
                out.append(Leftover("partial", path, f"half-written archive copy: {why}", True))
        elif path not in referenced and fs.unstrip_protocol(path) not in referenced:
            age = _age_s(fs, path, None)
            # a younger one, or one of unknown age, may be an archive in flight, between its move and its commit
            if age is not None and age > grace_s:
                out.append(Leftover("orphan-archive", path, "archive directory without a stored run", True))
    for r in runs:
        if r.status != "success" or not r.archive_uri:
            continue
        rfs, rpath = fsspec.core.url_to_fs(r.archive_uri)
        if not rfs.exists(rpath):
            out.append(
                Leftover(
                    "missing-archive",
                    r.archive_uri,
                    f"run {r.run_id} ({r.model} {r.case_name}) is stored but its archive directory is "
                    "gone; its samples and summaries are kept (never removed)",
                    False,
                    r.run_id,
                )
            )
    return out


def remove_leftover(item: Leftover) -> bool:
    """Remove a repairable leftover directory; True when it is gone afterwards."""
    if not item.repairable or item.kind == "missing-archive":
        return False
    fs, path = fsspec.core.url_to_fs(item.path)
    _remove(fs, path)
    return not fs.exists(path)
