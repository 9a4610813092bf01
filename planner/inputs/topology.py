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

A pair's link is searched when first asked for and kept (Topology.route), so loading a
cluster of many groups takes time linear in its file, not one search per pair: loading only
checks that every pair has a route (check_routes: one union-find over the switches). Without
a `topology:` section there are no switches and a route is its direct edge; with one, the
searches run over the switches only, from a group's edges to them (its signature), and groups
of one signature share them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Mapping, Sequence

import networkx as nx

from ..core.errors import BadInput
from ..core.io import check_keys
from .devices import Link, NodeGroup, read_link
from ..core.names import check_name

DEFAULT_KIND = "default (slower inter_node)"
TOPOLOGY_KEYS = ("links", "switches")

Edge = tuple[str, str, Link]  # endpoint names sorted


def _default_edge(link_a: Link, link_b: Link) -> Link:
    """The path between two groups no `links` entry joins: the slower of their inter_node links'
    bandwidth, the higher latency, and the transport both ends can speak: NCCL runs one transport
    per connection, its socket transport (no RDMA) where either end has only Ethernet (NCCL
    docs, NCCL_NET / NCCL_IB_DISABLE), so an Ethernet end prices the path as Ethernet."""
    slower = min((link_a, link_b), key=lambda link: (link.bandwidth_bytes_per_s, -link.latency_s, link.kind))
    socket = next((link for link in (link_a, link_b) if "ethernet" in link.kind.lower()), None)
    kind = (socket or slower).kind
    return Link(min(link_a.bandwidth_bytes_per_s, link_b.bandwidth_bytes_per_s),
                max(link_a.latency_s, link_b.latency_s), f"{kind}, {DEFAULT_KIND}" if kind else DEFAULT_KIND)


@dataclass(frozen=True)
class Topology:
    switches: tuple[str, ...]
    edges: tuple[Edge, ...]  # the file's links (`links:`, `topology.links`), sorted by endpoints
    given: tuple[Edge, ...] = ()  # routes stated ahead (a merged cluster's, planner.search.decompose)
    # without a `topology:` section, each group's inter_node: two groups without a links entry
    # talk at the smaller bandwidth and the larger latency (formats.md section 1)
    default: tuple[tuple[str, Link], ...] = ()
    graph: nx.Graph = field(compare=False, hash=False, repr=False, default_factory=nx.Graph)
    _found: dict = field(compare=False, hash=False, repr=False, default_factory=dict)  # pair -> (Link, path)

    @cached_property
    def _given_of(self) -> dict[tuple[str, str], Link]:
        return {(a, b): link for a, b, link in self.given}

    @cached_property
    def _edge_of(self) -> dict[tuple[str, str], Link]:
        return {(a, b): link for a, b, link in self.edges}

    @cached_property
    def _default_of(self) -> dict[str, Link]:
        return dict(self.default)

    @cached_property
    def _adjacent(self) -> dict[str, list[tuple[str, Link]]]:
        """Each switch's switch neighbours (in edge order: every search is deterministic)."""
        out: dict[str, list[tuple[str, Link]]] = {s: [] for s in self.switches}
        for a, b, link in self.edges:
            if a in out and b in out:
                out[a].append((b, link))
                out[b].append((a, link))
        return out

    @cached_property
    def _signatures(self) -> dict[str, tuple[tuple[str, Link], ...]]:
        """Each group's edges to switches, (switch, Link) sorted by switch: groups alike in it
        have alike routes through the switches."""
        switches = set(self.switches)
        out: dict[str, list[tuple[str, Link]]] = {}
        for a, b, link in self.edges:
            if (a in switches) != (b in switches):
                group, switch = (b, a) if a in switches else (a, b)
                out.setdefault(group, []).append((switch, link))
        return {g: tuple(sorted(edges, key=lambda e: e[0])) for g, edges in out.items()}

    @cached_property
    def _linked(self) -> frozenset[str]:
        """The groups and switches at an end of a file's link."""
        return frozenset(x for a, b, _ in self.edges for x in (a, b))

    def interchangeable(self, name_a: str, name_b: str) -> bool:
        """Whether two groups route alike to every other group by construction: the default
        fabric, the same inter_node and neither in a `links` entry (every route of theirs is
        then the default edge of their inter_node)."""
        return bool(self.default) and not {name_a, name_b} & (self._linked | self._given_ends) \
            and self._default_of[name_a] == self._default_of[name_b]

    @cached_property
    def _paired(self) -> frozenset[str]:
        """The groups at an end of a group-to-group edge or of a route stated ahead."""
        switches = set(self.switches)
        ends = [x for a, b, _ in self.edges if a not in switches and b not in switches for x in (a, b)]
        return frozenset(ends) | self._given_ends

    @cached_property
    def _given_ends(self) -> frozenset[str]:
        return frozenset(x for a, b, _ in self.given for x in (a, b))

    def route_class(self, name: str) -> tuple:
        """A key that groups routing alike share: route(a, x) == route(b, x) for every other group
        x, and route(a, b) is one Link for any two of them. Without switches, the groups in no
        `links` entry with one inter_node (their default edges); with switches, the groups of
        one signature and no group-to-group edge (their routes run through the switches alike
        and are named by switches only); every other group is a class of its own."""
        if self.default:
            own = name in self._linked or name in self._given_ends
            return ("own", name) if own else ("default", self._default_of[name])
        return ("own", name) if name in self._paired else ("switches", self._signatures.get(name, ()))

    def route(self, name_a: str, name_b: str) -> Link:
        """The link between two different groups (in either order)."""
        return self._resolve(*((name_a, name_b) if name_a < name_b else (name_b, name_a)))[0]

    @property
    def routes(self) -> tuple[Edge, ...]:
        """Every pair of different groups (names sorted) with its route: for reports and tests,
        as it searches every pair (route() asks for one)."""
        names = sorted({*self._default_of, *(n for n, s in self.graph.nodes(data="switch") if not s),
                        *(x for a, b, _ in self.given for x in (a, b))})
        return tuple((a, b, self.route(a, b)) for i, a in enumerate(names) for b in names[i + 1:])

    def _resolve(self, src: str, dst: str) -> tuple[Link, tuple[str, ...]]:
        """(route, path from src to dst) of src < dst, searched once."""
        found = self._found.get((src, dst))
        if found is None:
            found = self._found[(src, dst)] = self._search(src, dst)
        return found

    def _search(self, src: str, dst: str) -> tuple[Link, tuple[str, ...]]:
        if (src, dst) in self._given_of:
            return self._given_of[(src, dst)], (src, dst)
        direct = self._edge_of.get((src, dst))
        if self.default:  # no switches: the links entry, else the default edge
            if direct is None:
                direct = _default_edge(self._default_of[src], self._default_of[dst])
            return direct, (src, dst)
        via = self._via_switches(self._signatures.get(src, ()), self._signatures.get(dst, ()))
        if direct is not None and (via is None or (direct.bandwidth_bytes_per_s, -direct.latency_s)
                                   >= (via[0].bandwidth_bytes_per_s, -via[0].latency_s)):
            return direct, (src, dst)
        assert via is not None, "every pair of groups has a route (checked at load)"
        return via[0], (src, *via[1], dst)

    def _via_switches(self, sig_a: tuple, sig_b: tuple) -> tuple[Link, tuple[str, ...]] | None:
        """The widest path through switches from a group of signature sig_a to one of sig_b
        (the largest bottleneck; among those, the least latency), as a Link named by its
        switches and the switches in order; None when there is none.

        From sig_a, one search for the widest bottleneck to every switch (widest_from), then,
        per bottleneck width asked for, one Dijkstra on latency over the edges at least that
        wide (least_latency_from); both kept, so groups of one signature share them. Latency
        is not searched along with width in one pass: a wider prefix may be slower and lose
        its width at a later hop."""
        widths = self._found.get(("widths", sig_a))
        if widths is None:
            widths = self._found[("widths", sig_a)] = widest_from(self._adjacent, sig_a)
        ends = [(t, link) for t, link in sig_b if t in widths]
        if not ends:
            return None
        width = max(min(widths[t], link.bandwidth_bytes_per_s) for t, link in ends)
        key = ("latency", sig_a, width)
        tree = self._found.get(key)
        if tree is None:
            tree = self._found[key] = least_latency_from(self._adjacent, sig_a, width)
        dist, previous = tree
        latency, last = min((dist[t] + link.latency_s, t) for t, link in ends
                            if link.bandwidth_bytes_per_s >= width and t in dist)
        path = [last]
        while previous[path[-1]] is not None:
            path.append(previous[path[-1]])
        inner = tuple(reversed(path))
        return Link(width, latency, "via " + ", ".join(inner)), inner


def widest_from(adjacent: Mapping[str, list[tuple[str, Link]]], start: Sequence[tuple[str, Link]]) -> dict[str, float]:
    """The widest bottleneck bandwidth from a group (its edges to switches, `start`) to every
    switch it reaches (Dijkstra with max-min in place of sum)."""
    heap = [(-link.bandwidth_bytes_per_s, i, switch) for i, (switch, link) in enumerate(start)]
    heapq.heapify(heap)
    best: dict[str, float] = {}
    count = len(heap)
    while heap:
        negative, _, u = heapq.heappop(heap)
        if u in best:
            continue
        best[u] = -negative
        for v, link in adjacent[u]:
            if v not in best:
                count += 1
                heapq.heappush(heap, (-min(best[u], link.bandwidth_bytes_per_s), count, v))
    return best


def least_latency_from(adjacent: Mapping[str, list[tuple[str, Link]]], start: Sequence[tuple[str, Link]],
                       width: float) -> tuple[dict[str, float], dict[str, str | None]]:
    """(latency, previous switch) from a group (its edges to switches, `start`) to every switch
    it reaches over edges of at least `width` (Dijkstra; None: entered from the group)."""
    heap: list = [(link.latency_s, i, switch, None) for i, (switch, link) in enumerate(start)
                  if link.bandwidth_bytes_per_s >= width]
    heapq.heapify(heap)
    dist: dict[str, float] = {}
    previous: dict[str, str | None] = {}
    count = len(heap)
    while heap:
        d, _, u, before = heapq.heappop(heap)
        if u in dist:
            continue
        dist[u], previous[u] = d, before
        for v, link in adjacent[u]:
            if v not in dist and link.bandwidth_bytes_per_s >= width:
                count += 1
                heapq.heappush(heap, (d + link.latency_s, count, v, u))
    return dist, previous


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


def check_routes(graph: nx.Graph, groups: Sequence[str], switches: Sequence[str],
                 edges: Mapping[tuple[str, str], Link], where: str) -> None:
    """BadInput naming the first pair of groups (in name order) with no path between them: a
    direct edge, or a switch that both reach (one union-find over the switch-to-switch edges)."""
    parent = {s: s for s in switches}

    def find(node: str) -> str:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in edges:
        if a in parent and b in parent:
            parent[find(a)] = find(b)
    reach = {g: frozenset(find(n) for n in graph[g] if n in parent) for g in groups}
    members: dict[str, set[str]] = {}
    for g, comps in reach.items():
        for c in comps:
            members.setdefault(c, set()).add(g)
    everyone = set(groups)
    if any(len(m) == len(everyone) for m in members.values()):
        return  # one switch network joins every group
    names = sorted(groups)
    joined: dict[frozenset, set[str]] = {}
    for a in names:
        if reach[a] not in joined:
            joined[reach[a]] = set().union(*(members[c] for c in reach[a]))
        direct = {n for n in graph[a] if n not in parent}
        missing = everyone - joined[reach[a]] - direct - {a}
        if missing:
            b = min(missing)  # b > a: a pair (b, a) with b < a was checked at b
            raise BadInput(f"no route between node groups {a!r} and {b!r} (join them through a "
                           "switch in topology.links, or with a links entry)", where, "topology")


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
    """The graph of a cluster file's `links:` and `topology:` sections, every pair of groups
    checked to have a route. The file names node groups; a mixed one's GPU types (NodeGroup.machine)
    each take its links, and talk to each other over `machine_route`."""
    as_named = [_machine(groups, g.machine) if g.machine else g for g in groups]
    file_topology = _file_topology(spec, list({g.name: g for g in as_named}.values()), where)
    parts: dict[str, list[str]] = {}
    for g in groups:
        parts.setdefault(g.machine_name, []).append(g.name)
    if len(parts) == len(groups):
        return file_topology
    edges = sorted((*sorted((x, y)), link) for a, b, link in file_topology.edges
                   for x in parts.get(a, [a]) for y in parts.get(b, [b]))
    given = tuple((x, y, machine_route(g)) for g in groups if g.machine
                  for x in [g.name] for y in parts[g.machine] if x < y)
    switches = file_topology.switches
    graph = build_graph([g.name for g in groups], switches, edges)
    default = tuple((g.name, g.inter_node) for g in groups) if file_topology.default else ()
    return Topology(switches, tuple(edges), given, default, graph)


def machine_route(group: NodeGroup) -> Link:
    """How two GPU types of one mixed node group talk: over the node's intra_node where the group is one
    node (a workstation), else over its inter_node, since a plan may put them on different nodes."""
    return group.fabric if group.over_fabric else group.inter_node


def _machine(groups: Sequence[NodeGroup], machine: str) -> NodeGroup:
    """A mixed node group as the file names it, for its links: its first part, renamed."""
    first = next(g for g in groups if g.machine == machine)
    return replace(first, name=machine, machine="")


def _file_topology(spec: Mapping[str, Any], groups: Sequence[NodeGroup], where: str) -> Topology:
    names = [g.name for g in groups]
    raw = spec.get("topology")
    if raw is not None and not isinstance(raw, dict):
        raise BadInput("must be a mapping with switches and links", where, "topology")
    raw = raw or {}
    check_keys(raw, TOPOLOGY_KEYS, where, "topology")
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
            edges[pair] = read_link(entry, where, prefix, {"latency_us": 0.0}, ("between",))
            first[pair] = prefix
    used = {x for pair in edges for x in pair}
    for i, name in enumerate(switches):
        if name not in used:
            raise BadInput(f"switch {name!r} has no link", where, f"topology.switches[{i}]")
    ordered = tuple((a, b, edges[(a, b)]) for a, b in sorted(edges))
    graph = build_graph(names, switches, ordered)
    if spec.get("topology") is None:  # the default fabric of formats.md: every pair is joined
        return Topology(switches, ordered, (), tuple((g.name, g.inter_node) for g in groups), graph)
    check_routes(graph, names, switches, edges, where)
    return Topology(switches, ordered, (), (), graph)


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
    link, path = topology._resolve(*sorted((name_a, name_b)))
    if path[0] != name_a:
        path = path[::-1]
    if len(path) == 2:  # a direct edge (a links entry, the default edge or a given route)
        return RoutePath(path, ((name_a, name_b, link),), link)
    hops = tuple((u, v, topology.graph[u][v]["link"]) for u, v in zip(path, path[1:]))
    return RoutePath(path, hops, link)
