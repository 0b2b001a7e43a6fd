"""``make airflow`` as make expands it (``make -n``: the recipe printed, nothing run): the api-server listens
on 127.0.0.1 unless ``AIRFLOW_HOST`` says otherwise, and the components find its execution API there."""

from __future__ import annotations

import re
import subprocess

from tests.helpers import ROOT


def airflow_recipe(*overrides: str) -> str:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "airflow", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_airflow_binds_localhost_unless_told_otherwise():
    recipe = airflow_recipe()
    assert re.search(r"\bAIRFLOW__API__HOST=127\.0\.0\.1\b", recipe), recipe[-2000:]
    assert "AIRFLOW__API__HOST=0.0.0.0" not in recipe
    assert "EXECUTION_API_SERVER_URL:-http://127.0.0.1:8080/execution/" in recipe
    opened = airflow_recipe("AIRFLOW_HOST=0.0.0.0", "AIRFLOW_PORT=8081")
    assert re.search(r"\bAIRFLOW__API__HOST=0\.0\.0\.0 AIRFLOW__API__PORT=8081\b", opened)
    # every interface: this machine still reaches it (and its execution API) on 127.0.0.1
    assert "http://127.0.0.1:8081/api/v2/monitor/health" in opened
    assert "EXECUTION_API_SERVER_URL:-http://127.0.0.1:8081/execution/" in opened


def test_make_airflow_runs_perfwatch_doctor_once_the_components_are_up():
    recipe = airflow_recipe()
    health, doctor = recipe.index("/api/v2/monitor/health"), recipe.index("perfwatch doctor --airflow-url")
    assert health < doctor and "doctor --airflow-url http://127.0.0.1:8080 --airflow-user admin" in recipe


def test_ci_fails_loudly_when_its_postgresql_or_redis_does_not_answer():
    """.ci/run checks its services first (.ci/check-services): the tests needing PostgreSQL or Redis skip without
    them, so a CI run with them down would otherwise pass with those tests skipped."""
    import os
    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            down = f"127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: refused

        def check(db: str, redis: str) -> subprocess.CompletedProcess:
            env = {
                **os.environ,
                "PERFWATCH_TEST_DATABASE_URL": f"postgresql+psycopg://u:pw@{db}/test",
                "PERFWATCH_TEST_REDIS_URL": f"redis://{redis}/3",
            }
            return subprocess.run(
                [str(ROOT / ".ci" / "check-services")], env=env, capture_output=True, text=True, timeout=30
            )

        ok = check(up, up)
        assert ok.returncode == 0, ok.stderr
        no_redis = check(up, down)
        assert no_redis.returncode == 1 and f"CI: Redis is not reachable at {down}" in no_redis.stderr
        no_pg = check(down, up)
        assert no_pg.returncode == 1 and f"CI: PostgreSQL is not reachable at {down}" in no_pg.stderr
    assert ".ci/check-services" in (ROOT / ".ci" / "run").read_text().split("make check")[0]  # before the tests


def _stages(dockerfile: str) -> list[tuple[str | None, str, list[str]]]:
    """The Dockerfile's stages in order: ``(name or None, base, instruction lines)``, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", dockerfile)
    stages: list[tuple[str | None, str, list[str]]] = []
    for line in (x.strip() for x in text.splitlines()):
        if m := re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I):
            stages.append((m.group(2), m.group(1), []))
        elif line and not line.startswith("#") and stages:
            stages[-1][2].append(line)
    return stages


def _venvs(stages, target: str | None) -> list[str]:
    """The virtual environments the image of ``target`` (None: the last stage) holds: ``uv venv`` paths and the
    project's ``UV_PROJECT_ENVIRONMENT`` (default ``<WORKDIR>/.venv``), through the stages it is built from."""
    by_name = {name: (base, lines) for name, base, lines in stages if name}
    base, lines = by_name[target] if target else stages[-1][1:]
    chain = [lines]
    while base in by_name:
        base, more = by_name[base]
        chain.insert(0, more)
    found, workdir, project = [], "/", None
    for line in (x for ls in chain for x in ls):
        if m := re.match(r"WORKDIR\s+(\S+)", line):
            workdir = m.group(1)
        if m := re.search(r"UV_PROJECT_ENVIRONMENT=(\S+)", line):
            project = m.group(1)
        if re.search(r"\buv sync\b", line):
            found.append(project or f"{workdir.rstrip('/')}/.venv")
        found += re.findall(r"\buv venv\b(?:\s+--\S+(?:\s+(?!/opt)\S+)?)*\s+(/\S+)", line)
    return found


def test_the_gpu_worker_runs_a_runner_its_image_builds_and_no_volume_hides_a_venv():
    """Issue 39: the GPU worker's PERFWATCH_RUNNER_PYTHON named /opt/tf-gpu, which the image never built, and the
    working tree mounted on /opt/perfwatch hid the image's own venv there. Every service's runner interpreter must
    be a venv its image's build target creates, and no volume may be mounted over a venv of its image."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    stages = _stages((ROOT / "Dockerfile").read_text())
    checked = 0
    for name, svc in compose["services"].items():
        build = svc.get("build")
        if build is None:
            continue  # a public image (postgres, redis, prometheus, grafana)
        target = build.get("target") if isinstance(build, dict) else None
        venvs = _venvs(stages, target)
        assert venvs, f"{name}: its image ({target or 'the last stage'}) builds no venv"
        runner = (svc.get("environment") or {}).get("PERFWATCH_RUNNER_PYTHON")
        if runner is not None:
            assert any(runner == f"{v}/bin/python" for v in venvs), f"{name}: {runner} is not built ({venvs})"
            checked += 1
        for volume in svc.get("volumes") or []:
            mount = volume.split(":")[1]
            hidden = [v for v in venvs if v == mount or v.startswith(mount.rstrip("/") + "/")]
            assert not hidden, f"{name}: the volume {volume} hides {hidden} of its image"
    assert checked >= 1  # the GPU worker's runner was checked


def test_the_gpu_runner_lock_is_what_its_requirements_resolve_to():
    """The GPU runner's lock (gpu-runner/requirements.txt, installed by the image's gpu target and make gpu-runner)
    is current: resolving gpu-runner/requirements.in again (registry metadata only, no wheel) gives it."""
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "gpu-runner-lock-check"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lock = (ROOT / "gpu-runner" / "requirements.txt").read_text()
    assert re.search(r"^tensorflow==2\.21\.", lock, re.M) and "--hash=sha256:" in lock
    assert re.search(r"^nvidia-cudnn-cu12==", lock, re.M) and "tensorflow-cpu" not in lock
