"""The seven stages glued for Airflow (one DAG task each) and for a plain in-process run.

A case's run travels as a :class:`tasks.records.RunState`: :func:`run_stage` runs one stage of the
registry (``tasks.stages.registry``) on it and returns it with that stage's record added. The DAG's tasks
hand it on through XCom as its JSON dict (``RunState.to_xcom()``); every public function here takes that
dict too and validates it into a ``RunState`` first.

Every stage is safe to retry at any time (an operator clearing a task of a finished DAG run):

* a run already stored as a success is final: each stage of it is a no-op that returns the state
  with ``archived`` (the stored run) added, removes a work dir it may have left, and writes nothing;
* any exception is first recorded in the store as a failed run (stage and error, its cause line first when
  ``tasks.analysis.failures`` knows it: the op XLA refused, the missing custom class; an earlier failed
  attempt is replaced, its error kept below), then the run's work dir under ``PERFWATCH_WORK`` is
  removed and the exception re-raised with a note saying so. When the failure could NOT be recorded
  (store unreachable) the note says that instead, and the work dir is kept for a retry
  (``failure_note`` reads the outcome). A failure record never replaces a stored success.
* a stage whose inputs (earlier stages' files in the work dir) are gone says which file and from
  which task to clear the run.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tasks.analysis import failures
from tasks.matrix import config_exists, load_config, select_cases
from tasks.modelstore import earlier_version
from tasks.records import (
    ArchiveRecord,
    Case,
    CompareRecord,
    EnvRecord,
    ParseRecord,
    ProfiledRun,
    PulledModel,
    Record,
    RunContext,
    RunState,
    Trigger,
    Verdict,
    WarmupRecord,
    case_label,
    case_title,
    ratio_name,
    run_slug,
    version_label,
)
from tasks.settings import Settings
from tasks.stages import scratch
from tasks.stages.registry import STAGE_IDS, STAGES, StageId, StateField, producer, stage
from tasks.store import migrate
from tasks.store.reads import RunLocation, baseline_version, gather_compare_inputs, measured_version, stored_run
from tasks.store.writes import SuccessAlreadyStored, record_failure

if TYPE_CHECKING:
    from tasks.runner import RunnerProcess
    from tasks.stages.archive import Leftover

# Each stage's module is imported by its function below, when it runs: every Airflow task imports this
# module, and a warm-up task should not pay for xprof, pandas, scipy and Great Expectations, which only
# parse and baseline-compare use (tests/unit/test_rooms.py checks what importing this module pulls in).

log = logging.getLogger(__name__)


class RegressionDetected(RuntimeError):
    """Raised after archiving when the verdict is ``regression``: the run must go red."""


class HostBusy(RuntimeError):
    """The host was busier than the documented bounds while the run measured
    (``tasks.analysis.calibration.assess_noise``); the message gives the figures."""


class NotCompared(RuntimeError):
    """Raised after archiving when a release gate compared the version with nothing (``evidence["uncompared"]``:
    ``tasks.stages.compare.uncompared_note``): a gate that compared nothing must not look passed."""


def as_state(state: RunState | Mapping[str, Any]) -> RunState:
    """``state`` as a :class:`RunState`: a dict from XCom (``RunState.to_xcom()``, or the "bundle" of an
    earlier perfwatch, which has the same keys) is validated.

    Raises:
        pydantic.ValidationError: the dict is not a run state.
    """
    return state if isinstance(state, RunState) else RunState.model_validate(state)


def plan_cases(
    dag_id: str,
    dag_run_id: str,
    trigger: Trigger,
    params: dict[str, Any],
    settings: Settings | None = None,
    measuring_queues: Sequence[str] | None = None,
    *,
    db_url: str | None = None,
) -> list[dict[str, Any]]:
    """One run state per case, as its XCom dict: the Param-given model when set (the other Params fill its
    Case), else every case of the YAML config exactly as configured there (the nightly run). With Params
    ``model`` and ``case``, the cases come from the model's config entries: the one named ``case`` (e.g.
    ``train-bs32-mixed_bfloat16-xla``) or all of them (``case`` = ``all``), with the Params'
    ``version`` and ``measured_steps``. Each state's ``label`` (``<model> <case name>``, with the case's readable
    label beside it: ``tasks.records.case_title``) names its mapped task instances in the Airflow grid, and its
    ``queue`` is the Celery queue that measures it (``tasks.stages.devices.queue_for``: the config's ``queues:``
    for a case that names a device, else the default measuring queue). A case the planning host's hardware cannot
    run as it says (mixed precision without the type, mirrored with one replica) is logged as a warning
    (:func:`warn_hardware`) when the planning host is the measuring one (the case's queue is ``default``).

    Args:
        measuring_queues: the DAG's measuring queues, the default first (the DAG passes the ones it was parsed
            with, ``tasks.stages.devices.dag_measuring_queues``); None: ``PERFWATCH_PROFILE_QUEUE`` and the
            config's ``queues:`` as they are now.
        db_url: the store (the DAG's task passes the one of its Airflow connection); None: the settings'.

    Also migrates the store to the latest schema (idempotent), once per DAG run.

    A case that names a device no measuring queue of the DAG serves (``tasks.stages.devices.refusals``) is
    planned all the same, on the default queue, with ``refused`` set: its pull-model-version fails with the
    reason (a recorded failed run, the DAG run red, the alert naming it), and the other cases run.

    Raises:
        pydantic.ValidationError: a Param is out of range; ValueError/FileNotFoundError: bad config,
            ``case`` without ``model``, or a ``case`` the model's config entries do not have;
            ``tasks.stages.devices.QueueError``: a ``queues:`` section that is not a map of kinds to queues.
    """
    from tasks.stages import devices

    settings = (settings or Settings.from_env()).with_store(db_url)
    migrate(settings.database_url)
    if params.get("case"):
        if not params.get("model"):
            raise ValueError(
                f"the case Param {params['case']!r} needs the model Param: it names a case of that model's config entry"
            )
        overrides = {k: params[k] for k in ("version", "measured_steps") if params.get(k) not in (None, "")}
        cases = select_cases(
            load_config(settings.config_path, overrides=overrides),
            params["model"],
            params["case"],
            where=str(settings.config_path),
        )
    elif params.get("model"):
        case_fields = {k: v for k, v in params.items() if k in Case.model_fields and v not in (None, "")}
        cases = [Case.model_validate(case_fields)]
    else:
        cases = load_config(settings.config_path)
    queues = devices.config_queues(settings.config_path) if config_exists(settings.config_path) else {}
    default_queue = os.environ.get(devices.PROFILE_QUEUE_ENV, "default")
    dag_queues = list(measuring_queues or devices.measuring_queues(queues, default_queue))
    # a device no measuring queue serves is refused now, by name: the case goes to the default queue's group and
    # fails at its first task with the reason (recorded), the other cases run (auto cases: the default queue)
    refused = devices.refusals(cases, queues, dag_queues)
    for reason in refused.values():
        log.warning("plan: refused: %s", reason)
    routed: list[tuple[Case, str | None, str]] = []
    for c in cases:
        why = refused.get(f"{c.model} {c.name}")
        queue = None if why else devices.queue_for(c, queues, dag_queues[0])
        routed.append((c, why, queue or dag_queues[0]))
    if any(c.device != "auto" for c in cases) and (broker := os.environ.get(devices.BROKER_ENV)):
        planned = {f"{c.model} {c.name}": q for c, why, q in routed if not why}
        for warning in devices.unserved_warnings(planned, devices.served_queues(broker)):  # where Celery can say
            log.warning("%s", warning)
    warn_hardware([c for c, why, q in routed if q == "default" and not why])  # measured where planned
    return [
        RunState(
            ctx=RunContext(dag_id=dag_id, dag_run_id=dag_run_id, trigger=trigger, case=c),
            label=f"{c.model} {case_title(c.name, case_label(c))}",
            queue=q,
            refused=why,
        ).to_xcom()
        for c, why, q in routed
    ]


def warn_hardware(cases: list[Case], hardware: dict[str, Any] | None = None) -> list[str]:
    """Log a warning per planned case that the hardware cannot run as the case says
    (``tasks.analysis.hardware.case_findings``: mixed precision without the hardware type, a mirrored case with
    one replica, a hardware label the host's devices do not bear; ``device_missing``: a gpu case where NVML sees
    no GPU, a tpu case where no TPU chip is usable
    (PCI and device nodes, ``tasks.runner.devices.tpu_section``), which the fingerprint stage will refuse by name,
    ``tasks.stages.devices.with_device``) and return the warnings, ``"<model> <case name>: <code>: <message>"``.
    ``hardware``: a fingerprint record (default: this host's CPU flags, NVML's GPUs, its TPUs and
    ``PERFWATCH_CPU_LOGICAL_DEVICES``, ``tasks.runner.probe.hardware``, read only when a case is mixed-precision,
    mirrored, labelled, or asks for a gpu or tpu). :func:`plan_cases`
    calls it unless the measuring stages go to another Celery queue (``PERFWATCH_PROFILE_QUEUE``: the plan's
    host is not the measured one); every run also gets the measured host's check in its findings (parse).
    """
    from tasks.analysis.hardware import case_findings
    from tasks.runner.devices import device_section
    from tasks.stages.devices import host_refusal

    wanted = [
        c
        for c in cases
        if c.precision != "fp32" or c.strategy != "none" or c.device in ("gpu", "tpu") or c.hardware is not None
    ]
    if not wanted:
        return []
    if hardware is None:
        from tasks.runner.probe import hardware as local_hardware

        hardware = local_hardware()
    out = []
    for c in wanted:
        # a gpu/tpu case on a host without one: its fingerprint stage refuses it by name (stages.devices.with_device)
        if c.device in ("gpu", "tpu") and (why := host_refusal(c, hardware)):
            out.append(f"{c.model} {c.name}: device_missing: {why}; it will be refused, never run on the CPU")
            continue  # what the CPU lacks says nothing of a case that never runs on it
        measured = {**hardware, "device": device_section(c.device, hardware)}  # what with_device will record
        found = case_findings(c.precision, c.strategy, measured, c.hardware)
        out += [f"{c.model} {c.name}: {f.code}: {f.message}" for f in found]
    for line in out:
        log.warning("plan: %s (hardware of the planning host)", line)
    return out


def trigger_kind(run_type: str, requested: str | None) -> Trigger:
    """The run's trigger for the store: ``scheduled`` for a DAG run of the schedule (Airflow's
    ``DagRunType.SCHEDULED``), else the ``trigger`` Param (``manual`` or ``release``)."""
    if str(run_type).lower().endswith("scheduled"):
        return "scheduled"
    return "release" if requested == "release" else "manual"


def work_dir(settings: Settings, ctx: RunContext, *, create: bool = True) -> Path:
    """The run's work directory, ``<PERFWATCH_WORK>/<RunContext.slug>`` (created unless ``create`` is False)."""
    d = settings.work_root / ctx.slug
    if create:
        d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass(frozen=True)
class FailureNote:
    """What became of a failed stage's error: ``run_id`` of the failed run stored for it, or None
    when it could not be stored; ``detail`` says why not (or that a stored success was kept)."""

    run_id: int | None
    detail: str | None = None


_NOTE_ATTR = "perfwatch_failure"


def failure_note(e: BaseException) -> FailureNote | None:
    """Whether a stage's exception was recorded in the store (None: it did not come from a stage)."""
    return getattr(e, _NOTE_ATTR, None)


@contextmanager
def _recorded(state: RunState, stage_id: StageId, settings: Settings) -> Iterator[None]:
    ctx = state.ctx
    try:
        yield
    except Exception as e:
        # the cause first (tasks.analysis.failures: the op XLA refused, the missing class), the full message kept
        msg = failures.with_cause(f"{type(e).__name__}: {e}")
        wd = work_dir(settings, ctx, create=False)
        kept_at = scratch.uri(settings, ctx) if scratch.remote(settings) else wd
        try:
            from tasks.modelstore import CorruptModelError

            resolved = (
                state.pulled.version if state.pulled else (e.version if isinstance(e, CorruptModelError) else None)
            )
            run_id = record_failure(
                settings.database_url,
                ctx,
                stage_id,
                msg + "\n" + traceback.format_exc()[-3000:],
                version=str(resolved) if resolved is not None else None,
            )
        except SuccessAlreadyStored as kept:
            note = FailureNote(
                None,
                f"run {kept.run_id} of this DAG run is already stored as a success and is "
                "kept; this failure was not recorded over it",
            )
            scratch.discard(settings, ctx)  # the work dir of a finished run
            e.add_note(note.detail or "")
        except Exception as store_error:  # noqa: BLE001 - the original error matters more
            note = FailureNote(None, f"{type(store_error).__name__}: {store_error}")
            e.add_note(
                f"the failure could NOT be recorded in the store ({note.detail}); the run's work dir "
                f"{kept_at} is kept for a retry"
            )
        else:
            note = FailureNote(run_id)
            scratch.discard(settings, ctx)
            e.add_note(f"recorded in the store as failed run {run_id} (stage {stage_id}); work dir removed")
        setattr(e, _NOTE_ATTR, note)
        raise


class StageInputMissing(FileNotFoundError):
    """A stage's input file from an earlier stage is gone (the run's work dir was removed after the
    run failed or finished); the message names the file and the task to clear the run from."""


def _need(state: RunState, stage_id: StageId) -> None:
    """Check that the files this stage reads from earlier stages are still there (``Stage.reads``)."""
    for field, attr in stage(stage_id).reads:
        path = getattr(_have(getattr(state, field), field), attr)
        if path and not Path(path).exists():
            made_by = producer(field).id
            raise StageInputMissing(
                f"{stage_id}: {path} (written by {made_by}) is gone: this run's work dir was removed "
                f"(its earlier attempt failed, or a restart cleaned it); clear the DAG run's tasks from "
                f"{made_by} on"
            )


def version_words(state: RunState) -> str:
    """The run's version as a stage's start line names it: the version the pull stage resolved once it has
    (``v3``, a keras.applications case's ``keras3.15.1-1a2b3c4d``), else the one asked for (``version latest``,
    ``v3``)."""
    if state.pulled is not None:
        return version_label(state.pulled.version)
    asked = str(state.ctx.case.version)
    return "version latest" if asked == "latest" else version_label(asked)


def run_stage(
    state: RunState | Mapping[str, Any],
    stage_id: StageId,
    settings: Settings | None = None,
    *,
    db_url: str | None = None,
) -> RunState:
    """Run stage ``stage_id`` (``tasks.stages.registry``) of the run ``state`` (a ``RunState``, or its XCom
    dict) and return the state with the stage's record in its field (``Stage.field``). A no-op for a run
    already stored as a success (the state gets ``archived``, the stored run); a failure is recorded in the
    store, then re-raised (module docstring).

    Raises:
        StageInputMissing: an earlier stage's file is gone; anything the stage raises (recorded first).
    """
    settings = (settings or Settings.from_env()).with_store(db_url)  # db_url: the DAG task's store (plan_cases)
    state = as_state(state)
    ctx = state.ctx
    with scratch.task_dir(settings, ctx), _recorded(state, stage_id, settings):
        done = stored_run(settings.database_url, ctx)
        if done is not None and done.status == "success":
            log.warning("%s: run %s of %s is already archived; nothing to do", stage_id, done.run_id, ctx.identity)
            scratch.discard(settings, ctx)
            archived = ArchiveRecord(run_id=done.run_id, archive_uri=done.archive_uri or "", verdict=done.verdict or "")
            return state.model_copy(update={"archived": archived})
        if scratch.remote(settings):  # no shared disk: this host's work dir, the stage's inputs downloaded into it
            state = _fetch_inputs(state, stage_id, settings)
        _need(state, stage_id)
        t0 = time.monotonic()
        # the start and end of a stage carry these on their records: a reader that keeps one line per stage
        # (perfwatch run off a terminal, tasks.cli.stage_lines) finds them by them, not by the words
        mark = {"stage_id": stage_id, "stage_number": STAGE_IDS.index(stage_id) + 1, "stage_count": len(STAGE_IDS)}
        log.info(
            "%s (stage %d of %d): %s (%s %s, %s)",
            stage_id,
            mark["stage_number"],
            len(STAGE_IDS),
            stage(stage_id).says(ctx.case),
            ctx.case.model,
            version_words(state),
            ctx.case.name,
            extra={**mark, "stage_event": "start"},
        )
        record = _WORK[stage_id](state, ctx, settings)
        if scratch.remote(settings):  # what it wrote, for the stages that run on other hosts
            scratch.push(settings, ctx)
        seconds = time.monotonic() - t0
        log.info("%s: done in %.1f s", stage_id, seconds, extra={**mark, "stage_event": "done", "stage_s": seconds})
    return state.model_copy(update={stage(stage_id).field: record})


def _fetch_inputs(state: RunState, stage_id: StageId, settings: Settings) -> RunState:
    """With ``PERFWATCH_SCRATCH``: ``state``'s paths moved into this host's work dir (``scratch.relocate``) and
    the files and directories the stage reads (``Stage.reads``, ``Stage.reads_dirs``) downloaded there."""
    local = work_dir(settings, state.ctx)
    state = scratch.relocate(state, local)
    s = stage(stage_id)
    rels = [
        rel
        for field, attr in s.reads
        if (record := getattr(state, field)) is not None
        and (path := getattr(record, attr))
        and (rel := scratch.relative(path, local))
    ]
    scratch.fetch(settings, state.ctx, rels, optional=s.reads_dirs)
    return state


_R = TypeVar("_R", bound=Record)


def _have(record: _R | None, field: StateField) -> _R:
    """An earlier stage's record that this stage reads.

    Raises:
        StageInputMissing: the state lacks it (names the stage that makes it).
    """
    if record is None:
        raise StageInputMissing(f"the run state has no {field} record: run {producer(field).id} first")
    return record


def _pull(s: RunState, ctx: RunContext, st: Settings) -> PulledModel:
    from tasks.stages.pull import build_application, pull_model_version

    if s.refused:  # no measuring queue of the DAG takes this case (plan_cases): it fails here, by name
        from tasks.stages.devices import QueueError

        raise QueueError(s.refused)
    if ctx.case.backbone:
        from tasks.runner import RunnerProcess
        from tasks.runner.devices import hidden_gpus_env

        # the build runs outside the measuring pool, maybe beside another case's measurement: with the GPUs hidden
        # (a cpu process's environment) it cannot take GPU memory or time from it; the weights are random anyway
        builder = RunnerProcess(st.runner_command, env=hidden_gpus_env("cpu"))
        pulled = build_application(ctx.case, work_dir(st, ctx), builder)
        return _checked_build(pulled, ctx, st)
    return pull_model_version(st.model_store, ctx.case.model, ctx.case.version, work_dir(st, ctx))


def _checked_build(pulled: PulledModel, ctx: RunContext, st: Settings) -> PulledModel:
    """A build checked against the case's earlier builds in the store (``pull.check_built``: refused where it
    differs under the same Keras); differences from another Keras version's are logged and kept in
    ``built["reference_differences"]``."""
    from tasks.stages.pull import check_built
    from tasks.store.reads import built_references

    if pulled.built is None:
        return pulled
    differs = check_built(pulled.built, built_references(st.database_url, ctx.case.model, ctx.case.name))
    if not differs:
        return pulled
    log.warning("%s: the build differs from an earlier Keras's: %s", ctx.case.name, "; ".join(differs))
    return pulled.model_copy(update={"built": {**pulled.built, "reference_differences": differs}})


def _fingerprint(s: RunState, ctx: RunContext, st: Settings) -> EnvRecord:
    from tasks.runner import RunnerProcess
    from tasks.runner.devices import hidden_gpus_env
    from tasks.stages.devices import with_device
    from tasks.stages.fingerprint import take_fingerprint_in

    fp = take_fingerprint_in(RunnerProcess(st.runner_command, env=hidden_gpus_env(ctx.case.device)))
    return EnvRecord(**with_device(fp, ctx.case).model_dump())


def _warmup(s: RunState, ctx: RunContext, st: Settings) -> WarmupRecord:
    from tasks.stages.warmup import reusable_warm_up, warm_up

    pulled = _have(s.pulled, "pulled")
    reused = reusable_warm_up(st.database_url, pulled, _have(s.env, "env").comparability_key, ctx.case)
    if reused is not None:
        log.info(
            "warm-up: reusing run %s's warm-up (%d steps to steady state; same model bytes and environment "
            "within %g days): no warm-up process",
            reused.reused_from_run_id,
            reused.warmup_steps,
            ctx.case.warmup_reuse_days,
        )
        return reused
    return warm_up(pulled, ctx.case, work_dir(st, ctx), _runner(st, ctx.case))


def _runner(st: Settings, case: Case) -> RunnerProcess:
    """The runner of a measuring stage of ``case``: a cpu case's sees no GPU (``CUDA_VISIBLE_DEVICES=""``)."""
    from tasks.runner import RunnerProcess
    from tasks.runner.devices import hidden_gpus_env

    return RunnerProcess(st.runner_command, env=hidden_gpus_env(case.device))


def pull_paired_baseline(
    ctx: RunContext, env: EnvRecord, settings: Settings, pulled: PulledModel | None = None
) -> PulledModel | None:
    """For a paired gate: pull the version to re-measure as A into ``<work dir>/baseline`` -- the
    baseline's (the version of the baseline run found by ``tasks.store.reads.baseline_version``); without an
    accepted baseline, the newest earlier version measured (``tasks.store.reads.measured_version`` below
    ``pulled.version``: a first run that was not made the baseline, e.g. on a busy host, is still a version to
    compare with), else the newest earlier version in the model store (``tasks.modelstore.earlier_version``:
    published and never measured; the gate measures both); or ``ctx.paired_version`` when set (an A/A gate of
    ``perfwatch calibrate``). Paired when
    ``RunContext.pairs_with`` says so: a release trigger or ``Case.paired``, or a scheduled run whose
    resolved version (``pulled.version``) differs from that version. ``None`` otherwise, and when
    there is nothing to pair with (a first version: the compare stage says so). A ``keras.applications`` case
    re-measures a copy
    of its own build when the baseline's version is the same; another version (another Keras or architecture)
    cannot be rebuilt here, so it gets no paired gate (logged) and the history comparison decides. A
    cross-environment gate (``Case.cross_environment``) re-measures ``pulled`` itself in the baseline environment
    (unless ``ctx.paired_version`` names another version)."""
    from tasks.stages.pull import pull_model_version

    if ctx.case.cross_environment and ctx.paired_version is None and pulled is not None:
        return pulled  # a cross-environment gate: this version on both sides, A in the baseline environment
    found = baseline_version(settings.database_url, ctx.case.model, ctx.case.name, env.comparability_key)
    if found is None and pulled is not None:  # no baseline accepted: the newest earlier version measured
        found = measured_version(settings.database_url, ctx.case.model, ctx.case.name, pulled.version)
    baseline = found[0] if found else None
    if baseline is None and pulled is not None and not ctx.case.backbone:  # none measured: the store's newest earlier
        baseline = earlier_version(settings.model_store, ctx.case.model, pulled.version)
    if not ctx.pairs_with(pulled.version if pulled else None, baseline):
        return None
    version = ctx.paired_version or baseline
    assert version is not None  # pairs_with is False without a version to pair with unless paired_version names A
    if ctx.case.backbone:  # a keras.applications model: only the version this runner's Keras builds exists
        if pulled is None or version != pulled.version:
            log.warning(
                "paired gate skipped: the baseline %s of %s is a keras.applications build of another Keras or "
                "architecture than this run's %s, and cannot be rebuilt; compared with the history only",
                version,
                ctx.case.model,
                pulled.version if pulled else "(not pulled)",
            )
            return None
        dest = work_dir(settings, ctx) / "baseline" / "model"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(pulled.local_path, dest)  # the same build: an A/A gate on the very same weights
        return pulled.model_copy(update={"local_path": str(dest)})
    return pull_model_version(settings.model_store, ctx.case.model, version, work_dir(settings, ctx) / "baseline")


def _profile(s: RunState, ctx: RunContext, st: Settings) -> ProfiledRun:
    from tasks.stages.profiled_run import gate_setup, profiled_run

    pulled = _have(s.pulled, "pulled")
    env = _have(s.env, "env")
    baseline = pull_paired_baseline(ctx, env, st, pulled)
    setup = gate_setup(st.database_url, ctx.case, env.comparability_key) if baseline else None
    return profiled_run(
        pulled,
        ctx.case,
        _have(s.warmup, "warmup"),
        work_dir(st, ctx),
        _runner(st, ctx.case),
        baseline=baseline,
        setup=setup,
        env_data=env.data,
    )


def _parse(s: RunState, ctx: RunContext, st: Settings) -> ParseRecord:
    from tasks.analysis.hardware import case_findings
    from tasks.runner.devices import device_section
    from tasks.stages.parse import parse_run

    data = _have(s.env, "env").data
    hardware = case_findings(ctx.case.precision, ctx.case.strategy, data, ctx.case.hardware)
    gpu_run = device_section(ctx.case.device, data)["kind"] == "gpu"
    return parse_run(_have(s.run, "run"), work_dir(st, ctx), extra_findings=hardware, gpu_run=gpu_run)


def _compare(s: RunState, ctx: RunContext, st: Settings) -> CompareRecord:
    from tasks.stages.compare import baseline_compare
    from tasks.stages.expectations import data_docs_title

    return baseline_compare(
        st.database_url,
        ctx.case,
        _have(s.env, "env"),
        _have(s.run, "run"),
        _have(s.parsed, "parsed"),
        work_dir(st, ctx),
        docs_title=data_docs_title(ctx, _have(s.pulled, "pulled").version),
        version=_have(s.pulled, "pulled").version,
        paired_wanted=ctx.wants_paired,
    )


def _archive(s: RunState, ctx: RunContext, st: Settings) -> ArchiveRecord:
    from tasks.stages.archive import archive_run

    wd = work_dir(st, ctx)
    gx = wd / "gx"
    rec = archive_run(
        st.database_url,
        st.archive_root,
        ctx,
        _have(s.pulled, "pulled"),
        _have(s.env, "env"),
        _have(s.warmup, "warmup"),
        _have(s.run, "run"),
        _have(s.parsed, "parsed"),
        _have(s.verdict, "verdict"),
        auto_accept=ctx.case.auto_accept,
        extra_dirs={"gx": str(gx)} if gx.is_dir() else None,
    )
    scratch.discard(st, ctx)
    return rec


#: what each stage does, by id (the registry's order)
_WORK: dict[StageId, Callable[[RunState, RunContext, Settings], Record]] = {
    "pull-model-version": _pull,
    "env-fingerprint": _fingerprint,
    "warm-up": _warmup,
    "profiled-run": _profile,
    "parse": _parse,
    "baseline-compare": _compare,
    "archive": _archive,
}


def _will_be_compared(state: RunState, settings: Settings) -> bool:
    """The run's verdict depends on its noise: a paired gate ran, or the store holds a baseline of the
    model and case in this environment (a first run is ``no-baseline`` however busy the host was)."""
    if _have(state.run, "run").paired_path:
        return True
    found = gather_compare_inputs(
        settings.database_url,
        state.ctx.case.model,
        state.ctx.case.name,
        _have(state.env, "env").comparability_key,
        lookback=1,
        calibration_window=1,
    )
    return bool(found.same_env)


def busy_reason(state: RunState, settings: Settings | None = None) -> str | None:
    """Why the run's verdict is, or will be, undecided because the host was busy (the noise's ``reason``,
    ``tasks.analysis.calibration.assess_noise``); None when it is not. After baseline-compare: the verdict is
    ``inconclusive`` and its ``evidence["noise"]`` says busy. Before it (the profiled run measured): the run's
    noise says busy, no metric is fit to decide (``Noise.decided_on`` unset: a busy gate whose CPU time is fit
    keeps its verdict and is not measured again) and the verdict depends on it (a paired gate ran, or the store
    holds a baseline to compare with; a first run is ``no-baseline`` however busy the host). A run already
    archived whose state lacks the verdict (a retried task): None."""
    if state.verdict is not None:
        noise = state.verdict.evidence.get("noise") or {}
        busy = state.verdict.verdict == Verdict.INCONCLUSIVE and bool(noise.get("busy"))
        return str(noise.get("reason")) if busy else None
    if state.run is None or state.archived is not None:
        return None
    noise = state.run.noise or {}
    if noise.get("busy") and not noise.get("decided_on") and _will_be_compared(state, settings or Settings.from_env()):
        return str(noise.get("reason"))
    return None


def retry_when(delay_s: float, attempt: tuple[int, int] | None = None, now: dt.datetime | None = None) -> str:
    """When a task retried ``delay_s`` seconds from ``now`` (UTC, default now) runs again, as words:
    ``at 19:42:10 UTC (in 600 s, try 2 of 3)``; ``attempt`` is (the try that failed, the tries there are),
    e.g. Airflow's ``(ti.try_number, ti.max_tries + 1)``.

    Raises:
        ValueError: ``delay_s`` is negative or not finite.
    """
    if not 0 <= delay_s < float("inf"):
        raise ValueError(f"retry delay {delay_s!r} s: expected a finite number of seconds >= 0")
    at = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC) + dt.timedelta(seconds=delay_s)
    tries = f", try {attempt[0] + 1} of {attempt[1]}" if attempt else ""
    return f"at {at:%H:%M:%S} UTC (in {delay_s:.0f} s{tries})"


def raise_on_host_busy(
    state: RunState | Mapping[str, Any], settings: Settings | None = None, *, again: str = "later"
) -> None:
    """Raise :class:`HostBusy` when :func:`busy_reason` says the verdict is undecided because the host was busy:
    after the profiled run, so that the task measures again later ("...; measuring again <again>", e.g.
    :func:`retry_when`'s ``at 19:42:10 UTC (in 600 s, try 2 of 3)``), said first as a warning of this module's
    log (``make demo`` shows it); after archiving (the state has ``archived``), so that the run goes red with
    the reason instead of passing silently undecided ("verdict inconclusive, ...; archived as run N")."""
    state = as_state(state)
    reason = busy_reason(state, settings)
    if reason is None:
        return
    case = state.ctx.case
    if state.archived is not None:
        raise HostBusy(
            f"{case.model} ({case.name}): verdict inconclusive, {reason}; archived as run {state.archived.run_id}"
        )
    message = f"{case.model} ({case.name}): {reason}; measuring again {again}"
    log.warning("waiting for a quieter host: %s", message)
    raise HostBusy(message)


def profile_unless_busy(
    state: RunState | Mapping[str, Any],
    settings: Settings | None = None,
    *,
    retry_left: bool,
    retry_in_s: float | None = None,
    attempt: tuple[int, int] | None = None,
) -> RunState:
    """The profiled-run stage for a task that Airflow retries later on a busy host: when the measurement's
    noise is beyond the bounds, ``retry_left`` and the verdict depends on it (:func:`busy_reason`), raise
    :class:`HostBusy` instead of handing a busy measurement on (nothing is stored; the work dir is kept, so
    the retry measures again from the warm-up's record); its message, also logged as a warning, says when
    the retry comes (:func:`retry_when` of ``retry_in_s``, the task's retry delay in seconds, and
    ``attempt``), else "later". Without ``retry_left`` (the last try, or ``perfwatch run``) the busy
    measurement goes on to baseline-compare, which says ``inconclusive`` ("host busy: ..."), and archive."""
    settings = settings or Settings.from_env()
    out = run_stage(state, "profiled-run", settings)
    if retry_left:
        raise_on_host_busy(out, settings, again="later" if retry_in_s is None else retry_when(retry_in_s, attempt))
    return out


#: The stages that measure, in their order: one task runs them all on one host (:func:`measure_case`).
MEASURING_STAGES: tuple[StageId, ...] = ("env-fingerprint", "warm-up", "profiled-run")


def measure_case(
    state: RunState | Mapping[str, Any],
    settings: Settings | None = None,
    *,
    retry_left: bool,
    retry_in_s: float | None = None,
    attempt: tuple[int, int] | None = None,
    db_url: str | None = None,
) -> RunState:
    """env-fingerprint → warm-up → profiled run of one case, in this process and so on this host: the fingerprint
    describes the host that warmed up and measured. The DAG's ``measure`` task runs it on a measuring worker
    (Celery concurrency 1 on the device kind's queue), so no other perfwatch measurement runs on the host
    meanwhile. The profiled run is :func:`profile_unless_busy` (a busy host raises :class:`HostBusy` while
    ``retry_left``); a retry of the task measures all three again, on whichever host takes it. With
    ``PERFWATCH_SCRATCH`` the model is downloaded once and the local work dir is removed when it ends.

    Raises:
        HostBusy: the measurement was too noisy and ``retry_left``; anything a stage raises (recorded first).
    """
    settings = (settings or Settings.from_env()).with_store(db_url)  # db_url: the DAG task's store (plan_cases)
    state = as_state(state)
    with scratch.task_dir(settings, state.ctx):
        for stage_id in MEASURING_STAGES[:-1]:
            state = run_stage(state, stage_id, settings)
        return profile_unless_busy(state, settings, retry_left=retry_left, retry_in_s=retry_in_s, attempt=attempt)


STUCK_IN_QUEUED_REQUEUES = 2
"""How often Airflow's scheduler requeues a task that waited queued longer than ``[scheduler] task_queued_timeout``
before it fails it (``[scheduler] num_stuck_in_queued_retries``, undocumented, default 2, Airflow 3.3's
``SchedulerJobRunner._maybe_requeue_stuck_ti``)."""


def unmeasured_reason(
    label: str, queue: str, worker: str | None, queued_timeout_s: float, requeues: int = STUCK_IN_QUEUED_REQUEUES
) -> str:
    """Why the measure task of case ``label`` (``<model> <case name>``) on Celery queue ``queue`` failed without a
    word from perfwatch, in one line led by its kind: ``NoMeasuringWorker`` when no worker ever took it
    (``worker`` None: the task instance has no host name), which Airflow fails once it waited queued longer than
    ``queued_timeout_s`` seconds ``requeues + 1`` times; ``MeasureLost`` when ``worker`` ran it and stopped
    answering (killed, lost: Airflow's task heartbeat timeout), or no worker took a later try."""
    timeout = f"[scheduler] task_queued_timeout ({queued_timeout_s:.0f} s, AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT)"
    if worker is None:
        return (
            f"NoMeasuringWorker: case {label} was never measured: its measure task waited queued on queue {queue!r} "
            f"longer than {timeout} {requeues + 1} times and Airflow failed it, so no live measuring worker serves "
            f"{queue!r}; start one there (airflow celery worker --queues {queue} --concurrency 1) or map the case's "
            "kind to a served queue (the config's queues:)"
        )
    return (
        f"MeasureLost: case {label}'s measure task on queue {queue!r} failed before perfwatch recorded anything "
        f"(last on worker {worker}): the worker was killed or lost (Airflow's task heartbeat timeout), or no live "
        f"worker took a later try within {timeout}; the task's log and Airflow's audit log say which"
    )


def record_unmeasured(
    state: RunState | Mapping[str, Any],
    *,
    queue: str,
    worker: str | None,
    queued_timeout_s: float,
    settings: Settings | None = None,
    db_url: str | None = None,
) -> int | None:
    """For the DAG's ``measure`` failure callback: record the case of ``state`` (the state measure was given) as a
    failed run at ``env-fingerprint`` with :func:`unmeasured_reason`, when the store holds no run of it for this
    DAG run, i.e. the task failed outside perfwatch (the scheduler failed it in queued, or its worker was lost);
    a failure a stage recorded (with its own error) or a stored run is left as it is. The run's scratch goes too.
    Returns the new run's id, or None when nothing was recorded.

    Raises:
        tasks.store.engine.StoreUnreachable: the store cannot be reached.
    """
    settings = (settings or Settings.from_env()).with_store(db_url)  # db_url: the callback's store (plan_cases)
    ctx = as_state(state).ctx
    if stored_run(settings.database_url, ctx) is not None:
        return None
    why = unmeasured_reason(f"{ctx.case.model} {ctx.case.name}", queue, worker, queued_timeout_s)
    pulled = as_state(state).pulled
    try:
        run_id = record_failure(
            settings.database_url, ctx, MEASURING_STAGES[0], why, version=str(pulled.version) if pulled else None
        )
    except SuccessAlreadyStored:
        return None
    log.error("%s (recorded as failed run %s)", why, run_id)
    scratch.discard(settings, ctx)
    return run_id


def check_map_length(states: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """``states`` (the planned run states), when Airflow can map them: at most ``limit`` (``[core]
    max_map_length``, default 1024) cases, each one mapped task group instance.

    Raises:
        ValueError: more cases than ``limit``; the message says how many and which setting to raise.
    """
    if len(states) > limit:
        raise ValueError(
            f"this DAG run plans {len(states)} cases, and Airflow maps at most {limit} ([core] max_map_length): set "
            f"AIRFLOW__CORE__MAX_MAP_LENGTH to {len(states)} or more on the scheduler and workers "
            "(docs/deployment.md), or split the config"
        )
    return states


WORK_DIR_STALE_S = 24 * 3600.0
"""A work dir of a run that is not stored as a success counts as left over after this many seconds
without a write (a long profiled run writes nothing there for a while)."""


def _tree_age_s(path: Path) -> float:
    """Seconds since anything under ``path`` was last written."""
    newest = path.stat().st_mtime
    for p in path.rglob("*"):
        try:
            newest = max(newest, p.lstat().st_mtime)
        except OSError:
            continue
    return time.time() - newest


def check_work_dirs(
    settings: Settings, runs: list[RunLocation], *, grace_s: float = WORK_DIR_STALE_S
) -> list[Leftover]:
    """Work dirs under ``PERFWATCH_WORK``, and the runs' prefixes under ``PERFWATCH_SCRATCH`` when it is set
    (``tasks.stages.scratch.entries``), that no run needs any more (``Leftover`` kind ``scratch``): the work
    dir of a run stored as a success (archive removes it), and any other untouched for ``grace_s`` seconds (a
    failed run's that could not be cleaned, a killed run's). Younger ones may belong to a run in progress: not
    reported."""
    from tasks.stages.archive import Leftover

    root = settings.work_root
    found: list[tuple[str, str, float | None]] = (
        [(d.name, str(d), None) for d in sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []
    )
    found += scratch.entries(settings)  # PERFWATCH_SCRATCH: the runs' prefixes in the object store
    by_slug = {run_slug(r.dag_id, r.dag_run_id, r.model, r.plan_version, r.case_name): r for r in runs}
    out = []
    for slug, where, listed_age in found:
        r = by_slug.get(slug)
        if r is not None and r.status == "success":
            out.append(Leftover("scratch", where, f"scratch of run {r.run_id}, which is archived", True, r.run_id))
            continue
        age = listed_age if "://" in where else _tree_age_s(Path(where))
        if age is not None and age > grace_s:
            whose = f"run {r.run_id} failed" if r is not None else "no stored run: a killed or abandoned run"
            out.append(
                Leftover("scratch", where, f"untouched for {age / 3600:.1f} h; {whose}", True, r.run_id if r else None)
            )
    return out


def raise_on_regression(state: RunState | Mapping[str, Any]) -> None:
    """After archiving: raise RegressionDetected when the verdict is ``regression``; the message names the figure that
    regressed (step time's ratio, or another figure first where it made the regression:
    ``evidence["regressed_on"]``) and the three ops whose self-time per step grew most
    (``evidence["attribution"]``). For a retried task of a run already archived (its state may lack the verdict) the
    stored run's verdict decides."""
    state = as_state(state)
    ctx, verdict, archived = state.ctx, state.verdict, _have(state.archived, "archived")
    if verdict is None:
        if archived.verdict == Verdict.REGRESSION:
            raise RegressionDetected(
                f"{ctx.case.model} ({ctx.case.name}) regressed: archived as run "
                f"{archived.run_id} (`perfwatch compare` shows the evidence)"
            )
        return
    if verdict.verdict == Verdict.REGRESSION:
        from tasks.analysis.attribution import top_ops_text

        against = f"vs baseline run(s) {verdict.baseline_run_ids}"
        if not verdict.baseline_run_ids:  # a paired gate against the newest earlier version measured
            against = (
                f"vs version {(verdict.evidence.get('paired') or {}).get('baseline_version')} (no baseline accepted)"
            )
        step = (
            f"{ratio_name(verdict.metric)} {verdict.ratio:.3f} [{verdict.ci_low:.3f}, {verdict.ci_high:.3f}]"
            if verdict.ratio is not None and verdict.ci_low is not None and verdict.ci_high is not None
            else "no step-time ratio"
        )
        others = [str(x) for x in verdict.evidence.get("regressed_on") or []]
        if others and verdict.evidence.get("step_verdict") != Verdict.REGRESSION:  # another figure made it
            what = f"on {'; '.join(others)} (step time: {step})"
        else:  # the ratio of the metric that decided: wall time, or CPU time on a busy host
            what = step + (f"; also a regression on {'; '.join(others)}" if others else "")
        raise RegressionDetected(
            f"{ctx.case.model} v{_have(state.pulled, 'pulled').version} ({ctx.case.name}) regressed "
            f"({verdict.method}): {what} {against}; archived as run {archived.run_id}; "
            + top_ops_text(verdict.evidence.get("attribution"))
        )


def raise_on_uncompared(state: RunState | Mapping[str, Any]) -> None:
    """After archiving: raise :class:`NotCompared` when a release gate (trigger ``release``) compared its version
    with nothing (``evidence["uncompared"]``, e.g. a first version with nothing to pair with), as ``perfwatch run
    --paired`` exits 2 for it; the message says why. Another trigger's run (a nightly first run) stays green."""
    state = as_state(state)
    verdict = state.verdict
    if state.ctx.trigger != "release" or verdict is None:
        return
    uncompared = verdict.evidence.get("uncompared") or {}
    if not uncompared:
        return
    case = state.ctx.case
    raise NotCompared(
        f"{case.model} v{_have(state.pulled, 'pulled').version} ({case.name}): release gate not compared, "
        f"{uncompared.get('reason') or 'no reason'}; archived as run {_have(state.archived, 'archived').run_id}"
    )


def raise_on_outcome(state: RunState | Mapping[str, Any]) -> None:
    """After archiving, what turns the run red: :func:`raise_on_regression`, then :func:`raise_on_host_busy`
    (a verdict undecided on a busy host), then :func:`raise_on_uncompared` (a release gate that compared
    nothing)."""
    state = as_state(state)
    raise_on_regression(state)
    raise_on_host_busy(state)
    raise_on_uncompared(state)


def run_case(ctx: RunContext, settings: Settings | None = None) -> RunState:
    """All seven stages in this process, in the registry's order (for the CLI and tests).

    Returns the final state; raises the first stage's error (already recorded in the store).
    Does not raise on a regression: call ``raise_on_regression`` for that.
    """
    settings = settings or Settings.from_env()
    migrate(settings.database_url)
    state = RunState(ctx=ctx)
    for s in STAGES:
        state = run_stage(state, s.id, settings)
    return state
