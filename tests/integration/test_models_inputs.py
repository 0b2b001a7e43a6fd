"""Issue 13, the runner side: every model users bring is fed as it declares its inputs (or as the case's
``inputs`` say), timed in ``train`` or ``infer`` mode, or refused with an error that says what to do.

The rows of the issue's table, each on a tiny real model built once per session in a subprocess and run by
the real runner process (``tasks.runner.launch``); the input resolution rules also without TensorFlow
(``tasks.runner.inputs.resolve`` on declared inputs written by hand). The ``input_fn`` functions the
runner imports are defined at the bottom of this module (``tests.integration.test_models_inputs:...``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tasks.records import Case, InputSpec
from tasks.runner import RunnerError, RunnerSpec, launch
from tasks.runner.inputs import Declared, Signature, resolve

_BUILD = textwrap.dedent("""
    import sys, keras, tensorflow as tf
    root = sys.argv[1]
    keras.utils.set_random_seed(0)

    img = keras.Input((None, None, 3), name="image")       # dynamic spatial dims
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(img))
    keras.Model(img, keras.layers.Dense(3)(x)).save(root + "/cnn.keras")

    zeta, alpha = keras.Input((4,), name="zeta"), keras.Input((8,), name="alpha")   # named dict inputs
    scores = keras.layers.Dense(3)(keras.layers.Concatenate()([zeta, alpha]))
    label = keras.ops.argmax(scores, axis=-1)               # an int64 output: never in the loss
    keras.Model({"zeta": zeta, "alpha": alpha}, {"scores": scores, "label": label}).save(root + "/dict.keras")

    tok = keras.Input((6,), dtype="int32", name="tokens")   # token ids into an Embedding of 1000 rows
    e = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(1000, 8)(tok))
    keras.Model(tok, keras.layers.Dense(1)(e)).save(root + "/tokens.keras")

    class Classifier(tf.Module):                            # float scores and a string label
        def __init__(self):
            self.w = tf.Variable(tf.random.normal((4, 3)))
        @tf.function(input_signature=[tf.TensorSpec((None, 4), tf.float32, name="x")])
        def serve(self, x):
            s = tf.nn.softmax(x @ self.w)
            return {"scores": s, "label": tf.gather(tf.constant(["cat", "dog", "eel"]), tf.argmax(s, axis=1))}
    c = Classifier()
    tf.saved_model.save(c, root + "/strout", signatures={"serving_default": c.serve})

    class Texts(tf.Module):                                 # one string input (issue 26)
        def __init__(self):
            self.w = tf.Variable(tf.random.normal((1, 3)))
        @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name="text")])
        def serve(self, text):
            return {"scores": tf.cast(tf.strings.length(text), tf.float32)[:, None] @ self.w}
    t = Texts()
    tf.saved_model.save(t, root + "/strin", signatures={"serving_default": t.serve})

    f = keras.Input((4,), name="f")                         # export-only SavedModel (serving endpoint)
    keras.Model(f, keras.layers.Dense(2)(f)).export(root + "/exported")

    keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(2)]).save(root + "/seq.keras")

    g = keras.Input((4,), name="g")                         # a Lambda layer: code only a trusted model may run
    keras.Model(g, keras.layers.Dense(1)(keras.layers.Lambda(lambda t: t * 2.0)(g))).save(root + "/lambda.keras")
""")


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("zoo13")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", _BUILD, str(root)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"building the test models failed:\n{proc.stderr[-3000:]}")
    return root


def _run(model: Path, tmp_path: Path, mode: str = "warmup", **options) -> dict:
    """The runner's result for ``model``: a short warm-up, or a profile run of 6 measured steps."""
    steps = {"warmup": {"warmup_max_steps": 10}, "profile": {"measured_steps": 6, "profiled_steps": 2}}[mode]
    spec = RunnerSpec(
        mode=mode,
        model_path=str(model),
        out_dir=str(tmp_path / f"out{len(list(tmp_path.iterdir()))}"),
        **{"batch_size": 2, **steps, **options},
    )
    return launch(spec, sys.executable, 600).model_dump(mode="json")


# ------------------------------------------------------------------ input resolution, no TensorFlow

_IMG = Signature((Declared("image", (None, None, None, 3), "float32"),), "single")


def test_a_none_dimension_is_an_error_naming_the_input_and_dimension():
    with pytest.raises(
        RunnerError,
        match=r"input 'image' has an unknown dimension 1 \(shape \(None, None, None, 3\)\).*"
        r"inputs: \{image: \{shape: \[224, 224, 3\]\}\}",
    ):
        resolve(_IMG, None, 8)
    [feed] = resolve(_IMG, {"image": {"shape": [32, 24, 3]}}, 8)
    assert (feed.shape, feed.dtype) == ((8, 32, 24, 3), "float32")
    with pytest.raises(
        RunnerError,
        match=r"shape \[32, 24, 4\] contradicts the model's \(None, None, None, 3\) "
        r"at dimension 3",
    ):
        resolve(_IMG, {"image": {"shape": [32, 24, 4]}}, 8)
    with pytest.raises(RunnerError, match=r"has 2 dimensions, the model's .* has 3"):
        resolve(_IMG, {"image": {"shape": [32, 24]}}, 8)


def test_unknown_input_names_list_the_models_inputs():
    sig = Signature((Declared("zeta", (None, 4), "float32"), Declared("alpha", (None, 8), "float32")), "dict")
    with pytest.raises(
        RunnerError,
        match=r"inputs \['beta'\] are not inputs of the model; its inputs are "
        r"\['zeta', 'alpha'\]",
    ):
        resolve(sig, {"beta": {"shape": [3]}}, 2)


def test_integer_ranges_come_from_the_case_or_an_embedding_else_are_asked_for():
    tokens = Declared("tokens", (None, 6), "int32", vocab=1000)
    assert resolve(Signature((tokens,), "single"), None, 4)[0].record() == {
        "shape": [4, 6],
        "dtype": "int32",
        "min": 0,
        "max": 1000,
    }
    given = resolve(Signature((tokens,), "single"), {"tokens": {"min": 5, "max": 9}}, 4)[0]
    assert (given.low, given.high) == (5, 9)
    ids = Signature((Declared("ids", (None, 3), "int64"),), "single")
    with pytest.raises(
        RunnerError,
        match=r"input 'ids' is int64 and no Embedding layer consumes it.*"
        r"inputs: \{ids: \{min: 0, max: 30522\}\}",
    ):
        resolve(ids, None, 2)
    with pytest.raises(RunnerError, match="string input .* give the case an input_fn"):
        resolve(Signature((Declared("text", (None,), "str"),), "single"), None, 2)


def test_two_input_shapes_are_two_cases():
    a = Case(model="m", inputs={"image": InputSpec(shape=[224, 224, 3])})
    b = Case(model="m", inputs={"image": InputSpec(shape=[320, 320, 3])})
    assert a.name != b.name and a.name.startswith("train-bs16-in") and b.name.startswith("train-bs16-in")
    assert Case(model="m", mode="infer", batch_size=1).name == "infer-bs1"
    assert Case(model="m", input_fn="pkg.mod:fn").name != Case(model="m", input_fn="pkg.mod:other").name
    with pytest.raises(ValueError, match="give inputs or input_fn, not both"):
        Case(model="m", input_fn="pkg.mod:fn", inputs={"image": InputSpec(shape=[8, 8, 3])})


# ------------------------------------------------------------------ the table, in the runner


@pytest.mark.slow
def test_dynamic_cnn_needs_its_shape_and_records_it(zoo, tmp_path):
    with pytest.raises(RunnerError, match=r"input 'image' has an unknown dimension 1"):
        _run(zoo / "cnn.keras", tmp_path)
    r = _run(zoo / "cnn.keras", tmp_path, inputs={"image": {"shape": [20, 12, 3]}})
    assert r["inputs"] == {"image": {"shape": [2, 20, 12, 3], "dtype": "float32", "min": None, "max": None}}
    assert (r["case_mode"], r["input_source"], r["safe_mode"]) == ("train", "synthetic", True)


@pytest.mark.slow
def test_a_sequential_model_built_with_keras_input_is_measured(zoo, tmp_path):
    """A new team's keras.Sequential([keras.Input((256,)), Dense, ...]) was refused in warm-up: "declares no inputs
    (... never been called ...); perfwatch needs a functional or Sequential model built with keras.Input". A loaded
    Sequential model has no ``model.input`` (Keras raises) but has its ``model.inputs``."""
    r = _run(zoo / "seq.keras", tmp_path)
    assert r["inputs"] == {"input_layer": {"shape": [2, 16], "dtype": "float32", "min": None, "max": None}}
    assert r["case_mode"] == "train"


@pytest.mark.slow
def test_dict_inputs_are_fed_by_name_and_only_floating_outputs_train(zoo, tmp_path):
    r = _run(zoo / "dict.keras", tmp_path)  # outputs: float scores and an int64 argmax label
    assert r["inputs"] == {
        "zeta": {"shape": [2, 4], "dtype": "float32", "min": None, "max": None},
        "alpha": {"shape": [2, 8], "dtype": "float32", "min": None, "max": None},
    }
    assert r["cold_step_ms"] > 0 and all(t > 0 for t in r["warmup_step_times_ms"])


@pytest.mark.slow
def test_token_ids_span_the_embedding_vocabulary(zoo, tmp_path):
    r = _run(zoo / "tokens.keras", tmp_path)
    assert r["inputs"]["tokens"] == {"shape": [2, 6], "dtype": "int32", "min": 0, "max": 1000}


@pytest.mark.slow
def test_string_label_savedmodel_infers_and_cannot_train(zoo, tmp_path):
    r = _run(zoo / "strout", tmp_path, "profile", case_mode="infer", batch_size=3)
    assert r["inputs"] == {"x": {"shape": [3, 4], "dtype": "float32", "min": None, "max": None}}
    lat = r["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"] == max(r["measured_step_times_ms"])
    assert lat["p50"] == sorted(r["measured_step_times_ms"])[2]  # nearest rank x(ceil(6 x 0.5)), not interpolated
    assert lat["throughput_eps"] == pytest.approx(3 * 6 / (sum(r["measured_step_times_ms"]) / 1000))
    with pytest.raises(RunnerError, match=r"strout has no training function.*measure it with mode: infer"):
        _run(zoo / "strout", tmp_path)


@pytest.mark.slow
def test_export_only_savedmodel_train_says_use_infer_and_infer_works(zoo, tmp_path):
    with pytest.raises(
        RunnerError,
        match=r"exported has no training function: its signatures \['serve', "
        r"'serving_default'\] are inference functions.*measure it with mode: infer",
    ):
        _run(zoo / "exported", tmp_path)
    r = _run(zoo / "exported", tmp_path, case_mode="infer", signature="serve")
    assert r["case_mode"] == "infer" and r["signature"] == "serve" and r["warmup_step_times_ms"]
    with pytest.raises(RunnerError, match=r"no signature 'predict'; its signatures are \['serve', 'serving_default'\]"):
        _run(zoo / "exported", tmp_path, case_mode="infer", signature="predict")
    paired = launch(
        RunnerSpec(
            mode="paired",
            model_path=str(zoo / "exported"),
            out_dir=str(tmp_path / "paired"),
            baseline_model_path=str(zoo / "exported"),
            batch_size=2,
            case_mode="infer",
            warmup_steps=1,
            blocks=2,
            block_steps=1,
        ),
        sys.executable,
        600,
    ).model_dump(mode="json")
    assert paired["case_mode"] == "infer" and [len(b["a_ms"]) for b in paired["blocks"]] == [1, 1]


@pytest.mark.slow
def test_lambda_layer_loads_only_with_safe_mode_off(zoo, tmp_path):
    with pytest.raises(
        RunnerError,
        match=r"cannot load Keras model .*lambda.keras.*safe_mode.*"
        r"set safe_mode: false in its case",
    ):
        _run(zoo / "lambda.keras", tmp_path)
    r = _run(zoo / "lambda.keras", tmp_path, safe_mode=False, case_mode="infer")
    assert r["safe_mode"] is False and r["warmup_step_times_ms"]


# ------------------------------------------------------------------ Params, config, store, CLI


def test_dag_params_and_the_yaml_config_build_the_case(home, tmp_path):
    from tasks.matrix import load_config
    from tasks.settings import Settings
    from tasks.stages.pipeline import plan_cases

    params = {
        "model": "bert",
        "version": "latest",
        "batch_size": 1,
        "measured_steps": 20,
        "trigger": "manual",
        "case": None,
        "mode": "infer",
        "inputs": {"ids": {"shape": [128], "dtype": "int32", "max": 30522, "min": 0}},
        "input_fn": None,
        "signature": "serve",
        "safe_mode": False,
    }
    (bundle,) = plan_cases("dag", "manual__1", "manual", params, Settings.from_env())
    case = Case.model_validate(bundle["ctx"]["case"])
    assert (case.mode, case.signature, case.safe_mode) == ("infer", "serve", False)
    assert case.inputs["ids"] == InputSpec(shape=[128], dtype="int32", min=0, max=30522)
    assert case.name.startswith("infer-bs1-in")
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(
        "models:\n  - model: cnn\n    mode: infer\n    inputs: {image: {shape: [64, 64, 3]}}\n"
        "  - model: lam\n    safe_mode: false\n    input_fn: my.pipe:batches\n"
    )
    cnn, lam = load_config(cfg)
    assert cnn.inputs["image"].shape == [64, 64, 3] and cnn.mode == "infer"
    assert lam.safe_mode is False and lam.input_fn == "my.pipe:batches"
    cfg.write_text("models:\n  - model: cnn\n    inputs: {image: {shape: [64, 0, 3]}}\n")
    with pytest.raises(ValueError, match=r"(?s)models\[0\] is invalid.*must list positive integers"):
        load_config(cfg)


_PARAMS_PROBE = textwrap.dedent("""
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    params = DagBag(dag_folder=sys.argv[1]).get_dag("perfwatch_profile").params
    out = {}
    for name, value in json.loads(sys.argv[2]):
        try:
            out[json.dumps([name, value])] = ["ok", params.get_param(name).resolve(value)]
        except Exception as e:
            out[json.dumps([name, value])] = ["refused", type(e).__name__]
    print(json.dumps({"results": out, "described": sorted(n for n in ("mode", "inputs", "input_fn", "signature",
                      "safe_mode") if params.get_param(n).description)}))
""")


def test_the_trigger_form_validates_the_new_params(tmp_path):
    import json

    from tests.helpers import ROOT
    from tests.helpers.airflow import DAG_PYTHONPATH

    tried = [
        ("inputs", {"image": {"shape": [224, 224, 3]}}),
        ("inputs", {"ids": {"min": 0, "max": 9}}),
        ("inputs", {"image": {"shape": [0, 3]}}),
        ("inputs", {"image": {"colour": 1}}),
        ("mode", "infer"),
        ("mode", "serve"),
        ("input_fn", "pkg.mod:fn"),
        ("input_fn", "pkg.mod"),
        ("safe_mode", False),
        ("safe_mode", "no"),
    ]
    env = {
        **os.environ,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYTHONPATH": DAG_PYTHONPATH,
        "AIRFLOW_HOME": os.environ.get("AIRFLOW_HOME", str(tmp_path / "airflow")),
    }
    out = subprocess.run(
        [sys.executable, "-c", _PARAMS_PROBE, str(ROOT / "dags"), json.dumps(tried)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    )
    info = json.loads(out.stdout.strip().splitlines()[-1])
    verdicts = [info["results"][json.dumps([n, v])][0] for n, v in tried]
    assert verdicts == ["ok", "ok", "refused", "refused", "ok", "refused", "ok", "refused", "ok", "refused"]
    assert info["described"] == ["input_fn", "inputs", "mode", "safe_mode", "signature"]


def test_what_was_fed_is_stored_with_the_run_and_shown(db_url, tmp_path):
    import json

    from tasks.cli.main import runs_frame
    from tasks.stages.archive import archive_run
    from tasks.store import RunTable, session_scope
    from tests.helpers.builders import make_records

    ctx, pulled, env, warm, run, parse, comp = make_records(tmp_path)
    ctx = ctx.model_copy(update={"case": ctx.case.model_copy(update={"mode": "infer", "safe_mode": False})})
    samples = json.loads(Path(run.samples_path).read_text())
    latency = {"p50": 10.0, "p90": 10.1, "p99": 10.2, "max": 10.3, "throughput_eps": 99.0}
    samples.update(
        case_mode="infer",
        input_source="synthetic",
        safe_mode=False,
        signature="serving_default",
        inputs={
            "tokens": {"shape": [16, 6], "dtype": "int32", "min": 0, "max": 1000},
            "mask": {"shape": [16, 6], "dtype": "float32", "min": None, "max": None},
        },
        latency_ms=latency,
    )
    Path(run.samples_path).write_text(json.dumps(samples))
    run_id = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parse, comp).run_id
    with session_scope(db_url) as s:
        stored = s.get(RunTable, (run_id, "inputs")).data
    assert stored["latency_ms"] == latency and stored["inputs"] == samples["inputs"] and stored["safe_mode"] is False
    row = runs_frame(db_url, "m").iloc[-1]
    assert (row["mode"], row["safe_mode"]) == ("infer", False)
    assert row["inputs"] == "tokens 16x6 int32 [0,1000); mask 16x6 float32"


def test_perfwatch_run_takes_the_case_fields_as_options(home, model_store):
    import json

    from typer.testing import CliRunner

    from tasks.cli.main import app

    cli = CliRunner()
    bad = cli.invoke(app, ["run", "tiny", "--version", "1", "--inputs", "{shape: 1"])
    assert bad.exit_code == 2 and "--inputs is not JSON" in bad.output
    bad = cli.invoke(app, ["run", "tiny", "--version", "1", "--mode", "tflite", "--xla"])
    assert bad.exit_code == 2 and "mode 'tflite' times the TFLite interpreter" in bad.output
    res = cli.invoke(
        app,
        [
            "run",
            "tiny",
            "--version",
            "1",
            "--mode",
            "infer",
            "--batch-size",
            "2",
            "--measured-steps",
            "6",
            "--profiled-steps",
            "2",
            "--inputs",
            '{"input_layer": {"shape": [16, 16, 3], "dtype": "float32"}}',
        ],
    )
    assert res.exit_code == 0, res.output
    assert "verdict no-baseline" in res.output
    # infer mode's figures: 6 batches bound p50 (an interval) but not p99, and say so (issue 27)
    assert "latency per batch of 2: p50 " in res.output and "p99 not estimable from 6 samples" in res.output
    assert "examples/s" in res.output
    (row,) = json.loads(cli.invoke(app, ["runs", "--format", "json"]).stdout)
    assert row["case"].startswith("infer-bs2-in") and row["inputs"] == "input_layer 2x16x16x3 float32"
    assert (row["mode"], row["safe_mode"]) == ("infer", True)


# ------------------------------------------------------------------ input_fn


def dict_batches(batch_size, seed):
    """Batches for the dict model, by name (what an input_fn returns)."""
    import tensorflow as tf

    g = tf.random.Generator.from_seed(seed)
    return tf.data.Dataset.from_tensor_slices({"zeta": g.normal((64, 4)), "alpha": g.normal((64, 8))}).batch(
        batch_size, drop_remainder=True
    )


def pairs(batch_size):
    """(x, y) pairs: not model-ready batches."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices((tf.zeros((8, 4)), tf.zeros((8,)))).batch(batch_size)


def fixed_three():
    """Batches of 3 whatever the batch size."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices({"zeta": tf.zeros((9, 4)), "alpha": tf.zeros((9, 8))}).batch(3)


def not_a_dataset(batch_size):
    return [batch_size]


NOT_CALLABLE = 3


@pytest.mark.slow
def test_input_fn_feeds_the_model_and_bad_ones_are_named(zoo, tmp_path):
    ref = "tests.integration.test_models_inputs:"
    r = _run(zoo / "dict.keras", tmp_path, "profile", input_fn=ref + "dict_batches", case_mode="infer")
    assert r["input_source"] == ref + "dict_batches"
    assert r["inputs"]["alpha"] == {"shape": [2, 8], "dtype": "float32", "min": None, "max": None}
    assert len(r["measured_step_times_ms"]) == 6  # 32 batches, repeated: never runs dry
    for fn, error in (
        ("nowhere.module:fn", r"cannot import module 'nowhere.module'"),
        (ref + "NOT_CALLABLE", r"has no callable 'NOT_CALLABLE' \(it is a int\)"),
        (ref + "not_a_dataset", r"returned a list; expected a tf.data.Dataset"),
        (
            ref + "fixed_three",
            r"batches hold \{'zeta': 3, 'alpha': 3\} examples per input; the "
            r"case's batch_size is 2",
        ),
        (
            ref + "pairs",
            r"yields tuples of 2; the model takes 1 input\(s\) \['f'\] \(labels are not "
            r"used: map \(x, y\) pairs to x\)",
        ),
    ):
        model = zoo / ("exported" if fn.endswith("pairs") else "dict.keras")
        with pytest.raises(RunnerError, match=error):
            _run(model, tmp_path, input_fn=fn, case_mode="infer")


def texts(batch_size):
    """One tensor of strings per batch: what a one-input SavedModel takes (no dict needed)."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(tf.constant(["cat", "dog", "eel", "gnu"] * 4)).batch(batch_size)


@pytest.mark.slow
def test_a_string_input_savedmodel_takes_a_one_tensor_input_fn(zoo, tmp_path):
    """Issue 26: a one-input SavedModel is fed a one-tensor input_fn, as the manual allows (docs/models.md; refused
    before: 'yields one tensor ... yield a dict by name'); its string input is what needs the input_fn."""
    ref = "tests.integration.test_models_inputs:texts"
    r = _run(zoo / "strin", tmp_path, input_fn=ref, case_mode="infer")
    assert r["input_source"] == ref
    assert r["inputs"]["text"] == {"shape": [2], "dtype": "string", "min": None, "max": None}
    assert r["warmup_step_times_ms"]
