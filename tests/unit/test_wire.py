"""Non-finite numbers crossing JSON (``tasks.wire``): one rule at every boundary a record crosses.

Each boundary is a round trip over {nan, inf, -inf, 0.0, 1e-300}: the text that crosses is strict JSON
(``json.loads`` refusing the NaN/Infinity tokens, as PostgreSQL's ``json`` and Airflow's HTTP API do), and
the value read back is the float written, bit for bit (``repr``), in a typed field and in an untyped one.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tasks import wire
from tasks.records import Case, CompareRecord, RunContext, RunState, Verdict
from tasks.runner import protocol
from tasks.store.engine import get_engine
from tasks.store.queries import _json_object

VALUES = [math.nan, math.inf, -math.inf, 0.0, 1e-300]


def strict(text: str) -> Any:
    """``text`` as JSON, refusing what JSON (RFC 8259) has not: the NaN, Infinity and -Infinity tokens."""

    def refuse(token: str) -> Any:
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def same(got: Any, want: float) -> bool:
    return isinstance(got, float) and repr(got) == repr(want)


def compare_record(v: float, reason: str = "why") -> CompareRecord:
    return CompareRecord(
        verdict=Verdict.PASS,
        method="paired-abba",
        baseline_run_ids=[1],
        ratio=v,
        ci_low=None,
        ci_high=None,
        median_limit_ms=None,
        gx_success=True,
        evidence={"df": v, "rounds": [{"t": v}]},
        reason=reason,
    )


@pytest.mark.parametrize("v", VALUES, ids=repr)
def test_a_stage_record_crosses_xcom_as_strict_json_and_reads_back(v):
    sent = json.dumps(compare_record(v).to_xcom())  # what Airflow's XCom and its HTTP API carry
    back = CompareRecord.model_validate(strict(sent))
    assert same(back.ratio, v) and same(back.evidence["df"], v) and same(back.evidence["rounds"][0]["t"], v)


@pytest.mark.parametrize("v", VALUES, ids=repr)
def test_the_run_state_crosses_xcom_as_strict_json_and_reads_back(v):
    state = RunState(ctx=RunContext(dag_id="d", dag_run_id="r", case=Case(model="m")), verdict=compare_record(v))
    back = RunState.model_validate(strict(json.dumps(state.to_xcom())))
    assert back.verdict is not None and same(back.verdict.ratio, v) and same(back.verdict.evidence["df"], v)


def test_a_typed_text_field_keeps_the_words_of_a_non_finite_number():
    for text in wire.NONFINITE:
        assert CompareRecord.model_validate(compare_record(1.0, reason=text).to_xcom()).reason == text


@pytest.mark.parametrize("v", VALUES, ids=repr)
def test_a_runner_result_file_is_strict_json_and_reads_back(tmp_path, v):
    path = tmp_path / "result.json"
    protocol.write_result(path, protocol.ProbeResult(data={"x": v, "xs": [v]}))
    strict(path.read_text())
    back = protocol.read_result(path, protocol.ProbeResult)
    assert same(back.data["x"], v) and same(back.data["xs"][0], v)
    strict(json.dumps(back.as_dict()))  # what the store is handed


@pytest.mark.parametrize("v", VALUES, ids=repr)
def test_a_runner_event_line_is_strict_json_and_reads_back(v):
    line = protocol.event_line(
        protocol.RoundEvent(round=0, pairs=1, host_load={"load": v}, wall_s=v, final=False, blocks=[])
    )
    strict(line.removeprefix(protocol.EVENT_PREFIX))
    back = protocol.parse_event(line)
    assert isinstance(back, protocol.RoundEvent) and same(back.wall_s, v) and same(back.host_load["load"], v)


def store_urls(tmp_path: Path) -> list[str]:
    urls = [f"sqlite:///{tmp_path / 'wire.db'}"]
    if pg := os.environ.get("PERFWATCH_TEST_DATABASE_URL"):
        urls.append(pg)
    return urls


@pytest.mark.parametrize("v", VALUES, ids=repr)
def test_a_json_column_of_the_store_holds_strict_json_and_reads_back(tmp_path, v):
    for url in store_urls(tmp_path):
        engine = get_engine(url)
        meta = sa.MetaData()
        table = sa.Table("wire_probe", meta, sa.Column("id", sa.Integer, primary_key=True), sa.Column("data", sa.JSON))
        meta.drop_all(engine)
        meta.create_all(engine)
        try:
            with engine.begin() as c:
                c.execute(table.insert().values(id=1, data={"df": v, "xs": [v]}))
            with engine.connect() as c:
                typed = c.execute(sa.select(table.c.data)).scalar_one()
                raw = c.execute(sa.text("SELECT data FROM wire_probe")).scalar_one()  # as a named query reads it
                stored = c.execute(sa.text("SELECT CAST(data AS TEXT) FROM wire_probe")).scalar_one()
            strict(stored)
            assert same(typed["df"], v) and same(typed["xs"][0], v)
            assert same(_json_object(raw)["df"], v)
        finally:
            meta.drop_all(engine)


def test_legacy_tokens_still_read_back():
    assert [repr(x) for x in wire.loads('[NaN, Infinity, -Infinity, "NaN"]')] == ["nan", "inf", "-inf", "nan"]
    with pytest.raises(ValueError, match="not strict JSON"):
        strict(json.dumps(math.nan))
