"""Readable case names: a case with inputs or an input_fn is named by a hash (``train-bs16-in1be8b91f``); its label
(the config's ``label:``, else the input_fn's function name or the inputs) is shown beside that stable name by
``perfwatch runs``, ``gate``, ``history``, the alerts and the Prometheus metrics, never instead of it."""

from __future__ import annotations

import json

import pytest

from tasks.matrix import config_cases
from tasks.records import MAX_LABEL_CHARS, Case, case_label, case_title
from tasks.stages.archive import archive_run
from tests.helpers.builders import make_records

SLOW = "tasks.runner.input_fns:images_slow"


def test_the_label_is_the_configs_else_the_inputs_in_words():
    assert case_label(Case(model="m", input_fn=SLOW)) == "images_slow"
    assert case_label(Case(model="m", inputs={"x": {"shape": [3, 224, 224]}})) == "x:3x224x224"
    ids = {"ids": {"shape": [16], "dtype": "int32", "min": 0, "max": 30522}, "mask": {"min": 0, "max": 2}}
    assert case_label(Case(model="m", inputs=ids)) == "ids:16 int32 [0,30522); mask:[0,2)"
    assert case_label(Case(model="m", mode="infer", signature="serve")) == "signature:serve"
    assert case_label(Case(model="m")) is None  # train-bs16 says it all
    wide = case_label(Case(model="m", inputs={f"input_{i}": {"shape": [224, 224, 3]} for i in range(5)}))
    assert wide is not None and len(wide) == MAX_LABEL_CHARS and wide.endswith("…")
    # the config's label wins, and names the case without changing its identity (history and baseline)
    (plain,) = config_cases({"models": [{"model": "m", "input_fn": SLOW}]}, where="cfg")
    (named,) = config_cases({"models": [{"model": "m", "input_fn": SLOW, "label": "slow images"}]}, where="cfg")
    assert named.name == plain.name and named.name.startswith("train-bs16-in")
    assert (case_label(plain), case_label(named)) == ("images_slow", "slow images")
    assert case_title(named.name, case_label(named)) == f"{named.name} (slow images)"
    assert case_title("train-bs16", None) == "train-bs16"
    # stored params, as a run keeps them (dict, or JSON text through SQLite)
    assert case_label(json.dumps(named.to_xcom())) == "slow images" and case_label(None) is None
    with pytest.raises(ValueError, match="one line"):
        Case(model="m", label="two\nlines")
    with pytest.raises(ValueError, match="at most 48"):
        Case(model="m", label="x" * 49)


def _archive(db_url, tmp_path, name: str, case: Case, *, verdict: str = "no-baseline") -> int:
    ctx, pulled, env, warm, run, parse, comp = make_records(tmp_path, dag_run_id=name, verdict=verdict, model="cnn")
    ctx = ctx.model_copy(update={"case": case})
    return archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id


def test_every_listing_shows_the_label_beside_the_stable_name(db_url, tmp_path, cli):
    from plugins.perfwatch.metrics import StoreCollector
    from tasks.services import alerts
    from tasks.store import queries

    slow = Case(model="cnn", measured_steps=10, input_fn=SLOW)
    plain = Case(model="cnn", measured_steps=10, batch_size=8)
    _archive(db_url, tmp_path, "a", slow)
    _archive(db_url, tmp_path, "b", plain)
    runs = json.loads(cli("runs", "--format", "json").output)
    assert [(r["case"], r["case_label"]) for r in runs] == [(slow.name, "images_slow"), ("train-bs8", None)]
    table = cli("runs").output
    assert slow.name in table and "images_slow" in table

    gate = cli("gate", "cnn", "1")
    assert f"{slow.name} (images_slow): run" in gate.output and "train-bs8: run" in gate.output
    history = queries.history("cnn", db_url=db_url)
    assert dict(zip(history["case_name"], history["case_label"], strict=True)) == {
        slow.name: "images_slow",
        "train-bs8": None,
    }
    (note,) = alerts.dag_run_notes(db_url, "d", "a")
    assert f"`{slow.name}` (images_slow) (run" in alerts.note_text(note, None)

    samples = [s for f in StoreCollector(db_url).collect() if f.name == "perfwatch_runs" for s in f.samples]
    assert {(s.labels["case"], s.labels["case_label"]) for s in samples} == {
        (slow.name, "images_slow"),
        ("train-bs8", "train-bs8"),  # no label: its name, so a legend can always use case_label
    }

    # a label given later in the config names the case's whole history (history is keyed by the stable name)
    _archive(db_url, tmp_path, "c", slow.model_copy(update={"label": "slow image pipeline"}))
    history = queries.history("cnn", slow.name, db_url=db_url)
    assert list(history["case_label"]) == ["slow image pipeline"] * 2 and set(history["case_name"]) == {slow.name}
