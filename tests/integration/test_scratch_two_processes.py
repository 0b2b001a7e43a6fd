"""A cached S3 listing must not hide what another host wrote (fsspec/s3fs#851: s3fs's dircache has no expiry).

The writer and the reader are two processes against moto's S3 server, as two workers are: the writer, in a
process of its own, uploads the run's profile (``scratch.push``); the reader fetches it (so its filesystem caches
the listings of the run's prefix); the writer, in another process (a later stage, a retried task), uploads more;
the reader fetches again and must get every file, the new ones too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.records import Case, RunContext
from tasks.settings import Settings
from tasks.stages import scratch
from tests.helpers import ROOT
from tests.helpers.s3 import configured, moto_s3

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tasks.records import RunContext
    from tasks.settings import Settings
    from tasks.stages import scratch
    settings, ctx = Settings.from_env(), RunContext.model_validate_json(sys.argv[1])
    local = scratch.local_dir(settings, ctx)
    for rel in sys.argv[2:]:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_text(rel)
    print(sorted(scratch.push(settings, ctx)))
    """
)


def host_env(tmp_path: Path, name: str, s3) -> dict[str, str]:
    return {"PERFWATCH_HOME": str(tmp_path / name), "PERFWATCH_SCRATCH": s3.uri("scratch"), **s3.env}


def write(tmp_path: Path, name: str, s3, ctx: RunContext, *rels: str) -> None:
    """``rels`` written and pushed by a writer process of its own (host ``name``)."""
    env = {**os.environ, **host_env(tmp_path, name, s3), "PYTHONPATH": str(ROOT)}
    wrote = subprocess.run(
        [sys.executable, "-c", WRITER, ctx.model_dump_json(), *rels],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrote.returncode == 0, wrote.stderr
    assert all(rel in wrote.stdout for rel in rels)


def test_files_another_process_wrote_are_fetched_although_a_listing_was_cached(tmp_path, monkeypatch):
    ctx = RunContext(dag_id="d", dag_run_id="r1", case=Case(model="m"))
    xplane = "run/profile/plugins/profile/s1/a.xplane.pb"
    with moto_s3() as s3, configured(s3, monkeypatch):
        reader = Settings.from_env(host_env(tmp_path, "reader", s3))
        write(tmp_path, "writer", s3, ctx, xplane)
        assert scratch.fetch(reader, ctx, ["run"]) == [xplane]  # the reader has listed the run's prefix
        later = ["run/result.json", "run/profile/plugins/profile/s1/b.xplane.pb"]
        write(tmp_path, "writer2", s3, ctx, *later)
        got = scratch.fetch(reader, ctx, ["run/result.json", "run/profile"])
    assert sorted(got) == sorted(later)
    assert (scratch.local_dir(reader, ctx) / "run" / "result.json").read_text() == "run/result.json"
