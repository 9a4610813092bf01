"""Stage pricing by memory-capping level (planner.search.pricing.levels.CappingLevels.stage_costs): a
configuration is priced once per (flags, link) at every capping level, and a pipeline position
picks its level per block count; that must equal pricing the position directly, with each
replica type's share cap at that position's in-flight micro-batches (share_cap)."""

from __future__ import annotations

import numpy as np
import pytest

from planner.search.decompose import decompose
from planner.search.pricing.shares import min_makespan
from planner.search.pricing.stage_types import SearchContext
from planner.search.pricing.stages import INF, Problem, SolverOptions, share_cap
from planner.verify.instances import TINY_OPTIONS, pipeline_instance, tiny_instance



def _direct_x(problem: Problem, cid: int, from_end: int, has_emb: bool, successor: int, ranks):
    """X = B + E - tau of one position, its makespan B priced with that position's caps."""
    config = problem.config_list[cid]
    types = problem.stage_configs.type_arrays(config)
    flags = (from_end == 1, has_emb, 0)
    in_flight = problem.in_flight(from_end, ranks)
    caps = [share_cap(ta.room[flags], in_flight) for ta in types]
    times = problem.replica_times(types, flags, problem.links.link(cid, successor))
    busy = min_makespan(problem.microbatches, [ta.count for ta in types], times, caps)
    cost = problem.stage_cost(cid, from_end, has_emb, successor, ranks)
    tail = problem.tables.tails.get((config, flags))
    if tail is None:  # a config with no batch shares is left unpriced: infinite everywhere
        assert problem.levels._no_shares(cid) and not np.isfinite(cost.x).any()
        return cost, np.full(len(cost.x), INF)
    with np.errstate(invalid="ignore"):
        x = busy + tail - cost.tau
    return cost, np.where(np.isfinite(busy) & np.isfinite(cost.tau), x, INF)


# runtime: any (every stage its own configuration)
@pytest.mark.parametrize("make, seed", [(tiny_instance, s) for s in (1, 4, 7)] + [(pipeline_instance, s) for s in (0, 5)])
def test_stage_cost_by_capping_level_equals_pricing_each_position(make, seed):
    model, cluster, base = make(seed)
    options = SolverOptions(**TINY_OPTIONS)
    parts = decompose(cluster, options.exact_node_limit(True), options.max_bundle_nodes)
    checked = capped = 0
    for v in (1, 2):
        problem = Problem(SearchContext(model, cluster, base, options), 1, parts, v)
        zeros = tuple(0 for _ in problem.bundle_nodes)
        for fid, _, sig in problem.transitions(zeros):
            for cid in problem.catalog.families[fid]:
                for ranks in ((None,) if v == 1 else (2, 3)):
                    for from_end in range(1, (ranks or 3) + 1):
                        for has_emb in (False, True):
                            for successor in ((-1,) if from_end == 1 and v == 1 else (sig,)):
                                cost, expected = _direct_x(problem, cid, from_end, has_emb, successor, ranks)
                                where = np.isfinite(cost.x)
                                assert np.array_equal(cost.x[where], expected[where])
                                # infinite only where the position's caps make it so, or where a
                                # stage (chunk) would hold no layer (block): _finish's rules
                                forced = np.arange(len(cost.x)) < (v if v > 1 else
                                                                   int(from_end != 1 and not has_emb))
                                assert np.all(~np.isfinite(expected[~where]) | forced[~where])
                                checked += 1
                                capped += int(np.any(where & (problem.stage_configs.type_arrays(problem.config_list[cid])[0]
                                                              .room[(from_end == 1, has_emb, 0)]
                                                              < problem.in_flight(from_end, ranks))))
    assert checked > 0 and capped > 0  # some positions price with binding memory caps


def test_released_problem_keeps_its_shared_tails_and_the_next_prices_as_a_fresh_one():
    """release_position_prices keeps the position-free tails by (config, flags), which the other
    one-chunk problems of the micro-batch share (PriceTables.position_free), and drops recompute
    "block"'s by recomputed-block count; a problem priced with the kept tails equals a fresh one."""
    model, cluster, base = tiny_instance(1)
    options = SolverOptions(**TINY_OPTIONS)
    parts = decompose(cluster, options.exact_node_limit(True), options.max_bundle_nodes)

    def priced(problem: Problem) -> list[np.ndarray]:
        zeros = tuple(0 for _ in problem.bundle_nodes)
        return [cost.x for fid, _, sig in problem.transitions(zeros) for from_end in (1, 2)
                for cost in problem.levels.stage_costs(problem.catalog.families[fid], from_end, False,
                                                -1 if from_end == 1 else sig)]

    first = Problem(SearchContext(model, cluster, base, options), 1, parts)
    expected = priced(first)
    kept = {key: tail for key, tail in first.tables.tails.items() if len(key) == 2}
    assert kept
    first.release_position_prices()
    assert all(first.tables.tails.get(key) is tail for key, tail in kept.items())
    assert all(len(key) == 2 for key in first.tables.tails)
    second = Problem(SearchContext(model, cluster, base, options), 1, parts, shared=first)
    got = priced(second)
    assert len(got) == len(expected) and all(np.array_equal(a, b) for a, b in zip(got, expected))
