"""GPipe (Huang et al. 2019): every forward, then every backward. Each rank holds all its
micro-batches; 1F1B has the same bubble with less memory, so the search leaves GPipe out."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Order, Schedule


@dataclass(frozen=True)
class GPipe(Schedule):
    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        return float(num_microbatches)

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        n = num_microbatches
        return [("F", j) for j in range(n)] + [("B", j) for j in range(n)]

    def title(self, virtual_stages: int) -> str:
        return "GPipe"


SCHEDULE = GPipe("gpipe", searched=False)
