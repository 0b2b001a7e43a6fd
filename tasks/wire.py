"""How numbers cross JSON: the one rule for every record that leaves a process or enters the store.

JSON (RFC 8259) has no NaN or infinities. Python's ``json`` writes them as the tokens ``NaN`` and
``Infinity``, which PostgreSQL's ``json`` type and Airflow's HTTP API (the XCom between tasks) reject,
and pydantic's default writes them as ``null`` (pydantic/pydantic#7007), which reads back as "missing".
perfwatch writes a non-finite float as one of the strings of :data:`NONFINITE` (``"NaN"``,
``"Infinity"``, ``"-Infinity"``: pydantic's ``ser_json_inf_nan="strings"``, JavaScript's ``String(x)``)
and reads those strings back as the float; finite floats are written as Python's shortest round-trip
text, so ``1e-300`` and ``-0.0`` come back bit-equal. Readers also accept the ``NaN``/``Infinity`` tokens
that files and rows written before this rule hold.

Where a record says its type, the type decides (a ``str`` field keeps ``"NaN"`` as text, a ``float`` field
reads it as the number). Where it does not (``dict[str, Any]`` evidence, a JSON column of the store), a
string that is exactly one of :data:`NONFINITE` reads back as the number.

This module imports nothing from ``tasks/``: the runner (in its own interpreter), the records, the store
and the stages all use it (``tasks/__init__.py``).
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

#: the JSON text of each non-finite float, and the float it reads back as
NONFINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
#: pydantic's ``ser_json_inf_nan`` that writes :data:`NONFINITE`'s strings (every record base sets it)
PYDANTIC_INF_NAN: Literal["strings"] = "strings"


def _text(x: float) -> str:
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def encode_object(obj: dict[str, Any]) -> dict[str, Any]:
    """:func:`encode` of a JSON object (a record's ``model_dump(mode="json")``): a dict again."""
    return {k: encode(v) for k, v in obj.items()}


def encode(obj: Any) -> Any:
    """``obj`` (JSON-like: dicts, lists, tuples, scalars) with every non-finite float, at any depth, as its
    :data:`NONFINITE` string; tuples become lists. Everything else is returned as it is."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else _text(obj)
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [encode(v) for v in obj]
    return obj


def decode(obj: Any) -> Any:
    """The inverse of :func:`encode`: every string that is exactly a key of :data:`NONFINITE`, at any depth of
    dicts and lists, as its float. Everything else is returned as it is."""
    if isinstance(obj, str):
        return NONFINITE.get(obj, obj)
    if isinstance(obj, dict):
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``obj`` as strict JSON text (no ``NaN``/``Infinity`` tokens: non-finite floats as :data:`NONFINITE`'s
    strings). ``kwargs`` go to :func:`json.dumps` (``indent``, ``sort_keys``, ``default``, ...).

    Raises:
        TypeError: a value JSON cannot hold and ``default`` does not convert (as :func:`json.dumps`).
    """
    return json.dumps(encode(obj), allow_nan=False, **kwargs)


def loads(text: str | bytes) -> Any:
    """JSON text as Python values, :data:`NONFINITE`'s strings (and the legacy ``NaN``/``Infinity`` tokens)
    as floats.

    Raises:
        json.JSONDecodeError: ``text`` is not JSON.
    """
    return decode(json.loads(text))


def decode_untyped(annotations: Mapping[str, Any], data: Any) -> Any:
    """A record's input ``data`` (a mapping of field name to value, as read from JSON) with the value of each
    field whose annotation in ``annotations`` is :func:`untyped` decoded (:func:`decode`); typed fields, unknown
    keys and input that is not a mapping are left to the record's own validation."""
    if not isinstance(data, Mapping):
        return data
    return {k: decode(v) if k in annotations and untyped(annotations[k]) else v for k, v in data.items()}


def untyped(annotation: Any) -> bool:
    """Whether a field annotated ``annotation`` may hold values of no declared type (``Any`` anywhere in it,
    e.g. ``dict[str, Any] | None``): where :func:`decode` must turn :data:`NONFINITE`'s strings back into
    floats, because no type will."""
    if annotation is Any:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        args = args[:1]
    elif not args and isinstance(annotation, types.UnionType):  # pragma: no cover - get_args covers it
        args = annotation.__args__
    return any(untyped(a) for a in args)
