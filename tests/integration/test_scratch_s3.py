"""No shared disk: the stages of one case on two "hosts" (two local work roots) that share only an S3 API (moto's
server on loopback) and the store. The model store, the scratch space (``PERFWATCH_SCRATCH``) and the archive are
``s3://`` URIs; the runner is the fake one (``tests.helpers.fake_runner``: no TensorFlow, a real committed XSpace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks.records import Case, RunContext, RunState
from tasks.settings import Settings
from tasks.stages import pipeline, scratch
from tasks.stages.archive import remove_leftover
from tasks.store.reads import run_locations
from tests.helpers import fake_runner
from tests.helpers.s3 import configured, moto_s3

SMALL = {"batch_size": 4, "measured_steps": 20, "profiled_steps": 3, "warmup_max_steps": 20}


@pytest.fixture
def s3(monkeypatch):
    with moto_s3() as server, configured(server, monkeypatch):
        yield server


def _host(tmp_path: Path, name: str, db_url: str, s3) -> Settings:
    """One host's settings: its own PERFWATCH_HOME and work dirs, everything else on S3 or in the store."""
    return Settings.from_env(
        {
            "PERFWATCH_HOME": str(tmp_path / name),
            "PERFWATCH_DATABASE_URL": db_url,
            "PERFWATCH_MODEL_STORE": s3.uri("models"),
            "PERFWATCH_ARCHIVE": s3.uri("archive"),
            "PERFWATCH_SCRATCH": s3.uri("scratch"),
            "PERFWATCH_RUNNER_COMMAND": fake_runner.command(),
        }
    )


def _local_files(st: Settings) -> list[str]:
    return sorted(str(p.relative_to(st.home)) for p in st.home.rglob("*") if p.is_file()) if st.home.exists() else []


def test_stages_on_two_hosts_hand_files_on_through_s3_and_retries_change_nothing(db_url, tmp_path, s3, monkeypatch):
    """pull on B, measure on A, parse/compare/archive on B: each stage downloads only what it reads (measure the
    model, parse the samples and the profile), uploads what it wrote, and leaves nothing in its host's work dir;
    the xplane lands in the S3 archive and the scratch prefix is removed. A retried parse and a retried archive
    change nothing (same run, same archive, one run row)."""
    model = tmp_path / "src" / "model.keras"
    fake_runner.write_model(model)
    s3.fs().put_file(str(model), f"{s3.bucket}/models/tiny/1/model.keras")
    a, b = _host(tmp_path, "measuring-host", db_url, s3), _host(tmp_path, "default-host", db_url, s3)
    fetched: list[tuple[str, list[str]]] = []
    real_fetch = scratch.fetch
    monkeypatch.setattr(
        scratch,
        "fetch",
        lambda st, ctx, rels, **kw: fetched.append((st.home.name, got := real_fetch(st, ctx, rels, **kw))) or got,
    )
    ctx = RunContext(dag_id="d", dag_run_id="r1", trigger="manual", case=Case(model="tiny", version="1", **SMALL))
    state = pipeline.run_stage(RunState(ctx=ctx), "pull-model-version", b)
    assert scratch.uri(b, ctx).startswith("s3://") and s3.keys("scratch", ctx.slug) == [
        f"scratch/{ctx.slug}/model/model.keras"
    ]
    state = RunState.model_validate(json.loads(json.dumps(state.to_xcom())))  # through XCom
    state = pipeline.measure_case(state, a, retry_left=False)
    assert state.run is not None and state.env is not None and state.warmup is not None
    on_a = [f for host, got in fetched if host == "measuring-host" for f in got]
    assert on_a == ["model/model.keras"]  # once, for warm-up and profiled run
    keys = s3.keys("scratch", ctx.slug)
    assert f"scratch/{ctx.slug}/run/result.json" in keys
    assert any(k.endswith(".xplane.pb") for k in keys) and f"scratch/{ctx.slug}/warmup/result.json" in keys
    state = pipeline.run_stage(state, "parse", b)
    assert fetched[-1][0] == "default-host" and "model/model.keras" not in fetched[-1][1]
    assert "run/result.json" in fetched[-1][1] and any(f.endswith(".xplane.pb") for f in fetched[-1][1])
    again = pipeline.run_stage(state.model_copy(update={"parsed": None}), "parse", b)  # a retried parse
    assert again.parsed is not None and again.parsed.avg_step_time_ms == state.parsed.avg_step_time_ms
    state = pipeline.run_stage(again, "baseline-compare", b)
    assert state.verdict is not None and state.verdict.verdict == "no-baseline"
    assert any(k.startswith(f"scratch/{ctx.slug}/gx/") for k in s3.keys("scratch", ctx.slug))
    done = pipeline.run_stage(state, "archive", b)
    assert done.archived is not None and done.archived.archive_uri.startswith(s3.uri("archive"))
    archived = s3.keys("archive", "tiny")
    assert any(k.endswith(".xplane.pb") for k in archived) and any("/gx/" in k for k in archived)
    assert s3.keys("scratch") == []  # the scratch prefix went with the archive
    retried = pipeline.run_stage(state, "archive", b)  # a retried archive: the stored run, nothing written
    assert retried.archived == done.archived and s3.keys("archive", "tiny") == archived
    assert [(r.run_id, r.status) for r in run_locations(db_url)] == [(done.archived.run_id, "success")]
    assert _local_files(a) == [] and _local_files(b) == []  # no host kept a file of the run


def test_db_check_lists_and_removes_scratch_leftovers_in_s3(db_url, tmp_path, s3):
    """``perfwatch db check``'s scratch check reads the object store: an archived run's prefix is a leftover at
    once, an unknown one only after the grace period; removing one empties it in S3."""
    st = _host(tmp_path, "host", db_url, s3)
    fs = s3.fs()
    for slug in ("d__gone__m__train-bs16", "d__running__m__train-bs16"):
        fs.pipe_file(f"{s3.bucket}/scratch/{slug}/run/result.json", b"{}")
    assert pipeline.check_work_dirs(st, []) == []  # both fresh: may belong to runs in progress
    found = pipeline.check_work_dirs(st, [], grace_s=0.0)
    assert [(f.kind, f.path) for f in found] == [
        ("scratch", s3.uri("scratch", "d__gone__m__train-bs16")),
        ("scratch", s3.uri("scratch", "d__running__m__train-bs16")),
    ]
    assert "no stored run" in found[0].detail and all(f.repairable for f in found)
    assert remove_leftover(found[0]) is True
    assert s3.keys("scratch") == ["scratch/d__running__m__train-bs16/run/result.json"]


def test_db_check_keeps_an_s3_archive_in_flight_and_one_of_unknown_age(tmp_path, s3, monkeypatch):
    """An S3 prefix has no time of its own: an archive directory no stored run points to (yet: between archive's
    move and its commit) is aged by its newest object's LastModified, so a fresh one is kept and only one older
    than the grace period is an orphan; one whose age cannot be read is kept, never removed."""
    from tasks.stages import archive

    fs = s3.fs()
    run_dir = "run000001_20260101T0200_v1_train-bs16_1a2b3c4d"
    fs.pipe_file(f"{s3.bucket}/archive/m/{run_dir}/plugins/profile/t/host.xplane.pb", b"x")
    assert archive.check_archive(s3.uri("archive"), []) == []  # written just now: in flight, kept
    (orphan,) = archive.check_archive(s3.uri("archive"), [], grace_s=0.0)
    assert (orphan.kind, orphan.path, orphan.repairable) == ("orphan-archive", f"{s3.bucket}/archive/m/{run_dir}", True)
    monkeypatch.setattr(archive, "newest_modified", lambda fs, path: None)  # a store that says no time
    assert archive.check_archive(s3.uri("archive"), [], grace_s=0.0) == []
    assert s3.keys("archive") == [f"archive/m/{run_dir}/plugins/profile/t/host.xplane.pb"]


def test_publish_to_an_s3_model_store_and_pull_from_it(tmp_path, s3):
    """``perfwatch publish``'s copy into an ``s3://`` model store: versions 1 and 2 in the TF-Serving layout,
    a taken version refused, and the pull stage resolves ``latest`` there and hashes the same bytes."""
    from tasks.services.publish import VersionExistsError, publish_version
    from tasks.stages.pull import pull_model_version

    model = fake_runner.write_model(tmp_path / "src" / "model.keras")
    store = s3.uri("models")
    one = publish_version(store, "tiny", model)
    two = publish_version(store, "tiny", model)
    assert (one.version, two.version) == ("1", "2") and one.digest == two.digest
    assert s3.keys("models") == ["models/tiny/1/model.keras", "models/tiny/2/model.keras"]
    with pytest.raises(VersionExistsError, match="version 2 of model 'tiny' already exists"):
        publish_version(store, "tiny", model, version=2)
    pulled = pull_model_version(store, "tiny", "latest", tmp_path / "work")
    assert (pulled.version, pulled.digest) == ("2", two.digest)


def test_a_tflite_case_measured_on_one_host_is_archived_with_its_model_on_another(db_url, tmp_path, s3):
    """A tflite case measured on A and parsed, compared and archived on B: the runner names its ``.tflite`` file
    relative to its out dir, the measuring stage resolves it into the run state (``ProfiledRun.tflite_path``),
    B's archive downloads it from the scratch space and keeps it in the S3 archive as ``tflite/model.tflite``."""
    model = fake_runner.write_model(tmp_path / "src" / "model.keras")
    s3.fs().put_file(str(model), f"{s3.bucket}/models/tiny/1/model.keras")
    a, b = _host(tmp_path, "measuring-host", db_url, s3), _host(tmp_path, "default-host", db_url, s3)
    case = Case(model="tiny", version="1", mode="tflite", quantization="dynamic", **SMALL)
    ctx = RunContext(dag_id="d", dag_run_id="lite", trigger="manual", case=case)
    state = pipeline.measure_case(pipeline.run_stage(RunState(ctx=ctx), "pull-model-version", b), a, retry_left=False)
    assert state.run is not None and state.run.tflite_path is not None
    assert json.loads(s3.fs().cat_file(f"{s3.bucket}/scratch/{ctx.slug}/run/result.json"))["tflite"]["tflite_path"] == (
        "model.tflite"
    )
    lite = s3.fs().cat_file(f"{s3.bucket}/scratch/{ctx.slug}/run/model.tflite")
    assert _local_files(a) == []  # A kept nothing: B can only get the model from the scratch space
    for stage in ("parse", "baseline-compare", "archive"):
        state = pipeline.run_stage(RunState.model_validate(json.loads(json.dumps(state.to_xcom()))), stage, b)
    assert state.archived is not None and state.archived.archive_uri.startswith(s3.uri("archive"))
    kept = state.archived.archive_uri.removeprefix("s3://") + "/tflite/model.tflite"
    assert s3.fs().cat_file(kept) == lite and lite.startswith(b"TFL3")
    assert [(r.run_id, r.status) for r in run_locations(db_url)] == [(state.archived.run_id, "success")]
    assert s3.keys("scratch") == [] and _local_files(b) == []


def test_ingest_into_an_s3_archive(db_url, tmp_path, s3, monkeypatch):
    """``perfwatch ingest`` with ``PERFWATCH_ARCHIVE`` on ``s3://``: the job's xplane lands in the S3 archive under
    the run's directory (TensorBoard's layout) and the stored run, an external one, names that directory. The
    committed XSpace has 3 timed steps, below ingest's floor of 5, so its steps are counted twice here (no
    TensorFlow; the floor itself is tested in tests/integration/test_ingest.py)."""
    from tasks.services import ingest

    real = ingest.step_times
    monkeypatch.setattr(
        ingest, "step_times", lambda p, where: real({**p, "step_breakdown": p["step_breakdown"] * 2}, where)
    )

    logdir = tmp_path / "job"
    xplane = logdir / "plugins" / "profile" / "2026_01_01_00_00_00" / "worker.xplane.pb"
    xplane.parent.mkdir(parents=True)
    xplane.write_bytes(fake_runner.XPLANE.read_bytes())  # a real XSpace of 3 training steps
    st = _host(tmp_path, "laptop", db_url, s3)
    rec, _ = ingest.ingest_profile(logdir, "tiny", "7", batch_size=4, settings=st)
    assert rec.archive_uri.startswith(s3.uri("archive", "tiny") + "/")
    kept = rec.archive_uri.removeprefix("s3://") + "/plugins/profile/2026_01_01_00_00_00/worker.xplane.pb"
    assert s3.fs().cat_file(kept) == xplane.read_bytes()
    assert not [k for k in s3.keys("archive") if k.endswith(".partial") or "/.partial" in k]  # no staging left
    (loc,) = run_locations(db_url)
    assert (loc.run_id, loc.status, loc.archive_uri) == (rec.run_id, "success", rec.archive_uri)
