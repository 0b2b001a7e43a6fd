"""pull-model-version: resolve ``model`` + ``version`` in the versioned model store and copy it.

The store and its version rules are ``tasks.modelstore``. The pulled copy is local and hashed with
sha256 so the run records exactly which bytes it measured.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tasks.modelstore import (
    CorruptModelError,
    copy_tree,
    detect_format,
    filesystem,
    layout,
    resolve_version_dir,
    sha256_tree,
    store_path,
)
from tasks.records import PulledModel


def pull_model_version(store_uri: str, model: str, version: str, dest_dir: str | Path) -> PulledModel:
    """Resolve and copy one model version into ``dest_dir/model``; hash the copy.

    Args:
        store_uri: model store root (local path or fsspec URI).
        model: model name (a directory of the store, any script; see ``tasks.records.check_model_name``).
        version: integer version (``3`` or ``0003``) or ``latest``.
        dest_dir: the run's local work directory.

    Returns:
        PulledModel with the resolved version (``"1"`` for directory ``0001``), the store path it
        came from, the local path, format, size (bytes) and sha256 digest.

    Raises:
        ValueError: a model name or version that cannot name a store directory.
        ModelNotFoundError: unknown model or version (the message lists what exists).
        CorruptModelError: the version holds no recognisable model (names ``<store>/<model>/<dir>``;
            ``.version`` is the resolved version).
    """
    v, dirname = resolve_version_dir(store_uri, model, version)
    fs, root = filesystem(store_uri)
    src = f"{root}/{model}/{dirname}"
    where = store_path(store_uri, model, dirname)
    dest = Path(dest_dir) / "model"
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if layout(fs, src) is None:
        raise CorruptModelError(f"{where} holds neither a *.keras file nor a SavedModel (saved_model.pb)", str(v))
    copy_tree(fs, src, dest)
    try:
        fmt = detect_format(dest, where)
    except CorruptModelError as e:
        raise CorruptModelError(str(e), str(v)) from None
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    return PulledModel(
        model=model,
        version=str(v),
        source_uri=src if "://" not in store_uri else where,
        local_path=str(dest),
        format=fmt,
        digest=sha256_tree(dest),
        size_bytes=size,
    )
