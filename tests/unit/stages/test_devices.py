"""Hardware kinds as queues (issue 24, item 2): the device axis and its case names, the config's queues, the
plan refusing a case no queue serves, the device check over what the host shows, and the fingerprint key."""

from __future__ import annotations

import zipfile

import pytest

from tasks.analysis.environment import Fingerprint, diff_fingerprints
from tasks.matrix import MatrixError, config_cases, expand_entry
from tasks.records import Case, RunContext, check_case_name
from tasks.runner.devices import device_section, hidden_gpus_env, nvml_seen, refusal
from tasks.services.airflow_api import airflow_task_id
from tasks.settings import Settings
from tasks.stages.devices import (
    DeviceMissing,
    QueueError,
    check_queues,
    dag_measuring_queues,
    group_id,
    measuring_queues,
    parse_queues,
    queue_for,
    refusals,
    states_on,
    with_device,
)
from tasks.stages.params import case_param_schema
from tasks.stages.pipeline import plan_cases
from tests.helpers.builders import BASELINE_FINGERPRINT, with_changes

# --------------------------------------------------------------- the case axis and its name


def test_device_default_keeps_todays_names_and_an_explicit_kind_names_the_case():
    assert Case(model="m").device == "auto" and Case(model="m").name == "train-bs16"
    assert Case(model="m", device="cpu").name == "train-bs16-cpu"
    assert Case(model="m", device="gpu", xla=True, deterministic=True).name == "train-bs16-xla-det-gpu"
    h100 = Case(model="m", hardware="gpu-h100")  # a label gives its kind
    assert (h100.device, h100.name) == ("gpu", "train-bs16-gpu-h100")
    with_inputs = Case(model="m", device="tpu", inputs={"x": {"shape": [3]}})
    for c in (Case(model="m", device="cpu"), h100, with_inputs, Case(model="m", mode="infer", batch_size=8)):
        assert check_case_name(c.name) == c.name  # names read back into the same case
    with pytest.raises(ValueError, match="not a label of device 'cpu'"):
        Case(model="m", device="cpu", hardware="gpu-h100")
    with pytest.raises(ValueError, match="device"):
        Case(model="m", device="npu")


def test_devices_axis_of_the_matrix_and_the_dag_param():
    entry = {"model": "m", "matrix": {"devices": ["cpu", "gpu"], "batch_size": [8, 16]}}
    assert [c.name for c in expand_entry(entry)] == [
        "train-bs8-cpu",
        "train-bs16-cpu",
        "train-bs8-gpu",
        "train-bs16-gpu",
    ]
    excluded = expand_entry({**entry, "exclude": [{"devices": "cpu", "batch_size": 8}]})
    assert [c.name for c in excluded] == ["train-bs16-cpu", "train-bs8-gpu", "train-bs16-gpu"]
    labels = config_cases({"models": [{"model": "m", "matrix": {"hardware": ["gpu-h100", "gpu-a100"]}}]}, where="cfg")
    assert [c.name for c in labels] == ["train-bs16-gpu-h100", "train-bs16-gpu-a100"]
    with pytest.raises(MatrixError, match="device='npu'"):
        expand_entry({"model": "m", "matrix": {"devices": ["cpu", "npu"]}})
    param = case_param_schema("dag")["device"]
    assert param["enum"] == ["auto", "cpu", "gpu", "tpu"] and param["default"] == "auto"
    assert "hardware" in case_param_schema("dag") and "device" in case_param_schema("cli")


# --------------------------------------------------------------- kinds to queues, refused at plan time


def test_queues_map_kinds_and_labels():
    queues = parse_queues({"cpu": "default", "gpu": "gpu", "gpu-h100": "h100"})
    assert queue_for(Case(model="m", device="gpu"), queues, "default") == "gpu"
    assert queue_for(Case(model="m", hardware="gpu-h100"), queues, "default") == "h100"
    assert queue_for(Case(model="m", hardware="gpu-a100"), queues, "default") == "gpu"  # the label's kind
    assert queue_for(Case(model="m"), queues, "measure") == "measure"  # auto: the DAG's measuring queue
    assert queue_for(Case(model="m", device="tpu"), queues, "default") is None
    assert parse_queues(None) == {}
    with pytest.raises(QueueError, match="'npu' is not a device kind"):
        parse_queues({"npu": "x"})
    with pytest.raises(QueueError, match="queues.gpu must name a Celery queue"):
        parse_queues({"gpu": ""})


def test_a_case_no_queue_serves_is_refused_by_name():
    cases = [Case(model="m", device="cpu"), Case(model="m", device="gpu"), Case(model="m", device="tpu")]
    assert check_queues(cases[:2], {"cpu": "gpu", "gpu": "gpu"}, "gpu") == {
        "m train-bs16-cpu": "gpu",
        "m train-bs16-gpu": "gpu",
    }
    with pytest.raises(QueueError) as e:
        check_queues(cases, {"cpu": "default", "gpu": "gpu"}, "default")
    msg = str(e.value)
    assert "case m train-bs16-tpu asks for device tpu, which no queue serves" in msg
    assert "m train-bs16-gpu asks for device gpu, whose queue is 'gpu', but this DAG measures on 'default' only" in msg
    assert "m train-bs16-cpu" not in msg
    # the DAG's measuring queues, read from the config when it was parsed: every kind's queue is one of them
    both = check_queues(cases[:2], {"cpu": "default", "gpu": "gpu"}, ["default", "gpu"])
    assert both == {"m train-bs16-cpu": "default", "m train-bs16-gpu": "gpu"}
    with pytest.raises(QueueError, match="queue 'gpu' has no worker"):
        check_queues(cases[1:2], {"gpu": "gpu"}, "gpu", served={"default"})


def test_a_kind_named_like_the_default_measuring_queue_is_measured_there():
    """compose's PERFWATCH_PROFILE_QUEUE=gpu without a queues: section: a gpu case (or label) goes to the gpu
    queue; a kind the default queue is not named after is refused, with advice that is true."""
    gpu, h100, cpu = Case(model="m", device="gpu"), Case(model="m", hardware="gpu-h100"), Case(model="m", device="cpu")
    assert refusals([gpu, h100], {}, ["gpu"]) == {}
    assert check_queues([gpu, h100], {}, "gpu") == {"m train-bs16-gpu": "gpu", "m train-bs16-gpu-h100": "gpu"}
    assert queue_for(h100, {}, "gpu-h100") == "gpu-h100"  # a label named like the queue
    assert queue_for(gpu, {"gpu": "a100"}, "gpu") == "a100"  # the config's entry comes first
    assert queue_for(cpu, {}, "gpu") is None
    (why,) = refusals([cpu], {}, ["gpu"]).values()
    assert why.startswith(
        "case m train-bs16-cpu asks for device cpu, which no queue serves (the config's queues: maps "
    )
    assert "PERFWATCH_PROFILE_QUEUE is 'gpu', which takes kind auto and a kind or label of its own name" in why
    assert (
        "map cpu to the queue of its measuring workers in the config's queues: section (e.g. queues: {cpu: cpu})" in why
    )
    assert "set PERFWATCH_PROFILE_QUEUE to its queue" not in why


def test_one_group_per_measuring_queue_and_each_group_gets_its_cases(tmp_path):
    queues = parse_queues({"cpu": "cpu hosts", "gpu": "gpu", "gpu-h100": "gpu", "tpu": "measure"})
    assert measuring_queues(queues, "measure") == ["measure", "cpu hosts", "gpu"]  # the default first, each once
    assert measuring_queues({}, "default") == ["default"]
    assert group_id("measure", "measure") is None  # the default queue's tasks keep their plain ids
    assert group_id("cpu hosts", "measure") == "on_cpu_hosts" and group_id("gpu", "measure") == "on_gpu"
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text("queues: {gpu: gpu}\nmodels: []\n")
    assert dag_measuring_queues("default", cfg) == ["default", "gpu"]
    for broken in ("queues: {npu: x}\n", "queues: [\n"):  # a bad section, bad YAML: the DAG still loads
        cfg.write_text(broken)
        assert dag_measuring_queues("default", cfg) == ["default"]
    assert dag_measuring_queues("default", tmp_path / "missing.yaml") == ["default"]
    states = [{"label": "m a", "queue": "gpu"}, {"label": "m b", "queue": "default"}, {"label": "m c", "queue": "gpu"}]
    assert [s["label"] for s in states_on(states, "gpu")] == ["m a", "m c"] and states_on(states, "tpu") == []
    with pytest.raises(QueueError, match="run state 'm d' has no measuring queue"):
        states_on([{"label": "m d"}], "gpu")


def test_a_stored_runs_task_is_found_in_its_queues_group(tmp_path, monkeypatch):
    """The run page's task-log link: the stage's task (``measure`` for the three measuring stages) in the group of
    the case's measuring queue as the config routes it."""
    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text("queues: {gpu: gpu, gpu-h100: h100}\nmodels: []\n")
    monkeypatch.delenv("PERFWATCH_PROFILE_QUEUE", raising=False)
    assert airflow_task_id("warm-up", config_path=cfg) == "measure"
    assert airflow_task_id("archive", "gpu", config_path=cfg) == "on_gpu.archive"
    assert airflow_task_id("env-fingerprint", "gpu", "gpu-h100", config_path=cfg) == "on_h100.measure"
    assert airflow_task_id("parse", "cpu", config_path=cfg) == "parse"  # no queue for cpu: the plain id
    assert airflow_task_id("archive", "gpu", config_path=tmp_path / "missing.yaml") == "archive"
    with pytest.raises(ValueError, match="no stage 'warmup'"):
        airflow_task_id("warmup")


CONFIG = """
queues: {cpu: default, gpu: gpu}
models:
  - model: resnet
    matrix:
      devices: [cpu, gpu]
"""


def test_plan_refuses_the_gpu_case_before_it_waits_and_the_others_run(home, tmp_path, monkeypatch):
    """A case no measuring queue of the DAG takes is planned refused, by name: its first task (pull) fails with the
    reason, recorded as a failed run; the other cases are planned to their queues as usual."""
    from sqlalchemy import select

    from tasks.stages.pipeline import run_stage
    from tasks.store import Run, session_scope

    cfg = tmp_path / "perfwatch.yaml"
    cfg.write_text(CONFIG)
    settings = Settings.from_env({"PERFWATCH_HOME": str(home), "PERFWATCH_CONFIG": str(cfg)})
    monkeypatch.delenv("PERFWATCH_PROFILE_QUEUE", raising=False)
    params = {"model": None, "trigger": "manual"}
    # the DAG was parsed before the config named the gpu queue: it has no group that measures there
    cpu, gpu = plan_cases("dag", "scheduled__1", "scheduled", params, settings, measuring_queues=["default"])
    assert (cpu["queue"], cpu.get("refused")) == ("default", None)
    assert gpu["queue"] == "default"  # refused: its first task fails, in the default queue's group
    assert "case resnet train-bs16-gpu asks for device gpu, whose queue is 'gpu', but this DAG" in gpu["refused"]
    with pytest.raises(QueueError, match="case resnet train-bs16-gpu asks for device gpu"):
        run_stage(gpu, "pull-model-version", settings)
    with session_scope(settings.database_url) as s:
        (run,) = s.scalars(select(Run)).all()
    assert (run.case_name, run.status, run.failed_stage) == ("train-bs16-gpu", "failed", "pull-model-version")
    assert "whose queue is 'gpu'" in run.error
    states = plan_cases("dag", "scheduled__1", "scheduled", params, settings)  # the DAG's queues as parsed now
    assert [(RunContext.model_validate(s["ctx"]).case.name, s["queue"]) for s in states] == [
        ("train-bs16-cpu", "default"),
        ("train-bs16-gpu", "gpu"),
    ]
    cfg.write_text(CONFIG.replace("{cpu: default, gpu: gpu}", "{cpu: gpu, gpu: gpu}"))
    monkeypatch.setenv("PERFWATCH_PROFILE_QUEUE", "gpu")  # the GPU worker measures both (cpu with GPUs hidden)
    states = plan_cases("dag", "scheduled__1", "scheduled", params, settings)
    assert [(RunContext.model_validate(s["ctx"]).case.name, s["queue"]) for s in states] == [
        ("train-bs16-cpu", "gpu"),
        ("train-bs16-gpu", "gpu"),
    ]
    cfg.write_text(CONFIG.replace("{cpu: default, gpu: gpu}", "{tpu: tpu}"))
    cpu, gpu = plan_cases("dag", "scheduled__1", "scheduled", params, settings)
    assert "case resnet train-bs16-cpu asks for device cpu, which no queue serves" in cpu["refused"]


# --------------------------------------------------------------- the device check on the measuring host


def test_refusal_over_what_tf_sees():
    assert refusal("m train-bs16-gpu", "gpu", ["CPU", "GPU"], None) is None
    assert refusal("m train-bs16", "auto", ["CPU"], None) is None
    assert refusal("m train-bs16-cpu", "cpu", ["CPU"], "") is None
    assert refusal("m train-bs16-gpu", "gpu", ["CPU"], "") == (
        "case m train-bs16-gpu asks for device gpu; this host has none visible (CUDA_VISIBLE_DEVICES='', TF sees [CPU])"
    )
    no_tpu = {"chips": 0, "versions": [], "device_nodes": [], "count": 0}
    assert refusal("m c", "tpu", ["CPU", "GPU"], "0", tpu=no_tpu) == (
        "case m c asks for device tpu; this host has none visible (TPU chips on PCI: 0, TPU device nodes "
        "(/dev/accel*, /dev/vfio/<n>): none; TF sees [CPU, GPU])"
    )  # about TPUs, not CUDA_VISIBLE_DEVICES
    assert refusal("m c", "tpu", ["CPU", "TPU"], None) is None
    with pytest.raises(ValueError, match="expected auto, cpu, gpu or tpu"):
        refusal("m c", "npu", ["CPU"], None)


def test_a_cpu_case_hides_the_gpus():
    assert hidden_gpus_env("cpu", {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"}) == {
        "PATH": "/bin",
        "CUDA_VISIBLE_DEVICES": "",
    }
    assert hidden_gpus_env("gpu", {"PATH": "/bin"}) is None and hidden_gpus_env("auto") is None


GPU_HOST = BASELINE_FINGERPRINT  # one A100 visible
GPUS_HIDDEN = with_changes(
    BASELINE_FINGERPRINT, {"gpu.count": 0, "gpu.devices": [], "env_vars.CUDA_VISIBLE_DEVICES": ""}
)


def _fp(data):
    return Fingerprint.from_data(data)


def test_the_fingerprint_says_which_device_measured_and_keys_it():
    gpu = with_device(_fp(GPU_HOST), Case(model="m", device="gpu"))
    cpu = with_device(_fp(GPUS_HIDDEN), Case(model="m", device="cpu"))
    auto = with_device(_fp(GPU_HOST), Case(model="m"))
    assert gpu.data["device"] == {"requested": "gpu", "kind": "gpu", "names": ["NVIDIA A100-SXM4-40GB"]}
    assert cpu.data["device"] == {"requested": "cpu", "kind": "cpu", "names": ["AMD EPYC 7742 64-Core Processor"]}
    assert auto == _fp(GPU_HOST) and "device" not in auto.data  # auto: today's record, id and key
    assert device_section("auto", GPU_HOST)["kind"] == "gpu" and nvml_seen(GPU_HOST) == ["CPU", "GPU"]
    assert len({gpu.comparability_key, cpu.comparability_key, auto.comparability_key}) == 3
    # a cpu run on a GPU host whose GPUs could not be hidden from the probe still keys apart from a gpu run
    cpu_unhidden = with_device(_fp(GPU_HOST), Case(model="m", device="cpu"))
    assert cpu_unhidden.comparability_key not in (gpu.comparability_key, auto.comparability_key)
    # keys of runs that asked for no device (all of today's) do not change
    assert auto.comparability_key == _fp(GPU_HOST).comparability_key
    cpu_only = with_changes(GPU_HOST, {"gpu.count": 0, "gpu.devices": [], "gpu.driver_version": "absent"})
    with_auto_section = {**cpu_only, "device": device_section("auto", cpu_only)}  # the key rule, on its own
    assert _fp(with_auto_section).comparability_key == _fp(cpu_only).comparability_key
    (kind,) = [c for c in diff_fingerprints(gpu.data, cpu_unhidden.data) if c.field == "device.kind"]
    assert kind.affects_comparability


def test_a_gpu_case_on_a_host_without_one_is_refused_before_any_model_loads():
    with pytest.raises(
        DeviceMissing,
        match=r"case m train-bs16-gpu asks for device gpu; this host has none visible "
        r"\(CUDA_VISIBLE_DEVICES='', NVML sees \[CPU\]\)",
    ):
        with_device(_fp(GPUS_HIDDEN), Case(model="m", device="gpu"))


def test_perfwatch_run_device_gpu_is_refused_on_a_host_without_one(home, cli, monkeypatch):
    """The real env-fingerprint stage (the probe subprocess, which never imports TF) refuses the case: the model
    file is never loaded (it is not a model), and the failure is recorded under the case's name."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible, on any test host
    (home / "models" / "tiny" / "1").mkdir(parents=True)
    with zipfile.ZipFile(home / "models" / "tiny" / "1" / "model.keras", "w") as z:  # a zip, not a model
        z.writestr("config.json", "never loaded: refused before warm-up")
    res = cli("run", "tiny", "--version", "1", "--device", "gpu", "--measured-steps", "5")
    assert res.exit_code == 2, res.output
    assert "DeviceMissing: case tiny train-bs16-gpu asks for device gpu; this host has none visible" in res.output
    assert "CUDA_VISIBLE_DEVICES=''" in res.output and "recorded in the store as failed run" in res.output


def test_cases_whose_queue_no_live_worker_consumes_are_named():
    from tasks.stages.devices import queues_of_replies, unserved_warnings

    replies = {"celery@a": [{"name": "default", "exchange": {}}], "celery@b": [{"name": "gpu"}, {"name": "h100"}]}
    assert queues_of_replies(replies) == {"default", "gpu", "h100"} and queues_of_replies(None) == set()
    planned = {"m train-bs16-cpu": "default", "m train-bs16-tpu": "tpu"}
    assert unserved_warnings(planned, {"default", "gpu"}) == [
        "case m train-bs16-tpu goes to queue 'tpu', which no live Celery worker consumes (workers serve: default, "
        "gpu); it waits queued until one starts"
    ]
    assert unserved_warnings(planned, None) == []  # the broker could not be asked: nothing known


# --------------------------------------------------------------- TPUs, read without TensorFlow


def _pci(root, slot: str, vendor: str, device: str) -> None:
    d = root / "sys" / "bus" / "pci" / "devices" / slot
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "device").write_text(device + "\n")


def test_tpu_chips_are_read_from_pci_and_their_device_nodes(tmp_path):
    from tasks.runner.devices import host_seen, tpu_section

    assert tpu_section(tmp_path) == {"chips": 0, "versions": [], "device_nodes": [], "count": 0}
    _pci(tmp_path, "0000:00:04.0", "0x1ae0", "0x0063")  # two TPU v5e chips
    _pci(tmp_path, "0000:00:05.0", "0x1ae0", "0x0063")
    _pci(tmp_path, "0000:00:06.0", "0x1ae0", "0x0001")  # Google's, not a TPU (gVNIC)
    _pci(tmp_path, "0000:00:07.0", "0x10de", "0x0063")  # NVIDIA's vendor id
    no_nodes = tpu_section(tmp_path)  # a container without the TPU's device nodes cannot reach the chips
    assert no_nodes == {"chips": 2, "versions": ["v5e"], "device_nodes": [], "count": 0}
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    for node in ("vfio/0", "vfio/1", "vfio/vfio"):
        (tmp_path / "dev" / node).touch()
    tpu = tpu_section(tmp_path)
    assert tpu == {"chips": 2, "versions": ["v5e"], "device_nodes": ["/dev/vfio/0", "/dev/vfio/1"], "count": 2}
    assert host_seen({"gpu": {"count": 0}, "tpu": tpu}) == ["CPU", "TPU", "TPU"]
    assert host_seen({"gpu": {"count": 1}}) == ["CPU", "GPU"]  # a record without a tpu section: none
    assert device_section("tpu", {"tpu": tpu})["names"] == ["TPU v5e"]
    old = tmp_path / "v4"
    _pci(old, "0000:00:04.0", "0x1ae0", "0x005e")
    (old / "dev").mkdir()
    (old / "dev" / "accel0").touch()
    assert tpu_section(old)["device_nodes"] == ["/dev/accel0"] and tpu_section(old)["count"] == 1


def test_a_tpu_case_on_a_host_without_one_is_refused_before_any_model_loads(tmp_path):
    """The fingerprint stage refuses it by name, with what it read of TPUs (a host without any)."""
    from tasks.runner.devices import tpu_section
    from tasks.runner.probe import hardware

    assert set(hardware()["tpu"]) == {"chips", "versions", "device_nodes", "count"}  # the plan's reading
    with pytest.raises(DeviceMissing) as e:
        with_device(_fp({**GPUS_HIDDEN, "tpu": tpu_section(tmp_path)}), Case(model="m", device="tpu"))
    assert str(e.value).startswith(
        "case m train-bs16-tpu asks for device tpu; this host has none visible (TPU chips on PCI: 0, TPU device "
        "nodes (/dev/accel*, /dev/vfio/<n>): none; the probe sees [CPU])"
    )
    with pytest.raises(DeviceMissing, match="asks for device tpu; this host has none visible"):
        with_device(_fp(GPUS_HIDDEN), Case(model="m", device="tpu"))  # a record of before TPUs were read
    tpu_host = {**GPUS_HIDDEN, "tpu": {"chips": 4, "versions": ["v4"], "device_nodes": ["/dev/accel0"], "count": 4}}
    measured = with_device(_fp(tpu_host), Case(model="m", device="tpu"))
    assert measured.data["device"] == {"requested": "tpu", "kind": "tpu", "names": ["TPU v4"]}


# --------------------------------------------------------------- a hardware label against the GPU that measured


def test_a_hardware_label_the_gpu_does_not_bear_is_flagged_at_plan_time_and_in_the_run(monkeypatch):
    """NVML (faked at the pynvml boundary) shows an A100: a gpu-h100 case is flagged hardware_label_mismatch when
    planned there and in the run's findings (the parse stage's hardware check over the fingerprint that with_device
    records); a gpu-a100 case, and an unlabelled gpu case, are not."""
    from tasks.analysis.hardware import case_findings, label_mismatch
    from tasks.runner.probe import hardware
    from tasks.stages.pipeline import warn_hardware
    from tests.helpers.fakes import H100, FakeNVML

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeNVML([{**H100, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-bbbb-2222", "cc": (8, 0)}]).install(monkeypatch)
    host = hardware()
    h100, a100 = Case(model="m", hardware="gpu-h100"), Case(model="m", hardware="gpu-a100")
    (warned,) = warn_hardware([h100, a100, Case(model="m", device="gpu")], host)
    assert warned.startswith(
        "m train-bs16-gpu-h100: hardware_label_mismatch: the case's hardware label gpu-h100 names h100, but it was "
        "measured on 'NVIDIA A100-SXM4-40GB'. The run is stored under the label's case"
    )
    measured = with_device(_fp({**GPU_HOST, **host}), h100)  # the fingerprint stage's record
    (finding,) = case_findings(h100.precision, h100.strategy, measured.data, h100.hardware)
    assert (finding.code, finding.severity, finding.figure) == ("hardware_label_mismatch", "warning", "hardware")
    assert (
        case_findings(a100.precision, a100.strategy, with_device(_fp({**GPU_HOST, **host}), a100).data, "gpu-a100")
        == []
    )
    assert label_mismatch("gpu-rtx4090", ["NVIDIA GeForce RTX 4090"]) is None  # letters and digits, any case
    assert label_mismatch("cpu-epyc", ["AMD EPYC 7742 64-Core Processor"]) is None
    assert label_mismatch("gpu-h100", []) is None  # nothing read: nothing to compare


CPU_WHEEL_ON_GPU_HOST = with_changes(
    GPU_HOST,
    {"tensorflow.version": "2.21.0", "tensorflow.build.is_cuda_build": False, "packages.tensorflow-cpu": "2.21.0"},
)


def test_a_gpu_case_with_a_cpu_only_tensorflow_is_refused_naming_the_build():
    """Issue 39: NVML sees the GPU, so --device gpu passed the fingerprint and failed later with "TF sees [CPU]",
    never naming the cause: the runner's TensorFlow is the tensorflow-cpu wheel. Refused now, before any model
    loads, with the cause and the fix."""
    with pytest.raises(DeviceMissing) as e:
        with_device(_fp(CPU_WHEEL_ON_GPU_HOST), Case(model="m", device="gpu"))
    msg = str(e.value)
    assert msg.startswith("case m train-bs16-gpu asks for device gpu; NVML sees 1 GPU(s), but the runner's TensorFlow")
    assert "(2.21.0) is a build without CUDA" in msg and "tensorflow[and-cuda]" in msg and "make gpu-runner" in msg


def test_an_auto_case_on_a_gpu_host_with_a_cpu_only_tensorflow_says_it_measured_the_cpu():
    """Issue 39: device auto measured the CPU while the fingerprint listed the GPU and said nothing. The device
    section now says the CPU measured and why; the comparability key is what it was (auto keys no device kind)."""
    fp = _fp(CPU_WHEEL_ON_GPU_HOST)
    auto = with_device(fp, Case(model="m"))
    dev = auto.data["device"]
    assert dev["requested"] == "auto" and dev["kind"] == "cpu"
    assert dev["note"].startswith("device auto measured the CPU although NVML sees a GPU: the runner's TensorFlow")
    assert auto.comparability_key == fp.comparability_key
    assert with_device(_fp(GPU_HOST), Case(model="m")) == _fp(GPU_HOST)  # a CUDA build: unchanged
