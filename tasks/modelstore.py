"""The versioned model store: TF Serving's layout ``<store>/<model>/<version>/`` on any fsspec URI.

Each version directory holds one Keras ``*.keras`` file or a TF SavedModel (``saved_model.pb`` +
``variables/``). Versions are read as TF Serving reads them: a directory whose name is ASCII digits is
the version of its integer value (``0001`` is version 1), other directories are not versions, and
``latest`` is the highest version whose directory holds a model (empty or half-uploaded ones are
skipped, with a warning). The store is any fsspec URI (a local path, ``s3://``, ``gs://``); errors name
the store path ``<store>/<model>/<version dir>``. Used by pull-model-version (``tasks.stages.pull``),
``perfwatch publish`` and the CLI's history.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
from pathlib import Path
from typing import Any, Literal

import fsspec

from tasks.records import canonical_version, check_model_name

log = logging.getLogger(__name__)


class ModelNotFoundError(LookupError):
    """The model or version does not exist; the message lists what does."""


class UnknownModelError(ModelNotFoundError):
    """The model store has no directory of that name; the message lists the models it has."""


class CorruptModelError(ValueError):
    """The version directory holds no loadable model layout; the message names its store path.

    ``version`` is the resolved version (e.g. ``"3"`` for a requested ``latest``)."""

    def __init__(self, message: str, version: str | None = None) -> None:
        super().__init__(message)
        self.version = version


def filesystem(uri: str) -> tuple[Any, str]:
    """``(fsspec filesystem, root path without a trailing slash)`` of the store URI ``uri``."""
    fs, root = fsspec.core.url_to_fs(uri)
    return fs, root.rstrip("/")


def _name(path: str) -> str:
    return posixpath.basename(path.rstrip("/"))


def _subdirs(fs: Any, path: str) -> list[str]:
    return sorted(_name(e["name"]) for e in fs.ls(path, detail=True) if e.get("type") == "directory")


def store_path(store_uri: str, *parts: str) -> str:
    """``<store>/<part>/...`` as the user wrote the store (local path or URI), for messages and records."""
    return "/".join([store_uri.rstrip("/"), *parts])


def version_dirs(store_uri: str, model: str) -> dict[int, list[str]]:
    """Version -> the directory names that spell it (``{1: ["0001"]}``), for every ASCII-digit
    directory of ``<store>/<model>``; non-version directories and files are ignored.

    Raises:
        ValueError: ``model`` is not a valid model name (``tasks.records.check_model_name``).
        UnknownModelError: the model directory does not exist (lists the models there are).
    """
    check_model_name(model)
    fs, root = filesystem(store_uri)
    mdir = f"{root}/{model}"
    if not fs.isdir(mdir):
        models = _subdirs(fs, root) if fs.isdir(root) else []
        raise UnknownModelError(
            f"unknown model {model!r}: no directory {store_path(store_uri, model)}; "
            f"models there: {', '.join(models) or 'none'}"
        )
    out: dict[int, list[str]] = {}
    for name in _subdirs(fs, mdir):
        if name.isascii() and name.isdigit():
            out.setdefault(int(name), []).append(name)
    return dict(sorted(out.items()))


def list_versions(store_uri: str, model: str) -> list[int]:
    """Integer versions of ``model`` in the store, ascending (``0001`` counts as 1; other dirs are ignored).

    Raises:
        ModelNotFoundError: the model directory does not exist (lists the models there are).
    """
    return list(version_dirs(store_uri, model))


def earlier_version(store_uri: str, model: str, before: str) -> str | None:
    """The newest integer version of ``model`` in the store below ``before`` (as a string, e.g. ``"1"``): what a
    paired gate of ``before`` pairs with when no earlier version was measured. None when ``before`` is not an
    integer version, the model has no directory, or no version is below it."""
    if not str(before).isdigit():
        return None
    try:
        below = [v for v in list_versions(store_uri, model) if v < int(before)]
    except ModelNotFoundError:
        return None
    return str(max(below)) if below else None


def layout(fs: Any, path: str) -> str | None:
    """``keras`` or ``saved_model`` when the store directory ``path`` holds that layout, else None."""
    files = {_name(e["name"]) for e in fs.ls(path, detail=True) if e.get("type") != "directory"}
    if any(f.endswith(".keras") for f in files):
        return "keras"
    return "saved_model" if "saved_model.pb" in files else None


def _one_dir(store_uri: str, model: str, version: int, names: list[str]) -> str:
    if len(names) > 1:
        where = ", ".join(store_path(store_uri, model, n) for n in names)
        raise ModelNotFoundError(
            f"version {version} of model {model!r} is ambiguous: {where} all read as version {version}; keep one"
        )
    return names[0]


def resolve_version_dir(store_uri: str, model: str, version: str) -> tuple[int, str]:
    """Turn ``version`` (digits such as ``3`` or ``0003``, or ``latest``) into (version, its directory name).

    ``latest`` is the highest version whose directory holds a model (a ``*.keras`` file or a
    ``saved_model.pb``); higher ones that hold none are skipped and named in a warning (logged).

    Raises:
        ValueError: ``version`` is neither digits nor ``latest``; or ``model`` is not a valid name.
        ModelNotFoundError: no such model; no version directory holding a model (for ``latest``);
            the version is absent (lists those there are); two directories spell one version.
    """
    want = canonical_version(version)
    dirs = version_dirs(store_uri, model)
    if not dirs:
        raise ModelNotFoundError(
            f"model {model!r} has no version directories (integer names such as 1 or 0001) "
            f"in {store_path(store_uri, model)}"
        )
    if want != "latest":
        v = int(want)
        if v not in dirs:
            raise ModelNotFoundError(
                f"version {version!r} of model {model!r} not found in "
                f"{store_path(store_uri, model)}; versions there: {list(dirs)}"
            )
        return v, _one_dir(store_uri, model, v, dirs[v])
    fs, root = filesystem(store_uri)
    skipped: list[str] = []
    for v in reversed(dirs):
        name = _one_dir(store_uri, model, v, dirs[v])
        if layout(fs, f"{root}/{model}/{name}") is not None:
            if skipped:
                log.warning(
                    "latest version of %r is %d: skipped %s (no *.keras file or saved_model.pb)",
                    model,
                    v,
                    ", ".join(skipped),
                )
            return v, name
        skipped.append(store_path(store_uri, model, name))
    raise ModelNotFoundError(
        f"model {model!r} has no version directory holding a model (a *.keras file or "
        f"saved_model.pb): {', '.join(reversed(skipped))}"
    )


def resolve_version(store_uri: str, model: str, version: str) -> int:
    """The integer version ``version`` resolves to (see :func:`resolve_version_dir`)."""
    return resolve_version_dir(store_uri, model, version)[0]


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


def detect_format(path: Path, where: str | None = None) -> Literal["keras", "saved_model"]:
    """``keras`` or ``saved_model`` for a pulled version directory.

    ``where`` names the directory in messages (the store path it was copied from); default ``path``.

    Raises:
        CorruptModelError: neither layout is present, or the Keras file is not a zip archive.
    """
    import zipfile

    where = where or str(path)
    keras_files = sorted(path.glob("*.keras"))
    if keras_files:
        if not zipfile.is_zipfile(keras_files[0]):
            raise CorruptModelError(f"{where}/{keras_files[0].name} is not a valid .keras archive (not a zip file)")
        return "keras"
    if (path / "saved_model.pb").is_file():
        return "saved_model"
    raise CorruptModelError(f"{where} holds neither a *.keras file nor a SavedModel (saved_model.pb)")


def copy_tree(fs: Any, src: str, dest: Path) -> None:
    """Copy every file under store directory ``src`` to ``dest`` (file by file: a name holding
    ``*``, ``?`` or ``[`` is never read as a glob pattern)."""
    files = sorted(fs.find(src, withdirs=False))
    targets = []
    for f in files:
        rel = posixpath.relpath(f, src)
        target = dest.joinpath(*rel.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        targets.append(str(target))
    dest.mkdir(parents=True, exist_ok=True)
    if files:
        fs.get(files, targets)
