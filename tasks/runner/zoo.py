"""The demo's model store: two versions of a real ``keras.applications`` model.

Version 1 is MobileNetV2 (α=0.35) at 96×96×3, 10 classes, random weights; version 2 is the same
network at width α=0.75 — about 3× the multiply-adds, a release that got measurably slower.
Building the store imports TensorFlow, so it runs in its own process (``perfwatch demo
build-store``), never in an Airflow worker.
"""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL = "demo_mobilenet"
DEMO_VERSIONS = {1: 0.35, 2: 0.75}  # version -> MobileNetV2 width multiplier α
INPUT_SHAPE = (96, 96, 3)


def build_store(store: str | Path, model: str = DEMO_MODEL, *, force: bool = False) -> list[Path]:
    """Write ``<store>/<model>/<v>/model.keras`` for each demo version; existing files are kept
    unless ``force``. Returns the model files."""
    out = []
    for version, alpha in DEMO_VERSIONS.items():
        path = Path(store) / model / str(version) / "model.keras"
        if force or not path.exists():
            import keras

            keras.utils.set_random_seed(version)
            net = keras.applications.MobileNetV2(input_shape=INPUT_SHAPE, alpha=alpha, weights=None, classes=10)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.keras")
            net.save(tmp)
            tmp.replace(path)
        out.append(path)
    return out
