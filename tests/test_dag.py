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
}))
"""


def _probe() -> dict:
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": str(ROOT)}
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
