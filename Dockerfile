# Airflow worker image for perfwatch: the locked environment (tensorflow-cpu), in /opt/venv, outside
# /opt/perfwatch, which docker-compose.yml mounts the working tree over.
FROM python:3.11-slim AS base
RUN pip install --no-cache-dir uv==0.13.9
WORKDIR /opt/perfwatch
ENV UV_PROJECT_ENVIRONMENT=/opt/venv PATH=/opt/venv/bin:$PATH
COPY pyproject.toml uv.lock README.md ./
COPY tasks ./tasks
RUN uv sync --frozen --no-dev --compile-bytecode

# The GPU worker (docker-compose.yml's airflow-worker-gpu): the same image plus the runner's environment,
# TensorFlow's CUDA build from the committed lock (docs/gpu.md), at the PERFWATCH_RUNNER_PYTHON the compose
# file gives that worker. The driver comes from the host (the NVIDIA container toolkit).
FROM base AS gpu
COPY gpu-runner/requirements.txt /opt/gpu-runner/requirements.txt
RUN uv venv --python /usr/local/bin/python3.11 /opt/tf-gpu \
    && uv pip install --compile-bytecode --require-hashes --python /opt/tf-gpu/bin/python -r /opt/gpu-runner/requirements.txt

# The default target: every other service.
FROM base
