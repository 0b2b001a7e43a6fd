"""Per-step CPU time and run-queue wait in the store (migration 0005, ``store_run``), the archive's copy of a
paired gate's result, and where they are shown: ``perfwatch runs``, the run page's facts, ``/metrics``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, select, text, update

from tasks.runner.protocol import PairedResult, read_result
from tasks.stages.archive import PAIRED_RESULT, archive_run
from tasks.store import Artifact, StepSample, get_engine, migrate, session_scope
from tasks.store.reads import run_pages
from tasks.store.series import metrics_snapshot
from tests.helpers.builders import make_records
from tests.unit.store.test_migrations import _config

WALL = [10.0 + i * 0.01 for i in range(10)]  # make_records' measured steps (median 10.045)


def _with_counters(tmp_path: Path, name: str, *, wait: bool = True, **kw):
    """make_records' run with CPU time (2 x wall) and wait (0.5 ms per step) for its warm-up and measured
    steps in its samples file."""
    recs = make_records(tmp_path, dag_run_id=name, **kw)
    path = Path(recs[4].samples_path)
    samples = json.loads(path.read_text())
    samples["measured_cpu_ms"] = [2 * t for t in samples["measured_step_times_ms"]]
    samples["warmup_cpu_ms"] = [30.0, 25.0]
    if wait:
        samples["measured_wait_ms"] = [0.5] * len(samples["measured_step_times_ms"])
        samples["warmup_wait_ms"] = [0.1, 0.2]
    path.write_text(json.dumps(samples))
    return recs


def _samples(db_url: str, phase: str) -> list[tuple[float | None, float | None]]:
    with session_scope(db_url) as s:
        q = select(StepSample.cpu_ms, StepSample.wait_ms).where(StepSample.phase == phase).order_by(StepSample.step)
        return [tuple(r) for r in s.execute(q)]


def test_migration_0005_adds_nullable_cpu_and_wait_columns_old_rows_null(db_url, tmp_path):
    archive_run(db_url, str(tmp_path / "archive"), *_with_counters(tmp_path, "r1"))
    command.downgrade(_config(db_url), "0004")  # the rows stay, as rows written before 0005
    assert {"cpu_ms", "wait_ms"}.isdisjoint(c["name"] for c in inspect(get_engine(db_url)).get_columns("step_samples"))
    migrate(db_url)
    cols = {c["name"]: c for c in inspect(get_engine(db_url)).get_columns("step_samples")}
    assert cols["cpu_ms"]["nullable"] and cols["wait_ms"]["nullable"]
    with get_engine(db_url).connect() as conn:
        rows = conn.execute(text("SELECT cpu_ms, wait_ms FROM step_samples")).all()
    assert len(rows) == 14 and all(r == (None, None) for r in rows)


def test_store_keeps_each_steps_cpu_time_and_wait(db_url, tmp_path):
    archive_run(db_url, str(tmp_path / "archive"), *_with_counters(tmp_path, "r1"))
    assert _samples(db_url, "measured") == [(pytest.approx(2 * t), 0.5) for t in WALL]
    assert _samples(db_url, "warmup") == [(30.0, 0.1), (25.0, 0.2)]
    assert _samples(db_url, "profiled") == [(None, None), (None, None)]  # not measured there


def test_runs_shows_cpu_and_wait_medians_beside_step_time(db_url, tmp_path, cli):
    old = archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="old")).run_id
    new = archive_run(db_url, str(tmp_path / "archive"), *_with_counters(tmp_path, "new")).run_id
    from tasks.cli.main import runs_frame

    df = runs_frame(db_url).set_index("run_id")
    assert df.loc[new, "median_cpu_ms"] == pytest.approx(2 * 10.045)
    assert df.loc[new, "median_wait_ms"] == pytest.approx(0.5)
    assert df.loc[old, ["median_cpu_ms", "median_wait_ms"]].isna().all()  # stored before they were recorded
    res = cli("runs", "--format", "csv")
    assert res.exit_code == 0, res.output
    header = res.output.splitlines()[0].split(",")
    assert header.index("median_cpu_ms") == header.index("median_step_ms") + 1
    res = cli("runs")
    assert res.exit_code == 0 and "median cpu ms" in res.output and "median wait ms" in res.output  # table headers
    pages = run_pages([old, new], db_url)
    assert pages[new]["median_cpu_ms"] == pytest.approx(20.09) and pages[old]["median_wait_ms"] is None


def test_runs_table_leaves_out_the_wait_where_no_run_recorded_it(db_url, tmp_path, cli):
    archive_run(db_url, str(tmp_path / "archive"), *_with_counters(tmp_path, "r1", wait=False))
    res = cli("runs")
    assert res.exit_code == 0 and "median cpu ms" in res.output and "median wait ms" not in res.output


def test_metrics_export_the_newest_runs_cpu_and_wait(db_url, tmp_path):
    pytest.importorskip("prometheus_client")
    from plugins.perfwatch.metrics import StoreCollector

    archive_run(db_url, str(tmp_path / "archive"), *make_records(tmp_path, dag_run_id="a", key="k1"))
    archive_run(db_url, str(tmp_path / "archive"), *_with_counters(tmp_path, "b", model="other"))
    (latest_m, latest_other) = metrics_snapshot(db_url).latest
    assert latest_m.median_cpu_ms is None and latest_other.median_cpu_ms == pytest.approx(20.09)
    families = {f.name: f for f in StoreCollector(db_url).collect()}
    (cpu,) = families["perfwatch_step_cpu_seconds"].samples
    case = latest_other.case_name  # a case without a readable label is labelled by its name
    assert cpu.labels == {"model": "other", "case": case, "case_label": case, "source": "perfwatch"}
    assert cpu.value == pytest.approx(0.02009)
    (wait,) = families["perfwatch_step_wait_seconds"].samples
    assert wait.value == pytest.approx(0.0005)


def test_archive_keeps_a_paired_gates_result_with_its_cpu_and_wait(db_url, tmp_path):
    from tests.unit.runner.test_protocol import fake, paired_spec

    p = fake(PERFWATCH_FAKE_WAIT_RATIO="0.1").run(paired_spec(tmp_path, blocks=4), PairedResult, 30)
    recs = list(make_records(tmp_path))
    recs[4] = recs[4].model_copy(update={"paired_path": str(tmp_path / "p" / "result.json")})
    out = archive_run(db_url, str(tmp_path / "archive"), *recs)
    kept = Path(out.archive_uri) / PAIRED_RESULT
    assert read_result(kept, PairedResult).blocks == p.blocks
    assert all(b.a_cpu_ms and b.b_wait_ms for b in read_result(kept, PairedResult).blocks)
    with session_scope(db_url) as s:
        kinds = sorted(s.scalars(select(Artifact.kind)))
    assert kinds == ["paired-result", "xplane"]


def test_compare_inputs_carry_the_baselines_cpu_samples_and_the_calibration_runs_cpu_medians(db_url, tmp_path):
    """One read (gather_compare_inputs) gives each baseline's per-step CPU time where every measured step has it,
    and each calibration run's median CPU time in calibration_runs' order (None for a run stored without it)."""
    from tasks.store.reads import gather_compare_inputs

    arch = str(tmp_path / "archive")
    old = archive_run(db_url, arch, *make_records(tmp_path, dag_run_id="old", verdict="pass")).run_id
    new = archive_run(db_url, arch, *_with_counters(tmp_path, "new", verdict="pass")).run_id
    part = archive_run(db_url, arch, *_with_counters(tmp_path, "partial", verdict="pass")).run_id
    with session_scope(db_url) as s:  # one measured step without CPU time
        s.execute(
            update(StepSample)
            .where(StepSample.run_id == part, StepSample.phase == "measured", StepSample.step == 9)
            .values(cpu_ms=None)
        )
    inputs = gather_compare_inputs(db_url, "m", "train-bs16", "k1", lookback=5, calibration_window=50)
    assert inputs.same_env == [part, new, old]
    assert set(inputs.samples) == {old, new, part}
    assert inputs.cpu_samples == {new: [pytest.approx(2 * t) for t in WALL]}  # old: none; partial: not every step
    assert [m for _, m in inputs.calibration_runs] == [10.0] * 3  # runs.median_step_ms
    assert inputs.calibration_cpu_ms == [pytest.approx(2 * 10.04), pytest.approx(2 * 10.045), None]
    # another environment (none accepted there): the lookback and calibration runs of k1, before the change
    across = gather_compare_inputs(db_url, "m", "train-bs16", "other", lookback=5, calibration_window=50)
    assert (across.same_env, across.other_env) == ([], [part, new, old])
    assert across.cpu_samples == inputs.cpu_samples and across.calibration_runs == inputs.calibration_runs


def test_baseline_compare_judges_the_history_on_cpu_time_when_it_drifts_less(db_url, tmp_path):
    """End to end through the store and the compare stage: accepted runs whose wall time drifts between processes
    and whose CPU time does not; the candidate's CPU time comes from its samples file."""
    from tasks.stages.compare import baseline_compare

    arch = str(tmp_path / "archive")
    for i, drift in enumerate([1.0, 1.12, 0.9, 1.08, 0.95, 1.15, 0.88, 1.05]):
        recs = _with_counters(tmp_path, f"b{i}", verdict="pass", median=10.0 * drift)
        path = Path(recs[4].samples_path)
        samples = json.loads(path.read_text())
        samples["measured_cpu_ms"] = [18.0 + 0.01 * (i % 3) + 0.001 * j for j in range(10)]
        path.write_text(json.dumps(samples))
        archive_run(db_url, arch, *recs)
    ctx, _, env, _, run, parsed, _ = _with_counters(tmp_path, "cand", median=11.0)
    path = Path(run.samples_path)
    samples = json.loads(path.read_text())
    samples["measured_cpu_ms"] = [18.0 * 1.3 + 0.001 * j for j in range(10)]
    path.write_text(json.dumps(samples))
    v = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "cand" / "work")
    assert v.evidence["metric"] == "cpu" and v.evidence["history_metric"]["metric"] == "cpu"
    assert v.verdict == "regression" and v.ratio == pytest.approx(1.3, rel=0.01)
    assert "median CPU-time ratio" in (v.reason or "")
    assert v.median_limit_ms == pytest.approx(v.evidence["baseline_median_cpu_ms"] * 1.05)
