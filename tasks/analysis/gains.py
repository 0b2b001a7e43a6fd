"""What would new hardware gain? The environments one case was measured on, side by side.

Pure functions over the store's rows (``tasks.store.queries.hardware_inputs``): per case and environment
(comparability key) the runs, the median step time (ms, our timer: the median of the runs' medians),
throughput (examples/s, the runs' median), peak memory (bytes, the largest: the device's where measured,
else the runner's RSS), J/example (the median of the telemetry summaries' ``energy_per_example_j``, where
power was measured) and the ratio of its step time against a reference environment's with an interval:
the ratio of medians of the two environments' pooled measured step times with a percentile bootstrap
(:func:`tasks.analysis.stats.median_ratio_ci`; it counts step-to-step noise only, not the drift between
processes, so with one run per environment the interval is too narrow by that drift: ``runs`` says how
many went in). Below 1: faster than the reference.

An environment that differs from the reference in more than the hardware (TF version, CUDA/cuDNN build,
driver, packages, performance variables: a comparability field of ``tasks.analysis.environment`` outside
:data:`HARDWARE_FIELDS`) is flagged with what differs: its ratio is not the hardware's alone.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.analysis.environment import diff_fingerprints
from tasks.analysis.stats import median_ratio_ci

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


def side_by_side(
    rows: Sequence[Mapping[str, Any]],
    envs: Mapping[int, Mapping[str, Any]],
    steps: Mapping[int, Sequence[float]],
    *,
    reference: str | None = None,
    confidence: float = 0.95,
) -> list[dict[str, Any]]:
    """One row per case (``base_case_name``) and environment, each against the case's reference environment.

    Args:
        rows: the hardware query's rows (``run_id``, ``case_name``, ``env_key``, ``environment_id``,
            ``median_step_ms``, ``throughput_eps``, ``peak_device_bytes``, ``peak_rss_bytes``,
            ``energy_per_example_j``), oldest first within a case and key.
        envs: fingerprint record of each ``environment_id``.
        steps: measured step times (ms) of each ``run_id``.
        reference: the reference environment: a comparability-key prefix, or text in its hardware label
            (``H100``); None: the environment the case was first measured on.
        confidence: level of the ratio's interval.

    Returns:
        Dicts with ``case``, ``env_key``, ``hardware`` (label), ``runs``, ``median_step_ms``,
        ``throughput_eps``, ``peak_memory_bytes``, ``energy_per_example_j``, ``reference`` (bool),
        ``ratio``, ``ratio_low``, ``ratio_high`` (step time / the reference's; None where either side has
        fewer than 5 steps), ``method`` and ``differs_beyond_hardware`` (list of changes, empty if none).

    Raises:
        ValueError: ``reference`` matches no environment of a case, or more than one (names them).
    """
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for r in rows:
        groups.setdefault(base_case_name(str(r["case_name"])), {}).setdefault(str(r["env_key"]), []).append(r)
    out: list[dict[str, Any]] = []
    for case, by_env in groups.items():
        data = {k: envs.get(int(rs[-1]["environment_id"]), {}) for k, rs in by_env.items()}
        labels = {k: hardware_label(d) for k, d in data.items()}
        first = min(by_env, key=lambda k: min(int(r["run_id"]) for r in by_env[k]))
        ref = first
        if reference is not None:
            hits = [k for k in by_env if k.startswith(reference) or reference.lower() in labels[k].lower()]
            if len(hits) != 1:
                shown = "; ".join(f"{k} ({labels[k]})" for k in by_env)
                raise ValueError(
                    f"--reference {reference!r} matches {len(hits)} environments of case {case}; "
                    f"expected one of: {shown}"
                )
            ref = hits[0]
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
            tput = [float(r["throughput_eps"]) for r in rs if r.get("throughput_eps") is not None]
            out.append(
                {
                    "case": case,
                    "env_key": key,
                    "hardware": labels[key],
                    "runs": len(rs),
                    "median_step_ms": statistics.median(float(r["median_step_ms"]) for r in rs),
                    "throughput_eps": statistics.median(tput) if tput else None,
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
    return out
