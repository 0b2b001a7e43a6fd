"""perfwatch's stage package. The folder listing is the architecture; rooms import downwards only.

::

    records.py  settings.py   foundation: the typed records between stages; settings from the env
    wire.py                   foundation: how numbers cross JSON (NaN, infinities), for every room
    matrix.py                 the YAML config and its benchmark matrix, expanded into Cases
    modelstore.py             the versioned model store (TF Serving's layout, any fsspec URI)
    runner/                   the only TensorFlow code; runs in the runner's interpreter
                              (``python -m tasks.runner SPEC.json``), and its typed protocol and driver
    analysis/                 pure functions over plain values: statistics, calibration, verdicts,
                              attribution, diagnosis, environment diffs (no database, no files)
    store/                    the SQL side: schema, engine and migrations, named queries, reads, writes
    stages/                   the seven stages, one module each, the compare stage's GX suite
                              (``expectations``) and the pipeline glue (Airflow and ``perfwatch run``)
    services/                 what is not a stage: publish, ingest, trend, alerts, the Airflow REST client
    cli/                      the ``perfwatch`` command line and its rendering

The dependency rule (``tests/unit/test_rooms.py`` enforces it on every module, lazy imports included):

==========  =========================================================
room        may import (besides itself)
==========  =========================================================
wire        nothing from tasks/ (stdlib only); every room below may import it
records     nothing from tasks/ but wire
settings    nothing from tasks/
matrix      records
modelstore  records
runner      nothing from tasks/ but wire (its venv may be a bare TF/GPU one)
analysis    records
store       records, settings
stages      records, settings, matrix, modelstore, analysis, store, runner
services    records, settings, matrix, modelstore, analysis, store, stages, runner (its protocol)
cli         everything; nothing in tasks/ imports it
==========  =========================================================

Nothing in ``tasks/`` imports Airflow; only ``runner`` imports TensorFlow or Keras. Outside:
``dags/`` may import ``stages``, ``services`` and ``store``; ``plugins/`` ``records``, ``store``, ``services``,
``cli`` and ``wire``.
"""
