"""The seven stages of a DAG run, one module each, and the glue Airflow and ``perfwatch run`` share.

``pull`` → ``fingerprint`` → ``warmup`` → ``profiled_run`` → ``parse`` → ``compare`` → ``archive``;
``expectations`` is the Great Expectations side of ``compare``; ``registry`` names the seven (id, task id,
record); ``pipeline`` runs each on a case's ``RunState`` for a DAG task (its XCom dict in, dict out, a failure
recorded in the store) and all seven in-process; ``params`` gives the DAG's Params from the Case fields.

Rule: stages may import ``tasks.records``, ``tasks.settings``, ``tasks.analysis``, ``tasks.store``
and ``tasks.runner`` (its spec and launcher: TF itself only ever runs in the runner's process);
never ``tasks.cli``, never Airflow.
"""
