"""The file Airflow's plugins manager executes for perfwatch: it registers :class:`perfwatch.PerfwatchPlugin`,
found in this module's namespace. The plugin itself is the package ``perfwatch/`` beside this file, which
``.airflowignore`` keeps out of Airflow's file-by-file scan (the package docstring says why)."""

from perfwatch import PerfwatchPlugin

__all__ = ["PerfwatchPlugin"]
