"""Prices the search shares between problems and configurations must equal pricing each alone:
min_makespan with one replica count per row (a family's configurations in one call) against one
call per configuration, and an interleaved problem priced at one depth, then at another, against
one priced at the second alone."""

from __future__ import annotations

import numpy as np
import pytest

from planner.search.decompose import decompose
from planner.search.pricing.shares import UNCAPPED, min_makespan
from planner.search.pricing.stage_types import SearchContext
from planner.search.pricing.stages import Problem, SolverOptions
from planner.verify.instances import TINY_OPTIONS, pipeline_instance, tiny_instance



@pytest.mark.parametrize("least", [1, 2, 3])
def test_makespan_with_a_count_per_row_equals_one_call_per_row(least):
    rng = np.random.default_rng(least)
    for _ in range(150):
        kinds, rows, blocks = int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 20))
        total = int(rng.integers(1, 200))
        counts = rng.integers(1, 15, (rows, kinds))
        times = np.where(rng.random((rows, kinds, blocks)) < 0.05, np.inf, rng.random((rows, kinds, blocks)) + 0.01)
        caps = np.where(rng.random((rows, kinds, blocks)) < 0.4, UNCAPPED,
                        rng.integers(0, 30, (rows, kinds, blocks))).astype(np.int64)
        alone = np.stack([min_makespan(total, [int(n) for n in counts[r]], list(times[r]), list(caps[r]), least)
                          for r in range(rows)])
        together = min_makespan(total, [counts[:, g:g + 1] for g in range(kinds)], [times[:, g] for g in range(kinds)],
                                [caps[:, g] for g in range(kinds)], least)
        assert np.array_equal(alone, together)


@pytest.mark.parametrize("make, seed", [(tiny_instance, 3), (pipeline_instance, 5)])
def test_interleaved_problem_priced_at_another_depth_first_prices_as_one_alone(make, seed):
    # the driver runs one chunked problem at every depth P: the depth-free prices it keeps from
    # depth 2 must give depth 3 the costs a problem priced at depth 3 alone gives
    model, cluster, base = make(seed)
    options = SolverOptions(**TINY_OPTIONS)
    parts = decompose(cluster, options.exact_node_limit(True), options.max_bundle_nodes)
    context = SearchContext(model, cluster, base, options)
    one_chunk = Problem(context, 1, parts)
    shared = Problem(context, 1, parts, 2, one_chunk)  # depth 2, then depth 3
    alone = Problem(context, 1, parts, 2)  # depth 3 only, its own base
    zeros = tuple(0 for _ in shared.bundle_nodes)
    for fid, _, sig in shared.transitions(zeros):
        for from_end in range(1, 3):
            for has_emb in (False, True):
                shared.family_cost(fid, from_end, has_emb, sig, 2)
    assert shared.tables.stage_levels  # depth 2 left depth-free prices behind
    compared = 0
    for (fid, _, sig), (their_fid, _, their_sig) in zip(shared.transitions(zeros), alone.transitions(zeros)):
        for from_end in range(1, 4):
            for has_emb in (False, True):
                mine = shared.family_cost(fid, from_end, has_emb, sig, 3)
                theirs = alone.family_cost(their_fid, from_end, has_emb, their_sig, 3)
                assert len(mine) == len(theirs)
                for a, b in zip(mine, theirs):
                    assert np.array_equal(a.tau, b.tau) and np.array_equal(a.x, b.x)
                    assert [shared.config_list[m] if m >= 0 else None for m in a.member] == \
                        [alone.config_list[m] if m >= 0 else None for m in b.member]
                    compared += 1
    assert compared
