"""The command line (``perfwatch``, typer + rich) and its rendering.

``main`` holds the app and the run commands; ``history``, ``compare``, ``env``, ``baseline`` one group
of commands each; ``render`` the table/csv/json/markdown output; ``history.plot_history`` the plots.

Rule: the command line may import every room; nothing in ``tasks/`` imports it (the Airflow UI
plugin, outside ``tasks/``, reuses its plot).
"""

#: ``tasks.records.DEFAULT_MEASURED_STEPS`` written out: option defaults are read when ``perfwatch --help``
#: starts, and importing ``tasks.records`` (pydantic building the records) would double that start-up
#: (``tests/unit/cli/test_cli_startup.py`` checks the two agree).
DEFAULT_MEASURED_STEPS = 320
#: ``tasks.records.COLD_STEP_DEFAULT_TOLERANCE`` and ``MEMORY_DEFAULT_TOLERANCE`` written out for the options' help,
#: for the same reason (the same test checks them)
COLD_STEP_DEFAULT_TOLERANCE = 0.5
MEMORY_DEFAULT_TOLERANCE = 0.25
