# Airflow worker image for perfwatch: the locked environment (tensorflow-cpu by default).
FROM python:3.11-slim
RUN pip install --no-cache-dir uv
WORKDIR /opt/perfwatch
COPY pyproject.toml uv.lock README.md ./
COPY tasks ./tasks
RUN uv sync --frozen --no-dev --compile-bytecode && ln -s /opt/perfwatch/.venv/bin/* /usr/local/bin/ 2>/dev/null || true
ENV PATH=/opt/perfwatch/.venv/bin:$PATH
