"""The decomposition of large clusters into parts (planner.search.decompose) and the search on it."""

from __future__ import annotations

import pytest

from planner.search.decompose import bundled, decompose
from planner.inputs.hardware import cluster_from_spec
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.pricing.stage_types import SearchContext
from planner.search.uniform import best_uniform
from planner.verify.instances import TINY_OPTIONS, tiny_instance

from .conftest import three_types


def part_sizes(lane) -> list[int]:
    return [b - a for a, b in zip(lane.bounds, lane.bounds[1:])]


@pytest.mark.parametrize("nodes", [(31, 47, 50), (31, 47, 49), (32, 32, 63), (3, 3, 4), (124, 188, 200), (1, 1, 97)])
def test_parts_cover_every_node_in_sizes_that_differ_by_at_most_one(nodes):
    parts = decompose(cluster_from_spec(three_types(*nodes)), 8, 4)
    assert parts.kind == "parts" and sum(parts.counts) == 4
    for lane, count in zip(parts.lanes, nodes):
        sizes = part_sizes(lane)
        assert sum(sizes) == count and max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    # the whole cluster, part by part, is every node of every group once
    assert parts.nodes((0, 0, 0), parts.counts) == nodes


def test_divisible_node_counts_are_searched_as_identical_bundles():
    parts = decompose(cluster_from_spec(three_types(32, 32, 64)), 8, 4)
    assert parts.kind == "bundles" and parts.counts == (1, 1, 2)
    assert {size for lane in parts.lanes for size in part_sizes(lane)} == {32}
    assert parts == bundled(cluster_from_spec(three_types(32, 32, 64)), 32)
    small = decompose(cluster_from_spec(three_types(2, 2, 4)), 8, 4)
    assert small.exact and small.counts == (2, 2, 4)


def test_many_groups_share_lanes_by_gpu_type():
    spec = {"name": "ones", "node_groups": [
        {"name": f"g{i}", "gpu": gpu, "nodes": 1, "gpus_per_node": 8}
        for i, gpu in enumerate(["H100-SXM5-80GB"] * 6 + ["A100-SXM4-80GB"] * 5 + ["V100-SXM2-32GB"] * 5)]}
    parts = decompose(cluster_from_spec(spec), 8, 4)
    assert len(parts.lanes) == 3 and sum(parts.counts) == 4
    # a stage on a lane's first part takes whole nodes of several one-node groups
    first = parts.nodes((0, 0, 0), (1, 0, 0))
    assert sum(first) == part_sizes(parts.lanes[0])[0] and max(first) == 1
    assert parts.after((0, 0, 0), first) == (1, 0, 0)


@pytest.mark.parametrize("seed", [0, 3, 7, 11, 19, 23])
def test_search_on_parts_lies_between_the_exact_optimum_and_the_uniform_fallback(seed):
    # forcing tiny clusters onto parts of up to two nodes: its plans are a subset of the exact
    # search's, and on these shapes it never loses to the uniform configuration on whole nodes
    model, cluster, base = tiny_instance(seed)
    exact = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    coarse = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS, max_exact_nodes=0, max_bundle_nodes=2))
    assert exact.optimal and not coarse.optimal and coarse.decomposition != "exact"
    assert coarse.estimate.step_time_s >= exact.estimate.step_time_s * (1 - 1e-9)
    from planner.cost.runtimes.capability import capability
    from planner.search.orchestration.driver import _uniform_space, within
    cap = capability(base.runtime)  # runtime: any (tiny_instance)
    options = within(SolverOptions(**TINY_OPTIONS), cap)
    uniform = best_uniform(SearchContext(model, cluster, base, options), _uniform_space(options, cap))
    if uniform is not None:
        assert coarse.estimate.step_time_s <= uniform[1].step_time_s * (1 + 1e-9)
