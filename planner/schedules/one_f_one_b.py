"""1F1B (PipeDream-Flush; Narayanan et al. 2021, sec 2.2.1): after a warm-up of forwards each
rank alternates one forward and one backward, holding at most P - k micro-batches."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Order, Schedule


def one_f_one_b_in_flight(pipeline_rank: int, pp: int, num_microbatches: int) -> float:
    """1F1B keeps pp - rank micro-batches (Narayanan et al. 2021, sec 2.2.1)."""
    return float(min(pp - pipeline_rank, num_microbatches))


def one_f_one_b_order(pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
    n = num_microbatches
    warmup = min(pp - pipeline_rank - 1, n)
    order = [("F", j) for j in range(warmup)]
    for j in range(n - warmup):
        order += [("F", warmup + j), ("B", j)]
    order += [("B", j) for j in range(n - warmup, n)]
    return order


@dataclass(frozen=True)
class OneFOneB(Schedule):
    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        return one_f_one_b_in_flight(pipeline_rank, pp, num_microbatches)

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        return one_f_one_b_order(pipeline_rank, pp, num_microbatches)

    def title(self, virtual_stages: int) -> str:
        return "1F1B"


SCHEDULE = OneFOneB("1f1b", searched=True)
