"""The seven stages glued for Airflow (one function per DAG task) and for a plain in-process run.

Each stage function takes the run's *bundle* — a JSON dict ``{"ctx": RunContext, <stage>: record,
...}`` as it travels through XCom — adds its own record and returns the bundle.

Every stage is safe to retry at any time (an operator clearing a task of a finished DAG run):

* a run already stored as a success is final: each stage of it is a no-op that returns the bundle
  with ``archived`` (the stored run) added, removes a scratch dir it may have left, and writes
  nothing;
* any exception is first recorded in the store as a failed run (stage and error; an earlier failed
  attempt is replaced, its error kept below), then the run's scratch dir under ``PERFWATCH_WORK`` is
  removed and the exception re-raised with a note saying so. When the failure could NOT be recorded
  (store unreachable) the note says that instead, and the scratch dir is kept for a retry
  (``failure_note`` reads the outcome). A failure record never replaces a stored success.
* a stage whose inputs (earlier stages' files in the scratch dir) are gone says which file and from
  which task to clear the run.
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.matrix import load_config, select_cases
from tasks.records import (
    ArchiveRecord,
    Case,
    CompareRecord,
    EnvRecord,
    ParseRecord,
    ProfiledRun,
    PulledModel,
    RunContext,
    Trigger,
    WarmupRecord,
    run_slug,
)
from tasks.settings import Settings
from tasks.store import migrate
from tasks.store.reads import RunLocation, baseline_version, gather_compare_inputs, stored_run
from tasks.store.writes import SuccessAlreadyStored, record_failure

if TYPE_CHECKING:
    from tasks.stages.archive import Leftover

# Each stage's module is imported by its wrapper below, when it runs: every Airflow task imports this
# module, and a warm-up task should not pay for xprof, pandas, scipy and Great Expectations, which only
# parse and baseline-compare use (tests/unit/test_rooms.py checks what importing this module pulls in).

log = logging.getLogger(__name__)

STAGES = ("pull-model-version", "env-fingerprint", "warm-up", "profiled-run", "parse", "baseline-compare", "archive")
#: what each stage does, as its start line in the log says (a DAG task log, or `perfwatch run` on stderr)
DOING = {
    "pull-model-version": "copying and hashing the model version",
    "env-fingerprint": "reading TF build, NVML, CPU, OS and packages in the runner interpreter",
    "warm-up": "fresh runner process: steps until step time is steady",
    "profiled-run": "fresh runner process: warm-up, measured steps (profiler off), then the profiled window",
    "parse": "xprof converts the XSpace: step-time breakdown, op self-times, memory",
    "baseline-compare": "finding the comparable baseline; statistics and the Great Expectations suites",
    "archive": "writing run, samples and verdict in one transaction; moving the profile to the archive",
}

Bundle = dict[str, Any]


class RegressionDetected(RuntimeError):
    """Raised after archiving when the verdict is ``regression``: the run must go red."""


def plan_cases(
    dag_id: str, dag_run_id: str, trigger: Trigger, params: dict[str, Any], settings: Settings | None = None
) -> list[Bundle]:
    """One bundle per case: the Param-given model when set (the other Params fill its Case), else
    every case of the YAML config exactly as configured there (the nightly run). With Params ``model``
    and ``case``, the cases come from the model's config entries: the one named ``case`` (e.g.
    ``train-bs32-mixed_bfloat16-xla``) or all of them (``case`` = ``all``), with the Params'
    ``version`` and ``measured_steps``. Each bundle's ``label`` (``<model> <case name>``) names its
    mapped task instances in the Airflow grid.

    Also migrates the store to the latest schema (idempotent), once per DAG run.

    Raises:
        pydantic.ValidationError: a Param is out of range; ValueError/FileNotFoundError: bad config,
            ``case`` without ``model``, or a ``case`` the model's config entries do not have.
    """
    settings = settings or Settings.from_env()
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
    return [
        {
            "ctx": RunContext(dag_id=dag_id, dag_run_id=dag_run_id, trigger=trigger, case=c).to_xcom(),
            "label": f"{c.model} {c.name}",
        }
        for c in cases
    ]


def trigger_kind(run_type: str, requested: str | None) -> Trigger:
    """The run's trigger for the store: ``scheduled`` for a DAG run of the schedule (Airflow's
    ``DagRunType.SCHEDULED``), else the ``trigger`` Param (``manual`` or ``release``)."""
    if str(run_type).lower().endswith("scheduled"):
        return "scheduled"
    return "release" if requested == "release" else "manual"


def scratch_dir(settings: Settings, ctx: RunContext) -> Path:
    """The run's local work directory (not created): ``<PERFWATCH_WORK>/<RunContext.slug>``."""
    return settings.work_root / ctx.slug


def work_dir(settings: Settings, ctx: RunContext) -> Path:
    """The run's local work directory (created)."""
    d = scratch_dir(settings, ctx)
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
def _recorded(bundle: Bundle, stage: str, settings: Settings) -> Iterator[RunContext]:
    ctx = RunContext.model_validate(bundle["ctx"])
    try:
        yield ctx
    except Exception as e:
        msg = f"{type(e).__name__}: {e}"
        scratch = scratch_dir(settings, ctx)
        try:
            from tasks.modelstore import CorruptModelError

            resolved = (bundle.get("pulled") or {}).get("version") or (
                e.version if isinstance(e, CorruptModelError) else None
            )
            run_id = record_failure(
                settings.database_url,
                ctx,
                stage,
                msg + "\n" + traceback.format_exc()[-3000:],
                version=str(resolved) if resolved is not None else None,
            )
        except SuccessAlreadyStored as kept:
            note = FailureNote(
                None,
                f"run {kept.run_id} of this DAG run is already stored as a success and is "
                "kept; this failure was not recorded over it",
            )
            shutil.rmtree(scratch, ignore_errors=True)  # the scratch of a finished run
            e.add_note(note.detail)
        except Exception as store_error:  # noqa: BLE001 - the original error matters more
            note = FailureNote(None, f"{type(store_error).__name__}: {store_error}")
            e.add_note(
                f"the failure could NOT be recorded in the store ({note.detail}); the run's scratch dir "
                f"{scratch} is kept for a retry"
            )
        else:
            note = FailureNote(run_id)
            shutil.rmtree(scratch, ignore_errors=True)
            e.add_note(f"recorded in the store as failed run {run_id} (stage {stage}); scratch dir removed")
        setattr(e, _NOTE_ATTR, note)
        raise


_PRODUCER = {"pulled": "pull-model-version", "run": "profiled-run", "parsed": "parse", "verdict": "baseline-compare"}


class StageInputMissing(FileNotFoundError):
    """A stage's input file from an earlier stage is gone (the run's scratch dir was removed after the
    run failed or finished); the message names the file and the task to clear the run from."""


def _need(bundle: Bundle, stage: str) -> None:
    """Check that the files this stage reads from earlier stages are still there."""
    wanted: list[tuple[str, str | None]] = []
    if stage in ("warm-up", "profiled-run"):
        wanted.append(("pulled", bundle["pulled"]["local_path"]))
    if stage == "parse":
        wanted.append(("run", bundle["run"]["profile_dir"]))
    if stage in ("baseline-compare", "archive"):
        wanted += [("run", bundle["run"]["samples_path"]), ("parsed", bundle["parsed"]["parsed_path"])]
    if stage == "archive":
        wanted.append(("run", bundle["run"]["profile_dir"]))
    for key, path in wanted:
        if path and not Path(path).exists():
            raise StageInputMissing(
                f"{stage}: {path} (written by {_PRODUCER[key]}) is gone: this run's scratch dir was removed "
                f"(its earlier attempt failed, or a restart cleaned it); clear the DAG run's tasks from "
                f"{_PRODUCER[key]} on"
            )


def _stage(name: str, key: str, fn: Callable[[Bundle, RunContext, Settings], Any]):
    def run(bundle: Bundle, settings: Settings | None = None) -> Bundle:
        settings = settings or Settings.from_env()
        with _recorded(bundle, name, settings) as ctx:
            done = stored_run(settings.database_url, ctx.dag_id, ctx.dag_run_id, ctx.case.name)
            if done is not None and done.status == "success":
                log.warning(
                    "%s: run %s of %s %s (%s) is already archived; nothing to do",
                    name,
                    done.run_id,
                    ctx.dag_id,
                    ctx.dag_run_id,
                    ctx.case.name,
                )
                shutil.rmtree(scratch_dir(settings, ctx), ignore_errors=True)
                return {
                    **bundle,
                    "archived": ArchiveRecord(
                        run_id=done.run_id, archive_uri=done.archive_uri or "", verdict=done.verdict or ""
                    ).to_xcom(),
                }
            _need(bundle, name)
            t0 = time.monotonic()
            log.info(
                "%s: %s (%s v%s, %s)", name, DOING.get(name, "running"), ctx.case.model, ctx.case.version, ctx.case.name
            )
            record = fn(bundle, ctx, settings)
            log.info("%s: done in %.1f s", name, time.monotonic() - t0)
        return {**bundle, key: record.to_xcom()}

    run.__name__ = key
    run.__doc__ = (
        f"Stage {name}: adds ``{key}`` to the bundle; a no-op for a run already stored as a success; "
        "a failure is recorded, then re-raised."
    )
    return run


def _pull(b: Bundle, ctx: RunContext, st: Settings) -> PulledModel:
    from tasks.stages.pull import pull_model_version

    return pull_model_version(st.model_store, ctx.case.model, ctx.case.version, work_dir(st, ctx))


pull = _stage("pull-model-version", "pulled", _pull)


def _fingerprint(b: Bundle, ctx: RunContext, st: Settings) -> EnvRecord:
    from tasks.runner import RunnerProcess
    from tasks.stages.fingerprint import take_fingerprint_in

    return EnvRecord(**take_fingerprint_in(RunnerProcess(st.runner_command)).model_dump())


fingerprint = _stage("env-fingerprint", "env", _fingerprint)


def _warmup(b: Bundle, ctx: RunContext, st: Settings) -> WarmupRecord:
    from tasks.runner import RunnerProcess
    from tasks.stages.warmup import reusable_warm_up, warm_up

    pulled = PulledModel.model_validate(b["pulled"])
    reused = reusable_warm_up(st.database_url, pulled, b["env"]["comparability_key"], ctx.case)
    if reused is not None:
        log.info(
            "warm-up: reusing run %s's warm-up (%d steps to steady state; same model bytes and environment "
            "within %g days): no warm-up process",
            reused.reused_from_run_id,
            reused.warmup_steps,
            ctx.case.warmup_reuse_days,
        )
        return reused
    return warm_up(pulled, ctx.case, work_dir(st, ctx), RunnerProcess(st.runner_command))


warmup = _stage("warm-up", "warmup", _warmup)


def pull_paired_baseline(
    ctx: RunContext, env: EnvRecord, settings: Settings, pulled: PulledModel | None = None
) -> PulledModel | None:
    """For a paired gate: pull the version to re-measure as A into ``<work dir>/baseline`` -- the
    baseline's (the version of the baseline run found by ``tasks.store.reads.baseline_version``), or
    ``ctx.paired_version`` when set (an A/A gate of ``perfwatch calibrate``). Paired when
    ``RunContext.pairs_with`` says so: a release trigger or ``Case.paired``, or a scheduled run whose
    resolved version (``pulled.version``) differs from the baseline's. ``None`` otherwise, and when
    there is no baseline yet (the normal path then decides)."""
    from tasks.stages.pull import pull_model_version

    found = baseline_version(settings.database_url, ctx.case.model, ctx.case.name, env.comparability_key)
    if not ctx.pairs_with(pulled.version if pulled else None, found[0] if found else None):
        return None
    version = ctx.paired_version or found[0]
    return pull_model_version(settings.model_store, ctx.case.model, version, work_dir(settings, ctx) / "baseline")


def _profile(b: Bundle, ctx: RunContext, st: Settings) -> ProfiledRun:
    from tasks.runner import RunnerProcess
    from tasks.stages.profiled_run import gate_setup, profiled_run

    pulled = PulledModel.model_validate(b["pulled"])
    env = EnvRecord.model_validate(b["env"])
    baseline = pull_paired_baseline(ctx, env, st, pulled)
    setup = gate_setup(st.database_url, ctx.case, env.comparability_key) if baseline else None
    return profiled_run(
        pulled,
        ctx.case,
        WarmupRecord.model_validate(b["warmup"]),
        work_dir(st, ctx),
        RunnerProcess(st.runner_command),
        baseline=baseline,
        setup=setup,
    )


profile = _stage("profiled-run", "run", _profile)


class HostBusy(RuntimeError):
    """The host was busier than the documented bounds while the run measured
    (``tasks.analysis.calibration.assess_noise``); the message gives the figures."""


def _will_be_compared(bundle: Bundle, settings: Settings) -> bool:
    """The run's verdict depends on its noise: a paired gate ran, or the store holds a baseline of the
    model and case in this environment (a first run is ``no-baseline`` however busy the host was)."""
    if bundle["run"].get("paired_path"):
        return True
    ctx = RunContext.model_validate(bundle["ctx"])
    found = gather_compare_inputs(
        settings.database_url,
        ctx.case.model,
        ctx.case.name,
        bundle["env"]["comparability_key"],
        lookback=1,
        calibration_window=1,
    )
    return bool(found.same_env)


def profile_unless_busy(bundle: Bundle, settings: Settings | None = None, *, retry_left: bool) -> Bundle:
    """The profiled-run stage for a task that Airflow retries later on a busy host: when the measurement's
    noise is beyond the bounds, ``retry_left`` and the verdict depends on it (a paired gate, or a baseline
    to compare with), raise :class:`HostBusy` instead of handing a busy measurement on (nothing is
    stored; the scratch dir is kept, so the retry measures again from the warm-up's record). Without
    ``retry_left`` (the last try, or ``perfwatch run``) the busy measurement goes on to baseline-compare,
    which says ``inconclusive`` ("host busy: ..."), and archive."""
    settings = settings or Settings.from_env()
    out = profile(bundle, settings)
    noise = (out.get("run") or {}).get("noise") or {}
    if retry_left and noise.get("busy") and _will_be_compared(out, settings):
        ctx = RunContext.model_validate(bundle["ctx"])
        raise HostBusy(f"{ctx.case.model} ({ctx.case.name}): {noise.get('reason')}; measuring again later")
    return out


def _parse(b: Bundle, ctx: RunContext, st: Settings) -> ParseRecord:
    from tasks.stages.parse import parse_run

    return parse_run(ProfiledRun.model_validate(b["run"]), work_dir(st, ctx))


parse = _stage("parse", "parsed", _parse)


def _compare(b: Bundle, ctx: RunContext, st: Settings) -> CompareRecord:
    from tasks.stages.compare import baseline_compare
    from tasks.stages.expectations import data_docs_title

    return baseline_compare(
        st.database_url,
        ctx.case,
        EnvRecord.model_validate(b["env"]),
        ProfiledRun.model_validate(b["run"]),
        ParseRecord.model_validate(b["parsed"]),
        work_dir(st, ctx),
        docs_title=data_docs_title(ctx, PulledModel.model_validate(b["pulled"]).version),
    )


compare = _stage("baseline-compare", "verdict", _compare)


def _archive(b: Bundle, ctx: RunContext, st: Settings) -> ArchiveRecord:
    from tasks.stages.archive import archive_run

    wd = work_dir(st, ctx)
    gx = wd / "gx"
    rec = archive_run(
        st.database_url,
        st.archive_root,
        ctx,
        PulledModel.model_validate(b["pulled"]),
        EnvRecord.model_validate(b["env"]),
        WarmupRecord.model_validate(b["warmup"]),
        ProfiledRun.model_validate(b["run"]),
        ParseRecord.model_validate(b["parsed"]),
        CompareRecord.model_validate(b["verdict"]),
        auto_accept=ctx.case.auto_accept,
        extra_dirs={"gx": str(gx)} if gx.is_dir() else None,
    )
    shutil.rmtree(wd, ignore_errors=True)
    return rec


archive = _stage("archive", "archived", _archive)


SCRATCH_STALE_S = 24 * 3600.0
"""A scratch dir of a run that is not stored as a success counts as left over after this many seconds
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


def check_scratch(settings: Settings, runs: list[RunLocation], *, grace_s: float = SCRATCH_STALE_S) -> list[Leftover]:
    """Scratch dirs under ``PERFWATCH_WORK`` that no run needs any more: the scratch of a run stored as
    a success (archive removes it), and any other untouched for ``grace_s`` seconds (a failed run's
    that could not be cleaned, a killed run's). Younger ones may belong to a run in progress: not reported."""
    from tasks.stages.archive import Leftover

    root = settings.work_root
    if not root.is_dir():
        return []
    by_slug = {run_slug(r.dag_id, r.dag_run_id, r.model, r.case_name): r for r in runs}
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        r = by_slug.get(d.name)
        if r is not None and r.status == "success":
            out.append(Leftover("scratch", str(d), f"scratch of run {r.run_id}, which is archived", True, r.run_id))
            continue
        age = _tree_age_s(d)
        if age > grace_s:
            whose = f"run {r.run_id} failed" if r is not None else "no stored run: a killed or abandoned run"
            out.append(
                Leftover("scratch", str(d), f"untouched for {age / 3600:.1f} h; {whose}", True, r.run_id if r else None)
            )
    return out


def raise_on_host_busy(bundle: Bundle) -> None:
    """After archiving: raise :class:`HostBusy` when the archived verdict is ``inconclusive`` because the host
    was busy (``evidence["noise"]["busy"]``), so that the run goes red with the reason instead of passing
    silently undecided."""
    verdict = bundle.get("verdict") or {}
    noise = (verdict.get("evidence") or {}).get("noise") or {}
    if verdict.get("verdict") == "inconclusive" and noise.get("busy"):
        ctx = RunContext.model_validate(bundle["ctx"])
        raise HostBusy(
            f"{ctx.case.model} ({ctx.case.name}): verdict inconclusive, {noise.get('reason')}; archived "
            f"as run {bundle['archived']['run_id']}"
        )


def raise_on_regression(bundle: Bundle) -> None:
    """After archiving: raise RegressionDetected when the verdict is ``regression``; the message names the
    three ops whose self-time per step grew most (``evidence["attribution"]``). For a retried task of a
    run already archived (its bundle may lack the verdict) the stored run's verdict decides."""
    verdict = bundle.get("verdict")
    ctx = RunContext.model_validate(bundle["ctx"])
    if verdict is None:
        archived = bundle["archived"]
        if archived["verdict"] == "regression":
            raise RegressionDetected(
                f"{ctx.case.model} ({ctx.case.name}) regressed: archived as run "
                f"{archived['run_id']} (`perfwatch compare` shows the evidence)"
            )
        return
    if verdict["verdict"] == "regression":
        from tasks.analysis.attribution import top_ops_text

        raise RegressionDetected(
            f"{ctx.case.model} v{bundle['pulled']['version']} ({ctx.case.name}) regressed ({verdict['method']}"
            f"): step-time ratio {verdict['ratio']:.3f} [{verdict['ci_low']:.3f}, {verdict['ci_high']:.3f}] "
            f"vs baseline run(s) "
            f"{verdict['baseline_run_ids']}; archived as run {bundle['archived']['run_id']}; "
            + top_ops_text(verdict.get("evidence", {}).get("attribution"))
        )


def run_case(ctx: RunContext, settings: Settings | None = None) -> Bundle:
    """All seven stages in this process, in the card's order (for the CLI and tests).

    Returns the final bundle; raises the first stage's error (already recorded in the store).
    Does not raise on a regression: call ``raise_on_regression`` for that.
    """
    settings = settings or Settings.from_env()
    migrate(settings.database_url)
    bundle: Bundle = {"ctx": ctx.to_xcom()}
    for stage in (pull, fingerprint, warmup, profile, parse, compare, archive):
        bundle = stage(bundle, settings)
    return bundle
