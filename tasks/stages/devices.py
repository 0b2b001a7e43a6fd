"""Hardware kinds as queues: which Celery queue measures a case, and the cases no worker would take.

The YAML config may carry a ``queues:`` section mapping a device kind (``Case.device``: cpu, gpu, tpu) or a
hardware label (``Case.hardware``, e.g. ``gpu-h100``) to the Celery queue of the workers that have it::

    queues: {cpu: default, gpu: gpu, gpu-h100: h100}

A case's queue (:func:`queue_for`) is its hardware label's, else its kind's; a case of kind ``auto`` goes
to the measuring queue of the DAG (``PERFWATCH_PROFILE_QUEUE``), as every case did before cases named a
device. :func:`check_queues` runs when the DAG run is planned and refuses, by name, a case whose kind has
no queue (it would wait forever) and one whose queue is not the one the DAG's measuring tasks go to (the
profile DAG's measuring tasks have one queue: Airflow cannot give each mapped task instance its own), so a
case never waits for a worker that no task of the DAG is sent to, and never runs on a worker of another
kind. Which queues have live workers is not known from here (Airflow's API does not list Celery workers;
``celery inspect active_queues`` needs the broker): a served-queue set, where a caller has one, is checked
too (``served``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.records import Case
from tasks.runner.devices import KINDS

if TYPE_CHECKING:
    from tasks.analysis.environment import Fingerprint


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
    if case.device == "auto":
        return default_queue
    if case.hardware is not None and case.hardware in queues:
        return queues[case.hardware]
    return queues.get(case.device)


def check_queues(
    cases: list[Case], queues: Mapping[str, str], measuring_queue: str, served: set[str] | None = None
) -> dict[str, str]:
    """``{"<model> <case name>": queue}`` of every planned case, or the refusal of those no worker would take.

    Args:
        cases: the planned cases.
        queues: the config's ``queues:`` (:func:`parse_queues`).
        measuring_queue: the queue the DAG's measuring tasks go to (``PERFWATCH_PROFILE_QUEUE``).
        served: queues known to have a worker, where the caller knows (None: not checked).

    Raises:
        QueueError: naming each case whose device kind (or label) has no queue in ``queues``, whose queue is
            not ``measuring_queue``, or not in ``served``; and what to change.
    """
    out: dict[str, str] = {}
    faults: list[str] = []
    for c in cases:
        label = f"{c.model} {c.name}"
        want = c.hardware or c.device
        q = queue_for(c, queues, measuring_queue)
        if q is None:
            faults.append(
                f"case {label} asks for device {want}, which no queue serves (the config's queues: maps "
                f"{', '.join(f'{k}: {v}' for k, v in queues.items()) or 'nothing'})"
            )
        elif q != measuring_queue:
            faults.append(
                f"case {label} asks for device {want}, whose queue is {q!r}, but this DAG's measuring tasks go to "
                f"queue {measuring_queue!r} (PERFWATCH_PROFILE_QUEUE): no task of it would reach a {want} worker"
            )
        elif served is not None and q not in served:
            faults.append(
                f"case {label} asks for device {want}, whose queue {q!r} has no worker (served: {sorted(served)})"
            )
        else:
            out[label] = q
    if faults:
        raise QueueError(
            "refused before any case waits for a worker that never comes: "
            + "; ".join(faults)
            + ". Map the kind in the config's queues: section, or set PERFWATCH_PROFILE_QUEUE to its queue."
        )
    return out


class DeviceMissing(RuntimeError):
    """The measuring host has no device of the kind the case asks for (the message names the case)."""


def with_device(fp: Fingerprint, case: Case) -> Fingerprint:
    """``fp`` with its ``device`` section (:func:`tasks.runner.devices.device_section`: the kind and names of
    the device that measures ``case``), hashed again; for a case of kind ``auto``, ``fp`` itself (its record,
    ``fingerprint_id`` and key stay what they were before cases named a device; ``gpu.count`` and
    ``gpu.devices`` say whether a GPU measured); a ``gpu`` case on a host whose NVML shows no visible GPU
    is refused here, before any model is loaded (the runner checks again with what TF sees, and checks tpu).

    Raises:
        DeviceMissing: ``case.device`` is gpu and the fingerprint shows no GPU (names the case,
            ``CUDA_VISIBLE_DEVICES`` and what NVML sees).
    """
    from tasks.analysis.environment import Fingerprint
    from tasks.runner.devices import device_section, nvml_seen, refusal, section

    data = dict(fp.data)
    cuda = section(data, "env_vars").get("CUDA_VISIBLE_DEVICES", "absent")
    if case.device == "gpu":
        why = refusal(
            f"{case.model} {case.name}", "gpu", nvml_seen(data), None if cuda == "absent" else cuda, who="NVML"
        )
        if why is not None:
            raise DeviceMissing(why)
    if case.device == "auto":  # as before cases named a device: the same record, id and key (gpu.count says it)
        return fp
    data["device"] = device_section(case.device, data)
    return Fingerprint.from_data(data)


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
