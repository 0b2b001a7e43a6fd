"""What ``--help`` shows is written for users: no reStructuredText markup, no test files, no module paths of
perfwatch's code (those stay in comments and developer docstrings that typer does not show), and each fact
once."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from tasks.cli.main import app


def _commands() -> list[list[str]]:
    """Every command and group of the app, the app itself first (``[]``)."""

    def walk(cmd, path):
        yield path
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    return list(walk(typer.main.get_command(app), []))


def _help(path: list[str]) -> str:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "perfwatch")
def test_help_has_no_markup_test_paths_or_module_paths(path):
    out = _help(path)
    leaks = [ln.strip() for ln in out.splitlines() if re.search(r"``|tests/|tasks\.", ln)]
    assert not leaks, leaks


@pytest.mark.parametrize("command", ["run", "gate"])
def test_the_exit_codes_are_printed_once(command):
    out = " ".join(_help([command]).split()).lower()
    assert out.count("exit code") == 1 and out.count("1 regression") == 1, out
