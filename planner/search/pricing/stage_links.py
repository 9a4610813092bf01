"""Which link a stage's pipeline boundary runs over, as the plan search sees it: the signature of a
stage (the boundary link from each node group to its groups) and the link between a configuration
and its successor, cached per problem (a mixin of planner.search.pricing.stages.Problem)."""

from __future__ import annotations

from dataclasses import dataclass

from ...cost.paths import pair_link, slowest
from ...inputs.hardware import Link
from .stage_types import ProblemPart, StageConfig


@dataclass(frozen=True)
class SendReceive:
    """A stage's boundaries where its runtime's sends block both ends (cost.p2p): the link to its
    successor (None: the last stage) and the one its predecessor sends to it over."""

    send: Link | None
    receive: Link


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

    def link_of(self, lid: int) -> Link:
        """The link numbered `lid` (link_key)."""
        return next(link for link, key in self.tables.link_ids.items() if key == lid)

    def receive_ids(self, sig_id: int) -> list[int]:
        """The numbers (link_key) of every link a predecessor may send to a stage of signature
        `sig_id` over: `boundary` is the slowest of some of the signature's links (paths.slowest:
        the slowest one's bandwidth, the highest latency among them), so the slowest of some pair
        of them (a number no predecessor has leaves its states without a plan)."""
        sig = self.catalog.signatures[sig_id]
        return sorted({self.link_key(slowest([link, other])) for link in sig for other in sig})

    def boundaries(self, link: Link | None, receive_id: int) -> "Link | SendReceive | None":
        """What a stage's sends run over: its boundary `link` to its successor, or with a receive
        (`receive_id` >= 0, the runtime's sends block) both (SendReceive)."""
        return link if receive_id < 0 else SendReceive(link, self.link_of(receive_id))

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
