"""Warm-up rule: when has step time become steady?

Rule (rolling coefficient of variation, the usual "steady-state detection by moving CV" of
benchmark harnesses, cf. Barrett et al., "Virtual Machine Warmup Blows Hot and Cold",
OOPSLA 2017, for why a fixed warm-up count is not enough): after discarding at least
``min_steps`` steps, step time is *steady* at the first window of ``window`` consecutive
step times whose coefficient of variation ``sd / mean`` (sample sd, ``ddof=1``) is below
``cv_max``. ``warmup_steps`` is the index where that window starts: the steps to run (and
throw away) before measuring. Give up after ``max_steps`` steps (``steady=False``; every step
seen counts as warm-up). All times are milliseconds.

Caveat: with step-to-step noise near or above ``cv_max`` (7-13% on a busy 2-core CPU) a
window can dip below ``cv_max`` by chance or never do so; ``steady=False`` and the reason
say which happened, and the comparison statistics (``tasks.analysis.stats``) do not rely on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

__all__ = ["SteadyDetector", "SteadyResult", "steady_state_index"]


class SteadyResult(BaseModel):
    """Outcome of the warm-up rule.

    Attributes:
        steady: a window met the rule before ``max_steps``.
        warmup_steps: steps to run before measuring (start of the steady window; every step
            seen when not steady).
        n_steps: step times examined.
        final_cv: CV of the deciding window (steady) or of the last full window (not steady);
            ``None`` when fewer than ``window`` steps were seen after ``min_steps``.
        reason: the figures behind the decision, in words.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    steady: bool
    warmup_steps: int
    n_steps: int
    final_cv: float | None
    reason: str


def _check_step(value: float, index: int, name: str = "step_times_ms") -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name}[{index}] = {value!r}: step times must be finite and > 0 ms")
    return v


class SteadyDetector:
    """Streaming form of the rule, fed one step time (ms) at a time inside the runner loop.

    Example::

        det = SteadyDetector(window=5, cv_max=0.05)
        while not det.add(run_one_step_ms()):
            pass
        res = det.result()

    Raises:
        ValueError: ``window < 2``, ``cv_max <= 0``, ``min_steps < 0`` or
            ``max_steps < min_steps + window`` (the rule could never be met); from ``add``,
            a NaN, infinite or non-positive step time (message names value and index).
    """

    def __init__(self, window: int = 5, cv_max: float = 0.05, min_steps: int = 3, max_steps: int = 100):
        if window < 2:
            raise ValueError(f"window = {window}: need at least 2 steps to compute a CV")
        if not cv_max > 0:
            raise ValueError(f"cv_max = {cv_max}: must be > 0")
        if min_steps < 0:
            raise ValueError(f"min_steps = {min_steps}: must be >= 0")
        if max_steps < min_steps + window:
            raise ValueError(
                f"max_steps = {max_steps} < min_steps + window = {min_steps + window}: "
                "the steady-state rule could never be met"
            )
        self.window, self.cv_max, self.min_steps, self.max_steps = window, cv_max, min_steps, max_steps
        self._times: list[float] = []
        self._cv: float | None = None
        self._steady_at: int | None = None

    @property
    def done(self) -> bool:
        """True once steady or ``max_steps`` step times were seen."""
        return self._steady_at is not None or len(self._times) >= self.max_steps

    def add(self, step_ms: float) -> bool:
        """Record one step time (ms); return True when warm-up is over (steady or max reached).

        Calls after that are ignored and return True.
        """
        if self.done:
            return True
        self._times.append(_check_step(step_ms, len(self._times)))
        n = len(self._times)
        if n >= self.min_steps + self.window:
            w = np.asarray(self._times[-self.window :])
            self._cv = float(w.std(ddof=1) / w.mean())
            if self._cv < self.cv_max:
                self._steady_at = n - self.window
        return self.done

    def result(self) -> SteadyResult:
        """The decision so far as a :class:`SteadyResult`."""
        n, cv = len(self._times), self._cv
        rule = f"CV of {self.window} consecutive steps < {self.cv_max:.3f}"
        if self._steady_at is not None:
            return SteadyResult(
                steady=True,
                warmup_steps=self._steady_at,
                n_steps=n,
                final_cv=cv,
                reason=f"steady after {self._steady_at} warm-up steps: {rule} "
                f"(CV {cv:.3f} over steps {self._steady_at}..{n - 1})",
            )
        seen = "no full window yet" if cv is None else f"last window CV {cv:.3f}"
        why = f"not steady within max_steps={self.max_steps}" if self.done else f"undecided after {n} steps"
        return SteadyResult(
            steady=False,
            warmup_steps=n,
            n_steps=n,
            final_cv=cv,
            reason=f"{why}: rule {rule} not met ({seen}); all {n} steps count as warm-up",
        )


def steady_state_index(
    step_times_ms: Sequence[float], *, window: int = 5, cv_max: float = 0.05, min_steps: int = 3, max_steps: int = 100
) -> SteadyResult:
    """Apply the warm-up rule to a recorded sequence of step times.

    Args:
        step_times_ms: shape (n,), per-step wall time in ms, in execution order (the cold first
            step included or not, as the caller measured). Steps after ``max_steps`` are ignored.
        window, cv_max, min_steps, max_steps: the rule (see module docstring).

    Returns:
        SteadyResult; ``steady=False`` with ``warmup_steps = n`` when the rule was never met
        (also when ``n < min_steps + window``).

    Raises:
        ValueError: a step time is NaN, infinite or <= 0 (message names value and index), or
            the rule's parameters are invalid (see :class:`SteadyDetector`).
    """
    det = SteadyDetector(window=window, cv_max=cv_max, min_steps=min_steps, max_steps=max_steps)
    for i, v in enumerate(step_times_ms):
        _check_step(v, i)
        if det.add(v):
            break
    return det.result()
