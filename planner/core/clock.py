"""The search's clock: the time limit, checked often enough that `solve` returns within it,
and progress reports at a steady interval (the CLI draws them on a terminal)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


# the CLI's default limit, so that `plan` and every sweep row always return: after 5 minutes
# with the best plan found so far (the exact search of the built-in examples takes 1-15 s here;
# an 8-node three-type cluster about a minute)
DEFAULT_TIME_LIMIT_S = 300.0


class SearchTimeout(Exception):
    """Raised inside the search when the time limit is up (or a stop was requested); `solve`
    catches it and returns the best plan found so far (never seen outside planner.search.orchestration.driver)."""


# A request to stop every search of this process as if its time limit were up (request_stop):
# the CLI's Ctrl-C handler sets it, and a forked lane process (planner.search.orchestration.parallel) sets its
# own copy when it gets SIGINT, so each returns the best plan found so far.
_stop = {"requested": False}


def request_stop() -> None:
    """Stop the searches running in this process at their next clock check (SearchTimeout)."""
    _stop["requested"] = True


def stop_requested() -> bool:
    return _stop["requested"]


def clear_stop() -> None:
    _stop["requested"] = False


@dataclass(frozen=True)
class Progress:
    elapsed_s: float
    subproblems_done: int
    subproblems_total: int
    best_step_s: float | None  # the fastest plan found so far
    lower_bound_s: float


@dataclass
class SearchClock:
    """Wall-clock deadline of one search plus what progress reports show.

    `check()` is called in the search's inner loops (between stage families of the DP, between
    candidate uniform plans): it raises SearchTimeout past the deadline and calls `on_progress`
    at most every `interval_s`."""

    limit_s: float | None = None
    on_progress: Callable[[Progress], None] | None = None
    interval_s: float = 0.25
    started: float | None = None  # now() when None
    now: Callable[[], float] = time.perf_counter
    subproblems_done: int = 0
    subproblems_total: int = 0
    best_step_s: float | None = None
    lower_bound_s: float = 0.0
    phase_limit_s: float | None = None  # a shorter limit for the current phase of the search
    _last_report: float = 0.0

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.now()

    def elapsed_s(self) -> float:
        return self.now() - self.started

    def check(self) -> None:
        now = self.now()
        limits = [x for x in (self.limit_s, self.phase_limit_s) if x is not None]
        if (limits and now - self.started > min(limits)) or _stop["requested"]:
            raise SearchTimeout
        if self.on_progress is not None and now - self._last_report >= self.interval_s:
            self._last_report = now
            self.report()

    def report(self) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(self.elapsed_s(), self.subproblems_done, self.subproblems_total,
                                      self.best_step_s, self.lower_bound_s))
