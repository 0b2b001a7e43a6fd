"""Alerts: the Airflow notifier POSTs perfwatch's Slack-compatible message to a real HTTP sink on a loopback
port (a regression, an env-changed verdict, a failed stage, missing data), configured by an Airflow
connection; and the missing-data check against the store."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks.services import alerts
from tasks.settings import Settings
from tasks.store import RunComparison, session_scope
from tests.helpers import ROOT as ROOT
from tests.helpers.airflow import DAG_PYTHONPATH
from tests.helpers.builders import T0, add_failure, add_run
from tests.helpers.fakes import Sink

ATTRIBUTION = {
    "available": True,
    "grew_most": [
        {
            "op_name": "conv",
            "delta_us_per_step": 120.0,
            "relative_change": 0.4,
            "share_of_change": 0.35,
            "status": "grew",
        }
    ],
}


@pytest.fixture
def sink(monkeypatch):
    s = Sink()
    monkeypatch.setenv(
        "AIRFLOW_CONN_PERFWATCH_ALERTS",
        json.dumps({"conn_type": "http", "host": f"{s.url}/hooks/T1/B2", "password": "s3cret"}),
    )
    monkeypatch.setenv("PERFWATCH_UI_URL", "http://airflow.example:8080")
    monkeypatch.delenv("PERFWATCH_ALERT_CONN_ID", raising=False)
    monkeypatch.delenv("PERFWATCH_DB_CONN_ID", raising=False)
    yield s
    s.server.shutdown()


@pytest.fixture
def notifier_module():
    """The plugin's notifier module (``plugins/perfwatch/notifier.py``; the DAGs import it as ``perfwatch.notifier``,
    the plugins folder on sys.path)."""
    return importlib.import_module("plugins.perfwatch.notifier")


@pytest.fixture
def hooks_module():
    """The plugin's hooks module (``plugins/perfwatch/hooks.py``)."""
    return importlib.import_module("plugins.perfwatch.hooks")


def set_evidence(db_url: str, run_id: int, **evidence) -> None:
    with session_scope(db_url) as s:
        c = s.query(RunComparison).filter_by(run_id=run_id).one()
        c.evidence = {**c.evidence, **evidence}


def dag_context(run_id: str, **extra):
    """What Airflow hands a DAG-level callback (``dag``, ``run_id``, ``reason``)."""
    from airflow.sdk import DAG

    return {"dag": DAG("d", schedule=None), "run_id": run_id, **extra}


def test_a_regression_reaches_the_webhook(db_url, tmp_path, sink, notifier_module, monkeypatch):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    base = add_run(db_url, tmp_path, "night1", verdict="no-baseline")
    reg = add_run(db_url, tmp_path, "night2", version="2", verdict="regression", median=13.0, baseline=base, ratio=1.3)
    set_evidence(db_url, reg, attribution=ATTRIBUTION)
    notifier_module.PerfwatchNotifier()(dag_context("night2", reason="task_failure"))
    (post,) = sink.posts
    assert post["path"] == "/hooks/T1/B2" and post["auth"] == "Bearer s3cret"
    body = post["body"]
    assert body["blocks"][0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "perfwatch: d failed (regression)"},
    }
    (section,) = [b["text"]["text"] for b in body["blocks"] if b["type"] == "section"]
    assert section.startswith(
        f"*m* v2 `{'train-bs16'}` (run {reg}): verdict regression: "
        f"step-time ratio 1.300 [1.200, 1.400]; no comparison (nothing to compare with); baseline run {base} (v1); "
        "top ops: conv (+120.0 µs/step, +40%, 35% of the change)"
    )
    assert section.endswith(f"<http://airflow.example:8080/perfwatch/runs/{reg}|run page>")
    assert body["text"].startswith("perfwatch: d failed (regression)\n*m* v2")
    # the DAG run's first night (no-baseline) is not news
    assert notifier_module.PerfwatchNotifier(only_noteworthy=True)(dag_context("night1")) is None
    assert len(sink.posts) == 1


def test_env_changed_on_success_and_a_failed_stage(db_url, tmp_path, sink, notifier_module, monkeypatch):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    run = add_run(db_url, tmp_path, "n3", verdict="env-changed", fp="e")
    from tasks.records import env_change_reason

    changes = [{"field": "tf.version", "old": "2.20", "new": "2.21"}]
    judgement = (  # what judge_change writes after the fields: the verdict part of the reason
        "env-changed: step-time ratio 1.041 [0.902, 1.187] across the change (cross-environment); not judged, so "
        "not made the case's baseline"
    )
    set_evidence(db_url, run, env_changes=changes, reason=env_change_reason(changes, judgement))
    notifier_module.PerfwatchNotifier(only_noteworthy=True)(dag_context("n3", reason="success"))
    failed = add_failure(db_url, tmp_path, "n4", stage="warm-up")
    notifier_module.PerfwatchNotifier()(dag_context("n4", reason="task_failure"))
    env_alert, fail_alert = (p["body"] for p in sink.posts)
    assert env_alert["blocks"][0]["text"]["text"] == "perfwatch: d finished (env-changed)"
    # the fields, then what the judgement said (issue 36 item 3), the fields not twice
    assert f"verdict *env-changed*: tf.version '2.20' → '2.21'; {judgement}" in env_alert["text"]
    assert "tf.version 2.20 -> 2.21" not in env_alert["text"]
    assert fail_alert["blocks"][0]["text"]["text"] == "perfwatch: d failed (failed stage)"
    assert (
        f"(run {failed}): failed at stage *warm-up*: RunnerError: training step failed\n"
        f"<http://airflow.example:8080/perfwatch/runs/{failed}|run page>"
    ) in fail_alert["text"]


def test_a_busy_host_inconclusive_verdict_is_shown_when_it_failed_the_run(
    db_url, tmp_path, sink, notifier_module, monkeypatch
):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    base = add_run(db_url, tmp_path, "b1", verdict="no-baseline")
    run = add_run(db_url, tmp_path, "b2", verdict="inconclusive", baseline=base, ratio=1.02)
    set_evidence(db_url, run, noise={"busy": True, "reason": "host busy: other processes took 58% of the CPU"})
    assert notifier_module.PerfwatchNotifier(only_noteworthy=True)(dag_context("b2")) is None  # not news alone
    ti = SimpleNamespace(task_id="archive", log_url="http://x/log")
    notifier_module.PerfwatchNotifier()(dag_context("b2", reason="task_failure", ti=ti))
    (post,) = sink.posts
    assert post["body"]["blocks"][0]["text"]["text"] == "perfwatch: d failed (inconclusive)"
    assert (
        "verdict inconclusive: step-time ratio 1.020 [0.920, 1.120]; no comparison (nothing to compare with); "
        f"baseline run {base} (v1); why: host busy: other processes took 58% of the CPU; no op attribution"
    ) in post["body"]["text"]
    assert "task *archive*" not in post["body"]["text"]  # the stored run explains the failure


def test_a_task_failure_without_a_stored_run_still_alerts(db_url, sink, notifier_module, monkeypatch):
    """A failure before any run was stored (the plan task: a broken config) names the task, its error and log."""
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    ti = SimpleNamespace(task_id="plan", log_url="http://airflow.example:8080/dags/d/runs/x/tasks/plan")
    ctx = dag_context("x", ti=ti, exception=ValueError("config.yaml: models[0] is invalid: batch_size"))
    notifier_module.PerfwatchNotifier()(ctx)
    body = sink.posts[0]["body"]
    assert body["blocks"][1]["text"]["text"] == (
        "task *plan* failed: ValueError: config.yaml: models[0] is invalid: batch_size\n"
        "<http://airflow.example:8080/dags/d/runs/x/tasks/plan|task log>"
    )


def test_a_dag_test_callback_context_with_a_serialized_dag(db_url, sink, notifier_module, monkeypatch):
    """``airflow dags test`` hands DAG callbacks a SerializedDAG, which has no template env
    (apache/airflow#64649): the notifier still renders and sends."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    serialized = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(DAG("d", schedule=None)))
    assert not hasattr(serialized, "get_template_env")
    notifier_module.PerfwatchNotifier()({"dag": serialized, "run_id": "r", "reason": "task_failure"})
    said = sink.posts[0]["body"]["blocks"][1]["text"]["text"]
    assert said == "the DAG run failed: task failure; the task's log says why"


def test_delivery_errors_and_a_missing_connection(db_url, sink, notifier_module, monkeypatch, caplog):
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", db_url)
    sink.status = 500
    with pytest.raises(alerts.AlertDeliveryError, match=r"alert webhook http://127\.0\.0\.1:\d+ answered HTTP 500"):
        notifier_module.PerfwatchNotifier()(dag_context("none", reason="task_failure"))
    with pytest.raises(alerts.AlertDeliveryError, match="could not be reached"):
        alerts.post_webhook("http://127.0.0.1:9/hook", {"text": "x"}, timeout_s=2)
    monkeypatch.setenv("PERFWATCH_ALERT_CONN_ID", "nowhere")
    with caplog.at_level(logging.WARNING):
        notifier_module.PerfwatchNotifier()(dag_context("none", reason="task_failure"))
    assert "perfwatch alert NOT sent: no Airflow connection 'nowhere'" in caplog.text
    assert "perfwatch: d failed" in caplog.text


@pytest.mark.parametrize(
    "conn, url, headers",
    [
        ({"host": "https://hooks.slack.com/services/T/B/X"}, "https://hooks.slack.com/services/T/B/X", {}),
        (
            {"host": "alerts.internal", "port": 8443, "extra": {"endpoint": "/v1/hook", "headers": {"X-Team": "ml"}}},
            "https://alerts.internal:8443/v1/hook",
            {"X-Team": "ml"},
        ),
        (
            {"host": "127.0.0.1", "port": 9000, "schema": "http", "password": "tok"},
            "http://127.0.0.1:9000",
            {"Authorization": "Bearer tok"},
        ),
        ({"host": "127.0.0.1", "port": 9000, "schema": "hook/path"}, "https://127.0.0.1:9000/hook/path", {}),
    ],
)
def test_webhook_target_from_a_connection(hooks_module, conn, url, headers, monkeypatch):
    from airflow.sdk import Connection

    c = Connection(
        conn_id="perfwatch_alerts",
        conn_type="http",
        host=conn["host"],
        port=conn.get("port"),
        schema=conn.get("schema"),
        password=conn.get("password"),
        extra=json.dumps(conn.get("extra", {})),
    )
    assert hooks_module.webhook_target(c) == (url, headers)
    # the hook reads the connection named by PERFWATCH_ALERT_CONN_ID (else perfwatch_alerts) the same way
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_HOOK", c.as_json())
    monkeypatch.setenv("PERFWATCH_ALERT_CONN_ID", "team_hook")
    assert hooks_module.PerfwatchWebhookHook().get_conn() == (url, headers)
    monkeypatch.delenv("PERFWATCH_ALERT_CONN_ID")
    monkeypatch.setenv("AIRFLOW_CONN_PERFWATCH_ALERTS", c.as_json())
    assert hooks_module.PerfwatchWebhookHook().get_conn() == (url, headers)


def test_the_store_hook_reads_the_connection_named_by_perfwatch_db_conn_id(hooks_module, tmp_path, monkeypatch):
    """``PerfwatchStoreHook`` turns a connection's URI into the store's SQLAlchemy URL; ``store_url`` (what every DAG
    task and the notifier call) uses the connection ``PERFWATCH_DB_CONN_ID`` names, else ``PERFWATCH_DATABASE_URL``,
    and sets nothing in the environment."""
    monkeypatch.setenv("AIRFLOW_CONN_PW_STORE", "postgres://pw:s3cret@db.internal:5432/perfwatch")
    hook = hooks_module.PerfwatchStoreHook("pw_store")
    assert hook.get_url() == "postgresql+psycopg://pw:s3cret@db.internal:5432/perfwatch"
    assert (hook.conn_name_attr, hook.default_conn_name) == ("perfwatch_conn_id", "perfwatch_db")
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'settings.db'}")
    monkeypatch.delenv("PERFWATCH_DB_CONN_ID", raising=False)
    assert hooks_module.store_url() == f"sqlite:///{tmp_path / 'settings.db'}"
    monkeypatch.setenv("PERFWATCH_DB_CONN_ID", "pw_store")
    before = dict(os.environ)
    assert hooks_module.store_url() == "postgresql+psycopg://pw:s3cret@db.internal:5432/perfwatch"
    assert dict(os.environ) == before


def test_the_notifier_reads_the_store_of_the_connection_and_leaves_the_environment_alone(
    db_url, tmp_path, sink, notifier_module, monkeypatch
):
    """With ``PERFWATCH_DB_CONN_ID`` set, the alert is built from the store of that Airflow connection, not the
    settings' (``PERFWATCH_DATABASE_URL`` names an empty one here), and no callback path writes ``os.environ``
    (before, ``store_url_from_connection`` exported the connection as ``PERFWATCH_DATABASE_URL``)."""
    base = add_run(db_url, tmp_path, "c1", verdict="no-baseline")
    reg = add_run(db_url, tmp_path, "c2", version="2", verdict="regression", median=13.0, baseline=base, ratio=1.3)
    monkeypatch.setenv("AIRFLOW_CONN_PERFWATCH_STORE", db_url)
    monkeypatch.setenv("PERFWATCH_DB_CONN_ID", "perfwatch_store")
    monkeypatch.setenv("PERFWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'not-the-store.db'}")
    before = dict(os.environ)
    notifier = notifier_module.PerfwatchNotifier()
    assert f"(run {reg}): verdict regression" in notifier.payload(dag_context("c2", reason="task_failure"))["text"]
    notifier(dag_context("c2", reason="task_failure"))
    assert dict(os.environ) == before
    (post,) = sink.posts
    assert f"(run {reg}): verdict regression" in post["body"]["text"]
    assert not (tmp_path / "not-the-store.db").exists()


def test_missing_data_names_each_model_without_a_recent_success(db_url, tmp_path, monkeypatch):
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text("models:\n  - {model: m}\n  - {model: other}\n  - {model: never}\n")
    add_run(db_url, tmp_path, "a", model="m", day=0)
    add_run(db_url, tmp_path, "b", model="other", day=2)
    add_failure(db_url, tmp_path, "c", model="never", day=2)  # a failed run is no data
    settings = Settings.from_env({"PERFWATCH_DATABASE_URL": db_url, "PERFWATCH_CONFIG": str(cfg)})
    with session_scope(db_url) as s:  # finished_at is when the run was archived: pin it to its day
        from tasks.store import Run

        for r in s.query(Run):
            r.finished_at = r.started_at + dt.timedelta(minutes=5)
    now = T0 + dt.timedelta(days=2, hours=12)
    with pytest.raises(alerts.MissingData) as e:
        alerts.check_missing_data(settings, window_h=36, now=now)
    assert str(e.value).startswith(
        "no successful perfwatch run in the last 36 h for: m (last success "
        "2026-03-01 02:05 UTC), never (never succeeded);"
    )
    assert [m.model for m in e.value.missing] == ["m", "never"]
    assert alerts.missing_models(settings, 24 * 30, now) == (
        ["m", "never", "other"],
        [alerts.MissingModel("never", None)],
    )
    cfg.write_text("models:\n  - {model: m}\n  - {model: other}\n")
    assert alerts.check_missing_data(settings, window_h=72, now=now) == [
        {"model": "m", "window_h": 72},
        {"model": "other", "window_h": 72},
    ]


def test_missing_data_window_setting(monkeypatch):
    assert alerts.missing_window_h({}) == 36
    assert alerts.missing_window_h({"PERFWATCH_MISSING_DATA_HOURS": "48"}) == 48
    with pytest.raises(ValueError, match=r"PERFWATCH_MISSING_DATA_HOURS='-1': expected a window in hours"):
        alerts.missing_window_h({"PERFWATCH_MISSING_DATA_HOURS": "-1"})


_WATCH_RUN = """
import json, os, sys
from airflow.dag_processing.dagbag import DagBag
before = dict(os.environ)
dr = DagBag(dag_folder=sys.argv[1]).get_dag("perfwatch_watch").test()
changed = sorted(k for k in {*before, *os.environ} if k.startswith("PERFWATCH_") and before.get(k) != os.environ.get(k))
print(json.dumps({"state": str(dr.state), "env_changed": changed}))
"""


@pytest.mark.slow  # migrates an Airflow metadata DB and runs the watch DAG (dag.test())
def test_the_watch_dag_alerts_on_missing_data(home, tmp_path, sink):
    """The hourly perfwatch_watch DAG (``dag.test()``, a real Airflow task run) fails on a model without data,
    and its notifier POSTs the missing-data alert to the webhook. Its task reads the store from the Airflow
    connection ``PERFWATCH_DB_CONN_ID`` names (``PerfwatchStoreHook``; it migrates that store, not the settings'),
    and nothing sets perfwatch's variables in the process's environment (the task and the callbacks run in this
    process under ``dag.test()``; Airflow exports its own ``AIRFLOW_CTX_*``)."""
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text("models:\n  - {model: demo_mobilenet}\n")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PERFWATCH_CONFIG": str(cfg),
        "GX_ANALYTICS_ENABLED": "false",
        "PYTHONPATH": DAG_PYTHONPATH,
        "AIRFLOW_CONN_PERFWATCH_STORE": f"sqlite:///{tmp_path / 'connection.db'}",
        "PERFWATCH_DB_CONN_ID": "perfwatch_store",
        "PERFWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'settings.db'}",
    }
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=env,
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    proc = subprocess.run(
        [sys.executable, "-c", _WATCH_RUN, str(ROOT / "dags")],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["state"] == "failed"
    assert result["env_changed"] == []
    assert (tmp_path / "connection.db").is_file() and not (tmp_path / "settings.db").exists()
    (post,) = sink.posts
    assert post["body"]["blocks"][0]["text"]["text"] == "perfwatch: missing data"
    assert "no successful perfwatch run in the last 36 h for: demo_mobilenet (never succeeded)" in post["body"]["text"]


def test_a_run_that_failed_before_its_version_resolved_says_version_latest():
    from tasks.services.alerts import RunNote, note_text

    note = RunNote(
        run_id=9,
        model="zoo_cnn",
        version="latest",
        case_name="infer-bs4-gpu",
        status="failed",
        verdict=None,
        method=None,
        ratio=None,
        ci_low=None,
        ci_high=None,
        failed_stage="env-fingerprint",
        error="DeviceMissing: case zoo_cnn infer-bs4-gpu asks for device gpu; this host has none visible",
        evidence={},
    )
    text = note_text(note, None)
    assert text.startswith("*zoo_cnn* version latest `infer-bs4-gpu` (run 9): failed at stage *env-fingerprint*")
    assert note_text(RunNote(**{**note.__dict__, "version": "3"}), None).startswith("*zoo_cnn* v3 ")
