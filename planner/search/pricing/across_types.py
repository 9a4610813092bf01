"""TP groups across the GPU types of mixed nodes (docs/solver.md, "TP groups across GPU types"): a stage on
whole mixed nodes whose TP groups each take equal parts of every type of the node, their heads and FFN
columns split unevenly (planner.plan.tp_shares.type_splits), as HAP shards a group of unequal GPUs.
Each TP position is priced as the even split that gives it its slice (tp_shares.sliced_decoder) on its
own GPU, the replica paced by its slowest position and held by its fullest (cost.evaluate prices them
so): the configurations, their type arrays and their tail, for StageConfigs and stages.Problem."""

from __future__ import annotations

from functools import reduce

import numpy as np

from ...core.dims import StageDims
from ...cost.paths import dp_layout, tp_group_link
from ...cost.pricing import DpLayout, layer_price
from ...cost.sharding import Sharding
from ...cost.stage_tail import per_replica_tp_tail, stage_tail, uneven_tp_tail
from ...plan.tp_shares import across_type_degrees, sliced_decoder, splits_model, type_splits
from ...schedules import get_schedule
from .stage_types import INF, ProblemPart, StageConfig, TypeArrays


class AcrossTypes(ProblemPart):
    """The across-type configurations of a Problem (StageConfigs.configs asks for them)."""

    def machines(self) -> list[tuple[int, ...]]:
        """split_machines of the problem's inputs."""
        return split_machines(self.inputs)

    def configs(self, used: tuple[int, ...], modes, zeros) -> list[StageConfig]:
        """Every across-type configuration that can follow `used` nodes: n whole mixed nodes not yet used
        by any of its types, each TP degree of across_type_degrees, each split, recompute mode (but
        "block") and ZeRO stage the restriction leaves, cp and ep 1, no offload."""
        inputs, fixed = self.inputs, self.inputs.restriction
        if fixed.tp is not None or fixed.cp not in (None, 1) or fixed.ep not in (None, 1) \
                or fixed.offload not in (None, False):
            return []
        out = []
        for members in self.machines():
            if len({used[i] for i in members}) != 1:
                continue  # its types used apart: their next nodes are not the same nodes
            counts = tuple(inputs.groups[i].gpus_per_node for i in members)
            left = inputs.groups[members[0]].nodes - used[members[0]]
            for tp in across_type_degrees(counts, inputs.options.tp_degrees):
                per_node = sum(counts) // tp
                positions = tuple(c // per_node for c in counts)
                splits = type_splits(inputs.model.config, positions, inputs.options.tp_splits)
                for n in range(1, left + 1):
                    dp = n * per_node
                    if fixed.dp not in (None, dp) or not inputs.options.allows_dp(dp):
                        continue
                    nodes = tuple(n if i in members else 0 for i in range(len(inputs.groups)))
                    for split in splits:
                        for mode in modes:
                            if mode == "block" or fixed.recompute not in (None, mode):
                                continue
                            for zero in (zeros if dp > 1 else (0,)):
                                if dp > 1 and fixed.zero not in (None, zero):
                                    continue
                                out.append(StageConfig(nodes, tp, mode, zero, tp_split=split))
        return out

    def replicas(self, config: StageConfig) -> int:
        """Its TP groups: GPUs / tp on each of its nodes."""
        first = self.inputs.groups[self._members(config)[0]]
        return config.nodes[self._members(config)[0]] * first.gpus_in_node // config.tp

    def _members(self, config: StageConfig) -> list[int]:
        return [i for i, n in enumerate(config.nodes) if n]

    def position_groups(self, config: StageConfig) -> list[int]:
        """The node group of each TP position, type by type."""
        members = self._members(config)
        per_node = self.inputs.groups[members[0]].gpus_in_node // config.tp
        return [i for i in members for _ in range(self.inputs.groups[i].gpus_per_node // per_node)]

    def replica_ranks(self, config: StageConfig, first_node: int) -> list[tuple[int, ...]]:
        """Each replica's ranks, TP position by position, on the stage's nodes from node `first_node` of
        every type: on each node, TP group r takes its r-th part of every type's GPUs."""
        groups = self.inputs.groups
        members = self._members(config)
        per_node = groups[members[0]].gpus_in_node // config.tp
        out = []
        for node in range(first_node, first_node + config.nodes[members[0]]):
            for r in range(per_node):
                ranks: list[int] = []
                for i in members:
                    part = groups[i].gpus_per_node // per_node
                    base = groups[i].first_rank + node * groups[i].gpus_per_node + r * part
                    ranks += range(base, base + part)
                out.append(tuple(ranks))
        return out

    def layout(self, config: StageConfig) -> DpLayout:
        """Its data-parallel collectives, over the first TP position of every replica (as
        cost.replica_pricer.PlanPricer.layout): those ranks of the stage on the first nodes (alike)."""
        return dp_layout(self.inputs.cluster, [ranks[0] for ranks in self.replica_ranks(config, 0)])

    def type_arrays(self, config: StageConfig, dims: StageDims, layout: DpLayout | None, replica_arrays) -> TypeArrays:
        """One type for every replica, from each position's arrays (`replica_arrays(group index, dims,
        sharding, layout, decoder, TP link)` -> (StageConfigs._replica_arrays' arrays, its overflow)): the
        replica's time their most (ties: the first), its backward that position's, its room their least.
        The positions' arrays are kept in the price tables for the tail."""
        inputs, t = self.inputs, self.inputs.training
        heads, ffn = config.tp_split
        link = tp_group_link(inputs.cluster, self.replica_ranks(config, 0)[0])
        sh = Sharding(t.dtype, inputs.micro_batch, t.seq_len, t.attention, dims.within_replica, config.recompute)
        positions = [(i, replica_arrays(i, dims, sh, layout, sliced_decoder(inputs.dec, config.tp, h, f), link))
                     for i, h, f in zip(self.position_groups(config), heads, ffn)]
        self.tables.replica_arrays[("across positions", config)] = positions
        arrays = [a for _, (a, _) in positions]
        first = arrays[0]
        times, bwds, rooms, wgrads, wgrad_shares = {}, {}, {}, {}, {}
        for flags in first[0]:
            stacked = np.stack([a[0][flags] for a in arrays])
            slowest = np.argmax(stacked, axis=0)  # (the first of equals)
            times[flags] = np.take_along_axis(stacked, slowest[None], axis=0)[0]
            for out, index in ((bwds, 1), (wgrads, 8), (wgrad_shares, 9)):
                out[flags] = np.take_along_axis(np.stack([np.broadcast_to(a[index][flags], times[flags].shape)
                                                          for a in arrays]), slowest[None], axis=0)[0]
            rooms[flags] = reduce(np.minimum, [a[4][flags] for a in arrays])
        worst = max(w for _, (_, w) in positions)
        if self.state.smallest_overflow is None or worst[0] < self.state.smallest_overflow[0]:
            self.state.smallest_overflow = worst
        group = inputs.groups[positions[0][0]]
        return TypeArrays(self.replicas(config), group, times, bwds, first[2], first[3], rooms, first[5], first[6],
                          wgrad=wgrads, wgrad_share=wgrad_shares, ns=first[10])

    def tail(self, config: StageConfig, types: list[TypeArrays], dims: StageDims, layout: DpLayout,
             flags: tuple[bool, bool, int]) -> np.ndarray:
        """Exposed gradient reduction and optimizer step (cost.stage_tail.uneven_tp_tail, as evaluate):
        each position reduces its slice over the first positions' layout at the first type's parameters,
        hidden behind the slowest position's backward, and steps its own optimizer shard."""
        (fused,) = types
        positions = self.tables.replica_arrays[("across positions", config)]
        t = self.inputs.training
        tails = []
        for i, (arrays, _) in positions:
            params = arrays[6]
            dense_ns, expert_ns = arrays[10][flags]
            tails.append(stage_tail(arrays[2][flags], dims, t.dtype, layout, fused.cost_params, fused.bwd[flags],
                                    [(self.inputs.groups[i].gpu, params)], expert_params=arrays[3][flags],
                                    optimizer=t.optimizer, ns_flops=dense_ns, ns_expert_flops=expert_ns))
        return per_replica_tp_tail({config.tp: uneven_tp_tail(tails)}).total_s



def across_types_possible(context, virtual_stages: int, schedule: str) -> bool:
    """Whether a search (micro-batch aside) of `context` may hold across-type configurations: the
    conditions of AcrossTypes.machines that do not depend on the decomposition."""
    options, cluster = context.options, context.cluster
    if not options.tp_across_types or virtual_stages > 1 or get_schedule(schedule).split_backward \
            or not splits_model(context.model.config):
        return False
    machines: dict[str, list] = {}
    for group in cluster.groups:
        if group.machine:
            machines.setdefault(group.machine, []).append(group)
    return any(len(members) > 1 and across_type_degrees(tuple(g.gpus_per_node for g in members), options.tp_degrees)
               for members in machines.values())


def split_machines(inputs) -> list[tuple[int, ...]]:
    """The node groups of each mixed node group (NodeGroup.machine) a search (ProblemInputs) may split
    across, in the cluster's order: the runtime shards unevenly (SolverOptions.tp_across_types), a
    one-chunk schedule without a split backward, the cluster searched node by node, a model the splits
    fit (tp_shares.splits_model), one set of cost parameters for its types (their sends price alike)."""
    if not inputs.options.tp_across_types or inputs.chunked or inputs.schedule.split_backward \
            or not inputs.parts.exact or not splits_model(inputs.model.config):
        return []
    by_machine: dict[str, list[int]] = {}
    for i, group in enumerate(inputs.groups):
        if group.machine:
            by_machine.setdefault(group.machine, []).append(i)
    out = []
    for members in by_machine.values():
        params = {inputs.options.params_for(inputs.groups[i].gpu.name) for i in members}
        if len(members) > 1 and len(params) == 1:
            out.append(tuple(members))
    return out


def across_block_seconds(inputs, modes) -> dict[int, float]:
    """Per node group of a mixed node the search splits across: the least tp x (one decoder block's time
    for one micro-batch on a TP group across the node's types, its slowest position's) over the degrees,
    splits, recompute `modes` and sequence parallelism the search may give it, once per node
    (planner.search.bounds.completion: a kappa at most this bounds these groups too)."""
    t = inputs.training
    out: dict[int, float] = {}
    for members in split_machines(inputs):
        best = INF
        groups = [inputs.groups[i] for i in members]
        counts = tuple(g.gpus_per_node for g in groups)
        p = inputs.options.params_for(groups[0].gpu.name)
        for tp in across_type_degrees(counts, inputs.options.tp_degrees):
            per_node = sum(counts) // tp
            gpus = [g.gpu for g, c in zip(groups, counts) for _ in range(c // per_node)]
            for heads, ffn in type_splits(inputs.model.config, tuple(c // per_node for c in counts),
                                          inputs.options.tp_splits):
                slices = [sliced_decoder(inputs.dec, tp, h, f) for h, f in zip(heads, ffn)]
                for sp in (False, True):
                    for mode in modes:
                        sh = Sharding(t.dtype, inputs.micro_batch, t.seq_len, t.attention, StageDims(tp, sp), mode)
                        slowest = max(layer_price(layer, sh, gpu, groups[0].fabric, p).time_s
                                      for layer, gpu in zip(slices, gpus))
                        best = min(best, tp * slowest)
        out.update((i, best) for i in members)
    return out
