"""pull-model-version: resolve ``model`` + ``version`` in the versioned model store and copy it.

The store uses TF-Serving's layout, ``<store>/<model>/<version>/`` with integer versions, each
holding one Keras ``*.keras`` file or a TF SavedModel (``saved_model.pb`` + ``variables/``).
The store is any fsspec URI (a local path, ``s3://``, ``gs://``); the pulled copy is local and
hashed with sha256 so the run records exactly which bytes it measured.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import fsspec

from tasks.records import PulledModel


class ModelNotFoundError(LookupError):
    """The model or version does not exist; the message lists what does."""


class CorruptModelError(ValueError):
    """The version directory holds no loadable model layout."""


def _fs(uri: str):
    fs, root = fsspec.core.url_to_fs(uri)
    return fs, root.rstrip("/")


def list_versions(store_uri: str, model: str) -> list[int]:
    """Integer versions of ``model`` in the store, ascending (non-integer dirs are ignored).

    Raises:
        ModelNotFoundError: the model directory does not exist (lists the models there are).
    """
    fs, root = _fs(store_uri)
    mdir = f"{root}/{model}"
    if not fs.isdir(mdir):
        models = sorted(Path(p).name for p in fs.ls(root, detail=False)) if fs.isdir(root) else []
        raise ModelNotFoundError(f"model {model!r} not found in store {store_uri}; models there: {models or 'none'}")
    return sorted(int(Path(p).name) for p in fs.ls(mdir, detail=False) if Path(p).name.isdigit())


def resolve_version(store_uri: str, model: str, version: str) -> int:
    """Turn ``version`` (an integer string or ``latest``) into an existing integer version.

    Raises:
        ModelNotFoundError: no such model, no versions, or the version is absent (lists them).
    """
    versions = list_versions(store_uri, model)
    if not versions:
        raise ModelNotFoundError(f"model {model!r} in store {store_uri} has no integer version directories")
    if version == "latest":
        return versions[-1]
    if not str(version).isdigit() or int(version) not in versions:
        raise ModelNotFoundError(f"version {version!r} of model {model!r} not found; versions there: {versions}")
    return int(version)


def sha256_tree(path: Path) -> str:
    """sha256 over every file under ``path`` (relative path and bytes, in sorted order)."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path.parent if path.is_file() else path)).encode())
        h.update(b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def detect_format(path: Path) -> str:
    """``keras`` or ``saved_model`` for a pulled version directory.

    Raises:
        CorruptModelError: neither layout is present, or the Keras file is not a zip archive.
    """
    import zipfile

    keras_files = sorted(path.glob("*.keras"))
    if keras_files:
        if not zipfile.is_zipfile(keras_files[0]):
            raise CorruptModelError(f"{keras_files[0]} is not a valid .keras archive (not a zip file)")
        return "keras"
    if (path / "saved_model.pb").is_file():
        return "saved_model"
    raise CorruptModelError(f"{path} holds neither a *.keras file nor a SavedModel (saved_model.pb)")


def pull_model_version(store_uri: str, model: str, version: str, dest_dir: str | Path) -> PulledModel:
    """Resolve and copy one model version into ``dest_dir/model``; hash the copy.

    Args:
        store_uri: model store root (local path or fsspec URI).
        model: model name (a directory of the store).
        version: integer version or ``latest``.
        dest_dir: the run's local work directory.

    Returns:
        PulledModel with the resolved version, local path, format and sha256 digest.

    Raises:
        ModelNotFoundError: unknown model or version (the message lists what exists).
        CorruptModelError: the version holds no recognisable model.
    """
    v = resolve_version(store_uri, model, version)
    fs, root = _fs(store_uri)
    src = f"{root}/{model}/{v}"
    dest = Path(dest_dir) / "model"
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fs.get(src, str(dest), recursive=True)
    fmt = detect_format(dest)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    return PulledModel(model=model, version=str(v), source_uri=src if "://" not in store_uri else f"{store_uri}/{model}/{v}",
                       local_path=str(dest), format=fmt, digest=sha256_tree(dest), size_bytes=size)
