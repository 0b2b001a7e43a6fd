"""A real S3 API on loopback for tests: moto's server mode (``moto.server.ThreadedMotoServer``) on a free port, one
bucket, and the environment that points boto/s3fs at it (``FSSPEC_S3_ENDPOINT_URL``: fsspec's per-protocol
configuration from the environment, read by every new process; :func:`configured` sets it in this one too)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class S3:
    """The running server: its endpoint URL, the bucket, and the environment a process needs to reach it."""

    endpoint: str
    bucket: str
    env: dict[str, str]

    def uri(self, *parts: str) -> str:
        """``s3://<bucket>/<parts...>``."""
        return "/".join([f"s3://{self.bucket}", *parts])

    def fs(self):
        """A fresh (uncached) s3fs filesystem on the server."""
        import s3fs

        return s3fs.S3FileSystem(
            key="testing", secret="testing", client_kwargs={"endpoint_url": self.endpoint}, skip_instance_cache=True
        )

    def keys(self, *parts: str) -> list[str]:
        """Every object key under ``s3://<bucket>/<parts...>`` (bucket-relative), sorted."""
        fs = self.fs()
        root = "/".join([self.bucket, *parts])
        return sorted(p[len(self.bucket) + 1 :] for p in fs.find(root)) if fs.exists(root) else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_s3(bucket: str | None = None) -> Iterator[S3]:
    """Start moto's S3 server on 127.0.0.1 and create ``bucket`` (default ``perfwatch-<8 hex digits>``: moto keeps
    its buckets in this process, so each server gets a new one); stopped when the block ends."""
    import logging
    import secrets

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
    }
    s3 = S3(endpoint, bucket or f"perfwatch-{secrets.token_hex(4)}", env)
    try:
        s3.fs().mkdir(s3.bucket)
        yield s3
    finally:
        server.stop()


@contextlib.contextmanager
def configured(s3: S3, monkeypatch) -> Iterator[S3]:
    """This process's environment and fsspec configuration pointed at ``s3`` (fsspec read its environment
    variables when it was imported, so its ``conf`` is set too); s3fs's cached instances are dropped after."""
    import fsspec.config
    import s3fs

    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3.endpoint})
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield s3
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
