"""keras.applications models by name, on the stages' side: the Case fields (``backbone``, ``input_shape``,
``classes``) and what they refuse, the case name that keeps each shape's history apart (and apart from a store
model of the same name), the guide's matrix in ``config/guide.yaml``, and the pull stage's record of a build."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tasks.analysis.environment import Fingerprint
from tasks.analysis.hardware import CPU_FLAGS
from tasks.matrix import load_config
from tasks.records import Case, RunContext, check_case_name
from tasks.runner.driver import RunnerProcess
from tasks.runner.protocol import BuildResult, BuildSpec
from tasks.settings import Settings
from tasks.stages.devices import DeviceMissing, with_device
from tasks.stages.pipeline import plan_cases, warn_hardware
from tasks.stages.pull import build_application
from tests.helpers import ROOT as ROOT_DIR

APP = {"model": "mobilenet_v3_small", "backbone": "keras.applications"}


def test_a_case_names_an_application_with_its_shape_and_classes():
    case = Case.model_validate({**APP, "input_shape": "32,32,3", "classes": 10})  # as --input-shape gives it
    assert case.input_shape == [32, 32, 3] and case.classes == 10 and case.version == "latest"
    assert Case.model_validate({**APP, "input_shape": [32, 32, 3], "classes": 10}) == case


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": "m", "input_shape": [32, 32, 3]}, "input_shape applies to backbone keras.applications only"),
        ({"model": "m", "classes": 10, "input_shape": [8]}, "input_shape and classes apply to backbone"),
        ({**APP, "version": "3"}, "give version latest"),
        ({**APP, "input_shape": "32,x,3"}, "expected positive integers separated by commas"),
        ({**APP, "input_shape": [32, 0, 3]}, "must list positive integers"),
        ({**APP, "classes": 0}, "greater than or equal to 1"),
        ({**APP, "backbone": "torchvision"}, "keras.applications"),
    ],
)
def test_what_a_case_of_an_application_refuses_is_named(fields, message):
    with pytest.raises(ValidationError, match=message):
        Case.model_validate(fields)


def test_each_shape_and_classes_is_its_own_case_and_history():
    names = {
        Case.model_validate({**APP, **extra}).name
        for extra in ({}, {"input_shape": [32, 32, 3]}, {"input_shape": [48, 48, 3]}, {"classes": 10})
    }
    store_model = Case.model_validate({"model": APP["model"]}).name  # a store model of the same name
    assert len(names | {store_model}) == 5 and store_model == "train-bs16"
    for name in names:
        assert check_case_name(name) == name and name.startswith("train-bs16-in")


def test_the_guides_matrix_is_a_config():
    cases = load_config(ROOT_DIR / "config" / "guide.yaml")
    assert len(cases) == 48 == len({c.name for c in cases})
    assert {c.device for c in cases} == {"cpu", "gpu", "tpu"}  # the guide's gpu and tpu, and cpu
    assert {tuple(c.metrics or ()) for c in cases} == {("throughput", "memory_usage", "step_time")}
    assert {(c.model, c.backbone, c.mode, c.version) for c in cases} == {
        ("resnet50", "keras.applications", "train", "latest")
    }
    assert sorted({c.batch_size for c in cases}) == [32, 64, 128, 256]
    assert {c.precision for c in cases} == {"fp32", "mixed_float16"}
    assert {c.strategy for c in cases} == {"none", "mirrored"}
    assert {(c.input_shape, c.classes) for c in cases} == {(None, None)}  # the constructor's 224x224x3, 1000


CPU_HOST = {  # a planning host without a GPU, a TPU or float16 instructions (tasks.runner.probe.hardware's record)
    "gpu": {"nvml": "unavailable", "count": 0, "devices": []},
    "tpu": {"chips": 0, "versions": [], "device_nodes": [], "count": 0},
    "host": {"cpu_model": "Intel Xeon", "cpu_precision_flags": {f: False for fs in CPU_FLAGS.values() for f in fs}},
    "env_vars": {"PERFWATCH_CPU_LOGICAL_DEVICES": "absent", "CUDA_VISIBLE_DEVICES": "absent"},
}


def test_the_guides_matrix_plans_here_with_its_refusals(home, monkeypatch, caplog):
    """config/guide.yaml as the DAG plans it on a CPU-only host (no TensorFlow): all 48 cells planned on the one
    queue; each -gpu and -tpu cell named as refused (device_missing) and refused by its fingerprint stage, never
    run on the CPU; each mixed_float16 cell of the CPU flagged precision_without_hardware; the metrics line on every
    case and not in any case name."""
    cfg = ROOT_DIR / "config" / "guide.yaml"
    settings = Settings.from_env({"PERFWATCH_HOME": str(home), "PERFWATCH_CONFIG": str(cfg)})
    monkeypatch.delenv("PERFWATCH_PROFILE_QUEUE", raising=False)
    monkeypatch.setattr("tasks.runner.probe.hardware", lambda: CPU_HOST)
    with caplog.at_level("WARNING", logger="tasks.stages.pipeline"):
        states = plan_cases("dag", "scheduled__1", "scheduled", {"model": None, "trigger": "manual"}, settings)
    cases = [RunContext.model_validate(s["ctx"]).case for s in states]
    assert (
        len(cases) == 48 and {s["queue"] for s in states} == {"default"} and not any(s.get("refused") for s in states)
    )
    assert not any("throughput" in c.name or "metrics" in c.name for c in cases)
    logged = [
        r.getMessage().removeprefix("plan: ").removesuffix(" (hardware of the planning host)")
        for r in caplog.records
        if r.getMessage().startswith("plan: ")
    ]
    warned = warn_hardware(cases, CPU_HOST)
    assert warned == logged  # what the plan logged
    refused = {w.split(":")[0] for w in warned if ": device_missing: " in w}
    assert refused == {f"resnet50 {c.name}" for c in cases if c.device in ("gpu", "tpu")} and len(refused) == 32
    gpu = next(c for c in cases if c.device == "gpu")
    tpu = next(c for c in cases if c.device == "tpu")
    assert (
        f"resnet50 {gpu.name}: device_missing: case resnet50 {gpu.name} asks for device gpu; this host has none "
        "visible (CUDA_VISIBLE_DEVICES=<unset>, NVML sees [CPU]); it will be refused, never run on the CPU" in warned
    )
    assert (
        f"resnet50 {tpu.name}: device_missing: case resnet50 {tpu.name} asks for device tpu; this host has none "
        "visible (TPU chips on PCI: 0, TPU device nodes (/dev/accel*, /dev/vfio/<n>): none; the probe sees [CPU]); "
        "it will be refused, never run on the CPU" in warned
    )
    flagged = {w.split(":")[0] for w in warned if ": precision_without_hardware: " in w}
    assert flagged == {f"resnet50 {c.name}" for c in cases if c.precision == "mixed_float16" and c.device == "cpu"}
    assert len(flagged) == 8
    fp = Fingerprint.from_data(CPU_HOST)
    with pytest.raises(DeviceMissing, match=f"case resnet50 {gpu.name} asks for device gpu; this host has none"):
        with_device(fp, gpu)  # the fingerprint stage's refusal, before any model loads
    with pytest.raises(DeviceMissing, match=f"case resnet50 {tpu.name} asks for device tpu; this host has none"):
        with_device(fp, tpu)
    cpu = next(c for c in cases if c.device == "cpu" and c.precision == "fp32" and c.strategy == "none")
    assert with_device(fp, cpu).data["device"]["kind"] == "cpu"


class _Builds(RunnerProcess):
    """A runner that answers a build request as the real one's result says, without TensorFlow."""

    def __init__(self) -> None:
        super().__init__(["unused"])
        self.specs: list[BuildSpec] = []

    def run(self, spec, kind, timeout_s, *, limit_note=None, on_round=None):  # type: ignore[override]
        assert kind is BuildResult and isinstance(spec, BuildSpec)
        self.specs.append(spec)
        path = Path(spec.model_dir) / "model.keras"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"zip")
        return BuildResult(
            constructor="MobileNetV3Small",
            keras_version="3.15.1",
            config_sha256="ab" * 32,
            version="keras3.15.1-abababab",
            source="keras.applications.MobileNetV3Small(input_shape=(32, 32, 3), classes=10, weights=None), "
            "random weights (seed 7), nothing downloaded",
            model_path=str(path),
            size_bytes=3,
            params=1000,
            input_shape=[32, 32, 3],
            output_shape=[10],
            weights_sha256="cd" * 32,
        )


def test_the_pull_stage_records_the_build_as_a_version_with_the_configs_digest(tmp_path):
    runner = _Builds()
    case = Case.model_validate({**APP, "input_shape": [32, 32, 3], "classes": 10, "seed": 7})
    pulled = build_application(case, tmp_path, runner, timeout_s=60)
    (spec,) = runner.specs
    assert (spec.name, spec.input_shape, spec.classes, spec.seed) == ("mobilenet_v3_small", [32, 32, 3], 10, 7)
    assert spec.model_dir == str(tmp_path / "model")
    assert pulled.version == "keras3.15.1-abababab" and pulled.digest == "ab" * 32
    assert pulled.format == "keras" and pulled.local_path == str(tmp_path / "model") and pulled.size_bytes == 3
    assert "weights=None" in pulled.source_uri and "nothing downloaded" in pulled.source_uri
    assert pulled.built == {
        "constructor": "MobileNetV3Small",
        "keras_version": "3.15.1",
        "params": 1000,
        "input_shape": [32, 32, 3],
        "output_shape": [10],
        "config_sha256": "ab" * 32,
        "weights_sha256": "cd" * 32,
    }
    with pytest.raises(ValueError, match="has no backbone"):
        build_application(Case(model="m"), tmp_path, runner)


def test_what_was_built_is_stored_with_the_run(db_url, tmp_path):
    """The built model's record (its weights' and config's digests, parameters, shapes) goes into the store with
    the run (``run_tables`` ``model_built``); a model pulled from the store has none."""
    from tasks.stages.archive import archive_run
    from tasks.store.reads import run_tool_tables
    from tests.helpers.builders import server_points, server_run_records

    built = {"constructor": "MobileNetV3Small", "params": 1000, "weights_sha256": "cd" * 32}
    ids = []
    for name, record in (("built", built), ("stored", None)):
        ctx, pulled, env, warm, run, parsed, comp = server_run_records(
            tmp_path, name, server_points([(100.0, 0.004)]), model=name
        )
        pulled = pulled.model_copy(update={"built": record})
        archived = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, comp)
        ids.append(archived.run_id)
    assert run_tool_tables(db_url, ids[0]).get("model_built") == built
    assert "model_built" not in run_tool_tables(db_url, ids[1])


def test_a_paired_gate_re_measures_its_own_build_and_never_a_version_it_cannot_rebuild(home, monkeypatch, caplog):
    from tasks.records import EnvRecord, PulledModel, RunContext
    from tasks.settings import Settings
    from tasks.stages import pipeline

    settings = Settings.from_env({"PERFWATCH_HOME": str(home)})
    case = Case.model_validate({**APP, "input_shape": [32, 32, 3]})
    ctx = RunContext(dag_id="d", dag_run_id="r", trigger="release", case=case)  # a release gate is paired
    built = pipeline.work_dir(settings, ctx) / "model"
    built.mkdir(parents=True)
    (built / "model.keras").write_bytes(b"zip")
    pulled = PulledModel(
        model=case.model,
        version="keras3.15.1-5d4db9ee",
        source_uri="keras.applications.MobileNetV3Small(...)",
        local_path=str(built),
        format="keras",
        digest="5d" * 32,
        size_bytes=3,
    )
    env = EnvRecord(fingerprint_id="f", comparability_key="k", data={})
    monkeypatch.setattr(pipeline, "baseline_version", lambda *a: ("keras3.15.1-5d4db9ee", 1))
    a = pipeline.pull_paired_baseline(ctx, env, settings, pulled)
    assert a is not None and a.version == pulled.version and a.digest == pulled.digest
    assert (pipeline.work_dir(settings, ctx) / "baseline" / "model" / "model.keras").read_bytes() == b"zip"
    monkeypatch.setattr(pipeline, "baseline_version", lambda *a: ("keras3.14.0-0badc0de", 1))  # an older Keras
    with caplog.at_level("WARNING"):
        assert pipeline.pull_paired_baseline(ctx, env, settings, pulled) is None
    assert "cannot be rebuilt; compared with the history only" in caplog.text


def test_a_build_must_match_the_cases_earlier_build_under_the_same_keras(db_url, tmp_path):
    """The store keeps each case's builds; a build under a Keras version the case was built with before must have
    that build's parameters and shapes (refused by name otherwise), and one under another Keras says how it
    differs (EfficientNetB0 under Keras 3.11.1 against 3.10.0: the 1-channel stem has 576 parameters fewer)."""
    from tasks.stages.archive import archive_run
    from tasks.stages.pull import BuildMismatch, check_built
    from tasks.store.reads import built_references
    from tests.helpers.builders import server_points, server_run_records

    ref = {"constructor": "EfficientNetB0", "keras_version": "3.10.0", "params": 5_330_571,
           "input_shape": [224, 224, 3], "output_shape": [1000]}  # fmt: skip
    ctx, pulled, env, warm, run, parsed, comp = server_run_records(
        tmp_path, "ref", server_points([(100.0, 0.004)]), model="effnet"
    )
    pulled = pulled.model_copy(update={"built": ref})
    run_id = archive_run(db_url, str(tmp_path / "archive"), ctx, pulled, env, warm, run, parsed, comp).run_id
    refs = built_references(db_url, "effnet", ctx.case.name)
    assert refs == {"3.10.0": {**ref, "run_id": run_id}} and built_references(db_url, "effnet", "other") == {}
    assert check_built(dict(ref), refs) == []
    with pytest.raises(BuildMismatch, match=r"params 5,329,995 under Keras 3.10.0, 5,330,571 under Keras 3.10.0"):
        check_built({**ref, "params": 5_329_995}, refs)
    with pytest.raises(BuildMismatch, match=r"output_shape \(10,\) under Keras 3.10.0, \(1000,\)"):
        check_built({**ref, "output_shape": [10]}, refs)
    newer = {**ref, "keras_version": "3.11.1", "params": 5_329_995}
    assert check_built(newer, refs) == [
        f"params 5,329,995 under Keras 3.11.1, 5,330,571 under Keras 3.10.0 (run {run_id})"
    ]
    # the pull stage's glue: a same-Keras mismatch fails the stage, another Keras's difference is kept with the build
    from tasks.settings import Settings
    from tasks.stages import pipeline

    settings = Settings.from_env({"PERFWATCH_HOME": str(tmp_path / "home"), "PERFWATCH_DATABASE_URL": db_url})
    with pytest.raises(BuildMismatch, match="refused: EfficientNetB0 is not the model this case built before"):
        pipeline._checked_build(pulled.model_copy(update={"built": {**ref, "params": 1}}), ctx, settings)
    kept = pipeline._checked_build(pulled.model_copy(update={"built": newer}), ctx, settings)
    assert kept.built is not None and kept.built["reference_differences"] == check_built(newer, refs)
    assert pipeline._checked_build(pulled.model_copy(update={"built": None}), ctx, settings).built is None
