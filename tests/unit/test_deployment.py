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
