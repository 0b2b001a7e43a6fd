"""A runner that replays recorded ABBA pairs in rounds, in this process: the paired gate's stop rule
(``tasks.stages.profiled_run.paired_run``) and its verdict run on pairs a real runner measured (``bench/data``),
with the host load of each round set by the test.

:class:`ReplayPairs` answers a paired spec as the real runner's paired mode does: rounds of ``spec.round_pairs``
pairs, a ``RoundEvent`` for each (``on_round`` says go on or stop), then the ``PairedResult`` of the pairs
measured; the result's ``host_load`` (over all pairs, as the runner's phase ``HostLoad``) is each round's load
weighted by its wall time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tasks.runner import RunnerProcess
from tasks.runner.protocol import BlockPair, InputFeed, PairedResult, RoundEvent, RoundSummary

#: the recorded processes of ``bench/busy.py`` (2-core dev VM; ``bench/data/busy_samples.json``'s ``meta``)
BUSY_SAMPLES = Path(__file__).resolve().parents[2] / "bench" / "data" / "busy_samples.json"


def recorded_process(variant: str, level: str, rep: int = 0) -> dict[str, Any]:
    """One recorded paired process of ``bench/data/busy_samples.json`` (``a_ms``, ``b_ms``, ``a_cpu_ms``,
    ``b_cpu_ms``: one step per block, ms; ``order``; ``host_load`` over its pairs), e.g. ``("h3000", "tf")``: a
    candidate x1.22 slower measured beside two TensorFlow training jobs."""
    data = json.loads(BUSY_SAMPLES.read_text())
    (p,) = [p for p in data["paired"] if (p["variant"], p["level"], p["rep"]) == (variant, level, rep)]
    return p


def blocks_of(p: Mapping[str, Any]) -> list[BlockPair]:
    """The recorded process's pairs as the runner's block pairs (one step per version and block)."""
    return [
        BlockPair(pair=i, order=o, a_ms=[a], b_ms=[b], a_cpu_ms=[ac], b_cpu_ms=[bc])
        for i, (o, a, b, ac, bc) in enumerate(
            zip(p["order"], p["a_ms"], p["b_ms"], p["a_cpu_ms"], p["b_cpu_ms"], strict=True)
        )
    ]


def weighted_load(loads: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a host load over all of ``loads``' windows reads: the shares weighted by each window's wall time."""
    wall = sum(x["wall_s"] for x in loads)
    share = {k: sum(x[k] * x["wall_s"] for x in loads) / wall for k in ("other_cpu_share", "steal_share")}
    return {**loads[0], **share, "wall_s": wall, "load1_end": loads[-1]["load1_end"]}


class ReplayPairs(RunnerProcess):
    """Replays ``blocks`` to a paired gate in rounds; ``loads[i]`` is round i's host load (the last one repeats)."""

    def __init__(self, blocks: Sequence[BlockPair], loads: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(["replay"])
        self.blocks, self.loads = list(blocks), [dict(x) for x in loads]

    def run(self, spec, kind, timeout_s, *, limit_note=None, on_round=None):  # type: ignore[override]
        assert kind is PairedResult and spec.mode == "paired" and on_round is not None and spec.round_pairs
        Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
        done: list[BlockPair] = []
        rounds: list[RoundSummary] = []
        stopped_by = "budget"
        while len(done) < spec.blocks:
            first = len(done)
            done += self.blocks[first : min(spec.blocks, first + spec.round_pairs)]
            load = self.loads[min(len(rounds), len(self.loads) - 1)]
            info = RoundSummary(
                round=len(rounds),
                pairs=len(done),
                host_load=load,
                wall_s=float(len(done)),
                final=len(done) >= spec.blocks,
            )
            rounds.append(info)
            go_on = on_round(RoundEvent(**info.model_dump(), blocks=done[first:]))
            if info.final:
                break
            if not go_on:
                stopped_by = "parent"
                break
        feed = {"input": InputFeed(shape=[spec.batch_size, 32, 32, 3], dtype="float32", min=None, max=None)}
        return PairedResult(
            case_mode=spec.case_mode,
            inputs=feed,
            input_source="synthetic",
            safe_mode=spec.safe_mode,
            signature=spec.signature,
            batch_size=spec.batch_size,
            seed=spec.seed,
            deterministic=spec.deterministic,
            cold_step_ms=1.0,
            peak_rss_bytes=1,
            peak_device_bytes=None,
            a_inputs=feed,
            baseline_model_path=spec.baseline_model_path,
            candidate_model_path=spec.model_path,
            a_cold_step_ms=1.0,
            b_cold_step_ms=1.0,
            first_built="A",
            a_warmup_step_times_ms=[1.0],
            b_warmup_step_times_ms=[1.0],
            block_steps=spec.block_steps,
            blocks=done,
            max_blocks=spec.blocks,
            round_pairs=spec.round_pairs,
            rounds=rounds,
            stopped_by=stopped_by,
            host_load=weighted_load([r.host_load for r in rounds]),
            pairs_wall_s=float(len(done)),
            timed_steps=2 * len(done) * spec.block_steps,
            wall_s=float(len(done)),
        )
