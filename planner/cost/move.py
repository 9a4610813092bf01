"""What a change of plan moves: the weights and optimizer states each GPU of the new plan lacks, where
it receives them from, over which link, and how long the move takes.

A GPU needs the weights and optimizer states of the layers it runs that it does not hold already as
the same tensor-parallel shard (under ZeRO, the part of its optimizer shard that grows). It takes a
piece from the nearest GPU that survives holding the same layer (a peer in its own node over the
node's intra_node link, else one in another node over its network share: the group's inter_node
divided among the node's GPUs); a layer no surviving GPU holds, and the optimizer states that only
lost GPUs held (their ZeRO shards), are read from the checkpoint (the cluster's checkpoint
bandwidth, planner.cost.reliability, shared among the GPUs reading). All GPUs
receive at once, each over its links one after the other: the move takes the longest of them.
Pure: no I/O; bytes and seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..plan import Plan

LINKS = ("intra_node", "inter_node", "checkpoint")  # where a GPU receives from, nearest first

# (layer range, tp, shard index within the replica, optimizer fraction held) per stage a rank runs
Role = tuple[tuple[tuple[int, int], int, int, float], ...]
Node = tuple[str, int]  # (group name, node index)


@dataclass(frozen=True)
class Move:
    bytes_by_rank: Mapping[int, float]  # of the new plan's ranks, what each receives
    seconds: float  # the longest receive, all at once
    bytes_by_link: Mapping[str, float] = field(default_factory=dict)  # LINKS -> bytes over it

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes_by_rank.values())

    def to_json(self) -> dict:
        moved = {r: b for r, b in self.bytes_by_rank.items() if b > 0}
        return {"total_GB": self.total_bytes / 1e9, "seconds": self.seconds, "ranks_receiving": len(moved),
                "max_GB_per_rank": max(moved.values(), default=0.0) / 1e9,
                "GB_by_link": {link: self.bytes_by_link.get(link, 0.0) / 1e9 for link in LINKS}}


def roles(plan: Plan) -> dict[int, Role]:
    """What each rank the plan uses runs: per stage it holds, (layers, tp, shard, optimizer fraction)."""
    out: dict[int, list] = {}
    for st in plan.stages:
        optimizer_share = 1 / st.dp if st.zero >= 1 else 1.0
        for rep in st.replicas:
            for shard, rank in enumerate(rep.ranks):
                out.setdefault(rank, []).append((st.layers, st.replica_tp(rep), shard, optimizer_share))
    return {rank: tuple(role) for rank, role in out.items()}


def held_layers(role: Role) -> dict[int, tuple[int, int, float]]:
    """layer -> (tp, shard, optimizer fraction) a GPU with `role` holds."""
    return {layer: (tp, shard, share) for layers, tp, shard, share in role for layer in range(*layers)}


def layer_need_bytes(layer: int, tp: int, shard: int, share: float, held: Mapping[int, tuple[int, int, float]],
                     layer_params: tuple[int, ...], weight_b: float, state_b: float) -> tuple[float, float]:
    """(weight bytes, optimizer-state bytes) a GPU holding `held` receives to run shard `shard` of
    `layer` at `tp`, keeping `share` of its optimizer states: only the growth of its optimizer shard
    where it holds that very shard."""
    params = layer_params[layer] / tp
    kept = held.get(layer)
    if kept is not None and kept[:2] == (tp, shard):
        return 0.0, params * state_b * max(0.0, share - kept[2])
    return params * weight_b, params * state_b * share


def need_bytes(new_role: Role, old_role: Role, layer_params: tuple[int, ...], weight_b: float,
               state_b: float) -> float:
    """What a GPU with `old_role` receives to take `new_role` (module docstring)."""
    held = held_layers(old_role)
    return sum(sum(layer_need_bytes(layer, tp, shard, share, held, layer_params, weight_b, state_b))
               for layers, tp, shard, share in new_role for layer in range(*layers))


def old_roles_on(old: Plan, new: Plan, survivors: Mapping[Node, Node]) -> dict[int, Role]:
    """The old role of each rank of `new`'s cluster whose GPU survives from `old` (gained GPUs: none)."""
    back = {new_node: old_node for old_node, new_node in survivors.items()}
    old_roles = roles(old)
    out = {}
    for rank in range(new.cluster.num_gpus):
        device = new.cluster.device(rank)
        old_node = back.get((device.group, device.node))
        if old_node is None:
            continue
        group = old.cluster.group(old_node[0])
        old_rank = group.rank_of(old_node[1], device.local_rank)
        if old_rank in old_roles:
            out[rank] = old_roles[old_rank]
    return out


def move_of(old: Plan, new: Plan, survivors: Mapping[Node, Node]) -> Move:
    """What `new`'s GPUs receive to hold their layers' weights and optimizer states, over which link,
    and the time it takes (module docstring); `survivors` maps old nodes to new ones."""
    from .energy import rented_nodes
    from .reliability import checkpoint_bytes_per_s, state_bytes_per_param

    weight_b, state_b = state_bytes_per_param(new.training)
    layer_params = tuple(layer.weight_params for layer in new.model.layers)
    cluster = new.cluster
    before = old_roles_on(old, new, survivors)
    holders: dict[int, set[Node]] = {}  # layer -> the new nodes with a surviving GPU holding it
    pieces_held: dict[int, dict[tuple[int, int], float]] = {}  # layer -> (tp, shard) -> optimizer fraction
    for rank, role in sorted(before.items()):
        for layer, (tp, shard, share) in held_layers(role).items():
            holders.setdefault(layer, set()).add(cluster.node_of(rank))
            held = pieces_held.setdefault(layer, {})
            held[tp, shard] = min(1.0, held.get((tp, shard), 0.0) + share)
    weights_left, states_left = _surviving_fractions(pieces_held)
    pieces: dict[int, list[tuple[str, float]]] = {}  # rank -> (link, bytes) it receives
    for rank, role in sorted(roles(new).items()):
        node, held = cluster.node_of(rank), held_layers(before.get(rank, ()))
        got = pieces.setdefault(rank, [])
        for layers, tp, shard, share in role:
            for layer in range(*layers):
                weights, states = layer_need_bytes(layer, tp, shard, share, held, layer_params, weight_b, state_b)
                nodes = holders.get(layer, set())
                peer = "intra_node" if node in nodes else "inter_node"
                kept_w, kept_s = weights_left.get(layer, 0.0), states_left.get(layer, 0.0)
                got += [(peer, weights * kept_w + states * kept_s),
                        ("checkpoint", weights * (1.0 - kept_w) + states * (1.0 - kept_s))]
    readers = max(1, sum(1 for got in pieces.values() if any(link == "checkpoint" and b > 0 for link, b in got)))
    checkpoint_share = checkpoint_bytes_per_s(cluster, len(rented_nodes(new))) / readers
    by_rank, by_link, seconds = {}, dict.fromkeys(LINKS, 0.0), 0.0
    for rank, got in pieces.items():
        group = cluster.group_of_rank(rank)
        rates = {"intra_node": group.intra_node.bandwidth_bytes_per_s,
                 "inter_node": group.inter_node.bandwidth_bytes_per_s / group.gpus_in_node,
                 "checkpoint": checkpoint_share}
        for link, size in got:
            by_link[link] += size
        by_rank[rank] = sum(size for _, size in got)
        seconds = max(seconds, sum(size / rates[link] for link, size in got))
    return Move(by_rank, seconds, by_link)


def _surviving_fractions(pieces_held: Mapping[int, Mapping[tuple[int, int], float]]
                         ) -> tuple[dict[int, float], dict[int, float]]:
    """Per layer, the fraction of its weights and of its optimizer states some surviving GPU holds:
    of its tensor-parallel shards (at the tp that keeps most), those held at all, and each shard's
    optimizer fraction summed over the replicas holding it (ZeRO shards), at most whole."""
    weights, states = {}, {}
    for layer, held in pieces_held.items():
        for tp in sorted({tp for tp, _ in held}):
            shards = [fraction for (t, _), fraction in held.items() if t == tp]
            weights[layer] = max(weights.get(layer, 0.0), len(shards) / tp)
            states[layer] = max(states.get(layer, 0.0), sum(shards) / tp)
    return weights, states
