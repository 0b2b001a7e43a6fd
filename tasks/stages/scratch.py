"""The scratch space between the stages of one case, when the tasks that run them share no disk.

Without ``PERFWATCH_SCRATCH`` (``Settings.scratch`` None) the run's work dir ``<PERFWATCH_WORK>/<slug>`` is the
scratch space: every stage reads and writes it in place, so every worker must see the same directory (one host,
or a volume they all mount). With ``PERFWATCH_SCRATCH`` set to a URI (``s3://bucket/perfwatch/scratch``, any
fsspec URI, a local path too) the stages hand each other files through ``<scratch>/<slug>/`` instead:

* before a stage runs, the paths of the run state that lie in another host's work dir (a path with the run's
  slug as a directory) are rewritten into this host's local work dir (:func:`relocate`), and the files the stage
  reads (``Stage.reads``, ``Stage.reads_dirs`` in ``tasks.stages.registry``) are downloaded there from the
  scratch URI unless they are there already (:func:`fetch`);
* after it, every file it wrote in the local work dir is uploaded to the same place under the scratch URI
  (:func:`push`): what was downloaded, or uploaded earlier in this task, and has not changed, is not sent again;
  an empty directory (a tflite run's profile logdir) is sent as an empty ``DIR_MARKER`` object in it and made
  again, empty, where it is downloaded;
* when the task ends, its local work dir is removed (:func:`task_dir`), so a worker keeps nothing of a run;
  a failed run's and an archived run's scratch prefix is removed with it (:func:`discard`).

A measuring task (fingerprint, warm-up, profiled run in one task) downloads the model once and uploads the step
times, the profile (xplane) and the runner's result JSON; parse, baseline-compare and archive each download only
what they read.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import fsspec

from tasks.records import RunContext, RunState
from tasks.settings import Settings

log = logging.getLogger(__name__)

_S = TypeVar("_S", bound=RunState)

#: local work dir -> {relative path: (size in bytes, mtime in ns)} of the files that are the same in the scratch
#: space (downloaded from it, or uploaded to it, in this task)
_synced: dict[Path, dict[str, tuple[int, int]]] = {}
#: local work dir -> how many :func:`task_dir` blocks of this process are inside it
_depth: dict[Path, int] = {}
#: the empty object that stands for an empty directory in the scratch space (an object store has no directories:
#: a tflite run's profile logdir is empty, and the stages check that it is there)
DIR_MARKER = ".perfwatch-empty-dir"


def remote(settings: Settings) -> bool:
    """Whether the stages hand files on through ``PERFWATCH_SCRATCH`` (True) or share the work dirs (False)."""
    return settings.scratch is not None


def uri(settings: Settings, ctx: RunContext) -> str:
    """The run's scratch prefix, ``<PERFWATCH_SCRATCH>/<slug>``.

    Raises:
        ValueError: ``PERFWATCH_SCRATCH`` is not set.
    """
    if settings.scratch is None:
        raise ValueError("PERFWATCH_SCRATCH is not set: the work dirs are the scratch space")
    return f"{settings.scratch.rstrip('/')}/{ctx.slug}"


def local_dir(settings: Settings, ctx: RunContext) -> Path:
    """The run's work dir on this host, ``<PERFWATCH_WORK>/<slug>`` (not created)."""
    return settings.work_root / ctx.slug


def relocate(state: _S, local: Path) -> _S:
    """``state`` with every absolute path that lies in a work dir of this run (a path with the run's slug, the
    last part of ``local``, as a directory: ``/other/host/work/<slug>/run/result.json``) moved into ``local``
    (``<local>/run/result.json``). Other strings (URIs, names) are left as they are."""
    slug = local.name

    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        if isinstance(value, str) and value.startswith("/") and f"/{slug}" in value:
            parts = Path(value).parts
            if slug in parts:
                i = len(parts) - 1 - parts[::-1].index(slug)
                return str(local.joinpath(*parts[i + 1 :]))
        return value

    return type(state).model_validate(move(state.model_dump(mode="json")))


def relative(path: str, local: Path) -> str | None:
    """``path`` relative to the work dir ``local`` (POSIX), or None when it lies outside it."""
    try:
        return Path(path).relative_to(local).as_posix()
    except ValueError:
        return None


def _stamp(p: Path) -> tuple[int, int]:
    st = p.stat()
    return st.st_size, st.st_mtime_ns


#: seconds to wait before each retry of a read the object store answered "not found" or failed (a brief retry:
#: S3 lists and reads after a write consistently, but a proxy or a MinIO/Ceph gateway may lag)
READ_RETRIES_S = (0.2, 0.5, 1.0)


def _fresh(fs: Any, src: str, expected: bool = True) -> list[str]:
    """The files at ``src`` as the object store holds them now: ``[src]`` for a file (its exact key), every file
    under it for a directory, ``[]`` when neither. fsspec's listings cache (s3fs's ``dircache``, which has no
    expiry: fsspec/s3fs#851) is dropped before each look, so a listing this process made before another host wrote
    is never read as the truth. An ``expected`` path (a key an earlier stage's record names) that is not there is
    looked up again after each of :data:`READ_RETRIES_S` (a lagging gateway); an optional one is looked up once."""
    for wait in (*READ_RETRIES_S, None) if expected else (None,):
        fs.invalidate_cache()
        try:
            kind = fs.info(src).get("type")
        except FileNotFoundError:
            if wait is None:
                return []
            log.info("scratch: %s not found, looking again in %.1f s", src, wait)
            time.sleep(wait)
            continue
        return [src] if kind == "file" else list(fs.find(src))
    return []


def _get(fs: Any, src: str, dest: Path) -> None:
    """``fs.get_file(src, dest)``, retried after each of :data:`READ_RETRIES_S` when it fails (OSError)."""
    for wait in (*READ_RETRIES_S, None):
        try:
            fs.get_file(src, str(dest))
            return
        except OSError as e:
            if wait is None:
                raise
            log.info("scratch: reading %s failed (%s), again in %.1f s", src, e, wait)
            fs.invalidate_cache()
            time.sleep(wait)


def fetch(settings: Settings, ctx: RunContext, rels: list[str], optional: Sequence[str] = ()) -> list[str]:
    """Download ``<scratch>/<slug>/<rel>`` (a file, or a directory with everything under it) into the local work
    dir for each of ``rels`` (keys an earlier stage wrote) and ``optional`` (directories that may not exist) not
    there already; one that the scratch space does not hold is skipped (the stage's own input check then names
    it). Each is looked up as the store holds it now (:func:`_fresh`: a file by its exact key, a directory by a new
    listing, never a cached one), a missing one of ``rels`` again after each of :data:`READ_RETRIES_S`, and each
    read is retried as briefly. Returns the relative paths of the files downloaded.

    Raises:
        OSError: the object store could not be read (e.g. credentials refused, bucket missing), also after the
            retries.
    """
    local = local_dir(settings, ctx)
    fs, base = fsspec.core.url_to_fs(uri(settings, ctx))
    synced = _synced.setdefault(local, {})
    got: list[str] = []
    for rel, expected in [*((r, True) for r in rels), *((r, False) for r in optional)]:
        src = f"{base}/{rel}"
        files = _fresh(fs, src, expected)
        for f in files:
            name = f"{rel}/{f[len(src) :].lstrip('/')}".rstrip("/") if f != src else rel
            dest = local / name
            if dest.name == DIR_MARKER:  # an empty directory of the host that wrote it
                dest.parent.mkdir(parents=True, exist_ok=True)
                synced[name] = (0, 0)
                continue
            if dest.is_file() and synced.get(name) == _stamp(dest):
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            _get(fs, f, dest)
            synced[name] = _stamp(dest)
            got.append(name)
    if got:
        log.info("scratch: downloaded %d file(s) from %s: %s", len(got), uri(settings, ctx), ", ".join(got[:8]))
    return got


def push(settings: Settings, ctx: RunContext) -> list[str]:
    """Upload every file of the local work dir that is new or changed since it was downloaded or uploaded in this
    task to the same relative path under ``<scratch>/<slug>/``. Returns their relative paths (none when the work
    dir is gone, e.g. after archive).

    Raises:
        OSError: the object store could not be written.
    """
    local = local_dir(settings, ctx)
    if not local.is_dir():
        return []
    fs, base = fsspec.core.url_to_fs(uri(settings, ctx))
    synced = _synced.setdefault(local, {})
    sent: list[str] = []
    for p in sorted(q for q in local.rglob("*") if q.is_file()):
        rel = p.relative_to(local).as_posix()
        stamp = _stamp(p)
        if synced.get(rel) == stamp:
            continue
        dest = f"{base}/{rel}"
        fs.makedirs(dest.rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(p), dest)
        synced[rel] = stamp
        sent.append(rel)
    for d in sorted(q for q in local.rglob("*") if q.is_dir() and not any(q.iterdir())):
        rel = f"{d.relative_to(local).as_posix()}/{DIR_MARKER}"
        if rel not in synced:  # an empty directory: a marker object, so the other hosts create it
            fs.pipe_file(f"{base}/{rel}", b"")
            synced[rel] = (0, 0)
            sent.append(rel)
    if sent:
        log.info("scratch: uploaded %d file(s) to %s", len(sent), uri(settings, ctx))
    return sent


@contextlib.contextmanager
def task_dir(settings: Settings, ctx: RunContext) -> Iterator[None]:
    """The block of one task's stages on this host: with ``PERFWATCH_SCRATCH`` set, the local work dir is removed
    when the outermost block of the process ends (however it ends), so nothing of the run stays on the worker;
    a no-op without it. Blocks nest (the measuring task wraps its three stages, each stage its own block)."""
    if not remote(settings):
        yield
        return
    local = local_dir(settings, ctx)
    _depth[local] = _depth.get(local, 0) + 1
    try:
        yield
    finally:
        _depth[local] -= 1
        if _depth[local] == 0:
            del _depth[local]
            _synced.pop(local, None)
            shutil.rmtree(local, ignore_errors=True)


def discard(settings: Settings, ctx: RunContext) -> None:
    """Remove the run's local work dir and, with ``PERFWATCH_SCRATCH`` set, its scratch prefix (a failed run
    recorded in the store, or an archived one: nothing will read them again). An object store that cannot be
    reached is logged, not raised (``perfwatch db check`` finds what was left)."""
    local = local_dir(settings, ctx)
    shutil.rmtree(local, ignore_errors=True)
    _synced.pop(local, None)
    if not remote(settings):
        return
    try:
        fs, base = fsspec.core.url_to_fs(uri(settings, ctx))
        if fs.exists(base):
            fs.rm(base, recursive=True)
    except Exception as e:  # noqa: BLE001 - the stage's own outcome matters more
        log.warning("scratch: could not remove %s (%s: %s)", uri(settings, ctx), type(e).__name__, e)


def info_modified(info: dict[str, Any]) -> float | None:
    """Epoch seconds of an fsspec ``info`` record: ``mtime`` (local), ``LastModified`` (s3), ``updated`` (gcs);
    None when it has none (an object-store "directory", a prefix, has no time of its own)."""
    for key in ("mtime", "LastModified", "updated", "last_modified", "created"):
        value = info.get(key)
        if isinstance(value, dt.datetime):
            return value.timestamp()
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


def newest_modified(fs: Any, path: str) -> float | None:
    """Epoch seconds of the newest write under ``path`` on fsspec file system ``fs``: the latest
    :func:`info_modified` of the directory itself and every file below it (``fs.find(..., detail=True)``: on
    an object store, each object's ``LastModified``), or None when nothing there carries a time.

    Raises:
        OSError: ``path`` could not be listed.
    """
    times = [info_modified(info) for info in [fs.info(path), *fs.find(path, detail=True).values()]]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def entries(settings: Settings) -> list[tuple[str, str, float | None]]:
    """The runs' prefixes in the scratch space: ``(slug, URI, seconds since its newest file was written)``
    (age None when the store says no time). Empty without ``PERFWATCH_SCRATCH`` or when nothing is there.

    Raises:
        OSError: the object store could not be listed.
    """
    if settings.scratch is None:
        return []
    fs, root = fsspec.core.url_to_fs(settings.scratch)
    root = root.rstrip("/")
    if not fs.exists(root):
        return []
    fs.invalidate_cache()
    newest: dict[str, float | None] = {}
    for path, info in fs.find(root, detail=True).items():
        slug = path[len(root) :].lstrip("/").split("/", 1)[0]
        t = info_modified(info)
        old = newest.get(slug)
        newest[slug] = t if old is None else (old if t is None else max(old, t))
    now = time.time()
    prefix = settings.scratch.rstrip("/")
    return [(slug, f"{prefix}/{slug}", None if t is None else now - t) for slug, t in sorted(newest.items())]
