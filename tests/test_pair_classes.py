"""A collective or a pipeline boundary over many node groups prices one pair of groups of each
kind (planner.cost.paths: groups alike in every link, Cluster.link_class, give equal pair links),
and chooses the same link and names the same pair as pricing every pair would. The oracle prices
every pair; random clusters mix alike groups, `links` entries and switch topologies."""

from __future__ import annotations

import random

import pytest

from planner.cost import paths
from planner.cost.paths import boundary_link, collective_links, pair_link, route_name, slowest
from planner.inputs.hardware import cluster_from_spec

GPUS = ("A100-SXM4-80GB", "H100-SXM5-80GB")


def random_spec(rng: random.Random, switches: bool) -> dict:
    n = rng.randint(2, 9)
    groups = [{"name": f"g{i}", "gpu": rng.choice(GPUS), "nodes": rng.randint(1, 3),
               "gpus_per_node": rng.choice((4, 8)),
               "inter_node": {"bandwidth_GBps": rng.choice((25, 50)), "latency_us": rng.choice((2, 5))}}
              for i in range(n)]
    spec: dict = {"name": "random", "node_groups": groups}
    edge = lambda a, b: {"between": [a, b], "bandwidth_GBps": rng.choice((10, 25, 50)),  # noqa: E731
                         "latency_us": rng.choice((1, 4))}
    if not switches:
        pairs = [(f"g{i}", f"g{j}") for i in range(n) for j in range(i + 1, n)]
        spec["links"] = [edge(a, b) for a, b in rng.sample(pairs, rng.randint(0, min(3, len(pairs))))]
        return spec
    leaves = [f"leaf{j}" for j in range(rng.randint(1, 3))]
    links = [edge(f"g{i}", rng.choice(leaves)) for i in range(n)] + [edge(leaf, "spine") for leaf in leaves]
    if n >= 3 and rng.random() < 0.5:
        links.append(edge("g0", f"g{n - 1}"))  # a group-to-group edge beside the switches
    spec["topology"] = {"switches": ["spine", *leaves], "links": links}
    return spec


def all_pairs_collective(cluster, nodes_per_group) -> list[tuple[str, str]]:
    groups = sorted(g for g, n in nodes_per_group.items() if n > 0)
    return ([(g, g) for g in groups if nodes_per_group[g] >= 2]
            + [(a, b) for i, a in enumerate(groups) for b in groups[i + 1:]])


@pytest.mark.parametrize("seed", range(60))
def test_one_pair_of_each_kind_prices_and_names_as_every_pair_does(seed, monkeypatch):
    rng = random.Random(seed)
    cluster = cluster_from_spec(random_spec(rng, switches=seed % 2 == 1), "random.yaml")
    names = [g.name for g in cluster.groups]
    for _ in range(5):
        chosen = rng.sample(names, rng.randint(1, len(names)))
        nodes = {g: rng.randint(1, cluster.group(g).nodes) for g in chosen}
        every = all_pairs_collective(cluster, nodes)
        if every:
            assert collective_links(cluster, nodes)[1] == slowest([pair_link(cluster, *p) for p in every])
        side_a = sorted(rng.sample(names, rng.randint(1, len(names))))
        side_b = sorted(rng.sample(names, rng.randint(1, len(names))))
        ranks_a = [cluster.group(g).first_rank for g in side_a]
        ranks_b = [cluster.group(g).first_rank + cluster.group(g).num_gpus - 1 for g in side_b]
        if len(paths.nodes_of(cluster, ranks_a + ranks_b)) == 1:
            continue  # one node: its intra-node link, no pair
        pairs = [(a, b) for a in side_a for b in side_b]
        assert boundary_link(cluster, ranks_a, ranks_b)[0] == slowest([pair_link(cluster, *p) for p in pairs])
        first = min(pairs, key=lambda p: paths._slowness(pair_link(cluster, *p)))
        expected = f"inter-node {first[0]}" if first[0] == first[1] else f"{first[0]}<->{first[1]}"
        assert route_name(cluster, ranks_a, ranks_b) == expected


def test_alike_groups_make_a_collective_price_one_pair_of_each_kind():
    spec = {"name": "alike", "node_groups": [
        {"name": f"g{i:04d}", "gpu": "A100-SXM4-80GB", "nodes": 2, "gpus_per_node": 8} for i in range(1000)]}
    cluster = cluster_from_spec(spec, "alike.yaml")
    nodes = {g.name: 2 for g in cluster.groups}
    assert paths.collective_pairs(cluster, nodes) == [("g0000", "g0000"), ("g0000", "g0001")]
    names = [g.name for g in cluster.groups]
    assert paths.boundary_pairs(cluster, names[:500], names[500:]) == [("g0000", "g0500")]
