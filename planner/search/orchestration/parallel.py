"""Runs the searches (planner.search.orchestration.lanes) in this process, one lane taking them in turn, or in
two forked processes, one per lane, two searches at a time; either way every search starts from
the same Start, so the plan is the same.

`SolverOptions.jobs` 1 runs in this process; 2 (the CLI's default) forks one process per lane
where the platform has fork and this process may have children (a daemonic process, e.g. a
`planner sweep` worker, may not: it runs them in turn). A lane process gets a copy of the
search's inputs at the fork; it scans its share of the uniform candidates (the seed,
Searches.seed) when asked, before the searches or after them (driver), receives (search index,
Start) and sends back Outcomes, and at the end the draft of its best plan, whose share ILPs the
parent solves; progress is reported here.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from typing import Any

from ...core.clock import SearchClock, request_stop, stop_requested
from .build import PlanDraft
from .lanes import LANES, Lane, Outcome, start_of
from ..uniform import UniformSeed, UniformSpace, merge_seeds

__all__ = ["Searches"]


class Searches:
    """The lanes of one search: `run` every search in index order (or until the time limit), then
    `draft` the best plan on the lane that found it. A context manager: leaving it ends the lane
    processes."""

    def __init__(self, lane: Lane, jobs: int, clock: SearchClock):
        self.lane = lane  # no search run yet: each lane process gets a copy at the fork
        self.clock = clock
        self.jobs = jobs if jobs > 1 and _can_fork() else 1
        self.workers: list[tuple[Any, Connection]] = []
        self.stopping = False  # SIGINT sent to the lane processes (stop_lanes)

    def stop_lanes(self) -> None:
        """Pass a stop request of this process on to the lane processes, once: each stops its search
        as at the time limit (its own request_stop) and stays to send its outcome and draft."""
        if not self.stopping and stop_requested():
            self._interrupt_lanes()

    def _interrupt_lanes(self) -> None:
        self.stopping = True
        for process, _ in self.workers:
            if process.is_alive():
                os.kill(process.pid, signal.SIGINT)

    def __enter__(self) -> "Searches":
        return self

    def _fork(self) -> None:
        """One process per lane, forked when the searches start (the clock's phase limit set)."""
        if self.jobs > 1 and not self.workers:
            context = multiprocessing.get_context("fork")
            for _ in range(LANES):
                here, there = context.Pipe()
                # the lane closes its copies of the parent's ends, so that it sees EOF if the parent dies
                inherited = [conn for _, conn in self.workers] + [here]
                process = context.Process(target=_serve, args=(self.lane, there, inherited), daemon=True)
                process.start()
                there.close()
                self.workers.append((process, here))

    def __exit__(self, *exc) -> None:
        if exc[0] is not None and not self.stopping:  # e.g. KeyboardInterrupt: the lanes stop before the join
            self._interrupt_lanes()
        for process, conn in self.workers:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for process, conn in self.workers:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()
            conn.close()
        self.workers = []

    def seed(self, space: UniformSpace, accept, bound_s: float) -> UniformSeed:
        """The fastest uniform plan of `space` (Lane.seed): in lane processes, each lane the candidates
        of its index modulo LANES, merged by (step, candidate index), the plan of one scan."""
        self._fork()
        if not self.workers:
            return self.lane.seed(space, accept, bound_s, (0, 1))
        for part, (_, conn) in enumerate(self.workers):
            conn.send(("seed", space, accept, bound_s, (part, LANES)))
        seeds = []
        for _, conn in self.workers:
            while not conn.poll(self.clock.interval_s):
                self.stop_lanes()
                self.clock.report()
            seeds.append(_receive(conn))
        return merge_seeds(seeds)

    def run(self, count: int, incumbent_s: float) -> list[Outcome]:
        """Outcomes of searches 0 .. count-1 in index order; fewer when the time limit stopped one
        (the outcomes received are kept: each started from a proper Start)."""
        if count:
            self._fork()
        if not self.workers:
            return self._take_turns(count, incumbent_s)
        outcomes: dict[int, Outcome] = {}
        running: dict[int, int] = {}  # lane -> search index
        next_index = list(range(LANES))  # each lane's next search
        stopped = False
        while True:
            done = _prefix(outcomes)
            for lane, (_, conn) in enumerate(self.workers):
                index = next_index[lane]
                # search j starts once searches 0 .. j-2 are done (lanes.start_of)
                if lane not in running and not stopped and index < count and len(done) >= index - LANES + 1:
                    conn.send(("run", index, start_of(index, incumbent_s, done)))
                    running[lane] = index
                    next_index[lane] += LANES
            if not running:
                break
            self.stop_lanes()
            ready = wait([self.workers[lane][1] for lane in running], timeout=self.clock.interval_s)
            for lane in [lane for lane in running if self.workers[lane][1] in ready]:
                outcome = _receive(self.workers[lane][1])
                del running[lane]
                outcomes[outcome.index] = outcome
                self._count(outcome)
                stopped = stopped or not outcome.complete
            self.clock.report()
        return [outcomes[i] for i in sorted(outcomes)]

    def _take_turns(self, count: int, incumbent_s: float) -> list[Outcome]:
        """Every search on the one lane, in index order (its price tables shared by all)."""
        outcomes: list[Outcome] = []
        for index in range(count):
            outcome = self.lane.run(index, start_of(index, incumbent_s, outcomes))
            outcomes.append(outcome)
            self._count(outcome)
            self.clock.report()
            if not outcome.complete:
                break
        return outcomes

    def _count(self, outcome: Outcome) -> None:
        self.clock.subproblems_done += 1
        if outcome.found is not None:
            self.clock.best_step_s = min(outcome.found[0], self.clock.best_step_s or float("inf"))

    def draft(self, index: int) -> tuple[PlanDraft, float]:
        """Lane.draft on the lane that ran search `index` (in this process, the one lane)."""
        if not self.workers:
            return self.lane.draft()
        conn = self.workers[index % LANES][1]
        conn.send(("draft",))
        return _receive(conn)


def _prefix(outcomes: dict[int, Outcome]) -> list[Outcome]:
    """The outcomes of searches 0, 1, ... up to the first one not yet received."""
    out = []
    while len(out) in outcomes:
        out.append(outcomes[len(out)])
    return out


def _can_fork() -> bool:
    """fork exists here and this process may start children (a daemonic one may not)."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


def _receive(conn: Connection):
    kind, value = conn.recv()
    if kind == "error":
        raise value
    return value


def _serve(lane: Lane, conn: Connection, inherited: list[Connection]) -> None:
    """A lane process: run searches and draft plans until told to stop (None) or the parent is gone."""
    for end in inherited:
        end.close()
    # Ctrl-C reaches the whole process group: a lane stops its search as at the time limit, and the
    # parent, which decides what to print, collects its outcome (no KeyboardInterrupt, no traceback here)
    signal.signal(signal.SIGINT, lambda *_: request_stop())
    # every HiGHS solve runs on one thread (pricing.shares.highs): the fork copied no solver thread
    lane.clock = replace(lane.clock, on_progress=None)  # progress is drawn by the parent
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        try:
            if message[0] == "run":
                value = lane.run(message[1], message[2])
            elif message[0] == "seed":
                value = lane.seed(*message[1:])
            else:
                value = lane.draft()
            conn.send(("ok", value))
        except BaseException as error:  # the parent raises it
            try:
                conn.send(("error", error))
            except Exception:
                conn.send(("error", RuntimeError(f"lane process: {error!r}")))
