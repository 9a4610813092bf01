"""The parts of a cluster a plan may rent: how many whole nodes of each node group, as a cluster of
its own (the first nodes of each group kept, the topology as it was) and the map of a plan on it
back onto the whole cluster with the other nodes idle (decompose.Trim.plan_on). Pure: the choice
among them (planner.api.objective) prices what each costs.

A node is the unit of rent (a cloud instance), so a subset keeps whole nodes; a plan on it may
still leave GPUs of a node without work, as every plan may.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product

from ..inputs.devices import HOUR
from ..inputs.hardware import Cluster
from .decompose import Trim

# the most subsets searched one by one; past it each group takes only the sizes of coarse_sizes
MAX_SUBSETS = 64


@dataclass(frozen=True)
class Subset:
    """Nodes kept per node group of a cluster, in the cluster's group order (0: the group idle)."""

    nodes: tuple[int, ...]

    def gpus(self, cluster: Cluster) -> int:
        return sum(n * g.gpus_per_node for n, g in zip(self.nodes, cluster.groups))

    def usd_per_hour(self, cluster: Cluster) -> float | None:
        """The rent of its GPUs per hour; None where a kept group has no price."""
        total = 0.0
        for n, g in zip(self.nodes, cluster.groups):
            if n:
                if g.price_usd_per_gpu_s is None:
                    return None
                total += n * g.gpus_per_node * g.price_usd_per_gpu_s * HOUR
        return total

    def is_whole(self, cluster: Cluster) -> bool:
        return all(n == g.nodes for n, g in zip(self.nodes, cluster.groups))

    def contains(self, other: "Subset") -> bool:
        return all(a >= b for a, b in zip(self.nodes, other.nodes))

    def idle(self, cluster: Cluster) -> tuple[tuple[str, int, int], ...]:
        """(group, nodes, GPUs) of each group with nodes left out, in group order."""
        return tuple((g.name, g.nodes - n, (g.nodes - n) * g.gpus_per_node)
                     for n, g in zip(self.nodes, cluster.groups) if n < g.nodes)

    def describe(self, cluster: Cluster) -> str:
        """'a100 2/2, v100 0/4': nodes kept of each group."""
        return ", ".join(f"{g.name} {n}/{g.nodes}" for n, g in zip(self.nodes, cluster.groups))

    def cluster_of(self, cluster: Cluster) -> tuple[Cluster, Trim]:
        """The cluster of the kept nodes (each group's first ones) and its map back onto `cluster`."""
        kept, indices, first_rank = [], [], 0
        for index, (n, group) in enumerate(zip(self.nodes, cluster.groups)):
            if n:
                indices.append(index)
                kept.append(replace(group, nodes=n, first_rank=first_rank))
                first_rank += n * group.gpus_per_node
        if not kept:
            raise ValueError("a subset keeps at least one node")
        sub = replace(cluster, groups=tuple(kept))
        idle = sum(g.nodes for g in cluster.groups) - sum(self.nodes)
        return sub, Trim(sub, tuple(indices), 1, idle, len(cluster.groups))


def coarse_sizes(nodes: int) -> tuple[int, ...]:
    """The node counts a large group is tried at: none, then halvings down to one node, and all."""
    sizes = {0, nodes}
    size = nodes
    while size > 1:
        size //= 2
        sizes.add(size)
    return tuple(sorted(sizes))


def subsets(cluster: Cluster, max_gpus: int | None = None, max_usd_per_hour: float | None = None,
            limit: int = MAX_SUBSETS) -> tuple[tuple[Subset, ...], bool]:
    """Every subset of whole nodes with at least one node (each group at every count 0..nodes; where
    that makes more than `limit`, each group at coarse_sizes only), within `max_gpus` GPUs and a rent
    of `max_usd_per_hour`, the largest first (more GPUs, then the earlier groups fuller), and whether
    every count was taken (False: coarse sizes)."""
    counts = [g.nodes for g in cluster.groups]
    total = 1
    for n in counts:
        total *= n + 1
    every = total - 1 <= limit
    sizes = [tuple(range(n + 1)) if every else coarse_sizes(n) for n in counts]
    found = []
    for nodes in product(*sizes):
        subset = Subset(tuple(nodes))
        if not any(nodes):
            continue
        if max_gpus is not None and subset.gpus(cluster) > max_gpus:
            continue
        rent = subset.usd_per_hour(cluster)
        if max_usd_per_hour is not None and rent is not None and rent > max_usd_per_hour:
            continue
        found.append(subset)
    found.sort(key=lambda s: (-s.gpus(cluster), tuple(-n for n in s.nodes)))
    return tuple(found), every
