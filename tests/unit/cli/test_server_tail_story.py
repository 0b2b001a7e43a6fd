"""A server case's per-query tail gate decides its verdict (``Case.gate_percentile``; issue 27, the serving team's
audit): `perfwatch runs`, `perfwatch gate` and `perfwatch history` then lead its story with the figure that decided,
the per-query p99 ratio, with each side's p99, interval and n, and name the method as that tail gate (before, the
line read "step-time ratio 36.672 ...; two processes' medians", the tail's ratio under the median's name)."""

from __future__ import annotations

import re

import pytest

from tasks.analysis.percentiles import percentile_ci
from tests.helpers.builders import archive_server_run, server_points, server_run_records


@pytest.fixture
def gated(db_url, tmp_path) -> dict:
    from tasks.stages.archive import archive_run
    from tasks.stages.compare import baseline_compare

    slow = server_points([(200.0, 0.008)], n=640)  # the baseline: 640 queries at 200 q/s, 8-12 ms a batch
    base = archive_server_run(db_url, tmp_path, "base", slow, model="g", gate_percentile=99)
    # 1.5x the service time: at 0.75 of its capacity (0.5 before) queues grow longer, the tail with them; the
    # server still keeps up (a valid point)
    worse = server_points([(200.0, 0.012)], n=640)
    ctx, pulled, env, warm, run, parsed, _ = server_run_records(tmp_path, "cand", worse, model="g", gate_percentile=99)
    verdict = baseline_compare(db_url, ctx.case, env, run, parsed, tmp_path / "cand" / "work")
    cand = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, verdict).run_id
    return {"base": base, "cand": cand, "version": pulled.version, "slow": slow, "worse": worse, "verdict": verdict}


def _side(latency_ms: list[float]) -> str:
    ci = percentile_ci(latency_ms, 99, 0.995)  # each side's interval at 99.5%: both cover together at 99%
    return f"p99 {ci.point:.2f} ms [{ci.low:.2f}, {ci.high:.2f}] n={ci.n}"


def test_the_verdict_line_shows_the_per_query_p99_of_each_side(cli, gated):
    assert gated["verdict"].verdict == "regression"
    base, cand = _side(gated["slow"][0]["latency_ms"]), _side(gated["worse"][0]["latency_ms"])
    for args in (("runs",), ("gate", "g", gated["version"]), ("history", "g")):
        res = cli(*args)
        flat = " ".join(res.output.split())
        line = re.search(rf"run {gated['cand']} regression: [^\n]*", flat)
        assert line is not None, (args, flat)
        text = line[0]
        assert text.startswith(f"run {gated['cand']} regression: p99 per query ratio "), (args, text)
        assert f"(baseline {base}, candidate {cand}; each side's interval at 99.5%)" in text, (args, text)
        assert "tail gate on the p99 per query" in text and "step-time ratio" not in text.split("why:")[0]
        assert "two processes' medians" not in text.split("why:")[0]


def test_the_tail_reason_gives_each_sides_interval(gated):
    reason = gated["verdict"].evidence["per_query_tail"]["reason"]
    b = percentile_ci(gated["worse"][0]["latency_ms"], 99, 0.995)
    a = percentile_ci(gated["slow"][0]["latency_ms"], 99, 0.995)
    assert f"candidate p99 {b.point:.3f} ms [{b.low:.3f}, {b.high:.3f}] n=640" in reason
    assert f"baseline p99 {a.point:.3f} ms [{a.low:.3f}, {a.high:.3f}] n=640" in reason


def test_the_story_json_names_the_deciding_tail(cli, gated):
    import json

    rows = {r["run_id"]: r for r in json.loads(cli("runs", "--format", "json").stdout)}
    story = rows[gated["cand"]]["decision"]
    assert story["gated_on"] == "p99 per query"
    assert story["tail_sides"]["baseline"]["n"] == 640 and story["tail_sides"]["candidate"]["n"] == 640
    assert story["figure"].startswith("p99 per query ratio ")
