"""planner.search.bounds.rank_busy and rank_costs' shared costs: least_busy is the least busy time B' of
rank_floor's argument (a bisection on the replicas' count function is the oracle), given a limit it
changes only cells past it, and a KnownCosts whose budget drops every other schedule's pool at each
check decides as one that keeps them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.cost.runtimes.capability import capability
from planner.search.orchestration.driver import solve
from planner.search.bounds.rank_busy import least_busy
from planner.search.bounds.rank_costs import KnownCosts
from planner.search.bounds.rank_floor import RankBound
from planner.search.bounds.search_bound import Subproblem
from planner.search.orchestration.space import subproblems, within
from planner.search.pricing.stage_types import SearchContext, SolverOptions
from planner.verify.instances import TINY_OPTIONS, pipeline_instance



def _instances(seed: int, size: int = 200):
    """Random replicas: (m, counts (i, row), ones and fulls (i, row, n) with fulls >= ones, below)."""
    rng = np.random.default_rng(seed)
    for _ in range(size):
        groups, rows, ns = rng.integers(1, 4), rng.integers(1, 5), rng.integers(1, 6)
        ones = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0], size=(groups, rows, ns))  # (ties on purpose)
        fulls = ones * rng.choice([1.0, 1.5, 2.0, 4.0], size=ones.shape)
        counts = rng.integers(1, 9, size=(groups, rows)).astype(float)
        yield int(rng.integers(1, 70)), counts, ones, fulls, rng.integers(0, 6, size=rows).astype(float)


def _least_by_bisection(m, counts, ones, fulls, cap):
    """The least B with sum_i counts_i max(min(cap, B / one_i), B / full_i) >= m (rank_floor, B')."""
    def taken(b):
        return sum(c * max(min(cap, b / one), b / full) for c, one, full in zip(counts, ones, fulls))
    low, high = 0.0, m * max(fulls) / sum(counts)  # (every replica at B / full takes them all by high)
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (low, mid) if taken(mid) >= m else (mid, high)
    return high


def test_least_busy_is_the_least_time_the_replicas_take_m_micro_batches_in():
    for m, counts, ones, fulls, below in _instances(0):
        got = least_busy(m, counts, ones, fulls, below)
        for row in range(counts.shape[1]):
            for n in range(ones.shape[2]):
                want = _least_by_bisection(m, counts[:, row], ones[:, row, n], fulls[:, row, n], below[row])
                assert got[row, n] == pytest.approx(want, rel=1e-9)


def test_least_busy_given_a_limit_changes_only_cells_past_it():
    rng = np.random.default_rng(1)
    changed = 0
    for m, counts, ones, fulls, below in _instances(2):
        exact = least_busy(m, counts, ones, fulls, below)
        tails = rng.choice([0.0, 0.5, 2.0], size=exact.shape)
        limit = float(np.quantile(exact + tails, 0.5))
        got = least_busy(m, counts, ones, fulls, below, limit, tails)
        assert np.array_equal(got[exact + tails <= limit], exact[exact + tails <= limit])
        assert (got + tails > limit)[got != exact].all() and (got >= exact).all()
        changed += int((got != exact).sum())
    assert changed  # (the limit does skip cells here)


def test_a_budget_that_drops_every_pool_changes_no_decision():
    model, cluster, base = pipeline_instance(0)
    base = replace(base, runtime="any")
    cap = capability("any")
    options = within(SolverOptions(**{**TINY_OPTIONS, "zero_bubble": True, "zero_stages": (1, 2, 3)}), cap)
    best = solve(model, cluster, base, options).estimate.step_time_s
    kept, dropped = KnownCosts(), KnownCosts(budget_bytes=0)
    decided = []
    for cutoff in (best * 0.9, best, best * 1.05):  # (some searches ruled out, some not)
        for b, v, ranks, _, schedule in subproblems(SearchContext(model, cluster, base, options),
                                                    sum(g.nodes for g in cluster.groups), cap):
            context, search = SearchContext(model, cluster, base, options), Subproblem(b, v, ranks, schedule)
            decided.append(RankBound(context, kept).cannot_beat(search, cutoff))
            assert RankBound(context, dropped).cannot_beat(search, cutoff) == decided[-1]
    assert any(decided) and not all(decided)
