"""What would new hardware gain? The environments one case was measured on, side by side.

Pure functions over the store's rows (``tasks.store.queries.hardware_inputs``): per case, one model version (never
an average over versions: a new version's step time is no hardware's doing), and per environment (comparability
key) the runs, the median step time (ms, our timer: the median of the runs' medians), throughput (the runs'
median, over the runs of the newest run's definition only: ``runs.throughput_def``,
:func:`tasks.records.throughputs_of_one_definition`; never a median across two definitions), peak memory (bytes,
the largest: the device's where measured, else the runner's RSS), J/example (the median of the telemetry
summaries' ``energy_per_example_j``, where power was measured) and the ratio of its step time against a reference
environment's with an interval: the ratio of medians of the two environments' pooled measured step times with a
percentile bootstrap (:func:`tasks.analysis.stats.median_ratio_ci`; it counts step-to-step noise only, not the
drift between processes, so with one run per environment the interval is too narrow by that drift: ``runs`` says
how many went in). Below 1: faster than the reference.

Which version: the one given, else per case the newest measured on every environment the case was measured on
(:func:`compared_version`; where none was, the newest measured on the most of them); an environment without a
run of it is left out, with a note that says so.

An environment that differs from the reference in more than the hardware (TF version, CUDA/cuDNN build,
driver, packages, performance variables: a comparability field of ``tasks.analysis.environment`` outside
:data:`HARDWARE_FIELDS`) is flagged with what differs: its ratio is not the hardware's alone.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.analysis.environment import diff_fingerprints
from tasks.analysis.stats import median_ratio_ci
from tasks.records import throughput_definition_text, throughputs_of_one_definition

#: comparability fields that describe the hardware itself (dotted-path prefixes): a difference here is what
#: the comparison is about; any other comparability difference is flagged
HARDWARE_FIELDS: tuple[str, ...] = ("gpu.count", "gpu.devices.", "host.cpu_model", "host.cpu_count_", "device.")

_DEVICE_PART = re.compile(r"-(cpu|gpu|tpu)(-[a-z0-9_.]+)*(?=(-in[0-9a-f]{8})?$)")


def section(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """Section ``name`` of fingerprint record ``data``; an empty mapping where missing or not a mapping."""
    got = data.get(name)
    return got if isinstance(got, Mapping) else {}


def base_case_name(name: str) -> str:
    """``name`` without its device or hardware part (``train-bs16-gpu-h100`` -> ``train-bs16``;
    ``Case.name``): the same case on any hardware."""
    return _DEVICE_PART.sub("", name, count=1)


def is_hardware_field(path: str) -> bool:
    """Whether dotted ``path`` describes the hardware (:data:`HARDWARE_FIELDS`)."""
    return path.startswith(HARDWARE_FIELDS)


def hardware_label(data: Mapping[str, Any]) -> str:
    """A short name of the device that measured, from fingerprint ``data``: the ``device`` section's kind
    and names, else the visible GPUs' names, else the CPU model."""
    dev, gpu, host = (section(data, name) for name in ("device", "gpu", "host"))
    if dev and dev.get("names"):
        names = [str(n) for n in dev["names"]]
        kind = str(dev.get("kind", "?"))
    elif isinstance(gpu.get("count"), int) and gpu["count"] > 0:
        names, kind = [str(d.get("name")) for d in gpu.get("devices") or [] if isinstance(d, Mapping)], "gpu"
    else:
        names, kind = [str(host.get("cpu_model", "unknown"))], "cpu"
    counted = sorted({n: names.count(n) for n in names}.items())
    return f"{kind}: " + ", ".join(f"{c} x {n}" if c > 1 else n for n, c in counted)


def non_hardware_changes(reference: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """The comparability fields (other than the hardware's) where ``other`` differs from ``reference``, as
    ``"<field>: <old> -> <new>"``, sorted by field; empty when they differ in the hardware only."""
    return [
        f"{c.field}: {c.old} -> {c.new}"
        for c in diff_fingerprints(dict(reference), dict(other))
        if c.affects_comparability and not is_hardware_field(c.field)
    ]


def version_order(version: str) -> tuple[int, int, str]:
    """Sort key of model versions, oldest first: integer versions (a model store's ``1``, ``2``, ``10``) by number,
    after any other (a ``keras.applications`` version ``keras3.x-<hash>``), which sort by text."""
    return (1, int(version), "") if version.isdigit() else (0, 0, version)


def compared_version(
    envs_of: Mapping[str, set[str]], *, version: str | None = None, within: str | None = None
) -> str | None:
    """The model version a case's environments are compared at.

    Args:
        envs_of: per version, the environments (comparability keys) with a run of it.
        version: the version asked for (``--version``); returned when measured, else None.
        within: an environment the version must have been measured on (the reference given), or None.

    Returns:
        ``version`` if given (None where not measured, or not on ``within``); else, among the versions
        measured (on ``within``, when given), the one measured on the most environments, the newest
        (:func:`version_order`) among those: the newest measured on every environment where one is. None
        when there is none.
    """
    if version is not None:
        ok = version in envs_of and (within is None or within in envs_of[version])
        return version if ok else None
    candidates = [v for v, keys in envs_of.items() if within is None or within in keys]
    if not candidates:
        return None
    return max(candidates, key=lambda v: (len(envs_of[v]), version_order(v)))


@dataclass(frozen=True)
class SideBySide:
    """:func:`side_by_side`'s answer.

    Attributes:
        rows: one dict per case and environment, at the case's compared version (see :func:`side_by_side`).
        notes: one line each: which version a case with several is compared at and which others were measured,
            and every environment left out for having no run of that version.
    """

    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Choice:
    """One case's selection: its environments' rows (``all_envs``, by comparability key), their fingerprint
    records and labels, the reference given (``given``), the versions measured and where (``envs_of``), and the
    version compared (``chosen``; None where the version asked for was not measured)."""

    case: str
    all_envs: dict[str, list[Mapping[str, Any]]]
    data: dict[str, Mapping[str, Any]]
    labels: dict[str, str]
    given: str | None
    envs_of: dict[str, set[str]]
    chosen: str | None

    @property
    def by_env(self) -> dict[str, list[Mapping[str, Any]]]:
        """The rows of the compared version, per environment that has one."""
        picked = {k: [r for r in rs if str(r["version"]) == self.chosen] for k, rs in self.all_envs.items()}
        return {k: rs for k, rs in picked.items() if rs}

    @property
    def reference(self) -> str:
        """The reference environment: the one given, else the first measured at the compared version."""
        by_env = self.by_env
        return self.given or min(by_env, key=lambda k: min(int(r["run_id"]) for r in by_env[k]))


def _choices(
    rows: Sequence[Mapping[str, Any]],
    envs: Mapping[int, Mapping[str, Any]],
    reference: str | None,
    version: str | None,
) -> list[_Choice]:
    """Per case (``base_case_name``), what :func:`side_by_side` compares (see there; same arguments).

    Raises:
        ValueError: ``reference`` matches no environment of a case, or more than one (names them).
    """
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for r in rows:
        groups.setdefault(base_case_name(str(r["case_name"])), {}).setdefault(str(r["env_key"]), []).append(r)
    out = []
    for case, all_envs in groups.items():
        data = {k: envs.get(int(rs[-1]["environment_id"]), {}) for k, rs in all_envs.items()}
        labels = {k: hardware_label(d) for k, d in data.items()}
        given = None
        if reference is not None:
            hits = [k for k in all_envs if k.startswith(reference) or reference.lower() in labels[k].lower()]
            if len(hits) != 1:
                shown = "; ".join(f"{k} ({labels[k]})" for k in all_envs)
                raise ValueError(
                    f"--reference {reference!r} matches {len(hits)} environments of case {case}; "
                    f"expected one of: {shown}"
                )
            given = hits[0]
        envs_of: dict[str, set[str]] = {}
        for k, rs in all_envs.items():
            for r in rs:
                envs_of.setdefault(str(r["version"]), set()).add(k)
        chosen = compared_version(envs_of, version=version, within=given)
        out.append(_Choice(case, all_envs, data, labels, given, envs_of, chosen))
    return out


def compared_runs(
    rows: Sequence[Mapping[str, Any]],
    envs: Mapping[int, Mapping[str, Any]],
    *,
    reference: str | None = None,
    version: str | None = None,
) -> set[int]:
    """The ``run_id`` of every row whose measured step times :func:`side_by_side` (same arguments; no step times
    needed) pools: the runs of each case's compared version, on every environment. A caller reads the step
    samples of these runs only (``perfwatch hardware``: not every run of every version).

    Raises:
        ValueError: as :func:`side_by_side` for ``reference``.
    """
    return {int(r["run_id"]) for c in _choices(rows, envs, reference, version) for rs in c.by_env.values() for r in rs}


def side_by_side(
    rows: Sequence[Mapping[str, Any]],
    envs: Mapping[int, Mapping[str, Any]],
    steps: Mapping[int, Sequence[float]],
    *,
    reference: str | None = None,
    version: str | None = None,
    confidence: float = 0.95,
) -> SideBySide:
    """One row per case (``base_case_name``) and environment at one model version, each against the case's
    reference environment at that version. Runs of other versions never enter a row: a median of the
    medians of v1 and v2 is a figure no run measured.

    Args:
        rows: the hardware query's rows (``run_id``, ``case_name``, ``env_key``, ``environment_id``,
            ``version``, ``median_step_ms``, ``throughput_eps``, ``throughput_def``, ``peak_device_bytes``,
            ``peak_rss_bytes``, ``energy_per_example_j``), oldest first within a case and key.
        envs: fingerprint record of each ``environment_id``.
        steps: measured step times (ms) of each ``run_id``.
        reference: the reference environment: a comparability-key prefix, or text in its hardware label
            (``H100``); None: the environment first measured at the compared version.
        version: the model version to compare; None: per case, :func:`compared_version` (the newest measured
            on every environment; with ``reference``, among those measured there).
        confidence: level of the ratio's interval.

    Returns:
        :class:`SideBySide`: ``rows``, dicts with ``case``, ``version``, ``env_key``, ``hardware`` (label),
        ``runs``, ``median_step_ms``, ``throughput_eps`` (the median of the runs of the newest run's
        definition), ``throughput_def`` (that definition), ``peak_memory_bytes``, ``energy_per_example_j``,
        ``reference`` (bool), ``ratio``, ``ratio_low``, ``ratio_high`` (step time / the reference's; None where
        either side has fewer than 5 steps), ``method`` and ``differs_beyond_hardware`` (list of changes, empty
        if none); ``notes`` (the version compared where a case has several, environments left out).

    Raises:
        ValueError: ``reference`` matches no environment of a case, or more than one (names them); ``version``
            was measured in no case (or not on the reference), naming the versions there are.
    """
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    missing: list[str] = []
    for choice in _choices(rows, envs, reference, version):
        case, all_envs, data, labels, given = choice.case, choice.all_envs, choice.data, choice.labels, choice.given
        envs_of, chosen = choice.envs_of, choice.chosen
        versions = sorted(envs_of, key=version_order)
        if chosen is None:  # only where a version is asked for
            have = [v for v in versions if given is None or given in envs_of[v]]
            on = f" on the reference {labels[given]}" if given is not None else ""
            missing.append(f"{case}: no run of version {version}{on} (measured: {', '.join(have)})")
            continue
        by_env = choice.by_env
        if version is None and len(versions) > 1:
            every = len(envs_of[chosen]) == len(all_envs)
            most = f"the most environments ({len(by_env)} of {len(all_envs)})"
            notes.append(
                f"{case}: compared at version {chosen}, the newest measured on "
                + ("every environment" if every else most + (", the reference among them" if given else ""))
                + f"; also measured: {', '.join(v for v in versions if v != chosen)} (--version V compares another)"
            )
        for k in all_envs:
            if k not in by_env:
                theirs = sorted({str(r["version"]) for r in all_envs[k]}, key=version_order)
                notes.append(
                    f"{case}: {labels[k]} ({k[:12]}) has no run of version {chosen} (it measured "
                    f"{', '.join(theirs)}): left out"
                )
        ref = choice.reference
        ref_steps = [ms for r in by_env[ref] for ms in steps.get(int(r["run_id"]), [])]
        for key, rs in by_env.items():
            mine = [ms for r in rs for ms in steps.get(int(r["run_id"]), [])]
            ratio = low = high = None
            if key == ref:
                ratio = low = high = 1.0
            elif len(mine) >= 5 and len(ref_steps) >= 5:
                est = median_ratio_ci(mine, ref_steps, confidence=confidence, n_resamples=1999)
                ratio, low, high = est.ratio, est.low, est.high
            mem = [v for r in rs for v in (r.get("peak_device_bytes") or r.get("peak_rss_bytes"),) if v is not None]
            energy = [float(r["energy_per_example_j"]) for r in rs if r.get("energy_per_example_j") is not None]
            tput, tdef, other = throughputs_of_one_definition(rs)  # a median of one definition's figures, never of two
            if other:
                notes.append(
                    f"{case}: {labels[key]} ({key[:12]}): throughput of {len(tput)} of {len(tput) + other} runs "
                    f"({throughput_definition_text(tdef)}); {other} measured another definition: left out of it"
                )
            out.append(
                {
                    "case": case,
                    "version": chosen,
                    "env_key": key,
                    "hardware": labels[key],
                    "runs": len(rs),
                    "median_step_ms": statistics.median(float(r["median_step_ms"]) for r in rs),
                    "throughput_eps": statistics.median(tput) if tput else None,
                    "throughput_def": tdef,
                    "peak_memory_bytes": int(max(mem)) if mem else None,
                    "energy_per_example_j": statistics.median(energy) if energy else None,
                    "reference": key == ref,
                    "ratio": ratio,
                    "ratio_low": low,
                    "ratio_high": high,
                    "method": "reference" if key == ref else ("percentile-bootstrap" if ratio else None),
                    "differs_beyond_hardware": [] if key == ref else non_hardware_changes(data[ref], data[key]),
                }
            )
    if missing and not out:
        raise ValueError(f"nothing to compare at version {version}: " + "; ".join(missing))
    return SideBySide(rows=out, notes=notes + [f"{m}: left out" for m in missing])
