"""Parse stage: turn a TF profile (``*.xplane.pb``) into normalised tables with xprof's own converters.

Never imports TensorFlow and never parses XSpace by hand: every figure comes from
``xprof.convert.raw_to_tool_data.xspace_to_tool_data`` (xprof's tool converters). Tools used:

- ``overview_page``: average step time (ms) and its per-step breakdown, input-bound share (%), xprof's
  conclusion / recommendation text and diagnostics ("No step marker observed ...");
- ``framework_op_stats``: every TF op with its self-time (µs);
- ``input_pipeline_analyzer``: per-step input breakdown (ms) and the tf.data stage table;
- ``memory_profile``: peak heap / allocator figures (bytes), one host at a time;
- ``kernel_stats``: GPU kernel table (µs), empty on CPU-only profiles.

Archive hygiene: xprof writes cache files (``ALL_HOSTS.op_stats_v2.pb``, ``NO_MODULE.hlo_proto.pb``) into
the directory of the xplane it reads, *even with* ``use_saved_result=False``. So the xplanes are
symlinked (copied if links are unavailable) into a private temporary directory and converted there,
with ``use_saved_result=False`` so a stale cache can never be read; the profile directory is never
written to.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tasks.analysis.collectives import collective_time
from tasks.analysis.diagnose import diagnose, diagnose_window
from tasks.analysis.findings import Finding
from tasks.analysis.profile import (
    IDLE_OP,
    INPUT_OP_COLUMNS,
    STEP_COLUMNS,
    XPROF_MAX_OP_ROWS,
    Diagnostic,
    ParsedProfile,
    SkippedTool,
    cross_check,
    op_table_capped,
)
from tasks.records import ParseRecord, ProfiledRun
from tasks.runner.protocol import StepSamples, read_view

OVERVIEW, OP_STATS, INPUT_PIPELINE, MEMORY, KERNELS = (
    "overview_page",
    "framework_op_stats",
    "input_pipeline_analyzer",
    "memory_profile",
    "kernel_stats",
)
ALL_TOOLS: tuple[str, ...] = (OVERVIEW, OP_STATS, INPUT_PIPELINE, MEMORY, KERNELS)
#: Trace events (step markers), read only when overview_page found no steps in a runner's profile.
TRACE = "trace_viewer"
#: Tools still run on profiles over ``max_full_parse_bytes`` (the summary tables).
SUMMARY_TOOLS: frozenset[str] = frozenset({OVERVIEW, OP_STATS})
#: Tools whose failure fails the parse; failures of the others are recorded in ``skipped_tools``.
REQUIRED_TOOLS: frozenset[str] = frozenset({OVERVIEW, OP_STATS})
XPLANE_GLOB = "plugins/profile/*/*.xplane.pb"


class ProfileParseError(RuntimeError):
    """xprof could not convert a profile. ``xprof_message`` is xprof's own error text (when it gave one)."""

    def __init__(
        self, message: str, *, tool: str | None = None, paths: Sequence[str] = (), xprof_message: str | None = None
    ):
        super().__init__(message)
        self.tool, self.paths, self.xprof_message = tool, list(paths), xprof_message


class ProfileNotFoundError(ProfileParseError, FileNotFoundError):
    """The profile directory holds no ``*.xplane.pb``."""


# --------------------------------------------------------------------------------------------- helpers


def find_xplanes(profile_dir: str | Path) -> tuple[list[Path], list[str]]:
    """Return the ``*.xplane.pb`` files of the newest profiling session in ``profile_dir`` and notes.

    ``profile_dir`` may be a TF logdir (searched with ``plugins/profile/*/*.xplane.pb``), a session
    directory holding ``*.xplane.pb`` directly, or one xplane file. Several files in a session are
    several hosts: all are returned. Raises ProfileNotFoundError (naming the directory) when none exist.
    """
    root = Path(profile_dir)
    if root.is_file():
        return [root], []
    paths = sorted(root.glob(XPLANE_GLOB)) or sorted(root.glob("*.xplane.pb"))
    if not paths:
        raise ProfileNotFoundError(
            f"no *.xplane.pb under {str(root)!r} (looked for {XPLANE_GLOB} and *.xplane.pb)", paths=[str(root)]
        )
    sessions = sorted({p.parent for p in paths})
    notes = []
    if len(sessions) > 1:
        notes.append(f"{len(sessions)} profiling sessions found; parsed the newest, {sessions[-1].name}")
    return [p for p in paths if p.parent == sessions[-1]], notes


def _run_tool(paths: Sequence[Path], tool: str) -> Any:
    """Run one xprof converter; return parsed JSON (None when xprof returned no data).

    Raises ProfileParseError carrying xprof's message when the converter reports failure.
    """
    # xprof's native library logs every converter step at INFO to stderr (hundreds of lines per
    # parse, flooding Airflow task logs); it reads this variable once, when it is loaded.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from xprof.convert import _pywrap_profiler_plugin, raw_to_tool_data

    failure: list[str] = []

    # keeps the error text xspace_to_tool_data drops
    def wrapper(xspace_paths: list[str], tool_name: str, options: dict[str, Any]) -> tuple[bytes | str, bool]:
        data, ok = _pywrap_profiler_plugin.xspace_to_tools_data(xspace_paths, tool_name, options)
        if not ok:
            failure.append(data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data))
        return data, ok

    str_paths = [str(p) for p in paths]
    try:
        data, _ = raw_to_tool_data.xspace_to_tool_data(str_paths, tool, {"use_saved_result": False}, wrapper)
    except Exception as exc:  # the C API raises RuntimeError on some faults
        raise ProfileParseError(
            f"xprof {tool} failed: {exc}", tool=tool, paths=str_paths, xprof_message=str(exc)
        ) from exc
    if failure:
        raise ProfileParseError(
            f"xprof {tool} failed: {failure[0]}", tool=tool, paths=str_paths, xprof_message=failure[0]
        )
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ProfileParseError(f"xprof {tool} returned non-JSON output: {exc}", tool=tool, paths=str_paths) from exc


def _num(value: Any) -> float | None:
    """Parse xprof's numbers, which arrive as floats or strings such as "1.6" / "12.5%"."""
    if value is None or value == "":
        return None
    try:
        out = float(str(value).rstrip("%")) if not isinstance(value, int | float) else float(value)
    except ValueError:
        return None
    return None if math.isnan(out) else out


def _records(table: dict[str, Any], rename: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """DataTable JSON (cols / rows[c][v] / p) -> list of records keyed by column id (renamed)."""
    ids = [(rename or {}).get(c["id"], c["id"]) for c in table.get("cols", [])]
    values = ([c.get("v") if isinstance(c, dict) else None for c in row.get("c", [])] for row in table.get("rows", []))
    return [dict(zip(ids, v, strict=False)) for v in values]


def _step_row(index: int, rec: dict[str, Any]) -> dict[str, Any]:
    """A step-table record with ``step`` as the int step number (xprof labels steps "<name> <step_num>")."""
    m = re.search(r"(\d+)\s*$", str(rec.get("step") or ""))
    row = {k: _num(rec.get(k)) or 0.0 for k in STEP_COLUMNS.values() if k != "step"}
    return {"step": int(m.group(1)) if m else index, **row}


def _find_table(tables: list[dict[str, Any]], col_id: str) -> dict[str, Any] | None:
    return next((t for t in tables if any(c.get("id") == col_id for c in t.get("cols", []))), None)


def _diagnostics(tables: list[dict[str, Any]], tool: str) -> list[Diagnostic]:
    table = _find_table(tables, "severity")
    return [
        Diagnostic(tool=tool, severity=str(r.get("severity") or ""), message=str(r.get("message") or ""))
        for r in (_records(table) if table else [])
    ]


# --------------------------------------------------------------------------------------------- tools


def _apply_overview(out: dict[str, Any], tables: list[dict[str, Any]]) -> None:
    steps_t = _find_table(tables, "stepTimeMs") or {}
    p = steps_t.get("p", {})
    steps = [_step_row(i, r) for i, r in enumerate(_records(steps_t, STEP_COLUMNS))]
    step_ms = [s["step_time_ms"] for s in steps]
    out["num_steps"] = len(steps)
    out["step_breakdown"] = steps
    out["hardware_type"] = p.get("hardware_type") or None
    if steps and sum(step_ms) > 0:  # no steps => unknown, never 0
        out["avg_step_time_ms"] = statistics.fmean(step_ms)
        out["step_time_stddev_ms"] = statistics.pstdev(step_ms)
        out["breakdown_avg_ms"] = {
            k: statistics.fmean(s[k] for s in steps) for k in STEP_COLUMNS.values() if k != "step"
        }
        out["input_bound_pct"] = 100.0 * sum(s["input_ms"] for s in steps) / sum(step_ms)
    out["conclusion"] = p.get("input_conclusion") or None
    out["recommendation"] = p.get("summary_nextstep") or None
    tips_p = (_find_table(tables, "tip_type") or {}).get("p", {})
    out["bottleneck"] = tips_p.get("bottleneck") or None
    out["statements"] = [
        s
        for k in (
            "all_other_statement",
            "kernel_launch_statement",
            "device_collectives_statement",
            "precision_statement",
        )
        if (s := tips_p.get(k) or p.get(k))
    ]
    env_p = (_find_table(tables, "host_id") or {}).get("p", {})
    out["device_type"] = env_p.get("device_type") or None
    cores = _num(env_p.get("device_core_count"))
    out["device_core_count"] = None if cores is None else int(cores)
    analysis_p = (_find_table(tables, "selfTimePercent") or {}).get("p", {})
    if cores:
        out["device_idle_pct"] = _num(analysis_p.get("device_idle_time_percent"))
    out["diagnostics"] += _diagnostics(tables, OVERVIEW)


def _apply_op_stats(out: dict[str, Any], tables: list[dict[str, Any]]) -> None:
    """framework_op_stats gives two tables, with and without the IDLE pseudo-op. Op rows and shares come
    from the IDLE-excluded one (xprof's "Total self-time on Host/Device": a fraction of busy self-time on
    that side); the IDLE rows go to ``idle_time_us``."""
    rename = {
        "type": "op_type",
        "operation": "op_name",
        "total_self_time": "total_self_time_us",
        "avg_self_time": "avg_self_time_us",
    }
    parsed = [_records(t, rename) for t in tables if _find_table([t], "total_self_time")]
    rows = min(parsed, key=lambda rs: sum(r.get("op_type") == IDLE_OP for r in rs), default=[])
    out["idle_time_us"] = {
        str(r.get("host_or_device")): _num(r.get("total_self_time_us")) or 0.0
        for rs in parsed
        for r in rs
        if r.get("op_type") == IDLE_OP
    }
    out["op_stats"] = [
        {
            "host_or_device": str(r.get("host_or_device") or ""),
            "op_type": str(r.get("op_type") or ""),
            "op_name": str(r.get("op_name") or ""),
            "occurrences": int(_num(r.get("occurrences")) or 0),
            "total_self_time_us": _num(r.get("total_self_time_us")) or 0.0,
            "avg_self_time_us": _num(r.get("avg_self_time_us")) or 0.0,
            "self_time_share": _num(
                r.get(
                    "device_total_self_time_percent"
                    if r.get("host_or_device") == "Device"
                    else "host_total_self_time_percent"
                )
            )
            or 0.0,
        }
        for r in rows
        if r.get("op_type") != IDLE_OP
    ]
    if op_table_capped(len(out["op_stats"]), len(out["idle_time_us"])):
        out["diagnostics"].append(
            Diagnostic(
                tool=OP_STATS,
                severity="WARNING",
                message=f"framework_op_stats holds xprof's cap of {XPROF_MAX_OP_ROWS} rows: ops with less self-time "
                "were cut, so small ops may look appeared/vanished between runs",
            )
        )


def _apply_input_pipeline(out: dict[str, Any], tables: list[dict[str, Any]]) -> None:
    steps_t = _find_table(tables, "stepnum")
    out["input_steps"] = [_step_row(i, r) for i, r in enumerate(_records(steps_t, STEP_COLUMNS))] if steps_t else []
    ops_t = _find_table(tables, "opName")
    if ops_t:
        out["input_ops"] = _records(ops_t, INPUT_OP_COLUMNS)
        out["input_time_breakdown_us"] = {k: v for k, raw in ops_t.get("p", {}).items() if (v := _num(raw)) is not None}
    links_t = _find_table(tables, "link")
    out["input_recommendations"] = [
        re.sub(r"<[^>]+>", "", str(r["link"]))  # plain text, no HTML
        for r in (_records(links_t) if links_t else [])
        if r.get("link")
    ]
    seen = {d.message for d in out["diagnostics"]}
    out["diagnostics"] += [d for d in _diagnostics(tables, INPUT_PIPELINE) if d.message not in seen]


def _memory_records(host: str, data: Any) -> list[dict[str, Any]]:
    recs = []
    for allocator, prof in ((data or {}).get("memoryProfilePerAllocator") or {}).items():
        summary = prof.get("profileSummary") or {}
        peak = summary.get("peakStats") or {}
        peak_in_use = _num(peak.get("peakBytesInUse"))
        if not peak_in_use and not _num(summary.get("peakBytesUsageLifetime")):
            continue  # an allocator with no recorded activity
        recs.append(
            {
                "host": host,
                "allocator": allocator,
                "peak_bytes_in_use": int(peak_in_use or 0),
                "peak_bytes_usage_lifetime": int(_num(summary.get("peakBytesUsageLifetime")) or 0),
                "peak_heap_allocated_bytes": int(_num(peak.get("heapAllocatedBytes")) or 0),
                "peak_stack_reserved_bytes": int(_num(peak.get("stackReservedBytes")) or 0),
                "memory_capacity_bytes": int(_num(summary.get("memoryCapacity")) or 0),
                "peak_fragmentation": _num(peak.get("fragmentation")),
            }
        )
    return recs


@contextmanager
def _private_links(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Symlinks (copies where links are unavailable) to ``paths`` in a private temporary directory, removed
    afterwards: xprof's converters write caches next to what they read, and the archive must stay clean."""
    with tempfile.TemporaryDirectory(prefix="perfwatch-parse-") as work:
        links = []
        for p in paths:
            link = Path(work) / Path(p).name
            try:
                os.symlink(Path(p).resolve(), link)
            except OSError:
                shutil.copyfile(p, link)
            links.append(link)
        yield links


def marker_steps(xplane_paths: Sequence[str | Path]) -> list[int]:
    """The step numbers of the step markers in a profile: the trace events with a ``step_num`` argument, as
    ``tf.profiler.experimental.Trace(name, step_num=i, _r=1)`` records them, read from xprof's own
    ``trace_viewer`` converter (never by parsing XSpace by hand); sorted, each once. Empty when the trace
    holds none. Used when overview_page found no steps in a profile whose steps perfwatch marked, to tell
    "xprof could not group the marked steps" (loops inside the step, e.g. an LSTM) from "no markers".

    Raises ProfileParseError (with xprof's message) when the converter fails.
    """
    with _private_links([Path(p) for p in xplane_paths]) as links:
        trace = _run_tool(links, TRACE) or {}
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else []
    nums = (str((e.get("args") or {}).get("step_num", "")) for e in events if isinstance(e, dict))
    return sorted({int(n) for n in nums if n.isdigit()})


# --------------------------------------------------------------------------------------------- API


def parse_profile(
    profile_dir: str | Path, *, max_full_parse_bytes: int = 200 * 2**20, tools: Sequence[str] = ALL_TOOLS
) -> ParsedProfile:
    """Parse the newest profiling session in ``profile_dir`` with xprof's converters.

    ``tools``: subset of ALL_TOOLS to run (the others are listed in ``skipped_tools``). When the xplanes
    total more than ``max_full_parse_bytes`` bytes only SUMMARY_TOOLS run (overview_page,
    framework_op_stats); the expensive tools are listed in ``skipped_tools`` with the reason.
    memory_profile runs once per host (xprof handles one host at a time).

    Figures: step times in ms (overview_page), op self-times in µs (framework_op_stats), input stages
    in ms/µs (input_pipeline_analyzer), memory in bytes (memory_profile), kernels in µs (kernel_stats).
    A profile without step markers gives ``avg_step_time_ms=None`` plus xprof's diagnostic.

    Raises ProfileNotFoundError when no xplane exists under ``profile_dir``; ProfileParseError
    (with xprof's own message in ``xprof_message``) when an xplane is empty, truncated or corrupt, or
    when overview_page / framework_op_stats fail. Failures of the other tools are recorded in
    ``skipped_tools`` instead. Never writes into ``profile_dir``.
    """
    t0 = time.perf_counter()
    unknown = set(tools) - set(ALL_TOOLS)
    if unknown:
        raise ValueError(f"unknown tools {sorted(unknown)}; known: {ALL_TOOLS}")
    paths, notes = find_xplanes(profile_dir)
    sizes = [p.stat().st_size for p in paths]
    for p, size in zip(paths, sizes, strict=True):
        if size == 0:
            raise ProfileParseError(f"empty xplane file {str(p)!r} (0 bytes)", paths=[str(p)])
    total = sum(sizes)
    out: dict[str, Any] = {
        "profile_dir": str(profile_dir),
        "xplane_paths": [str(p) for p in paths],
        "xplane_bytes": total,
        "hosts": [p.name.removesuffix(".xplane.pb") for p in paths],
        "skipped_tools": [],
        "diagnostics": [Diagnostic(tool="perfwatch", severity="INFO", message=n) for n in notes],
    }
    skipped: list[SkippedTool] = out["skipped_tools"]
    run = []
    for tool in ALL_TOOLS:
        if tool not in tools:
            skipped.append(SkippedTool(tool=tool, reason="not requested"))
        elif total > max_full_parse_bytes and tool not in SUMMARY_TOOLS:
            skipped.append(
                SkippedTool(
                    tool=tool,
                    reason=f"xplane size {total} bytes exceeds "
                    f"max_full_parse_bytes={max_full_parse_bytes}; summary tools only",
                )
            )
        else:
            run.append(tool)

    with _private_links(paths) as links:
        for tool in run:
            if tool == KERNELS and out.get("hardware_type") == "CPU_ONLY":  # overview_page ran first
                out["kernel_stats_absent_reason"] = (
                    "CPU-only profile (overview_page hardware type CPU_ONLY): no GPU kernels to list"
                )
                continue
            try:
                if tool == MEMORY:
                    recs = [
                        r
                        for link in links
                        for r in _memory_records(link.name.removesuffix(".xplane.pb"), _run_tool([link], tool))
                    ]
                    out["memory"] = recs or None
                    if not recs:
                        out["memory_absent_reason"] = (
                            "memory_profile returned no allocator activity (common on CPU-only profiles)"
                        )
                    continue
                data = _run_tool(links, tool)
            except ProfileParseError as exc:
                if tool in REQUIRED_TOOLS:
                    raise
                skipped.append(SkippedTool(tool=tool, reason=str(exc)))
                continue
            tables = data if isinstance(data, list) else [data] if data else []
            if tool == OVERVIEW:
                _apply_overview(out, tables)
            elif tool == OP_STATS:
                _apply_op_stats(out, tables)
            elif tool == INPUT_PIPELINE:
                _apply_input_pipeline(out, tables)
            elif tool == KERNELS:
                rows = [{k: v for k, v in r.items() if k != "rank"} for t in tables for r in _records(t)]
                out["kernel_stats"] = rows or None
                if not rows:
                    out["kernel_stats_absent_reason"] = (
                        "kernel_stats returned no kernels (no GPU device planes: CPU-only profile)"
                    )
    for tool, field, reason_field in (
        (MEMORY, "memory", "memory_absent_reason"),
        (KERNELS, "kernel_stats", "kernel_stats_absent_reason"),
    ):
        if out.get(field) is None and not out.get(reason_field):
            out[reason_field] = next((f"not run: {s.reason}" for s in skipped if s.tool == tool), "not run")
    has_device = bool(out.get("device_core_count")) and out.get("hardware_type") not in (None, "CPU_ONLY")
    out["collectives"] = collective_time(
        out.get("op_stats", []),
        out.get("num_steps", 0),
        [s["device_collectives_ms"] for s in out.get("step_breakdown", [])] if has_device else None,
    )
    out["parse_seconds"] = time.perf_counter() - t0
    return ParsedProfile(**out)


def parse_run(
    run: ProfiledRun,
    work_dir: str | Path,
    *,
    max_full_parse_bytes: int = 200 * 2**20,
    extra_findings: Sequence[Finding] = (),
    gpu_run: bool = False,
) -> ParseRecord:
    """The pipeline's parse stage: parse ``run.profile_dir`` (a ``tasks.records.ProfiledRun``), diagnose it,
    look for the runner's step markers when xprof found no steps (:func:`marker_steps`, in ``marker_steps`` of the
    parsed profile: the ``steps_not_found`` finding then says so instead of advising markers), check the
    profiled window against the measured steps it stands for (``tasks.analysis.profile.cross_check``:
    the runner's ``profiled_step_times_ms`` and xprof's per-step step times against the distribution of the
    runner's ``measured_step_times_ms``, all ms, read from ``run.samples_path``; an unrepresentative window
    adds the ``unrepresentative_window`` finding), and write every table to ``<work_dir>/parse/parsed.json``
    (ParsedProfile fields plus ``findings`` and ``cross_check``). Returns a ``tasks.records.ParseRecord`` whose
    ``cross_check_ratio`` is the window's median / the measured median (runner timer) and ``cross_check_ok``
    whether the window is representative (None: not checkable). A run whose runner says it ran no profiler
    window (``profile_absent_reason``, a tflite run) gets a record with every profile figure None and the
    ``no_profile`` finding, never zeros. The parsed profile's ``collectives`` holds the all-reduce /
    collective time per step (``tasks.analysis.collectives``; None where the profile has none).
    ``extra_findings`` (e.g. the hardware's, ``tasks.analysis.hardware.case_findings``) are added to the run's;
    ``gpu_run``: the run measured a GPU, so a profile without device planes is CUPTI missing, not a CPU profile
    (``tasks.analysis.diagnose.diagnose``).

    Raises what parse_profile raises (ProfileNotFoundError, ProfileParseError), OSError when the runner's
    samples file is missing or unreadable, ``tasks.runner.protocol.ProtocolMismatch`` when it is of another
    protocol version, and ValueError when it lacks the measured or profiled step times
    (names the file and the key) or holds a non-positive one.
    """
    samples = read_view(run.samples_path, StepSamples)
    steps = [Finding(**f) for f in run.findings]  # the runner's findings on the steps it timed (soundness)
    if samples.profile_absent_reason:  # the runner ran no profiler window (a tflite run)
        return _no_profile(samples.profile_absent_reason, work_dir, [*steps, *extra_findings])
    parsed = parse_profile(run.profile_dir, max_full_parse_bytes=max_full_parse_bytes)
    if parsed.avg_step_time_ms is None:  # xprof found no steps, though the runner marks every profiled step
        try:
            parsed = parsed.model_copy(update={"marker_steps": marker_steps(parsed.xplane_paths)})
        except ProfileParseError as e:
            parsed = parsed.model_copy(
                update={
                    "diagnostics": [
                        *parsed.diagnostics,
                        Diagnostic(
                            tool=TRACE, severity="WARNING", message=f"could not look for the runner's step markers: {e}"
                        ),
                    ]
                }
            )
    for key, times in (
        ("measured_step_times_ms", samples.measured_step_times_ms),
        ("profiled_step_times_ms", samples.profiled_step_times_ms),
    ):
        if not times:
            raise ValueError(f"{run.samples_path}: no {key!r} (expected the runner's profile-mode result)")
    check = cross_check(
        samples.measured_step_times_ms,
        samples.profiled_step_times_ms,
        [s["step_time_ms"] for s in parsed.step_breakdown],
        profiler_avg_step_ms=parsed.avg_step_time_ms,
    )
    findings = diagnose(parsed, gpu_run=gpu_run) + diagnose_window(check) + steps + list(extra_findings)
    out = Path(work_dir) / "parse" / "parsed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tables = {
        **parsed.model_dump(mode="json"),
        "findings": [f.model_dump(mode="json") for f in findings],
        "cross_check": check.model_dump(mode="json"),
    }
    out.write_text(json.dumps(tables))
    return ParseRecord(
        parsed_path=str(out),
        avg_step_time_ms=parsed.avg_step_time_ms,
        input_bound_pct=parsed.input_bound_pct,
        n_ops=len(parsed.op_stats),
        findings=[f"{f.code}: {f.message}" for f in findings],
        cross_check_ratio=check.overhead_ratio,
        cross_check_ok=check.representative,
    )


def _no_profile(reason: str, work_dir: str | Path, steps: Sequence[Finding] = ()) -> ParseRecord:
    """The parse of a run whose runner had no profiler window (``profile_absent_reason`` in its result, e.g.
    a tflite run): ``parsed.json`` holds the reason, the findings on the steps (``steps``) and no tables, every
    profile figure is None (absent)."""
    out = Path(work_dir) / "parse" / "parsed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    findings = [f.model_dump(mode="json") for f in steps]
    out.write_text(json.dumps({"profile_absent_reason": reason, "findings": findings}))
    return ParseRecord(
        parsed_path=str(out),
        avg_step_time_ms=None,
        input_bound_pct=None,
        n_ops=0,
        findings=[f"no_profile: {reason}", *(f"{f.code}: {f.message}" for f in steps)],
        cross_check_ratio=None,
        cross_check_ok=None,
    )
