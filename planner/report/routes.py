"""The network paths a plan's pipeline uses: between each stage and the next, every pair of
different node groups their replicas sit in, with the widest path between them and its
bottleneck hop (planner.inputs.topology). `planner show` and `planner export` describe them when the
cluster file has a `topology:` section (without one every pair is a direct link)."""

from __future__ import annotations

from dataclasses import dataclass

from ..inputs.devices import GB, US
from ..plan import Plan
from ..inputs.topology import RoutePath, route_path


@dataclass(frozen=True)
class StageRoute:
    stage: int  # sends its activations to stage + 1 (and receives their gradients back)
    from_group: str
    to_group: str
    route: RoutePath

    def describe(self) -> str:
        hop_a, hop_b, link = self.route.bottleneck
        return (f"stage {self.stage} -> {self.stage + 1}: {self.from_group} -> {self.to_group} via "
                f"{' - '.join(self.route.path)}; bottleneck {hop_a} - {hop_b} "
                f"{link.bandwidth_bytes_per_s / GB:g} GB/s per node, path latency {self.route.link.latency_s / US:g} us")

    def to_json(self) -> dict:
        hop_a, hop_b, link = self.route.bottleneck
        return {"stage": self.stage, "next_stage": self.stage + 1, "from_group": self.from_group,
                "to_group": self.to_group, "path": list(self.route.path),
                "bottleneck": {"between": [hop_a, hop_b], "bandwidth_GBps": link.bandwidth_bytes_per_s / GB,
                               "latency_us": link.latency_s / US},
                "latency_us": self.route.link.latency_s / US}


def has_topology(plan: Plan) -> bool:
    return bool(plan.cluster.spec.get("topology"))


def stage_routes(plan: Plan) -> list[StageRoute]:
    """Every (stage, group pair) crossing between consecutive stages (by stage index), in stage
    order then group names; none without a `topology:` section."""
    if not has_topology(plan):
        return []
    cluster = plan.cluster
    by_index = {st.index: st for st in plan.stages}
    out = []
    for st in sorted(plan.stages, key=lambda s: s.index):
        successor = by_index.get(st.index + 1)
        if successor is None:
            continue
        groups_a = sorted({cluster.group_of_rank(r.ranks[0]).name for r in st.replicas})
        groups_b = sorted({cluster.group_of_rank(r.ranks[0]).name for r in successor.replicas})
        for a in groups_a:
            for b in groups_b:
                if a != b:
                    out.append(StageRoute(st.index, a, b, route_path(cluster.topology, a, b)))
    return out
