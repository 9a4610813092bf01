"""ZB-H1 (Qi et al. 2023, Zero Bubble Pipeline Parallelism, sec 3.1): 1F1B with the backward
split into B (input gradient, on the critical path) and W (weight gradient, free to wait).
Rank k defers its W passes by k micro-batches so that they fill the drain; the bubble
shrinks from (p - 1)(T_F + T_B + T_W) to (p - 1)(T_F + T_B - T_W), a third of 1F1B's when
T_F = T_B = T_W, and the peak stays 1F1B's p micro-batches (rank 0): rank k holds p - k
micro-batches whole and the weight-GEMM inputs of k more.

Searched (planner.search.pricing.deferred) where the runtime runs it: `--runtime any` only.

Runtimes: none upstream. Megatron-LM runs 1F1B and interleaved only (the ZB-H1 code is the
authors' fork, sail-sg/zero-bubble-pipeline-parallelism); DeepSpeed its own 1F1B
(TrainSchedule); torchtitan's zero-bubble classes (InterleavedZeroBubble, ZBVZeroBubble) are
multi-stage schedules that need at least 2 stages per rank."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Order, Schedule
from .one_f_one_b import one_f_one_b_in_flight


def zb_h1_deferred(pipeline_rank: int, pp: int, num_microbatches: int) -> float:
    """W passes rank k holds back at its peak: k, of the micro-batches past its 1F1B warm-up."""
    whole = one_f_one_b_in_flight(pipeline_rank, pp, num_microbatches)
    return float(min(pipeline_rank, num_microbatches - whole))


def zb_h1_order(pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
    """1F1B's order (one_f_one_b.one_f_one_b_order) with B the input gradient only and each
    W(j) run after B(j + k) on rank k; the W passes left run after the last B."""
    k, n = pipeline_rank, num_microbatches
    warmup = min(pp - k - 1, n)
    order: Order = [("F", j) for j in range(warmup)]
    w_next = 0

    def backward(microbatch: int) -> None:
        nonlocal w_next
        order.append(("B", microbatch))
        if microbatch - k >= w_next:
            order.append(("W", w_next))
            w_next += 1

    for j in range(n - warmup):
        order.append(("F", warmup + j))
        backward(j)
    for j in range(n - warmup, n):
        backward(j)
    order.extend(("W", j) for j in range(w_next, n))
    return order


@dataclass(frozen=True)
class ZeroBubbleH1(Schedule):
    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        return one_f_one_b_in_flight(pipeline_rank, pp, num_microbatches)

    def deferred_w_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                                num_microbatches: int) -> float:
        return zb_h1_deferred(pipeline_rank, pp, num_microbatches)

    def depth_dependent(self) -> bool:
        return True  # the deferred W count is the distance from the first rank

    def latency_s(self, rank_s: float, slowest_chunk_s: float, virtual_stages: int, wgrad_s: float = 0.0,
                  forward_s: float = 0.0) -> float:
        # T_F + T_B - T_W per rank (Qi et al. 2023, sec 3.1), with rank_s = T_F + T_B + T_W
        return rank_s - 2 * wgrad_s

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        return zb_h1_order(pipeline_rank, pp, num_microbatches)

    def title(self, virtual_stages: int) -> str:
        return "ZB-H1"


SCHEDULE = ZeroBubbleH1(
    "zb-h1", searched=True, min_pp=2, split_backward=True, runs_in_planner_run=False)
