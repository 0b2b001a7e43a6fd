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
    assert set(Case.model_fields) - set(cli) == {"model"} | CONFIG_ONLY


#: Case fields set in the YAML config only (no ``perfwatch run`` option); the manual (docs/models.md) names each
#: with its reason
CONFIG_ONLY: set[str] = set()


def test_the_manuals_claim_every_case_field_has_its_option_holds():
    """The manual's "Models, inputs and modes" (docs/models.md): "every Case field has its option (perfwatch run
    --help)"."""
    from pathlib import Path

    from typer.testing import CliRunner

    page = Path(__file__).resolve().parents[3] / "docs" / "models.md"
    assert "every Case field has its option (perfwatch run --help)" in " ".join(page.read_text().split())
    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    missing = [f for f in Case.model_fields if f != "model" and f"--{f.replace('_', '-')}" not in shown]
    assert sorted(missing) == sorted(CONFIG_ONLY), missing


def test_the_new_options_reach_the_case(home, cli, monkeypatch):
    """Options that were config-only before reach the Case the stages run (telemetry, seed, verdict, label)."""
    from tasks.stages import pipeline

    version = home / "models" / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.keras").write_bytes(b"not read: run_case is replaced")
    seen = {}

    def capture(ctx, settings=None):
        seen["case"] = ctx.case
        raise RuntimeError("captured")

    monkeypatch.setattr(pipeline, "run_case", capture)
    res = cli(
        "run", "m", "--version", "1", "--mode", "infer", "--scenario", "server", "--target-qps", "50",
        "--telemetry-interval-ms", "1000", "--seed", "7", "--deterministic", "--tolerance", "0.1",
        "--confidence", "0.95", "--label", "slow pipeline", "--server-min-duration-s", "5", "--paired-blocks", "40",
        "--no-auto-accept", "--metrics", "latency,throughput",
    )  # fmt: skip
    assert res.exit_code == 2 and "captured" in res.output, res.output
    c = seen["case"]
    assert (c.telemetry_interval_ms, c.seed, c.deterministic, c.tolerance, c.confidence) == (1000, 7, True, 0.1, 0.95)
    assert (c.label, c.server_min_duration_s, c.paired_blocks, c.auto_accept) == ("slow pipeline", 5.0, 40, False)
    assert c.metrics == ["latency", "throughput"]
    res = cli("run", "m", "--version", "1", "--mode", "tflite", "--tflite-threads", "0")
    assert res.exit_code == 2 and "--tflite-threads" in res.output.replace("│", " "), res.output


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
