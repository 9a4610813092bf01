"""Breadth-first, looped (Lamy-Poirier 2023, Breadth-First Pipeline Parallelism; torch
ScheduleLoopedBFS, torchtitan's "LoopedBFS"): each rank runs V chunks placed round-robin as
in interleaved 1F1B, but runs one chunk for every micro-batch before the next (all forwards
of a loop, then its backwards in reverse). Its bubble is the looped one, (p - 1) t / V
(sec 4), and it pays where data parallelism does: each chunk's gradients are complete one
loop before the next chunk's, so their reduction overlaps the remaining loops' backwards
(sec 3.2), and a sharded (ZeRO-2/3, FSDP) optimizer gathers and reduce-scatters each chunk's
weights once per loop for all micro-batches instead of once per micro-batch (sec 3.3). The
price is memory: every micro-batch of the step is in flight through all the rank's chunks
at the end of the forwards, as in GPipe.

Runtimes: torchtitan (torch ScheduleLoopedBFS, 2 or more stages per rank); not Megatron-LM
(1F1B and interleaved only) nor DeepSpeed (its own 1F1B)."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Order, Schedule


@dataclass(frozen=True)
class LoopedBFS(Schedule):
    def chunks_per_rank(self, virtual_stages: int) -> int:
        return virtual_stages

    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        return float(num_microbatches)  # all of them, through every chunk (Lamy-Poirier 2023, sec 3)

    def gradient_loops(self, virtual_stages: int) -> int:
        return virtual_stages

    def zero_once_per_loop(self) -> bool:
        return True

    def latency_s(self, rank_s: float, slowest_chunk_s: float, virtual_stages: int, wgrad_s: float = 0.0,
                  forward_s: float = 0.0) -> float:
        # the looped pipeline's fill: one chunk per rank (Lamy-Poirier 2023, sec 4), as interleaved
        return slowest_chunk_s

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        # drawn as GPipe over the rank's chunks together (drawn_as): every forward, then every backward
        n = num_microbatches
        return [("F", j) for j in range(n)] + [("B", j) for j in range(n)]

    def title(self, virtual_stages: int) -> str:
        return f"looped BFS (V={virtual_stages})"


SCHEDULE = LoopedBFS(
    "looped-bfs", searched=False, uniform_candidate=True, min_virtual_stages=2, max_virtual_stages=None, min_pp=2,
    runs_in_planner_run=False,
    drawn_as="GPipe over each rank's chunks together")
