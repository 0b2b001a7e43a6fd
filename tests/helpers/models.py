"""Build tiny real Keras models for tests in a subprocess (keeps TensorFlow out of pytest's process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent("""
    import sys, keras
    kind, path = sys.argv[1], sys.argv[2]
    keras.utils.set_random_seed(0)
    if kind == "tiny":          # Conv2D + Dense on 16x16x3
        inp = keras.Input((16, 16, 3))
        x = keras.layers.Conv2D(4, 3, activation="relu")(inp)
        x = keras.layers.GlobalAveragePooling2D()(x)
        out = keras.layers.Dense(3)(x)
    elif kind == "wide":        # the same, measurably heavier
        inp = keras.Input((16, 16, 3))
        x = keras.layers.Conv2D(64, 3, activation="relu")(inp)
        x = keras.layers.Conv2D(64, 3, activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        out = keras.layers.Dense(3)(x)
    elif kind == "bad_embedding":  # float ids x100, cast to int by Embedding: outside its 1 row, the step fails
        inp = keras.Input((4,))
        x = keras.layers.Embedding(input_dim=1, output_dim=2)(keras.layers.Rescaling(100.0)(inp))
        out = keras.layers.Dense(1)(keras.layers.Flatten()(x))
    elif kind == "heads12":     # 12 outputs (3-class heads): TFLite names them output_0..output_11
        inp = keras.Input((8,))
        x = keras.layers.Dense(16, activation="relu")(inp)
        out = [keras.layers.Dense(3, name=f"head{i}")(x) for i in range(12)]
    else:
        raise SystemExit("unknown kind " + kind)
    model = keras.Model(inp, out)
    if path.endswith(".keras"):
        model.save(path)
    else:
        model.export(path)  # TF SavedModel
""")


def make_model(kind: str, path: Path) -> Path:
    """Write model ``kind`` ('tiny', 'wide', 'bad_embedding', 'heads12') to ``path`` (``*.keras`` or a
    SavedModel dir)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, kind, str(path)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"building test model {kind} failed:\n{proc.stderr[-3000:]}")
    return path
