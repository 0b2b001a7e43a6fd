"""ingest: a profile of a user's own training job, stored beside perfwatch's runs (``perfwatch ingest``).

The job profiles a few of its steps with step markers (``tasks.runner.jobprofile.StepProfiler``, or
the Keras TensorBoard callback's ``profile_batch``) and writes the TensorBoard layout. :func:`ingest_profile`

1. finds the newest profiling session under the log dir, at any depth (Keras writes
   ``<log_dir>/train/plugins/profile/<ts>/<host>.xplane.pb``; the profiler API ``<logdir>/plugins/...``);
2. parses it with the parse stage (``tasks.stages.parse.parse_profile``: xprof's converters) and takes
   **xprof's per-step step times** (overview_page, from the job's step markers, profiler on) as the
   run's step times — there is no separate timer in someone else's job; a profile without step
   markers is refused (zero is never stored as a step time);
3. judges them with baseline-compare (``tasks.stages.compare.baseline_compare``) against the earlier
   ingested runs of the same model, case and environment (the environment of an external run is what
   its profile says: hardware type, device type and cores, host names), and says in the verdict's
   evidence that the step time is xprof's (``evidence["step_time_source"]``);
4. archives it with the archive stage (``tasks.stages.archive.archive_run``): one transaction, the
   profile copied to the TensorBoard-openable archive, ``runs.source`` = ``external`` (dag_id
   ``perfwatch_ingest``).

The same profile ingested twice is one run (its identity is the sha256 of its xplane files). A
failure after the profile was found is recorded in the store as a failed run with its stage and error.

An external run has no facts perfwatch's runner measures: model bytes (``model_versions.digest``
hashes the job's identity ``external/<model>/<version>`` and ``size_bytes`` is 0: nothing was
pulled), the cold step, the warm-up, the profiler overhead, peak memory; those are None, never made up.
Throughput (examples/s at the median step time) needs ``batch_size``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import traceback
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from tasks.analysis.diagnose import diagnose
from tasks.analysis.stats import MIN_STEPS
from tasks.records import (
    ArchiveRecord,
    Case,
    CompareRecord,
    EnvRecord,
    ParseRecord,
    ProfiledRun,
    PulledModel,
    RunContext,
    WarmupRecord,
    canonical_version,
)
from tasks.runner.protocol import ExternalSamples, write_result
from tasks.settings import Settings
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.stages.expectations import data_docs_title
from tasks.stages.parse import ProfileNotFoundError, find_xplanes, parse_profile
from tasks.store import migrate
from tasks.store.reads import stored_run
from tasks.store.schema import INGEST_DAG_ID
from tasks.store.writes import SuccessAlreadyStored, record_failure

DEFAULT_CASE = "external"
STEP_TIME_SOURCE = (
    "xprof: the overview_page step time of each profiled step, from the job's own step markers "
    "(profiler on), not perfwatch's timer"
)


class ExternalCase(Case):
    """A case of a user's job: its name is given (``case_name``), not made from the batch size; the batch
    size is optional (None: unknown, no throughput)."""

    case_name: str = Field(DEFAULT_CASE, min_length=1, max_length=64)
    batch_size: int | None = Field(None, ge=1, le=65536)  # type: ignore[assignment]
    source: Literal["external"] = "external"
    logdir: str = ""

    @field_validator("case_name")
    @classmethod
    def _case_name(cls, v: str) -> str:
        if any(not (c.isalnum() or c in "_.-") for c in v):
            raise ValueError(f"case name {v!r}: letters, digits and _.- only")
        return v

    @property
    def name(self) -> str:
        return self.case_name


class ExternalModel(PulledModel):
    """The "model version" of an external run: the job's identity, no bytes pulled (see module docstring)."""

    format: Literal["external"] = "external"  # type: ignore[assignment]


class ExternalWarmup(WarmupRecord):
    """What is known of an external job before its profiled window: the first profiled step number
    (``warmup_steps``: steps the job ran before it); nothing measured."""

    warmup_steps: int | None = None  # type: ignore[assignment]
    steady: bool | None = None  # type: ignore[assignment]
    final_cv: float | None = None
    cold_step_ms: float | None = None  # type: ignore[assignment]
    step_times_ms: list[float] = Field(default_factory=list)
    wall_s: float | None = None  # type: ignore[assignment]


class ExternalRun(ProfiledRun):
    """The profiled window of an external job: xprof's per-step times (ms) are its measured steps."""

    throughput_eps: float | None = None  # type: ignore[assignment]
    profile_overhead_ratio: float | None = None
    peak_rss_bytes: int | None = None  # type: ignore[assignment]
    wall_s: float | None = None  # type: ignore[assignment]


class NoStepTimes(ValueError):
    """xprof found too few timed steps in the profile (no step markers, or fewer than ``MIN_STEPS``)."""


def find_profile_logdir(logdir: str | Path) -> Path:
    """The directory holding ``plugins/profile/<session>/`` with the newest session under ``logdir`` (any
    depth: ``train/`` and ``validation/`` of the Keras callback included).

    Raises:
        ProfileNotFoundError: no ``*.xplane.pb`` under ``logdir`` (names it and the layouts looked for).
    """
    root = Path(logdir)
    if not root.is_dir():
        raise ProfileNotFoundError(f"log dir {str(root)!r} is not a directory", paths=[str(root)])
    found = sorted(root.glob("**/plugins/profile/*/*.xplane.pb"), key=lambda p: (p.parent.name, str(p)))
    if not found:
        raise ProfileNotFoundError(
            f"no profile under {str(root)!r}: looked for */plugins/profile/<session>/*.xplane.pb at any depth "
            "(Keras TensorBoard callback: <log_dir>/train/plugins/profile/...; tf.profiler: <logdir>/plugins/...)",
            paths=[str(root)],
        )
    return found[-1].parent.parent.parent.parent


def _sha256(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def external_environment(parsed: dict[str, Any]) -> EnvRecord:
    """The environment of an external run, from what its profile says (``parse_profile`` output): hardware
    and device type and core count (the comparability key), and the host names (recorded only)."""
    comparable = {
        "source": "external",
        "hardware_type": parsed.get("hardware_type"),
        "device_type": parsed.get("device_type"),
        "device_core_count": parsed.get("device_core_count"),
    }
    data = {**comparable, "hosts": sorted(parsed.get("hosts") or [])}

    def digest(obj: Any) -> str:
        return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()

    return EnvRecord(fingerprint_id=digest(data), comparability_key=digest(comparable), data=data)


def step_times(parsed: dict[str, Any], where: str) -> list[float]:
    """xprof's per-step step times (ms) of a parsed profile, steps xprof could not time (0) left out.

    Raises:
        NoStepTimes: fewer than ``MIN_STEPS`` timed steps (says how to add step markers).
    """
    steps = [
        float(s["step_time_ms"])
        for s in parsed.get("step_breakdown") or []
        if s.get("step_time_ms") is not None and float(s["step_time_ms"]) > 0
    ]
    if len(steps) < MIN_STEPS:
        raise NoStepTimes(
            f"{where}: xprof found {len(steps)} timed step(s), at least {MIN_STEPS} are needed: profile at least "
            f"{MIN_STEPS} steps, each inside tf.profiler.experimental.Trace('train', step_num=i, _r=1) "
            "(tasks.runner.jobprofile.StepProfiler does this; PERFWATCH_PROFILE_STEPS=10:15). "
            "xprof's diagnostics: "
            + "; ".join(d.get("message", "") for d in parsed.get("diagnostics") or [] if d.get("message"))[:500]
        )
    return steps


def ingest_profile(
    logdir: str | Path,
    model: str,
    version: str,
    *,
    case_name: str | None = None,
    batch_size: int | None = None,
    settings: Settings | None = None,
) -> tuple[ArchiveRecord, CompareRecord | None]:
    """Store a user's job profile as a run (module docstring). Returns the archive record and the verdict
    (None when the profile was already stored: the stored run is returned as it is).

    Raises:
        ProfileNotFoundError: no profile under ``logdir`` (nothing is recorded: there is no run to speak of).
        NoStepTimes, tasks.stages.parse.ProfileParseError, and what the compare and archive stages raise:
            recorded in the store as a failed run of stage ``parse``, ``baseline-compare`` or ``archive``,
            then re-raised.
        pydantic.ValidationError: a bad model name, version, case name or batch size.
    """
    settings = settings or Settings.from_env()
    migrate(settings.database_url)
    profile_dir = find_profile_logdir(logdir)
    xplanes, _notes = find_xplanes(profile_dir)
    case = ExternalCase(
        model=model,
        version=canonical_version(version),
        batch_size=batch_size,
        case_name=case_name or DEFAULT_CASE,
        logdir=str(Path(logdir).resolve()),
        measured_steps=MIN_STEPS,
        profiled_steps=MIN_STEPS,
    )
    ctx = RunContext(dag_id=INGEST_DAG_ID, dag_run_id=f"ingest__{_sha256(xplanes)[:32]}", trigger="manual", case=case)
    done = stored_run(settings.database_url, ctx)
    if done is not None and done.status == "success":
        return ArchiveRecord(run_id=done.run_id, archive_uri=done.archive_uri or "", verdict=done.verdict or ""), None
    work = settings.work_root / ctx.slug
    stage = "parse"
    try:
        work.mkdir(parents=True, exist_ok=True)
        parsed = parse_profile(profile_dir)
        tables = parsed.model_dump(mode="json")
        steps = step_times(tables, str(profile_dir))
        findings = diagnose(parsed)
        tables.update(
            findings=[f.model_dump(mode="json") for f in findings],
            source={"kind": "external", "logdir": case.logdir, "step_time_source": STEP_TIME_SOURCE},
        )
        (work / "parsed.json").write_text(json.dumps(tables))
        first_step = min(int(s["step"]) for s in tables["step_breakdown"])
        n = len(steps)
        ctx = ctx.model_copy(update={"case": case.model_copy(update={"measured_steps": n, "profiled_steps": n})})
        median = statistics.median(steps)
        write_result(work / "samples.json", ExternalSamples(measured_step_times_ms=steps, step_time_source="xprof"))
        env = external_environment(tables)
        run = ExternalRun(
            work_dir=str(work),
            samples_path=str(work / "samples.json"),
            profile_dir=str(profile_dir),
            measured_steps=n,
            median_step_ms=median,
            throughput_eps=batch_size * 1000.0 / median if batch_size else None,
            peak_device_bytes=None,
        )
        parse_rec = ParseRecord(
            parsed_path=str(work / "parsed.json"),
            avg_step_time_ms=parsed.avg_step_time_ms,
            input_bound_pct=parsed.input_bound_pct,
            n_ops=len(parsed.op_stats),
            findings=[f"{f.code}: {f.message}" for f in findings],
            cross_check_ratio=None,
            cross_check_ok=None,
        )
        stage = "baseline-compare"
        verdict = baseline_compare(
            settings.database_url, ctx.case, env, run, parse_rec, work, docs_title=data_docs_title(ctx, case.version)
        )
        verdict = verdict.model_copy(
            update={"evidence": {**verdict.evidence, "step_time_source": STEP_TIME_SOURCE, "source": "external"}}
        )
        stage = "archive"
        pulled = ExternalModel(
            model=model,
            version=case.version,
            source_uri=case.logdir,
            local_path=case.logdir,
            digest=hashlib.sha256(f"external/{model}/{case.version}".encode()).hexdigest(),
            size_bytes=0,
        )
        gx = work / "gx"
        rec = archive_run(
            settings.database_url,
            settings.archive_root,
            ctx,
            pulled,
            env,
            ExternalWarmup(warmup_steps=first_step),
            run,
            parse_rec,
            verdict,
            auto_accept=True,
            extra_dirs={"gx": str(gx)} if gx.is_dir() else None,
        )
    except Exception as e:
        try:
            run_id = record_failure(
                settings.database_url, ctx, stage, f"{type(e).__name__}: {e}\n" + traceback.format_exc()[-3000:]
            )
            e.add_note(f"recorded in the store as failed run {run_id} (stage {stage})")
        except SuccessAlreadyStored:
            pass
        except Exception as store_error:  # noqa: BLE001 - the original error matters more
            e.add_note(f"the failure could NOT be recorded in the store: {type(store_error).__name__}: {store_error}")
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rec, verdict
