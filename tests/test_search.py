"""The solver against a brute-force oracle, local optimality, and its contract."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.core.errors import NoFeasiblePlan
from planner.cost.runtimes.capability import violations
from planner.search.orchestration.driver import SolverOptions, solve
from planner.verify.oracle import brute_force
from planner.verify.instances import TINY_OPTIONS, per_replica_tp_instance, pipeline_instance, tiny_instance

from .conftest import assert_solves_to_the_optimum, runtime_base

pytestmark = pytest.mark.slow  # every test here solves the oracle's instances (`make test-fast` leaves them out)


# the instances whose brute force prices 10^5 plans or more (a minute or more on 2 cores), and those
# taking 5 s or more on 2 cores: `make test-exhaustive`
EXHAUSTIVE_SEEDS = (4, 6, 11, 15, 16, 17, 22, 25, 27, 29, 33, 34, 35, 36, 37, 38, 40, 44, 47)


@pytest.mark.parametrize("seed", [pytest.param(seed, marks=pytest.mark.exhaustive) if seed in EXHAUSTIVE_SEEDS else seed
                                  for seed in range(50)])
def test_solver_equals_brute_force_optimum(seed):
    model, cluster, base = tiny_instance(seed)
    assert cluster.num_gpus <= 8 and model.num_layers <= 10
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"])
    assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**TINY_OPTIONS))


@pytest.mark.parametrize("seed", range(12))
def test_solver_equals_brute_force_on_forced_pipelines_with_interleaving(seed):
    model, cluster, base = pipeline_instance(seed)
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"])
    result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("seed", range(16))
def test_solver_equals_brute_force_with_per_replica_tp(seed):
    """Stages over two GPU types whose replicas may run different TP degrees (Replica.tp): the oracle
    enumerates every degree per group, as the search does."""
    model, cluster, base = per_replica_tp_instance(seed)
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], virtual_stages=TINY_OPTIONS["virtual_stages"])
    assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**TINY_OPTIONS))


def test_per_replica_tp_instances_include_a_mixed_optimum():
    """Some instance's optimum gives its replicas different TP degrees (and the search finds it)."""
    chosen = [solve(*per_replica_tp_instance(seed), SolverOptions(**TINY_OPTIONS)).plan for seed in range(16)]
    assert any(s.mixed_tp for plan in chosen for s in plan.stages)


RUNTIME_CASES = [(runtime, seed) for runtime in ("megatron", "torchtitan", "deepspeed", "megatron-2021", "fsdp1")
                 for seed in range(12)]


@pytest.mark.parametrize("runtime,seed", RUNTIME_CASES)
def test_solver_equals_brute_force_within_each_runtime(runtime, seed):
    """The search under --runtime R is exact within what R can run: the brute force over
    every plan, keeping those capability.violations allows, finds the same optimum."""
    model, cluster, base = tiny_instance(seed) if seed % 2 else pipeline_instance(seed)
    base = runtime_base(cluster, base, runtime)
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], zero_stages=(0, 1, 2, 3),
                                 virtual_stages=TINY_OPTIONS["virtual_stages"], runtime=runtime)
    result = assert_solves_to_the_optimum(expected, model, cluster, base, SolverOptions(**TINY_OPTIONS))
    assert result is None or not violations(result.plan, runtime)


def test_runtime_oracle_instances_cover_constrained_and_free_differences():
    """Megatron's space is narrower on the oracle instances: some plan of `any` is faster."""
    faster = 0
    for seed in range(0, 12):
        model, cluster, base = tiny_instance(seed) if seed % 2 else pipeline_instance(seed)
        free = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS)).estimate.step_time_s
        try:
            mega = solve(model, cluster, replace(base, runtime="megatron"), SolverOptions(**TINY_OPTIONS))
        except NoFeasiblePlan:
            continue
        assert mega.estimate.step_time_s >= free * (1 - 1e-9)
        faster += mega.estimate.step_time_s > free * (1 + 1e-6)
    assert faster >= 2, faster


def test_interleaved_schedule_is_chosen_where_its_smaller_bubble_wins():
    results = [solve(*pipeline_instance(seed), SolverOptions(**TINY_OPTIONS)) for seed in range(12)]
    interleaved = [r for r in results if r.plan.training.schedule == "interleaved"]
    assert len(interleaved) >= 3
    for result in interleaved:
        plan = result.plan
        assert plan.training.virtual_stages == 2 and len(plan.stages) == 2 * plan.pp
        # every chunk holds at least one decoder block
        for stage in plan.stages:
            assert any(plan.model.layers[i].kind == "decoder" for i in range(*stage.layers))
    # 1F1B alone is strictly slower exactly where the interleaved plan was chosen
    for seed, result in enumerate(results):
        plain = solve(*pipeline_instance(seed), SolverOptions(**{**TINY_OPTIONS, "virtual_stages": (1,)}))
        assert plain.plan.training.schedule == "1f1b"
        if result.plan.training.schedule == "interleaved":
            assert plain.estimate.step_time_s > result.estimate.step_time_s
        else:
            assert plain.estimate.step_time_s == pytest.approx(result.estimate.step_time_s, rel=1e-12)


def test_oracle_instances_cover_pipelines_uneven_shares_and_mixed_stages():
    """The oracle instances `make test` checks (all but EXHAUSTIVE_SEEDS) must exercise what the solver
    claims to search."""
    multi = uneven = mixed = 0
    for seed in (seed for seed in range(50) if seed not in EXHAUSTIVE_SEEDS):
        model, cluster, base = tiny_instance(seed)
        plan = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS)).plan
        multi += len(plan.stages) > 1
        uneven += any(len({r.batch_share for r in s.replicas}) > 1 for s in plan.stages)
        mixed += any(len({cluster.group_of_rank(r.ranks[0]).gpu.name for r in s.replicas}) > 1
                     for s in plan.stages)
    assert multi >= 10 and uneven >= 5 and mixed >= 3, (multi, uneven, mixed)
