"""Which link a plan's communication runs over: a TP group's ring, a data-parallel collective
(intra-node link and each GPU's share of the inter-node one) and a pipeline boundary, always the
slowest along the way; and the GPU a TP group spanning types runs at. Pure: the cluster in, links
out."""

from __future__ import annotations

from bisect import bisect_right
from typing import Mapping

from ..core.dims import StageDims
from ..inputs.hardware import Cluster, GpuSpec, Link
from .moe import AllToAllGroup
from .pricing import DpLayout


def slowest_gpu(cluster: Cluster, ranks: tuple[int, ...]) -> GpuSpec:
    """The GPU a TP group runs at: the slowest type among its ranks."""
    gpus = {cluster.group_of_rank(r).gpu.name: cluster.group_of_rank(r).gpu for r in ranks}
    return min(gpus.values(), key=lambda g: (min(f for _, f in g.peak_flops), g.name))


def pair_link(cluster: Cluster, group_a: str, group_b: str) -> Link:
    """One GPU's share of the path between nodes of two groups (or two nodes of one group):
    the node's NIC (or the group link) divided among its GPUs, since in training every GPU
    of a node communicates at once."""
    ga, gb = cluster.group(group_a), cluster.group(group_b)
    link = cluster.group_link(group_a, group_b)
    if group_a != group_b and ga.over_fabric and ga.machine == gb.machine:
        return link  # two GPU types of one workstation: each GPU's own link into the node's fabric
    return link.shared_by(max(ga.gpus_in_node, gb.gpus_in_node))  # a NIC serves every GPU of its node


def _slowness(link: Link) -> tuple:
    return (link.bandwidth_bytes_per_s, -link.latency_s, link.kind)


def slowest(links: list[Link]) -> Link:
    """The bottleneck of a path: lowest bandwidth, highest latency."""
    worst = min(links, key=_slowness)
    return Link(worst.bandwidth_bytes_per_s, max(l.latency_s for l in links), worst.kind, worst.curves)


def route_name(cluster: Cluster, ranks_a, ranks_b=()) -> str:
    """Where the slowest link of a collective over `ranks_a` (or of a pipeline boundary
    between `ranks_a` and `ranks_b`) runs, as boundary_link and collective_links choose it:
    'intra-node a100', 'inter-node a100' (two nodes of one group), 'a100<->v100'."""
    nodes = nodes_of(cluster, list(ranks_a) + list(ranks_b))
    if len(nodes) == 1:
        return f"intra-node {next(iter(nodes))[0]}"
    if ranks_b:
        pairs = boundary_pairs(cluster, sorted({cluster.group_of_rank(r).name for r in ranks_a}),
                               sorted({cluster.group_of_rank(r).name for r in ranks_b}))
    else:
        pairs = collective_pairs(cluster, group_node_counts(nodes))
    a, b = min(pairs, key=lambda pair: _slowness(pair_link(cluster, *pair)))
    return f"inter-node {a}" if a == b else f"{a}<->{b}"


def collective_links(cluster: Cluster, nodes_per_group: Mapping[str, int]) -> tuple[Link, Link]:
    """(intra-node link, per-GPU inter-node link) of a collective spanning these nodes:
    the slowest intra link of its groups, and the slowest share among its node pairs."""
    groups = sorted(g for g, n in nodes_per_group.items() if n > 0)
    intra = slowest([cluster.group(g).intra_node for g in groups])
    candidates = [pair_link(cluster, *pair) for pair in collective_pairs(cluster, nodes_per_group)]
    return intra, (slowest(candidates) if candidates else intra)


# Groups alike in every link (Cluster.link_class) give equal pair links, so a collective or a
# boundary over many groups prices one pair of each kind, not every pair: each kind's first pair
# in the order of all pairs, so the first slowest of them is also the first slowest of all.


def _by_class(cluster: Cluster, groups: list[str]) -> dict[tuple, list[str]]:
    """`groups` (sorted) by Cluster.link_class, each class's names in that order."""
    classes: dict[tuple, list[str]] = {}
    for g in groups:
        classes.setdefault(cluster.link_class(g), []).append(g)
    return classes


def collective_pairs(cluster: Cluster, nodes_per_group: Mapping[str, int]) -> list[tuple[str, str]]:
    """The pairs a collective over these nodes may run slowest on: (g, g) for a group of two nodes
    or more, then (a, b), a < b by name; one of each kind, in that order."""
    groups = sorted(g for g, n in nodes_per_group.items() if n > 0)
    selves: dict[tuple, tuple[str, str]] = {}
    for g in groups:
        if nodes_per_group[g] >= 2:
            selves.setdefault(cluster.link_class(g), (g, g))
    classes = _by_class(cluster, groups)
    cross = []
    for members_a in classes.values():
        a = members_a[0]  # the first a with some b > a of the other class, if any has one
        for members_b in classes.values():
            after = bisect_right(members_b, a)
            if after < len(members_b):
                cross.append((a, members_b[after]))
    return list(selves.values()) + sorted(cross)


def boundary_pairs(cluster: Cluster, groups_a: list[str], groups_b: list[str]) -> list[tuple[str, str]]:
    """The pairs of groups_a x groups_b (each sorted) a pipeline boundary may run slowest on, one
    of each kind, by name: a group on both sides pairs with itself over its inter_node, any other
    pair over the route between them."""
    classes_b = _by_class(cluster, groups_b)
    on_b = set(groups_b)
    found: dict[tuple, tuple[str, str]] = {}
    for a in groups_a:
        kind_a = cluster.link_class(a)
        if a in on_b:
            found.setdefault((kind_a, kind_a, True), (a, a))
        for kind_b, members_b in classes_b.items():
            if (kind_a, kind_b, False) not in found:
                others = [b for b in members_b[:2] if b != a]
                if others:
                    found[(kind_a, kind_b, False)] = (a, others[0])
    return sorted(found.values())


def nodes_of(cluster: Cluster, ranks) -> dict[tuple[str, int], int]:
    """Ranks per (group, node index) for a set of ranks."""
    nodes: dict[tuple[str, int], int] = {}
    for r in ranks:
        key = cluster.node_of(r)
        nodes[key] = nodes.get(key, 0) + 1
    return nodes


def tp_group_link(cluster: Cluster, ranks) -> Link:
    """The link a tensor-parallel group's ring runs over: its node's intra-node link, or the
    slowest per-GPU inter-node share when the group spans nodes."""
    nodes = nodes_of(cluster, ranks)
    if len(nodes) == 1:
        return cluster.group(next(iter(nodes))[0]).intra_node
    fabric = one_machine_fabric(cluster, nodes)
    if fabric is not None:
        return fabric
    per_group = group_node_counts(nodes)
    return collective_links(cluster, per_group)[1]


def one_machine_fabric(cluster: Cluster, nodes) -> Link | None:
    """The fabric between the GPU types of one mixed node where `nodes` ((group, node) keys, nodes_of)
    are its parts on that one node (a TP group across its types), else None."""
    machines = {(cluster.group(g).machine_name, n) for g, n in nodes}
    first = cluster.group(next(iter(nodes))[0])
    return first.fabric if len(machines) == 1 and first.machine else None


def group_node_counts(nodes) -> dict[str, int]:
    """How many of `nodes` ((group, node) keys, nodes_of) each node group holds."""
    per_group: dict[str, int] = {}
    for g, _ in nodes:
        per_group[g] = per_group.get(g, 0) + 1
    return per_group


def dp_layout(cluster: Cluster, ranks) -> DpLayout:
    """How a collective over `ranks` (one rank per TP position) runs: nodes, ranks per node,
    the intra- and per-GPU inter-node links (collective_links)."""
    nodes = nodes_of(cluster, ranks)
    per_group = group_node_counts(nodes)
    intra, inter = collective_links(cluster, per_group)
    return DpLayout(len(ranks), max(nodes.values()), len(nodes), intra, inter)


def whole_node_layout(cluster: Cluster, nodes: tuple[int, ...], tps: tuple[int, ...], ranks: int) -> DpLayout:
    """How a collective over `ranks` runs on a stage of whole nodes, nodes[i] of group i, one rank
    per TP group of tps[i] GPUs there: its nodes, the most ranks on one node, the intra- and per-GPU
    inter-node links (collective_links)."""
    per_group = {cluster.groups[i].name: n for i, n in enumerate(nodes) if n}
    intra, inter = collective_links(cluster, per_group)
    per_node = max(StageDims(tps[i]).replicas_on(cluster.groups[i].gpus_per_node) for i, n in enumerate(nodes) if n)
    return DpLayout(ranks, per_node, sum(per_group.values()), intra, inter)


def boundary_link(cluster: Cluster, ranks_a, ranks_b) -> tuple[Link, bool]:
    """Link across a pipeline boundary: the intra-node link when both stages sit in one
    node, else the slowest per-GPU share between any group of one and any of the other."""
    nodes = nodes_of(cluster, list(ranks_a) + list(ranks_b))
    if len(nodes) == 1:
        (group, _), = nodes
        return cluster.group(group).intra_node, True
    groups_a = sorted({cluster.group_of_rank(r).name for r in ranks_a})
    groups_b = sorted({cluster.group_of_rank(r).name for r in ranks_b})
    return slowest([pair_link(cluster, *pair) for pair in boundary_pairs(cluster, groups_a, groups_b)]), False


def alltoall_group(cluster: Cluster, ranks) -> AllToAllGroup:
    """Where an all-to-all over `ranks` runs (formulas.group_alltoall_s): its ranks per node and
    the intra- and per-GPU inter-node links (collective_links)."""
    nodes = nodes_of(cluster, ranks)
    per_group = group_node_counts(nodes)
    intra, inter = collective_links(cluster, per_group)
    return AllToAllGroup(len(ranks), max(nodes.values()), intra, inter)
