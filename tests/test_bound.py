"""The lower bound on the step time (planner.search.bounds.bound)."""

from __future__ import annotations

import pytest

from planner.cost.runtimes.capability import capability
from planner.search.bounds.bound import busy_bound_s, compute_lower_bound_s, pipeline_bound_s
from planner.search.orchestration.space import within
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import load_model
from planner.plan import Training
from planner.search.bounds.completion import block_gpu_seconds, seconds_per_block_left
from planner.search.decompose import decompose
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.pricing.stage_types import ProblemInputs, SearchContext
from planner.verify.oracle import brute_force
from planner.verify.instances import TINY_OPTIONS, pipeline_instance, tiny_instance

from .conftest import runtime_base, three_types


@pytest.mark.parametrize("make, seed", [(tiny_instance, s) for s in range(0, 50, 5)]
                         + [(pipeline_instance, s) for s in range(0, 12, 3)])
def test_lower_bound_never_exceeds_the_proven_optimum_on_oracle_instances(make, seed):
    """The solver's optimum equals the brute-force oracle's on these (tests/test_search.py)."""
    model, cluster, base = make(seed)
    options = SolverOptions(**TINY_OPTIONS)
    result = solve(model, cluster, base, options)
    assert result.optimal
    assert 0 < result.lower_bound_s <= result.estimate.step_time_s * (1 + 1e-9)
    # the DP's completion bound (planner.search.bounds.completion) from the empty state, at the optimum's
    # micro-batch: the least busy time its decoder blocks force on the whole cluster
    inputs = ProblemInputs.of(SearchContext(model, cluster, base, options), result.plan.training.micro_batch,
                              decompose(cluster, options.exact_node_limit(capability(base.runtime).per_stage_dp),
                                        options.max_bundle_nodes), 1)
    kappas = tuple(block_gpu_seconds(inputs, g) for g in range(len(inputs.groups)))
    forced = seconds_per_block_left(inputs, kappas, (0,) * len(inputs.bundle_nodes)) * inputs.num_blocks
    assert 0 < forced <= result.estimate.step_time_s * (1 + 1e-9)


def test_lower_bound_counts_the_optimizer_step():
    cluster = cluster_from_spec(three_types(2, 2, 4))
    model, base, options = load_model("llama-3-70b"), Training(64, 4096, "fp16", 1), SolverOptions(micro_batches=(1,))
    compute_only = compute_lower_bound_s(SearchContext(model, cluster, base, options), with_optimizer=False)
    with_steps = compute_lower_bound_s(SearchContext(model, cluster, base, options))
    # 70.6 G parameters at 28 bytes each over HBM: about 13 ms spread over the 64 GPUs
    assert with_steps > compute_only + 5e-3



# (runtime, instance, seed): oracle instances where the ranks' wait binds (pipeline_bound_s above
# busy_bound_s), across even shares (megatron, deepspeed, torchtitan) and memory that forces pipelines
WAIT_BINDS = [("megatron", pipeline_instance, 9), ("megatron", pipeline_instance, 11),
              ("deepspeed", tiny_instance, 1), ("torchtitan", tiny_instance, 26)]


@pytest.mark.slow
@pytest.mark.parametrize("runtime, make, seed", WAIT_BINDS)
def test_pipeline_bound_binds_yet_never_exceeds_the_brute_force_optimum(runtime, make, seed):
    model, cluster, base = make(seed)
    base = runtime_base(cluster, base, runtime)
    expected, _, _ = brute_force(model, cluster, base, TINY_OPTIONS["micro_batches"], TINY_OPTIONS["tp_degrees"],
                                 TINY_OPTIONS["recompute_modes"], zero_stages=(0, 1, 2, 3),
                                 virtual_stages=TINY_OPTIONS["virtual_stages"], runtime=runtime)
    options = within(SolverOptions(**TINY_OPTIONS), capability(runtime))
    busy = busy_bound_s(SearchContext(model, cluster, base, options))
    wait = pipeline_bound_s(SearchContext(model, cluster, base, options))
    assert wait > busy * 1.01
    assert wait <= expected * (1 + 1e-9)
    assert compute_lower_bound_s(SearchContext(model, cluster, base, options)) == max(busy, wait)


def test_pipeline_bound_charges_the_slow_ranks_under_megatron():
    """llama-3-70b on 16 H100, 16 A100 and 32 V100: V100s hold a few blocks each (32 GiB) or
    run at tp 8, and under even shares share no rank with faster GPUs; the others wait for
    their ranks. The busy-time bound ignores it (7.999 s against a proven 9.997 s optimum)."""
    cluster = cluster_from_spec(three_types(2, 2, 4))
    model = load_model("llama-3-70b")
    base = Training(64, 4096, "fp16", 1, runtime="megatron")
    options = within(SolverOptions(micro_batches=(1, 2)), capability("megatron"))
    busy = busy_bound_s(SearchContext(model, cluster, base, options))
    wait = pipeline_bound_s(SearchContext(model, cluster, base, options))
    assert wait > busy * 1.08
