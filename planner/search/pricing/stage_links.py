"""Which link a stage's pipeline boundary runs over, as the plan search sees it: the signature of a
stage (the boundary link from each node group to its groups) and the link between a configuration
and its successor, cached per problem (a mixin of planner.search.pricing.stages.Problem)."""

from __future__ import annotations

from ...cost.paths import pair_link, slowest
from ...inputs.hardware import Link
from .stage_types import ProblemPart, StageConfig


class StageLinks(ProblemPart):
    """Stage signatures and boundary links of a Problem."""

    def signature_id(self, groups: frozenset[int]) -> int:
        sig = self.signature(groups)
        key = tuple((l.bandwidth_bytes_per_s, l.latency_s, l.kind, l.curves) for l in sig)
        if key not in self.catalog.signature_ids:
            self.catalog.signature_ids[key] = len(self.catalog.signatures)
            self.catalog.signatures.append(sig)
        return self.catalog.signature_ids[key]

    def signature(self, groups: frozenset[int]) -> tuple[Link, ...]:
        """How a stage on `groups` looks to the stage before it: the boundary link from each
        group. Successors with equal signatures are interchangeable in the DP."""
        inputs = self.inputs
        return tuple(slowest([pair_link(inputs.cluster, g.name, inputs.groups[j].name) for j in sorted(groups)])
                     for g in inputs.groups)

    def boundary(self, config: StageConfig, successor: tuple[Link, ...]) -> Link:
        """cost.paths.boundary_link: the slowest pair between this stage and its successor."""
        return slowest([successor[i] for i in sorted(config.groups())])

    def link_key(self, link: Link | None) -> int:
        """The link's number in the price tables' keys (-1: none), equal links alike: a Link's hash
        is computed anew each time, an integer's is not."""
        if link is None:
            return -1
        ids = self.tables.link_ids
        key = ids.get(link)
        if key is None:
            key = ids[link] = len(ids)
        return key

    def link(self, cid: int, successor_id: int) -> Link | None:
        """The boundary link from config `cid` to a successor (None: no successor)."""
        if successor_id < 0:
            return None
        key = (cid, successor_id)
        link = self.tables.links.get(key)
        if link is None:
            config, successor = self.catalog.configs[cid], self.catalog.signatures[successor_id]
            link = self.tables.links[key] = self.boundary(config, successor)
        return link
