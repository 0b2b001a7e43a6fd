"""The figures a run's verdict line leads with, in the order of its case's ``metrics:`` line.

``Case.metrics`` (``tasks.records.METRICS``: step_time, throughput, memory_usage, latency) orders them
(``tasks.records.lead_order``: the listed ones first, as written, then step time and throughput where the
line leaves them out); ``perfwatch run``'s verdict line and the reason lines under ``perfwatch runs`` are
written from :func:`figure_texts`. Every run records every figure whatever the line says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tasks.records import lead_order

MIB = 2**20


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def bytes_text(value: Any) -> str | None:
    """A byte count for people: ``50.0 MiB`` below 1 GiB, else ``1.50 GiB`` (binary units); None when missing."""
    v = _num(value)
    if v is None:
        return None
    return f"{v / MIB:.1f} MiB" if v < 2**30 else f"{v / 2**30:.2f} GiB"


def memory_text(peak_rss_bytes: Any, peak_device_bytes: Any) -> str | None:
    """``peak RSS 812.4 MiB, device 1024.0 MiB`` (host RSS of the runner process; the device's peak where a
    GPU recorded one); None when neither was recorded."""
    rss, dev = _num(peak_rss_bytes), _num(peak_device_bytes)
    if rss is None and dev is None:
        return None
    parts = [f"peak RSS {rss / MIB:.1f} MiB"] if rss is not None else []
    if dev is not None:
        parts.append(f"device {dev / MIB:.1f} MiB")
    return ", ".join(parts)


def latency_lead(latency: Mapping[str, Any] | None) -> str | None:
    """An infer/tflite run's p99 latency with its interval and n (``latency_ms`` of the run,
    ``tasks.analysis.percentiles.with_intervals``): per batch, ``latency p99 12.31 ms [11.9, 13.0] (95%,
    n=1000)``, or what a short sample supports (``PercentileCI.text``); a server run's per query, arrival to
    result (``latency_ms["serving"]["latency"]``: what its users wait, not its batches' service time), ``latency
    p99 per query 40.07 ms [38.1, 42.9] (95%, n=299)``, or none at an invalid point (``serving["invalid"]``). None
    for a run without latency."""
    if not latency:
        return None
    from tasks.analysis.percentiles import PercentileCI

    served = latency.get("serving")
    if isinstance(served, Mapping) and served.get("scenario") == "server":
        if served.get("invalid"):
            return "latency: none, the point is invalid (its queue grew through the run)"
        per_query = (served.get("latency") or {}).get("p99")
        if per_query:
            return "latency " + PercentileCI(**per_query).text("ms", name="p99 per query")
    ci = (latency.get("ci") or {}).get("p99")
    if not ci:
        return f"p99 {latency['p99']:.2f} ms (no interval recorded)" if "p99" in latency else None
    return "latency " + PercentileCI(**ci).text("ms")


def _median_interval(ci: Any) -> str:
    if ci is None:
        return ""
    if ci.estimable:
        return f" [{ci.low:.2f}, {ci.high:.2f}] ({ci.confidence:.0%}, n={ci.n} steps)"
    return f" (n={ci.n} steps: too few for a {ci.confidence:.0%} interval of the median, needs {ci.min_n})"


def figure_texts(
    metrics: Sequence[str] | None,
    *,
    median_ms: Any,
    throughput_eps: Any,
    peak_rss_bytes: Any = None,
    peak_device_bytes: Any = None,
    latency: Mapping[str, Any] | str | None = None,
    throughput_note: str = "",
    median_ci: Any = None,
    scenario: str | None = None,
) -> list[str]:
    """A run's figures as short texts, in ``lead_order(metrics)``: step_time ``median 10.00 ms``, throughput
    ``1600.0 examples/s at the median``, memory_usage :func:`memory_text`, latency :func:`latency_lead` (or
    ``latency`` itself when it is already a text, a ``runs`` table's p99 cell). A
    figure the run did not record is left out (a train run's latency). ``throughput_note`` follows the
    throughput figure (``perfwatch run`` says where else it is given). ``median_ci``: the median's
    ``PercentileCI`` from the measured steps, shown with the step time (``median 10.00 ms [9.95, 10.05] (95%,
    n=320 steps)``, or what a short run supports).

    ``throughput_eps`` is the run's one throughput (``tasks.analysis.serving.run_throughput_eps``), named by its
    scenario (``scenario``, else ``latency["serving"]``'s; ``serving.throughput_name``): a server run leads with
    the rate it achieved, queries/s and examples/s, at the rate offered (``serving.server_throughput_text``, from
    ``latency["serving"]``; "1946.6 examples/s at the median" was no rate the server delivered at 100 q/s offered,
    and its batches' service rate is no longer shown beside it), an offline run ``examples/s over the run``, others
    ``examples/s at the median``."""
    from tasks.analysis.serving import server_throughput_text, throughput_name

    med, eps = _num(median_ms), _num(throughput_eps)
    served = latency.get("serving") if isinstance(latency, Mapping) else None
    if scenario is None and isinstance(served, Mapping):
        scenario = served.get("scenario")
    throughput: str | None
    if isinstance(served, Mapping) and served.get("scenario") == "server":
        throughput = server_throughput_text(served, None, throughput_note)
    elif scenario == "server":  # a table's row: the same figure, queries/s achieved
        throughput = None if eps is None else f"{eps:.1f} queries/s achieved{throughput_note}"
    else:
        throughput = None if eps is None else f"{eps:.1f} {throughput_name(scenario)}{throughput_note}"
    texts = {
        "step_time": None if med is None else f"median {med:.2f} ms" + _median_interval(median_ci),
        "throughput": throughput,
        "memory_usage": memory_text(peak_rss_bytes, peak_device_bytes),
        "latency": latency if isinstance(latency, str) or latency is None else latency_lead(latency),
    }
    return [t for m in lead_order(metrics) if (t := texts[m]) is not None]


#: the ``perfwatch runs`` table column of each figure
RUNS_COLUMNS: dict[str, str] = {
    "step_time": "median_step_ms",
    "throughput": "throughput_eps",
    "memory_usage": "peak_memory",
    "latency": "p99_latency_ms",
}


def lead_columns(columns: Sequence[str], metrics: Sequence[str] | None, after: str = "case") -> list[str]:
    """``columns`` (a ``perfwatch runs`` table's) reordered so that the columns of ``metrics``' figures
    (:data:`RUNS_COLUMNS`, those present) follow column ``after``, in the line's order; unchanged without a
    metrics line."""
    if not metrics:
        return list(columns)
    lead = [c for m in metrics if (c := RUNS_COLUMNS[m]) in columns]
    rest = [c for c in columns if c not in lead]
    at = rest.index(after) + 1 if after in rest else 0
    return rest[:at] + lead + rest[at:]


def ci_cell(point: Any, low: Any, high: Any, n: Any, min_n: int | None = None, digits: int = 2) -> str | None:
    """A table cell of a percentile with its interval and the samples it rests on: ``9.80 [9.71, 9.90] n=320``.
    A sample too short for a two-sided 95% interval (``min_n``, the fewest samples that give one) gets no point,
    only the bound it supports (issue 27): ``>= 9.71 (n=10, too few for an interval: needs 29)``, or
    ``not estimable (n=5: needs 29)`` without a bound. ``9.80 (no interval)`` where the run kept no steps
    (``n`` unknown: an ingested job's xprof figure); ``9.80 (n=320, no interval: samples thinned)`` where it had
    enough steps for one but their raw samples were thinned (``perfwatch db thin``). None without a point.
    ``digits``: decimals of each figure (ms)."""
    p, lo, hi, k = _num(point), _num(low), _num(high), _num(n)
    if p is None:
        return None
    if k is None:
        return f"{p:.{digits}f} (no interval)"
    if lo is not None and hi is not None:
        return f"{p:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}] n={k:.0f}"
    need = f": needs {min_n}" if min_n else ""
    if lo is None and hi is None and min_n and k >= min_n:  # enough steps, but their samples are gone
        return f"{p:.{digits}f} (n={k:.0f}, no interval: samples thinned)"
    if lo is None and hi is None:
        return f"not estimable (n={k:.0f}{need})"
    bound = f">= {lo:.{digits}f}" if lo is not None else f"<= {hi:.{digits}f}"
    return f"{bound} (n={k:.0f}, too few for an interval{need})"


def p99_cell(row: Mapping[str, Any]) -> str | None:
    """A ``runs`` table cell for an infer/tflite run's p99 latency (``tasks.store.queries.latency_columns``):
    ``12.30 [11.90, 13.00] n=1000``; ``>= 11.90 (n=100, no upper bound)`` when the run was too short to bound
    it (its columns then hold no point); the point alone with ``(no interval)`` for runs stored before intervals
    were kept; None otherwise. A server run's is its per-query p99 (``server_p99_*``: arrival to result, what its
    users wait), marked ``per query``, not its batches' service time; ``invalid`` at a point whose queue grew
    through the run (``server_invalid``)."""
    import pandas as pd

    def num(k: str) -> float | None:
        v = row.get(k)
        return None if v is None or pd.isna(v) else float(v)

    prefix, n_key, unit = "latency_p99", "latency_n", ""
    if num("server_queries") is not None:
        if isinstance(row.get("server_invalid"), str):
            return "invalid (the queue grew)"
        prefix, n_key, unit = "server_p99", "server_queries", " per query"
    p99, low, high, n = num(f"{prefix}_ms"), num(f"{prefix}_low_ms"), num(f"{prefix}_high_ms"), num(n_key)
    if n is None:
        return None if p99 is None else f"{p99:.2f} (no interval)"
    if high is None or p99 is None:
        return (f">= {low:.2f}" if low is not None else "unbounded") + f" (n={n:.0f}, no upper bound){unit}"
    return f"{p99:.2f} [{low if low is not None else float('nan'):.2f}, {high:.2f}] n={n:.0f}{unit}"


def step_intervals(
    db_url: str | None, run_ids: Sequence[int], percentiles: Sequence[float] = (50, 90)
) -> dict[int, tuple[int, dict[float, Any]]]:
    """Per run: ``(n, {percentile: PercentileCI})`` of its measured step times (ms; the store's samples,
    ``tasks.store.reads.load_samples``; ``tasks.analysis.percentiles.percentile_ci`` at 95%), for the rooms that
    may not import the analysis (the plugin's metrics). Runs without samples are left out. ``db_url``: default
    the settings' store."""
    from tasks.analysis.percentiles import percentile_ci
    from tasks.settings import Settings
    from tasks.store.reads import load_samples

    if not run_ids:
        return {}
    samples = load_samples(db_url or Settings.from_env().database_url, list(run_ids))
    return {rid: (len(xs), {q: percentile_ci(xs, q) for q in percentiles}) for rid, xs in samples.items() if xs}


#: the columns :func:`median_columns` adds after ``median_step_ms``
MEDIAN_COLUMNS = ("median_step_low_ms", "median_step_high_ms", "median_step_n", "median_step_estimable")


def median_columns(
    run_ids: Sequence[Any], n_measured: Sequence[Any], samples: Mapping[int, Sequence[float]]
) -> dict[str, list[Any]]:
    """The median step time's distribution-free 95% interval and n per run (:data:`MEDIAN_COLUMNS`), as
    ``tasks.cli.history.history_frame`` gives p10 and p90 theirs: from each run's measured steps (``samples``, read
    for the rows shown only: ``tasks.store.reads.load_samples``) by ``tasks.analysis.percentiles.percentile_ci``;
    ``median_step_n`` the steps it rests on (the samples', else the run's ``n_measured``: a thinned run keeps its
    count, not its samples, so its bounds are None) and ``median_step_estimable`` whether they support a two-sided
    95% interval (6 steps; None where the count is unknown). The bounds are None where the run is too short for
    one (``percentile_ci``'s one-sided bounds otherwise) or kept no samples."""
    from tasks.analysis.percentiles import min_samples, percentile_ci

    cols: dict[str, list[Any]] = {c: [] for c in MEDIAN_COLUMNS}
    for rid, n in zip(run_ids, n_measured, strict=True):
        xs = samples.get(int(rid))
        ci = percentile_ci(xs, 50) if xs else None
        count = ci.n if ci else (None if _num(n) is None else int(n))
        cols["median_step_low_ms"].append(ci.low if ci else None)
        cols["median_step_high_ms"].append(ci.high if ci else None)
        cols["median_step_n"].append(count)
        cols["median_step_estimable"].append(None if count is None else count >= min_samples(50))
    return cols


def median_cell(point: Any, low: Any, high: Any, n: Any) -> str | None:
    """A table cell of a median step time with its interval and n (:func:`ci_cell` at the median's 6 steps), to
    3 decimals as the median's own column had them: ``128.456 [127.900, 129.010] n=320``."""
    from tasks.analysis.percentiles import min_samples

    return ci_cell(point, low, high, n, min_samples(50), digits=3)


def percentile_cell(point: Any, low: Any, high: Any, n: Any, q: float = 99) -> str | None:
    """A table cell of the ``q``-th percentile (ms) with its interval and n (:func:`ci_cell` at the fewest samples
    that give ``q`` a two-sided 95% interval, ``percentiles.min_samples``: 299 for p99)."""
    from tasks.analysis.percentiles import min_samples

    return ci_cell(point, low, high, n, min_samples(q))


def counted_cell(value: Any, n: Any) -> str | None:
    """A median without an interval, with the steps it rests on: ``1.23 n=320``; None without a value."""
    v, k = _num(value), _num(n)
    if v is None:
        return None
    return f"{v:.2f}" + (f" n={k:.0f}" if k is not None else "")


def serving_texts(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run's scenario summary (``latency_ms["serving"]``, ``tasks.analysis.serving.summarize``) in words, for
    the rooms that may not import the analysis (the plugin's run page): ``summary`` (one line:
    ``serving.summary_line``), ``lines`` (``serving.serving_text``: per rate tried, the search's answer, its
    findings, the checks), ``points`` (a server run's rates, one dict of texts each: ``offered``, ``issued``,
    ``achieved`` in q/s, ``queries``, ``p99`` per query with its interval and n (a dash at an invalid point),
    ``outcome``, ``load``) and ``findings`` (the search's, as stored). None without a summary."""
    if not summary:
        return None
    from tasks.analysis.percentiles import PercentileCI
    from tasks.analysis.serving import serving_text, summary_line

    key = f"p{summary.get('percentile', 99):g}"
    points = []
    for p in summary.get("points") or []:
        ci = (p.get("latency") or {}).get(key)
        load = p.get("host_load") or {}
        share = load.get("other_cpu_share")
        points.append(
            {
                "offered": f"{p['target_qps']:.4g}",
                "issued": "—" if p.get("issued_qps") is None else f"{p['issued_qps']:.4g}",
                "achieved": f"{p['achieved_qps']:.4g}",
                "queries": str(p.get("queries")),
                key: "— (invalid: the queue grew through the run)"
                if p.get("invalid")
                else (PercentileCI(**ci).text("ms", name=f"{key} per query") if ci else "—"),
                "outcome": "invalid"
                if p.get("invalid")
                else (p.get("outcome") or ("—" if p.get("met") is None else ("met" if p["met"] else "missed"))),
                "load": f"{load.get('load1_start') or 0:.1f}"
                + ("" if share is None else f", others {100 * share:.0f}% of the CPU"),
            }
        )
    return {
        "summary": summary_line(summary),
        "lines": serving_text(dict(summary)),
        "points": points,
        "findings": list(summary.get("findings") or []),
    }
