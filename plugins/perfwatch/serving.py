"""The run page's serving-scenario section (``/perfwatch/runs/{id}``): a self-contained block, the scenario's own
figures of an infer/tflite run (``run_tables`` 'inputs' ``latency_ms.serving``, ``tasks.analysis.serving``) in the
words ``perfwatch run`` prints them (``tasks.cli.figures.serving_texts``): a server run's rates offered, issued and
achieved, its per-query percentiles with their intervals and n, every rate a QPS search tried with its outcome and
the host's load there, the search's max QPS and what makes it unstable."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any


def serving_section(fed: Mapping[str, Any] | None) -> str:
    """The section's HTML from the run's ``run_tables`` row ``inputs`` (``fed``); empty for a run without a
    scenario summary (train, failed, stored before scenarios)."""
    from tasks.cli.figures import serving_texts

    summary = ((fed or {}).get("latency_ms") or {}).get("serving")
    texts = serving_texts(summary)
    if texts is None:
        return ""
    out = "<h2 id='serving'>Serving scenario</h2>" + f"<p>{html.escape(texts['summary'])}</p>"
    if texts["points"]:
        cols = list(texts["points"][0])
        head = "".join(f"<th class='text'>{html.escape(c)}</th>" for c in cols)
        rows = "".join(
            "<tr>" + "".join(f"<td class='text'>{html.escape(str(p[c]))}</td>" for c in cols) + "</tr>"
            for p in texts["points"]
        )
        out += (
            "<p class='note'>Every rate tried, in order; q/s offered (the nominal rate), issued (what the arrival "
            "schedule issued) and achieved (queries served per second); latency per query, arrival to result, "
            "queueing included.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )
    for f in texts["findings"]:
        out += f"<p class='warning'>{html.escape(str(f.get('code')))}: {html.escape(str(f.get('message')))}</p>"
    checks = [ln for ln in texts["lines"] if ln.startswith("numbers ")]
    out += "".join(f"<p class='note'>{html.escape(ln)}</p>" for ln in checks)
    return out
