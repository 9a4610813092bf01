"""The relaxed costs of one pipeline rank for planner.search.bounds.rank_floor's knapsack: per node vector,
position (micro-batches held), TP degree, ZeRO stage and ZeRO-Offload (off, or on where the options
allow it), lower bounds B' on its busy time and c' on its latency over its block count (the argument
is in docs/solver.md, "The rank floor's argument")."""

from __future__ import annotations

import math

from itertools import product

import numpy as np

from ...core.dims import StageDims
from ...cost.paths import pair_link, slowest, whole_node_layout
from ...cost.p2p import P2PMode, p2p_message_s, p2p_rank_s
from ...cost.fp8 import fp8_gather_block_params
from ...cost.pricing import ZeroComm, span_price, zero_comm
from ...cost.stage_memory import offload_step_s
from ...cost.stage_tail import grad_reduce_s, optimizer_s
from ...inputs.hardware import Cluster
from ...plan import Training
from .block_costs import block_costs
from .rank_busy import least_busy
from ..pricing.stage_types import INF, SearchContext, SolverOptions

__all__ = ["KnownCosts", "rank_costs"]


def _zero_stages(options: SolverOptions, virtual_stages: int, cluster: Cluster) -> list[int]:
    """The ZeRO stages a rank may take: the options' (ZeRO-0 where ZeRO-1 is not one: ZeRO-1 holds no
    more and adds no collective per micro-batch); an interleaved search leaves ZeRO-2/3 out where
    every group's runtime hides part of its collectives (StageConfigs)."""
    zeros = sorted(set(options.zero_stages) | {0})
    if virtual_stages > 1 and all(options.params_for(g.gpu.name).overlap_zero_comm for g in cluster.groups):
        zeros = [z for z in zeros if z < 2]
    return [z for z in zeros if z or 1 not in zeros]


def _zero_floor_s(layout, tp: int, dp: int, zero: int, training: Training, price, params, block_counts: np.ndarray,
                  virtual_stages: int) -> np.ndarray:
    """The least a replica's ZeRO-2/3 collectives add to its pass over n blocks per micro-batch
    (pricing.ChunkTime: zero_comm over the rank's layout, as StageConfigs.dp_layout builds it, less
    what the runtime may hide, at most its share of each collective, ZeroComm.unhidden_s; V chunks
    add V - 1 fixed parts of each, interleave.interleaved_type_arrays, counted where negative only);
    `layout` the rank's, paths.whole_node_layout."""
    if zero < 2 or dp <= 1:
        return np.zeros(len(block_counts))
    dims = StageDims(tp, tp > 1, dp, zero)
    fp8_gathered = block_counts * fp8_gather_block_params(price.weight_params, price.expert_params, dims, training.dtype,
                                                          params.fp8_recipe, params.fp8_all_gather)
    comm = zero_comm(span_price(((block_counts, price),), dims).weight_params, dims, training.dtype, layout, params,
                     fp8_gather_params=fp8_gathered)
    out = np.asarray(comm.unhidden_s, dtype=float) * np.ones(len(block_counts))
    if virtual_stages > 1:  # (each collective's fixed part where negative: their sum's least)
        one, two = (zero_comm(w, dims, training.dtype, layout, params) for w in (1.0, 2.0))
        shares = (one.overlap, one.reduce_scatter_overlap)
        fixed = (ZeroComm(2 * one.reduce_scatter_s - two.reduce_scatter_s, 0.0, *shares),
                 ZeroComm(0.0, 2 * one.gather_s - two.gather_s, *shares))
        out = out + (virtual_stages - 1) * sum(min(0.0, part.unhidden_s) for part in fixed)
    return out


def _send_floor_s(cluster: Cluster, groups: list[int], block: tuple, mode: P2PMode | None) -> float:
    """The least a replica of group i of a rank on `groups` (`block` its rank_blocks entry) waits
    for of one micro-batch's send to the next rank, wherever that is, its sends blocking under
    `mode` (cost.p2p.p2p_rank_s: its messages over the slowest pair link between the rank's groups
    and one group of the next, stage_links.boundary: the slowest over all of them; receives add
    to it); 0 where they overlap (or `mode` is None: not known) or a measured link prices them by
    its curve."""
    if mode is None or not mode.blocking:
        return 0.0
    p, sent = block[4], block[6]
    best = INF
    for other in cluster.groups:
        link = slowest([pair_link(cluster, cluster.groups[j].name, other.name) for j in groups])
        if link.curves:
            return 0.0
        best = min(best, p2p_rank_s(mode, p2p_message_s(sent, link, False, p), 0.0, 0.0)[0])
    return max(0.0, best)


def _tail_floors_s(cluster: Cluster, training: Training, layout, groups: list[int], tps: tuple[int, ...], dp: int,
                   zero: int, offloads: tuple[bool, ...], info: dict, block_counts: np.ndarray,
                   ends: tuple) -> dict[bool, np.ndarray]:
    """E' per offload of `offloads`: the least a rank's tail takes after its last micro-batch
    (Problem._tail, cost.stage_tail): the gradient reduction over its layout at its slowest GPU's
    parameters, less at most the slowest backward any of its replicas may have (grad_reduce_s falls
    as that grows), and its GPUs' slowest optimizer step, or with ZeRO-Offload (True) the slowest
    step on its nodes' CPUs (stage_memory.offload_step_s, its GPU's optimizer share of the
    parameters); `layout` the rank's, paths.whole_node_layout. `tps`: the TP degree of each group of
    `groups` (per-replica TP: the reduction at the least, each group's step at its own,
    cost.stage_tail.per_replica_tp_tail)."""
    blocks = [info[(i, tp)] for i, tp in zip(groups, tps)]
    slow = min(range(len(groups)), key=lambda k: (min(f for _, f in cluster.groups[groups[k]].gpu.peak_flops),
                                                  cluster.groups[groups[k]].gpu.name))

    def span_at(tp):
        dims = StageDims(tp, tp > 1, dp, zero)
        return dims, span_price(((block_counts, blocks[0][3]),) + tuple((1.0, blocks[0][5][kind][5]) for kind in ends),
                                dims)

    least_dims, least_span = span_at(min(tps))
    bwd = np.min([block_counts * block[7] + sum(block[5][kind][6] for kind in ends) for block in blocks], axis=0)
    reduce_s = grad_reduce_s(least_span.weight_params, least_dims, training.dtype, layout, blocks[slow][4], bwd)
    own = [span_at(tp) for tp in tps]
    out = {}
    for offload in offloads:
        if offload:
            step = np.max([offload_step_s(span.weight_params / dims.state_divisors[2], cluster.groups[i].host,
                                          cluster.groups[i].gpus_in_node, training.dtype, training.optimizer)
                           for i, (dims, span) in zip(groups, own)], axis=0)
        else:
            step = np.max([optimizer_s(span.weight_params, dims, cluster.groups[i].gpu, block[4],
                                       optimizer=training.optimizer)
                           for i, (dims, span), block in zip(groups, own, blocks)], axis=0)
        out[offload] = np.maximum(0.0, np.asarray(reduce_s + step, dtype=float) * np.ones(len(block_counts)))
    return out


def rank_costs(context: SearchContext, info: dict, vectors: list[tuple[int, ...]],
               blocks: int, microbatches: int, most_replicas: int, helds: tuple[tuple[float, float], ...], least: int,
               virtual_stages: int, memo: dict, shared: dict, limit: float = INF) -> dict:
    """(B', c') of a rank on each node vector of `vectors` (all on the same groups) at each position j
    where it holds helds[j] = (whole, deferred) micro-batches: per vector, arrays over (position, tp,
    ZeRO stage and ZeRO-Offload (off, then on where options.offload), n = 0..blocks) (the rank
    floor's argument, docs/solver.md); INF where the rank cannot hold n blocks. The vectors' options are
    priced together, one row each (every step is elementwise over them). `memo` keeps what ranks on
    other nodes and other searches at this schedule and V share, `shared` what those at other
    schedules and V share too (KnownCosts). Where B' + E' surely exceeds `limit`, B' is some value
    above it, not the least (the rank is in no plan that beats the cutoff: rank_floor)."""
    n = np.arange(blocks + 1, dtype=float)
    h = len(helds)
    # a replica may take fewer micro-batches than the in-flight count (then holds them all): at most
    # below[j] of them, at least `least`; one of `least` or more keeps kept[j] deferred W inputs
    below = np.array([max(0, math.ceil(whole) - 1) if least < whole else 0 for whole, _, _ in helds], dtype=float)
    kept = tuple((whole, min(deferred, max(0.0, least - whole)), ends) for whole, deferred, ends in helds)
    groups = [i for i, count in enumerate(vectors[0]) if count]
    groups_key = tuple(groups)
    assert all(tuple(i for i, count in enumerate(nodes) if count) == groups_key for nodes in vectors)
    # sends per micro-batch: one, none from the last rank (the head's); V chunks V, the last rank V - 1
    per_position = np.array([[float(virtual_stages - 1 if "head" in ends else virtual_stages) if virtual_stages > 1 else float("head" not in ends)]
                             for _, _, ends in helds] * 2)
    # the rows of a replica's pass: kept[j] held at each position j, then one micro-batch at each
    rows = kept + tuple((1.0, 0.0, ends) for _, _, ends in kept)
    kinds = list(dict.fromkeys(ends for _, _, ends in helds))  # the positions' ends, once each
    ids = memo.setdefault("row ids", {})
    numbered = [ids.setdefault(row, len(ids)) for row in rows]
    index = memo.setdefault("rows", {})  # per (group, tp, dp, ZeRO stage, offload): its rows' places in memo["pool"]
    owners, counts, dps, parts, comms, sends, tails, places, wanted = _options(
        context, info, vectors, n, most_replicas, virtual_stages, shared, groups, kinds, rows, numbered, index,
        memo.get("p2p"))
    wanted = list({(part, number): (part, row) for part, row, number in wanted}.items())  # (once each)
    if wanted:
        first = _pooled(memo, *block_costs(info, [part + (row,) for _, (part, row) in wanted], n))
        for place, ((part, number), _) in enumerate(wanted, first):
            index[part][number] = place
    none = np.full((h, 1, blocks + 1), INF)
    none[:, :, 0] = 0.0
    if not counts:
        return {nodes: (none, none.copy()) for nodes in vectors}
    k = len(counts)
    places = {part: [known[number] for number in numbered] for part, known in places.items()}
    at = np.array([[places[part] for part in option] for option in parts])  # (option, i, row)
    # ZeRO's collectives and the sends in the pass (pricing.ChunkTime, Problem.replica_times) and in
    # the latency: V chunks' slowest at least their mean (interleave.chunk_latency); (option, i, row, n)
    extra = np.array(comms)[:, :, None, :] + np.array(sends)[:, :, None, None] * per_position
    pool = memo["pool"]
    times = pool[0][at] + extra
    lats = pool[1][at] + extra / virtual_stages
    times, lats = times.transpose(1, 0, 2, 3), lats.transpose(1, 0, 2, 3)  # (i, k, j, n)
    fulls, lat_fulls = times[:, :, :h].reshape(len(groups), k * h, -1), lats[:, :, :h]
    ones = times[:, :, h:].reshape(len(groups), k * h, -1)  # one micro-batch held: (i, k x j, n)
    lat_ones = lats[:, :, h:]
    tails = np.array(tails)[:, [kinds.index(ends) for _, _, ends in helds]]  # (option, j, n)
    busy = least_busy(microbatches, np.repeat(np.array(counts, dtype=float).T, h, axis=1), ones, fulls, np.tile(below, k),
                       limit, tails.reshape(k * h, -1))
    busy = busy.reshape(k, h, -1)
    if len(groups) == 1:
        # replicas of one type: one takes q = ceil(m / D) whole micro-batches at least, holding the
        # in-flight count where q reaches it (or every replica does), else one micro-batch at least
        most = np.array([-(-microbatches // c[0]) for c in counts], dtype=float)[:, None, None]  # (option, 1, 1)
        holds = (most >= np.array([whole for whole, _, _ in helds])[None, :, None]) | (below == 0)[None, :, None]
        with np.errstate(invalid="ignore"):
            busy = np.maximum(busy, most * np.where(holds, times[0, :, :h], times[0, :, h:]))
    busy = busy + tails  # B' + E': X + c = B + E
    small = (below > 0)[None, :, None]
    # every replica holds one micro-batch at least, or the in-flight count where none takes fewer
    fits = np.where(small, np.isfinite(times[:, :, h:]).all(axis=0), np.isfinite(times[:, :, :h]).all(axis=0))
    # c: the slowest replica's latency; where every replica may take fewer than the in-flight count,
    # at least one micro-batch's, and where they cannot all, the least of holding it
    latency = np.where(small, lat_ones.max(axis=0), lat_fulls.max(axis=0))
    some = small & (np.array(dps)[:, None, None] * below[None, :, None] < microbatches)
    latency = np.where(some, np.maximum(latency, lat_fulls.min(axis=0)), latency)
    busy, latency = np.where(fits, busy, INF), np.where(fits, latency, INF)
    busy[:, :, 0], latency[:, :, 0] = 0.0, 0.0  # no decoder block: the embedding or head alone, B, c >= 0
    busy, latency = busy.transpose(1, 0, 2), latency.transpose(1, 0, 2)  # (j, option, n)
    return _by_vector(vectors, owners, busy, latency, none)


def _options(context: SearchContext, info: dict, vectors: list[tuple[int, ...]],
             block_counts: np.ndarray, most_replicas: int, virtual_stages: int, shared: dict, groups: list[int],
             kinds: list, rows: tuple, numbered: list[int], index: dict, mode: P2PMode | None) -> tuple:
    """rank_costs' options (tp, ZeRO stage, offload) on each node vector, in order: per option its node
    vector, replicas per group, DP degree, (group, tp, dp, ZeRO, offload) parts, ZeRO collectives, send
    floors and tail floors per kind of ends; then each part's known row places (`index`'s entries) and
    the (part, row, row id) not priced before."""
    cluster, training, options = context.cluster, context.training, context.options
    groups_key = tuple(groups)
    owners, counts, dps, parts, comms, sends, tails = [], [], [], [], [], [], []  # per option (tp, ZeRO, offload)
    places, wanted = {}, []  # the rows of this call's, those not priced before
    zeros = _zero_stages(options, virtual_stages, cluster)
    # a stage offloads its optimizer or not (planner.search.pricing.block.MemorySavers): with it, no optimizer
    # states on the GPU but ZeRO-Offload's step on the CPUs in the tail
    offloads = (False, True) if options.offload else (False,)
    for nodes in vectors:
        for tps in _tp_choices(options, groups, info, virtual_stages):
            replicas = [nodes[i] * cluster.groups[i].gpus_per_node // tp for i, tp in zip(groups, tps)]
            dp = sum(replicas)
            if dp > most_replicas:
                continue  # every replica takes `least` micro-batches at least
            for i, tp in zip(groups, tps):
                if ("send", groups_key, tp, i, mode) not in shared:
                    shared[("send", groups_key, tp, i, mode)] = _send_floor_s(cluster, groups, info[(i, tp)], mode)
            send = [shared[("send", groups_key, tp, i, mode)] for i, tp in zip(groups, tps)]
            if ("layout", nodes, tps) not in shared:
                per_group = dict(zip(groups, tps))
                shared[("layout", nodes, tps)] = whole_node_layout(
                    cluster, nodes, tuple(per_group.get(i, 1) for i in range(len(nodes))), dp)
            layout = shared[("layout", nodes, tps)]
            for zero in zeros:
                by_ends = shared.setdefault(("tail", nodes, tps, zero, offloads), {})
                for ends in kinds:
                    if ends not in by_ends:
                        by_ends[ends] = _tail_floors_s(cluster, training, layout, groups, tps, dp, zero, offloads, info,
                                                       block_counts, ends)
                zero_comms = []
                for i, tp in zip(groups, tps):
                    comm_key = ("zero", virtual_stages, nodes, tp, dp, zero, i)
                    if comm_key not in shared:
                        points, room, states, price, p, ends, *_ = info[(i, tp)]
                        shared[comm_key] = _zero_floor_s(layout, tp, dp, zero, training, price, p, block_counts, virtual_stages)
                    zero_comms.append(shared[comm_key])
                for offload in offloads:
                    option_parts = [(i, tp, dp, zero, offload) for i, tp in zip(groups, tps)]
                    for part in option_parts:
                        if part not in places:
                            places[part] = known = index.setdefault(part, {})
                            wanted.extend((part, row, number) for row, number in zip(rows, numbered)
                                          if number not in known)
                    tails.append([by_ends[ends][offload] for ends in kinds])
                    owners.append(nodes)
                    counts.append(replicas)
                    dps.append(dp)
                    parts.append(option_parts)
                    comms.append(zero_comms)
                    sends.append(send)
    return owners, counts, dps, parts, comms, sends, tails, places, wanted


def _tp_choices(options, groups: list[int], info: dict, virtual_stages: int) -> list[tuple[int, ...]]:
    """The TP degree of each of `groups` a rank may take: one degree for all, and with per-replica TP
    (SolverOptions.per_replica_tp: a stage over two or more groups, not interleaved) any degree per group
    (planner.search.pricing.stage_configs.StageConfigs._per_replica_tp_shapes), in the degrees' order."""
    uniform = [(tp,) * len(groups) for tp in options.tp_degrees if all((i, tp) in info for i in groups)]
    if not options.per_replica_tp or len(groups) < 2 or virtual_stages > 1:
        return uniform
    each = [[tp for tp in options.tp_degrees if (i, tp) in info] for i in groups]
    return uniform + [tps for tps in product(*each) if len(set(tps)) > 1]


def _by_vector(vectors: list[tuple[int, ...]], owners: list, busy: np.ndarray, latency: np.ndarray,
               none: np.ndarray) -> dict:
    """rank_costs' (B', c') arrays (position, option, n) cut per node vector (its options are
    consecutive), `none` for a vector with no option."""
    k = len(owners)
    out, first = {}, 0
    for nodes in vectors:
        last = first
        while last < k and owners[last] == nodes:
            last += 1
        out[nodes] = (busy[:, first:last].copy(), latency[:, first:last].copy()) if last > first \
            else (none, none.copy())
        first = last
    return out


def _pooled(memo: dict, times: np.ndarray, lats: np.ndarray) -> int:
    """Put rows of a block's pass and latency floor into memo["pool"] (two arrays over (row, n), grown
    by doubling); the place of the first."""
    pool = memo.setdefault("pool", [np.empty((0, times.shape[1])), np.empty((0, times.shape[1])), 0])
    used = pool[2]
    if used + len(times) > len(pool[0]):
        size = max(used + len(times), 2 * len(pool[0]), 64)
        for k in (0, 1):
            grown = np.empty((size, times.shape[1]))
            grown[:used] = pool[k][:used]
            pool[k] = grown
    pool[0][used:used + len(times)], pool[1][used:used + len(times)] = times, lats
    pool[2] = used + len(times)
    return used


class KnownCosts:
    """What rank_costs' ranks share over the checks of one solve (none of it depends on the cutoff),
    per instance and micro-batch b (`part`): sends, layouts, tails and ZeRO's collectives (per V),
    and per (schedule, V) a block's pass and latency floor per held row, in a pool (rank_costs'
    `memo`). The pools hold at most `budget_bytes` together: past it, those used least recently go
    (priced again when needed; the costs are the same). One per solve, or per process."""

    def __init__(self, budget_bytes: int = 64 << 20):
        self.budget_bytes = budget_bytes
        self._parts: dict = {}
        self._scopes: dict = {}  # every scope with a pool, least recently used first

    def part(self, context: SearchContext, micro_batch: int) -> dict:
        """The shared costs of the instance's ranks at micro-batch b (rank_costs' `shared`)."""
        return self._parts.setdefault((context, micro_batch), {})

    def scope(self, shared: dict, schedule: str, virtual_stages: int) -> dict:
        """The costs of `shared`'s part that depend on the schedule and V (rank_costs' `memo`), the
        pools of others dropped first where they pass the budget."""
        memo = shared.setdefault((schedule, virtual_stages), {})
        self._scopes.pop(id(memo), None)
        self._scopes[id(memo)] = memo
        held = sum(2 * other["pool"][0].nbytes for other in self._scopes.values() if "pool" in other)
        for key, other in list(self._scopes.items()):
            if held <= self.budget_bytes or other is memo:
                break
            if "pool" in other:
                held -= 2 * other["pool"][0].nbytes
            for name in ("pool", "rows", "row ids"):
                other.pop(name, None)
            del self._scopes[key]
        return memo

