"""The runner protocol and its driver (``tasks.runner.protocol``, ``tasks.runner.driver``), without TensorFlow:
the fake runner (``tests.helpers.fake_runner``) and small shell scripts stand in for the runner."""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
from pathlib import Path

import pytest

from tasks.runner import progress, protocol
from tasks.runner.driver import RunnerProcess, run_rounds
from tasks.runner.process import read_spec
from tasks.runner.protocol import (
    SCHEMA_VERSION,
    PairedResult,
    ProbeResult,
    ProbeSpec,
    ProfileResult,
    ProgressEvent,
    ProtocolError,
    ProtocolMismatch,
    RunnerError,
    WarmupResult,
)
from tasks.runner.spec import RunnerSpec
from tasks.settings import Settings
from tests.helpers import fake_runner

REFUSAL = "install the same perfwatch in the runner's venv"


def fake(**env: str) -> RunnerProcess:
    return RunnerProcess(shlex.split(fake_runner.command()), env={**os.environ, **env})


def shim(tmp_path: Path, script: str) -> RunnerProcess:
    """A runner command that runs ``script`` (sh) whatever it is asked."""
    path = tmp_path / "runner.sh"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return RunnerProcess([str(path)])


def paired_spec(tmp_path: Path, **kw) -> RunnerSpec:
    return RunnerSpec(
        mode="paired", model_path="b", baseline_model_path="a", out_dir=str(tmp_path / "p"), batch_size=2, **kw
    )


def test_each_mode_returns_its_typed_result(tmp_path):
    spec = RunnerSpec(mode="profile", model_path="m", out_dir=str(tmp_path / "run"), batch_size=2, measured_steps=7)
    r = fake().run(spec, ProfileResult, 30)
    assert isinstance(r, ProfileResult) and r.schema_version == SCHEMA_VERSION and len(r.measured_step_times_ms) == 7
    assert len(list(Path(r.profile_dir).glob("plugins/profile/*/*.xplane.pb"))) == 1  # the committed real XSpace
    assert protocol.read_result(tmp_path / "run" / "result.json", ProfileResult) == r
    w = fake().run(spec.model_copy(update={"mode": "warmup"}), WarmupResult, 30)
    assert w.warmup_step_times_ms and w.cold_step_ms > 0
    probe = fake().run(ProbeSpec(out_dir=str(tmp_path / "probe")), ProbeResult, 60)
    assert {"tensorflow", "gpu", "host", "packages", "env_vars", "recorded"} <= set(probe.data)
    assert (tmp_path / "probe" / "probe_stderr.log").exists() and (tmp_path / "probe" / "probe_spec.json").exists()


def test_cpu_time_and_wait_round_trip_in_every_measuring_result(tmp_path):
    assert SCHEMA_VERSION == 3  # version 2 added the per-step CPU time and run-queue wait, 3 the gate of processes
    spec = RunnerSpec(
        mode="profile", model_path="m", out_dir=str(tmp_path / "run"), batch_size=2, measured_steps=7, warmup_steps=3
    )
    r = fake(PERFWATCH_FAKE_CPU_RATIO="1.5", PERFWATCH_FAKE_WAIT_RATIO="0.25").run(spec, ProfileResult, 30)
    assert len(r.measured_cpu_ms) == len(r.measured_wait_ms) == 7 and len(r.warmup_cpu_ms) == 3
    for wall, cpu, wait in zip(r.measured_step_times_ms, r.measured_cpu_ms, r.measured_wait_ms, strict=True):
        assert cpu == pytest.approx(1.5 * wall) and wait == pytest.approx(0.25 * wall)
    again = protocol.read_result(tmp_path / "run" / "result.json", ProfileResult)
    assert again == r and again.measured_cpu_ms == r.measured_cpu_ms
    w = fake().run(spec.model_copy(update={"mode": "warmup"}), WarmupResult, 30)
    assert len(w.warmup_cpu_ms) == len(w.warmup_wait_ms) == len(w.warmup_step_times_ms)
    p = fake(PERFWATCH_FAKE_WAIT_RATIO="none").run(paired_spec(tmp_path, blocks=6, block_steps=2), PairedResult, 30)
    assert all(len(b.a_cpu_ms) == len(b.b_cpu_ms) == 2 and b.a_wait_ms == b.b_wait_ms == [] for b in p.blocks)
    assert len(p.a_warmup_cpu_ms) == len(p.a_warmup_step_times_ms) and p.a_warmup_wait_ms == []  # no schedstat
    orders = [b.order for b in p.blocks]
    assert all(sorted(orders[i : i + 2]) == ["AB", "BA"] for i in (0, 2, 4))  # balanced per quadruple
    stored = protocol.read_result(tmp_path / "p" / "result.json", PairedResult)
    assert stored.blocks == p.blocks  # the lists ride in the result file
    old = PairedResult.model_validate(
        {**p.model_dump(), "blocks": [{"pair": 0, "order": "AB", "a_ms": [1.0], "b_ms": [1.0]}]}
    )
    assert old.blocks[0].a_cpu_ms == [] and old.blocks[0].b_wait_ms == []  # not measured: empty


def test_the_fake_runner_simulates_a_busy_host(tmp_path):
    spec = RunnerSpec(mode="profile", model_path="m", out_dir=str(tmp_path / "run"), batch_size=2, measured_steps=200)
    quiet = fake().run(spec, ProfileResult, 30)
    assert quiet.host_load["other_cpu_share"] == pytest.approx(0.01)
    busy = fake(PERFWATCH_FAKE_OTHER_CPU_SHARE="0.7", PERFWATCH_FAKE_WALL_NOISE_CV="0.3").run(spec, ProfileResult, 30)
    assert busy.host_load["other_cpu_share"] == pytest.approx(0.7)

    def cv(xs: list[float]) -> float:
        return statistics.pstdev(xs) / statistics.fmean(xs)

    assert cv(busy.measured_step_times_ms) > 5 * cv(busy.measured_cpu_ms)  # wall noisy, CPU time steady
    assert busy.measured_cpu_ms == quiet.measured_cpu_ms  # the same work, seeded
    p = fake(PERFWATCH_FAKE_OTHER_CPU_SHARE="0.5").run(paired_spec(tmp_path, blocks=2), PairedResult, 30)
    assert p.host_load["other_cpu_share"] == p.rounds[0].host_load["other_cpu_share"] == pytest.approx(0.5)


def test_a_runner_of_another_schema_version_is_refused_by_name(tmp_path):
    spec = RunnerSpec(mode="warmup", model_path="m", out_dir=str(tmp_path / "w"), batch_size=2)
    with pytest.raises(ProtocolMismatch) as err:
        fake(PERFWATCH_FAKE_SCHEMA_VERSION="99").run(spec, WarmupResult, 30)
    assert str(err.value) == (
        f"runner at {sys.executable} speaks protocol 99, this perfwatch speaks {SCHEMA_VERSION}: {REFUSAL}"
    )
    # a runner that says no hello (an older one) is refused at its result file
    old = tmp_path / "old" / "result.json"
    old.parent.mkdir()
    old.write_text(json.dumps({"status": "ok", "mode": "warmup", "warmup_steps": 3}))
    with pytest.raises(ProtocolMismatch, match=rf"runner at {old} speaks protocol 0 \(before versions\), this perf"):
        protocol.read_result(old, WarmupResult)
    with pytest.raises(ProtocolMismatch, match=REFUSAL):
        protocol.read_view(old, protocol.StepSamples)
    script = 'echo \'{"schema_version": 7, "status": "ok"}\' > "$(dirname "$1")/result.json"'
    with pytest.raises(ProtocolMismatch, match=r"runner at .*runner.sh speaks protocol 7, this perfwatch speaks"):
        shim(tmp_path, script).run(spec, WarmupResult, 30)


def test_the_runner_refuses_a_request_of_another_version(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"schema_version": 99, "mode": "warmup", "out_dir": str(tmp_path)}))
    with pytest.raises(RunnerError, match=rf"is of protocol 99, this runner \(.*\) speaks {SCHEMA_VERSION}: {REFUSAL}"):
        read_spec(path)
    path.write_text(ProbeSpec(out_dir=str(tmp_path)).model_dump_json())
    assert isinstance(read_spec(path), ProbeSpec)


def test_a_malformed_event_line_is_reported(tmp_path):
    with pytest.raises(ProtocolError, match=r"malformed event line \(.*\): 'PERFWATCH_EVENT \{\"event\": \"nope\"\}'"):
        protocol.parse_event('PERFWATCH_EVENT {"event": "nope"}\n')
    with pytest.raises(ProtocolError, match="malformed event line"):
        protocol.parse_event('PERFWATCH_EVENT {"event": "progress", "phase": "measure", "n": "many"}')
    assert protocol.parse_event("2026-12-01 I tensorflow: chatter\n") is None
    spec = RunnerSpec(mode="warmup", model_path="/m", out_dir=str(tmp_path / "w"), batch_size=2)
    with pytest.raises(
        RunnerError,
        match=r"^warm-up: runner \(warmup\) for /m wrote a malformed event line \(.*\): 'PERFWATCH_EVENT \{'",
    ):
        shim(tmp_path, "echo 'PERFWATCH_EVENT {'; sleep 5").run(spec, WarmupResult, 30)


def test_progress_events_carry_only_the_fields_set():
    line = protocol.event_line(ProgressEvent(phase="measure", n=5, of=10))
    assert json.loads(line.removeprefix(protocol.EVENT_PREFIX)) == {
        "event": "progress",
        "phase": "measure",
        "n": 5,
        "of": 10,
    }
    event = protocol.parse_event(line)
    assert isinstance(event, ProgressEvent) and event.fields() == {"phase": "measure", "n": 5, "of": 10}


def test_the_driver_kills_a_runner_past_its_limit_and_keeps_its_stderr(tmp_path):
    spec = RunnerSpec(mode="profile", model_path="/m", out_dir=str(tmp_path / "run"), batch_size=2)
    with pytest.raises(RunnerError) as err:
        shim(tmp_path, "echo 'loading the model' >&2; exec sleep 30").run(spec, ProfileResult, 1, limit_note="a note")
    assert str(err.value) == (
        "profiled run timed out: the runner process for /m ran past its limit of 1 s (a note) and was killed; "
        "stderr tail:\nloading the model"
    )
    assert (tmp_path / "run" / "profile_stderr.log").read_text() == "loading the model\n"
    with pytest.raises(RunnerError, match=r"^profiled run: runner \(profile\) for /m exited 3 without a result; "):
        shim(tmp_path, "exit 3").run(spec, ProfileResult, 10)
    with pytest.raises(RunnerError, match=r"^profiled run: cannot start runner interpreter '/no/such'"):
        RunnerProcess(["/no/such", "-m", "tasks.runner"]).run(spec, ProfileResult, 10)


def test_an_error_result_is_the_runners_own_message(tmp_path):
    spec = RunnerSpec(mode="warmup", model_path="m", out_dir=str(tmp_path / "w"), batch_size=2)
    with pytest.raises(RunnerError, match=r"^runner \(warmup\) failed: RuntimeError: fake runner asked to fail"):
        fake(PERFWATCH_FAKE_FAIL="warmup").run(spec, WarmupResult, 30)


def test_rounds_are_handed_to_the_caller_and_answered(tmp_path):
    seen = []

    def stop_after_two(event: protocol.RoundEvent) -> bool:
        seen.append(event)
        return len(seen) < 2

    got = []
    with progress.reporting(got.append):
        r = run_rounds(paired_spec(tmp_path, blocks=40, block_steps=2, round_pairs=4), fake(), stop_after_two, 30)
    assert isinstance(r, PairedResult) and r.stopped_by == "parent"
    assert [e.pairs for e in seen] == [4, 8] and [b.pair for e in seen for b in e.blocks] == list(range(8))
    assert [b.pair for b in r.blocks] == list(range(8)) and r.timed_steps == 32 and len(r.rounds) == 2
    paired = [e for e in got if e["phase"] == "paired"]
    assert [(e["round"], e["n"], e["of"]) for e in paired] == [(0, 4, 40), (1, 8, 40)]
    assert paired[-1]["decision"] == "the interval decides: stopping" and paired[0]["decision"] is None
    full = run_rounds(paired_spec(tmp_path, blocks=6, round_pairs=4), fake(), lambda e: True, 30)
    assert full.stopped_by == "budget" and len(full.blocks) == 6 and full.rounds[-1].final
    fixed = fake().run(paired_spec(tmp_path, blocks=3), PairedResult, 30)  # no rounds: one look at the end
    assert len(fixed.blocks) == 3 and fixed.round_pairs is None
    with pytest.raises(ValueError, match="round_pairs set"):
        run_rounds(paired_spec(tmp_path, blocks=3), fake(), lambda e: True, 30)


def test_the_runner_command_setting():
    assert Settings.from_env({}).runner_command == (sys.executable, "-m", "tasks.runner")
    assert Settings.from_env({"PERFWATCH_RUNNER_PYTHON": "/venv/bin/python"}).runner_command == (
        "/venv/bin/python",
        "-m",
        "tasks.runner",
    )
    docker = "docker run -i --gpus all -v /work:/work 'perfwatch:gpu' python -m tasks.runner"
    cmd = Settings.from_env({"PERFWATCH_RUNNER_COMMAND": docker, "PERFWATCH_RUNNER_PYTHON": "/x"}).runner_command
    assert cmd == (
        "docker",
        "run",
        "-i",
        "--gpus",
        "all",
        "-v",
        "/work:/work",
        "perfwatch:gpu",
        "python",
        "-m",
        "tasks.runner",
    )
    assert RunnerProcess(cmd).name == docker.replace("'", "")
    assert RunnerProcess.for_python("/venv/bin/python").name == "/venv/bin/python"
