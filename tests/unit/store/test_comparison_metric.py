"""The metric that decided a verdict (``CompareRecord.metric``, ``comparisons.metric``, migration 0006) is
stored and named wherever the ratio is shown: ``perfwatch runs``, ``gate``, the run page's facts, alerts."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, select

from tasks.records import CompareRecord, ratio_name
from tasks.services.alerts import dag_run_notes, note_text
from tasks.stages.archive import archive_run
from tasks.store import RunComparison, get_engine, migrate, session_scope
from tasks.store.reads import run_pages
from tests.helpers.builders import make_records
from tests.unit.store.test_migrations import _config

BUSY = "decided on CPU time: host busy (other processes took 70% of the host's CPU time)"


def _decided(comp: CompareRecord, metric: str) -> CompareRecord:
    """``comp`` as a regression x1.3 [1.2, 1.4] of a paired gate decided on ``metric``."""
    ev = {**comp.evidence, "metric": metric, **({"reason": BUSY} if metric == "cpu" else {})}
    return comp.model_copy(
        update={
            "verdict": "regression",
            "method": "paired-abba",
            "ratio": 1.3,
            "ci_low": 1.2,
            "ci_high": 1.4,
            "metric": metric,
            "evidence": ev,
        }
    )


def _archive(db_url, tmp_path, name: str, metric: str | None) -> int:
    *recs, comp = make_records(tmp_path, dag_run_id=name, model="m")
    return archive_run(db_url, str(tmp_path / "archive"), *recs, _decided(comp, metric) if metric else comp).run_id


def _stored_metrics(db_url) -> dict[int, str | None]:
    with session_scope(db_url) as s:
        return dict(s.execute(select(RunComparison.run_id, RunComparison.metric)).all())


def test_ratio_name_says_which_metric_and_the_record_takes_only_known_metrics(tmp_path):
    assert ratio_name("cpu") == "CPU-time ratio"
    assert ratio_name("wall") == ratio_name(None) == "step-time ratio"
    comp = make_records(tmp_path)[-1]
    assert comp.metric == "wall"  # the default: what every verdict was decided on before issue 23
    with pytest.raises(ValueError, match="metric"):
        CompareRecord.model_validate({**comp.model_dump(), "metric": "gpu"})


def test_the_deciding_metric_is_stored_and_named_where_the_ratio_is_shown(db_url, tmp_path, cli):
    wall = _archive(db_url, tmp_path, "r1", "wall")
    cpu = _archive(db_url, tmp_path, "r2", "cpu")
    assert _stored_metrics(db_url) == {wall: "wall", cpu: "cpu"}
    from tasks.cli.main import runs_frame

    df = runs_frame(db_url).set_index("run_id")
    assert list(df["metric"]) == ["wall", "cpu"]
    table = cli("runs")
    assert table.exit_code == 0 and "regression (CPU" in table.output  # in the verdict's cell of the table
    res = cli("gate", "m", "1")
    assert res.exit_code == 1, res.output  # the newest run of the case: the CPU-decided regression
    assert "CPU-time ratio 1.300 [1.200, 1.400]" in res.output and "step-time ratio" not in res.output
    pages = run_pages([wall, cpu], db_url)
    assert (pages[cpu]["metric"], pages[cpu]["ratio"], pages[cpu]["reason"]) == ("cpu", 1.3, BUSY)
    assert pages[wall]["metric"] == "wall" and pages[wall]["reason"] is None
    notes = {n.run_id: note_text(n, None) for n in dag_run_notes(db_url, "d", "r2")}
    assert "CPU-time ratio 1.300 [1.200, 1.400]" in notes[cpu] and BUSY in notes[cpu]
    assert "step-time ratio 1.300" in note_text(dag_run_notes(db_url, "d", "r1")[0], None)


def test_migration_0006_copies_the_metric_from_the_evidence(db_url, tmp_path):
    old = _archive(db_url, tmp_path, "old", None)  # evidence without a metric: stored before issue 23
    wall = _archive(db_url, tmp_path, "wall", "wall")
    cpu = _archive(db_url, tmp_path, "cpu", "cpu")
    command.downgrade(_config(db_url), "0005")  # the rows stay, as rows written before 0006
    assert "metric" not in {c["name"] for c in inspect(get_engine(db_url)).get_columns("comparisons")}
    migrate(db_url)
    assert _stored_metrics(db_url) == {old: "wall", wall: "wall", cpu: "cpu"}
