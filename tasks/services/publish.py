"""Model release: publish a model version into the store, and turn release events into gate cases.

``perfwatch publish MODEL PATH`` copies a Keras ``.keras`` file or a SavedModel directory into the
model store (TF-Serving layout ``<store>/<model>/<version>/``, see :mod:`tasks.stages.pull`) as the
next version, then (when pointed at Airflow) emits an **Asset event** for the model; the
``perfwatch_profile`` DAG is scheduled on those Assets as well as on its cron and runs the paired
release gate for exactly the published version (:func:`release_cases`).

Asset naming: one Asset per model, URI ``perfwatch://models/<model>`` (the model name
percent-encoded: Airflow accepts only ASCII URIs), name ``perfwatch-model-<model>``
(:func:`model_asset`). The event's ``extra`` carries ``model``, ``version`` (the integer
version directory), ``digest`` (sha256 of the published files, as ``pull`` computes it) and
``source`` (where it was copied from). The DAG knows the Assets of the models in the nightly config
(``PERFWATCH_CONFIG``) when it is parsed (:func:`release_asset_uris`); Airflow accepts events only
for Assets some DAG declares, so a model published outside the config is copied but not gated.

Atomic publication: a local store gets the copy in a hidden temporary directory beside the version
(``<store>/<model>/.publish-<version>-<random>``, not a version name) that is renamed into place in
one ``rename``; a half-copied version is never visible. An object store (``s3://``...) has no
rename: the files are uploaded straight into the version directory with the model's marker file
(``*.keras`` or ``saved_model.pb``) last, so ``latest`` (which needs the marker) and ``pull`` never
take a version whose other files are still missing.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import urllib.parse
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tasks.records import check_model_name
from tasks.settings import Settings

log = logging.getLogger(__name__)

ASSET_URI_PREFIX = "perfwatch://models/"


def model_asset(model: str) -> tuple[str, str]:
    """The Airflow Asset of ``model``: ``(uri, name)``, e.g. ``("perfwatch://models/resnet",
    "perfwatch-model-resnet")``; non-ASCII characters and ``/?#%`` of the name are percent-encoded in the URI.

    Raises:
        ValueError: ``model`` is not a valid model name (``tasks.records.check_model_name``).
    """
    check_model_name(model)
    return ASSET_URI_PREFIX + urllib.parse.quote(model, safe=""), f"perfwatch-model-{model}"


def model_of_asset_uri(uri: str) -> str | None:
    """The model name of a ``perfwatch://models/<model>`` URI (percent-decoded), else None."""
    if not uri.startswith(ASSET_URI_PREFIX):
        return None
    return urllib.parse.unquote(uri.removeprefix(ASSET_URI_PREFIX)) or None


@dataclass(frozen=True)
class Published:
    """A version written by :func:`publish_version`.

    Attributes:
        model, version: the model and its new integer version (as a string, e.g. ``"3"``).
        path: the version directory in the store (``<store>/<model>/<version>``).
        format: ``keras`` or ``saved_model``.
        digest: sha256 of the version's files (``tasks.stages.pull.sha256_tree``; equal to the digest a
            run records when it pulls this version).
        size_bytes: total bytes copied.
        source: the file or directory it was copied from.
    """

    model: str
    version: str
    path: str
    format: str
    digest: str
    size_bytes: int
    source: str

    def event_extra(self) -> dict[str, Any]:
        """The Asset event's ``extra``: model, version, digest, source, format."""
        return {k: v for k, v in asdict(self).items() if k in ("model", "version", "digest", "source", "format")}


class VersionExistsError(FileExistsError):
    """The version asked for is already in the store (a published version is never overwritten)."""


def _source_format(src: Path) -> str:
    """``keras`` for a ``.keras`` zip file, else the layout of a directory (``pull.detect_format``).

    Raises:
        FileNotFoundError: ``src`` does not exist.
        ValueError: a file that is not a ``.keras`` zip archive; a directory with no model (CorruptModelError).
    """
    from tasks.modelstore import detect_format

    if not src.exists():
        raise FileNotFoundError(f"model path {src} does not exist; expected a .keras file or a SavedModel directory")
    if src.is_file():
        if src.suffix != ".keras" or not zipfile.is_zipfile(src):
            raise ValueError(
                f"model path {src}: expected a Keras .keras file (a zip archive) or a SavedModel "
                "directory (holding saved_model.pb)"
            )
        return "keras"
    return detect_format(src)


def _stage_copy(src: Path, dest: Path) -> None:
    """Copy ``src`` (a .keras file or a model directory) so that ``dest`` is the version directory."""
    if src.is_file():
        dest.mkdir(parents=True)
        shutil.copy2(src, dest / src.name)
    else:
        shutil.copytree(src, dest, copy_function=shutil.copy2)


def _is_marker(rel: str) -> bool:
    return "/" not in rel and (rel.endswith(".keras") or rel == "saved_model.pb")


def publish_version(store_uri: str, model: str, src: str | Path, version: int | None = None) -> Published:
    """Copy a model into ``<store>/<model>/<version>/`` as a new version, atomically (see the module doc).

    Args:
        store_uri: the model store root (``PERFWATCH_MODEL_STORE``; a local path or fsspec URI).
        model: the model's name in the store (``tasks.records.check_model_name``); created if new.
        src: a Keras ``.keras`` file, or a directory holding a SavedModel (``saved_model.pb``) or a ``.keras`` file.
        version: the integer version to write; None: one above the highest version there (1 for a new model).

    Returns:
        :class:`Published` (version, store path, format, sha256 digest, bytes).

    Raises:
        FileNotFoundError / ValueError: ``src`` is missing or holds no model; a bad model name; ``version`` < 1.
        VersionExistsError: ``version`` is already in the store (any spelling, e.g. ``0003`` for 3), or another
            publisher took it meanwhile.
    """
    from tasks.modelstore import filesystem, sha256_tree, store_path, version_dirs

    check_model_name(model)
    src = Path(src).expanduser().resolve()
    fmt = _source_format(src)
    fs, root = filesystem(store_uri)
    mdir = f"{root}/{model}"
    existing = version_dirs(store_uri, model) if fs.isdir(mdir) else {}
    if version is None:
        version = max(existing, default=0) + 1
    elif version < 1:
        raise ValueError(f"--version {version}: expected an integer version >= 1")
    if version in existing:
        raise VersionExistsError(
            f"version {version} of model {model!r} already exists "
            f"({store_path(store_uri, model, existing[version][0])}); published versions are "
            f"never overwritten: choose another --version or omit it (next: "
            f"{max(existing) + 1})"
        )
    final = f"{mdir}/{version}"
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        Path(mdir).mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".publish-{version}-", dir=mdir))
        staged = tmp / "v"
        try:
            _stage_copy(src, staged)
            digest = sha256_tree(staged)
            size = sum(p.stat().st_size for p in staged.rglob("*") if p.is_file())
            try:
                os.rename(staged, final)  # atomic; fails if another publisher created the version meanwhile
            except OSError as e:
                raise VersionExistsError(
                    f"version {version} of model {model!r} appeared in the store while "
                    f"copying (another publisher?): {e}"
                ) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        with tempfile.TemporaryDirectory(prefix="perfwatch-publish-") as t:
            staged = Path(t) / "v"
            _stage_copy(src, staged)
            digest = sha256_tree(staged)
            files = sorted(
                (p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()),
                key=lambda rel: (_is_marker(rel), rel),
            )  # the marker file last
            size = sum((staged / rel).stat().st_size for rel in files)
            for rel in files:
                fs.put_file(str(staged / rel), f"{final}/{rel}")
    where = store_path(store_uri, model, str(version))
    log.info("published %s version %d at %s (%s, %d bytes, sha256 %s)", model, version, where, fmt, size, digest)
    return Published(
        model=model, version=str(version), path=where, format=fmt, digest=digest, size_bytes=size, source=str(src)
    )


def release_asset_uris(config_path: str | Path | None = None) -> list[tuple[str, str]]:
    """The Assets ``(uri, name)`` the DAG listens to: one per model of the nightly config (``config_path``,
    default ``PERFWATCH_CONFIG``), sorted. For DAG parsing, so light on purpose (PyYAML's libyaml loader
    only, ``tasks.matrix.read_yaml``: no validation, no store). A config that is missing or unreadable gives no
    Assets (logged as a warning) and the DAG keeps its cron schedule; the nightly run's plan task reports the
    config's errors.
    """
    from tasks.matrix import read_yaml
    from tasks.settings import Settings

    path = config_path if config_path is not None else Settings.from_env().config_path
    try:
        data = read_yaml(path)
        names = {str(e["model"]) for e in data["models"] if isinstance(e, dict) and e.get("model")}
        return sorted(model_asset(n) for n in names)
    except Exception as e:  # noqa: BLE001 - parse time: the DAG must stay loadable
        log.warning("no release Assets: the config %s could not be read: %s: %s", path, type(e).__name__, e)
        return []


def release_requests(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    """``(model, version)`` pairs asked for by Asset events ``(asset uri, extra)``, in order, without repeats.
    ``extra`` as ``perfwatch publish`` sends it names both; an event without them (e.g. created by hand in
    Airflow's UI) means the model of its Asset URI and version ``latest``.

    Raises:
        ValueError: no model (neither in extra nor a ``perfwatch://models/`` URI), or a version that is not an
            integer or ``latest`` (the message names the event).
    """
    out: list[tuple[str, str]] = []
    for uri, extra in events:
        model = extra.get("model") or model_of_asset_uri(uri)
        version = str(extra.get("version") or "latest")
        if not model or not (version.isdigit() or version == "latest"):
            raise ValueError(
                f"asset event of {uri} with extra {extra!r}: expected a model (in extra or a "
                f"{ASSET_URI_PREFIX}<model> URI) and an integer version or 'latest'"
            )
        if (str(model), version) not in out:
            out.append((str(model), version))
    return out


def release_cases(
    dag_id: str,
    dag_run_id: str,
    events: list[tuple[str, dict[str, Any]]],
    settings: Settings | None = None,
    measuring_queues: list[str] | None = None,
    *,
    db_url: str | None = None,
) -> list[dict[str, Any]]:
    """The run states (``tasks.records.RunState`` XCom dicts) of a DAG run triggered by release Asset events:
    for every published (model, version) (:func:`release_requests`), every case of that model in the nightly
    config (its whole matrix) with ``version`` pinned and trigger ``release`` (a paired gate against the
    baseline's version), so the gate measures exactly what the nightly runs measure and finds their baseline;
    a model outside the config gets one case of the DAG's defaults. Built by ``pipeline.plan_cases`` (as for
    the Params ``model``, ``version``, ``case='all'``), which also migrates the store and gives each case its
    measuring queue (``measuring_queues``: the DAG's, as ``plan_cases`` takes them; ``db_url``: the store, likewise).

    Raises:
        ValueError: an event's extra is malformed, or the config is invalid (``tasks.matrix.load_config``).
    """
    from tasks.matrix import config_exists, load_config
    from tasks.settings import Settings
    from tasks.stages.pipeline import plan_cases

    settings = (settings or Settings.from_env()).with_store(db_url)
    wanted = release_requests(events)
    configured = {c.model for c in load_config(settings.config_path)} if config_exists(settings.config_path) else set()
    states: list[dict[str, Any]] = []
    for model, version in wanted:
        params = {"model": model, "version": version, **({"case": "all"} if model in configured else {})}
        states += plan_cases(dag_id, dag_run_id, "release", params, settings, measuring_queues)
    return states


def missing_target(conf: dict[str, Any], settings: Settings | None = None) -> str | None:
    """Why a ``perfwatch_profile`` DAG run of ``conf`` (the Params ``model``, ``version``, ``case``; e.g. the
    Alertmanager webhook's ``profile_request``) would find nothing to run, else None: the model
    (and a pinned version) must be in the model store (``PERFWATCH_MODEL_STORE``, read as the DAG's
    pull-model-version reads it: ``tasks.modelstore.resolve_version``), and a named ``case`` must be one of
    the model's cases in the config (``PERFWATCH_CONFIG``, ``tasks.matrix.select_cases``, as the DAG's plan
    picks it). The message names what exists (models, versions, cases).
    """
    from tasks.matrix import load_config, select_cases
    from tasks.modelstore import ModelNotFoundError, resolve_version

    settings = settings or Settings.from_env()
    try:
        resolve_version(settings.model_store, conf["model"], conf.get("version", "latest"))
    except (ModelNotFoundError, ValueError, OSError) as e:
        return f"not in the model store: {e}"
    if case := conf.get("case"):
        try:
            select_cases(load_config(settings.config_path), conf["model"], case, where=str(settings.config_path))
        except (ValueError, OSError) as e:
            return f"unknown case: {e}"
    return None
