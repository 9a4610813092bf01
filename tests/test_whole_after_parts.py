"""A cluster too large to be searched whole at once is searched on parts first, then whole,
node by node, bounded by the plan on parts, in the time left (planner.search.orchestration.scale)."""

from __future__ import annotations


import pytest

from planner.cost.evaluate import evaluate
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training, structural_problems
from planner.search.orchestration.driver import SolverOptions, solve
from planner.verify.instances import TINY_OPTIONS, tiny_instance

from .conftest import TickingClock, three_types

SEEDS = [0, 3, 7, 11, 19, 23]
ON_PARTS = dict(max_exact_nodes=0, max_bundle_nodes=2)  # tiny clusters forced onto parts of up to two nodes


def searches(seed: int):
    """The exact search, the search on parts alone and the search on parts then whole, of one instance."""
    model, cluster, base = tiny_instance(seed)
    exact = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    parts = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS, **ON_PARTS, time_limit_s=600,
                                                      whole_after_parts=False))
    both = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS, **ON_PARTS, time_limit_s=600))
    return exact, parts, both


@pytest.mark.parametrize("seed", SEEDS)
def test_the_whole_search_after_parts_returns_the_exact_optimum_proven(seed):
    exact, parts, both = searches(seed)
    assert exact.optimal and not parts.optimal and parts.decomposition != "exact"
    assert both.optimal and both.gap == 0 and both.decomposition == "exact" and both.bundles == 1
    assert both.not_proven == "" and "not_proven" not in both.solver_json()
    assert both.estimate.step_time_s == pytest.approx(exact.estimate.step_time_s, rel=1e-9)
    assert not structural_problems(both.plan) and both.estimate.fits


def test_both_ways_to_a_proof_are_taken():
    # where the plan on parts is already optimal the whole search finds nothing faster and proves it;
    # elsewhere it returns its own, faster plan
    kept = faster = 0
    for seed in SEEDS:
        exact, parts, both = searches(seed)
        if parts.estimate.step_time_s <= exact.estimate.step_time_s * (1 + 1e-9):
            kept += 1
            assert both.plan == parts.plan
        else:
            faster += 1
            assert both.estimate.step_time_s < parts.estimate.step_time_s
    assert kept and faster


def test_a_whole_cluster_of_too_many_node_vectors_is_left_to_its_parts():
    # the whole search's tables grow with prod(nodes + 1); above SolverOptions.max_whole_vectors only
    # the parts are searched, within the whole time limit
    model, cluster, base = tiny_instance(SEEDS[0])
    result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS, **ON_PARTS, time_limit_s=600,
                                                       max_whole_vectors=1))
    assert not result.optimal and result.decomposition != "exact"
    assert result.not_proven == f"searched on {result.decomposition} only"


def test_without_a_time_limit_only_the_parts_are_searched():
    model, cluster, base = tiny_instance(SEEDS[0])
    result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS, **ON_PARTS))
    assert not result.optimal and result.decomposition != "exact"
    assert result.not_proven == f"searched on {result.decomposition} only" == result.solver_json()["not_proven"]


@pytest.mark.slow
def test_the_time_limit_holds_when_the_whole_search_cannot_finish():
    # 3 + 3 + 4 nodes on parts of up to two nodes: the whole search takes minutes, so it is cut
    # short; the plan on parts (or a faster one) comes back within the limit, not proven
    cluster = cluster_from_spec(three_types(3, 3, 4), "test")
    training = Training(80, 4096, "fp16", 1)
    clock = TickingClock(2e-4)  # about wall seconds on this shape
    result = solve(load_model("llama-3-70b"), cluster, training,
                   SolverOptions(time_limit_s=4.0, max_exact_nodes=0, max_bundle_nodes=2, jobs=1, clock=clock))
    assert clock.now_s <= 4.0 * 1.1, clock.now_s  # stopped within a few clock checks of the limit
    assert not result.optimal and 0 < result.gap < 1
    assert "cut short" in result.not_proven, result.not_proven
    assert evaluate(result.plan).step_time_s == pytest.approx(result.estimate.step_time_s)


def test_a_plan_of_decoders_of_several_shapes_says_why_it_is_not_proven():
    # Gemma-2's windowed and global layers are searched at their mean cost: a complete search of
    # the whole cluster still proves nothing, and the plan says so
    result = solve(load_model("gemma-2-9b"), cluster_from_spec(
        {"name": "dgx", "node_groups": [{"name": "a100", "gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8}]}),
        Training(64, 4096, "bf16", 1), SolverOptions(jobs=1))
    assert result.decomposition == "exact" and not result.optimal
    assert result.not_proven == "decoder blocks of several shapes are searched at their count-weighted mean cost"
