"""The Case fields a user sets for one run, as JSON schemas: the DAG's Params (its trigger form) and the
options of ``perfwatch run`` are these: a new Case field is a DAG Param unless its ``json_schema_extra`` marks it
``tasks.records.NOT_A_PARAM``, and every field is a ``perfwatch run`` option, which
``tests/unit/cli/test_run_options.py`` asks for (a field marked ``{"set_in": ["config"]}`` would be set in the YAML
config only; none is). Here, not in ``tasks.records``, because the DAG file may import ``tasks.stages`` but not the
records."""

from __future__ import annotations

from typing import Any, Literal

from tasks.records import Case


def _plain_schema(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON schema as the Airflow trigger form reads it: ``$ref`` resolved, ``X | None`` as
    ``type: [null, X]``, no titles, no perfwatch marks."""
    if "$ref" in schema:
        target = {k: v for k, v in defs[schema["$ref"].rsplit("/", 1)[-1]].items() if k != "description"}
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    out = {k: v for k, v in schema.items() if k not in ("title", "set_in", "anyOf")}
    options = schema.get("anyOf", [])
    if len(options) == 2 and {"type": "null"} in options:
        (other,) = (o for o in options if o != {"type": "null"})
        other = _plain_schema(other, defs)
        out = {**other, **out, "type": ["null", other["type"]]}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _plain_schema(out[key], defs)
    if "properties" in out:
        out["properties"] = {k: _plain_schema(v, defs) for k, v in out["properties"].items()}
    return out


def case_param_schema(where: Literal["dag", "cli"] = "dag") -> dict[str, dict[str, Any]]:
    """The Case fields a user sets for one run, each as a JSON schema (``type``, with ``"null"`` where the field
    may be None; ``enum``, ``pattern``, ``minimum``/``maximum``, ``minLength``/``maxLength`` from the field;
    ``default``; ``description``), from ``Case.model_json_schema()``: ``where="dag"`` the DAG's Params,
    ``"cli"`` the options of ``perfwatch run``. ``model`` is neither (the DAG's own Param may be empty, the
    command's an argument); a field marked ``NOT_A_PARAM`` is an option but not a Param (one whose ``set_in``
    lacks ``cli`` would be neither). E.g. ``case_param_schema()["batch_size"]`` is
    ``{"default": 16, "description": ..., "maximum": 65536, "minimum": 1, "type": "integer"}``."""
    full = Case.model_json_schema()
    defs = full.get("$defs", {})
    return {
        name: _plain_schema(prop, defs)
        for name, prop in full["properties"].items()
        if name != "model" and where in prop.get("set_in", ["config", "cli", "dag"])
    }
