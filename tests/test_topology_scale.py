"""A cluster of many node groups loads in time linear in its file (planner.inputs.topology): loading
searches no route, a pair's route is searched once when first asked for, and groups with the same
edges to switches share their searches. Counted in searches, never in seconds."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from planner.inputs import topology
from planner.inputs.hardware import GB, US, cluster_from_spec
from planner.search.pricing.stage_types import SearchContext


def many_groups(n: int, leaves: int = 0) -> dict:
    """n one-node groups; with `leaves`, each behind leaf i % leaves, the leaves behind one spine."""
    spec: dict = {"name": "many", "node_groups": [
        {"name": f"g{i}", "gpu": "A100-SXM4-80GB" if i % 2 else "H100-SXM5-80GB", "nodes": 1, "gpus_per_node": 8}
        for i in range(n)]}
    if leaves:
        spec["topology"] = {"switches": ["spine"] + [f"leaf{j}" for j in range(leaves)], "links": [
            *({"between": [f"g{i}", f"leaf{i % leaves}"], "bandwidth_GBps": 50, "latency_us": 2} for i in range(n)),
            *({"between": [f"leaf{j}", "spine"], "bandwidth_GBps": 400, "latency_us": 3} for j in range(leaves))]}
    return spec


@pytest.fixture
def searches(monkeypatch) -> dict:
    """Calls of each route search, counted."""
    counts = {"pair": 0, "widest": 0, "latency": 0}

    def counting(key, real):
        def wrapper(*args):
            counts[key] += 1
            return real(*args)
        return wrapper

    monkeypatch.setattr(topology.Topology, "_search", counting("pair", topology.Topology._search))
    monkeypatch.setattr(topology, "widest_from", counting("widest", topology.widest_from))
    monkeypatch.setattr(topology, "least_latency_from", counting("latency", topology.least_latency_from))
    return counts


def test_a_cluster_of_1000_node_groups_loads():
    cluster = cluster_from_spec(many_groups(1000), "many.yaml")
    assert len(cluster.groups) == 1000 and cluster.num_gpus == 8000
    link = cluster.group_link("g0", "g999")
    assert link.kind.endswith(topology.DEFAULT_KIND)
    assert cluster.link(0, 8 * 999) == link


def test_loading_searches_no_route_and_each_pair_is_searched_once(searches):
    cluster = cluster_from_spec(many_groups(300), "many.yaml")
    assert searches["pair"] == 0
    first = cluster.group_link("g1", "g2")
    assert cluster.group_link("g2", "g1") == first and cluster.link(8, 16) == first
    assert searches["pair"] == 1


def test_a_switch_fabric_of_1000_groups_loads_without_a_search_and_shares_them_by_signature(searches):
    cluster = cluster_from_spec(many_groups(1000, leaves=10), "fabric.yaml")
    assert searches == {"pair": 0, "widest": 0, "latency": 0}
    names = [f"g{i}" for i in range(100)]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            cluster.group_link(a, b)
    assert searches["pair"] == 100 * 99 // 2
    assert searches["widest"] <= 10 and searches["latency"] <= 10  # one per leaf a search starts from
    same_leaf, across = cluster.group_link("g0", "g10"), cluster.group_link("g0", "g1")
    assert (same_leaf.bandwidth_bytes_per_s, same_leaf.latency_s, same_leaf.kind) == (50 * GB, pytest.approx(4 * US),
                                                                                      "via leaf0")
    assert (across.bandwidth_bytes_per_s, across.kind) == (50 * GB, "via leaf0, spine, leaf1")


def test_a_cluster_of_1000_groups_without_a_route_between_two_is_bad_input():
    spec = many_groups(1000, leaves=10)
    spec["topology"]["links"] = [e for e in spec["topology"]["links"] if e["between"] != ["leaf9", "spine"]]
    with pytest.raises(topology.BadInput, match="no route between node groups 'g0' and 'g109'"):
        cluster_from_spec(spec, "fabric.yaml")


def _brute_force(graph: nx.Graph, switches: list[str], a: str, b: str) -> tuple[float, float] | None:
    """(widest bottleneck, least latency among the widest) over every simple path through switches."""
    transit = graph.subgraph([a, b, *switches])
    best = None
    for path in nx.all_simple_paths(transit, a, b):
        hops = [transit[u][v]["link"] for u, v in zip(path, path[1:])]
        key = (min(h.bandwidth_bytes_per_s for h in hops), -sum(h.latency_s for h in hops))
        best = key if best is None or key > best else best
    return None if best is None else (best[0], -best[1])


@pytest.mark.parametrize("seed", range(30))
def test_a_route_is_the_widest_then_least_latency_path_of_all_simple_paths(seed):
    rng = random.Random(seed)
    groups = [f"g{i}" for i in range(rng.randint(2, 5))]
    switches = [f"s{j}" for j in range(rng.randint(1, 4))]
    links = [{"between": [g, rng.choice(switches)], "bandwidth_GBps": rng.choice([10, 25, 50]),
              "latency_us": rng.choice([1, 2, 5])} for g in groups]
    pairs = {tuple(sorted(rng.sample(groups + switches, 2))) for _ in range(6)} - {
        tuple(sorted(link["between"])) for link in links}
    links += [{"between": list(p), "bandwidth_GBps": rng.choice([10, 25, 50, 100]), "latency_us": rng.choice([1, 3])}
              for p in sorted(pairs)]
    used = {x for link in links for x in link["between"]}
    spec = many_groups(0) | {"node_groups": [{"name": g, "gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 8}
                                             for g in groups],
                             "topology": {"switches": [s for s in switches if s in used], "links": links}}
    try:
        cluster = cluster_from_spec(spec, "random.yaml")
    except topology.BadInput as exc:
        assert "no route" in str(exc)
        return
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            link = cluster.group_link(a, b)
            width, latency = _brute_force(cluster.topology.graph, switches, a, b)
            assert link.bandwidth_bytes_per_s == width
            assert link.latency_s == pytest.approx(latency)


# --- the search's setup on many groups ---------------------------------------------------------


def _counting(monkeypatch, module, name: str) -> list:
    calls: list = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    return calls


def test_a_thousand_alike_groups_merge_with_route_lookups_linear_in_the_groups(monkeypatch):
    from planner.cost.formulas import DEFAULT_PARAMS
    from planner.inputs import hardware
    from planner.search.decompose import merge_alike, prices_alike

    spec = many_groups(1000)
    for g in spec["node_groups"]:
        g["gpu"] = "A100-SXM4-80GB"
    cluster = cluster_from_spec(spec, "alike.yaml")
    lookups = _counting(monkeypatch, hardware.Cluster, "group_link")
    merged = merge_alike(cluster, lambda a, b, group: prices_alike(a, b, DEFAULT_PARAMS))
    assert [(g.name, g.nodes) for g in merged.cluster.groups] == [("g0", 1000)]
    assert len(lookups) < 2 * 1000
    assert merged.cluster.group_link("g0", "g0") == cluster.groups[0].inter_node


def test_the_lower_bound_prices_each_kind_of_group_once_however_many_there_are(monkeypatch):
    from planner.plan import Training
    from planner.inputs.model import load_model
    from planner.search.bounds import bound
    from planner.search.orchestration.driver import SolverOptions

    model, base, options = load_model("gpt2"), Training(64, 1024, "bf16", 1), SolverOptions(micro_batches=(1,))
    prices = _counting(monkeypatch, bound, "layer_price")
    bound.compute_lower_bound_s(SearchContext(model, cluster_from_spec(many_groups(2), "two.yaml"), base, options))
    two = len(prices)
    prices.clear()
    bound.compute_lower_bound_s(SearchContext(model, cluster_from_spec(many_groups(300), "many.yaml"), base, options))
    assert len(prices) == two > 0
