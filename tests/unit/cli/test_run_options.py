"""Every Case field a user sets for one run is a DAG Param and a ``perfwatch run`` option, with the Case's
default and limits (``tasks.stages.params.case_param_schema``); the DAG side is also checked on the parsed
DAG (``tests/system/test_dag.py``)."""

from __future__ import annotations

import pytest
import typer.main
from airflow.sdk import Param
from airflow.sdk.definitions.param import ParamValidationError

from tasks.cli.main import app
from tasks.records import Case
from tasks.stages.params import case_param_schema

DAG_ONLY = {"model", "case", "trigger"}


def _run_options() -> dict[str, object]:
    """``perfwatch run``'s parameters (option or argument name -> default)."""
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    return {p.name: p.default for p in command.params}


def test_every_param_field_is_a_run_option_with_the_case_default():
    dag, cli = case_param_schema("dag"), case_param_schema("cli")
    assert set(dag) <= set(cli) and not set(dag) & DAG_ONLY
    options = _run_options()
    assert set(options) == set(cli) | {"model"}, "a Case field without a `perfwatch run` option, or the reverse"
    for name, schema in cli.items():
        assert options[name] == schema["default"] == Case.model_fields[name].default, name
        assert schema["description"], name
    assert set(Case.model_fields) - set(cli) - {"model"}, "the config-only fields are neither"


@pytest.mark.parametrize("name", sorted(case_param_schema("dag")))
def test_a_dag_param_takes_the_case_default_and_refuses_what_the_case_refuses(name):
    schema = case_param_schema("dag")[name]
    param = Param(**schema)
    assert param.resolve(schema["default"]) == schema["default"]
    for bad in _out_of_limits(schema):
        with pytest.raises(ParamValidationError):
            param.resolve(bad)
        with pytest.raises(ValueError):
            Case.model_validate({"model": "m", name: bad})


def _out_of_limits(schema: dict) -> list:
    bad = []
    if "minimum" in schema:
        bad.append(schema["minimum"] - 1)
    if "maximum" in schema:
        bad.append(schema["maximum"] + 1)
    if "enum" in schema:
        bad.append("not-" + schema["enum"][0])
    if "pattern" in schema:
        bad.append("no pattern ::")
    if "minLength" in schema:
        bad.append("")
    return bad


@pytest.mark.parametrize(
    "name", sorted(n for n, s in case_param_schema("cli").items() if {"minimum", "maximum", "enum"} & set(s))
)
def test_a_run_option_refuses_what_the_case_refuses(home, cli, name):
    flag = "--" + name.replace("_", "-")
    for bad in _out_of_limits(case_param_schema("cli")[name]):
        res = cli("run", "m", flag, bad)
        assert res.exit_code == 2, (flag, bad, res.output)
        assert flag in res.output.replace("│", " "), res.output
