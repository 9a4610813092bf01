"""How the plan search sees a cluster's nodes: lanes of parts, for any node counts.

The dynamic programme (planner.search.dp) places stages on whole *parts*: its state counts the
parts used so far in each *lane*, and a stage takes the next few parts of some lanes. A
lane is a sequence of nodes: one node group, or (on clusters with more groups than parts)
every group with the same GPU type, gpus per node and links inside the node, in cluster
order. A lane's nodes are cut into consecutive parts whose sizes differ by at most one
node, the larger parts first, so the state (parts used per lane) fixes exactly which nodes
of which groups a stage gets and prices it with its real node counts. Three cases:

  * exact: a cluster of at most `max_exact_nodes` nodes: one lane per group, parts of one
    node. The search space is every plan on whole nodes; the search can prove optimality.
  * identical bundles: when every group's node count has a common divisor r that leaves at
    most `max_parts` parts (parts of r nodes each, one lane per group). Each stage's
    replicas then span all r bundles, as before this module existed.
  * near-equal parts (no common divisor needed): `max_parts` parts in all (at least one per
    lane), shared between lanes in proportion to their nodes (largest remainder, ties to
    the earlier lane), each lane cut into parts of floor or ceil of its nodes / its parts.
    31 + 47 + 50 nodes become 31 / 47 / 25+25; the same cluster minus one node
    31 / 47 / 25+24. Bundles that differ by a node need no remainder: every node is in a part.

Idle nodes are a choice of the search, part by part: it may leave any parts unused (a
slow group that would only stretch the pipeline). Planning time then depends on the
number of parts and lanes, not on the node counts or their divisibility. A decomposed
search covers a subset of the plans on whole nodes, so it never claims optimality; its
gap is measured against a lower bound (planner.search.bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

from ..inputs.hardware import Cluster


@dataclass(frozen=True)
class Lane:
    groups: tuple[int, ...]  # indices of cluster.groups, in order; its nodes are theirs in this order
    group_nodes: tuple[int, ...]  # nodes of each of those groups
    bounds: tuple[int, ...]  # part boundaries in the lane's node sequence: 0 = b0 < b1 < ... = nodes

    @property
    def parts(self) -> int:
        return len(self.bounds) - 1

    def nodes_between(self, first: int, last: int) -> dict[int, int]:
        """Nodes of each group (by cluster index) in parts first..last-1 of this lane."""
        lo, hi = self.bounds[first], self.bounds[last]
        out, start = {}, 0
        for group, count in zip(self.groups, self.group_nodes):
            take = max(0, min(hi, start + count) - max(lo, start))
            if take:
                out[group] = take
            start += count
        return out


@dataclass(frozen=True)
class Decomposition:
    lanes: tuple[Lane, ...]
    num_groups: int
    kind: str  # "exact", "bundles" or "parts"

    @property
    def counts(self) -> tuple[int, ...]:
        """Parts per lane: the DP's limits on its state."""
        return tuple(lane.parts for lane in self.lanes)

    @property
    def exact(self) -> bool:
        return self.kind == "exact"

    @property
    def largest_part(self) -> int:
        return max(b - a for lane in self.lanes for a, b in zip(lane.bounds, lane.bounds[1:]))

    def nodes(self, used: tuple[int, ...], take: tuple[int, ...]) -> tuple[int, ...]:
        """The node vector over cluster groups of a stage that takes `take` parts per lane
        after `used` parts."""
        out = [0] * self.num_groups
        for lane, u, t in zip(self.lanes, used, take):
            if t:
                for group, count in lane.nodes_between(u, u + t).items():
                    out[group] += count
        return tuple(out)

    def after(self, used: tuple[int, ...], nodes: tuple[int, ...]) -> tuple[int, ...]:
        """Parts used once a stage took the node vector `nodes` (from `nodes(used, take)`)."""
        out = []
        for lane, u in zip(self.lanes, used):
            taken = sum(nodes[g] for g in lane.groups)
            out.append(lane.bounds.index(lane.bounds[u] + taken))
        return tuple(out)

    def describe(self) -> str:
        """'exact', '32 identical bundles' or 'parts 31 / 47 / 25+25' (nodes per part, lane by lane)."""
        if self.kind == "exact":
            return "exact"
        if self.kind == "bundles":
            return f"{self.largest_part} identical bundles"
        return "parts " + " / ".join(
            "+".join(str(b - a) for a, b in zip(lane.bounds, lane.bounds[1:])) for lane in self.lanes)


def _even_bounds(nodes: int, parts: int) -> tuple[int, ...]:
    """Boundaries of `parts` consecutive parts of `nodes` nodes, sizes differing by at most one,
    the larger first."""
    size, extra = divmod(nodes, parts)
    bounds, at = [0], 0
    for i in range(parts):
        at += size + (1 if i < extra else 0)
        bounds.append(at)
    return tuple(bounds)


def _lanes_of(cluster: Cluster, merge: bool) -> list[list[int]]:
    """Group indices per lane: one lane per group, or (merge) per (GPU type, gpus per node,
    intra-node link), in order of first appearance."""
    if not merge:
        return [[i] for i in range(len(cluster.groups))]
    lanes: dict[tuple, list[int]] = {}
    for i, g in enumerate(cluster.groups):
        lanes.setdefault((g.gpu.name, g.gpus_per_node, g.intra_node), []).append(i)
    return list(lanes.values())


def _lane(cluster: Cluster, groups: list[int], parts: int) -> Lane:
    counts = tuple(cluster.groups[i].nodes for i in groups)
    return Lane(tuple(groups), counts, _even_bounds(sum(counts), parts))


def _share(weights: list[int], total: int) -> list[int]:
    """`total` parts shared in proportion to `weights`: at least one each, at most the weight,
    largest remainder (ties to the earlier)."""
    parts = [1] * len(weights)
    left = total - len(weights)
    whole = sum(weights)
    while left > 0:
        ideal = [total * w / whole for w in weights]
        room = [i for i, w in enumerate(weights) if parts[i] < w]
        if not room:
            break
        pick = max(room, key=lambda i: (ideal[i] - parts[i], -i))
        parts[pick] += 1
        left -= 1
    return parts


def bundled(cluster: Cluster, r: int) -> Decomposition:
    """r identical bundles (r divides every group's node count): parts of r nodes, one lane per
    group; r = 1 is the exact decomposition."""
    assert all(g.nodes % r == 0 for g in cluster.groups), "bundles must divide every group"
    lanes = [_lane(cluster, [i], g.nodes // r) for i, g in enumerate(cluster.groups)]
    return Decomposition(tuple(lanes), len(cluster.groups), "exact" if r == 1 else "bundles")


def decompose(cluster: Cluster, max_exact_nodes: int, max_parts: int) -> Decomposition:
    """The decomposition the search uses (module docstring)."""
    groups = cluster.groups
    total = sum(g.nodes for g in groups)
    if total <= max(max_exact_nodes, max_parts):
        return bundled(cluster, 1)
    common = reduce(math.gcd, [g.nodes for g in groups])
    for r in range(2, common + 1):
        if common % r == 0 and total // r <= max_parts:
            return bundled(cluster, r)
    members = _lanes_of(cluster, merge=len(groups) > max_parts)
    weights = [sum(groups[i].nodes for i in lane) for lane in members]
    parts = _share(weights, max(max_parts, len(members)))
    lanes = [_lane(cluster, lane, p) for lane, p in zip(members, parts)]
    return Decomposition(tuple(lanes), len(groups), "parts")
