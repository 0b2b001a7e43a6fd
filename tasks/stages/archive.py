"""archive: keep the evidence — one SQL transaction and a TensorBoard-openable profile archive.

The profile directory is copied to ``<archive>/<model>/<run dir>/plugins/profile/...`` so that
``tensorboard --logdir <archive>/<model>`` lists every run of the model. The copy is written under
a temporary name and renamed into place only after the store transaction commits; if the
transaction fails the copy is deleted, so neither a half-written archive nor an orphan artifact
is left. A regression never stops the archive: the DAG run fails after this stage.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import fsspec

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
from tasks.store.writes import store_run


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def archive_run(db_url: str, archive_root: str, ctx: RunContext, pulled: PulledModel, env: EnvRecord,
                warmup: WarmupRecord, run: ProfiledRun, parsed: ParseRecord, verdict: CompareRecord,
                *, auto_accept: bool = True, extra_dirs: dict[str, str] | None = None) -> ArchiveRecord:
    """Write everything about a finished run into the store (one transaction) and the archive.

    Args:
        extra_dirs: name -> local directory also copied into the run's archive dir (e.g. the
            Great Expectations Data Docs as ``gx``).

    Returns:
        ArchiveRecord with the new run id and the archive URI of the run directory.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the store transaction failed (the archive copy is removed).
    """
    samples = json.loads(Path(run.samples_path).read_text())
    parsed_tables: dict[str, Any] = json.loads(Path(parsed.parsed_path).read_text())
    run_dir_name = safe_name(f"{ctx.case.name}__v{pulled.version}__{ctx.dag_id}__{ctx.dag_run_id}")
    fs, root = fsspec.core.url_to_fs(archive_root)
    final = f"{root.rstrip('/')}/{ctx.case.model}/{run_dir_name}"
    staging = final + ".partial"
    if fs.exists(staging):
        fs.rm(staging, recursive=True)
    fs.makedirs(staging, exist_ok=True)
    fs.put(str(Path(run.profile_dir) / "plugins"), f"{staging}/plugins", recursive=True)
    for name, local in (extra_dirs or {}).items():
        fs.put(local, f"{staging}/{name}", recursive=True)
    archive_uri = final if "://" not in archive_root else f"{archive_root.rstrip('/')}/{ctx.case.model}/{run_dir_name}"
    xplanes = sorted(Path(run.profile_dir).glob("plugins/profile/*/*.xplane.pb"))
    gx_result = (json.loads(Path(verdict.gx_results_path).read_text()) if verdict.gx_results_path
                 else verdict.evidence.get("gx", {}))

    artifacts = [("xplane", f"{archive_uri}/{x.relative_to(run.profile_dir).as_posix()}", x.stat().st_size,
                  _sha256(x)) for x in xplanes]

    def move_into_place() -> None:
        if fs.exists(final):
            fs.rm(final, recursive=True)
        fs.mv(staging, final, recursive=True)

    try:
        run_id = store_run(db_url, ctx, pulled, env, warmup, run, parsed, verdict, samples=samples,
                           parsed_tables=parsed_tables, gx_result=gx_result, artifacts=artifacts,
                           archive_uri=archive_uri, auto_accept=auto_accept, before_commit=move_into_place)
    except Exception:
        for path in (staging, final):
            if fs.exists(path):
                fs.rm(path, recursive=True)
        raise
    return ArchiveRecord(run_id=run_id, archive_uri=archive_uri, verdict=verdict.verdict)
