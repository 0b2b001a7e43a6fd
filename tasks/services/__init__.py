"""Services around the pipeline that are not stages of it.

``publish`` (a model version into the store, and the release Asset event), ``ingest`` (external profiles into
the historical store), ``trend`` (change points and the creep guard over nightly series), ``alerts`` (what
an alert says) and ``airflow_api`` (the Airflow REST client the CLI uses). They may use the stages, never
the other way round.
"""
