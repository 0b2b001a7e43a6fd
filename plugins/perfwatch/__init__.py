"""perfwatch's Airflow plugin: the history pages in the Airflow UI ("perfwatch" in the nav bar), the
store's Prometheus metrics and the Alertmanager webhook that turns a macro alert into a profiling run,
one FastAPI app that Airflow's API server mounts at ``/perfwatch``. The store is the one
``PERFWATCH_DATABASE_URL`` names.

::

    urls.py     where the plugin sits in Airflow's URL space (mount point, login path, link roots)
    auth.py     who may use which route: Airflow's login for the pages, bearer tokens for the services
    pages.py    the history pages and the run archives' files (HTML, PNG plots)
    charts.py   the pages' interactive charts (plotly; plotly.js served by assets.py, no CDN)
    assets.py   /perfwatch/assets/: the style sheet, the pages' script and plotly.js (static/)
    metrics.py  /perfwatch/metrics: the store in the Prometheus text format
    webhook.py  /perfwatch/alertmanager: Alertmanager's webhook, which triggers perfwatch_profile DAG runs
    app.py      the app of those routes, the /perfwatch -> /perfwatch/ redirect, standalone_app()
    hooks.py    the DAGs' Airflow connections: the store's (PERFWATCH_DB_CONN_ID) and the alert webhook's
    notifier.py PerfwatchNotifier, the DAGs' alerts (a BaseNotifier); the DAGs import these two as
                ``perfwatch.hooks`` and ``perfwatch.notifier``, the plugins folder being on ``sys.path``

How Airflow loads it. Airflow 3.3's plugins manager (``_load_plugins_from_plugin_directory``) does not
import packages: it executes every ``.py`` file under the plugins folder on its own, by path, as a top-level
module named after the file's stem (``__init__``, ``pages``, ...), where relative imports fail; and it
registers every ``AirflowPlugin`` subclass it finds in such a module's namespace. It also puts the plugins
folder on ``sys.path``. So ``plugins/.airflowignore`` (its pattern ``perfwatch/`` reads the same as a glob
and as a regexp) keeps this package's folder out of that scan, and ``plugins/perfwatch_plugin.py``,
the one file Airflow executes, imports :class:`PerfwatchPlugin` from here as the package ``perfwatch``:
each module of the package is imported once, as ``perfwatch.<module>``, and the plugin is registered once.
Outside Airflow the package is ``plugins.perfwatch`` from the repository root (the tests;
``uvicorn --factory plugins.perfwatch.app:standalone_app``); the modules import each other relatively,
so either name works.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .app import SlashRedirect, app
from .urls import UI_ROUTE, URL_PREFIX


class PerfwatchPlugin(AirflowPlugin):
    """Registers the history app (pages, metrics, Alertmanager webhook) at /perfwatch, the redirect of
    /perfwatch to /perfwatch/, and a "perfwatch" entry in the nav bar."""

    name = "perfwatch"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "perfwatch history"}]
    fastapi_root_middlewares = [
        {"middleware": SlashRedirect, "args": [], "kwargs": {}, "name": "perfwatch: /perfwatch -> /perfwatch/"}
    ]
    # Airflow's UI frames ``href`` (relative to Airflow's base URL, its index page's <base href>) at
    # /plugin/<url_route>, and keeps its own URL in step with the framed page (/plugin/perfwatch/perfwatch/runs/7)
    external_views = [
        {
            "name": "perfwatch",
            "href": f"{URL_PREFIX.lstrip('/')}/",
            "destination": "nav",
            "url_route": UI_ROUTE,
            "icon": f"{URL_PREFIX.lstrip('/')}/assets/icon.svg",
        }
    ]
