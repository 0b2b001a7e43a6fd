"""Judge a run's output agreement against its case's bounds (issue 38, item 3). Pure functions.

The runner measures how far the outputs of a faster way to compute the model (mixed precision, XLA, a TFLite
conversion) are from the fp32 eager model's on the same inputs (``tasks.runner.agreement``: max absolute and
relative difference, top-1 agreement for classifiers). A case may bound them (``Case.min_top1_agreement``,
``Case.max_output_rel_diff``); :func:`judge_agreement` says which bound a run broke, or that a bound could not be
checked (a figure the run did not measure never passes silently). The compare stage makes a run that broke a bound
a ``regression`` on output agreement, whatever its step time (``tasks.stages.compare``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field


class AgreementCheck(BaseModel):
    """A run's output agreement against its case's bounds.

    Attributes:
        agreement: the run's record (``tasks.runner.agreement.agreement`` fields), None when not measured.
        bounds: the case's bounds that were set (``min_top1_agreement``, ``max_output_rel_diff``).
        broken: one text per bound the run broke (e.g. ``top-1 agreement 0.910 below the case's 0.990``); any
            makes the run a regression on output agreement.
        unchecked: one text per bound that could not be checked, with why (never a pass).
    """

    agreement: dict[str, Any] | None = None
    bounds: dict[str, float] = Field(default_factory=dict)
    broken: list[str] = Field(default_factory=list)
    unchecked: list[str] = Field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A bound was broken."""
        return bool(self.broken)

    def text(self) -> str:
        """``output agreement (mixed_float16, XLA against fp32, eager; 16 examples): <broken>; <unchecked>``."""
        a = self.agreement or {}
        what = (
            f" ({a['candidate']} against {a['reference']}; {a.get('examples')} examples)"
            if a.get("candidate") and a.get("reference")
            else ""
        )
        return f"output agreement{what}: " + "; ".join(self.broken + self.unchecked)


def judge_agreement(
    agreement: Mapping[str, Any] | None,
    *,
    min_top1: float | None,
    max_rel_diff: float | None,
    why_absent: str = "the run computes the model as saved (fp32, no XLA): nothing to compare",
) -> AgreementCheck | None:
    """The run's ``agreement`` against the bounds ``min_top1`` (least top-1 agreement, 0..1) and ``max_rel_diff``
    (largest relative output difference); None when neither bound is set. ``why_absent``: why there is no
    ``agreement`` record, said for each bound that then could not be checked."""
    bounds = {
        k: float(v)
        for k, v in (("min_top1_agreement", min_top1), ("max_output_rel_diff", max_rel_diff))
        if v is not None
    }
    if not bounds:
        return None
    out = AgreementCheck(agreement=dict(agreement) if agreement else None, bounds=bounds)
    if not agreement:
        out.unchecked = [f"{name} {v:g} not checked: {why_absent}" for name, v in bounds.items()]
        return out
    top1, rel = agreement.get("top1_agreement"), agreement.get("max_rel_diff")
    if min_top1 is not None:
        if top1 is None:
            out.unchecked.append(
                f"min_top1_agreement {min_top1:g} not checked: no classifier output (rank 2, 2+ classes)"
            )
        elif top1 < min_top1:
            out.broken.append(f"top-1 agreement {top1:.3f} below the case's {min_top1:g}")
    if max_rel_diff is not None:
        if rel is None:
            out.unchecked.append(f"max_output_rel_diff {max_rel_diff:g} not checked: no floating output to compare")
        elif rel > max_rel_diff:
            out.broken.append(f"relative output difference {rel:.3g} above the case's {max_rel_diff:g}")
    return out
