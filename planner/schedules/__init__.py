"""The pipeline schedules, by name. A schedule is one module here defining SCHEDULE (a
planner.schedules.base.Schedule) and one line below; evaluate, the search, show, export, the
plan loader and `--schedule` ask the registry, never a schedule's name."""

from __future__ import annotations

from typing import Collection

from . import combined_1f1b, dualpipev, gpipe, interleaved, looped_bfs, one_f_one_b, zbv, zero_bubble
from .base import Order, Schedule

__all__ = ["SCHEDULES", "Order", "Schedule", "get_schedule", "register", "search_schedule", "searched_schedules"]

SCHEDULES: dict[str, Schedule] = {}


def register(schedule: Schedule) -> Schedule:
    SCHEDULES[schedule.name] = schedule
    return schedule


for _module in (one_f_one_b, interleaved, gpipe, zero_bubble, zbv, looped_bfs, dualpipev, combined_1f1b):
    register(_module.SCHEDULE)


def get_schedule(name: str) -> Schedule:
    """The registered schedule `name` (KeyError for another: plan loading checks names)."""
    return SCHEDULES[name]


def search_schedule(virtual_stages: int) -> Schedule:
    """The searched schedule that runs `virtual_stages` chunks per rank (also the default of
    `planner evaluate --schedule`)."""
    for schedule in SCHEDULES.values():
        if schedule.searched and schedule.accepts_virtual_stages(virtual_stages):
            return schedule
    raise KeyError(f"no searched schedule takes {virtual_stages} virtual stages")


def searched_schedules(virtual_stages: int, runs: Collection[str]) -> list[Schedule]:
    """The schedules the plan search tries with `virtual_stages` chunks per rank under a
    runtime that runs the schedules named in `runs` (its Capability.schedules): the default one
    (search_schedule), then every other searched schedule that takes them and that it runs."""
    default = search_schedule(virtual_stages)
    return [default] + [s for s in SCHEDULES.values() if s is not default and s.searched
                        and s.accepts_virtual_stages(virtual_stages) and s.name in runs]
