"""No import cycle anywhere in the tree (issue 37): ``make check`` runs this; it exits 1 naming each cycle.

Run: ``.venv/bin/python .ci/import_cycles.py`` (about a second). ``tests/unit/test_import_cycles.py`` runs it on
small trees with a deliberate cycle of each kind, so a check that stopped seeing one fails the tests.

The import graph is grimp's (the library behind import-linter): every ``import`` and ``from ... import`` of
every module of :data:`FOLDERS`, at the top of a file, under ``if TYPE_CHECKING:`` or inside a function. A lazy
import counts as much as one at the top: it closes the cycle the moment its function runs (the report marks it
"in a function"). A folder with an ``__init__.py`` (``tasks/``) is a package; one without (``bench/``, ``dags/``,
``plugins/``: scripts and Airflow's files, each run with its folder first on ``sys.path``) is read as a
namespace whose top-level import of a sibling file is that file: ``from gates import BackgroundLoad`` in
``bench/busy.py`` is an import of ``bench/gates.py``.

Two kinds of cycle fail it:

- a module cycle: modules that import each other, directly or through others (``a -> b -> a``), a package's
  ``__init__`` and its own modules included;
- a package cycle: sibling packages (or a package and a sibling module) that depend on each other although no
  chain of modules closes (``p.a.x -> p.b.y`` and ``p.b.z -> p.a.w``), at every depth, the folders themselves
  being siblings: import-linter's ``acyclic_siblings`` (grimp's ``nominate_cycle_breakers``).

Not seen: an import by a computed name (``importlib.import_module(f"tasks.cli.{name}")``). Import by name where
the name is known (``tasks/cli/main.py`` imports its command modules so); a computed import is a blind spot here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
#: every top-level folder of the checkout that holds Python (tests/unit/test_import_cycles.py checks the list)
FOLDERS = ("tasks", "plugins", "dags", "bench", "tests", "sql")


@dataclass(frozen=True)
class Cycle:
    """One cycle: its ``kind`` (``module`` or ``package``), the modules or packages around it (the first again
    at the end) and the imports that make it, one ``file:line: statement`` each."""

    kind: str
    path: tuple[str, ...]
    imports: tuple[str, ...]

    def __str__(self) -> str:
        return "\n".join([f"{self.kind} cycle: {' -> '.join(self.path)}", *(f"  {line}" for line in self.imports)])


@contextmanager
def _only_this_checkout(root: Path, folders: Sequence[str]) -> Iterator[None]:
    """``sys.path`` with ``root`` first and without any other directory holding one of ``folders``: another
    checkout on the path (a shared venv's editable install names its own) would add its ``bench/`` to this
    one's, a namespace package of both."""
    saved = sys.path[:]
    elsewhere = [
        p for p in saved if Path(p or ".").resolve() != root and any(Path(p or ".", f).is_dir() for f in folders)
    ]
    sys.path[:] = [str(root), *(p for p in saved if p not in elsewhere)]
    importlib.invalidate_caches()
    try:
        for folder in folders:
            spec = importlib.util.find_spec(folder)
            where = {Path(p).resolve() for p in spec.submodule_search_locations or []} if spec else set()
            if where != {root / folder}:
                raise RuntimeError(f"{folder!r} is not imported from {root / folder} alone: {sorted(map(str, where))}")
        yield
    finally:
        sys.path[:] = saved
        importlib.invalidate_caches()


def build(root: Path = ROOT, folders: Sequence[str] = FOLDERS) -> grimp.ImportGraph:
    """The import graph of ``folders`` under ``root``, a folder without ``__init__.py`` read as its scripts run
    (module docstring). Modules outside them are squashed leaves (``numpy``, ``airflow``)."""
    root = root.resolve()
    with _only_this_checkout(root, folders):
        graph = grimp.build_graph(*folders, include_external_packages=True, cache_dir=None)
    for folder in folders:
        if (root / folder / "__init__.py").exists():
            continue
        for name in sorted(m for m in graph.modules if "." not in m and graph.is_module_squashed(m)):
            if not ((root / folder / f"{name}.py").exists() or (root / folder / name / "__init__.py").exists()):
                continue
            for importer in sorted(graph.find_modules_that_directly_import(name)):
                if importer.partition(".")[0] != folder:
                    continue
                for d in graph.get_import_details(importer=importer, imported=name):
                    graph.add_import(
                        importer=importer,
                        imported=f"{folder}.{name}",
                        line_number=d["line_number"],
                        line_contents=d["line_contents"],
                    )
                graph.remove_import(importer=importer, imported=name)
    return graph


def find_cycles(root: Path = ROOT, folders: Sequence[str] = FOLDERS) -> list[Cycle]:
    """Every cycle under ``root``'s ``folders``: each module cycle once (the shortest through each of its
    imports), then each package cycle that no module cycle makes."""
    root = root.resolve()
    graph = build(root, folders)
    inside = sorted(m for m in graph.modules if not graph.is_module_squashed(m))

    @cache
    def nested_lines(module: str) -> frozenset[int]:
        """Lines of ``module``'s imports inside a function."""
        rel = Path(*module.split("."))
        path = next((p for p in (root / rel.with_suffix(".py"), root / rel / "__init__.py") if p.exists()), None)
        if path is None:
            return frozenset()
        tree = ast.parse(path.read_text(), filename=str(path))
        return frozenset(
            node.lineno
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(fn)
            if isinstance(node, ast.Import | ast.ImportFrom)
        )

    def described(importer: str, imported: str) -> list[str]:
        rel = Path(*importer.split("."))
        file = rel.with_suffix(".py") if (root / rel.with_suffix(".py")).exists() else rel / "__init__.py"
        return [
            f"{file}:{d['line_number']}: {d['line_contents']}"
            + (" (in a function)" if d["line_number"] in nested_lines(importer) else "")
            for d in graph.get_import_details(importer=importer, imported=imported)
        ]

    found: list[Cycle] = []
    seen: set[tuple[str, ...]] = set()
    for a in inside:
        for b in sorted(graph.find_modules_directly_imported_by(a)):
            back = None if graph.is_module_squashed(b) else graph.find_shortest_chain(importer=b, imported=a)
            if not back:
                continue
            ring = (a, *back[:-1])
            start = ring.index(min(ring))
            ring = ring[start:] + ring[:start]
            if ring in seen:
                continue
            seen.add(ring)
            steps = list(zip(ring, (*ring[1:], ring[0]), strict=True))
            found.append(Cycle("module", (*ring, ring[0]), tuple(s for x, y in steps for s in described(x, y))))

    def child(parent: str | None, module: str) -> str:
        """The child of ``parent`` (None: the folders' level) that is or holds ``module``; a module outside
        ``parent`` as it is."""
        if parent is None:
            return module.partition(".")[0]
        if not module.startswith(f"{parent}."):
            return module
        return f"{parent}.{module[len(parent) + 1 :].partition('.')[0]}"

    levels: list[tuple[str | None, list[str]]] = [(None, list(folders))]
    levels += [(p, [p]) for p in inside if graph.find_children(p)]
    for parent, packages in levels:
        for importer, imported in sorted(graph.nominate_cycle_breakers(*packages)):
            if graph.find_shortest_chain(importer=imported, imported=importer):
                continue  # on a module cycle, reported above
            upstream, downstream = child(parent, imported), child(parent, importer)
            back = graph.find_shortest_chain(importer=upstream, imported=downstream, as_packages=True) or ()
            around = [downstream, upstream, *(child(parent, m) for m in back[1:-1]), downstream]
            path = tuple(p for i, p in enumerate(around) if i == 0 or p != around[i - 1])
            lines = described(importer, imported)
            lines += [s for x, y in zip(back, back[1:], strict=False) for s in described(x, y)]
            found.append(Cycle("package", path, tuple(lines)))
    return found


def main() -> int:
    """Print each cycle and return 1, or say the tree has none and return 0."""
    cycles = find_cycles()
    for cycle in cycles:
        print(cycle)
    if cycles:
        print(f"{len(cycles)} import cycle(s) in {', '.join(FOLDERS)}: move what both sides need to the lower one")
        return 1
    print(f"no import cycle in {', '.join(f + '/' for f in FOLDERS)} (function-level imports included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
