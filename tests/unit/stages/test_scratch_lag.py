"""Issue 40 item 2: a file another host wrote that the object store does not show yet (a lagging proxy or MinIO/Ceph
gateway) is looked up again before the stage goes on without it; an optional directory is looked up once. The
object store here is fsspec's in-memory one behind a protocol whose ``info`` misses a key for its first looks."""

from __future__ import annotations

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from tasks.records import Case, RunContext
from tasks.settings import Settings
from tasks.stages import scratch


class LaggingFS(MemoryFileSystem):
    """In-memory store whose ``info`` answers "not found" for the first ``lag`` looks at a key whose last part is in
    ``lagging`` (counted per key)."""

    protocol = "laggingmem"
    lag = 0
    lagging = {"result.json", "gx"}
    looks: dict[str, int] = {}

    @classmethod
    def _strip_protocol(cls, path):
        return MemoryFileSystem._strip_protocol(str(path).removeprefix("laggingmem://"))

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        if path.rsplit("/", 1)[-1] not in LaggingFS.lagging:
            return super().info(path, **kwargs)
        LaggingFS.looks[path] = LaggingFS.looks.get(path, 0) + 1
        if LaggingFS.looks[path] <= LaggingFS.lag:
            raise FileNotFoundError(path)
        return super().info(path, **kwargs)


@pytest.fixture
def lagging(tmp_path, monkeypatch):
    fsspec.register_implementation("laggingmem", LaggingFS, clobber=True)
    monkeypatch.setattr(scratch, "READ_RETRIES_S", (0.0, 0.0, 0.0))
    LaggingFS.looks = {}
    settings = Settings.from_env({"PERFWATCH_HOME": str(tmp_path / "h"), "PERFWATCH_SCRATCH": "laggingmem://scratch"})
    ctx = RunContext(dag_id="d", dag_run_id="r", trigger="manual", case=Case(model="m", version="1"))
    fs = fsspec.filesystem("laggingmem")
    fs.pipe(f"/scratch/{ctx.slug}/run/result.json", b"{}")
    yield settings, ctx
    LaggingFS.lag = 0
    fs.rm("/scratch", recursive=True)


def test_a_key_the_store_shows_late_is_fetched(lagging):
    settings, ctx = lagging
    LaggingFS.lag = 2  # missing on the first two looks
    assert scratch.fetch(settings, ctx, ["run/result.json"]) == ["run/result.json"]
    assert (scratch.local_dir(settings, ctx) / "run" / "result.json").read_bytes() == b"{}"


def test_a_key_never_shown_is_skipped_after_the_retries_and_an_optional_dir_is_looked_up_once(lagging):
    settings, ctx = lagging
    LaggingFS.lag = 99
    assert scratch.fetch(settings, ctx, ["run/result.json"], optional=["gx"]) == []
    looks = {k.rsplit("/", 1)[-1]: n for k, n in LaggingFS.looks.items()}
    assert looks == {"result.json": 1 + len(scratch.READ_RETRIES_S), "gx": 1}
