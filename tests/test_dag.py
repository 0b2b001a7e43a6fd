"""The DAG file: imports cleanly, reads like the arrow chain, imports nothing heavy at parse time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE_TASKS = ["pull_model_version", "env_fingerprint", "warm_up", "profiled_run", "parse", "baseline_compare",
               "archive", "watch_trend"]

_PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
dag = bag.get_dag("perfwatch_profile")
chain, t = [], dag.get_task("plan")
while t.downstream_list:
    (t,) = t.downstream_list
    chain.append(t.task_id)
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "chain": chain,
    "schedule": dag.timetable.expression, "catchup": dag.catchup,
    "params": sorted(dag.params.keys()),
    "heavy": [m for m in ("tensorflow", "keras", "great_expectations", "xprof", "tasks.stages.pipeline") if m in sys.modules],
    "busy_retries": dag.get_task("profiled_run").retries,
    "busy_retry_delay_s": dag.get_task("profiled_run").retry_delay.total_seconds(),
}))
"""


def _probe(**extra_env: str) -> dict:
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": str(ROOT), **extra_env}
    env.setdefault("AIRFLOW_HOME", str(ROOT / ".airflow"))
    out = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT / "dags")], capture_output=True, text=True, env=env,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dag_imports_in_card_order_without_heavy_imports():
    info = _probe()
    assert info["errors"] == {}
    assert info["chain"] == STAGE_TASKS
    assert info["heavy"] == []
    assert info["schedule"] == "0 2 * * *" and info["catchup"] is False
    assert info["params"] == ["batch_size", "measured_steps", "model", "trigger", "version"]


def test_measured_steps_param_default_is_the_case_default():
    import re

    from tasks.records import DEFAULT_MEASURED_STEPS

    text = (ROOT / "dags" / "perfwatch_profile.py").read_text()
    assert int(re.search(r"^MEASURED_STEPS = (\d+)", text, re.M).group(1)) == DEFAULT_MEASURED_STEPS


def test_host_busy_retries_are_settings(monkeypatch):
    """``profiled_run`` measures again on a busy host: 2 retries 600 s apart unless the settings say otherwise."""
    monkeypatch.delenv("PERFWATCH_HOST_BUSY_RETRIES", raising=False)
    monkeypatch.delenv("PERFWATCH_HOST_BUSY_RETRY_DELAY_S", raising=False)
    got = _probe()
    assert (got["busy_retries"], got["busy_retry_delay_s"]) == (2, 600.0)
    got = _probe(PERFWATCH_HOST_BUSY_RETRIES="0", PERFWATCH_HOST_BUSY_RETRY_DELAY_S="5")
    assert (got["busy_retries"], got["busy_retry_delay_s"]) == (0, 5.0)
