"""Two searches at a time (planner.search.orchestration.lanes, planner.search.orchestration.parallel): the plan JSON is the
same with one search process or two (but for the solver's seconds and candidates: work done); search j starts from the searches
before j - 1; a lane process's error reaches the caller; a process that may not have children
(a sweep worker) takes turns; the time limit holds with two processes."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.api import plan_json
from planner.core.errors import NoFeasiblePlan
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.orchestration.lanes import Lane, Outcome, start_of
from planner.search.orchestration.parallel import _can_fork
from planner.verify.instances import tiny_instance

from .test_time_limit import timed_solve

needs_fork = pytest.mark.skipif(not _can_fork(), reason="no fork on this platform")

OPTIONS = dict(micro_batches=(1, 2), tp_degrees=(1, 2), recompute_modes=("none", "full"), virtual_stages=(1, 2))


def _without_work(result) -> dict:
    out = plan_json(result)
    out["solver"].pop("seconds")
    out["solver"].pop("candidates")  # two lanes price some configurations twice
    return out


@needs_fork
@pytest.mark.parametrize("seed", [32, 5, 11])
def test_two_search_processes_give_the_same_plan_json_as_one(seed):
    model, cluster, base = tiny_instance(seed)
    one = solve(model, cluster, base, SolverOptions(**OPTIONS, jobs=1))
    two = solve(model, cluster, base, SolverOptions(**OPTIONS, jobs=2))
    assert _without_work(one) == _without_work(two)
    again = solve(model, cluster, base, SolverOptions(**OPTIONS, jobs=2))
    assert plan_json(again)["solver"]["candidates"] == plan_json(two)["solver"]["candidates"]  # deterministic
    assert multiprocessing.active_children() == []  # the lane processes have ended


@needs_fork
@pytest.mark.parametrize("seed", [32, 5])
def test_on_parts_two_search_processes_give_the_same_plan_json_as_one(seed):
    """On parts of nodes the searches are ordered for the lanes (space.subproblems `paired`)."""
    model, cluster, base = tiny_instance(seed)
    coarse = dict(OPTIONS, max_exact_nodes=0, max_bundle_nodes=2)
    one = solve(model, cluster, base, SolverOptions(**coarse, jobs=1))
    two = solve(model, cluster, base, SolverOptions(**coarse, jobs=2))
    assert one.decomposition != "exact" and _without_work(one) == _without_work(two)


def test_paired_order_keeps_each_group_on_the_lane_of_its_micro_batch():
    """`paired`: the same searches as unpaired; the zero-bubble and 1F1B head first, unchanged; each later
    group on the lane (index parity) of its micro-batch's 1F1B search while both lanes have searches left."""
    from planner.cost.runtimes.capability import capability
    from planner.search.orchestration.space import subproblems, within
    from planner.search.pricing.stage_types import SearchContext
    model, cluster, base = tiny_instance(32)
    base = replace(base, global_batch=48)
    cap = capability("any")
    options = within(SolverOptions(micro_batches=(1, 2, 4), tp_degrees=(1, 2), recompute_modes=("none", "full"),
                                   virtual_stages=(1, 2), zero_bubble=True), cap)
    plain = list(subproblems(SearchContext(model, cluster, base, options), 6, cap))
    paired = list(subproblems(SearchContext(model, cluster, base, options), 6, cap, paired=True))
    assert sorted(map(repr, plain)) == sorted(map(repr, paired)) and len(set(map(repr, paired))) == len(paired)
    one_f1b = [i for i, s in enumerate(plain) if s[2] is None]
    head = one_f1b[-1] + 1
    assert paired[:head] == plain[:head]
    lane_of = {}
    for i in one_f1b:
        lane_of.setdefault(plain[i][0], i % 2)
    rest = paired[head:]
    assert len({lane_of[s[0]] for s in rest}) == 2 and len(rest) >= 4
    left = [sum(1 for s in rest[k:] if lane_of[s[0]] == lane) for k in range(len(rest)) for lane in (0, 1)]
    for k, search in enumerate(rest):
        if left[2 * k] and left[2 * k + 1]:  # both lanes' queues still hold searches
            assert lane_of[search[0]] == (head + k) % 2


def test_a_search_starts_from_the_searches_before_the_previous_one():
    outcomes = [Outcome(0, (10.0, 8, 1, 1), 5, None), Outcome(1, (9.0, 8, 1, 1), 5, None),
                Outcome(2, None, 5, None), Outcome(3, (9.0, 4, 1, 1), 5, None)]
    assert start_of(0, 11.0, outcomes).best is None and start_of(1, 11.0, outcomes).best is None
    assert start_of(2, 11.0, outcomes).best == (10.0, 8, 1, 1)  # not search 1's 9.0: it may still run
    assert start_of(3, 11.0, outcomes).best == (9.0, 8, 1, 1)
    assert start_of(5, 11.0, outcomes).best == (9.0, 4, 1, 1)  # fewer nodes wins a tie in step
    # the cutoff: the best known, or the seed's step within 2e-6 (ties near the seed go to the search)
    assert start_of(2, 11.0, outcomes).cutoff_s((10.0, 8, 1, 1)) == 10.0
    assert start_of(0, 11.0, outcomes).cutoff_s(None) == pytest.approx(11.0 * (1 + 2e-6))


@needs_fork
def test_an_error_in_a_lane_process_reaches_the_caller(monkeypatch):
    def broken(self, index, start):
        raise ValueError(f"lane broke on search {index}")

    monkeypatch.setattr(Lane, "run", broken)  # the forked lanes inherit it
    model, cluster, base = tiny_instance(32)
    with pytest.raises(ValueError, match="lane broke on search"):
        solve(model, cluster, base, SolverOptions(**OPTIONS, jobs=2))
    assert multiprocessing.active_children() == []


def _step_in_worker(seed: int) -> float:
    model, cluster, base = tiny_instance(seed)
    return solve(model, cluster, base, SolverOptions(**OPTIONS, jobs=2)).estimate.step_time_s


@needs_fork
def test_a_daemonic_worker_asking_for_two_processes_takes_turns_with_the_same_plan():
    # a multiprocessing pool's workers (planner sweep's local executor) may not start processes
    model, cluster, base = tiny_instance(32)
    expected = solve(model, cluster, base, SolverOptions(**OPTIONS, jobs=1)).estimate.step_time_s
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # fork would copy this process's solver threads
        assert pool.apply(_step_in_worker, (32,)) == expected


@needs_fork
def test_time_limit_holds_with_two_search_processes():
    # as tests/test_time_limit.py's slow shape (3 + 3 + 4 nodes searched whole), with two processes;
    # the limit is read on the injected ticking clock, never on wall time (a loaded machine flakes)
    result, seconds = timed_solve((3, 3, 4), 2.0, jobs=2)
    assert seconds <= 2.0 * 1.1 + 0.5, seconds
    assert not isinstance(result, NoFeasiblePlan), result
    assert result.estimate.fits and not result.optimal
    assert multiprocessing.active_children() == []


@needs_fork
def test_lane_processes_forked_after_this_process_ran_the_ilp_solver_still_solve():
    # HiGHS's worker threads do not survive a fork: every solve runs on one thread
    # (shares.highs), so the lanes fork a process holding none. Run in a child with a timeout,
    # since the failure is a hang.
    code = """
import sys
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.orchestration.lanes import Lane, Outcome
from planner.search.pricing.shares import IlpOptions, solve_shares_ilp
from planner.verify.instances import tiny_instance

def run_with_an_ilp(self, index, start):
    solve_shares_ilp(64, [1.0, 1.3, 2.0], [40, 40, 40], IlpOptions("HiGHS"), 1)
    return Outcome(index, None, 0, None)

solve_shares_ilp(64, [1.0, 1.3, 2.0], [40, 40, 40], IlpOptions("HiGHS"), 1)  # HiGHS threads in this process
Lane.run = run_with_an_ilp
model, cluster, base = tiny_instance(32)
try:
    solve(model, cluster, base, SolverOptions(jobs=2))
except Exception as error:  # no plan without the searches: fine, the lanes answered
    print(type(error).__name__)
print("done")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0 and done.stdout.strip().endswith("done"), done.stderr[-2000:]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_the_ilp_solver_leaves_no_thread_behind_to_be_lost_at_a_fork():
    code = """
import os
from planner.search.pricing.shares import IlpOptions, solve_shares_ilp
before = len(os.listdir('/proc/self/task'))
solve_shares_ilp(64, [1.0, 1.3, 2.0], [40, 40, 40], IlpOptions("HiGHS"), 1)
print(before, len(os.listdir('/proc/self/task')))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    before, after = map(int, done.stdout.split()[-2:])
    assert after == before, done.stderr[-2000:]


@pytest.mark.parametrize("seed", [32, 5])
def test_searched_whole_the_uniform_scan_comes_after_the_searches_bounded_by_their_plan(monkeypatch, seed):
    """On a cluster searched whole the seed scan prices only plans outside the exact search's space,
    so it runs after the searches, bounded by their best plan (driver); the plan is the scan's where
    it is faster, else the search's."""
    model, cluster, base = tiny_instance(seed)
    events = []
    run, scan = Lane.run, Lane.seed

    def logged_run(self, index, start):
        outcome = run(self, index, start)
        events.append(("run", outcome.found[0] if outcome.found is not None else None))
        return outcome

    def logged_seed(self, space, accept, bound_s, share):
        found = scan(self, space, accept, bound_s, share)
        events.append(("seed", bound_s, found.best[2].step_time_s if found.best is not None else None))
        return found
    monkeypatch.setattr(Lane, "run", logged_run)
    monkeypatch.setattr(Lane, "seed", logged_seed)
    # one search (per-replica TP would add a second, bounded by the first's plan: test_per_replica_tp.py)
    result = solve(model, cluster, base, SolverOptions(**OPTIONS, jobs=1, per_replica_tp=False))
    assert result.decomposition == "exact"
    assert [kind for kind, *_ in events].count("seed") == 1 and events[-1][0] == "seed"
    searched = min(step for kind, step in events[:-1] if step is not None)
    _, bound_s, scanned = events[-1]
    assert bound_s == searched
    assert result.estimate.step_time_s == pytest.approx(min(searched, scanned or searched), rel=1e-6)
