"""The benchmark matrix of the YAML config: expansion, exclude, names, errors; a manual trigger naming a case."""

from __future__ import annotations

import pytest

from tasks.matrix import AXES, MatrixError, config_cases, expand_entry, load_config
from tasks.records import RunContext
from tasks.settings import Settings
from tasks.stages.pipeline import plan_cases
from tests.helpers import ROOT as ROOT_DIR

CONFIG = """
defaults:
  measured_steps: 30
models:
  - model: demo_mobilenet
    version: "2"
    matrix:
      mode: [train, infer]
      batch_size: [8, 16]
      precision: [fp32, mixed_bfloat16]
      xla: [false, true]
    exclude:
      - {mode: infer, xla: true}
      - {precision: mixed_bfloat16, batch_size: 8}
  - model: bert
    batch_size: 4
"""

PARAMS = {
    "model": None,
    "case": None,
    "version": "latest",
    "batch_size": 16,
    "measured_steps": 320,
    "trigger": "manual",
}


@pytest.fixture
def settings(home, tmp_path):
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(CONFIG)
    return Settings.from_env({"PERFWATCH_HOME": str(home), "PERFWATCH_CONFIG": str(cfg)})


def _cases(bundles):
    return [RunContext.model_validate(b["ctx"]).case for b in bundles]


def test_matrix_expands_in_order_minus_excludes(settings):
    cases = load_config(settings.config_path)
    names = [c.name for c in cases if c.model == "demo_mobilenet"]
    # 2 x 2 x 2 x 2 = 16 combinations; infer+xla leaves out 4, bf16+bs8 another 3 (one overlaps): 9
    assert names == [
        "train-bs8",
        "train-bs8-xla",
        "train-bs16",
        "train-bs16-xla",
        "train-bs16-mixed_bfloat16",
        "train-bs16-mixed_bfloat16-xla",
        "infer-bs8",
        "infer-bs16",
        "infer-bs16-mixed_bfloat16",
    ]
    assert len(set(names)) == len(names)
    demo = [c for c in cases if c.model == "demo_mobilenet"]
    assert {(c.version, c.measured_steps) for c in demo} == {("2", 30)}  # entry fields and defaults on every case
    assert [(c.model, c.name) for c in cases][-1] == ("bert", "train-bs4")  # an entry without a matrix: one case
    bf16_xla = next(c for c in demo if c.name == "train-bs16-mixed_bfloat16-xla")
    assert (bf16_xla.mode, bf16_xla.batch_size, bf16_xla.precision, bf16_xla.xla) == (
        "train",
        16,
        "mixed_bfloat16",
        True,
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"matrix": {"batch": [8]}}, "unknown matrix axis 'batch'; the axes are mode, batch_size"),
        ({"matrix": {"batch_size": []}}, "matrix axis 'batch_size' must be a non-empty list"),
        ({"matrix": {"batch_size": 8}}, "matrix axis 'batch_size' must be a non-empty list of values, got 8"),
        ({"matrix": {"xla": [True, True]}}, "matrix axis 'xla' lists True twice"),
        ({"matrix": []}, "'matrix' must map axes to lists of values"),
        (
            {"batch_size": 8, "matrix": {"batch_size": [8, 16]}},
            "batch_size is set both as a field and as a matrix axis",
        ),
        (
            {"matrix": {"xla": [False, True]}, "exclude": [{"precision": "fp32"}]},
            "exclude[0] names 'precision', which is not an axis of this entry's matrix (xla): "
            "it matches no combination",
        ),
        (
            {"matrix": {"xla": [False, True]}, "exclude": [{"xla": "yes"}]},
            "exclude[0]: xla='yes' is not a value of the matrix's xla list [False, True]: it matches no combination",
        ),
        ({"matrix": {"xla": [False, True]}, "exclude": [{"xla": 1}]}, "xla=1 is not a value"),  # 1 is no bool
        (
            {"matrix": {"xla": [False, True]}, "exclude": [{"xla": False}, {"xla": True}]},
            "'exclude' leaves out all 2 combinations",
        ),
        ({"exclude": [{"xla": True}]}, "'exclude' without a 'matrix'"),
        (
            {"matrix": {"mode": ["train", "tflite"], "quantization": ["none", "int8"]}},
            "the combination {'mode': 'train', 'quantization': 'int8'} is not a valid case",
        ),
        # a mistyped value or field is a typo to fix, never a combination to exclude
        ({"matrix": {"batch_size": [8, 0]}}, "matrix value batch_size=0: Input should be greater than or equal to 1"),
        ({"matrix": {"precision": ["fp32", "fp16"]}}, "matrix value precision='fp16': Input should be 'fp32', "),
        ({"batchsize": 8, "matrix": {"xla": [False, True]}}, "batchsize: not a Case field (did you mean batch_size?)"),
    ],
)
def test_bad_matrix_is_named(entry, message):
    with pytest.raises(MatrixError) as err:
        config_cases({"models": [{"model": "m"}, {"model": "mine", **entry}]}, where="cfg.yaml")
    assert err.value.args[0].startswith("cfg.yaml: models[1] (mine)")
    assert message in str(err.value)


def test_a_typo_under_defaults_is_blamed_on_defaults():
    with pytest.raises(ValueError) as err:
        config_cases({"defaults": {"measured_step": 50}, "models": [{"model": "m"}]}, where="cfg.yaml")
    assert str(err.value) == "cfg.yaml: defaults: measured_step: not a Case field (did you mean measured_steps?)"


def test_invalid_combination_can_be_excluded():
    entry = {
        "model": "m",
        "batch_size": 1,
        "matrix": {"mode": ["train", "tflite"], "quantization": ["none", "int8"]},
        "exclude": [{"mode": "train", "quantization": "int8"}],
    }
    assert [c.name for c in expand_entry(entry)] == ["train-bs1", "tflite-bs1", "tflite-bs1-int8"]


def test_two_entries_with_one_case_name_are_refused():
    data = {"models": [{"model": "m", "matrix": {"batch_size": [8, 16]}}, {"model": "m", "batch_size": 16}]}
    with pytest.raises(
        ValueError, match=r"models\[1\]: case 'train-bs16' of model 'm' is already planned by models\[0\]"
    ):
        config_cases(data, where="cfg.yaml")
    data["models"][1]["model"] = "other"  # another model may have the same case name
    assert len(config_cases(data, where="cfg.yaml")) == 3


def test_every_axis_is_part_of_the_case_name():
    values = {
        "mode": "infer",
        "batch_size": 3,
        "precision": "mixed_float16",
        "xla": True,
        "strategy": "mirrored",
        "deterministic": True,
        "device": "cpu",
        "hardware": "gpu-h100",
        "scenario": "offline",
    }
    modes = {"quantization": "tflite", "scenario": "infer"}  # tflite only; infer's scenarios
    for axis in AXES:  # precision/xla/strategy apply to train and infer only
        fields = {"model": "m", "mode": modes.get(axis, "train"), "batch_size": 1}
        base = expand_entry(fields)[0].name
        v = "int8" if axis == "quantization" else values[axis]
        entry = {**{k: f for k, f in fields.items() if k != axis}, "matrix": {axis: [v]}}
        assert expand_entry(entry)[0].name != base, axis


def test_check_case_name_accepts_every_name_a_case_has_and_nothing_else():
    import itertools

    from pydantic import ValidationError

    from tasks.records import Case, InputSpec, check_case_name

    names = set()
    for mode, bs, precision, xla, strategy, quantization, det, inputs, threads in itertools.product(
        ["train", "infer", "tflite"],
        [1, 16, 65536],
        ["fp32", "mixed_float16", "mixed_bfloat16"],
        [False, True],
        ["none", "mirrored"],
        ["none", "dynamic", "int8"],
        [False, True],
        [None, {"x": InputSpec(shape=[3])}],
        [None, 4],
    ):
        try:
            case = Case(
                model="m",
                mode=mode,
                batch_size=bs,
                precision=precision,
                xla=xla,
                strategy=strategy,
                quantization=quantization,
                deterministic=det,
                inputs=inputs,
                tflite_threads=threads,
            )
        except ValidationError:  # tflite with precision/xla/strategy, quantization or threads without tflite
            continue
        names.add(case.name)
    # inputs x batch sizes x (train, infer + tflite x its thread counts)
    assert len(names) == 2 * 3 * (3 * 2 * 2 * 2 * 2 + 3 * 2 * 2)
    assert "tflite-bs1-int8-t4-det" in names
    assert all(check_case_name(n) == n for n in names)
    for bad in [
        "eval-bs8",  # no such mode
        "train-bs0",  # batch size out of range
        "train-bs016",  # Case.name writes no leading zeros
        "train-bs16-fp32",  # nor defaults
        "train-bs16-xla-mixed_bfloat16",  # nor axes out of order
        "train-bs16-xla-xla",
        "train-bs16-int8",  # quantization is for tflite only
        "train-bs16-t4",  # and so are its threads
        "tflite-bs1-t0",
        "tflite-bs1-t4-int8",
        "tflite-bs1-xla",
        "train-bs16-in1234567",  # the input hash has 8 hex digits
        "train-bs16-fast",
        "infer-bs16; drop",
        "",
    ]:
        with pytest.raises(ValueError, match=f"case name {bad!r}"):
            check_case_name(bad)


def test_tflite_with_precision_xla_or_strategy_is_refused_when_planned():
    with pytest.raises(ValueError, match="mode 'tflite' times the TFLite interpreter"):
        expand_entry({"model": "m", "matrix": {"mode": ["tflite", "infer"], "xla": [False, True]}})
    cases = expand_entry(
        {
            "model": "m",
            "matrix": {"mode": ["tflite", "infer"], "xla": [False, True]},
            "exclude": [{"mode": "tflite", "xla": True}],
        }
    )
    assert [c.name for c in cases] == ["tflite-bs16", "infer-bs16", "infer-bs16-xla"]


def test_nightly_plan_runs_the_whole_matrix(settings):
    bundles = plan_cases("dag", "scheduled__1", "scheduled", PARAMS, settings)
    assert len(bundles) == 10
    assert bundles[5]["label"] == "demo_mobilenet train-bs16-mixed_bfloat16-xla"  # named in the Airflow grid


def test_manual_trigger_names_one_case_or_the_whole_matrix(settings):
    params = {
        **PARAMS,
        "model": "demo_mobilenet",
        "case": "train-bs16-mixed_bfloat16-xla",
        "version": "3",
        "measured_steps": 40,
    }
    (case,) = _cases(plan_cases("dag", "manual__1", "manual", params, settings))
    assert (case.name, case.version, case.measured_steps, case.paired_blocks) == (
        "train-bs16-mixed_bfloat16-xla",
        "3",
        40,
        40,
    )  # the Params' version and steps; the paired layout follows
    every = _cases(plan_cases("dag", "manual__2", "release", {**params, "case": "all"}, settings))
    assert [c.name for c in every] == [c.name for c in load_config(settings.config_path) if c.model == "demo_mobilenet"]
    assert {c.version for c in every} == {"3"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"model": "demo_mobilenet", "case": "train-bs32"},
            r"model 'demo_mobilenet' has no case 'train-bs32' in .*perfwatch.yaml; "
            r"its cases: train-bs8, train-bs8-xla, ",
        ),
        ({"model": "resnet", "case": "all"}, r"has no entry for model 'resnet' \(models: bert, demo_mobilenet\)"),
        ({"case": "all"}, "the case Param 'all' needs the model Param"),
    ],
)
def test_manual_case_errors_are_named(settings, params, message):
    with pytest.raises(ValueError, match=message):
        plan_cases("dag", "manual__1", "manual", {**PARAMS, **params}, settings)


def test_the_shipped_config_is_a_small_demo_matrix():

    cases = load_config(ROOT_DIR / "config" / "perfwatch.yaml")
    assert {c.model for c in cases} == {"demo_mobilenet"}
    assert len(cases) == 8  # what bench/matrix.py runs: at most 8 cases
    assert {c.mode for c in cases} == {"train", "infer"} and {c.precision for c in cases} == {"fp32", "mixed_bfloat16"}
    assert {c.xla for c in cases} == {False, True} and {c.batch_size for c in cases} == {8, 16}


def test_a_yaml_syntax_error_names_the_config_file(tmp_path):
    import yaml

    from tasks.matrix import load_config

    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text("models:\n  - model: m\n    matrix: {batch_size: [8, 16}\n")
    with pytest.raises(yaml.YAMLError) as err:
        load_config(cfg)
    assert f'in "{cfg}", line 3' in str(err.value) and "<unicode string>" not in str(err.value)


def test_the_metrics_line_is_carried_checked_by_name_and_never_splits_a_history():
    entry = {"model": "m", "metrics": ["throughput", "memory_usage", "step_time"], "matrix": {"batch_size": [8, 16]}}
    cases = expand_entry(entry)
    assert [c.metrics for c in cases] == [["throughput", "memory_usage", "step_time"]] * 2
    plain = expand_entry({"model": "m", "matrix": {"batch_size": [8, 16]}})
    assert [c.name for c in cases] == [c.name for c in plain] == ["train-bs8", "train-bs16"]  # same histories
    with pytest.raises(
        MatrixError,
        match=r"unknown metric 'memory'; the metrics are step_time, throughput, "
        r"memory_usage, latency",
    ):
        expand_entry({**entry, "metrics": ["throughput", "memory"]})
    with pytest.raises(MatrixError, match="'metrics' is not a matrix axis"):
        expand_entry({"model": "m", "matrix": {"metrics": ["throughput"]}})
    with pytest.raises(ValueError, match="'step_time' is listed twice"):
        config_cases({"defaults": {"metrics": ["step_time", "step_time"]}, "models": [{"model": "m"}]}, where="cfg")


def test_tflite_on_a_gpu_is_refused_not_timed_on_the_cpu_under_a_gpu_name():
    """Issue 39: mode tflite with device gpu ran the interpreter on the CPU under the case name tflite-bs16-gpu."""
    with pytest.raises(ValueError, match=r"runs the TFLite interpreter on the CPU .*device='gpu' would time the CPU"):
        expand_entry({"model": "m", "matrix": {"mode": ["tflite"], "device": ["gpu"]}})
    cases = expand_entry(
        {
            "model": "m",
            "matrix": {"mode": ["tflite", "infer"], "device": ["cpu", "gpu"]},
            "exclude": [{"mode": "tflite", "device": "gpu"}],
        }
    )
    assert [c.name for c in cases] == ["tflite-bs16-cpu", "infer-bs16-cpu", "infer-bs16-gpu"]
