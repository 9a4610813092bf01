"""The one question every skip test answers: can any plan of one search (a Subproblem: micro-batch,
virtual stages, pipeline ranks, schedule, restriction) be faster than a cutoff? A Bound answers it
(cannot_beat); a FloorBound also gives the floor it answers by (floor_s). The driver's lanes skip a
search some Bound rules out (planner.search.orchestration.lanes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...schedules import get_schedule
from ..pricing.stage_types import Restriction

__all__ = ["Bound", "FloorBound", "Subproblem", "floor_cannot_beat"]

# the DP's rounding margin (completion): a floor within it of the cutoff does not rule a search out
ROUNDING_MARGIN = 1e-9


@dataclass(frozen=True)
class Subproblem:
    """One search of the driver (planner.search.orchestration.space.subproblems): micro-batch
    `micro_batch`, `virtual_stages` chunks per rank, exactly `ranks` pipeline ranks (None: any
    number up to the options' limit), schedule `schedule`, under `restriction`."""
    micro_batch: int
    virtual_stages: int
    ranks: int | None
    schedule: str
    restriction: Restriction = Restriction()

    @property
    def least_share(self) -> int:
        """The fewest micro-batches a replica takes: ZB-H1 P (planner.search.pricing.deferred),
        else 1."""
        split = get_schedule(self.schedule).split_backward
        return self.ranks if self.ranks is not None and split else 1


def floor_cannot_beat(floor_s: float, cutoff_s: float) -> bool:
    """Whether a search whose plans take at least `floor_s` cannot beat `cutoff_s`."""
    return floor_s * (1 - ROUNDING_MARGIN) >= cutoff_s


class Bound(Protocol):
    def cannot_beat(self, search: Subproblem, cutoff_s: float) -> bool:
        """Whether no plan of `search` can be faster than `cutoff_s` (False where the bound's
        argument does not hold)."""


class FloorBound(Bound, Protocol):
    def floor_s(self, search: Subproblem) -> float:
        """The least step time of any plan of `search`: 0.0 where the bound's argument does not
        hold, INF where no plan can exist."""
