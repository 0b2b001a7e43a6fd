"""The example input pipelines (``tasks.runner.input_fns``) over the TFRecord images that ``perfwatch demo
build-zoo`` writes: the batches they yield (shape, dtype, range), that both decode the very images that were
written, where they look for the files, and the zoo config the command writes.

TensorFlow runs only in subprocesses (the CLI, and one script that reads the pipelines).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.records import Case
from tasks.runner.zoo import ZOO, zoo_cases
from tasks.stages.pipeline import load_config

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent

_READ = r"""
import hashlib, json, os, sys
import numpy as np, tensorflow as tf
from tasks.runner import input_fns as p

out = {"files": p.image_files(), "dir": str(p.images_dir())}
decoded = [p.parse_image(r).numpy() for r in tf.data.TFRecordDataset(out["files"])]  # every written image, in order
digest = lambda a: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
known = {digest(a) for a in decoded}
out["n_images"] = len(decoded)
for name, ds in (("fast", p.images_fast(batch_size=8, seed=1)), ("slow", p.images_slow(batch_size=8))):
    batches = [b.numpy() for b in ds.take(40)]  # 320 images from 256: the pipeline repeats
    out[name] = {"spec": [ds.element_spec.shape.as_list(), ds.element_spec.dtype.name],
                 "shapes": sorted({b.shape for b in batches}), "min": float(min(b.min() for b in batches)),
                 "max": float(max(b.max() for b in batches)),
                 "all_written": all(digest(img) in known for b in batches for img in b),
                 "first_is_first_written": bool(np.array_equal(batches[0], np.stack(decoded[:8]))),
                 "distinct_in_first": len({digest(img) for img in batches[0]})}
os.environ["PERFWATCH_IMAGES"] = sys.argv[1]
try:
    p.images_fast(batch_size=8)
except FileNotFoundError as e:
    out["missing"] = str(e)
print("RESULT " + json.dumps(out, default=list))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """``perfwatch demo build-zoo`` into a fresh PERFWATCH_HOME, then the pipelines read back in a subprocess."""
    home = tmp_path_factory.mktemp("pipelines") / "pwhome"
    env = {**os.environ, "PERFWATCH_HOME": str(home), "TF_CPP_MIN_LOG_LEVEL": "3"}
    for var in ("PERFWATCH_MODEL_STORE", "PERFWATCH_IMAGES", "PERFWATCH_DATABASE_URL"):
        env.pop(var, None)
    cli = subprocess.run(
        [str(BIN / "perfwatch"), "demo", "build-zoo"], env=env, capture_output=True, text=True, timeout=900
    )
    assert cli.returncode == 0, cli.stdout[-2000:] + cli.stderr[-3000:]
    empty = home / "empty"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _READ, str(empty)], env=env, capture_output=True, text=True, timeout=900
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return {"home": home, "cli": cli.stdout, **json.loads(lines[-1].split(" ", 1)[1])}


def test_build_zoo_writes_images_under_perfwatch_home(built):
    assert built["dir"] == str(built["home"] / "data" / "images")
    assert [Path(f).name for f in built["files"]] == [f"images-{i:02d}-of-04.tfrecord" for i in range(4)]
    assert built["n_images"] == 4 * 64


@pytest.mark.parametrize("which", ["fast", "slow"])
def test_pipeline_yields_model_ready_batches_of_the_written_images(built, which):
    got = built[which]
    assert got["spec"] == [[8, 32, 32, 3], "float32"]  # static batch shape: drop_remainder
    assert got["shapes"] == [[8, 32, 32, 3]]
    assert 0.0 <= got["min"] < got["max"] <= 1.0  # convert_image_dtype: uint8 -> [0, 1]
    assert got["all_written"]  # every image is one of those written, decoded (PNG) exactly as tf.io.decode_png does
    assert got["distinct_in_first"] == 8


def test_slow_pipeline_reads_in_file_order_and_fast_one_shuffles(built):
    assert built["slow"]["first_is_first_written"] is True  # sequential: the Python-side decode is the real one
    assert built["fast"]["first_is_first_written"] is False  # parallel reads + shuffle


def test_missing_images_say_where_and_how_to_write_them(built):
    assert "no *.tfrecord files in" in built["missing"] and str(built["home"] / "empty") in built["missing"]
    assert "perfwatch demo build-zoo" in built["missing"]


def test_build_zoo_writes_every_model_and_a_config_of_valid_cases(built):
    models = built["home"] / "models"
    for name, z in ZOO.items():
        version = models / name / "1"
        assert (version / ("saved_model.pb" if z.layout == "export" else "model.keras")).is_file(), name
        assert name in built["cli"]
    cases = load_config(built["home"] / "zoo.yaml")
    assert [c.model_dump(exclude_defaults=True) for c in cases] == [
        Case.model_validate(c).model_dump(exclude_defaults=True) for c in zoo_cases()
    ]
    assert {(c.model, c.mode) for c in cases} == {(n, m) for n, z in ZOO.items() for m in z.modes}
    assert {c.input_fn for c in cases} == {
        None,
        "tasks.runner.input_fns:images_fast",
        "tasks.runner.input_fns:images_slow",
    }
