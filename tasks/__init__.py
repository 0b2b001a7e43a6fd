"""perfwatch's stage package. The folder listing is the architecture; rooms import downwards only.

::

    records.py  settings.py   foundation: the typed records between stages; settings from the env
    runner/                   the only TensorFlow code; runs in the runner's interpreter
                              (``python -m tasks.runner SPEC.json``, ``python -m tasks.runner.probe``)
    analysis/                 pure functions over plain values: statistics, calibration, verdicts,
                              attribution, diagnosis, environment diffs (no database, no files)
    store/                    the SQL side: schema, engine and migrations, named queries, reads, writes
    stages/                   the seven stages, one module each, and the pipeline glue (Airflow and
                              ``perfwatch run`` share it)
    cli/                      the ``perfwatch`` command line and its rendering

The dependency rule (``tests/test_rooms.py`` enforces it on every module, lazy imports included):

==========  =========================================================
room        may import (besides itself)
==========  =========================================================
records     nothing from tasks/
settings    nothing from tasks/
runner      nothing from tasks/ (its venv may be a bare TF/GPU one)
analysis    records
store       records, settings, analysis
stages      records, settings, analysis, store, runner
cli         everything; nothing in tasks/ imports it
==========  =========================================================

Nothing in ``tasks/`` imports Airflow; only ``runner`` imports TensorFlow or Keras. Outside:
``dags/`` may import ``stages`` and ``store``; ``plugins/`` ``store`` and ``cli``.
"""
