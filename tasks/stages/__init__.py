"""The seven stages of a DAG run, one module each, and the glue Airflow and ``perfwatch run`` share.

``pull`` → ``fingerprint`` → ``warmup`` → ``profiled_run`` → ``parse`` → ``compare`` → ``archive``;
``expectations`` is the Great Expectations side of ``compare``; ``pipeline`` wraps each stage for a
DAG task (XCom bundle in, bundle out, a failure recorded in the store) and runs all seven in-process.

Rule: stages may import ``tasks.records``, ``tasks.settings``, ``tasks.analysis``, ``tasks.store``
and ``tasks.runner`` (its spec and launcher: TF itself only ever runs in the runner's process);
never ``tasks.cli``, never Airflow.
"""
