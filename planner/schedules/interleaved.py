"""Interleaved 1F1B (Narayanan et al. 2021, sec 2.2): each rank runs V chunks of the model, a
micro-batch passing every rank V times; the bubble shrinks V-fold for more activations held
and V times the point-to-point sends."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Order, Schedule
from .one_f_one_b import one_f_one_b_in_flight, one_f_one_b_order


def microbatch_group(pp: int, num_microbatches: int) -> int:
    """N, the contiguous micro-batches each chunk runs at a time (Megatron-core's
    microbatch_group_size_per_vp_stage, --microbatch-group-size-per-virtual-pipeline-stage): its default
    pp where pp divides the M micro-batches (or M < pp), else the least N in (pp, M] that megatron-core
    0.16.1's schedules.py accepts, M % N = 0 or M % N >= pp ("otherwise, it introduces dependency
    bubbles"). A larger N only holds more (interleaved_warmup), so the least is the plan's."""
    m = num_microbatches
    if m < pp or m % pp == 0:
        return pp
    return next(n for n in range(pp + 1, m + 1) if m % n == 0 or m % n >= pp)


def interleaved_warmup(pipeline_rank: int, pp: int, virtual_stages: int, num_microbatches: int) -> int:
    """Chunk forwards a rank runs before its first backward (Megatron-core's schedules.py
    get_pp_rank_microbatches: (pp - rank - 1) * 2 + (v - 1) * N, with N microbatch_group)."""
    return (pp - pipeline_rank - 1) * 2 + (virtual_stages - 1) * microbatch_group(pp, num_microbatches)


def interleaved_order(pipeline_rank: int, pp: int, virtual_stages: int,
                      num_microbatches: int) -> list[tuple[str, int, int]]:
    """The order one rank runs its chunk passes in, as (op, chunk, micro-batch): micro-batches
    go in groups of N (microbatch_group; the last group may be shorter); in a group, forwards run
    chunk 0..v-1 and backwards chunk v-1..0; after the warm-up, one forward then one backward
    (Megatron-LM's forward_backward_pipelining_with_interleaving; planner run executes it)."""
    v, n = virtual_stages, num_microbatches
    size = microbatch_group(pp, n)
    forwards: list[tuple[str, int, int]] = []
    backwards: list[tuple[str, int, int]] = []
    for start in range(0, n, size):
        group = range(start, min(start + size, n))
        forwards += [("F", c, j) for c in range(v) for j in group]
        backwards += [("B", c, j) for c in reversed(range(v)) for j in group]
    total = n * v
    warmup = min(interleaved_warmup(pipeline_rank, pp, v, n), total)
    order = forwards[:warmup]
    for i in range(total - warmup):
        order += [forwards[warmup + i], backwards[i]]
    return order + backwards[total - warmup:]


@dataclass(frozen=True)
class Interleaved(Schedule):
    def chunks_per_rank(self, virtual_stages: int) -> int:
        return virtual_stages

    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        """Megatron-LM's warm-up (schedules.py): (pp - rank - 1) * 2 + (v - 1) * N chunk
        forwards before the first backward (interleaved_warmup), each chunk 1/v of the rank's layers;
        one chunk is 1F1B."""
        v, m = virtual_stages, num_microbatches
        if v == 1:
            return one_f_one_b_in_flight(pipeline_rank, pp, m)
        return min(m * v, interleaved_warmup(pipeline_rank, pp, v, m) + 1) / v

    def depth_dependent(self) -> bool:
        return True

    def latency_s(self, rank_s: float, slowest_chunk_s: float, virtual_stages: int, wgrad_s: float = 0.0,
                  forward_s: float = 0.0) -> float:
        return slowest_chunk_s if virtual_stages > 1 else rank_s

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        # drawn as 1F1B over the rank's chunks together (drawn_as): one F and one B per micro-batch
        return one_f_one_b_order(pipeline_rank, pp, num_microbatches)

    def title(self, virtual_stages: int) -> str:
        return f"interleaved (V={virtual_stages})"


SCHEDULE = Interleaved("interleaved", searched=True, min_virtual_stages=2, max_virtual_stages=None, min_pp=2,
                       drawn_as="1F1B over each rank's chunks together")
