"""A negative fixture for ``make check``: record constructions that mypy must reject.

mypy reads the records' pydantic fields as the ``__init__`` types only with the pydantic plugin's
``init_typed`` (``[tool.pydantic-mypy]`` in pyproject.toml); without it every field takes ``Any`` and mypy says
"Success" for a step time given as a string, and ``init_forbid_extra`` makes an unknown field an error. ``make
check`` runs mypy on this file and fails unless mypy reports each of the three errors below (a string for a float,
a string for an int, an unknown field), so losing the check fails the build. Never imported or run.
"""

from tasks.records import Case, WarmupRecord

WarmupRecord(warmup_steps=5, steady=True, final_cv=0.01, cold_step_ms="fast", step_times_ms=[1.0], wall_s=1.0)
Case(model="demo", batch_size="sixteen")
Case(model="demo", no_such_field=1)
