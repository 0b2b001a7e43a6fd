"""Do a run's outputs agree with the model's fp32 eager outputs? (issue 38, item 3; TensorFlow only here.)

A case that measures a faster way to compute the model (mixed precision, XLA, a TFLite conversion) is only
faster if it still computes the model. The runner compares, on the same input batches, the outputs the measured
way gives with a reference:

* **mixed precision / XLA** (:func:`outputs_agreement`, the profiled run): the reference is the model as saved,
  float32, called eagerly (``model(x, training=False)``); the candidate is the model as the steps computed it
  (rebuilt in the case's dtype policy, ``tasks.runner.execution.with_precision``), called the way the steps call
  it (``tf.function(jit_compile=True)`` under XLA), with the weights the steps left (a train case's SGD updates
  are copied into the reference first). It runs after the measured steps and the profiled window, and after the
  process's peak memory was read, so neither the timings nor the peaks include it. The reference is loaded from
  the model file then. Under XLA the forward pass is compiled once more for it (a train case's step is another
  computation), and with the case's persistent XLA cache that executable joins the cache.
* **TFLite** (``tasks.runner.tflite``): the TF model against the interpreter.

Both give :func:`agreement`: the largest absolute difference of any floating output element (output units),
the largest relative one (per output, its largest absolute difference over the reference's largest magnitude),
and for classifiers (a rank-2 output with more than one class) the top-1 agreement (share of examples whose
argmax matches, 0..1), over every compared example. A case's bounds on them (``Case.min_top1_agreement``,
``Case.max_output_rel_diff``) are judged by the compare stage (``tasks.analysis.agreement``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tasks.runner.spec import RunnerError

#: input batches the mixed-precision / XLA agreement compares (the first of the case's dataset)
AGREEMENT_BATCHES = 2


def agreement(ref_outputs: list[list[Any]], outputs: list[list[Any]], names: list[str] | None = None) -> dict[str, Any]:
    """Reference vs candidate on the same batches: per batch, the floating outputs of each, already paired (the
    same position is the same output); ``names``: the outputs' names, in that order.

    Returns ``{"max_abs_diff"`` (largest absolute difference of any element, output units; None when no
    output is floating)``, "max_rel_diff"`` (per output its largest absolute difference over the reference's
    largest magnitude, the largest of these; None when no output is floating or every reference is 0)``,
    "top1_agreement"`` (share of examples whose argmax over the classes matches, over the rank-2 outputs with
    more than one class; None when none)``, "examples"}``, and with ``names`` ``"outputs"``: per output
    ``{"name", "max_abs_diff", "max_rel_diff", "top1_agreement"}``.

    Raises:
        RunnerError: the two give different numbers or shapes of outputs.
    """
    import numpy as np

    diffs, same, total, examples = [], 0, 0, 0
    per: dict[int, list[float]] = {}  # output position -> [max diff, same, total, max |reference|]
    for ref, got in zip(ref_outputs, outputs, strict=True):
        if len(ref) != len(got):
            raise RunnerError(f"the reference gives {len(ref)} floating outputs, the candidate {len(got)}")
        for i, (a, b) in enumerate(zip(ref, got, strict=True)):
            a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            if a.shape != b.shape:
                raise RunnerError(f"reference output shape {a.shape} differs from the candidate's {b.shape}")
            diff = float(np.max(np.abs(a - b))) if a.size else 0.0
            diffs.append(diff)
            o = per.setdefault(i, [0.0, 0, 0, 0.0])
            o[0] = max(o[0], diff)
            o[3] = max(o[3], float(np.max(np.abs(a))) if a.size else 0.0)
            if a.ndim == 2 and a.shape[1] > 1:
                hit = int(np.sum(np.argmax(a, axis=1) == np.argmax(b, axis=1)))
                same, total = same + hit, total + a.shape[0]
                o[1], o[2] = o[1] + hit, o[2] + a.shape[0]
        examples += int(next(iter(ref)).shape[0]) if ref else 0
    rel = {i: o[0] / o[3] for i, o in per.items() if o[3] > 0}
    out: dict[str, Any] = {
        "max_abs_diff": max(diffs) if diffs else None,
        "max_rel_diff": max(rel.values()) if rel else None,
        "top1_agreement": same / total if total else None,
        "examples": examples,
    }
    if names is not None:
        out["outputs"] = [
            {
                "name": n,
                "max_abs_diff": per[i][0],
                "max_rel_diff": rel.get(i),
                "top1_agreement": per[i][1] / per[i][2] if per[i][2] else None,
            }
            for i, n in enumerate(names)
            if i in per
        ]
    return out


def outputs_agreement(
    reference: Callable[[Any], Any],
    candidate: Callable[[Any], Any],
    batches: Sequence[Any],
    *,
    reference_label: str,
    candidate_label: str,
) -> dict[str, Any]:
    """:func:`agreement` of ``candidate(x)`` with ``reference(x)`` for each ``x`` of ``batches`` (the model's
    inputs, packed as it takes them), their outputs flattened in ``tf.nest`` order and the floating ones
    compared, named by position (``output_0``, ...). The record adds ``reference`` and ``candidate``: what each
    side is (e.g. ``fp32, eager`` and ``mixed_bfloat16, XLA``).

    Raises:
        RunnerError: the outputs differ in number or shape, or a side failed (names it and TF's error).
    """
    import numpy as np
    import tensorflow as tf

    refs, got = [], []
    for x in batches:
        pair = []
        for side, label, fn in (("reference", reference_label, reference), ("candidate", candidate_label, candidate)):
            try:
                pair.append([np.asarray(t) for t in tf.nest.flatten(fn(x))])
            except Exception as e:  # noqa: BLE001 - re-raised naming the side
                raise RunnerError(f"the agreement check's {side} ({label}) failed: {type(e).__name__}: {e}") from e
        floating = [i for i, a in enumerate(pair[0]) if np.issubdtype(a.dtype, np.floating)]
        refs.append([pair[0][i] for i in floating])
        got.append([pair[1][i] for i in floating if i < len(pair[1])])
    names = [f"output_{i}" for i in range(len(refs[0]))] if refs else []
    return {"reference": reference_label, "candidate": candidate_label, **agreement(refs, got, names)}
