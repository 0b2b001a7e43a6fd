"""GX Data Docs of a run: they name the model, version, case and DAG run, every suite they link has its page,
and every relative link of every page resolves after the site is moved elsewhere whole (as the archive
stage copies it into the run's archive directory)."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from tasks.records import Case, RunContext
from tasks.stages import expectations


def _links(page: Path) -> list[str]:
    """The relative links of a Data Docs page: href/src attributes (also inside its scripts) and the
    index table's row links."""
    text = page.read_text()
    found = re.findall(r"""(?:href|src)=\\?["']([^"'#\\]+)""", text) + re.findall(
        r"'_table_row_link_path': '([^']+)'", text
    )
    return [link for link in found if "://" not in link]


def _plain(page: Path) -> str:
    """A page's text without tags and scripts, whitespace collapsed."""
    text = re.sub(r"<script.*?</script>|<style.*?</style>", " ", page.read_text(), flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def test_data_docs_name_the_run_and_their_links_resolve_where_archived(tmp_path):
    ctx = RunContext(
        dag_id="perfwatch_profile",
        dag_run_id="manual__2026-11-30T15:00:00+00:00",
        case=Case(model="resnet", batch_size=32),
    )
    title = expectations.data_docs_title(ctx, "2")
    assert title == "resnet v2 train-bs32, DAG run perfwatch_profile/manual__2026-11-30T15:00:00+00:00"
    outcomes = {
        "step_times": expectations.validate_step_times([10.0, 10.1, 10.2], min_rows=3),
        "paired_steps": expectations.validate_step_times([10.0, 10.1, 10.2, 10.3], min_rows=4),
        "verdict": expectations.validate_verdict(1.2, 1.15, 1.25, tolerance=0.05),
    }
    built = expectations.render_data_docs(outcomes, tmp_path / "work" / "gx", title=title)
    site = tmp_path / "archive" / "resnet" / "run000001" / "gx"
    site.parent.mkdir(parents=True)
    shutil.move(built.parent, site)  # archived whole: nothing may point back into the work dir

    index = (site / "index.html").read_text()
    assert f"<strong >Data Docs</strong> | {title}" in index
    pages = {p.stem: p for p in site.glob("validations/*/*/*/*.html")}
    assert sorted(pages) == ["paired_steps", "step_times", "verdict"]
    for name, page in pages.items():
        text = _plain(page)
        assert f"Run Name {title}" in text and f"Data asset: {name}" in text, name  # on every result page
    # one suite page per suite, the paired steps' own (its row minimum differs)
    suites = sorted(p.stem for p in site.glob("expectations/*.html"))
    assert suites == ["perfwatch_step_times", "perfwatch_step_times_paired_steps", "perfwatch_verdict"]
    assert "greater than or equal to 4 rows" in _plain(site / "expectations" / "perfwatch_step_times_paired_steps.html")
    assert "greater than or equal to 3 rows" in _plain(site / "expectations" / "perfwatch_step_times.html")
    broken = [
        (str(p.relative_to(site)), link)
        for p in site.rglob("*.html")
        for link in _links(p)
        if not (p.parent / link.split("?")[0]).resolve().is_file()
    ]
    assert broken == []
    assert len([link for link in _links(site / "index.html") if link.startswith("validations/")]) == 3
    assert not list((tmp_path / "work").rglob("*"))  # nothing was written outside the site
