"""pull-model-version: TF-Serving layout, 'latest', errors that list what exists, sha256 of the copy."""

from __future__ import annotations

import zipfile

import pytest

from tasks.stages.pull import (
    CorruptModelError,
    ModelNotFoundError,
    pull_model_version,
    resolve_version,
    sha256_tree,
)


def _keras_file(path, payload=b"weights"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model.weights.h5", payload)
    return path


@pytest.fixture
def store(tmp_path):
    s = tmp_path / "store"
    _keras_file(s / "m" / "1" / "model.keras", b"v1")
    _keras_file(s / "m" / "10" / "model.keras", b"v10")
    _keras_file(s / "m" / "2" / "model.keras", b"v2")
    (s / "m" / "not-a-version").mkdir()
    (s / "sm" / "3" / "variables").mkdir(parents=True)
    (s / "sm" / "3" / "saved_model.pb").write_bytes(b"pb")
    (s / "corrupt" / "1").mkdir(parents=True)
    (s / "corrupt" / "1" / "model.keras").write_bytes(b"this is not a zip")
    return s


def test_latest_is_highest_integer_version(store):
    assert resolve_version(str(store), "m", "latest") == 10
    assert resolve_version(str(store), "m", "2") == 2


def test_pull_copies_and_hashes(store, tmp_path):
    p = pull_model_version(str(store), "m", "latest", tmp_path / "work")
    assert p.version == "10" and p.format == "keras"
    assert (tmp_path / "work" / "model" / "model.keras").read_bytes() == (store / "m" / "10" / "model.keras").read_bytes()
    assert p.digest == sha256_tree(store / "m" / "10")
    other = pull_model_version(str(store), "m", "1", tmp_path / "work2")
    assert other.digest != p.digest


def test_saved_model_detected(store, tmp_path):
    assert pull_model_version(str(store), "sm", "3", tmp_path / "w").format == "saved_model"


def test_unknown_model_lists_models(store, tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"'nope' not found.*\['corrupt', 'm', 'sm'\]"):
        pull_model_version(str(store), "nope", "1", tmp_path / "w")


def test_unknown_version_lists_versions(store, tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"version '7' of model 'm' not found; versions there: \[1, 2, 10\]"):
        pull_model_version(str(store), "m", "7", tmp_path / "w")


def test_corrupt_model_file(store, tmp_path):
    with pytest.raises(CorruptModelError, match="not a valid .keras archive"):
        pull_model_version(str(store), "corrupt", "latest", tmp_path / "w")


def test_empty_version_dir(store, tmp_path):
    (store / "m" / "11").mkdir()
    with pytest.raises(CorruptModelError, match="neither a \\*.keras file nor a SavedModel"):
        pull_model_version(str(store), "m", "latest", tmp_path / "w")
