"""Nodes that hold two GPU types (formats.md section 1, `gpu:` as one type per local rank): one node
group per type on the same nodes, the links between them, their share of what a node has once, the
plans found on them (the brute-force oracle) and how a plan on them runs and exports."""

import json

import pytest
from click.testing import CliRunner

from planner.cli import main
from planner.core.errors import BadInput, NoFeasiblePlan
from planner.cost.energy import run_cost
from planner.cost.evaluate import evaluate
from planner.cost.paths import pair_link
from planner.cost.reliability import node_failures_per_h
from planner.inputs.hardware import GB, cluster_from_spec, load_cluster
from planner.search.orchestration.driver import SolverOptions, solve
from planner.search.orchestration.space import uniform_space
from planner.search.pricing.stage_types import SearchContext
from planner.search.uniform import best_uniform
from planner.cost.runtimes.capability import capability
from planner.verify.instances import TINY_OPTIONS, mixed_node_instance

from .conftest import oracle_optimum, solved_plans

WORKSTATION = "workstation-4090-3090"


def box(**extra) -> dict:
    group = {"name": "box", "gpu": ["RTX-4090", "RTX-4090", "RTX-3090", "RTX-3090"], "nodes": 1,
             "intra_node": {"bandwidth_GBps": 25, "latency_us": 10},
             "inter_node": {"bandwidth_GBps": 1.25, "latency_us": 50}, **extra}
    return {"name": "c", "node_groups": [group]}


def test_a_mixed_node_group_is_one_group_per_gpu_type_on_the_same_nodes():
    cluster = cluster_from_spec(box(nodes=2))
    fast, slow = cluster.groups
    assert (fast.name, fast.gpu.name, fast.gpus_per_node, fast.nodes) == ("box/RTX-4090", "RTX-4090", 2, 2)
    assert (slow.name, slow.local_ranks, slow.machine, slow.gpus_in_node) == ("box/RTX-3090", (2, 3), "box", 4)
    # ranks type by type, node by node; each device keeps its node and its CUDA index in the node
    devices = [(d.rank, d.group, d.node, d.local_rank) for d in cluster.devices()]
    assert devices[:4] == [(0, "box/RTX-4090", 0, 0), (1, "box/RTX-4090", 0, 1),
                           (2, "box/RTX-4090", 1, 0), (3, "box/RTX-4090", 1, 1)]
    assert devices[4:6] == [(4, "box/RTX-3090", 0, 2), (5, "box/RTX-3090", 0, 3)]


def test_types_listed_apart_in_a_node_keep_their_local_ranks():
    spec = box()
    spec["node_groups"][0]["gpu"] = ["RTX-3090", "RTX-4090", "RTX-3090", "RTX-4090"]
    first, second = cluster_from_spec(spec).groups
    assert (first.gpu.name, first.local_ranks, second.local_ranks) == ("RTX-3090", (0, 2), (1, 3))


def test_a_bridge_joining_every_gpu_of_a_type_is_their_link():
    bridge = {"between": [2, 3], "kind": "NVLink bridge", "bandwidth_GBps": 56, "latency_us": 3}
    fast, slow = cluster_from_spec(box(bridges=[bridge])).groups
    assert slow.intra_node.kind == "NVLink bridge" and slow.intra_node.bandwidth_bytes_per_s == 56 * GB
    assert fast.intra_node.bandwidth_bytes_per_s == 25 * GB  # no bridge between the RTX 4090s


def test_two_types_of_a_workstation_talk_over_its_fabric_and_of_a_lab_over_the_nic():
    one = cluster_from_spec(box())
    link = pair_link(one, "box/RTX-4090", "box/RTX-3090")
    assert link.bandwidth_bytes_per_s == 25 * GB  # each GPU's own PCIe slot, not shared
    lab = cluster_from_spec(box(nodes=2))
    link = pair_link(lab, "box/RTX-4090", "box/RTX-3090")
    assert link.bandwidth_bytes_per_s == pytest.approx(1.25 * GB / 4)  # the NIC, over the node's 4 GPUs


def test_links_naming_a_mixed_group_join_each_of_its_types():
    spec = box()
    spec["node_groups"].append({"name": "far", "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8})
    spec["links"] = [{"between": ["box", "far"], "bandwidth_GBps": 0.5, "latency_us": 900}]
    cluster = cluster_from_spec(spec)
    for part in ("box/RTX-4090", "box/RTX-3090"):
        assert cluster.group_link(part, "far").bandwidth_bytes_per_s == 0.5 * GB


def test_the_types_of_a_node_bring_its_own_failures_once():
    from planner.cost.reliability import gpu_mtbf_h
    fast, slow = cluster_from_spec(box(node_mtbf_hours=1000, preemptions_per_hour=0.5)).groups
    assert fast.node_share + slow.node_share == 1
    node_terms = sum(node_failures_per_h(g) - g.gpus_per_node / gpu_mtbf_h(g) for g in (fast, slow))
    assert node_terms == pytest.approx(1 / 1000 + 0.5)


@pytest.mark.parametrize("bad, path, words", [
    (dict(gpus_per_node=3), "node_groups[0].gpu", "lists 4 GPUs"),
    (dict(gpu=["RTX-4090", "NoSuchCard"]), "node_groups[0].gpu[1]", "unknown GPU"),
    (dict(gpu=[]), "node_groups[0].gpu", "non-empty list"),
    (dict(bridges=[{"between": [0, 4], "bandwidth_GBps": 50}]), "node_groups[0].bridges[0].between", "0 to 3"),
    (dict(bridges=[{"between": [1, 1], "bandwidth_GBps": 50}]), "node_groups[0].bridges[0].between", "two different"),
    (dict(bridges=[{"between": [0, 1], "bandwidth_GBps": 50}, {"between": [1, 0], "bandwidth_GBps": 9}]),
     "node_groups[0].bridges[1].between", "a second bridge"),
    (dict(bridges=[{"between": [0, 1], "bandwith_GBps": 50}]), "node_groups[0].bridges[0].bandwith_GBps", "unknown key"),
])
def test_a_malformed_mixed_node_is_bad_input_naming_the_field(bad, path, words):
    with pytest.raises(BadInput) as caught:
        cluster_from_spec(box(**bad), "c.yaml")
    assert f"c.yaml: {path}:" in str(caught.value) and words in str(caught.value)


def test_a_group_named_like_a_mixed_groups_type_is_bad_input():
    spec = box()
    spec["node_groups"].append({"name": "box/RTX-3090", "gpu": "T4", "nodes": 1, "gpus_per_node": 1})
    with pytest.raises(BadInput, match="rename one"):
        cluster_from_spec(spec, "c.yaml")


def _oracle_optimum(seed: int) -> float:
    """The least step time over the oracle's whole-node plans and the solver's uniform plans on parts
    of nodes (its seed space: planner.search.orchestration.driver), inf where neither fits."""
    model, cluster, base = mixed_node_instance(seed)
    expected = oracle_optimum(model, cluster, base, TINY_OPTIONS)
    options = SolverOptions(**TINY_OPTIONS)
    uniform = best_uniform(SearchContext(model, cluster, base, options),
                           uniform_space(options, capability("any"), whole_nodes=False))
    return min(expected, uniform[1].step_time_s if uniform else float("inf"))


# the instances whose oracle takes 15 s or more on 2 cores: `make test-exhaustive`
EXHAUSTIVE_SEEDS = (3, 5, 9)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [pytest.param(seed, marks=pytest.mark.exhaustive) if seed in EXHAUSTIVE_SEEDS else seed
                                  for seed in range(12)])
def test_solver_equals_brute_force_on_mixed_nodes(seed):
    model, cluster, base = mixed_node_instance(seed)
    expected = _oracle_optimum(seed)
    try:
        result = solve(model, cluster, base, SolverOptions(**TINY_OPTIONS))
    except NoFeasiblePlan:
        assert expected == float("inf")
        return
    assert result.optimal
    assert result.estimate.step_time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
def test_mixed_node_instances_plan_over_both_types_somewhere():
    both = 0
    for plan in solved_plans(mixed_node_instance, range(12), SolverOptions(**TINY_OPTIONS)):
        cluster = plan.cluster
        machines = {cluster.group_of_rank(r).name for st in plan.stages for rep in st.replicas for r in rep.ranks}
        both += {"box/" + g.gpu.name for g in cluster.groups if g.machine} <= machines
    assert both >= 3


def test_workstation_plan_uses_both_types_validates_and_launches_each_on_its_cuda_devices(tmp_path):
    out = tmp_path / "plan.json"
    runner = CliRunner()
    result = runner.invoke(main, ["plan", "--model", "gpt2-medium", "--cluster", WORKSTATION, "--global-batch", "64",
                                  "--seq-len", "1024", "--json", "-o", str(out)])
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    cluster = load_cluster(WORKSTATION)
    used = {cluster.group_of_rank(r).gpu.name for st in plan["stages"] for rep in st["replicas"] for r in rep["ranks"]}
    assert used == {"RTX-4090", "RTX-3090"}
    assert runner.invoke(main, ["validate", str(out)]).exit_code == 0
    rankmap = runner.invoke(main, ["export", str(out), "--to", "rankmap"])
    assert rankmap.exit_code == 0, rankmap.output
    ranks = json.loads(rankmap.output)["ranks"]
    assert sorted((r["group"], r["local_rank"]) for r in ranks) == [
        ("ws/RTX-3090", 2), ("ws/RTX-3090", 3), ("ws/RTX-4090", 0), ("ws/RTX-4090", 1)]
    assert any("CUDA_VISIBLE_DEVICES=2,3" in entry["torchrun"] for entry in json.loads(rankmap.output)["launch"])


def test_a_plan_on_a_workstation_prices_its_node_power_once():
    cluster = cluster_from_spec(box(node_power_W=400))
    from planner.inputs.model import model_from_dict
    from planner.plan import Training
    model = model_from_dict({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 2,
                             "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 4096,
                             "vocab_size": 4096}, "m")
    plan = solve(model, cluster, Training(8, 1024, "bf16", 1, runtime="any"), SolverOptions()).plan
    estimate = evaluate(plan)
    cost = run_cost(plan, estimate)
    used = {cluster.group_of_rank(r).name for st in plan.stages for rep in st.replicas for r in rep.ranks}
    share = sum(cluster.group(name).node_share for name in used)
    node_J = (cost.energy_J_per_step / cost.pue) - cost.gpu_energy_J_per_step
    assert node_J == pytest.approx(400 * share * estimate.step_time_s)


def test_a_lost_node_of_a_mixed_group_takes_every_type_of_it():
    from planner.api.replan import changed_cluster, parse_change
    cluster = cluster_from_spec(box(nodes=3))
    change = parse_change(cluster, ("box/1",), ())
    after, survivors = changed_cluster(cluster, change)
    assert [(g.name, g.nodes) for g in after.groups] == [("box/RTX-4090", 2), ("box/RTX-3090", 2)]
    assert survivors[("box/RTX-3090", 2)] == ("box/RTX-3090", 1) and ("box/RTX-4090", 1) not in survivors
    with pytest.raises(BadInput, match="holds RTX-3090, RTX-4090, not T4"):
        parse_change(cluster, (), ("box:1:T4",))


def test_a_mixed_groups_price_holds_for_every_gpu_else_each_costs_its_catalog_price():
    fast, slow = cluster_from_spec(box(price_per_gpu_hour=0.5)).groups
    assert fast.price_usd_per_gpu_s == slow.price_usd_per_gpu_s == pytest.approx(0.5 / 3600)
    fast, slow = cluster_from_spec(box()).groups
    assert (fast.price_usd_per_gpu_s, slow.price_usd_per_gpu_s) == (fast.gpu.price_usd_per_gpu_s,
                                                                    slow.gpu.price_usd_per_gpu_s)
    assert fast.price_usd_per_gpu_s != slow.price_usd_per_gpu_s
