"""An S3 API other than AWS's (``FSSPEC_S3_ENDPOINT_URL``): botocore >= 1.36 sends a CRC32 checksum with every PUT
by default, which MinIO and Ceph versions reject (boto/boto3#4392). Where an endpoint is configured, perfwatch's
settings set the checksum mode explicitly (``when_required``); the PUTs its filesystems send to moto's S3 server
carry no checksum they were not asked for. A user's own choice (the botocore variables) is left alone."""

from __future__ import annotations

import fsspec
import fsspec.config
import pytest

from tasks.settings import Settings
from tests.helpers.s3 import configured, moto_s3


@pytest.fixture
def s3(monkeypatch):
    monkeypatch.setattr(fsspec.config, "conf", {k: dict(v) for k, v in fsspec.config.conf.items()})
    with moto_s3() as server, configured(server, monkeypatch):
        yield server


def put_headers(uri: str) -> dict[str, str]:
    """The headers of the PUT that writes ``uri`` through the filesystem perfwatch's stages get for it."""
    fs, path = fsspec.core.url_to_fs(uri)
    seen: dict[str, str] = {}
    fs.s3.meta.events.register("before-send.s3.PutObject", lambda request, **_: seen.update(request.headers))
    fs.pipe_file(path, b"x" * 1000)
    assert fs.cat_file(path) == b"x" * 1000
    return {k.lower(): str(v) for k, v in seen.items()}


def test_a_configured_endpoint_gets_no_checksum_it_did_not_ask_for(s3):
    Settings.from_env({"PERFWATCH_HOME": "/nowhere"})
    headers = put_headers(s3.uri("a", "blob"))
    assert not [h for h in headers if h.startswith("x-amz-checksum-") or h == "x-amz-sdk-checksum-algorithm"]


def test_the_users_own_checksum_mode_is_left_alone(s3, monkeypatch):
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported")
    Settings.from_env({"PERFWATCH_HOME": "/nowhere"})
    assert "x-amz-checksum-crc32" in put_headers(s3.uri("b", "blob"))
