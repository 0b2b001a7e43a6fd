"""What ``make demo`` shows of a failed task (``perfwatch demo follow``, ``tasks.cli.follow``), read from real logs of
``airflow dags test`` under Airflow 3.3.2 (``tests/data/airflow_logs``, captured as they were written, from the
``Created dag run.`` line on):

* ``pull_unknown_model.log``: ``-c '{"model": "nope"}'``, pull_model_version raises UnknownModelError;
* ``plan_queue_error.log``: ``-c '{"model": "demo_mobilenet", "device": "gpu"}'`` with no ``queues:`` in the config,
  plan raises QueueError (nothing is stored, only the log and the alert say it);
* ``on_gpu_measure_device_missing.log``: the same with ``queues: {gpu: gpu}``, so the case goes to the task group
  ``on_gpu``, whose measure fails at env-fingerprint with DeviceMissing on a host without a GPU, re-raised as
  AirflowFailException (``dags/perfwatch_profile.py``);
* ``archive_regression.log`` (from the archive task's start on): the demo's version 2 (``trigger: release``): archive
  stores the run, then fails the task (AirflowFailException) because the verdict is a regression.

Airflow 3.3 logs no ``[DAG TEST] Error running task`` line: a failed task's log has ``Task failed with exception``
with the traceback under it, ``new_state=failed`` and ``[DAG TEST] end task task_id=...``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tasks.cli.follow import exception_line, follow

LOGS = Path(__file__).resolve().parents[2] / "data" / "airflow_logs"


def shown(name: str) -> list[str]:
    with (LOGS / name).open(encoding="utf-8") as f:
        return list(follow(f))


def test_a_failed_pull_says_which_task_failed_and_why():
    out = shown("pull_unknown_model.log")
    assert (
        "   03:27:51 task pull_model_version failed: UnknownModelError: unknown model 'nope': no directory "
        in "\n".join(out)
    )
    assert not [line for line in out if "task pull_model_version: ended" in line]
    assert "   03:27:51 task plan: ended" in out  # a task that succeeded still just ends


def test_a_failed_plan_is_shown_with_its_error_and_the_alert():
    out = shown("plan_queue_error.log")
    (failed,) = [line for line in out if "task plan" in line and "started" not in line]
    assert failed.startswith("   03:29:23 task plan failed: QueueError: refused before any case waits for a worker")
    text = "\n".join(out)
    # the alert of the failed DAG run (no alert connection here: the log says what it would have sent)
    assert "    perfwatch alert NOT sent: no Airflow connection 'perfwatch_alerts'" in text
    assert "\n                perfwatch: perfwatch_profile failed\n" in text
    assert out.index(failed) < next(i for i, line in enumerate(out) if "perfwatch alert" in line)


def test_a_failed_measure_in_a_queues_task_group_names_the_task_with_its_prefix():
    out = shown("on_gpu_measure_device_missing.log")
    assert "   03:30:36 task on_gpu.measure: started" in out
    (failed,) = [line for line in out if line.startswith("   03:30:37 task on_gpu.measure")]
    # the exception raised last (AirflowFailException, the DAG's wrapper) says the cause's type and message
    assert failed == (
        "   03:30:37 task on_gpu.measure failed: DeviceMissing: case demo_mobilenet train-bs16-gpu asks for device "
        "gpu; this host has none visible (CUDA_VISIBLE_DEVICES=<unset>, NVML sees [CPU])"
    )
    assert "*demo_mobilenet* v1 `train-bs16-gpu` (run 2): failed at stage *env-fingerprint*" in "\n".join(out)


def test_a_regressions_failed_archive_is_a_failed_task():
    out = shown("archive_regression.log")
    (line,) = [x for x in out if re.match(r"   \d\d:\d\d:\d\d task archive (failed|:)", x)]
    assert line.startswith(
        "   03:35:49 task archive failed: demo_mobilenet v2 (train-bs16) regressed (paired-abba): CPU-time ratio 1.874 "
        "[1.704, 2.060] vs baseline run(s) [3]; archived as run 4; top ops: "
    )
    assert "AirflowFailException" not in line and "Traceback" not in line
    assert any("perfwatch: perfwatch_profile failed" in x for x in out)


@pytest.mark.parametrize(
    ("traceback", "line"),
    [
        (
            ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    g()", "ValueError: bad"],
            "ValueError: bad",
        ),
        (  # a chain: the exception raised last; its message's first line; notes after it left out
            [
                "Traceback (most recent call last):",
                '  File "x.py", line 1, in f',
                "pkg.mod.Inner: first",
                "",
                "The above exception was the direct cause of the following exception:",
                "",
                "Traceback (most recent call last):",
                '  File "y.py", line 2, in g',
                "    raise Outer('x')",
                "pkg.Outer: second line one",
                "second line two",
                "a note",
            ],
            "Outer: second line one",
        ),
        (["Traceback (most recent call last):", '  File "x.py", line 1', "KeyboardInterrupt"], "KeyboardInterrupt"),
        (["airflow.sdk.exceptions.AirflowFailException: HostBusy: waiting"], "HostBusy: waiting"),
        ([], None),
    ],
)
def test_the_exceptions_line(traceback, line):
    assert exception_line(traceback) == line


def _line(time: str, level: str, text: str, logger: str, kv: str = "loc=x.py:1") -> str:
    return f"2026-12-01T{time}.123456Z [{level:<9}] {text} [{logger}] {kv}\n"


def test_a_retried_task_and_a_log_that_stops_before_the_tasks_end():
    start = _line("19:00:00", "info", "[DAG TEST] starting task_id=on_cpu.measure map_index=0", "airflow.sdk")
    exc = [
        _line("19:00:05", "error", "Task failed with exception", "task", "loc=task_runner.py:1676"),
        "Traceback (most recent call last):\n",
        '  File "/x/pipeline.py", line 9, in measure\n',
        "tasks.stages.pipeline.HostBusy: host busy: other processes took 62%; measuring again at 19:10:05 UTC\n",
    ]
    state = _line(
        "19:00:05", "info", "Task instance state updated", "airflow.api", "loc=t.py:485 new_state=up_for_retry"
    )
    end = _line("19:00:05", "info", "[DAG TEST] end task task_id=on_cpu.measure map_index=0", "airflow.sdk")
    assert list(follow([start, *exc, state, end]))[-1] == (
        "   19:00:05 task on_cpu.measure: ended, up for retry: HostBusy: host busy: other processes took 62%; "
        "measuring again at 19:10:05 UTC"
    )
    # killed before its end line: the failure is still shown when the log ends
    assert list(follow([start, *exc]))[-1].startswith("   19:00:05 task on_cpu.measure failed: HostBusy: host busy")
    # a task that ends without an exception or a failed state just ends
    assert list(follow([start, end]))[-1] == "   19:00:05 task on_cpu.measure: ended"
