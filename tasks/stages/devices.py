"""Hardware kinds as queues: which Celery queue measures a case, and the cases no worker would take.

The YAML config may carry a ``queues:`` section mapping a device kind (``Case.device``: cpu, gpu, tpu) or a
hardware label (``Case.hardware``, e.g. ``gpu-h100``) to the Celery queue of the workers that have it::

    queues: {cpu: cpu, gpu: gpu, gpu-h100: h100}

A case's queue (:func:`queue_for`) is its hardware label's, else its kind's; a case of kind ``auto`` goes to the
DAG's default measuring queue (``PERFWATCH_PROFILE_QUEUE``), as every case did before cases named a device. A
kind or label that ``queues:`` leaves out goes to the default measuring queue when that queue bears its name
(``PERFWATCH_PROFILE_QUEUE=gpu``, compose's value, measures ``device: gpu`` cases without a ``queues:``
section), else it has no queue. Airflow 3 cannot give each mapped task instance its own queue (``expand`` does
not map ``queue``), so the profile DAG has one mapped task group per measuring queue (:func:`measuring_queues`,
read from the config when the DAG is parsed; :func:`group_id` names the group): plan gives each case its queue
(``RunState.queue``), a ``route`` task per queue hands a group its cases (:func:`states_on`), and the group's
``measure`` task goes to that queue. When the DAG run is planned, :func:`refusals` names each case whose kind
has no queue (it would wait forever) and each whose queue is not among the DAG's measuring queues (the config
changed since the DAG was parsed): such a case fails alone at its first task with that reason, recorded in the
store, and the other cases run, so a case never waits for a worker that no task of the DAG is sent to, and never
runs on a worker of another kind (:func:`check_queues` raises on the same refusals). Which queues have live
workers is not known from here (Airflow's API does not list Celery workers; ``celery inspect active_queues``
needs the broker): a served-queue set, where a caller has one, is checked too (``served``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.records import Case
from tasks.runner.devices import KINDS

if TYPE_CHECKING:
    from tasks.analysis.environment import Fingerprint


PROFILE_QUEUE_ENV = "PERFWATCH_PROFILE_QUEUE"
"""The DAG's default measuring queue (kind ``auto``'s; Airflow's ``default`` when unset)."""


class QueueError(ValueError):
    """A ``queues:`` section that is not a mapping of kinds/labels to queue names, or planned cases whose
    device no queue serves; the message names the entry or the cases."""


def parse_queues(raw: Any, *, where: str = "config") -> dict[str, str]:
    """The ``queues:`` section of a config as ``{kind or hardware label: queue}``; None or absent: ``{}``.

    Raises:
        QueueError: not a mapping, a key that is neither cpu/gpu/tpu nor a hardware label (``gpu-h100``), or a
            queue that is not a non-empty string (names the entry).
    """
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise QueueError(
            f"{where}: 'queues' must map device kinds to Celery queues, e.g. {{cpu: default, gpu: gpu}}; got {raw!r}"
        )
    out: dict[str, str] = {}
    for key, queue in raw.items():
        if not isinstance(key, str) or key.split("-", 1)[0] not in KINDS:
            raise QueueError(
                f"{where}: queues key {key!r} is not a device kind ({', '.join(KINDS)}) or hardware label (gpu-h100)"
            )
        if not isinstance(queue, str) or not queue.strip():
            raise QueueError(f"{where}: queues.{key} must name a Celery queue, got {queue!r}")
        out[key] = queue.strip()
    return out


def config_queues(path: str | Path) -> dict[str, str]:
    """The ``queues:`` section of the YAML config at ``path`` (:func:`parse_queues`); ``{}`` without one.

    Raises:
        FileNotFoundError: no config at ``path``. QueueError: a bad section.
    """
    from tasks.matrix import read_yaml

    data = read_yaml(path)
    return parse_queues(data.get("queues") if isinstance(data, dict) else None, where=str(path))


def queue_for(case: Case, queues: Mapping[str, str], default_queue: str) -> str | None:
    """The Celery queue that measures ``case``: its hardware label's in ``queues``, else its device kind's;
    ``default_queue`` (the DAG's measuring queue) for kind ``auto``; None when its kind has no queue."""
    return queue_of(case.device, case.hardware, queues, default_queue)


def queue_of(device: str, hardware: str | None, queues: Mapping[str, str], default_queue: str) -> str | None:
    """:func:`queue_for` of a case's ``Case.device`` and ``Case.hardware`` (a stored run's params): ``queues``'
    entry for the label, else for the kind; else ``default_queue`` when it is named like the label or the kind
    (a queue ``gpu`` measures kind gpu unmapped); else None."""
    if device == "auto":
        return default_queue
    for key in (hardware, device):
        if key is not None and key in queues:
            return queues[key]
    if default_queue in (hardware, device):
        return default_queue
    return None


def measuring_queues(queues: Mapping[str, str], default_queue: str) -> list[str]:
    """The DAG's measuring queues: ``default_queue`` (``PERFWATCH_PROFILE_QUEUE``: kind ``auto``'s) first, then
    every other queue that the config's ``queues:`` (:func:`parse_queues`) names, sorted, each once: one mapped
    task group of the profile DAG per queue."""
    return [default_queue, *sorted(set(queues.values()) - {default_queue})]


def dag_measuring_queues(default_queue: str, config_path: str | Path | None = None) -> list[str]:
    """:func:`measuring_queues` of the config at ``config_path`` (default ``PERFWATCH_CONFIG``), for DAG parsing:
    a missing config or a bad ``queues:`` section gives ``[default_queue]`` alone (the DAG stays loadable;
    planning then refuses, by name, the cases that no measuring queue of the DAG serves, or reports the config's
    error)."""
    from tasks.settings import Settings

    try:
        return measuring_queues(config_queues(config_path or Settings.from_env().config_path), default_queue)
    except Exception:  # noqa: BLE001 - parse time: the DAG must stay loadable (YAML errors are no ValueError)
        return [default_queue]


def group_id(queue: str, default_queue: str) -> str | None:
    """The task group of the cases measured on ``queue``: None for ``default_queue`` (its tasks keep the ids
    ``pull_model_version``, ``measure``, ``parse``, ``baseline_compare``, ``archive``), else ``on_<queue>``
    (tasks ``on_<queue>.measure``...) with each character that Airflow's ids refuse as ``_``."""
    if queue == default_queue:
        return None
    return "on_" + id_part(queue)


def id_part(queue: str) -> str:
    """``queue`` as a part of an Airflow task or group id: each character other than letters, digits, ``_`` and
    ``-`` as ``_`` (the profile DAG's ``route_<queue>`` tasks, :func:`group_id`)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", queue)


def states_on(states: Sequence[Mapping[str, Any]], queue: str) -> list[dict[str, Any]]:
    """The planned run states (``RunState.to_xcom()`` dicts) whose measuring queue (``RunState.queue``) is
    ``queue``, in plan order.

    Raises:
        QueueError: a state without a queue (planned by a perfwatch before cases were routed): it names the case.
    """
    out = []
    for s in states:
        if not s.get("queue"):
            raise QueueError(f"run state {s.get('label')!r} has no measuring queue: plan it again")
        if s["queue"] == queue:
            out.append(dict(s))
    return out


def refusals(
    cases: list[Case], queues: Mapping[str, str], measuring: str | Collection[str], served: set[str] | None = None
) -> dict[str, str]:
    """``{"<model> <case name>": why}`` of each planned case that no worker would take (empty: every case has a
    measuring queue of the DAG).

    Args:
        cases: the planned cases.
        queues: the config's ``queues:`` (:func:`parse_queues`).
        measuring: the DAG's measuring queues (:func:`measuring_queues`), the default first (kind ``auto``'s,
            ``PERFWATCH_PROFILE_QUEUE``); a single name is that queue alone.
        served: queues known to have a worker, where the caller knows (None: not checked).

    A case is refused when its device kind (or label) has no queue (:func:`queue_for`: none in ``queues`` and
    the default measuring queue is not named after it), when its queue is not one of ``measuring`` (the config
    changed since the DAG was parsed), or when it is not in ``served``; each reason names the case and what to
    change.
    """
    dag_queues = [measuring] if isinstance(measuring, str) else list(measuring)
    out: dict[str, str] = {}
    for c in cases:
        label = f"{c.model} {c.name}"
        want = c.hardware or c.device
        q = queue_for(c, queues, dag_queues[0])
        fix = (
            f"map {want} to the queue of its measuring workers in the config's queues: section (e.g. queues: "
            f"{{{want}: {want}}}); the DAG measures on that queue once the dag-processor parses it again"
        )
        if q is None:
            mapped = ", ".join(f"{k}: {v}" for k, v in queues.items()) or "nothing"
            out[label] = (
                f"case {label} asks for device {want}, which no queue serves (the config's queues: maps {mapped}; "
                f"the default measuring queue PERFWATCH_PROFILE_QUEUE is {dag_queues[0]!r}, which takes kind auto "
                f"and a kind or label of its own name); " + fix
            )
        elif q not in dag_queues:
            out[label] = (
                f"case {label} asks for device {want}, whose queue is {q!r}, but this DAG measures on "
                f"{', '.join(repr(x) for x in dag_queues)} only (PERFWATCH_PROFILE_QUEUE and the config's queues: "
                f"when the DAG was parsed): no task of it would reach a {want} worker; the DAG measures on {q!r} "
                "once the dag-processor parses it again with this config"
            )
        elif served is not None and q not in served:
            out[label] = (
                f"case {label} asks for device {want}, whose queue {q!r} has no worker (served: {sorted(served)})"
            )
    return out


def check_queues(
    cases: list[Case], queues: Mapping[str, str], measuring: str | Collection[str], served: set[str] | None = None
) -> dict[str, str]:
    """``{"<model> <case name>": queue}`` of every planned case, or the refusal of those no worker would take
    (:func:`refusals`, same arguments).

    Raises:
        QueueError: naming each refused case, why, and what to change.
    """
    refused = refusals(cases, queues, measuring, served)
    if refused:
        raise QueueError("refused before any case waits for a worker that never comes: " + "; ".join(refused.values()))
    default = measuring if isinstance(measuring, str) else list(measuring)[0]
    return {f"{c.model} {c.name}": queue_for(c, queues, default) or default for c in cases}


class DeviceMissing(RuntimeError):
    """The measuring host has no device of the kind the case asks for (the message names the case)."""


def with_device(fp: Fingerprint, case: Case) -> Fingerprint:
    """``fp`` with its ``device`` section (:func:`tasks.runner.devices.device_section`: the kind and names of
    the device that measures ``case``), hashed again; for a case of kind ``auto``, ``fp`` itself (its record,
    ``fingerprint_id`` and key stay what they were before cases named a device; ``gpu.count`` and
    ``gpu.devices`` say whether a GPU measured), except on a host whose NVML sees a GPU that the runner's
    TensorFlow, a build without CUDA, cannot use: there the section says it measured the CPU and why
    (``device.note``; the key is unchanged, ``device.kind`` of an auto case is not in it); a ``gpu`` case on a
    host whose NVML shows no visible GPU, or a ``tpu`` case on one whose ``tpu`` section
    (``tasks.runner.devices.tpu_section``) shows no usable TPU chip, is refused here, before any model is
    loaded (the runner checks again with what TF sees).

    Raises:
        DeviceMissing: ``case.device`` is gpu and the fingerprint shows no GPU (names the case,
            ``CUDA_VISIBLE_DEVICES`` and what NVML sees) or one the runner's TensorFlow, built without CUDA,
            cannot use (names the build and the fix), or tpu and it shows no TPU (names the case, the TPU
            chips on PCI and their device nodes).
    """
    from tasks.analysis.environment import Fingerprint
    from tasks.runner.devices import device_section

    data = dict(fp.data)
    if case.device in ("gpu", "tpu") and (why := host_refusal(case, data)) is not None:
        raise DeviceMissing(why)
    if case.device == "auto" and "note" not in device_section("auto", data):
        return fp  # as before cases named a device: the same record, id and key (gpu.count says it)
    data["device"] = device_section(case.device, data)
    return Fingerprint.from_data(data)


def host_refusal(case: Case, data: Mapping[str, Any]) -> str | None:
    """Why ``case`` cannot run on the host of fingerprint record ``data`` (``tasks.runner.probe.collect``, or
    its ``hardware()`` part at plan time), or None: a gpu case where NVML shows no visible GPU, a tpu case where
    the ``tpu`` section shows no usable chip (``tasks.runner.devices.refusal``, ``who`` NVML or the probe)."""
    from tasks.runner.devices import cpu_only_tensorflow, host_seen, refusal, section

    cuda = section(data, "env_vars").get("CUDA_VISIBLE_DEVICES", "absent")
    if case.device == "gpu" and "GPU" in host_seen(data) and (why := cpu_only_tensorflow(data)) is not None:
        n = host_seen(data).count("GPU")
        return f"case {case.model} {case.name} asks for device gpu; NVML sees {n} GPU(s), but {why}"
    return refusal(
        f"{case.model} {case.name}",
        case.device,
        host_seen(data),
        None if cuda == "absent" else str(cuda),
        who="NVML" if case.device == "gpu" else "the probe",
        tpu=section(data, "tpu") if case.device == "tpu" else None,
    )


BROKER_ENV = "AIRFLOW__CELERY__BROKER_URL"
"""The Celery broker of a CeleryExecutor deployment (docker-compose.yml sets it on every Airflow container)."""


def queues_of_replies(replies: Mapping[str, Any] | None) -> set[str]:
    """The queues the Celery workers serve, from ``celery inspect active_queues``'s replies
    (``{worker: [{"name": queue, ...}, ...]}``); no reply (None): no worker answered, no queue served."""
    return {
        str(q["name"]) for qs in (replies or {}).values() for q in qs or [] if isinstance(q, Mapping) and "name" in q
    }


def served_queues(broker_url: str, timeout_s: float = 2.0) -> set[str] | None:
    """The queues the live Celery workers on ``broker_url`` consume (``app.control.inspect().active_queues()``,
    each worker answering within ``timeout_s`` s), or None when the broker cannot be asked (unreachable,
    not a Celery broker): then nothing is known, which is not the same as no worker."""
    try:
        from celery import Celery  # type: ignore[import-untyped]

        app = Celery(broker=broker_url)
        app.conf.broker_connection_timeout = timeout_s  # an unreachable broker: fail fast, never retry
        app.conf.broker_connection_max_retries = 1
        app.conf.broker_transport_options = {"max_retries": 1, "socket_timeout": timeout_s}
        try:
            return queues_of_replies(app.control.inspect(timeout=timeout_s).active_queues())
        finally:
            app.close()
    except Exception:  # noqa: BLE001 - an unreachable broker: the worker check is skipped, planning goes on
        return None


def unserved_warnings(planned: Mapping[str, str], served: set[str] | None) -> list[str]:
    """One warning per planned case (``{"<model> <case name>": queue}``, :func:`check_queues`) whose queue no live
    worker consumes (``served``: :func:`served_queues`; None: unknown, no warning): the case would wait in
    Airflow's queued state until a worker for that queue starts."""
    if served is None:
        return []
    return [
        f"case {label} goes to queue {q!r}, which no live Celery worker consumes (workers serve: "
        f"{', '.join(sorted(served)) or 'none'}); it waits queued until one starts"
        for label, q in planned.items()
        if q not in served
    ]
