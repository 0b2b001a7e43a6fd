"""The finding: one named condition about a run, with the figure that triggered it and its threshold.

Its own light module (pydantic only) so that what judges the steps (``tasks.analysis.soundness``), the hardware
(``tasks.analysis.hardware``) and the profile (``tasks.analysis.diagnose``) share one form without the stages that
use the first two loading the profile's pandas and xprof tables.
"""

from __future__ import annotations

from pydantic import BaseModel

INFO, WARNING = "info", "warning"


class Finding(BaseModel):
    """One diagnosis: ``figure`` is the figure that triggered it (``value`` in its unit), ``threshold`` the
    module constant it was compared with (None for yes/no conditions); ``severity`` :data:`INFO` or
    :data:`WARNING`."""

    code: str
    severity: str  # "info" | "warning"
    message: str
    figure: str
    value: float | None = None
    threshold: float | None = None
