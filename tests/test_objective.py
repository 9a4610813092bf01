"""`plan --objective cost|energy` and the --max-* constraints (planner.api.objective) over the subsets of
whole nodes (planner.search.subsets): the cost objective against the brute-force oracle over every
subset and every plan; the energy objective against the oracle over every subset and its fastest plan
(the plan per subset the objective search prices); the pruning rules never change the choice."""

from __future__ import annotations

import math

import pytest

from planner.api.objective import choose, subset_outcomes
from planner.api.requests import PlanRequest
from planner.cost.energy import rented_nodes, run_cost
from planner.cost.reliability import reliability
from planner.core.errors import NoFeasiblePlan
from planner.inputs.hardware import cluster_from_spec
from planner.search.orchestration.driver import SolverOptions
from planner.search.subsets import MAX_SUBSETS, Subset, coarse_sizes, subsets
from planner.verify.oracle import brute_force
from planner.verify.instances import TINY_OPTIONS, tiny_instance

ORACLE_SEEDS = (0, 8, 12, 24, 28, 32)


def oracle(model, cluster, base, figure) -> float:
    """The least `figure(plan, estimate)` over every subset of whole nodes and every plan on it."""
    best = math.inf
    for subset in subsets(cluster)[0]:
        sub, _ = subset.cluster_of(cluster)
        value, _, _ = brute_force(model, sub, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                  TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"],
                                  objective=figure)
        best = min(best, value)
    return best


def solved(model, cluster, base, request: PlanRequest, prune: bool = True):
    return choose(request, *subset_outcomes(model, cluster, base, SolverOptions(**TINY_OPTIONS), request, prune))


FIGURES = {  # the objective's figure of a plan, the less the better (SubsetOutcome.value)
    "cost": lambda plan, est: run_cost(plan, est).usd_per_step,
    "goodput": lambda plan, est: -reliability(plan, est, rented_nodes(plan)).goodput_tokens_per_s,
}


@pytest.mark.slow
@pytest.mark.parametrize("objective", sorted(FIGURES))
@pytest.mark.parametrize("seed", ORACLE_SEEDS)
def test_cost_and_goodput_objectives_find_the_best_plan_of_every_subset_and_plan(seed, objective):
    model, cluster, base = tiny_instance(seed)
    expected = oracle(model, cluster, base, FIGURES[objective])
    chosen = solved(model, cluster, base, PlanRequest(objective=objective, time_limit_s=None))
    assert chosen.proven
    assert chosen.chosen.value(objective) == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("seed", ORACLE_SEEDS)
def test_energy_objective_takes_the_least_energy_fastest_plan_of_every_subset(seed):
    model, cluster, base = tiny_instance(seed)
    expected = math.inf
    for subset in subsets(cluster)[0]:
        sub, _ = subset.cluster_of(cluster)
        _, plan, _ = brute_force(model, sub, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"])
        if plan is not None:
            expected = min(expected, run_cost(plan, _evaluate(plan)).energy_J_per_step)
    chosen = solved(model, cluster, base, PlanRequest(objective="energy", time_limit_s=None))
    assert chosen.chosen.cost.energy_J_per_step == pytest.approx(expected, rel=1e-9)


def _evaluate(plan):
    from planner.cost.evaluate import evaluate

    return evaluate(plan)


@pytest.mark.parametrize("objective", ["time", "cost", "energy", "goodput"])
def test_pruning_never_changes_the_chosen_plan(objective):
    model, cluster, base = tiny_instance(12)
    request = PlanRequest(objective=objective, time_limit_s=None, max_gpus=cluster.num_gpus)
    pruned, full = solved(model, cluster, base, request), solved(model, cluster, base, request, prune=False)
    assert pruned.chosen.value(objective) == full.chosen.value(objective)
    assert pruned.chosen.used == full.chosen.used


def test_time_objective_under_a_gpu_cap_plans_only_the_largest_subsets_that_fit():
    model, cluster, base = tiny_instance(12)
    cap = cluster.num_gpus - 1
    chosen = solved(model, cluster, base, PlanRequest(objective="time", time_limit_s=None, max_gpus=cap))
    assert chosen.chosen.subset.gpus(cluster) <= cap
    assert all(o.subset.gpus(cluster) <= cap for o in chosen.outcomes)
    assert any(o.reason.startswith("pruned: a larger set of nodes is at least as fast") for o in chosen.outcomes)


def test_a_step_limit_below_every_plan_is_no_feasible_plan():
    model, cluster, base = tiny_instance(12)
    with pytest.raises(NoFeasiblePlan, match="max-step-time"):
        solved(model, cluster, base, PlanRequest(objective="cost", time_limit_s=None, max_step_time_s=1e-6))


def test_the_time_limit_leaves_the_remaining_subsets_unsearched_and_unproven():
    model, cluster, base = tiny_instance(12)
    ticks = iter(range(0, 1000, 10))  # each clock read 10 s later: the second subset is past the limit

    outcome = subset_outcomes(model, cluster, base, SolverOptions(**TINY_OPTIONS),
                              PlanRequest(objective="cost", time_limit_s=15), True, clock=lambda: next(ticks))
    _, outcomes, _, proven = outcome
    assert not proven
    assert outcomes[0].result is not None
    assert all(o.reason == "not searched: the time limit was reached" for o in outcomes[1:])


# --- subsets ---------------------------------------------------------------------------------------


def two_groups(a_nodes: int = 2, b_nodes: int = 3, price_a: float | None = 4.0) -> dict:
    group_a = {"name": "a", "gpu": "A100-SXM4-80GB", "nodes": a_nodes, "gpus_per_node": 8}
    if price_a is not None:
        group_a["price_per_gpu_hour"] = price_a
    return {"name": "two", "node_groups": [group_a,
                                            {"name": "b", "gpu": "V100-SXM2-32GB", "nodes": b_nodes,
                                             "gpus_per_node": 4, "price_per_gpu_hour": 1.0}]}


def test_subsets_are_every_node_count_largest_first_within_the_constraints():
    cluster = cluster_from_spec(two_groups())
    found, every = subsets(cluster)
    assert every and len(found) == 3 * 4 - 1
    assert found[0] == Subset((2, 3))
    assert [s.gpus(cluster) for s in found] == sorted((s.gpus(cluster) for s in found), reverse=True)
    capped, _ = subsets(cluster, max_gpus=12)
    assert all(s.gpus(cluster) <= 12 for s in capped) and Subset((1, 1)) in capped
    cheap, _ = subsets(cluster, max_usd_per_hour=40.0)  # a node of a: $32/h, of b: $4/h
    assert Subset((1, 2)) in cheap and Subset((2, 0)) not in cheap


def test_a_large_cluster_takes_each_group_at_halvings_of_its_nodes():
    cluster = cluster_from_spec(two_groups(a_nodes=16, b_nodes=16))
    found, every = subsets(cluster)
    assert not every
    assert coarse_sizes(16) == (0, 1, 2, 4, 8, 16)
    assert len(found) == 6 * 6 - 1 <= MAX_SUBSETS


def test_a_subset_cluster_maps_its_plan_back_onto_the_same_nodes():
    cluster = cluster_from_spec(two_groups())
    sub, trim = Subset((1, 2)).cluster_of(cluster)
    assert [g.nodes for g in sub.groups] == [1, 2]
    assert trim.original_rank(cluster, 8) == 16  # b's first GPU: rank 16 of the whole cluster
    assert Subset((0, 3)).cluster_of(cluster)[0].groups[0].name == "b"
    assert Subset((1, 2)).idle(cluster) == (("a", 1, 8), ("b", 1, 4))
