"""pull-model-version: TF-Serving layout, 'latest', errors that list what exists, sha256 of the copy;
versions and names as real stores have them (``0001``, empty version dirs, any script, no path tricks)."""

from __future__ import annotations

import logging
import zipfile

import pytest
from pydantic import ValidationError

from tasks.modelstore import (
    CorruptModelError,
    ModelNotFoundError,
    UnknownModelError,
    resolve_version,
    sha256_tree,
)
from tasks.records import Case, RunContext, safe_name
from tasks.stages.pull import pull_model_version


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
    assert (tmp_path / "work" / "model" / "model.keras").read_bytes() == (
        store / "m" / "10" / "model.keras"
    ).read_bytes()
    assert p.digest == sha256_tree(store / "m" / "10")
    other = pull_model_version(str(store), "m", "1", tmp_path / "work2")
    assert other.digest != p.digest


def test_saved_model_detected(store, tmp_path):
    assert pull_model_version(str(store), "sm", "3", tmp_path / "w").format == "saved_model"


def test_unknown_model_lists_models(store, tmp_path):
    with pytest.raises(UnknownModelError, match=r"unknown model 'nope'.*; models there: corrupt, m, sm$"):
        pull_model_version(str(store), "nope", "1", tmp_path / "w")


def test_unknown_version_lists_versions(store, tmp_path):
    with pytest.raises(
        ModelNotFoundError,
        match=r"version '7' of model 'm' not found in .*/store/m; versions there: "
        r"\[1, 2, 10\]",
    ):
        pull_model_version(str(store), "m", "7", tmp_path / "w")


def test_corrupt_model_file_names_the_store_path(store, tmp_path):
    with pytest.raises(CorruptModelError, match="not a valid .keras archive") as err:
        pull_model_version(str(store), "corrupt", "latest", tmp_path / "w")
    assert str(err.value).startswith(f"{store}/corrupt/1/model.keras ")  # the store's path, not the scratch copy
    assert err.value.version == "1"


def test_explicit_version_holding_no_model_names_the_store_path(store, tmp_path):
    (store / "m" / "11").mkdir()
    with pytest.raises(CorruptModelError, match="neither a \\*.keras file nor a SavedModel") as err:
        pull_model_version(str(store), "m", "11", tmp_path / "w")
    assert str(err.value).startswith(f"{store}/m/11 holds") and err.value.version == "11"
    assert str(tmp_path / "w") not in str(err.value)


def test_latest_skips_version_dirs_holding_no_model_and_says_so(store, tmp_path, caplog):
    """Fault 9: `latest` picked an empty (or half-uploaded) version directory; TF Serving skips it."""
    (store / "m" / "11").mkdir()
    (store / "m" / "12" / "variables").mkdir(parents=True)  # a SavedModel upload without saved_model.pb yet
    with caplog.at_level(logging.WARNING, logger="tasks.stages.pull"):
        p = pull_model_version(str(store), "m", "latest", tmp_path / "w")
    assert p.version == "10"
    assert f"skipped {store}/m/12, {store}/m/11" in caplog.text


def test_latest_when_no_version_holds_a_model(tmp_path):
    (tmp_path / "s" / "m" / "1").mkdir(parents=True)
    with pytest.raises(ModelNotFoundError, match=r"no version directory holding a model .*: .*/s/m/1$"):
        pull_model_version(str(tmp_path / "s"), "m", "latest", tmp_path / "w")


@pytest.mark.parametrize("requested", ["1", "0001", "01", "latest"])
def test_zero_padded_version_dir_is_that_version(tmp_path, requested):
    """Fault 9: TF Serving loads version dir `0001` as version 1; it failed with FileNotFoundError .../1."""
    store = tmp_path / "s"
    _keras_file(store / "m" / "0001" / "model.keras", b"v1")
    p = pull_model_version(str(store), "m", requested, tmp_path / "w")
    assert p.version == "1" and p.source_uri == str(store / "m" / "0001")
    assert p.digest == sha256_tree(store / "m" / "0001")
    assert Case(model="m", version=requested).version == ("latest" if requested == "latest" else "1")


def test_two_dirs_spelling_one_version_are_refused(tmp_path):
    store = tmp_path / "s"
    _keras_file(store / "m" / "1" / "model.keras")
    _keras_file(store / "m" / "001" / "model.keras")
    with pytest.raises(ModelNotFoundError, match=r"version 1 of model 'm' is ambiguous: .*/m/001, .*/m/1"):
        pull_model_version(str(store), "m", "latest", tmp_path / "w")


@pytest.mark.parametrize("name", ["模型", "модель-2", "हिन्दी", "café au lait", "m[1]*?", "-leading", "ümlaut.v2"])
def test_model_names_in_any_script(tmp_path, name):
    """Fault 9: names were limited to ASCII although a store directory may be named in any script."""
    store = tmp_path / "s"
    _keras_file(store / name / "3" / "model.keras", name.encode())
    p = pull_model_version(str(store), name, "latest", tmp_path / "w")
    assert (p.model, p.version) == (name, "3")
    assert (tmp_path / "w" / "model" / "model.keras").read_bytes() == (store / name / "3" / "model.keras").read_bytes()
    case = Case(model=name)
    slug = RunContext(dag_id="d", dag_run_id="manual__2026-01-01T00:00:00+00:00", case=case).slug
    assert "/" not in slug and len(slug.encode()) <= 255


def test_unicode_names_keep_their_letters_in_directory_names():
    assert safe_name("manual__2026-11-30T13:40:50.623377+00:00") == "manual__2026-11-30T13_40_50.623377_00_00"
    assert safe_name("模型__v1") == "模型__v1" and safe_name("हिन्दी") == "हिन्दी"
    assert safe_name("..") == "_.." and "/" not in safe_name("a/../b")
    long = safe_name("模" * 200)
    assert len(long.encode()) <= 200 and long != safe_name("模" * 199 + "型")


def test_two_models_of_one_dag_run_never_share_a_work_dir():
    slugs = {RunContext(dag_id="d", dag_run_id="r", case=Case(model=m)).slug for m in ("a b", "a_b", "a:b")}
    assert len(slugs) == 3


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("..", "relative path"),
        (".", "relative path"),
        ("a/b", "path separator '/'"),
        ("..\\x", "path separator"),
        ("a\nb", "control character U\\+000A"),
        ("a\x00", "control character U\\+0000"),
        ("", "empty"),
        ("m" * 129, "at most 128 characters"),
    ],
)
def test_path_tricks_are_refused_by_name(name, why):
    with pytest.raises(ValidationError, match=why):
        Case(model=name)


def test_a_failed_pull_records_the_resolved_version(store, tmp_path, db_url):
    """``latest`` that resolves to a broken version: the failed row names that version, not ``latest``."""
    from tasks.records import RunContext
    from tasks.settings import Settings
    from tasks.stages import pipeline
    from tasks.store import Run, session_scope

    settings = Settings.from_env(
        {
            "PERFWATCH_HOME": str(tmp_path / "home"),
            "PERFWATCH_DATABASE_URL": db_url,
            "PERFWATCH_MODEL_STORE": str(store),
        }
    )
    ctx = RunContext(dag_id="d", dag_run_id="r", case=Case(model="corrupt", version="latest"), trigger="manual")
    with pytest.raises(CorruptModelError):
        pipeline.run_stage({"ctx": ctx.to_xcom()}, "pull-model-version", settings)
    with session_scope(db_url) as s:
        run = s.query(Run).one()
        assert (run.status, run.failed_stage, run.version_requested) == ("failed", "pull-model-version", "1")
        assert run.params["version"] == "latest"  # what was asked stays in the params
