"""A one-DP runtime (Megatron) on parts of unequal size also searches the cluster trimmed to
identical bundles (planner.search.decompose.trim, planner.search.orchestration.driver.solve)."""

from __future__ import annotations

import time

import pytest

from planner.api import plan_json
from planner.core.errors import NoFeasiblePlan
from planner.cost.evaluate import evaluate
from planner.cost.runtimes.capability import violations
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import model_from_dict
from planner.plan import Training
from planner.search.decompose import decompose, trim
from planner.search.orchestration.driver import SolverOptions, _solve, solve
from planner.search.pricing.stage_types import SearchContext
from planner.verify.plan_checks import check_plan_data

from .conftest import TickingClock, three_types

# one GPU a node, no TP, one micro-batch size: the search is cheap
OPTIONS = dict(micro_batches=(1,), tp_degrees=(1,), recompute_modes=("none", "full"), virtual_stages=(1,),
               offload=False, zero_bubble=False, max_exact_nodes=0, max_bundle_nodes=3)


def instance(memory_gib: float, runtime: str = "megatron"):
    """A 6-block model on 2 H100 + 2 A100 + 3 V100 one-GPU nodes of `memory_gib` each: parts
    2 / 2 / 3 under max_bundle_nodes=3, whose stages' replica counts differ by lane."""
    model = model_from_dict({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 6,
                             "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 4096,
                             "vocab_size": 4096}, "tiny-6")
    gpus = {name: {"memory_GiB": memory_gib} for name in ("H100-SXM5-80GB", "A100-SXM4-80GB", "V100-SXM2-32GB")}
    groups = [{"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": 1,
               "inter_node": {"bandwidth_GBps": nic, "latency_us": 5}}
              for name, gpu, nodes, nic in zip("hav", gpus, (2, 2, 3), (400, 200, 50))]
    cluster = cluster_from_spec({"name": "two-two-three", "gpus": gpus, "node_groups": groups})
    return model, cluster, Training(12, 1024, "fp16", 1, runtime=runtime)


@pytest.mark.parametrize("nodes, batch, most, bundles, kept, idle", [
    ((31, 47, 49), 1015, 4, 29, (29, 29, 29), 40),  # 31 bundles would keep 93, but 31 does not divide 1,015
    ((31, 47, 49), 1016, 4, None, None, None),  # 1,016 = 8 x 127: 2, 4 or 8 bundles need more than 4 nodes each
    ((31, 47, 49), 1016, 16, 8, (24, 40, 48), 15),  # bundles of 14 nodes
    ((32, 32, 63), 1016, 16, 8, (32, 32, 56), 7),
    ((31, 47, 50), 1024, 4, 32, (0, 32, 32), 64),  # the H100 group is dropped
    ((3, 3, 4), 81, 4, 3, (3, 3, 3), 1),  # 3 bundles keep 9 nodes, 2 bundles only 8
    ((3, 3, 4), 80, 16, 2, (2, 2, 4), 2),  # 3 does not divide 80; searched node by node
    ((4, 4, 6), 12, 4, 3, (3, 3, 6), 2),  # a tie: 4 bundles (4 / 4 / 4) keep 12 too; the fewer bundles win
])
def test_trim_keeps_the_most_nodes_in_bundles_of_a_bounded_size(nodes, batch, most, bundles, kept, idle):
    original = cluster_from_spec(three_types(*nodes))
    cut = trim(original, 8, 4, batch, most)
    if kept is None:
        assert cut is None
        return
    assert cut.bundles == bundles and cut.idle_nodes == idle
    assert tuple(g.nodes for g in cut.cluster.groups) == tuple(n for n in kept if n)
    assert cut.describe("x").startswith(" / ".join(map(str, kept)) + " nodes")
    assert cut.bundle_nodes <= most and decompose(cut.cluster, 8, cut.bundle_nodes).kind != "parts"
    # a trimmed group keeps its group's first nodes: rank for rank, node for node
    last = cut.cluster.groups[-1]
    assert original.device(cut.original_rank(original, last.first_rank + 9)) == \
        original.device(original.groups[-1].first_rank + 9)


def test_divisible_clusters_are_not_trimmed():
    assert trim(cluster_from_spec(three_types(32, 32, 64)), 8, 4, 1024, 16) is None
    assert trim(cluster_from_spec(three_types(2, 2, 3)), 8, 4, 56, 16) is None  # searched whole


def valid_on_original_cluster(result, cluster):
    plan = result.plan
    assert plan.cluster == cluster and violations(plan, "megatron") == ()
    assert check_plan_data(plan_json(result))[1] == []
    assert evaluate(plan).step_time_s == pytest.approx(result.estimate.step_time_s, rel=1e-9)
    assert not result.optimal and result.gap > 0


def test_megatron_on_unequal_parts_finds_no_plan_but_the_trimmed_cluster_does():
    model, cluster, base = instance(2.5)  # runtime: megatron
    options = SolverOptions(**OPTIONS)
    with pytest.raises(NoFeasiblePlan):  # the parts 2 / 2 / 3 alone
        _solve(SearchContext(model, cluster, base, options), None, time.perf_counter())
    result = solve(model, cluster, base, options)
    assert result.decomposition == "2 / 2 / 2 nodes in 2 identical bundles, 1 idle"
    valid_on_original_cluster(result, cluster)
    assert 6 not in result.plan.used_ranks()  # the third V100 node idles
    assert {len(s.replicas) for s in result.plan.stages} == {2}


def test_the_faster_of_the_parts_and_the_trimmed_plan_wins():
    model, cluster, base = instance(2.6)  # runtime: megatron
    options = SolverOptions(**OPTIONS)
    parts = _solve(SearchContext(model, cluster, base, options), None, time.perf_counter())
    assert parts.decomposition == "parts 2 / 2 / 3"
    result = solve(model, cluster, base, options)
    assert result.estimate.step_time_s < parts.estimate.step_time_s * (1 - 1e-3)
    assert result.decomposition.endswith("1 idle")
    valid_on_original_cluster(result, cluster)
    # with more memory the parts plan is faster and stays
    model, cluster, base = instance(3.0)
    assert solve(model, cluster, base, options).decomposition == "parts 2 / 2 / 3"


def test_per_stage_dp_runtimes_search_the_parts_alone():
    model, cluster, base = instance(2.5, runtime="any")
    assert solve(model, cluster, base, SolverOptions(**OPTIONS)).decomposition == "parts 2 / 2 / 3"


def test_the_trimmed_and_the_parts_search_share_the_time_limit():
    # 31 + 47 + 49 nodes (a failed node): the trimmed search (8 bundles of 14 nodes) takes half the
    # limit at most, the search on parts the rest; together they return within the limit
    from planner.inputs.model import load_model
    cluster = cluster_from_spec(three_types(31, 47, 49), "test")
    clock = TickingClock(5e-5)  # about wall seconds on this shape
    try:
        result = solve(load_model("llama-3-70b"), cluster, Training(cluster.num_gpus, 4096, "fp16", 1),
                       SolverOptions(time_limit_s=3.0, clock=clock))  # runtime: megatron (Training's default)
    except NoFeasiblePlan as exc:
        result = exc
    assert clock.now_s <= 3.0 * 1.1, clock.now_s  # stopped within a few clock checks of the limit
    if isinstance(result, NoFeasiblePlan):
        assert "time limit" in str(result)
    else:
        assert result.plan.cluster == cluster and violations(result.plan, "megatron") == ()
