"""What each step was fed and whether it compiled (``tasks.runner.measure.FedLog``), over plain arrays: the
shapes a step function returns (``[replicas, rank]`` per input). No TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.runner.measure import FedLog
from tasks.runner.protocol import Fed
from tasks.runner.spec import RunnerError


def _shape(*dims: int, replicas: int = 1) -> np.ndarray:
    return np.array([dims] * replicas)


def test_a_partial_batch_is_refused_unless_the_case_allows_it():
    """Issue 26: only the first batch's size was checked, so a partial last batch passed."""
    log = FedLog(8, xla=False, allow_partial=False, source="input_fn 'p:f'")
    log.add({"x": _shape(8, 5)}, retraced=False)
    with pytest.raises(RunnerError, match=r"step 1 was fed a batch of 6 examples .*batch_size is 8.*allow_partial"):
        log.add({"x": _shape(6, 5)}, retraced=False)
    with pytest.raises(RunnerError, match=r"step 0 was fed a batch of 9 examples .*more than the case's batch_size"):
        FedLog(8, xla=False, allow_partial=True, source="s").add({"x": _shape(9, 5)}, retraced=False)
    allowed = FedLog(8, xla=False, allow_partial=True, source="s")
    for n in (8, 8, 6):
        allowed.add({"x": _shape(n, 5)}, retraced=False)
    rec = Fed.model_validate(allowed.take())  # the protocol's record
    assert rec.steps == 3 and rec.examples == 22
    assert [(d.examples, d.steps, d.first_step, d.shapes) for d in rec.distinct] == [
        (8, 2, 0, {"x": [8, 5]}),
        (6, 1, 2, {"x": [6, 5]}),
    ]


def test_an_xla_step_compiles_on_every_shape_it_has_not_run_and_a_retrace_always_counts():
    xla = FedLog(4, xla=True, allow_partial=False, source="s")
    xla.add({"x": _shape(4, 3)}, retraced=False)  # the cold step
    assert xla.take()["compiled_steps"] == [0]
    for length in (3, 4, 3, 5, 4):
        xla.add({"x": _shape(4, length)}, retraced=False)
    xla.add({"x": _shape(4, 5)}, retraced=True)
    rec = xla.take()
    assert rec["compiled_steps"] == [1, 3, 5] and rec["retraced_steps"] == [5]
    assert [(d["shapes"]["x"], d["steps"]) for d in rec["distinct"]] == [([4, 3], 2), ([4, 4], 2), ([4, 5], 2)]
    graph = FedLog(4, xla=False, allow_partial=False, source="s")  # no XLA: a new shape runs the same graph
    for length in (3, 4, 5):
        graph.add({"x": _shape(4, length)}, retraced=False)
    assert graph.take()["compiled_steps"] == []


def test_replicas_parts_add_up_to_the_global_batch_and_inputs_must_agree():
    log = FedLog(8, xla=False, allow_partial=False, source="s")
    log.add({"a": _shape(4, 7, replicas=2), "b": _shape(4, replicas=2)}, retraced=False)
    assert log.take()["distinct"][0]["shapes"] == {"a": [8, 7], "b": [8]}
    with pytest.raises(RunnerError, match="batch dimensions differ"):
        log.add({"a": _shape(8, 7), "b": _shape(6)}, retraced=False)
