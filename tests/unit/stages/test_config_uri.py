"""``PERFWATCH_CONFIG`` as a URI (issue 40, item 7): every other artifact of a fleet is a URI, so the config may
be one too; read through fsspec from moto's S3 server, as a host that shares no disk reads it."""

from __future__ import annotations

import pytest
import yaml

from tasks import matrix
from tasks.matrix import load_config
from tasks.settings import Settings
from tasks.stages.devices import config_queues
from tests.helpers.s3 import configured, moto_s3

CONFIG = """\
queues: {gpu: gpu}
models:
  - model: resnet
    measured_steps: 20
    matrix: {batch_size: [8, 16]}
"""


@pytest.fixture
def s3(monkeypatch):
    with moto_s3() as server, configured(server, monkeypatch):
        yield server


def test_the_config_is_read_from_an_object_store_uri(s3):
    uri = s3.uri("perfwatch", "perfwatch.yaml")
    s3.fs().pipe_file(uri, CONFIG.encode())
    settings = Settings.from_env({"PERFWATCH_CONFIG": uri, "PERFWATCH_HOME": "/nowhere"})
    assert sorted(c.batch_size for c in load_config(settings.config_path)) == [8, 16]
    assert config_queues(settings.config_path) == {"gpu": "gpu"}
    assert settings.config_path == uri and matrix.config_exists(settings.config_path)


def test_a_missing_or_broken_config_uri_says_which(s3):
    assert not matrix.config_exists(s3.uri("nothing.yaml"))
    with pytest.raises(FileNotFoundError):
        load_config(s3.uri("nothing.yaml"))
    s3.fs().pipe_file(s3.uri("bad.yaml"), b"models: [\n")
    with pytest.raises(yaml.YAMLError, match="bad.yaml"):
        load_config(s3.uri("bad.yaml"))
