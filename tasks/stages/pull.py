"""pull-model-version: resolve ``model`` + ``version`` in the versioned model store and copy it, or build a
standard model by name.

The store and its version rules are ``tasks.modelstore``. The pulled copy is local and hashed with
sha256 so the run records exactly which bytes it measured.

A case with ``backbone: keras.applications`` names an architecture instead (``resnet50``,
``mobilenet_v3_small``): :func:`build_application` has the runner build it with random weights
(``weights=None``, nothing downloaded) and save it into the work dir, so every later stage loads it like a
pulled ``.keras`` file. Its version is ``keras<Keras version>-<8 hex of the config's sha256>`` and its digest
the config's sha256 (``tasks.runner.applications``). Both come from the runner's interpreter, not from a
description of the call made here: the runner may run another Keras than this process (its own venv or
image), and only the built model says what architecture that Keras makes of the name, the shape and the
classes (a Keras release that changes a block changes the config, so history is never compared across it).
The cost is one more runner process per run (the TensorFlow import, 15-25 s on the 2-core dev machine).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

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
from tasks.records import Case, PulledModel
from tasks.runner.driver import RunnerProcess, as_runner
from tasks.runner.protocol import BuildResult, BuildSpec
from tasks.settings import Settings


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


#: what a build of one case must reproduce under one Keras version (:func:`check_built`)
BUILT_FIELDS = ("params", "input_shape", "output_shape")


class BuildMismatch(RuntimeError):
    """The model built is not the one this case built before under the same Keras (:func:`check_built`)."""


def check_built(built: dict[str, Any], references: dict[str, dict[str, Any]]) -> list[str]:
    """Check what a build made (``PulledModel.built``) against the case's earlier builds (``references``:
    ``tasks.store.reads.built_references``, per Keras version the newest run's record with its ``run_id``).

    Under the same Keras version the parameter count and the input and output shapes (:data:`BUILT_FIELDS`) must
    be the reference's: one architecture under one Keras builds one model (a builder that reads a global, a
    patched Keras, another ``image_data_format``). Under another Keras version they may differ (a release may
    change an architecture), and each difference is returned in words for the run's log and record, e.g.
    ``params 5,329,995 under Keras 3.11.1, 5,330,571 under Keras 3.10.0 (run 12)``.

    Raises:
        BuildMismatch: a field differs from the same Keras version's reference (names the fields, both values and
            the reference's run).
    """
    version = str(built.get("keras_version"))

    def differences(ref: dict[str, Any]) -> list[str]:
        return [
            f"{k} {_fmt(built.get(k))} under Keras {version}, {_fmt(ref.get(k))} under Keras "
            f"{ref.get('keras_version')} (run {ref.get('run_id')})"
            for k in BUILT_FIELDS
            if ref.get(k) is not None and built.get(k) != ref.get(k)
        ]

    if version in references and (same := differences(references[version])):
        raise BuildMismatch(
            f"refused: {built.get('constructor')} is not the model this case built before under the same Keras: "
            + "; ".join(same)
        )
    return [d for v, ref in references.items() if v != version for d in differences(ref)]


def _fmt(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(tuple(value) if isinstance(value, list) else value)


def build_application(
    case: Case, dest_dir: str | Path, runner: RunnerProcess | str, timeout_s: float | None = None
) -> PulledModel:
    """Build the ``keras.applications`` model ``case.model`` (``case.input_shape``, ``case.classes``, random
    weights from ``case.seed``) in the runner and save it as ``dest_dir/model/model.keras`` (module docstring).

    Args:
        case: a case with ``backbone == "keras.applications"``.
        dest_dir: the run's local work directory.
        runner: the runner (``RunnerProcess``; an interpreter path: its ``-m tasks.runner``).
        timeout_s: the build process's limit (s); default the warm-up's, ``PERFWATCH_WARMUP_TIMEOUT_S``
            (building costs what loading a model in a warm-up does: the TensorFlow import and the graph).

    Returns:
        PulledModel: ``version`` ``keras<Keras version>-<8 hex>``, ``digest`` the sha256 of the architecture's
        config (canonical JSON), ``source_uri`` the constructor call in words (``keras.applications.ResNet50(
        input_shape=(96, 96, 3), classes=10, weights=None), random weights (seed 0), nothing downloaded``),
        ``format`` keras, ``size_bytes`` of the saved file, ``built``: what was built (constructor, Keras version,
        parameter count, input and output shapes, the config's and the weights' sha256).

    Raises:
        ValueError: the case has no ``backbone``.
        tasks.runner.RunnerError: an unknown name (the message lists close matches), arguments the
            constructor refuses (its message), a model that is not the architecture asked for (its first
            convolution reads other channels than its input has: ``applications.stem_mismatch``), or the runner
            failing or timing out.
    """
    if case.backbone is None:
        raise ValueError(f"case of model {case.model!r} has no backbone: pull it from the model store")
    how = "timeout_s"
    if timeout_s is None:
        timeout_s, how = Settings.from_env().runner_limit("warm-up")
    dest = Path(dest_dir) / "model"
    if dest.exists():
        shutil.rmtree(dest)
    spec = BuildSpec(
        out_dir=str(Path(dest_dir) / "build"),
        model_dir=str(dest),
        name=case.model,
        input_shape=case.input_shape,
        classes=case.classes,
        seed=case.seed,
    )
    built = as_runner(runner).run(spec, BuildResult, timeout_s, limit_note=how)
    return PulledModel(
        model=case.model,
        version=built.version,
        source_uri=built.source,
        local_path=str(dest),
        format="keras",
        digest=built.config_sha256,
        size_bytes=built.size_bytes,
        built=built.model_dump(
            mode="json",
            include={
                "constructor",
                "keras_version",
                "params",
                "input_shape",
                "output_shape",
                "config_sha256",
                "weights_sha256",
            },
        ),
    )
