"""Runs of alike node groups (one GPU type, node and network; links between them pricing like a
group's own) are searched as one group each (planner.search.decompose.merge_alike), and the plan
is the same plan on the original cluster, priced the same."""

from __future__ import annotations

import pytest

import planner.search.orchestration.scale as scale
from planner.cost.evaluate import evaluate
from planner.cost.formulas import DEFAULT_PARAMS
from planner.inputs.hardware import cluster_from_spec
from planner.search.decompose import merge_alike, prices_alike
from planner.search.orchestration.driver import SolverOptions, solve

from .test_trim import OPTIONS, instance


def one_node_groups(kinds: str, nic: dict | None = None) -> dict:
    """One-GPU nodes, each its own group: 'h' H100 (400 GB/s), 'v' V100 (50 GB/s)."""
    gpus = {"h": ("H100-SXM5-80GB", 400), "v": ("V100-SXM2-32GB", 50)}
    return {"name": f"groups-{kinds}", "node_groups": [
        {"name": f"{kind}{i}", "gpu": gpus[kind][0], "nodes": 1, "gpus_per_node": 1,
         "inter_node": (nic or {}).get(i, {"bandwidth_GBps": gpus[kind][1], "latency_us": 5})}
        for i, kind in enumerate(kinds)]}


def alike(a, b, group):
    return prices_alike(a, b, DEFAULT_PARAMS)


def test_consecutive_alike_groups_merge_in_rank_order():
    merged = merge_alike(cluster_from_spec(one_node_groups("hhhvv")), alike)
    assert [(g.name, g.nodes, g.first_rank) for g in merged.cluster.groups] == [("h0", 3, 0), ("v3", 2, 3)]
    assert merged.describe("exact") == "5 groups as 2: exact"
    # types apart, a different NIC, or Ethernet (priced at another efficiency than the default route) do not merge
    assert merge_alike(cluster_from_spec(one_node_groups("hvhv")), alike) is None
    assert merge_alike(cluster_from_spec(one_node_groups("hh", {1: {"bandwidth_GBps": 100, "latency_us": 5}})),
                       alike) is None
    # the path between two Ethernet groups is Ethernet too (NCCL's socket transport): they merge;
    # an Ethernet group beside an RDMA one of the same figure does not (the path prices as Ethernet)
    ethernet = {"kind": "100 Gb/s Ethernet", "bandwidth_GBps": 12.5, "latency_us": 5}
    rdma = {"kind": "100 Gb/s InfiniBand", "bandwidth_GBps": 12.5, "latency_us": 5}
    assert merge_alike(cluster_from_spec(one_node_groups("hh", {0: ethernet, 1: ethernet})), alike) is not None
    assert merge_alike(cluster_from_spec(one_node_groups("hh", {0: ethernet, 1: rdma})), alike) is None


@pytest.mark.parametrize("runtime", ["any", "megatron"])
def test_the_merged_search_finds_the_exact_optimum_of_the_original_cluster(monkeypatch, runtime):
    model, _, base = instance(80, runtime)
    cluster = cluster_from_spec(one_node_groups("hhhvv"))
    options = SolverOptions(**{**OPTIONS, "max_exact_nodes": 8})
    merged = solve(model, cluster, base, options)
    assert merged.decomposition.startswith("5 groups as 2: ") and merged.optimal
    assert merged.plan.cluster == cluster
    assert evaluate(merged.plan).step_time_s == pytest.approx(merged.estimate.step_time_s, rel=1e-12)
    monkeypatch.setattr(scale, "merge_alike", lambda *args: None)
    original = solve(model, cluster, base, options)
    assert original.optimal and original.decomposition == "exact"
    assert merged.estimate.step_time_s == pytest.approx(original.estimate.step_time_s, rel=1e-9)
