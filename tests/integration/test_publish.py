"""``perfwatch publish``: a model version copied into the store atomically, its Asset event sent to Airflow,
and the release cases the DAG makes of the event. The end-to-end test runs a real Airflow API server."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tasks.modelstore import resolve_version
from tasks.services import publish
from tasks.stages.pull import pull_model_version
from tests.helpers import ROOT as ROOT
from tests.helpers.airflow import DAG_PYTHONPATH, FakeAirflowAssets

BIN = Path(sys.executable).parent


def keras_file(path: Path, payload: bytes = b"weights") -> Path:
    """A stand-in .keras file: a zip archive (what the store and pull check; no TensorFlow needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", "{}")
        z.writestr("model.weights.h5", payload)
    return path


def saved_model_dir(path: Path) -> Path:
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"pb")
    (path / "variables" / "variables.index").write_bytes(b"index")
    (path / "variables" / "variables.data-00000-of-00001").write_bytes(b"data" * 100)
    return path


def test_versions_are_numbered_on_and_never_overwritten(tmp_path):
    store = tmp_path / "models"
    src = keras_file(tmp_path / "src" / "net.keras")
    first = publish.publish_version(str(store), "net", src)
    assert (first.version, first.format) == ("1", "keras")
    assert (store / "net" / "1" / "net.keras").read_bytes() == src.read_bytes()
    assert publish.publish_version(str(store), "net", src).version == "2"
    assert publish.publish_version(str(store), "net", src, version=7).version == "7"
    assert publish.publish_version(str(store), "net", src).version == "8"
    (store / "net" / "0009").mkdir()  # TF Serving reads 0009 as version 9
    with pytest.raises(publish.VersionExistsError, match=r"version 9 of model 'net' already exists .*0009.*next: 10"):
        publish.publish_version(str(store), "net", src, version=9)
    with pytest.raises(publish.VersionExistsError, match="version 7"):
        publish.publish_version(str(store), "net", src, version=7)
    assert sorted(p.name for p in (store / "net").iterdir()) == ["0009", "1", "2", "7", "8"]  # no temp left


def test_saved_model_directory_and_the_digest_a_run_records(tmp_path):
    store = tmp_path / "models"
    pub = publish.publish_version(str(store), "enc", saved_model_dir(tmp_path / "export"))
    assert pub.format == "saved_model" and pub.size_bytes == 2 + 5 + 400
    pulled = pull_model_version(str(store), "enc", "latest", tmp_path / "work")
    assert (pulled.version, pulled.digest, pulled.format) == ("1", pub.digest, "saved_model")
    assert pub.event_extra() == {
        "model": "enc",
        "version": "1",
        "digest": pub.digest,
        "source": str(tmp_path / "export"),
        "format": "saved_model",
    }


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("nothing.keras", None, "does not exist"),
        ("x.h5", b"h5", "expected a Keras .keras file"),
        ("x.keras", b"not a zip", "expected a Keras .keras file"),
        ("empty", "dir", "neither a \\*.keras file nor a SavedModel"),
    ],
)
def test_what_is_not_a_model_is_refused_and_nothing_is_written(tmp_path, name, content, match):
    store, src = tmp_path / "models", tmp_path / name
    if content == "dir":
        src.mkdir()
    elif content is not None:
        src.write_bytes(content)
    with pytest.raises((FileNotFoundError, ValueError), match=match):
        publish.publish_version(str(store), "net", src)
    assert not (store / "net").exists() or not any((store / "net").iterdir())


def test_a_copy_that_fails_halfway_leaves_no_version(tmp_path, monkeypatch):
    """The copy goes to a hidden temp dir renamed into place: a failure (disk full, here the second file)
    leaves the store as it was, and ``latest`` never sees a half-copied version."""
    store = tmp_path / "models"
    publish.publish_version(str(store), "enc", saved_model_dir(tmp_path / "v1"))
    real_copy, calls = shutil.copy2, []

    def failing_copy(src, dst, **kw):
        calls.append(src)
        if len(calls) == 2:
            assert resolve_version(str(store), "enc", "latest") == 1  # mid-copy: still version 1
            raise OSError(28, "No space left on device")
        return real_copy(src, dst, **kw)

    monkeypatch.setattr(shutil, "copy2", failing_copy)
    with pytest.raises(OSError, match="No space left"):
        publish.publish_version(str(store), "enc", saved_model_dir(tmp_path / "v2"))
    assert sorted(p.name for p in (store / "enc").iterdir()) == ["1"]
    assert resolve_version(str(store), "enc", "latest") == 1


def test_an_object_store_gets_the_marker_file_last(tmp_path, monkeypatch):
    """No rename on an object store: the files go straight to <store>/<model>/<version>/ with saved_model.pb
    (what ``latest`` and ``pull`` need) uploaded after every other file."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    order: list[str] = []
    real_put = MemoryFileSystem.put_file

    def put_file(self, lpath, rpath, *a, **kw):
        order.append(rpath.rsplit("/3/", 1)[1])
        return real_put(self, lpath, rpath, *a, **kw)

    monkeypatch.setattr(MemoryFileSystem, "put_file", put_file)
    store = "memory://pw-publish-test"
    try:
        pub = publish.publish_version(store, "enc", saved_model_dir(tmp_path / "export"), version=3)
        assert order[-1] == "saved_model.pb" and len(order) == 3
        assert pub.path == f"{store}/enc/3"
        assert pull_model_version(store, "enc", "latest", tmp_path / "work").digest == pub.digest
    finally:
        fsspec.filesystem("memory").rm("/pw-publish-test", recursive=True)


def test_asset_names_and_release_requests():
    assert publish.model_asset("resnet") == ("perfwatch://models/resnet", "perfwatch-model-resnet")
    uri, _ = publish.model_asset("модель v2")
    assert uri == "perfwatch://models/%D0%BC%D0%BE%D0%B4%D0%B5%D0%BB%D1%8C%20v2" and uri.isascii()
    assert publish.model_of_asset_uri(uri) == "модель v2"
    with pytest.raises(ValueError, match="path separator"):
        publish.model_asset("a/b")
    events = [
        ("perfwatch://models/resnet", {"model": "resnet", "version": "3", "from_rest_api": True}),
        ("perfwatch://models/resnet", {"model": "resnet", "version": "3"}),  # the same release twice
        ("perfwatch://models/bert", {}),
    ]  # made by hand in Airflow's UI: the Asset's model, latest
    assert publish.release_requests(events) == [("resnet", "3"), ("bert", "latest")]
    with pytest.raises(ValueError, match="integer version or 'latest'"):
        publish.release_requests([("perfwatch://models/resnet", {"version": "v3"})])
    with pytest.raises(ValueError, match="expected a model"):
        publish.release_requests([("s3://bucket/x", {})])


def test_release_cases_are_the_config_cases_of_the_published_version(home, tmp_path, monkeypatch):
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(
        "defaults: {measured_steps: 40}\nmodels:\n  - {model: resnet, batch_size: 8}\n"
        "  - {model: resnet, batch_size: 32}\n  - {model: bert}\n"
    )
    monkeypatch.setenv("PERFWATCH_CONFIG", str(cfg))
    bundles = publish.release_cases(
        "perfwatch_profile",
        "asset_triggered__x",
        [
            ("perfwatch://models/resnet", {"model": "resnet", "version": "4"}),
            ("perfwatch://models/other", {"model": "other", "version": "1"}),
        ],
    )
    got = [
        (
            b["ctx"]["trigger"],
            b["ctx"]["case"]["model"],
            b["ctx"]["case"]["version"],
            b["ctx"]["case"]["batch_size"],
            b["ctx"]["case"]["measured_steps"],
        )
        for b in bundles
    ]
    assert got == [
        ("release", "resnet", "4", 8, 40),
        ("release", "resnet", "4", 32, 40),
        ("release", "other", "1", 16, 320),
    ]  # outside the config: the DAG's defaults
    assert all(b["ctx"]["dag_run_id"] == "asset_triggered__x" for b in bundles)


@pytest.fixture
def cli_runner(home, monkeypatch):
    from typer.testing import CliRunner

    from tasks.cli.main import app

    for var in (
        "PERFWATCH_AIRFLOW_API_URL",
        "PERFWATCH_AIRFLOW_TOKEN",
        "PERFWATCH_AIRFLOW_USERNAME",
        "PERFWATCH_AIRFLOW_PASSWORD",
    ):
        monkeypatch.delenv(var, raising=False)
    return lambda *args: CliRunner().invoke(app, [str(a) for a in args])


def test_publish_command_copies_and_emits_the_asset_event(cli_runner, home, tmp_path):
    from airflow.api_fastapi.core_api.datamodels.assets import CreateAssetEventsBody

    fake = FakeAirflowAssets("perfwatch://models/net")
    src = keras_file(tmp_path / "net.keras")
    try:
        r = cli_runner(
            "publish", "net", src, "--airflow-url", fake.url, "--airflow-user", "ci", "--airflow-password", "pw"
        )
        assert r.exit_code == 0, r.output
        assert "published net version 1" in r.output and "Asset event 99 for perfwatch://models/net" in r.output
        token, lookup, dag, event = fake.requests
        assert dag["path"] == "/api/v2/dags/perfwatch_release"  # paused? (then a DAG run instead of the event)
        assert "the release gate of net version 1 is scheduled (DAG perfwatch_release)" in r.output
        assert token["path"] == "/auth/token"
        assert lookup["path"] == "/api/v2/assets?uri_pattern=perfwatch%3A%2F%2Fmodels%2Fnet&limit=100"
        assert lookup["auth"] == event["auth"] == "Bearer jwt-1"
        assert event["path"] == "/api/v2/assets/events" and event["body"]["asset_id"] == 7
        CreateAssetEventsBody.model_validate(event["body"])  # what Airflow's API accepts
        assert event["body"]["extra"]["model"] == "net" and event["body"]["extra"]["version"] == "1"
        assert (home / "models" / "net" / "1" / "net.keras").is_file()

        # the version exists: refused, exit 1, nothing sent
        r = cli_runner("publish", "net", src, "--version", "1", "--airflow-url", fake.url)
        assert r.exit_code == 1 and "already exists" in r.output and len(fake.requests) == 4
        # an Asset Airflow does not know (a model outside the config): copied, exit 2, says how to resend
        r = cli_runner("publish", "other", src, "--airflow-url", fake.url, "--airflow-token", "t")
        assert r.exit_code == 2, r.output
        assert "no Asset perfwatch://models/other" in r.output
        assert "(resend: perfwatch publish other --version 1)" in r.output
        assert (home / "models" / "other" / "1").is_dir()
        r = cli_runner(
            "publish", "net", src, "--version", "1", "--no-copy", "--airflow-url", fake.url, "--airflow-token", "t"
        )
        assert r.exit_code == 0, r.output
        resent = fake.requests[-1]
        assert resent["body"]["extra"]["version"] == "1" and resent["auth"] == "Bearer t"
        # a resend needs no model file (issue 35 item 3): the stored version's digest and format
        r = cli_runner("publish", "net", "--version", "1", "--airflow-url", fake.url, "--airflow-token", "t")
        assert r.exit_code == 0, r.output
        assert fake.requests[-1]["body"]["extra"] == {**resent["body"]["extra"]}
        r = cli_runner("publish", "net", "--airflow-url", fake.url)  # neither a file nor a version
        assert r.exit_code == 1 and "give PATH" in r.output
    finally:
        fake.server.shutdown()
    # without an Airflow API the copy alone is the release
    r = cli_runner("publish", "net", src)
    assert r.exit_code == 0 and "no Asset event sent" in r.output
    assert sorted(p.name for p in (home / "models" / "net").iterdir()) == ["1", "2"]


_RELEASE_RUN = """
import json, sys
from unittest import mock
from sqlalchemy import select
import airflow.models.dagrun as dagrun_module
from airflow.dag_processing.dagbag import DagBag
from airflow.models.asset import AssetEvent

real = dagrun_module.get_or_create_dagrun


def consuming_the_asset_events(**kw):
    # what the scheduler does when an Asset event arrives: the DAG run it creates consumes the event
    # (dag_run.consumed_asset_events, the tasks' triggering_asset_events); dag.test() makes a manual run
    dr = real(**kw)
    dr.consumed_asset_events.extend(kw["session"].scalars(select(AssetEvent)).all())
    kw["session"].commit()
    return dr


with mock.patch.object(dagrun_module, "get_or_create_dagrun", consuming_the_asset_events):
    dr = DagBag(dag_folder=sys.argv[1]).get_dag("perfwatch_release").test()
print(json.dumps({"state": str(dr.state), "run_id": dr.run_id}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 300) -> None:
    import httpx

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"airflow api-server exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            httpx.get(url, timeout=5)
            return
        except httpx.HTTPError:
            time.sleep(2)
    raise AssertionError(f"airflow api-server did not answer {url} in {timeout_s} s: {log.read_text()[-3000:]}")


@pytest.mark.slow
def test_publish_asset_event_runs_the_paired_release_gate(model_store, model_files, home, tmp_path, monkeypatch):
    """publish -> Asset event -> release gate, end to end: a real Airflow API server (``airflow api-server``,
    simple auth manager, JWT from /auth/token) receives ``perfwatch publish``'s event for the model's Asset,
    declared by the DAG as parsed; the DAG run that consumes the stored event (``dag.test()``; the run is made
    as the scheduler makes it, with the event attached, since no scheduler runs here) runs the paired gate of
    exactly the published version against the baseline's, archives the regression, goes red, and its
    notifier POSTs the regression alert to a webhook on a loopback port."""
    from sqlalchemy import select

    from tasks.records import Case, RunContext
    from tasks.stages.pipeline import run_case
    from tasks.store import Run, RunComparison
    from tests.helpers.fakes import Sink

    small = {
        "batch_size": 4,
        "measured_steps": 5,
        "profiled_steps": 1,
        "warmup_max_steps": 10,
        "paired_blocks": 64,
        "paired_block_steps": 1,
        "max_other_cpu_share": 1.0,
        "max_steal_share": 1.0,  # CI's VM shares its host: another guest's steal must not leave the gate undecided
        "warmup_cv_max": 1.0,  # any warm-up is steady: v1 must become the baseline on a shared host (issue 26)
    }
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(f"defaults: {json.dumps(small)}\nmodels:\n  - {{model: tiny}}\n")
    monkeypatch.setenv("PERFWATCH_CONFIG", str(cfg))
    # the baseline: version 1, measured as the nightly run of the config's case measures it
    first = run_case(
        RunContext(
            dag_id="perfwatch_profile",
            dag_run_id="nightly_v1",
            trigger="scheduled",
            case=Case(model="tiny", version="1", **small),
        )
    ).to_xcom()
    assert first["verdict"]["verdict"] == "no-baseline"
    if first["verdict"]["baseline_refused"]:  # a busy shared host (e.g. the hypervisor's steal) refused it
        from tasks.cli.baseline import accept_run  # accepted explicitly, as `perfwatch baseline accept` does
        from tasks.settings import Settings

        accept_run(Settings.from_env().database_url, first["archived"]["run_id"], "test", "the gate's baseline")

    sink = Sink()
    airflow_home = tmp_path / "airflow"
    airflow_home.mkdir()
    (airflow_home / "passwords.json").write_text(json.dumps({"ci": "pw"}))
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": DAG_PYTHONPATH,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "ci:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / "passwords.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": "perfwatch-test-secret",
        "GX_ANALYTICS_ENABLED": "false",
        "AIRFLOW_CONN_PERFWATCH_ALERTS": json.dumps({"conn_type": "http", "host": f"{sink.url}/hook"}),
        "PERFWATCH_UI_URL": "http://airflow.example:8080",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",  # perfwatch_release takes the Asset event
    }
    airflow = str(BIN / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, cwd=ROOT)
    subprocess.run([airflow, "dags", "reserialize"], env=env, check=True, capture_output=True, cwd=ROOT)
    port = _free_port()
    log = tmp_path / "api-server.log"
    with log.open("w") as out:
        api = subprocess.Popen(
            [airflow, "api-server", "--apps", "core", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    signin = ["--airflow-url", f"http://127.0.0.1:{port}", "--airflow-user", "ci", "--airflow-password", "pw"]
    try:
        _wait_for(f"http://127.0.0.1:{port}/api/v2/version", api, log)
        pub = subprocess.run(
            [str(BIN / "perfwatch"), "publish", "tiny", str(model_files["wide"]), *signin],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        # issue 35 item 3: a resend (no model file) while the DAG is paused is a queued DAG run, not a lost event
        subprocess.run([airflow, "dags", "pause", "perfwatch_release"], env=env, check=True, capture_output=True)
        resend = subprocess.run(
            [str(BIN / "perfwatch"), "publish", "tiny", "--version", "3", *signin],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        listed = subprocess.run(
            [airflow, "dags", "list-runs", "perfwatch_release", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        api.terminate()
        api.wait(timeout=60)
    assert pub.returncode == 0, pub.stdout + pub.stderr
    assert "published tiny version 3" in pub.stdout and "Asset event" in pub.stdout
    assert "for perfwatch://models/tiny" in pub.stdout
    assert resend.returncode == 0, resend.stdout + resend.stderr
    assert "the DAG perfwatch_release is paused" in resend.stdout and "runs once the DAG is unpaused" in resend.stdout
    runs = json.loads([line for line in listed.stdout.splitlines() if line.startswith("[{")][-1])
    (queued,) = [r for r in runs if r["run_id"].startswith("release__")]
    assert queued["state"] == "queued" and queued["run_id"].startswith("release__tiny__v3__")

    proc = subprocess.run(
        [sys.executable, "-c", _RELEASE_RUN, str(ROOT / "dags")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dag_run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert dag_run["state"] == "failed"  # a regression turns the DAG run red after archiving
    with session_scope_of(env) as s:
        run = s.scalar(select(Run).where(Run.dag_run_id == dag_run["run_id"]))
        comp = s.scalar(select(RunComparison).where(RunComparison.run_id == run.id))
        assert (run.trigger, run.version_requested, run.case_name, run.status) == (
            "release",
            "3",
            "train-bs4",
            "success",
        )
        assert (comp.verdict, comp.method) == ("regression", "paired-abba")
        assert comp.evidence["paired"]["baseline_version"] == "1"
        run_id = run.id
    alert = next(p["body"] for p in sink.posts if "regression" in p["body"]["text"])
    assert alert["blocks"][0]["text"]["text"] == "perfwatch: perfwatch_release failed (regression)"
    assert f"*tiny* v3 `train-bs4` (run {run_id}): verdict regression: step-time ratio " in alert["text"]
    assert "paired ABBA" in alert["text"]  # the verdict's story (tasks.services.story), as every command tells it
    assert f"<http://airflow.example:8080/perfwatch/runs/{run_id}|run page>" in alert["text"]
    sink.server.shutdown()


def session_scope_of(env: dict[str, str]):
    from tasks.settings import Settings
    from tasks.store import session_scope

    return session_scope(Settings.from_env(env).database_url)
