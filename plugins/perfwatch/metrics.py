"""``/perfwatch/metrics``: the store in the Prometheus text format (prometheus-client), read at every scrape;
see :class:`StoreCollector` for the metrics, in base units. Access: ``auth.metrics_access``."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from tasks.records import Verdict

from .auth import metrics_access

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

router = APIRouter()  #: ``/metrics``

VERDICTS = tuple(v.value for v in Verdict)


class StoreCollector:
    """A prometheus-client collector that reads the store at every scrape (``tasks.store.series.metrics_snapshot``).

    Metrics (labels ``model``, ``case`` and ``case_label``; times in seconds, as Prometheus names them). ``case``
    is the stable case name that keys the history (``train-bs16-in1be8b91f``); ``case_label`` the readable one
    shown beside it (``images_slow``: ``tasks.records.case_label`` of the case's newest run), the case name
    itself for a case without one (``train-bs16``), so a legend may always use it. A new label in the config
    starts new series under the new ``case_label`` value (queries that select by ``case`` are unaffected):

    * ``perfwatch_step_time_seconds{quantile="0.5"|"0.9", source}``: median and p90 step time of the newest
      successful run (perfwatch's timer, profiler off; xprof's step time for ``source="external"`` runs); a
      quantile the run's measured steps are too few for (no two-sided 95% interval: the p90 of fewer than 29
      steps) is absent, its supported bound in ``perfwatch_step_time_bound_seconds``;
    * ``perfwatch_step_cpu_seconds{source}``, ``perfwatch_step_wait_seconds{source}``: the newest successful
      run's median process CPU time and run-queue wait per measured step (``tasks.runner.counters``; only
      where the run recorded them);
    * ``perfwatch_baseline_step_time_seconds``: median step time of the active baseline run;
    * ``perfwatch_throughput_examples_per_second``: the newest run's throughput (examples/s), labelled with its
      ``definition`` (``runs.throughput_def``: a change of definition starts a new Prometheus series);
    * ``perfwatch_latest_verdict{verdict}``: 1 for the newest run's verdict, 0 for the others;
    * ``perfwatch_latest_run_info{version, source}``: 1, the newest run's version;
    * ``perfwatch_latest_decision_info{verdict, metric, method, ratio, interval, reason}``: 1, the newest run's
      verdict with its story (``tasks.services.story.story_labels``: the same words ``perfwatch gate`` and the
      pages print), and ``perfwatch_latest_ratio{bound="estimate"|"low"|"high", metric}``: its ratio and interval;
    * ``perfwatch_last_success_timestamp_seconds``: when the newest successful run finished (Unix time);
    * ``perfwatch_runs_total{status}``, ``perfwatch_regressions_total``: runs stored, by status; runs
      judged a regression;
    * ``perfwatch_newest_data_age_seconds`` (no labels): seconds since the newest run of any model finished;
    * ``perfwatch_store_up`` (no labels): 1 when the store was read, 0 when it could not be (then no other
      metric is given; the reason is logged, kept in :attr:`problem` and written by ``/metrics`` as a comment
      line). A store that does not exist or was never migrated is not created (``tasks.store.check_readable``).

    * ``perfwatch_latency_seconds{quantile="0.5"|"0.9"|"0.99", source}``: an infer/tflite case's per-batch
      latency percentiles (nearest rank, our timer) of its newest successful run, absent where not estimable
      (issue 27: the bound the sample supports, never a point it cannot), with
      ``perfwatch_latency_bound_seconds{quantile, bound="low"|"high", source}``, their distribution-free 95%
      interval (``tasks.analysis.percentiles``; a bound the run was too short for is absent, e.g. the p99's
      "high" under 299 batches), ``perfwatch_latency_estimable{quantile}`` (1: both bounds exist) and
      ``perfwatch_latency_samples`` (the measured batches they rest on).

    * the server scenario's own figures of an infer/tflite case's newest successful run (``latency_ms["serving"]``,
      ``tasks.analysis.serving.summarize``; :func:`server_families`), labelled ``scenario`` (``server``):
      ``perfwatch_server_offered_qps``, ``perfwatch_server_issued_qps`` (what its schedule issued) and
      ``perfwatch_server_achieved_qps`` (queries served per second) of its reported point (a search's max);
      ``perfwatch_server_latency_seconds{quantile="0.5"|"0.9"|"0.99"}``: the per-query latency percentiles
      (arrival to result, queueing included; absent where not estimable) with
      ``perfwatch_server_latency_bound_seconds{quantile, bound}`` and ``perfwatch_server_latency_samples`` (the
      queries); ``perfwatch_server_point_invalid`` (1 when the point's queue grew through the run, a rate above
      the server's capacity: then no latency figure is exported, they grow with the run's length; else 0); for a
      QPS search ``perfwatch_server_max_qps`` (the issued rate of the highest rate that met the bound; absent when
      none met), ``perfwatch_server_latency_bound_target_seconds`` (the bound) and
      ``perfwatch_server_search_unstable`` (1 when the search's points flag it: non-monotonic, a disagreeing
      re-measure, a change of host load; 0 otherwise).

    * ``perfwatch_step_time_bound_seconds{quantile="0.5"|"0.9", bound="low"|"high", source}``: the
      distribution-free 95% interval of the step-time quantiles from the run's measured steps (absent where the
      run is too short for a bound, and for external runs, which keep no steps), and
      ``perfwatch_step_time_samples{source}``, the measured steps they rest on.
    """

    def __init__(self, db_url: str | None = None):
        self.db_url = db_url
        self.problem: str | None = None  #: why the last collect could not read the store (one line), else None

    def describe(self) -> list[Metric]:  # no metrics are read at registration time
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from tasks.store import check_readable
        from tasks.store.series import metrics_snapshot

        up = GaugeMetricFamily("perfwatch_store_up", "1 when the perfwatch store could be read at this scrape")
        self.problem = None
        try:
            check_readable(self.db_url)  # a missing or unmigrated store is reported, never created
            snap = metrics_snapshot(self.db_url)
        except Exception as e:  # noqa: BLE001 - any store error is reported as store_up 0
            self.problem = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
            log.error("perfwatch metrics: cannot read the store: %s", self.problem)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        mc = ["model", "case", "case_label"]

        def ident(m: str, c: str) -> list[str]:  # the values of the labels mc
            return [m, c, snap.case_labels.get((m, c), c)]

        step = GaugeMetricFamily(
            "perfwatch_step_time_seconds",
            "Step time of the newest successful run (quantile 0.5: median, 0.9: p90)",
            labels=[*mc, "quantile", "source"],
        )
        cpu = GaugeMetricFamily(
            "perfwatch_step_cpu_seconds",
            "Median process CPU time (all threads, user + system) per measured step of the newest successful run",
            labels=[*mc, "source"],
        )
        wait = GaugeMetricFamily(
            "perfwatch_step_wait_seconds",
            "Median run-queue wait (runnable, waiting for a CPU) per measured step of the newest successful run",
            labels=[*mc, "source"],
        )
        thr = GaugeMetricFamily(
            "perfwatch_throughput_examples_per_second",
            "Throughput of the newest successful run (examples/s; definition: median_step, server_achieved "
            "queries/s or offline_run, each its own series)",
            labels=[*mc, "source", "definition"],
        )
        verdict = GaugeMetricFamily(
            "perfwatch_latest_verdict", "1 for the verdict of the newest successful run", labels=[*mc, "verdict"]
        )
        info = GaugeMetricFamily(
            "perfwatch_latest_run_info",
            "The newest successful run's model version and source",
            labels=[*mc, "version", "source"],
        )
        last = GaugeMetricFamily(
            "perfwatch_last_success_timestamp_seconds", "When the newest successful run finished (Unix time)", labels=mc
        )
        lat = GaugeMetricFamily(
            "perfwatch_latency_seconds",
            "Per-batch latency percentile of the newest successful infer/tflite run (nearest rank)",
            labels=[*mc, "quantile", "source"],
        )
        lat_bound = GaugeMetricFamily(
            "perfwatch_latency_bound_seconds",
            "Bound of the latency percentile's distribution-free 95% interval (absent: too few batches for it)",
            labels=[*mc, "quantile", "bound", "source"],
        )
        lat_ok = GaugeMetricFamily(
            "perfwatch_latency_estimable",
            "1 when the run's batches support a two-sided 95% interval of the latency percentile",
            labels=[*mc, "quantile", "source"],
        )
        lat_n = GaugeMetricFamily(
            "perfwatch_latency_samples", "Measured batches the latency percentiles rest on", labels=[*mc, "source"]
        )
        from tasks.services.story import story_labels
        from tasks.store.reads import verdict_stories

        stories = verdict_stories([r.run_id for r in snap.latest], self.db_url)
        labels = ["verdict", "metric", "method", "ratio", "interval", "reason"]
        decision = GaugeMetricFamily(
            "perfwatch_latest_decision_info",
            "1: the newest successful run's verdict with its story (tasks.services.story.story_labels)",
            labels=[*mc, *labels],
        )
        ratio = GaugeMetricFamily(
            "perfwatch_latest_ratio",
            "Candidate/baseline ratio of the newest successful run's verdict (bound estimate) and its interval",
            labels=[*mc, "bound", "metric"],
        )
        for r in snap.latest:
            key = ident(r.model, r.case_name)
            if (story := stories.get(r.run_id)) is not None:
                told = story_labels(story)
                decision.add_metric([*key, *(told[k] for k in labels)], 1.0)
                for bound, value in (("estimate", story.ratio), ("low", story.ci_low), ("high", story.ci_high)):
                    if value is not None:
                        ratio.add_metric([*key, bound, story.metric or "wall"], value)
        step_bound = GaugeMetricFamily(
            "perfwatch_step_time_bound_seconds",
            "Bound of the step-time quantile's distribution-free 95% interval (absent: too few steps for it)",
            labels=[*mc, "quantile", "bound", "source"],
        )
        step_n = GaugeMetricFamily(
            "perfwatch_step_time_samples", "Measured steps the step-time quantiles rest on", labels=[*mc, "source"]
        )
        from tasks.cli.figures import step_intervals

        intervals = step_intervals(self.db_url, [r.run_id for r in snap.latest if r.source != "external"])
        for r in snap.latest:
            key = ident(r.model, r.case_name)
            estimable: dict[float, bool] = {}  # step-time percentile -> a two-sided interval exists (runs with steps)
            if r.run_id in intervals:
                n, cis = intervals[r.run_id]
                estimable = {pct: c.estimable for pct, c in cis.items()}
                step_n.add_metric([*key, r.source], float(n))
                for pct, c in cis.items():
                    for bound, v in (("low", c.low), ("high", c.high)):
                        if v is not None:
                            step_bound.add_metric([*key, f"{pct / 100:g}", bound, r.source], v / 1000.0)
            if r.latency_ms:
                ci = r.latency_ms.get("ci") or {}
                for name, q in (("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99")):
                    c = ci.get(name)
                    if r.latency_ms.get(name) is not None and (c is None or c.get("estimable")):
                        lat.add_metric([*key, q, r.source], r.latency_ms[name] / 1000.0)
                    if c:
                        lat_ok.add_metric([*key, q, r.source], 1.0 if c.get("estimable") else 0.0)
                        for bound in ("low", "high"):
                            if c.get(bound) is not None:
                                lat_bound.add_metric([*key, q, bound, r.source], c[bound] / 1000.0)
                if r.latency_ms.get("n") is not None:
                    lat_n.add_metric([*key, r.source], float(r.latency_ms["n"]))
            for pct, q, ms in ((50, "0.5", r.median_step_ms), (90, "0.9", r.p90_step_ms)):
                if ms is not None and estimable.get(pct, True):
                    step.add_metric([*key, q, r.source], ms / 1000.0)
            for family, ms in ((cpu, r.median_cpu_ms), (wait, r.median_wait_ms)):
                if ms is not None:
                    family.add_metric([*key, r.source], ms / 1000.0)
            if r.throughput_eps is not None:
                thr.add_metric([*key, r.source, r.throughput_def or "unknown"], r.throughput_eps)
            for v in sorted(set(VERDICTS) | ({r.verdict} if r.verdict else set())):
                verdict.add_metric([*key, v], 1.0 if v == r.verdict else 0.0)
            info.add_metric([*key, r.version or "", r.source], 1.0)
            if r.finished_at is not None:
                last.add_metric(key, r.finished_at.timestamp())
        base = GaugeMetricFamily(
            "perfwatch_baseline_step_time_seconds", "Median step time of the active baseline run", labels=mc
        )
        for (m, c), ms in sorted(snap.baseline_ms.items()):
            base.add_metric(ident(m, c), ms / 1000.0)
        runs = CounterMetricFamily("perfwatch_runs", "Runs stored, by status", labels=[*mc, "status"])
        for (m, c, st), n in sorted(snap.runs_by_status.items()):
            runs.add_metric([*ident(m, c), st], n)
        regs = CounterMetricFamily("perfwatch_regressions", "Runs judged a regression", labels=mc)
        for m, c in sorted({(m, c) for m, c, _ in snap.runs_by_status}):
            regs.add_metric(ident(m, c), snap.regressions.get((m, c), 0))
        yield from (
            step,
            step_bound,
            step_n,
            cpu,
            wait,
            base,
            thr,
            verdict,
            info,
            decision,
            ratio,
            last,
            runs,
            regs,
            lat,
            lat_bound,
            lat_ok,
            lat_n,
        )
        yield from server_families(snap.latest, ident)
        if snap.newest_finished_at is not None:
            age = GaugeMetricFamily(
                "perfwatch_newest_data_age_seconds", "Seconds since the newest run of any model finished"
            )
            age.add_metric([], (dt.datetime.now(dt.UTC) - snap.newest_finished_at).total_seconds())
            yield age


def server_families(latest: Iterable[Any], ident: Callable[[str, str], list[str]]) -> list[Metric]:
    """The server scenario's gauges (:class:`StoreCollector`'s docstring) of the newest successful runs ``latest``
    (``tasks.store.series.LatestRun``: its ``latency_ms["serving"]``), each labelled ``ident(model, case)`` and
    ``scenario``; runs of other scenarios add nothing. Times in seconds, rates in queries/s."""
    from prometheus_client.core import GaugeMetricFamily

    labels = ["model", "case", "case_label", "scenario"]

    def gauge(name: str, doc: str, extra: Sequence[str] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*labels, *extra])

    offered = gauge("perfwatch_server_offered_qps", "Server scenario: the nominal arrival rate of the reported point")
    issued = gauge("perfwatch_server_issued_qps", "Server scenario: the rate its arrival schedule issued, queries/s")
    achieved = gauge("perfwatch_server_achieved_qps", "Server scenario: queries served per second at the point")
    lat = gauge(
        "perfwatch_server_latency_seconds",
        "Server scenario: per-query latency percentile, arrival to result, queueing included (nearest rank)",
        ["quantile"],
    )
    bound = gauge(
        "perfwatch_server_latency_bound_seconds",
        "Server scenario: bound of the per-query percentile's distribution-free 95% interval",
        ["quantile", "bound"],
    )
    samples = gauge("perfwatch_server_latency_samples", "Server scenario: queries the per-query percentiles rest on")
    invalid = gauge(
        "perfwatch_server_point_invalid",
        "Server scenario: 1 when the reported point is invalid (its queue grew through the run: a rate above the "
        "server's capacity, no latency figures), else 0",
    )
    best = gauge("perfwatch_server_max_qps", "QPS search: issued rate of the highest rate that met the latency bound")
    target = gauge("perfwatch_server_latency_bound_target_seconds", "QPS search: the latency bound it searched for")
    unstable = gauge("perfwatch_server_search_unstable", "QPS search: 1 when its points flag an unstable search")
    for r in latest:
        s = (r.latency_ms or {}).get("serving") if isinstance(r.latency_ms, dict) else None
        if not isinstance(s, dict) or s.get("scenario") != "server":
            continue
        key = [*ident(r.model, r.case_name), "server"]
        for family, v in (
            (offered, s.get("target_qps")),
            (issued, s.get("issued_qps")),
            (achieved, s.get("achieved_qps")),
        ):
            if isinstance(v, int | float):
                family.add_metric(key, float(v))
        invalid.add_metric(key, 1.0 if s.get("invalid") else 0.0)
        for name, q in (("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99")):
            c = {} if s.get("invalid") else (s.get("latency") or {}).get(name) or {}
            if c.get("estimable") and c.get("point") is not None:
                lat.add_metric([*key, q], c["point"] / 1000.0)
            for side in ("low", "high"):
                if c.get(side) is not None:
                    bound.add_metric([*key, q, side], c[side] / 1000.0)
        if s.get("queries") is not None:
            samples.add_metric(key, float(s["queries"]))
        if s.get("search"):
            if s.get("max_qps") is not None:
                best.add_metric(key, float(s["max_qps"]))
            if s.get("latency_bound_ms") is not None:
                target.add_metric(key, s["latency_bound_ms"] / 1000.0)
            unstable.add_metric(key, 1.0 if s.get("findings") else 0.0)
    return [offered, issued, achieved, lat, bound, samples, invalid, best, target, unstable]


@router.get("/metrics", dependencies=[Depends(metrics_access)])
def metrics() -> Response:
    """The store's figures in the Prometheus text format (``StoreCollector``); access: :func:`metrics_access`.
    When the store could not be read, a last comment line (which Prometheus ignores) says why, e.g.
    ``# perfwatch_store_up 0: StoreMissing: no store at SQLite file ...``."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    collector = StoreCollector()
    registry.register(collector)
    content = generate_latest(registry)
    if collector.problem:
        content += f"# perfwatch_store_up 0: {collector.problem}\n".encode()
    return Response(content=content, media_type=CONTENT_TYPE_LATEST)
