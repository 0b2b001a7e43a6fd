"""Every command of the README runs as written after ``make demo`` (issue 35 item 8: the README's ``perfwatch sweep
demo_mobilenet --latency-budget-ms 50 --plot sweep.png`` exited 1 right after it).

The shell blocks of the README and of the manual's command-line page (``docs/cli.md``, the README's "Using it"
before) are extracted and run line by line, one ``bash`` per block, in a directory laid out like the checkout
(every top-level entry a link to this one's) whose ``.perfwatch`` is a store like the one ``make demo`` leaves:
the demo model store's two versions of ``demo_mobilenet`` (version 2 twice as slow), DAG run 1 of version 1 (the
baseline, checked by ``perfwatch demo baseline``), DAG run 2 of version 2 as a release gate (a regression), and
``perfwatch demo check`` passing. The stages run as the DAG runs them, with the fake runner
(``tests.helpers.fake_runner``) instead of TensorFlow, so the store takes seconds to make, not minutes; every
``perfwatch`` command of the blocks runs with the same fake runner. The few commands that start a long-running
server, or are the make targets this test stands for, are listed in :data:`SKIPPED` with the reason.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, fake_runner

#: The pages whose shell blocks are the commands a newcomer types after ``make demo``.
PAGES = ("README.md", "docs/cli.md")

#: Commands not run here (matched at the start of a command line), each with the reason.
SKIPPED = {
    "make demo": "the make target whose store this test builds with the fake runner (TensorFlow, minutes)",
    "make test": "the whole test suite, this test included",
    "make airflow": "starts Airflow's api-server, scheduler and dag-processor and runs until Ctrl-C",
    "tensorboard --logdir": "starts TensorBoard's web server and runs until Ctrl-C",
    "perfwatch run my_model --baseline-runner": "needs a second runner environment (another TensorFlow's venv, "
    "minutes to install); tests/integration/test_environment_gate_runner.py runs a gate's two sides as real "
    "processes of two environments (other variables)",
}

#: Commands whose documented exit code is not 0 (the whole command line, its comment left out).
EXITS = {
    "perfwatch gate demo_mobilenet 2": 1,  # the release gate's answer: regression
    "perfwatch run demo_mobilenet --version 2 --paired": 1,  # a paired gate of the slower version 2
    "perfwatch run my_model --version 2 --paired": 1,
    "perfwatch gate my_model 2": 1,
}

#: Entries of the checkout that the copy does not link: make demo's outputs (made here), caches and the site.
NOT_LINKED = {".perfwatch", ".airflow", ".git", "site", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def shell_blocks(text: str) -> list[list[str]]:
    """The ```bash blocks of a Markdown page, each as its command lines: comment-only and blank lines left out,
    lines continued with a backslash joined."""
    blocks = []
    for body in re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, flags=re.M | re.S):
        lines: list[str] = []
        pending = ""
        for raw in body.splitlines():
            line = raw.strip()
            if not pending and (not line or line.startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1].rstrip() + " "
                continue
            lines.append(pending + line)
            pending = ""
        blocks.append(lines)
    return blocks


def bare(command: str) -> str:
    """A command line as its words, without its trailing comment (``shlex``: quotes and comments as bash reads
    them)."""
    return " ".join(shlex.split(command, comments=True))


def test_the_block_reader_takes_commands_as_bash_would():
    page = (
        "text\n```bash\n# a comment\nexport A=1 B=2   # two\n\nperfwatch runs \\\n  --format json\n```\n"
        "```yaml\nmodels: []\n```\n```\nnot shell\n```\n"
    )
    assert shell_blocks(page) == [["export A=1 B=2   # two", "perfwatch runs --format json"]]
    assert bare("perfwatch gate m 2   # its answer") == "perfwatch gate m 2"
    assert bare('perfwatch gate m 2; echo "exit $?"') == "perfwatch gate m 2; echo exit $?"


def test_the_readmes_links_lead_to_files_of_the_checkout():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links and all((ROOT / link).exists() for link in links if "://" not in link), links


def _demo_store(home: Path) -> None:
    """What ``make demo`` leaves in ``home``, with the fake runner: its recipe's steps, the DAG runs as
    ``run_case`` (the stages the DAG's tasks run), ``perfwatch demo baseline`` and ``demo check`` as commands."""
    from typer.testing import CliRunner

    from tasks.cli.main import app
    from tasks.records import Case, RunContext
    from tasks.stages.pipeline import run_case

    for version, factor in (("1", 1.0), ("2", 2.0)):  # perfwatch demo build-store: v2 about x2 the step time
        fake_runner.write_model(home / "models" / "demo_mobilenet" / version / "model.keras", factor)
    for version, trigger, at in (("1", "manual", "19:20"), ("2", "release", "19:24")):
        case = Case(model="demo_mobilenet", version=version, measured_steps=100)  # make demo's DEMO_STEPS
        run_id = f"manual__2026-12-01T{at}:00+00:00"
        run_case(RunContext(dag_id="perfwatch_profile", dag_run_id=run_id, trigger=trigger, case=case))
        if version == "1":
            res = CliRunner().invoke(app, ["demo", "baseline", "--model", "demo_mobilenet"])
            assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["demo", "check", "--model", "demo_mobilenet"])
    assert res.exit_code == 0 and "version 2 flagged as a regression" in res.output, res.output


def _checkout(tmp: Path) -> Path:
    """A directory laid out like this checkout, each top-level entry a link to this one's, without make demo's
    outputs (``.perfwatch``: made by the test)."""
    copy = tmp / "checkout"
    copy.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in NOT_LINKED:
            (copy / entry.name).symlink_to(entry)
    return copy


def _environment(checkout: Path) -> dict[str, str]:
    """The environment of a shell as the README starts from: none of perfwatch's or Airflow's settings and no
    ``.venv/bin`` on PATH (``eval "$(make -s env)"`` gives them), no outer make's flags; the fake runner as the
    runner command and the checkout on PYTHONPATH (where the fake runner is imported from); Airflow's home
    this checkout's (migrated once by ``make airflow-init``, as ``make test`` does first)."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PERFWATCH_", "AIRFLOW", "MAKE", "MFLAGS", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env["PERFWATCH_RUNNER_COMMAND"] = fake_runner.command()
    env["PYTHONPATH"] = str(checkout)
    env["AIRFLOW_HOME"] = os.environ.get("AIRFLOW_HOME") or str(ROOT / ".airflow")
    env["COLUMNS"] = "100"
    return env


def _script(commands: list[str], status: Path) -> str:
    """A bash script that runs ``commands`` in order in one shell and, after each, appends ``<index> <exit
    status>`` to the file ``status``."""
    out = []
    for i, command in enumerate(commands):
        out += [command, f'echo "{i} $?" >> {shlex.quote(str(status))}']
    return "\n".join(out) + "\n"


@pytest.mark.slow
def test_every_readme_command_runs_as_written_after_make_demo(tmp_path, monkeypatch):
    checkout = _checkout(tmp_path)
    home = checkout / ".perfwatch"
    monkeypatch.setenv("PERFWATCH_HOME", str(home))
    for var in ("PERFWATCH_DATABASE_URL", "PERFWATCH_MODEL_STORE", "PERFWATCH_ARCHIVE", "PERFWATCH_WORK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PERFWATCH_RUNNER_COMMAND", fake_runner.command())
    _demo_store(home)

    env, skipped, exits_seen, failures = _environment(checkout), set(), set(), []
    for page in PAGES:  # a page's blocks in one shell, in order, as its reader types them
        commands = [c for block in shell_blocks((ROOT / page).read_text()) for c in block]
        run = [c for c in commands if not any(c.startswith(s) for s in SKIPPED)]
        skipped |= {s for c in commands for s in SKIPPED if c.startswith(s)}
        status = tmp_path / f"status-{page.replace('/', '-')}"
        res = subprocess.run(
            ["bash", "-c", _script(run, status)], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
        )
        codes = dict(line.split() for line in status.read_text().splitlines())
        for i, command in enumerate(run):
            want = EXITS.get(bare(command), 0)
            exits_seen |= {bare(command)} & set(EXITS)
            if codes.get(str(i)) != str(want):
                failures.append(f"{page}: `{command}` exited {codes.get(str(i))} (documented: {want})")
        if failures:
            failures.append(f"its output:\n{res.stdout[-6000:]}\n{res.stderr[-6000:]}")
            break
    assert not failures, "\n".join(failures)
    assert skipped == set(SKIPPED), f"SKIPPED lists commands no page has: {set(SKIPPED) - skipped}"
    assert exits_seen == set(EXITS), f"EXITS lists commands no page has: {set(EXITS) - exits_seen}"
    assert (checkout / "trend.png").stat().st_size > 0  # perfwatch history --plot
    assert not (checkout / "sweep.png").exists()  # one batch size: no plot, said so, exit 0
