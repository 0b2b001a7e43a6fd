"""The seven stages glued for Airflow (one function per DAG task) and for a plain in-process run.

Each stage function takes the run's *bundle* — a JSON dict ``{"ctx": RunContext, <stage>: record,
...}`` as it travels through XCom — adds its own record and returns the bundle. Any exception is
first recorded in the store as a failed run (stage and error), then re-raised, so a failed stage
always leaves a run record with its error.
"""

from __future__ import annotations

import shutil
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tasks.analysis.attribution import top_ops_text
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
)
from tasks.settings import Settings
from tasks.stages import parse as parse_stage
from tasks.stages.archive import archive_run
from tasks.stages.compare import baseline_compare
from tasks.stages.fingerprint import take_fingerprint_in
from tasks.stages.profiled_run import profiled_run
from tasks.stages.pull import pull_model_version
from tasks.stages.warmup import warm_up
from tasks.store import migrate
from tasks.store.reads import baseline_version
from tasks.store.writes import record_failure

STAGES = ("pull-model-version", "env-fingerprint", "warm-up", "profiled-run", "parse", "baseline-compare", "archive")

Bundle = dict[str, Any]


class RegressionDetected(RuntimeError):
    """Raised after archiving when the verdict is ``regression``: the run must go red."""


def load_config(path: str | Path) -> list[Case]:
    """The cases of the nightly schedule from the YAML config (``models:`` list of Case fields).

    Raises:
        FileNotFoundError: no config at ``path``.
        ValueError: the YAML is not a mapping with a ``models`` list, or an entry is invalid
            (the message names the entry index and field).
    """
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise ValueError(f"{path}: expected a mapping with a 'models:' list of cases")
    defaults = data.get("defaults") or {}
    cases = []
    for i, entry in enumerate(data["models"]):
        try:
            cases.append(Case.model_validate({**defaults, **entry}))
        except Exception as e:
            raise ValueError(f"{path}: models[{i}] is invalid: {e}") from e
    return cases


def plan_cases(dag_id: str, dag_run_id: str, trigger: Trigger, params: dict[str, Any],
               settings: Settings | None = None) -> list[Bundle]:
    """One bundle per case: the Param-given model when set (the other Params fill its Case), else
    every model of the YAML config exactly as configured there (the nightly run).

    Also migrates the store to the latest schema (idempotent), once per DAG run.

    Raises:
        pydantic.ValidationError: a Param is out of range; ValueError/FileNotFoundError: bad config.
    """
    settings = settings or Settings.from_env()
    migrate(settings.database_url)
    if params.get("model"):
        case_fields = {k: v for k, v in params.items() if k in Case.model_fields and v not in (None, "")}
        cases = [Case.model_validate(case_fields)]
    else:
        cases = load_config(settings.config_path)
    return [{"ctx": RunContext(dag_id=dag_id, dag_run_id=dag_run_id, trigger=trigger, case=c).to_xcom()}
            for c in cases]


def trigger_kind(run_type: str, requested: str | None) -> Trigger:
    """The run's trigger for the store: ``scheduled`` for a DAG run of the schedule (Airflow's
    ``DagRunType.SCHEDULED``), else the ``trigger`` Param (``manual`` or ``release``)."""
    if str(run_type).lower().endswith("scheduled"):
        return "scheduled"
    return "release" if requested == "release" else "manual"


def work_dir(settings: Settings, ctx: RunContext) -> Path:
    """The run's local work directory (created)."""
    d = settings.work_root / ctx.slug
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def _recorded(bundle: Bundle, stage: str, settings: Settings) -> Iterator[RunContext]:
    ctx = RunContext.model_validate(bundle["ctx"])
    try:
        yield ctx
    except Exception as e:
        msg = f"{type(e).__name__}: {e}"
        try:
            record_failure(settings.database_url, ctx, stage, msg + "\n" + traceback.format_exc()[-3000:])
        except Exception as store_error:  # noqa: BLE001 - the original error matters more
            e.add_note(f"(recording the failure in the store also failed: {store_error})")
        raise


def _stage(name: str, key: str, fn: Callable[[Bundle, RunContext, Settings], Any]):
    def run(bundle: Bundle, settings: Settings | None = None) -> Bundle:
        settings = settings or Settings.from_env()
        with _recorded(bundle, name, settings) as ctx:
            record = fn(bundle, ctx, settings)
        return {**bundle, key: record.to_xcom()}

    run.__name__ = key
    run.__doc__ = f"Stage {name}: adds ``{key}`` to the bundle; a failure is recorded, then re-raised."
    return run


pull = _stage("pull-model-version", "pulled", lambda b, ctx, st: pull_model_version(
    st.model_store, ctx.case.model, ctx.case.version, work_dir(st, ctx)))

fingerprint = _stage("env-fingerprint", "env", lambda b, ctx, st: EnvRecord(
    **take_fingerprint_in(st.runner_python).model_dump()))

warmup = _stage("warm-up", "warmup", lambda b, ctx, st: warm_up(
    PulledModel.model_validate(b["pulled"]), ctx.case, work_dir(st, ctx), st.runner_python))

def pull_paired_baseline(ctx: RunContext, env: EnvRecord, settings: Settings) -> PulledModel | None:
    """For a paired gate (release trigger or ``Case.paired``): pull the baseline's model version (the
    version of the baseline run found by ``tasks.store.reads.baseline_version``) into ``<work dir>/baseline``.
    ``None`` when the run is not paired or there is no baseline yet (the normal path then decides)."""
    if not ctx.wants_paired:
        return None
    found = baseline_version(settings.database_url, ctx.case.model, ctx.case.name, env.comparability_key)
    if found is None:
        return None
    return pull_model_version(settings.model_store, ctx.case.model, found[0], work_dir(settings, ctx) / "baseline")


def _profile(b: Bundle, ctx: RunContext, st: Settings) -> ProfiledRun:
    pulled = PulledModel.model_validate(b["pulled"])
    baseline = pull_paired_baseline(ctx, EnvRecord.model_validate(b["env"]), st)
    return profiled_run(pulled, ctx.case, WarmupRecord.model_validate(b["warmup"]), work_dir(st, ctx),
                        st.runner_python, baseline=baseline)


profile = _stage("profiled-run", "run", _profile)

parse = _stage("parse", "parsed", lambda b, ctx, st: parse_stage.parse_run(
    ProfiledRun.model_validate(b["run"]), work_dir(st, ctx)))

compare = _stage("baseline-compare", "verdict", lambda b, ctx, st: baseline_compare(
    st.database_url, ctx.case, EnvRecord.model_validate(b["env"]), ProfiledRun.model_validate(b["run"]),
    ParseRecord.model_validate(b["parsed"]), work_dir(st, ctx)))


def _archive(b: Bundle, ctx: RunContext, st: Settings) -> ArchiveRecord:
    wd = work_dir(st, ctx)
    gx = wd / "gx"
    rec = archive_run(st.database_url, st.archive_root, ctx, PulledModel.model_validate(b["pulled"]),
                      EnvRecord.model_validate(b["env"]), WarmupRecord.model_validate(b["warmup"]),
                      ProfiledRun.model_validate(b["run"]), ParseRecord.model_validate(b["parsed"]),
                      CompareRecord.model_validate(b["verdict"]), auto_accept=ctx.case.auto_accept,
                      extra_dirs={"gx": str(gx)} if gx.is_dir() else None)
    shutil.rmtree(wd, ignore_errors=True)
    return rec


archive = _stage("archive", "archived", _archive)


def raise_on_regression(bundle: Bundle) -> None:
    """After archiving: raise RegressionDetected when the verdict is ``regression``; the message names the
    three ops whose self-time per step grew most (``evidence["attribution"]``)."""
    verdict = bundle["verdict"]
    if verdict["verdict"] == "regression":
        ctx = RunContext.model_validate(bundle["ctx"])
        raise RegressionDetected(
            f"{ctx.case.model} v{bundle['pulled']['version']} ({ctx.case.name}) regressed ({verdict['method']}"
            + (f", median over the GX ceiling {verdict['median_limit_ms']:.2f} ms"
               if verdict["evidence"].get("ceiling_breached") else "")
            + f"): step-time ratio {verdict['ratio']:.3f} [{verdict['ci_low']:.3f}, {verdict['ci_high']:.3f}] "
            f"vs baseline run(s) "
            f"{verdict['baseline_run_ids']}; archived as run {bundle['archived']['run_id']}; "
            + top_ops_text(verdict.get("evidence", {}).get("attribution")))


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
