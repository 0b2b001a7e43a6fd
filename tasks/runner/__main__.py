"""``python -m tasks.runner SPEC.json``: one measurement in this fresh interpreter (see ``process``)."""

from tasks.runner.process import main

raise SystemExit(main())
