"""``perfwatch --help`` starts quickly because the command line loads no heavy library before a command runs.

Not a timed test (``bench/cli_startup.py`` times it): each check runs a fresh interpreter and looks at
``sys.modules`` after importing ``tasks.cli.main`` and rendering help, the behaviour that makes start-up
fast (pandas, SQLAlchemy, scipy, numpy, Great Expectations, TensorFlow and the pydantic records cost
seconds to import on the dev machine; typer and rich a fraction of one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT as ROOT

#: Top-level packages (and perfwatch modules) that `perfwatch --help` must not import.
HEAVY = (
    "pandas",
    "sqlalchemy",
    "scipy",
    "numpy",
    "great_expectations",
    "tensorflow",
    "keras",
    "xprof",
    "matplotlib",
    "alembic",
    "tasks.store",
    "tasks.stages",
    "tasks.records",
    "tasks.runner",
)

_PROBE = """
import json, sys
from tasks.cli.main import app
try:
    app(sys.argv[2:], prog_name="perfwatch")
except SystemExit:
    pass
heavy = json.loads(sys.argv[1])
loaded = sorted({h for h in heavy for m in sys.modules if m == h or m.startswith(h + ".")})
print("LOADED=" + json.dumps(loaded), file=sys.stderr)
"""


def loaded_after(*argv: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """Which of ``heavy`` a fresh interpreter has imported after ``perfwatch ARGV...`` (help or an error)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(heavy)), *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("LOADED=")]
    assert line, f"probe failed (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(line[-1].removeprefix("LOADED="))


@pytest.mark.parametrize(
    "argv", [("--help",), ("run", "--help"), ("env", "--help"), ("history", "--help"), ("db", "check", "--help")]
)
def test_help_imports_no_heavy_library(argv):
    assert loaded_after(*argv) == [], (
        f"`perfwatch {' '.join(argv)}` imports these at start-up; import them inside the command that uses them"
    )


@pytest.mark.slow  # a fresh interpreter runs a command that imports SQLAlchemy and pandas
def test_probe_sees_a_heavy_import():
    """The check can fail: a command whose body reads the store (``query`` lists the named queries) imports
    SQLAlchemy and pandas when it runs, and the probe reports them."""
    assert loaded_after("query", heavy=("sqlalchemy", "pandas", "tensorflow")) == ["pandas", "sqlalchemy"]


def test_default_measured_steps_written_out_agrees_with_records():
    from tasks import cli, records

    assert cli.DEFAULT_MEASURED_STEPS == records.DEFAULT_MEASURED_STEPS
    assert cli.COLD_STEP_DEFAULT_TOLERANCE == records.COLD_STEP_DEFAULT_TOLERANCE
    assert cli.MEMORY_DEFAULT_TOLERANCE == records.MEMORY_DEFAULT_TOLERANCE


def test_store_error_is_still_one_line(tmp_path, monkeypatch):
    """The lazy check of ``StoreError`` in ``_StoreErrorsInOneLine`` still turns an unreachable store into exit 3."""
    from typer.testing import CliRunner

    from tasks.cli.main import STORE_ERROR_EXIT, app

    monkeypatch.setenv("PERFWATCH_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    res = CliRunner().invoke(app, ["runs"])
    assert res.exit_code == STORE_ERROR_EXIT, res.output
    assert "Traceback" not in res.output


@pytest.mark.slow  # a fresh interpreter per stage imports the pipeline and the stage
@pytest.mark.parametrize("stage", ["pull", "fingerprint", "warmup", "profile", "archive"])
def test_a_dag_task_imports_only_what_its_stage_uses(stage):
    """Every Airflow task imports ``tasks.stages.pipeline``; the stage wrappers import their own module when they
    run, so pulling in the pipeline (what every task pays) loads no pandas, scipy, numpy, Great Expectations or
    xprof (parse and baseline-compare load those when they run); a stage's own module loads only what it uses."""
    probe = (
        "import json, sys\nimport tasks.stages.pipeline as p\n"
        "before = sorted({h for h in json.loads(sys.argv[1]) for m in sys.modules "
        "if m == h or m.startswith(h + '.')})\n"
        "import importlib\nmods = {'pull': 'pull', 'fingerprint': 'fingerprint', 'warmup': 'warmup',\n"
        "        'profile': 'profiled_run', 'archive': 'archive'}\n"
        "importlib.import_module('tasks.stages.' + mods[sys.argv[2]])\n"
        "after = sorted({h for h in json.loads(sys.argv[1]) for m in sys.modules if m == h or m.startswith(h + '.')})\n"
        "print(json.dumps([before, after]))"
    )
    heavy = ["pandas", "scipy", "numpy", "great_expectations", "xprof", "tensorflow", "keras", "matplotlib"]
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(heavy), stage],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=True,
    )
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == [], f"importing tasks.stages.pipeline loaded {before}"
    allowed = {"profile": {"scipy", "numpy"}}.get(stage, set())  # the paired gate's sequential statistics
    assert set(after) <= allowed, f"the {stage} stage's module loaded {after}"
