"""How the plan search sees a cluster's nodes: lanes of parts, for any node counts.

The dynamic programme (planner.search.dp) places stages on whole parts; its state counts the parts
used in each lane (a sequence of nodes: one group, or the groups alike in GPU and node). Here: the
exact, identical-bundle and near-equal cuts into parts, `trim` (identical bundles, the rest idle,
for runtimes with one DP degree per stage) and `merge_alike` (alike consecutive groups priced as
one). The rules and examples: docs/solver.md, "Scale: any node counts"."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import reduce
from typing import Callable

from ..cost.formulas import CostParams, link_efficiency
from ..inputs.hardware import Cluster, Link, NodeGroup
from ..plan import Plan


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
    def state_vectors(self) -> int:
        """The DP's vectors of parts used per lane: prod(parts + 1) over the lanes."""
        return math.prod(count + 1 for count in self.counts)

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


def bundled(cluster: Cluster, part_nodes: int) -> Decomposition:
    """Identical bundles: parts of `part_nodes` nodes (it divides every group's node count), one
    lane per group; part_nodes = 1 is the exact decomposition."""
    assert all(g.nodes % part_nodes == 0 for g in cluster.groups), "bundles must divide every group"
    lanes = [_lane(cluster, [i], g.nodes // part_nodes) for i, g in enumerate(cluster.groups)]
    return Decomposition(tuple(lanes), len(cluster.groups), "exact" if part_nodes == 1 else "bundles")


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


@dataclass(frozen=True)
class Trim:
    """The cluster cut to identical bundles (module docstring): `cluster` keeps the first nodes of
    the groups `groups` (indices into the original cluster's groups, in order)."""

    cluster: Cluster
    groups: tuple[int, ...]
    bundles: int  # g identical bundles of total / g nodes each (the kept nodes)
    idle_nodes: int  # nodes of the original cluster left out
    original_groups: int  # groups of the original cluster

    @property
    def bundle_nodes(self) -> int:
        """Nodes of each bundle: the parts of the trimmed cluster's decomposition."""
        return sum(g.nodes for g in self.cluster.groups) // self.bundles

    def original_rank(self, original: Cluster, rank: int) -> int:
        """The original cluster's rank of `rank` of the trimmed cluster: the same group, node and
        local rank (a trimmed group's node j is its group's node j)."""
        for index, group in zip(self.groups, self.cluster.groups):
            if rank in group.ranks:
                return original.groups[index].first_rank + rank - group.first_rank
        raise IndexError(f"rank {rank} out of range 0..{self.cluster.num_gpus - 1}")

    def plan_on(self, original: Cluster, plan: Plan) -> Plan:
        """`plan` (on the trimmed cluster) as a plan on `original`: every replica on the same
        nodes of the same groups (original_rank), the other nodes idle."""
        stages = tuple(replace(stage, replicas=tuple(
            replace(r, ranks=tuple(self.original_rank(original, rank) for rank in r.ranks))
            for r in stage.replicas)) for stage in plan.stages)
        return Plan(plan.model, original, plan.training, stages)

    def describe(self, inner: str) -> str:
        """'24 / 40 / 48 nodes in 8 identical bundles, 15 idle' (nodes per original group;
        `inner` is the trimmed cluster's Decomposition.describe())."""
        kept = dict(zip(self.groups, (g.nodes for g in self.cluster.groups)))
        nodes = " / ".join(str(kept.get(i, 0)) for i in range(self.original_groups))
        how = "searched node by node" if inner == "exact" else f"in {inner}"
        return f"{nodes} nodes {how}, {self.idle_nodes} idle"


def trim(cluster: Cluster, max_exact_nodes: int, max_parts: int, global_batch: int,
         max_trimmed_parts: int) -> Trim | None:
    """The cluster trimmed to identical bundles of at most max(max_parts, max_trimmed_parts) nodes
    (module docstring), or None when `decompose` does not cut it into parts of unequal size or no
    g > 1 dividing `global_batch` leaves a bundle."""
    if decompose(cluster, max_exact_nodes, max_parts).kind != "parts":
        return None
    counts = [g.nodes for g in cluster.groups]
    # (nodes kept, -g): the most nodes; ties to the fewer (larger) bundles, whose plans need their
    # stages' replicas to be multiples of fewer: g' bundles dividing g hold every plan of g bundles
    best: tuple[int, int] | None = None
    for g in range(2, max(counts) + 1):
        bundles = sum(n // g for n in counts)
        fits = global_batch % g == 0 and 0 < bundles <= max(max_parts, max_trimmed_parts)
        if fits and (best is None or (bundles * g, -g) > best):
            best = (bundles * g, -g)
    if best is None:
        return None
    g = -best[1]
    groups, kept, first_rank = [], [], 0
    for i, group in enumerate(cluster.groups):
        nodes = counts[i] // g * g
        if nodes:
            groups.append(i)
            kept.append(replace(group, nodes=nodes, first_rank=first_rank))
            first_rank += nodes * group.gpus_per_node
    trimmed = replace(cluster, groups=tuple(kept))
    return Trim(trimmed, tuple(groups), g, sum(counts) - best[0], len(counts))


@dataclass(frozen=True)
class Merge:
    """The cluster with runs of alike groups merged (module docstring): `cluster` has the same
    ranks in the same order."""

    cluster: Cluster
    original_groups: int

    def plan_on(self, original: Cluster, plan: Plan) -> Plan:
        """`plan` (on the merged cluster) on `original`: the same ranks."""
        return Plan(plan.model, original, plan.training, plan.stages)

    def describe(self, inner: str) -> str:
        """'16 groups as 3: ...' (`inner`: the merged cluster's search's decomposition)."""
        return f"{self.original_groups} groups as {len(self.cluster.groups)}: {inner}"


def prices_alike(first: Link, second: Link, params: CostParams) -> bool:
    """Whether two links give every price the same figures: bandwidth, latency, measured curves
    and the efficiency NCCL reaches on them (formulas.link_efficiency)."""
    return (first.bandwidth_bytes_per_s, first.latency_s, first.curves) \
        == (second.bandwidth_bytes_per_s, second.latency_s, second.curves) \
        and all(link_efficiency(first, params, intra) == link_efficiency(second, params, intra) for intra in (False, True))


def merge_alike(cluster: Cluster, prices_alike: Callable[[Link, Link, NodeGroup], bool]) -> Merge | None:
    """The cluster with each run of consecutive alike groups as one group, named as its first
    (module docstring), or None when no two groups merge. `prices_alike(a, b, group)`: whether
    links a and b price the same for that group's GPUs (the cost model's figures of a link)."""
    groups = cluster.groups
    interchangeable = cluster.topology.interchangeable
    runs: list[list[NodeGroup]] = []
    in_run: set[str] = set()  # the names of the last run
    uniform = False  # every group of the last run is interchangeable with its head
    for g in groups:
        run = runs[-1] if runs else None
        head = run[0] if run else None
        if head is not None and (g.gpu, g.gpus_per_node, g.intra_node, g.inter_node, g.host) == \
                (head.gpu, head.gpus_per_node, head.intra_node, head.inter_node, head.host):
            # interchangeable groups route alike to every other group: the head speaks for the run
            same = uniform and interchangeable(head.name, g.name)
            members = run[:1] if same else run
            if all(prices_alike(cluster.group_link(m.name, g.name), g.inter_node, g) for m in members) \
                    and (same or all(cluster.group_link(head.name, o.name) == cluster.group_link(g.name, o.name)
                                     for o in groups if o is not g and o.name not in in_run)):
                run.append(g)
                in_run.add(g.name)
                uniform = same
                continue
        runs.append([g])
        in_run, uniform = {g.name}, True
    if len(runs) == len(groups):
        return None
    merged = tuple(replace(run[0], nodes=sum(m.nodes for m in run)) for run in runs)
    # each merged group is named as its run's head, whose routes the cluster's topology has
    return Merge(replace(cluster, groups=merged), len(groups))
