"""The cluster's network as a graph, and the link between two node groups as its widest path.

Vertices are the node groups and the switches (or regions) of the file's `topology:`
section; edges are `links:` entries (group to group) and `topology.links` entries (group or
switch to group or switch), each with a bandwidth and a latency. Every figure is per node,
like `inter_node`: what one node gets over that hop while all nodes talk at once, so an
oversubscribed uplink is written as its share per node.

The link between two groups is the widest path between them (the largest bottleneck
bandwidth; among those, the least total latency), its latency the sum of its edges'. Only
switches carry traffic through: a path never passes through a third group's nodes.

Without a `topology:` section, two groups with no `links` entry are joined directly at the
smaller of their `inter_node` bandwidths and the larger latency (formats.md section 1); with
one, the file describes the whole network and two groups it does not join are a bad input.

Every pair's link is resolved once, at load (`topology_from_spec`); pricing looks it up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

import networkx as nx

from ..core.errors import BadInput
from .devices import Link, NodeGroup, read_link
from ..core.names import check_name

DEFAULT_KIND = "default (slower inter_node)"
TOPOLOGY_KEYS = ("links", "switches")

Edge = tuple[str, str, Link]  # endpoint names sorted


@dataclass(frozen=True)
class Topology:
    switches: tuple[str, ...]
    edges: tuple[Edge, ...]  # every edge of the graph, sorted by endpoints
    routes: tuple[Edge, ...]  # every pair of different groups, names sorted: the widest path
    graph: nx.Graph = field(compare=False, hash=False, repr=False, default_factory=nx.Graph)

    @cached_property
    def _route_of(self) -> dict[tuple[str, str], Link]:
        return {(a, b): link for a, b, link in self.routes}

    def route(self, name_a: str, name_b: str) -> Link:
        """The link between two different groups (in either order)."""
        return self._route_of[(name_a, name_b) if name_a < name_b else (name_b, name_a)]


def build_graph(groups: Sequence[str], switches: Sequence[str], edges: Sequence[Edge]) -> nx.Graph:
    """Groups and switches as vertices (attribute `switch`), edges with bandwidth_bytes_per_s,
    latency_s and link (the Link). Inserted in a fixed order, so every search is deterministic."""
    graph = nx.Graph()
    graph.add_nodes_from(groups, switch=False)
    graph.add_nodes_from(switches, switch=True)
    for a, b, link in edges:
        graph.add_edge(a, b, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s, latency_s=link.latency_s,
                       link=link)
    return graph


def widest_path(graph: nx.Graph, source: str, target: str) -> tuple[float, float, list[str]] | None:
    """(bottleneck bandwidth, total latency, path) of the widest source-target path whose inner
    vertices are switches, ties broken by the least latency; None when there is none.

    The widest bandwidth is the largest w for which source and target are connected by edges of
    at least w (binary search over the distinct edge bandwidths); the path is then the
    least-latency one among those edges (Dijkstra). Searching latency along with width in one
    Dijkstra would be wrong: a wider prefix may be slower and lose its width at a later hop."""
    transit = graph.subgraph([source, target] + [n for n, s in graph.nodes(data="switch") if s])
    widths = sorted({bw for _, _, bw in transit.edges(data="bandwidth_bytes_per_s")}, reverse=True)

    def at_least(width: float) -> nx.Graph:
        return nx.subgraph_view(transit, filter_edge=lambda u, v: transit[u][v]["bandwidth_bytes_per_s"] >= width)

    lo, hi = 0, len(widths)  # the first index whose width connects them, len(widths) if none does
    while lo < hi:
        mid = (lo + hi) // 2
        if nx.has_path(at_least(widths[mid]), source, target):
            hi = mid
        else:
            lo = mid + 1
    if lo == len(widths):
        return None
    latency, path = nx.single_source_dijkstra(at_least(widths[lo]), source, target, weight="latency_s")
    return widths[lo], latency, path


def resolve_routes(graph: nx.Graph, groups: Sequence[str], where: str) -> tuple[Edge, ...]:
    """The widest path between every pair of groups, as Links (a direct edge keeps its own
    Link, kind included; a path through switches is named by them)."""
    routes = []
    names = sorted(groups)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            found = widest_path(graph, a, b)
            if found is None:
                raise BadInput(f"no route between node groups {a!r} and {b!r} (join them through a "
                               "switch in topology.links, or with a links entry)", where, "topology")
            bandwidth, latency, path = found
            if len(path) == 2:
                link = graph[a][b]["link"]
            else:
                link = Link(bandwidth, latency, "via " + ", ".join(path[1:-1]))
            routes.append((a, b, link))
    return tuple(routes)


def _between(entry: Any, known: Mapping[str, str], where: str, prefix: str) -> tuple[str, str]:
    """The two endpoint names of a links entry, sorted; `known` maps each name to what it is."""
    if not isinstance(entry, dict):
        raise BadInput("must be a mapping", where, prefix)
    between = entry.get("between")
    if (not isinstance(between, list) or len(between) != 2
            or not all(isinstance(x, str) for x in between)):
        raise BadInput(f"must be a list of two {' or '.join(sorted(set(known.values())))} names",
                       where, f"{prefix}.between")
    for x in between:
        if x not in known:
            raise BadInput(f"unknown {' or '.join(sorted(set(known.values())))} {x!r}", where,
                           f"{prefix}.between")
    if between[0] == between[1]:
        ends = "groups" if set(known.values()) == {"node group"} else "ends"
        raise BadInput(f"a link joins two different {ends}", where, f"{prefix}.between")
    a, b = sorted(between)
    return a, b


def _switches(raw: Any, groups: Sequence[str], where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadInput("must be a list of switch names", where, "topology.switches")
    seen: list[str] = []
    for i, name in enumerate(raw):
        name = check_name(name, where, f"topology.switches[{i}]")
        if name in seen or name in groups:
            what = "switch" if name in seen else "name (a node group has it)"
            raise BadInput(f"duplicate {what} {name!r}", where, f"topology.switches[{i}]")
        seen.append(name)
    return tuple(seen)


def topology_from_spec(spec: Mapping[str, Any], groups: Sequence[NodeGroup], where: str) -> Topology:
    """The graph of a cluster file's `links:` and `topology:` sections, its routes resolved."""
    names = [g.name for g in groups]
    raw = spec.get("topology")
    if raw is not None and not isinstance(raw, dict):
        raise BadInput("must be a mapping with switches and links", where, "topology")
    raw = raw or {}
    for key in sorted(raw, key=str):
        if key not in TOPOLOGY_KEYS:
            raise BadInput(f"unknown key (known: {', '.join(TOPOLOGY_KEYS)})", where, f"topology.{key}")
    switches = _switches(raw.get("switches"), names, where)
    kinds = {**{n: "node group" for n in names}, **{s: "switch" for s in switches}}
    edges: dict[tuple[str, str], Link] = {}
    first: dict[tuple[str, str], str] = {}
    sections = [("links", spec.get("links"), {n: "node group" for n in names}),
                ("topology.links", raw.get("links"), kinds)]
    for section, entries, known in sections:
        if not entries:
            continue
        if not isinstance(entries, list):
            raise BadInput("must be a list", where, section)
        for i, entry in enumerate(entries):
            prefix = f"{section}[{i}]"
            pair = _between(entry, known, where, prefix)
            if pair in edges:
                raise BadInput(f"a second link between {pair[0]!r} and {pair[1]!r} (the first is "
                               f"{first[pair]})", where, f"{prefix}.between")
            edges[pair] = read_link(entry, where, prefix, {"latency_us": 0.0})
            first[pair] = prefix
    used = {x for pair in edges for x in pair}
    for i, name in enumerate(switches):
        if name not in used:
            raise BadInput(f"switch {name!r} has no link", where, f"topology.switches[{i}]")
    if "topology" not in spec or spec["topology"] is None:  # the default fabric of formats.md
        by_name = {g.name: g.inter_node for g in groups}
        for i, a in enumerate(sorted(names)):
            for b in sorted(names)[i + 1:]:
                if (a, b) not in edges:
                    la, lb = by_name[a], by_name[b]
                    edges[(a, b)] = Link(min(la.bandwidth_bytes_per_s, lb.bandwidth_bytes_per_s),
                                         max(la.latency_s, lb.latency_s), DEFAULT_KIND)
    ordered = tuple((a, b, edges[(a, b)]) for a, b in sorted(edges))
    graph = build_graph(names, switches, ordered)
    return Topology(switches, ordered, resolve_routes(graph, names, where), graph)


@dataclass(frozen=True)
class RoutePath:
    """The widest path between two different node groups, hop by hop, and its bottleneck."""

    path: tuple[str, ...]  # group, switches..., group
    hops: tuple[Edge, ...]  # (from, to, Link) along the path
    link: Link  # the route as pricing sees it (Topology.route): the bottleneck, the summed latency

    @property
    def bottleneck(self) -> Edge:
        """The narrowest hop (the first of them on ties)."""
        return min(self.hops, key=lambda hop: hop[2].bandwidth_bytes_per_s)


def route_path(topology: Topology, name_a: str, name_b: str) -> RoutePath:
    """The path behind Topology.route(name_a, name_b), from name_a to name_b."""
    found = widest_path(topology.graph, name_a, name_b)
    assert found is not None, "every pair of groups has a route (resolved at load)"
    path = found[2]
    hops = tuple((u, v, topology.graph[u][v]["link"]) for u, v in zip(path, path[1:]))
    return RoutePath(tuple(path), hops, topology.route(name_a, name_b))
