"""What a pipeline schedule tells the planner (planner.schedules): the base every schedule
module subclasses. Pure: imports nothing of the planner, so evaluate, the search and show can
all ask it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

Order = list[tuple[str, int]]  # ("F" or "B", micro-batch), in the order one rank runs them


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: its name in plan files and `--schedule`, the virtual stages
    (chunks per rank) it takes, whether the search plans it, and what each runtime calls it
    (None: the runtime has no such schedule)."""

    name: str
    searched: bool  # the plan search considers it
    min_virtual_stages: int = 1
    max_virtual_stages: int | None = 1  # None: no upper limit
    min_pp: int = 1
    runtime_names: Mapping[str, str | None] = field(default_factory=dict)
    drawn_as: str | None = None  # the approximation `planner show` draws it with, if any

    def accepts_virtual_stages(self, virtual_stages: int) -> bool:
        return self.min_virtual_stages <= virtual_stages and (
            self.max_virtual_stages is None or virtual_stages <= self.max_virtual_stages)

    def chunks_per_rank(self, virtual_stages: int) -> int:
        """Model chunks each pipeline rank runs: 1 unless the schedule interleaves."""
        return 1

    def in_flight_microbatches(self, pipeline_rank: int, pp: int, virtual_stages: int,
                               num_microbatches: int) -> float:
        """Micro-batches whose activations a pipeline rank holds at its peak, in units of one
        micro-batch through all of that rank's layers."""
        raise NotImplementedError

    def depth_dependent(self) -> bool:
        """Whether a rank's in-flight count depends on the pipeline depth P beyond its distance
        from the end (then the search fixes P per dynamic programme)."""
        return False

    def latency_s(self, rank_s: float, slowest_chunk_s: float, virtual_stages: int) -> float:
        """c_k of evaluate.pipeline_time_s: the latency of one micro-batch through a rank whose
        whole pass takes `rank_s` and whose slowest chunk `slowest_chunk_s`."""
        return rank_s

    def order(self, pipeline_rank: int, pp: int, num_microbatches: int) -> Order:
        """The order one pipeline rank runs its forwards and backwards in (planner show)."""
        raise NotImplementedError

    def title(self, virtual_stages: int) -> str:
        """The schedule's name in a drawing's title."""
        return self.name
