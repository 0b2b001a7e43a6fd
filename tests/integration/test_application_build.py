"""A keras.applications model by name, through the real runner: the pull stage's build (random weights, nothing
downloaded) and a warm-up of a few steps on what it saved; another input shape is another version and another
case, so each shape has its own history."""

from __future__ import annotations

import importlib.metadata
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tasks.records import Case
from tasks.stages.pull import build_application
from tasks.stages.warmup import warm_up

pytestmark = pytest.mark.slow


def test_the_smallest_application_is_built_versioned_by_its_config_and_steps(tmp_path):
    # MobileNetV3Small at 32x32 (the smallest input its constructor accepts), 10 classes; the other shape at 48x48
    small, other = (
        Case(
            model="mobilenet_v3_small",
            backbone="keras.applications",
            input_shape=[side, side, 3],
            classes=10,
            mode="infer",
            batch_size=2,
            warmup_max_steps=10,
        )
        for side in (32, 48)
    )
    with ThreadPoolExecutor(2) as pool:  # two runner processes at once: the TF imports overlap
        built = list(
            pool.map(
                lambda c: build_application(c[1], tmp_path / str(c[0]), sys.executable, 300), enumerate((small, other))
            )
        )
    a, b = built
    keras_version = importlib.metadata.version("keras")
    assert a.version.startswith(f"keras{keras_version}-") and b.version.startswith(f"keras{keras_version}-")
    assert a.version != b.version and a.digest != b.digest and a.version[-8:] == a.digest[:8]
    assert small.name != other.name  # another input shape: another case, its own history and baseline
    assert "MobileNetV3Small(input_shape=(32, 32, 3), classes=10, weights=None)" in a.source_uri
    assert (tmp_path / "0" / "model" / "model.keras").is_file()
    assert a.built is not None and a.built["constructor"] == "MobileNetV3Small" and a.built["params"] > 0
    assert a.built["input_shape"] == [32, 32, 3] and a.built["output_shape"] == [10]
    assert a.built["config_sha256"] == a.digest and len(a.built["weights_sha256"]) == 64
    w = warm_up(a, small, tmp_path / "0", sys.executable, 300)  # the built model runs, as every stage loads it
    assert 1 <= w.warmup_steps <= 10 and w.cold_step_ms > 0 and all(t > 0 for t in w.step_times_ms)


def test_an_application_named_without_a_shape_gets_keras_documented_default_and_steps(tmp_path):
    """The field report: ``perfwatch run mobilenet_v3_small --backbone keras.applications --mode infer`` failed in
    warm-up ("unknown dimension ... give its shape"): MobileNetV3 builds (None, None, 3) without ``input_shape``.
    Keras documents 224x224x3: the build takes it, records it, and the model steps."""
    case = Case(
        model="mobilenet_v3_small", backbone="keras.applications", mode="infer", batch_size=1, warmup_max_steps=10
    )
    pulled = build_application(case, tmp_path, sys.executable, 300)
    assert "MobileNetV3Small(input_shape=(224, 224, 3) (Keras's documented default), weights=None)" in pulled.source_uri
    w = warm_up(pulled, case, tmp_path, sys.executable, 300)
    assert 1 <= w.warmup_steps <= 10 and all(t > 0 for t in w.step_times_ms)


def test_a_build_hashes_alike_however_many_builds_its_process_made_before():
    """The audit: built twice in one process, MobileNetV3Small 32x32x3 with 10 classes hashed to 5d4db9ee, then
    644130b4 (Keras numbers unnamed layers per process). Built under a fresh Keras state, every build of an
    architecture hashes as a fresh process's first; another input shape or class count is another version."""
    import json
    import subprocess
    import textwrap

    script = textwrap.dedent(
        """
        import json
        from tasks.runner import applications
        out = []
        for shape, classes in [((32, 32, 3), 10), ((32, 32, 3), 10), ((48, 48, 3), 10), ((32, 32, 3), 5)]:
            model, _ = applications.build("mobilenet_v3_small", list(shape), classes, 0)
            out.append(applications.config_sha256(model.get_config()))
        print("DIGESTS " + json.dumps(out))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    first, again, wider, fewer = json.loads(done.stdout.split("DIGESTS ", 1)[1])
    assert first == again  # the second build in the process: the same version
    assert len({first, wider, fewer}) == 3  # another input shape, another class count: other versions
    if importlib.metadata.version("keras") == "3.15.1":  # the locked Keras: as the versions stored before the fix
        assert first[:8] == "5d4db9ee"  # (a fresh process's first build)
