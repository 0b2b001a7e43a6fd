"""Tables never cut a figure or split a word: on a 100-column terminal ``gate``, ``runs``, ``regressions``,
``history`` and ``compare`` show every number and name whole and fit the width; a table that cannot fit leaves
out columns and names them under it. ``regressions`` and ``gate`` carry each verdict's story like ``runs`` and
``history``."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tasks.cli.render import render
from tests.helpers.builders import add_failure, add_run

REASON = "the interval lies above the regression line"


@pytest.fixture
def demo(db_url, tmp_path, monkeypatch) -> dict[str, int]:
    """The demo's story with its figures: v1 128.456 ms; v2's paired gate a regression (ratio 1.8734, median
    245.678 ms); a later unpaired run of v2; a failed run."""
    monkeypatch.setenv("COLUMNS", "100")
    v1 = add_run(db_url, tmp_path, "v1", model="demo_mobilenet", verdict="no-baseline", median=128.456, day=0)
    gate = add_run(
        db_url, tmp_path, "v2", model="demo_mobilenet", version="2", verdict="regression", median=245.678, day=1,
        baseline=v1, ratio=1.8734, method="paired-abba", reason=REASON,
    )  # fmt: skip
    adhoc = add_run(
        db_url, tmp_path, "adhoc", model="demo_mobilenet", version="2", verdict="inconclusive", median=243.125,
        day=2, baseline=v1, ratio=1.9, method="history-lookback",
    )  # fmt: skip
    failed = add_failure(db_url, tmp_path, "boom", model="demo_mobilenet", day=3)
    return {"v1": v1, "gate": gate, "adhoc": adhoc, "failed": failed}


def _fits(output: str, width: int = 100) -> None:
    assert "…" not in output, output
    wide = [ln for ln in output.splitlines() if len(ln) > width and ln.lstrip()[:1] in "┏┃┡│└"]
    assert not wide, wide


def test_gate_at_100_columns_shows_every_figure_whole(cli, demo):
    res = cli("gate", "demo_mobilenet", "2")
    assert res.exit_code == 1, res.output
    _fits(res.stdout)
    for figure in ("245.678", "128.456", "1.873", "1.773", "1.973", "regression", "paired-abba", "train-bs16"):
        assert figure in res.stdout, figure


def test_runs_at_100_columns_shows_every_figure_and_name_whole(cli, demo, monkeypatch):
    res = cli("runs")
    assert res.exit_code == 0, res.output
    _fits(res.stdout)
    table = res.stdout.split("└")[0]
    for figure in ("128.456", "245.678", "243.125", "1,600.0"):
        assert figure in table, figure
    # the header wraps at its words ("median" over "step ms" where the column is narrow), never median_step…
    header = table.split("┡")[0]
    assert "median_step" not in header and "median" in header and "step ms" in header
    # each median carries its 95% interval and n (issue 27); no name or figure is ever folded (issue 35), at 100
    # columns as at 120
    assert " n=10 " in table and "[" in table
    monkeypatch.setenv("COLUMNS", "120")
    wide = cli("runs")
    _fits(wide.stdout, 120)
    for name in ("demo_mobilenet", "failed@warm-up", "no-baseline", "inconclusive"):
        assert name in wide.stdout.split("└")[0], name
    assert f"  run {demo['failed']} failed@warm-up: RunnerError: training step failed" in res.stdout


def test_regressions_tells_each_verdicts_story(cli, demo):
    res = cli("regressions", "--since", "2026-01-01")
    assert res.exit_code == 0, res.output
    _fits(res.stdout)
    assert "1.873" in res.stdout and "245.678" in res.stdout
    assert f"  run {demo['gate']} regression: step-time ratio 1.873 [1.773, 1.973]; paired ABBA gate" in res.stdout
    assert res.stdout.rstrip().endswith(f"why: {REASON}")
    (row,) = json.loads(cli("regressions", "--since", "2026-01-01", "--format", "json").stdout)
    assert row["decision"]["reason"] == REASON and row["decision"]["verdict"] == "regression"
    assert row["decision"]["text"].startswith("regression: step-time ratio 1.873")
    csv_head = cli("regressions", "--since", "2026-01-01", "--format", "csv").stdout.splitlines()[0]
    assert csv_head.endswith(",decision") and "env_key" in csv_head  # csv keeps every column


def test_a_table_too_wide_for_the_terminal_leaves_out_columns_and_names_them_never_a_split_word(capsys, monkeypatch):
    """Issue 35: a table that could not fit was printed wider than the terminal (129 columns on 100) and folded
    long names over two lines. It fits now: the columns it cannot hold are left out, named under it, and every
    word it shows is whole."""
    monkeypatch.setenv("COLUMNS", "40")
    df = pd.DataFrame(
        {"name": ["a_long_case_name_here", "b"]}
        | {f"figure_{i}": [123456.789 + i, 0.5] for i in range(6)}
        | {"empty": [None, None]}
    )
    render(df, "table", title="wide")
    out = capsys.readouterr().out
    assert "…" not in out and max(len(ln) for ln in out.splitlines() if ln[:1] in "┏┃┡│└") <= 40, out
    names = [ln.split("│")[1].strip() for ln in out.splitlines() if ln.startswith("│")]
    assert names == ["a_long_case_name_here", "b"]  # whole, each on its row's one line
    shown = [i for i in range(6) if f"{123456.789 + i:,.1f}" in out]
    assert shown == [0], out  # the figures that fit, whole; the rest left out from the right, after the empty one
    assert "(left out to fit 40 columns: empty, figure 5, figure 4, figure 3, figure 2, figure 1; --format csv" in out


@pytest.mark.parametrize("width", [100, 80])
def test_history_fits_the_terminal_with_names_whole_and_the_verdicts_figures_kept(cli, demo, monkeypatch, width):
    """``history`` at 100 columns printed 183 wide with ``train-bs|16`` and the date folded: it fits, each name on
    one line; what goes first is what the story under the table or another command says (the environment key,
    the spread, the throughput), never the verdict's ratio."""
    monkeypatch.setenv("COLUMNS", str(width))
    res = cli("history", "demo_mobilenet")
    assert res.exit_code == 0, res.output
    _fits(res.stdout, width)
    table = res.stdout.split("└")[0]
    rows = [[p.strip() for p in ln.strip("│").split("│")] for ln in table.splitlines() if ln.startswith("│")]
    assert "train-bs16" in {c for r in rows for c in r} and not any(c in ("train-bs", "16") for r in rows for c in r)
    assert "1.873" in table and "regression" in table
    assert "(left out to fit" in res.stdout and "env key" in res.stdout.split("(left out to fit")[1]


def test_compare_at_100_columns_puts_long_op_names_under_the_table_whole(cli, db_url, tmp_path, monkeypatch):
    """An op's scope path is one word longer than a narrow table can hold beside its figures: the op table keeps
    its figures and a rank, and each name follows it under the table, whole."""
    from tests.helpers.builders import archive, op

    long = "gradient_tape/mobilenetv2_0.35_96_1/block_1_depthwise_1/depthwise/DepthwiseConv2dNativeBackpropFilter"
    archive(db_url, tmp_path, "v1", version="1", ops=[op(long, "DepthwiseConv2dNativeBackpropFilter", 100.0)])
    archive(db_url, tmp_path, "v2", version="2", ops=[op(long, "DepthwiseConv2dNativeBackpropFilter", 300.0)])
    monkeypatch.setenv("COLUMNS", "100")
    res = cli("compare", "m", "--from", "1", "--to", "2")
    assert res.exit_code == 0, res.output
    _fits(res.stdout)
    assert f"  1: {long} (DepthwiseConv2dNativeBackpropFilter, Host)" in res.stdout


def _fed(db_url: str, run_id: int) -> None:
    """Store what the runner fed run ``run_id`` (``run_tables`` tool ``inputs``, as the archive writes it): the
    ``inputs`` column of ``perfwatch runs`` then appears."""
    from tasks.store import RunTable, session_scope

    feed = {"shape": [16, 224, 224, 3], "dtype": "float32", "min": None, "max": None}
    data = {"inputs": {"image": feed, "mask": {**feed, "dtype": "int32", "min": 0, "max": 2}}, "input_source": "x"}
    with session_scope(db_url) as s:
        s.add(RunTable(run_id=run_id, tool="inputs", data=data))


def test_runs_at_100_columns_with_inputs_keeps_its_main_columns_whole_the_inputs_under_the_table(cli, demo, db_url):
    """With the inputs column the table got tight and rich folded verdicts mid-word ("no-basel|ine",
    "regressi|on"), then the case and the model ("train-bs1|6", "demo_mob|ilenet") and the inputs over ten lines a
    row: the inputs go under the table (one line per distinct feed), the one model into the title, and the run,
    version, case, median with its interval and verdict stay whole; a verdict wraps at its spaces only."""
    for run_id in (demo["v1"], demo["gate"], demo["adhoc"]):
        _fed(db_url, run_id)
    res = cli("runs")
    assert res.exit_code == 0, res.output
    _fits(res.stdout)
    table = res.stdout.split("└")[0]
    head = [ln.strip("┃").split("┃") for ln in table.splitlines() if ln.startswith("┃")]
    (col,) = [i for i in range(len(head[0])) if any(h[i].strip() == "verdict" for h in head)]
    assert not any(h[i].strip() == "inputs" for h in head for i in range(len(h)))
    assert "perfwatch runs of demo_mobilenet" in table
    rows = [[p.strip() for p in ln.strip("│").split("│")] for ln in table.splitlines() if ln.startswith("│")]
    (case,) = [i for i in range(len(head[0])) if any(h[i].strip() == "case" for h in head)]
    assert {r[case] for r in rows if r[0]} == {"train-bs16"}, res.stdout  # the case whole on its row's line
    assert all(r[case] == "" for r in rows if not r[0]), res.stdout
    under = res.stdout.split("└")[1]
    ids = ", ".join(str(demo[k]) for k in ("v1", "gate", "adhoc"))
    assert f"  inputs of runs {ids}: image 16x224x224x3 float32; mask 16x224x224x3 int32 [0,2) via x" in under
    cells: list[list[str]] = []
    for line in table.splitlines():
        if line.startswith("│"):
            parts = [p.strip() for p in line.strip("│").split("│")]
            if parts[0]:  # a run id: a new row
                cells.append([])
            cells[-1].append(parts[col])
    assert len(cells) == 4
    words = {"no-baseline", "regression", "inconclusive", "failed@warm-up"}
    for lines in cells:
        assert [w for line in lines for w in line.split()][:1] and all(
            w in words for line in lines for w in line.split()
        ), (lines, res.stdout)


def test_a_no_baseline_run_carries_its_story_under_the_runs_table(cli, demo, db_url, tmp_path):
    """Every verdict carries its story: a no-baseline run's line says there was no baseline yet and what became
    of the run (the case's baseline now), and one that did not become it gets the advice to accept it."""
    res = cli("runs")
    v1 = demo["v1"]
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith(f"  run {v1} ")]
    assert line.startswith(f"  run {v1} no-baseline; no comparison (nothing to compare with); why: no baseline yet: ")
    assert "it became the case's baseline (accepted as the baseline by perfwatch on " in line
    other = add_run(db_url, tmp_path, "other", model="demo_mobilenet", verdict="no-baseline", batch_size=64, day=4)
    from sqlalchemy import delete

    from tasks.store import Baseline, session_scope

    with session_scope(db_url) as s:  # never accepted (auto_accept off)
        s.execute(delete(Baseline).where(Baseline.run_id == other))
    res = cli("runs")
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith(f"  run {other} ")]
    assert f"it is not the case's baseline (if it is sound: perfwatch baseline accept {other} --by NAME" in line
    (row,) = [r for r in json.loads(cli("runs", "--format", "json").stdout) if r["run_id"] == other]
    assert row["decision"]["reason"].startswith("no baseline yet: ")


def _cells(table: str) -> list[str]:
    """Every body cell of a rich table, its wrapped lines joined (a row starts where its first cell has text)."""
    rows: list[list[str]] = []
    for ln in table.splitlines():
        if ln.startswith("│"):
            cells = [c.strip() for c in ln.strip().strip("│").split("│")]
            if cells[0] or not rows:
                rows.append(cells)
            else:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return [c for r in rows for c in r]


def test_a_ratio_decided_on_cpu_time_says_so_in_its_cell_in_every_table(cli, demo, db_url):
    """A ratio of CPU time read like one of wall time in the history and regressions tables: its cell says
    ``(CPU time)``; a wall-time ratio stays a bare figure; json keeps the number and the metric."""
    from sqlalchemy import update

    from tasks.store import Run, RunComparison, session_scope

    with session_scope(db_url) as s:
        s.execute(update(Run).where(Run.id == demo["gate"]).values(compare_metric="cpu"))
        s.execute(update(RunComparison).where(RunComparison.run_id == demo["gate"]).values(metric="cpu"))
    for args in (
        ("history", "demo_mobilenet"),
        ("regressions", "--since", "2026-01-01"),
        ("gate", "demo_mobilenet", "2"),
    ):
        table = cli(*args).stdout.split("└")[0]
        assert "1.873 (CPU time)" in _cells(table), (args, table)
    history = _cells(cli("history", "demo_mobilenet").stdout.split("└")[0])
    assert "1.900" in history and "1.900 (CPU time)" not in history  # the adhoc run's wall-time ratio: a bare figure
    (row,) = json.loads(cli("regressions", "--since", "2026-01-01", "--format", "json").stdout)
    assert row["ratio"] == pytest.approx(1.8734) and row["metric"] == "cpu"


def test_gates_answer_goes_to_stdout_and_stays_off_a_json_document(cli, demo):
    """Issue 35: gate's verdict line and story went to stderr, so a CI log of stdout lost the answer. With the
    table they are on stdout; beside csv or json data on stderr, so stdout stays one document."""
    res = cli("gate", "demo_mobilenet", "2")
    assert res.exit_code == 1
    assert "gate demo_mobilenet v2: REGRESSION (exit 1)" in res.stdout
    assert f"  train-bs16: run {demo['gate']} regression: step-time ratio 1.873" in res.stdout
    assert "note: the verdict's figure is the ratio column" in res.stdout
    assert "REGRESSION" not in res.stderr
    data = cli("gate", "demo_mobilenet", "2", "--format", "json")
    assert data.exit_code == 1
    assert json.loads(data.stdout)[0]["verdict"] == "regression"  # stdout: the JSON alone
    assert "gate demo_mobilenet v2: REGRESSION (exit 1)" in data.stderr


def test_runs_at_100_columns_keeps_the_verdict_before_the_secondary_figures(cli, db_url, tmp_path, monkeypatch):
    """A new team's `COLUMNS=100 perfwatch runs` left out the verdict to fit and kept the median CPU time and
    run-queue wait: the secondary figures go first, the verdict stays."""
    import json
    from pathlib import Path

    from tasks.stages.archive import archive_run
    from tests.helpers.builders import make_records

    monkeypatch.setenv("COLUMNS", "100")
    recs = make_records(tmp_path, dag_run_id="r1", model="a_rather_long_model_name", median=85.17)
    path = Path(recs[4].samples_path)
    samples = json.loads(path.read_text())
    samples["measured_cpu_ms"] = [76.99] * len(samples["measured_step_times_ms"])
    samples["measured_wait_ms"] = [121.44] * len(samples["measured_step_times_ms"])
    path.write_text(json.dumps(samples))
    archive_run(db_url, str(tmp_path / "archive"), *recs)
    res = cli("runs")
    assert res.exit_code == 0, res.output
    _fits(res.stdout)
    table, below = res.stdout.split("└")
    assert "no-baseline" in table and "verdict" not in below.split("\n")[1], res.stdout
    assert "median wait" not in table and "left out to fit 100 columns: median wait ms" in below, res.stdout


def test_a_gpu_runs_cpu_time_says_it_is_the_host_thread_waiting(cli, db_url, tmp_path, monkeypatch):
    """Issue 39: `runs` printed a GPU run's median CPU time like a CPU run's; on a GPU it is the host thread,
    most of it waiting for the device, and measures nothing of the GPU's work."""
    import json
    from pathlib import Path

    from tasks.stages.archive import archive_run
    from tests.helpers.builders import make_records

    monkeypatch.setenv("COLUMNS", "200")
    for rid, model, device in (("r1", "on_gpu", 2**30), ("r2", "on_cpu", None)):
        recs = make_records(tmp_path, dag_run_id=rid, model=model, median=20.0)
        recs = (*recs[:4], recs[4].model_copy(update={"peak_device_bytes": device}), *recs[5:])
        path = Path(recs[4].samples_path)
        samples = json.loads(path.read_text())
        samples["measured_cpu_ms"] = [19.5] * len(samples["measured_step_times_ms"])
        path.write_text(json.dumps(samples))
        archive_run(db_url, str(tmp_path / "archive"), *recs)
    res = cli("runs")
    assert res.exit_code == 0, res.output
    rows = {m: [x for x in res.stdout.splitlines() if m in x][0] for m in ("on_gpu", "on_cpu")}
    assert "host, waits on GPU" in rows["on_gpu"] and "host, waits on GPU" not in rows["on_cpu"], res.stdout
