"""ZB-V (Qi et al. 2023, Zero Bubble Pipeline Parallelism, sec 6; torch.distributed.pipelining
ScheduleZBVZeroBubble, torchtitan's "ZBVZeroBubble"): two chunks per rank placed as a V, rank
k holding chunks k and 2p - 1 - k, so a micro-batch turns around on the last rank without a
send; the backward is split into B and W as in ZB-H1, and the W passes fill the fill and
drain. The paper's bubble is (p - 1)(T_F + T_B - 2 T_W) in units of one chunk (zero when
T_F = T_B = T_W), floored here at the last rank's idle start, (p - 1) chunk forwards, with about 1F1B's peak activation memory, p micro-batches, on every rank
(chunk_in_flight).

Runtimes: torchtitan (torch ScheduleZBVZeroBubble, exactly 2 stages per rank); not Megatron-LM
(1F1B and interleaved only) nor DeepSpeed (its own 1F1B)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Order, Schedule
from .zero_bubble import zb_h1_order


def v_shape_rank(chunk_index: int, pp: int) -> int:
    """The rank of chunk `chunk_index` of 2p: down the ranks, then back up (the V)."""
    return chunk_index if chunk_index < pp else 2 * pp - 1 - chunk_index


@dataclass(frozen=True)
class ZeroBubbleV(Schedule):
    def chunks_per_rank(self, virtual_stages: int) -> int:
        return virtual_stages

    def chunk_rank(self, chunk_index: int, pp: int, virtual_stages: int) -> int:
        return v_shape_rank(chunk_index, pp)

    def chunk_in_flight(self, pipeline_rank: int, pp: int, virtual_stages: int,
                        num_microbatches: int) -> tuple[float, ...]:
        """1F1B's rule over the V's 2p chunk stages (Narayanan et al. 2021, sec 2.2.1: stage c
        holds 2p - c): rank k's first chunk min(m, 2p - k), its second min(m, k + 1); with
        equal chunks p + 1/2 micro-batches of the whole rank on every rank, a bound just above
        the p M_B of Qi et al. 2023, sec 6, that takes the deferred W inputs in (the head's chunk
        on rank 0 holds one)."""
        k, m = pipeline_rank, num_microbatches
        return float(min(m, 2 * pp - k)), float(min(m, k + 1))

    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        """The chunks' counts (chunk_in_flight) for equal chunks."""
        return sum(self.chunk_in_flight(pipeline_rank, pp, virtual_stages, num_microbatches)) / 2

    def latency_s(self, rank_s: float, slowest_chunk_s: float, virtual_stages: int, wgrad_s: float = 0.0,
                  forward_s: float = 0.0) -> float:
        # (T_F + T_B - 2 T_W) per rank of chunk passes, each half the rank's (Qi et al. 2023, sec 6),
        # with rank_s = T_F + T_B + T_W; never below a chunk forward T_F / 2: every pass of the
        # last rank waits for a micro-batch's first chunk to cross the ranks before it (its idle
        # start, (p - 1) T_F / 2, bounds any V schedule)
        return max(forward_s, rank_s - 3 * wgrad_s) / 2

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        # drawn as ZB-H1 over the rank's two chunks together (drawn_as)
        return zb_h1_order(pipeline_rank, pp, num_microbatches)

    def title(self, virtual_stages: int) -> str:
        return "ZB-V"


SCHEDULE = ZeroBubbleV(
    "zbv", searched=False, uniform_candidate=True, min_virtual_stages=2, max_virtual_stages=2, min_pp=2,
    split_backward=True,
    runs_in_planner_run=False,
    drawn_as="ZB-H1 over each rank's two chunks together")
