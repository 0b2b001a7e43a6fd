"""A metric whose meaning changed keeps its name (issue 40 item 8): since scenarios got their own throughput
(commit b76d56e) a server run's ``throughput_eps`` is its queries/s achieved, where runs archived before stored the
examples of a step over the median step. ``runs.throughput_def`` (migration 0013) names the definition of each
stored figure, backfilled for old rows, and the series and comparisons of throughput keep to one definition: the
change-point search, the history table, ``/perfwatch/metrics`` and ``perfwatch compare``'s headline."""

from __future__ import annotations

import json

import pytest
from alembic import command
from sqlalchemy import bindparam, select, text

from tasks.cli.changes import change_table
from tasks.store import Run, migrate, session_scope
from tasks.store.engine import get_engine
from tests.helpers.builders import archive_scenario_run, archive_server_run, server_points
from tests.unit.store.test_migrations import _config

OLD, NEW, LATER = 6, 6, 6  # server runs archived before the change, after it, and after a real slow-down


@pytest.fixture
def across_the_change(db_url, tmp_path) -> dict[str, list[int]]:
    """One server case whose first ``OLD`` runs were archived before b76d56e (their stored throughput the median
    batch's, 4 examples / ~8 ms = ~500 examples/s, as that code stored it, and no definition), then ``NEW`` runs
    at ~300 queries/s achieved; the store then upgraded through 0013 (its backfill)."""
    old = [
        archive_server_run(db_url, tmp_path, f"old{i}", server_points([(300.0 + i, 0.008)]), target_qps=300.0)
        for i in range(OLD)
    ]
    new = [
        archive_server_run(db_url, tmp_path, f"new{i}", server_points([(300.0 + i, 0.008)]), target_qps=300.0)
        for i in range(NEW)
    ]
    single = archive_scenario_run(db_url, tmp_path, "single", "single-stream", [8.0 + 0.01 * i for i in range(40)])
    with get_engine(db_url).begin() as conn:  # what the archive stored before b76d56e
        conn.execute(
            text("UPDATE runs SET throughput_eps = 4 * 1000.0 / median_step_ms WHERE id IN :ids").bindparams(
                bindparam("ids", expanding=True)
            ),
            {"ids": old},
        )
    command.downgrade(_config(db_url), "0012")
    migrate(db_url)
    return {"old": old, "new": new, "single": [single]}


def _defs(db_url) -> dict[int, str | None]:
    with session_scope(db_url) as s:
        return dict(s.execute(select(Run.id, Run.throughput_def)).all())


def test_0013_backfills_each_stored_throughputs_definition_as_the_archive_writes_it(db_url, tmp_path):
    written = {
        "server": archive_server_run(db_url, tmp_path, "s", server_points([(300.0, 0.008)])),
        "offline": archive_scenario_run(db_url, tmp_path, "o", "offline", [8.0] * 40, wall_s=0.4),
        "single": archive_scenario_run(db_url, tmp_path, "i", "single-stream", [8.0] * 40),
    }
    want = {"server": "server_achieved", "offline": "offline_run", "single": "median_step"}
    assert {k: _defs(db_url)[rid] for k, rid in written.items()} == want  # the archive
    with get_engine(db_url).begin() as conn:
        conn.execute(text("UPDATE runs SET throughput_def = NULL"))
    command.downgrade(_config(db_url), "0012")
    migrate(db_url)
    assert {k: _defs(db_url)[rid] for k, rid in written.items()} == want  # the backfill


def test_0013_names_an_old_server_runs_median_batch_figure_median_step(db_url, across_the_change):
    defs = _defs(db_url)
    assert [defs[i] for i in across_the_change["old"]] == ["median_step"] * OLD
    assert [defs[i] for i in across_the_change["new"]] == ["server_achieved"] * NEW
    assert defs[across_the_change["single"][0]] == "median_step"


def test_a_throughput_series_across_the_change_is_two_series_not_a_change_point(db_url, tmp_path, across_the_change):
    """~500 examples/s at the median batch, then ~300 queries/s achieved: the same model, two metrics. Before
    0013 the search read one series and reported a change point (x~0.6, "slower") where the definition changed;
    within one definition a real change (a slower server) is still found."""
    df, _ = change_table(db_url, "m", metrics=("throughput_eps",))
    assert df.empty, df[["run_id", "before", "after"]].to_dict("records")
    # the server slows down: 20 ms a batch of 4 serves ~200 of the 300 queries/s offered
    later = [
        archive_server_run(db_url, tmp_path, f"late{i}", server_points([(300.0 + i, 0.02)]), target_qps=300.0)
        for i in range(LATER)
    ]
    df, _ = change_table(db_url, "m", metrics=("throughput_eps",))
    assert list(df["run_id"]) == [later[0]] and list(df["direction"]) == ["slower"]


def test_history_names_each_runs_throughput_definition(cli, db_url, across_the_change, monkeypatch):
    rows = json.loads(cli("history", "m", "--case", "infer-bs4-server-q300", "--format", "json").stdout)
    by_id = {r["run_id"]: r["throughput_def"] for r in rows}
    assert {by_id[i] for i in across_the_change["old"]} == {"median_step"}
    assert {by_id[i] for i in across_the_change["new"]} == {"server_achieved"}
    monkeypatch.setenv("COLUMNS", "400")  # every column fits
    table = cli("history", "m", "--case", "infer-bs4-server-q300", "--format", "table").stdout
    assert "median_step" in table and "server_achieved" in table


def test_metrics_label_the_throughputs_definition(db_url, tmp_path):
    from plugins.perfwatch.metrics import StoreCollector

    archive_server_run(db_url, tmp_path, "s", server_points([(300.0, 0.008)]))
    archive_scenario_run(db_url, tmp_path, "i", "single-stream", [8.0] * 40)
    families = {f.name: f for f in StoreCollector(db_url).collect()}
    labels = {
        s.labels["case"]: s.labels["definition"] for s in families["perfwatch_throughput_examples_per_second"].samples
    }
    assert labels == {"infer-bs4-server-q300": "server_achieved", "infer-bs4": "median_step"}


def test_compare_headline_never_compares_two_definitions():
    from tasks.records import throughput_pair_text as pair_text  # the one rule the CLI and the pages use

    text_ = pair_text(500.0, "median_step", 300.0, "server_achieved")
    assert "->" not in text_ and "not compared" in text_
    assert "examples/s at the median step" in text_ and "queries/s achieved" in text_
    assert (
        pair_text(300.0, "server_achieved", 280.0, "server_achieved") == "throughput 300.0 -> 280.0 queries/s achieved"
    )
