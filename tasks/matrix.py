"""The benchmark matrix of the YAML config: one model entry, many cases.

A model entry of ``config/perfwatch.yaml`` may carry ``matrix:`` (a list of values per axis) and
``exclude:`` (partial combinations to leave out); it is expanded into one :class:`~tasks.records.Case`
per remaining combination, in the order the axes and values are written (the last axis varies
fastest)::

    models:
      - model: demo_mobilenet
        measured_steps: 100
        matrix:
          mode: [train, infer]
          batch_size: [8, 16]
          precision: [fp32, mixed_bfloat16]
          xla: [false, true]
        exclude:
          - {mode: infer, xla: true}            # 16 combinations, 4 left out: 12 cases
          - {precision: mixed_bfloat16, batch_size: 8}

Each case is named from its axes (``Case.name``: ``train-bs16-mixed_bfloat16-xla``) and has its own
history and baseline. The axes are the Case fields that change what is measured (``AXES``); ``devices:
[cpu, gpu]`` is the ``device`` axis (``train-bs16-cpu``, ``train-bs16-gpu``), and the config's ``queues:``
section says which Celery queue measures each kind (``tasks.stages.devices``).

An entry's ``metrics:`` line (the benchmarking guide's ``metrics: [throughput, memory_usage, step_time]``) is
not an axis: every case of the entry carries it (``Case.metrics``, checked by name against
``tasks.records.METRICS``) and it orders the figures its verdict line and summaries lead with; it is not part
of ``Case.name``, so it never splits a history.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tasks.records import Case

AXES: tuple[str, ...] = (
    "mode",
    "batch_size",
    "scenario",
    "precision",
    "xla",
    "strategy",
    "quantization",
    "deterministic",
    "device",
    "hardware",
)
"""Case fields a ``matrix:`` may list (each is part of ``Case.name``)."""

AXIS_ALIASES: dict[str, str] = {"devices": "device"}
"""Other spellings of an axis in ``matrix:`` and ``exclude:`` (``devices: [cpu, gpu]`` is the ``device`` axis)."""


def _unalias(m: Any) -> Any:
    return {AXIS_ALIASES.get(k, k): v for k, v in m.items()} if isinstance(m, Mapping) else m


ALL_CASES = "all"
"""The ``case`` Param value that selects every case of a model's config entries."""


class MatrixError(ValueError):
    """A ``matrix:`` / ``exclude:`` that cannot be expanded; the message names the entry and the fault."""


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _same(a: Any, b: Any) -> bool:
    """Equal as YAML values: ``True`` is not ``1`` (a bool axis never matches a number)."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _axes(matrix: Any, where: str) -> dict[str, list[Any]]:
    if not isinstance(matrix, Mapping) or not matrix:
        raise MatrixError(
            f"{where}: 'matrix' must map axes to lists of values, e.g. "
            "{batch_size: [8, 16], xla: [false, true]}; got " + repr(matrix)
        )
    axes: dict[str, list[Any]] = {}
    for axis, values in matrix.items():
        if axis == "metrics":
            raise MatrixError(
                f"{where}: 'metrics' is not a matrix axis: it says which figures every case's verdict line leads "
                "with; write it beside 'matrix', e.g. metrics: [throughput, memory_usage, step_time]"
            )
        if axis not in AXES:
            raise MatrixError(f"{where}: unknown matrix axis {axis!r}; the axes are {', '.join(AXES)}")
        if not isinstance(values, list) or not values:
            raise MatrixError(f"{where}: matrix axis {axis!r} must be a non-empty list of values, got {values!r}")
        if bad := next((v for v in values if not _is_scalar(v)), None):
            raise MatrixError(f"{where}: matrix axis {axis!r} holds {bad!r}; expected single values such as 16 or true")
        for i, v in enumerate(values):
            if any(_same(v, w) for w in values[:i]):
                raise MatrixError(f"{where}: matrix axis {axis!r} lists {v!r} twice")
        axes[str(axis)] = values
    return axes


def _excludes(exclude: Any, axes: dict[str, list[Any]], where: str) -> list[dict[str, Any]]:
    if exclude is None:
        return []
    if not isinstance(exclude, list):
        raise MatrixError(
            f"{where}: 'exclude' must be a list of partial combinations, e.g. "
            "[{precision: mixed_bfloat16, xla: false}]; got " + repr(exclude)
        )
    out = []
    for j, ex in enumerate(exclude):
        at = f"{where}: exclude[{j}]"
        if not isinstance(ex, Mapping) or not ex:
            raise MatrixError(f"{at} must map matrix axes to one value each, got {ex!r}")
        for axis, value in ex.items():
            if axis not in axes:
                raise MatrixError(
                    f"{at} names {axis!r}, which is not an axis of this entry's matrix "
                    f"({', '.join(axes)}): it matches no combination"
                )
            if not any(_same(value, v) for v in axes[axis]):
                raise MatrixError(
                    f"{at}: {axis}={value!r} is not a value of the matrix's {axis} list "
                    f"{axes[axis]!r}: it matches no combination"
                )
        out.append(dict(ex))
    return out


def _matches(combo: dict[str, Any], ex: dict[str, Any]) -> bool:
    return all(_same(combo[k], v) for k, v in ex.items())


def field_errors(fields: Mapping[str, Any], keys: Any) -> list[str]:
    """Pydantic's field-level errors of ``fields`` as a Case, for the fields named in ``keys`` only:
    ``"<field>=<value>: <message>"`` (an unknown field name: ``"<field>: not a Case field (did you mean
    <closest>?)"``). Errors between fields (a model validator's, e.g. quantization without tflite) are left out."""
    import difflib

    from pydantic import ValidationError

    keys = set(keys)
    try:
        Case.model_validate({"model": "m", **fields})
    except ValidationError as e:
        out = []
        for err in e.errors():
            name = err["loc"][0] if err["loc"] else None
            if not isinstance(name, str) or name not in keys:
                continue
            if err["type"] == "extra_forbidden":
                close = difflib.get_close_matches(str(name), list(Case.model_fields), n=1)
                out.append(f"{name}: not a Case field" + (f" (did you mean {close[0]}?)" if close else ""))
            else:
                out.append(f"{name}={fields[name]!r}: {err['msg']}")
        return out
    return []


def expand_entry(
    entry: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    *,
    where: str = "entry",
    overrides: Mapping[str, Any] | None = None,
) -> list[Case]:
    """The cases of one model entry of the config: one Case per combination of its ``matrix`` axes
    not matched by an ``exclude`` item, or the single Case the entry describes when it has no matrix.

    Args:
        entry: Case fields, plus optional ``matrix`` (axis -> non-empty list of values; axes in
            ``AXES``) and ``exclude`` (list of mappings axis -> value; a combination is left out
            when it has every value of one item).
        defaults: Case fields under the entry's own (the config's ``defaults:``).
        where: how error messages name the entry, e.g. ``config/perfwatch.yaml: models[0] (demo_mobilenet)``.
        overrides: Case fields over everything (e.g. a manual trigger's ``version``); may not be axes.

    Returns:
        The cases, in matrix order (the first axis varies slowest).

    Raises:
        MatrixError: ``matrix`` is not a mapping of non-empty lists, an axis is unknown or listed twice,
            an axis is both a plain field and a matrix axis, ``exclude`` names an axis or value the matrix
            does not have (it would match nothing), every combination is excluded, or a combination is
            not a valid Case (the message names the combination and the field, and suggests excluding it).
        ValueError: the entry without a matrix is not a valid Case (pydantic's message, naming the field).
    """
    if "matrix" in entry:  # the axes' other spellings (AXIS_ALIASES)
        ex = entry.get("exclude")
        entry = {**entry, "matrix": _unalias(entry["matrix"])}
        entry["exclude"] = [_unalias(e) for e in ex] if isinstance(ex, list) else ex
        if ex is None:
            del entry["exclude"]
    fields = {**(defaults or {}), **{k: v for k, v in entry.items() if k not in ("matrix", "exclude")}}
    if "matrix" not in entry:
        if entry.get("exclude") is not None:
            raise MatrixError(f"{where}: 'exclude' without a 'matrix' to exclude from")
        return [Case.model_validate({**fields, **(overrides or {})})]
    axes = _axes(entry["matrix"], where)
    if both := [a for a in axes if a in entry]:
        raise MatrixError(f"{where}: {', '.join(both)} is set both as a field and as a matrix axis; keep one")
    if clash := [a for a in axes if a in (overrides or {})]:
        raise MatrixError(f"{where}: {', '.join(clash)} is a matrix axis and cannot be overridden")
    own = {k: v for k, v in entry.items() if k not in ("matrix", "exclude")}
    if bad := field_errors(own, own):
        raise MatrixError(f"{where}: " + "; ".join(bad))
    for axis, values in axes.items():  # a mistyped value is a typo to fix, not a combination to exclude
        for value in values:
            if bad := field_errors({axis: value}, [axis]):
                raise MatrixError(f"{where}: matrix value " + "; ".join(bad))
    excludes = _excludes(entry.get("exclude"), axes, where)
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    kept = [c for c in combos if not any(_matches(c, ex) for ex in excludes)]
    if not kept:
        raise MatrixError(f"{where}: 'exclude' leaves out all {len(combos)} combinations of the matrix")
    cases = []
    for combo in kept:
        try:
            cases.append(Case.model_validate({**fields, **combo, **(overrides or {})}))
        except ValueError as e:
            raise MatrixError(
                f"{where}: the combination {combo} is not a valid case ({e}); fix the entry or add it to 'exclude'"
            ) from e
    return cases


def config_cases(data: Any, *, where: str, overrides: Mapping[str, Any] | None = None) -> list[Case]:
    """Every case of a parsed config (``{"defaults": {...}, "models": [entry, ...]}``), matrices
    expanded (:func:`expand_entry`), in config order.

    Raises:
        ValueError: the config is not a mapping with a ``models:`` list, an entry is invalid (named
            as ``<where>: models[<i>] (<model>)``), or two cases share a model and case name (they
            would share one history and one run identity).
    """
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise ValueError(f"{where}: expected a mapping with a 'models:' list of cases")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict) or "matrix" in defaults or "exclude" in defaults:
        raise ValueError(f"{where}: 'defaults:' must be a mapping of Case fields (a matrix belongs to a model entry)")
    if bad := field_errors(defaults, defaults):  # blamed on defaults, not on the first model entry
        raise ValueError(f"{where}: defaults: " + "; ".join(bad))
    cases: list[Case] = []
    first: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(data["models"]):
        at = f"{where}: models[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at} is invalid: expected a mapping of Case fields, got {entry!r}")
        try:
            found = expand_entry(entry, defaults, where=f"{at} ({entry.get('model')})", overrides=overrides)
        except MatrixError:
            raise
        except ValueError as e:
            raise ValueError(f"{at} is invalid: {e}") from e
        for c in found:
            key = (c.model, c.name)
            if key in first:
                raise ValueError(
                    f"{at}: case {c.name!r} of model {c.model!r} is already planned by "
                    f"models[{first[key]}]; each case of a model needs its own name (it keys its "
                    "history and baseline)"
                )
            first[key] = i
        cases.extend(found)
    return cases


def select_cases(cases: list[Case], model: str, case: str, *, where: str) -> list[Case]:
    """The cases a manual trigger names: of ``model``'s config cases, the one called ``case``
    (``Case.name``), or all of them for ``case == "all"`` (``ALL_CASES``).

    Raises:
        ValueError: the config has no case of ``model`` (names the models it has), or none called
            ``case`` (names the model's cases).
    """
    mine = [c for c in cases if c.model == model]
    if not mine:
        models = sorted({c.model for c in cases})
        raise ValueError(
            f"{where} has no entry for model {model!r} (models: {', '.join(models) or 'none'}); "
            f"the case Param {case!r} names a case of the config"
        )
    if case == ALL_CASES:
        return mine
    picked = [c for c in mine if c.name == case]
    if not picked:
        raise ValueError(
            f"model {model!r} has no case {case!r} in {where}; its cases: "
            f"{', '.join(c.name for c in mine)} (or {ALL_CASES!r} for every one)"
        )
    return picked


def load_config(path: str | Path, *, overrides: dict[str, Any] | None = None) -> list[Case]:
    """The cases of the nightly schedule from the YAML config (``models:`` list of Case fields under
    ``defaults:``; an entry's ``matrix:``/``exclude:`` expands into one case per combination,
    below). ``overrides`` (Case fields, not matrix axes) apply to every case.

    Raises:
        FileNotFoundError: no config at ``path``.
        ValueError: the YAML is not a mapping with a ``models`` list, an entry or its matrix is
            invalid (the message names the entry index, model and field), or two cases of a model
            share a name.
    """
    return config_cases(read_yaml(path), where=str(path), overrides=overrides)


#: PyYAML's libyaml-backed safe loader where PyYAML was built with it (its wheels are), else the pure-Python one:
#: the same documents, ~10x faster (a 100-model config: the DAG file reads it at every parse)
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | Path) -> Any:
    """The YAML document at ``path`` (safe loading: plain data only), read with libyaml where PyYAML has it.
    ``path`` is a local path or any fsspec URI (``s3://bucket/perfwatch.yaml``: every host of a fleet reads the
    one config, as it reads every other artifact).

    Raises:
        FileNotFoundError: nothing at ``path``. yaml.YAMLError: not YAML (the message names the file and line).
        OSError: the store holding ``path`` could not be read.
    """
    if not is_uri(path):
        with open(path, encoding="utf-8") as f:  # a file object: YAML's errors then name the file
            return yaml.load(f, Loader=_LOADER)  # noqa: S506 - a safe loader (SafeLoader or its libyaml twin)
    import fsspec

    with fsspec.open(str(path), "rt", encoding="utf-8") as f:
        named = _Named(f.read())
    named.name = str(path)  # YAML's errors name the URI, not "<unicode string>"
    return yaml.load(named, Loader=_LOADER)  # noqa: S506 - a safe loader (SafeLoader or its libyaml twin)


class _Named(io.StringIO):
    """Text read from a URI, named by it (PyYAML takes a stream's ``name`` for its error messages)."""

    name = "<config>"


def is_uri(path: str | Path) -> bool:
    """Whether ``path`` is a URI with a protocol (``s3://...``, ``file:///...``) rather than a local path."""
    return isinstance(path, str) and "://" in path


def config_exists(path: str | Path) -> bool:
    """Whether there is a file at ``path`` (a local path or an fsspec URI, as :func:`read_yaml` reads).

    Raises:
        OSError: the store holding ``path`` could not be asked.
    """
    if not is_uri(path):
        return Path(path).is_file()
    import fsspec.core

    fs, p = fsspec.core.url_to_fs(str(path))
    return bool(fs.isfile(p))
