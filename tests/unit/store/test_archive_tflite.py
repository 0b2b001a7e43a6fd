"""The archive keeps a tflite run's converted model (issue 26: the stored path pointed into the deleted work dir)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sqlalchemy import select

from tasks.stages.archive import archive_run
from tasks.store import Artifact, RunTable, session_scope
from tests.helpers.builders import make_records


def test_archive_keeps_the_tflite_file_and_the_record_names_the_kept_copy(db_url, tmp_path):
    recs = make_records(tmp_path)
    samples_path = Path(recs[4].samples_path)
    lite_file = samples_path.parent / "model.tflite"
    lite_file.write_bytes(b"TFL3-flatbuffer-bytes")
    lite = {"quantization": "int8", "tflite_path": str(lite_file), "num_threads": 2, "xnnpack": True}
    samples_path.write_text(json.dumps({**json.loads(samples_path.read_text()), "tflite": lite}))
    out = archive_run(db_url, str(tmp_path / "archive"), *recs)
    shutil.rmtree(tmp_path / "r1")  # the work dir goes after the run
    kept = Path(out.archive_uri) / "tflite" / "model.tflite"
    assert kept.read_bytes() == b"TFL3-flatbuffer-bytes"
    with session_scope(db_url) as s:
        art = s.scalar(select(Artifact).where(Artifact.kind == "tflite"))
        assert art is not None and art.uri.endswith("/tflite/model.tflite") and Path(art.uri).is_file()
        assert art.sha256 == hashlib.sha256(b"TFL3-flatbuffer-bytes").hexdigest() and art.size_bytes == 21
        stored = s.scalar(select(RunTable.data).where(RunTable.tool == "tflite"))
    assert stored["tflite_path"] == "tflite/model.tflite"  # relative to the run's archive directory
    assert (Path(out.archive_uri) / stored["tflite_path"]).is_file()
    assert (stored["num_threads"], stored["xnnpack"]) == (2, True)
