"""A new plan's nodes relabelled so that its GPUs receive the least data from the old plan.

The nodes of one group are alike (same GPU, node shape and links: planner.inputs.hardware), so any
permutation of them inside the group keeps a plan's step time and memory: the new plan's node j may
run on any surviving or gained node k of its group. Which one decides what moves
(planner.cost.move): a linear assignment per group (Kuhn-Munkres; scipy's linear_sum_assignment)
of the new plan's nodes to the group's nodes minimising the bytes received, each pair priced as the
sum over its GPUs of what the GPU on node k lacks to run the role of the GPU on node j. Ties keep a
node where it is: a move of a node to another index costs one byte more.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np

from ..cost.move import Node, Role, need_bytes, old_roles_on, roles
from ..plan import Plan

TIE_BYTES = 1.0  # what relabelling a node costs beyond its data: ties keep nodes in place


def relabeled(old: Plan, new: Plan, survivors: Mapping[Node, Node]) -> Plan:
    """`new` with each group's nodes permuted to receive the least from `old` (module docstring)."""
    from scipy.optimize import linear_sum_assignment  # here, not at import: scipy takes ~0.4 s to load

    from ..cost.reliability import state_bytes_per_param

    weight_b, state_b = state_bytes_per_param(new.training)
    layer_params = tuple(layer.weight_params for layer in new.model.layers)
    cluster = new.cluster
    new_roles, before = roles(new), old_roles_on(old, new, survivors)
    priced: dict[tuple[tuple[Role, ...], tuple[Role, ...]], float] = {}

    def node_bytes(slot: tuple[Role, ...], node: tuple[Role, ...]) -> float:
        key = (slot, node)
        if key not in priced:
            priced[key] = sum(need_bytes(role, held, layer_params, weight_b, state_b)
                              for role, held in zip(slot, node) if role)
        return priced[key]

    rank_map: dict[int, int] = {}
    for group in cluster.groups:
        if group.nodes < 2:
            continue
        ranks = [range(group.first_rank + n * group.gpus_per_node, group.first_rank + (n + 1) * group.gpus_per_node)
                 for n in range(group.nodes)]
        slots = [tuple(new_roles.get(r, ()) for r in node) for node in ranks]
        held = [tuple(before.get(r, ()) for r in node) for node in ranks]
        cost = np.array([[node_bytes(slot, node) + (TIE_BYTES if j != k else 0.0) for k, node in enumerate(held)]
                         for j, slot in enumerate(slots)])
        _, placed = linear_sum_assignment(cost)
        for j, k in enumerate(placed):
            for a, b in zip(ranks[j], ranks[k]):
                if a != b:
                    rank_map[a] = b
    if not rank_map:
        return new
    stages = tuple(replace(st, replicas=tuple(replace(rep, ranks=tuple(rank_map.get(r, r) for r in rep.ranks))
                                              for rep in st.replicas)) for st in new.stages)
    return replace(new, stages=stages)
