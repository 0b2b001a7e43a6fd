"""The house rule, enforced: which room of ``tasks/`` may import which (see ``tasks/__init__.py``).

A static AST walk over every module (function-level imports included), so a lazy import inside a
function counts as much as one at the top. ``violations`` is also run on a small fake tree with a
deliberate breach of each kind, to show that the rule can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT as ROOT

#: room -> the rooms it may import (itself always allowed). Foundation modules are rooms of their own.
ALLOWED: dict[str, set[str]] = {
    "wire": set(),  # how numbers cross JSON (stdlib only): every room may import it
    "records": {"wire"},
    "settings": set(),
    "matrix": {"records", "wire"},  # the YAML config and its matrix -> Cases
    "modelstore": {"records", "wire"},  # the versioned model store (fsspec)
    "runner": {"wire"},  # runs in the runner's (TF/GPU) interpreter: nothing else from this project
    "analysis": {"records", "wire"},
    "store": {"records", "settings", "wire"},
    "stages": {"records", "settings", "matrix", "modelstore", "analysis", "store", "runner", "wire"},
    "services": {"records", "settings", "matrix", "modelstore", "analysis", "store", "stages", "runner", "wire"},
    "cli": {"records", "settings", "matrix", "modelstore", "analysis", "store", "stages", "services", "runner", "wire"},
}
#: third-party packages a room may not import (any module of the room, at any depth).
FORBIDDEN_PACKAGES: dict[str, set[str]] = {
    room: {"airflow"} | ({"tensorflow", "keras"} if room != "runner" else set()) for room in ALLOWED
}
FORBIDDEN_PACKAGES["analysis"] |= {"sqlalchemy", "great_expectations", "xprof", "fsspec", "subprocess"}
FORBIDDEN_PACKAGES["runner"] |= {"sqlalchemy", "great_expectations", "xprof", "pandas", "scipy"}
#: what the Airflow side (outside tasks/) may import from tasks/.
OUTSIDE: dict[str, set[str]] = {
    "dags": {"stages", "store", "services"},
    "plugins": {"records", "store", "cli", "services", "wire"},
}


def room_of(module: str) -> str | None:
    """``tasks.store.reads`` -> ``store``; ``tasks.records`` -> ``records``; other packages -> None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "tasks" and len(parts) > 1 else None


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every absolute module a file imports (line, dotted name), at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            if node.module == "tasks":  # ``from tasks import stages``
                out += [(node.lineno, f"tasks.{a.name}") for a in node.names]
    return out


def violations(root: Path) -> list[str]:
    """Breaches of ALLOWED / FORBIDDEN_PACKAGES / OUTSIDE under ``root`` (a checkout), one line each."""
    found = []
    for path in sorted((root / "tasks").rglob("*.py")):
        rel = path.relative_to(root)
        room = rel.parts[1].removesuffix(".py") if len(rel.parts) > 2 else rel.stem
        if room == "__init__":
            continue
        for line, target in imports_of(path):
            other = room_of(target)
            top = target.split(".")[0]
            if other and other != room and other not in ALLOWED.get(room, set()):
                found.append(f"{rel}:{line}: {room} may not import {other} ({target})")
            if top in FORBIDDEN_PACKAGES.get(room, set()):
                found.append(f"{rel}:{line}: {room} may not import {top} ({target})")
    for folder, allowed in OUTSIDE.items():
        for path in sorted((root / folder).rglob("*.py")):
            for line, target in imports_of(path):
                other = room_of(target)
                if other and other not in allowed:
                    found.append(f"{path.relative_to(root)}:{line}: {folder}/ may not import {other} ({target})")
    return found


def test_every_module_is_in_a_known_room():
    rooms = {p.relative_to(ROOT / "tasks").parts[0].removesuffix(".py") for p in (ROOT / "tasks").rglob("*.py")}
    assert rooms - {"__init__"} == set(ALLOWED)


def test_the_house_keeps_its_rule():
    assert violations(ROOT) == []


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


@pytest.mark.parametrize(
    "rel, text, expected",
    [
        (
            "tasks/analysis/stats.py",
            "def f():\n    from tasks.store import session_scope\n",
            "tasks/analysis/stats.py:2: analysis may not import store (tasks.store)",
        ),
        (
            "tasks/store/reads.py",
            "from tasks.stages import compare\n",
            "tasks/store/reads.py:1: store may not import stages (tasks.stages)",
        ),
        (
            "tasks/store/reads.py",
            "def f():\n    from tasks.analysis.verdict import usable_baselines\n",
            "tasks/store/reads.py:2: store may not import analysis (tasks.analysis.verdict)",
        ),
        (
            "tasks/stages/pull.py",
            "import tasks.cli.main\n",
            "tasks/stages/pull.py:1: stages may not import cli (tasks.cli.main)",
        ),
        (
            "tasks/runner/process.py",
            "from tasks.records import Case\n",
            "tasks/runner/process.py:1: runner may not import records (tasks.records)",
        ),
        (
            "tasks/stages/parse.py",
            "def f():\n    import tensorflow as tf\n",
            "tasks/stages/parse.py:2: stages may not import tensorflow (tensorflow)",
        ),
        (
            "tasks/cli/main.py",
            "from airflow.sdk import dag\n",
            "tasks/cli/main.py:1: cli may not import airflow (airflow.sdk)",
        ),
        (
            "tasks/analysis/stats.py",
            "import sqlalchemy\n",
            "tasks/analysis/stats.py:1: analysis may not import sqlalchemy (sqlalchemy)",
        ),
        (
            "dags/perfwatch_profile.py",
            "from tasks.cli.main import app\n",
            "dags/perfwatch_profile.py:1: dags/ may not import cli (tasks.cli.main)",
        ),
        (
            "plugins/perfwatch/pages.py",
            "def f():\n    from tasks.stages import archive\n",
            "plugins/perfwatch/pages.py:2: plugins/ may not import stages (tasks.stages)",
        ),
    ],
)
def test_a_deliberate_violation_is_caught(tmp_path, rel, text, expected):
    write(tmp_path, "tasks/records.py", "")
    write(tmp_path, "tasks/stages/compare.py", "from tasks.analysis import stats\nfrom tasks.store import reads\n")
    assert violations(tmp_path) == []  # allowed imports pass
    write(tmp_path, rel, text)
    assert violations(tmp_path) == [expected]
