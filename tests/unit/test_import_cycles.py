"""No import cycle anywhere in the tree: ``.ci/import_cycles.py`` (``make check``) finds none in this checkout,
and on small trees with a deliberate cycle of each kind (module level, in a function, between a package and its
own module, among a folder of scripts, between packages, between the folders) it names that cycle, so a check
that went blind to one fails here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT as ROOT

_spec = importlib.util.spec_from_file_location("ci_import_cycles", ROOT / ".ci" / "import_cycles.py")
assert _spec is not None and _spec.loader is not None
import_cycles = sys.modules.setdefault("ci_import_cycles", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(import_cycles)

#: folder names of the small trees (none of them is a folder of this checkout or an imported module)
FOLDERS = ("pkg", "other", "scripts")


def test_the_tree_has_no_cycle():
    assert [str(c) for c in import_cycles.find_cycles()] == []


def test_every_folder_that_holds_python_is_checked():
    """A new top-level folder of Python is checked too (``.ci/`` holds the check itself, not importable)."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    folders = {Path(p).parts[0] for p in tracked if len(Path(p).parts) > 1}
    assert folders - {".ci"} == set(import_cycles.FOLDERS)
    assert not [p for p in tracked if len(Path(p).parts) == 1], "a module at the top of the checkout is not checked"


def test_make_check_runs_it():
    recipe = subprocess.run(
        ["make", "-n", "--no-print-directory", "check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert recipe.returncode == 0, recipe.stderr
    assert "python .ci/import_cycles.py" in recipe.stdout


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


#: a tree without a cycle: a package, a subpackage, a folder of scripts importing each other one way
ACYCLIC = {
    "pkg/__init__.py": "",
    "pkg/low.py": "",
    "pkg/high.py": "from pkg import low\n",
    "pkg/sub/__init__.py": "from pkg.sub.inner import f\n",
    "pkg/sub/inner.py": "from pkg.low import x\n\ndef f():\n    from pkg import high\n",
    "other/__init__.py": "",
    "other/uses.py": "from pkg.sub import f\n",
    "scripts/gates.py": "import pkg.high\n",
    "scripts/busy.py": "import json\nfrom gates import BackgroundLoad\n",
}


def cycles_in(root: Path, files: dict[str, str]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    write(root, {**ACYCLIC, **files})
    return [(c.kind, c.path, c.imports) for c in import_cycles.find_cycles(root, FOLDERS)]


def test_a_tree_without_a_cycle_passes(tmp_path):
    assert cycles_in(tmp_path, {}) == []


@pytest.mark.parametrize(
    "files, expected",
    [
        (
            {"pkg/low.py": "from pkg.high import y\n"},
            (
                "module",
                ("pkg.high", "pkg.low", "pkg.high"),
                ("pkg/high.py:1: from pkg import low", "pkg/low.py:1: from pkg.high import y"),
            ),
        ),
        (
            {"pkg/low.py": "import os\n\n\ndef f():\n    import pkg.high\n"},
            (
                "module",
                ("pkg.high", "pkg.low", "pkg.high"),
                ("pkg/high.py:1: from pkg import low", "pkg/low.py:5: import pkg.high (in a function)"),
            ),
        ),
        (
            {"pkg/sub/inner.py": "import pkg.sub\n"},
            (
                "module",
                ("pkg.sub", "pkg.sub.inner", "pkg.sub"),
                ("pkg/sub/__init__.py:1: from pkg.sub.inner import f", "pkg/sub/inner.py:1: import pkg.sub"),
            ),
        ),
        (
            {"scripts/gates.py": "def load():\n    from busy import TFJobs\n"},
            (
                "module",
                ("scripts.busy", "scripts.gates", "scripts.busy"),
                (
                    "scripts/busy.py:2: from gates import BackgroundLoad",
                    "scripts/gates.py:2: from busy import TFJobs (in a function)",
                ),
            ),
        ),
        (
            {"pkg/low.py": "from other import uses\n", "pkg/sub/inner.py": "from pkg.low import x\n"},
            (
                "module",
                ("other.uses", "pkg.sub", "pkg.sub.inner", "pkg.low", "other.uses"),
                (
                    "other/uses.py:1: from pkg.sub import f",
                    "pkg/sub/__init__.py:1: from pkg.sub.inner import f",
                    "pkg/sub/inner.py:1: from pkg.low import x",
                    "pkg/low.py:1: from other import uses",
                ),
            ),
        ),
    ],
    ids=["module-level", "in-a-function", "package-and-its-module", "scripts", "across-folders"],
)
def test_a_deliberate_module_cycle_is_named(tmp_path, files, expected):
    assert cycles_in(tmp_path, files) == [expected]


def test_a_cycle_of_packages_that_no_chain_of_modules_closes_is_named(tmp_path):
    """``pkg.sub`` needs ``pkg.low`` (``inner``) and ``pkg.low`` needs ``pkg.sub`` (through ``pkg.sub.leaf``,
    which imports nothing back): no module reaches itself, the two siblings still depend on each other."""
    found = cycles_in(tmp_path, {"pkg/sub/leaf.py": "", "pkg/low.py": "from pkg.sub import leaf\n"})
    assert [(kind, path) for kind, path, _ in found] == [("package", ("pkg.low", "pkg.sub", "pkg.low"))]
    assert found[0][2] == ("pkg/low.py:1: from pkg.sub import leaf", "pkg/sub/inner.py:1: from pkg.low import x")


def test_a_cycle_between_the_folders_is_named(tmp_path):
    found = cycles_in(tmp_path, {"other/leaf.py": "", "pkg/low.py": "from other import leaf\n"})
    assert [(kind, path) for kind, path, _ in found] == [("package", ("pkg", "other", "pkg"))]


def test_another_checkout_on_the_path_is_left_out(tmp_path, monkeypatch):
    """Another checkout's ``scripts/`` on ``sys.path`` (a shared venv's editable install) is left out of the graph,
    not merged into this one's as a namespace package of both."""
    write(tmp_path / "here", ACYCLIC)
    write(tmp_path / "there", {**ACYCLIC, "scripts/gates.py": "from busy import x\n"})
    monkeypatch.syspath_prepend(str(tmp_path / "there"))
    assert import_cycles.find_cycles(tmp_path / "here", FOLDERS) == []
    assert len(import_cycles.find_cycles(tmp_path / "there", FOLDERS)) == 1


def test_a_folder_already_imported_from_elsewhere_stops_the_check(tmp_path, monkeypatch):
    """The graph would be another tree's: the check says so instead of passing on it."""
    write(tmp_path / "here", ACYCLIC)
    write(tmp_path / "there", ACYCLIC)
    there = tmp_path / "there" / "pkg"
    spec = importlib.util.spec_from_file_location("pkg", there / "__init__.py", submodule_search_locations=[str(there)])
    assert spec is not None
    monkeypatch.setitem(sys.modules, "pkg", importlib.util.module_from_spec(spec))
    with pytest.raises(RuntimeError, match="is not imported from"):
        import_cycles.find_cycles(tmp_path / "here", FOLDERS)
