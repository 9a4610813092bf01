"""The memory savers in the search (planner.search.pricing.stages.Problem's MemorySavers part): ZeRO-Offload
per stage, considered only where memory binds, and recompute "block": a stage recomputes the whole forward of only k of its
decoder blocks and saves the activations of the rest (Megatron-LM --recompute-method block
--recompute-num-layers k). More recomputed blocks only add time and only free memory, so a
stage's best k is the smallest that fits its in-flight micro-batches: derived in closed form
per block count, not enumerated. With k = 0 it is "none", with every block "full" without
the embedding's and head's recomputation."""

from __future__ import annotations

from dataclasses import replace
from functools import reduce
from typing import NamedTuple

import numpy as np

from ...core.dims import StageDims
from ...plan import Training
from ...cost.fp8 import fp8_gather_block_params
from ...cost.pricing import ChunkTime, DpLayout, LayerPrice, layer_price, span_price, zero_comm
from ...cost.stage_memory import replica_memory
from ...cost.sharding import Sharding
from .experts import stage_ep_group, stage_expert_layout
from .shares import UNCAPPED
from .stage_types import INF, ProblemPart, StageConfig, StageCost, TypeArrays, share_cap


class BlockPrices(NamedTuple):
    """One replica type's layers under a "block" config: a decoder block kept and recomputed."""

    kept: LayerPrice  # recompute "none"
    recomputed: LayerPrice  # recompute "full"
    emb: LayerPrice
    head: LayerPrice


def smallest_fitting_k(free: np.ndarray, acts: np.ndarray, saved_per_block: float, transient: float,
                       in_flight: float, block_counts: np.ndarray) -> np.ndarray:
    """The fewest recomputed blocks (0..n) with which `in_flight` micro-batches of activations fit
    in `free` bytes: `acts` per micro-batch with none recomputed, each recomputed block saving
    `saved_per_block` and any recomputation adding one block's working set `transient`
    (pricing.transient_activation_bytes); n where even all recomputed do not fit."""
    need = in_flight * acts - free  # bytes over with none recomputed
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.ndim(saved_per_block):  # several replica types at once, a row each (stacked_memory)
            k = np.where(saved_per_block > 0, np.ceil((need + transient) / (in_flight * saved_per_block) - 1e-9), block_counts)
        else:
            k = np.ceil((need + transient) / (in_flight * saved_per_block) - 1e-9) if saved_per_block > 0 else block_counts
    k = np.where(need <= 0, 0, np.clip(k, 1, None))
    return np.minimum(k, block_counts).astype(np.int64)


def block_type_arrays(types: list[TypeArrays], prices: list[BlockPrices], dims: StageDims, training: Training,
                      layout: DpLayout | None, flags: tuple[bool, bool, int], in_flight: float,
                      block_counts: np.ndarray, offload: bool = False,
                      expert_layout: DpLayout | None = None) -> tuple[list[TypeArrays], np.ndarray]:
    """The config's type arrays at one pipeline position (`in_flight` micro-batches held), with
    the stage's recomputed-block count k per block count: the largest any replica type needs
    (a stage has one k, planner.plan.Stage.recompute_layers). Time, backward and memory room
    are those of the span with k blocks recomputed, priced as planner.cost.evaluate prices it."""
    k = recomputed_blocks(block_memory(types, prices, dims, training, flags, block_counts, offload), in_flight, block_counts)
    return block_types_at(types, prices, dims, training, layout, flags, k, block_counts, offload, expert_layout), k


def block_memory(types: list[TypeArrays], prices: list[BlockPrices], dims: StageDims, training: Training,
                 flags: tuple[bool, bool, int], block_counts: np.ndarray, offload: bool = False) -> list[tuple]:
    """Per replica type, what smallest_fitting_k takes besides the in-flight count: (free bytes
    and activation bytes with none recomputed, bytes saved per recomputed block, transient)."""
    has_head, has_emb, _ = flags  # (no lead blocks: MemorySavers.priced_types)
    out = []
    for ta, bp in zip(types, prices):
        none = span_price(((block_counts, bp.kept), (float(has_head), bp.head), (float(has_emb), bp.emb)), dims)
        free = ta.group.gpu.memory_bytes - replica_memory(none, 0.0, training.dtype, dims, ta.cost_params,
                                                          optimizer=training.optimizer, offload=offload).total_bytes
        saved = bp.kept.act_bytes - bp.recomputed.act_bytes
        out.append((free, none.act_bytes, saved, bp.recomputed.transient_bytes))
    return out


def recomputed_blocks(memory: list[tuple] | tuple, in_flight: float, block_counts: np.ndarray) -> np.ndarray:
    """The stage's recomputed-block count per block count: the largest any replica type needs
    (smallest_fitting_k on block_memory's figures, or on stacked_memory's at once)."""
    if isinstance(memory, tuple):
        return smallest_fitting_k(*memory, in_flight, block_counts).max(axis=0)
    needed = [smallest_fitting_k(free, acts, saved, transient, in_flight, block_counts) for free, acts, saved, transient in memory]
    return np.maximum.reduce(needed) if len(needed) > 1 else needed[0]


def stacked_memory(memory: list[tuple], block_counts: np.ndarray) -> tuple:
    """block_memory's figures of the replica types as arrays with a row per type (free and activation
    bytes by block count, bytes saved per recomputed block, transient), for smallest_fitting_k at once."""
    free, acts = (np.stack([np.broadcast_to(np.asarray(m[i], dtype=float), block_counts.shape) for m in memory]) for i in (0, 1))
    saved, transient = (np.array([[m[i]] for m in memory], dtype=float) for i in (2, 3))
    return free, acts, saved, transient


def block_types_at(types: list[TypeArrays], prices: list[BlockPrices], dims: StageDims, training: Training,
                   layout: DpLayout | None, flags: tuple[bool, bool, int], recomputed: np.ndarray, block_counts: np.ndarray,
                   offload: bool = False, expert_layout: DpLayout | None = None) -> list[TypeArrays]:
    """The config's type arrays with recomputed[n] of its n blocks recomputed (block_type_arrays)."""
    has_head, has_emb, _ = flags  # (no lead blocks: MemorySavers.priced_types)
    kf = recomputed.astype(float)
    out = []
    for ta, bp in zip(types, prices):
        span = span_price(((block_counts - kf, bp.kept), (kf, bp.recomputed), (float(has_head), bp.head),
                           (float(has_emb), bp.emb)), dims)
        w = span.weight_params
        p = ta.cost_params
        fp8_gathered = block_counts * fp8_gather_block_params(bp.kept.weight_params, bp.kept.expert_params, dims,
                                                              training.dtype, p.fp8_recipe, p.fp8_all_gather) \
            if p.fp8_all_gather else 0.0
        time = ChunkTime(span, zero_comm(w, dims, training.dtype, layout, p, span.expert_params,
                                         expert_layout, fp8_gathered)).time_s
        acts = span.act_bytes
        free = ta.group.gpu.memory_bytes - replica_memory(span, 0.0, training.dtype, dims, ta.cost_params,
                                                          optimizer=training.optimizer, offload=offload).total_bytes
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(acts > 0, free / np.where(acts > 0, acts, 1.0), np.inf)
        room = np.where((free < 0) | (ta.room[flags] < 0), -1.0, np.minimum(room, float(UNCAPPED)))
        out.append(TypeArrays(ta.count, ta.group, {flags: time}, {flags: span.bwd_s}, {flags: w},
                              {flags: span.expert_params}, {flags: room}, ta.boundary_bytes, ta.cost_params,
                              cp_link=ta.cp_link, ns={flags: (span.ns_flops, span.ns_expert_flops)}))
    return out


def useless_where(recomputed: np.ndarray, block_counts: np.ndarray, flags: tuple[bool, bool, int],
                  modes: tuple[str, ...]) -> np.ndarray:
    """Block counts where "block" only repeats another mode of the search, so the search leaves
    it out there (it considers block only where memory binds): none recomputed is "none";
    every block recomputed is "full" on a stage without the embedding or head (whose
    recomputation "full" also charges)."""
    repeats_none = (recomputed == 0) & ("none" in modes)
    repeats_full = (recomputed == block_counts) & (recomputed > 0) & ("full" in modes) & (not any(flags))
    return repeats_none | repeats_full


class MemorySavers(ProblemPart):
    """The memory savers' part of planner.search.pricing.stages.Problem: a configuration's type arrays
    at a pipeline position, with recompute "block"'s count and offload's pruning."""

    def __init__(self, problem):
        super().__init__(problem)
        self._never: StageCost | None = None  # nowhere()

    def priced_types(self, cid: int, flags: tuple[bool, bool, int], in_flight: float
                     ) -> tuple[list[TypeArrays], np.ndarray | None]:
        """Config `cid`'s type arrays at a position holding `in_flight` micro-batches, and for
        recompute "block" the recomputed-block count per block count (else None); -1 where the
        search leaves the config out (block repeating another mode, offload where memory does
        not bind)."""
        tables = self.tables
        config = self.catalog.configs[cid]
        if config.offload and self.offload_never_needed(config, flags, in_flight):
            return [], np.full(len(self.inputs.blocks), -1)  # (its own arrays never priced)
        types = self.problem.types_for(cid)
        if config.recompute != "block":
            return types, None
        if flags[2]:
            # the stage's first k decoder blocks would be its lead blocks, of another shape than the
            # ones k counts: "block" is left out of a stage holding lead blocks (docs/solver.md)
            return types, np.full(len(self.inputs.blocks), -1)
        key = (cid, flags, in_flight)
        if key not in tables.block_types and all((ta.room[flags] >= in_flight).all() for ta in types):
            tables.block_types[key] = (types, np.full(len(self.inputs.blocks), -1))  # memory never binds
        if key not in tables.block_types:
            # the in-flight count matters only through k: the memory figures by (config, flags),
            # the type arrays by (config, flags, k)
            # (each replica type's figures depend on its arrays alone, which configs on other node
            # vectors with the same dimensions share: StageConfigs._replica_arrays; keyed by them)
            n = self.inputs.blocks
            memory = tables.block_types.get((cid, flags))
            if memory is None:
                memory = [self._per_type(
                    ("memory", id(ta.time), flags), ta,
                    lambda ta=ta, bp=bp: block_memory([ta], [bp], self.problem.stage_configs.dims(config), self.inputs.training, flags, n,
                                                      config.offload)[0])
                    for ta, bp in zip(types, tables.block_prices[config])]
                # several types: their figures stacked, k of every type in one call
                memory = tables.block_types[(cid, flags)] = memory if len(memory) == 1 else stacked_memory(memory, n)
            k = recomputed_blocks(memory, in_flight, n)
            by_k = (cid, flags, k.tobytes())
            block_types = tables.block_types.get(by_k)
            if block_types is None:
                layout = self.problem.stage_configs.dp_layout(config) if config.zero >= 2 else None
                expert_layout = stage_expert_layout(self.inputs, config, self.problem.stage_configs.dims(config)) if config.zero >= 2 else None
                shared = [self._per_type(("types", id(ta.time), flags, by_k[2]), ta,
                                         lambda ta=ta, bp=bp: block_types_at([ta], [bp], self.problem.stage_configs.dims(config),
                                                                             self.inputs.training, layout, flags, k, n,
                                                                             config.offload, expert_layout)[0])
                          for ta, bp in zip(types, tables.block_prices[config])]
                block_types = tables.block_types[by_k] = [  # (this config's replica counts)
                    bt if bt.count == ta.count else replace(bt, count=ta.count) for bt, ta in zip(shared, types)]
            k = np.where(useless_where(k, n, flags, self.problem.options.recompute_modes), -1, k)
            tables.block_types[key] = (block_types, k)
        return tables.block_types[key]

    def _per_type(self, key: tuple, ta: TypeArrays, price):
        """price() of one replica type for recompute "block", once per key (the type's arrays by
        identity, kept alive with the entry)."""
        known = self.tables.block_types.get(key)
        if known is None or known[0] is not ta.time:
            known = self.tables.block_types[key] = (ta.time, price())
        return known[1]

    def price_blocks(self, items: list[tuple], flags: tuple[bool, bool, int], in_flight: float, link, lid: int,
                      out: list) -> None:
        """stage_costs for recompute "block" configs (index, cid) at one in-flight count, over
        `link` (number `lid`): their type arrays and recomputed-block counts at this position
        (MemorySavers.priced_types), each distinct (config, flags, link, caps, k) priced once, as a
        position of the level pricing is."""
        tables = self.tables
        pending: dict[tuple[int, ...], list] = {}
        for index, cid in items:
            memo_key = ("block", cid, flags, in_flight)  # the caps do not depend on the link
            memo = tables.caps.get(memo_key)
            if memo is None:
                types, k = self.priced_types(cid, flags, in_flight)
                if (k < 0).all():  # "block" repeats another mode everywhere
                    memo = tables.caps[memo_key] = None
                else:
                    caps = [share_cap(ta.room[flags], in_flight) for ta in types]
                    memo = tables.caps[memo_key] = (caps, b"".join(c.tobytes() for c in caps) + k.tobytes(), types, k)
            if memo is None:
                out[index] = self.nowhere()
                continue
            caps, caps_bytes, types, k = memo
            caps_key = ("block", cid, flags, lid, caps_bytes)
            cached = tables.stage_by_caps.get(caps_key)
            if cached is not None:
                out[index] = cached
                continue
            pending.setdefault(self.problem.levels.batch_key(types), []).append((index, cid, caps_key, types, caps, k))
        for batch, group in pending.items():
            all_times = [self.problem.replica_times(types, flags, link) for _, _, _, types, _, _ in group]
            self.state.evaluations += len(group)
            busy_all = self.problem.levels.stacked_makespans(batch, [item[3] for item in group], all_times,
                                              [item[4] for item in group])
            latencies = [reduce(np.maximum, times) for times in all_times]
            xs, slopes = self.problem.finish_many([(self.catalog.configs[cid], types, latency, k) for (_, cid, _, types, _, k), latency
                                            in zip(group, latencies)], busy_all, flags)
            for (index, _, caps_key, _, _, _), latency, x, slope, x_min in zip(group, latencies, xs, slopes,
                                                                                  xs.min(axis=1)):
                tables.stage_by_caps[caps_key] = out[index] = StageCost(latency, x, slope, float(x_min), None)

    def block_from_none(self, config: StageConfig) -> list[TypeArrays]:
        """A "block" config's position-free type arrays: those of the same config with "none"
        (priced per position by priced_types), and its BlockPrices."""
        inputs, t = self.inputs, self.inputs.training
        dims = self.problem.stage_configs.dims(config)
        none = self.problem.stage_configs.type_arrays(replace(config, recompute="none"))
        sh = Sharding(t.dtype, inputs.micro_batch, t.seq_len, t.attention, dims.within_replica, "none")
        full = replace(sh, recompute="full")
        ep_group = stage_ep_group(inputs, config, dims)  # an MoE stage's all-to-all (planner.search.pricing.experts)
        prices = []
        for ta in none:  # once per replica type's arrays (StageConfigs._replica_arrays), by identity
            known = self.tables.replica_arrays.get(("block prices", id(ta.time)))
            if known is None or known[0] is not ta.time:
                known = self.tables.replica_arrays[("block prices", id(ta.time))] = (ta.time, BlockPrices(
                    *(layer_price(layer, mode, ta.group.gpu, ta.group.intra_node, ta.cost_params, ta.cp_link, ep_group)
                      for layer, mode in ((inputs.dec, sh), (inputs.dec, full), (inputs.emb, sh), (inputs.head, sh)))))
            prices.append(known[1])
        self.tables.block_prices[config] = prices
        self.tables.types[config] = none
        return none

    def offload_never_needed(self, config: StageConfig, flags: tuple[bool, bool, int], position) -> bool:
        """ZeRO-Offload only adds step time: the search considers it only where memory binds, i.e.
        where the same configuration on the GPU alone cannot hold its in-flight micro-batches (and
        a split backward's deferred W inputs: `position` (in flight, deferred), or in flight alone).
        A search whose restriction puts offload on every stage (a runtime's one setting) keeps it."""
        if self.inputs.restriction.offload:
            return False
        in_flight, deferred = position if isinstance(position, tuple) else (position, 0.0)
        key = (config, flags)
        least = self.tables.least_room.get(key)
        if least is None:  # the least room of the config on the GPU alone, over its types and block counts
            on_gpu = self.problem.stage_configs.type_arrays(replace(config, offload=False))
            # and the most a deferred W keeps, as a share of a micro-batch (planner.search.pricing.deferred)
            most_w = max((float(ta.wgrad_share[flags].max()) for ta in on_gpu if ta.wgrad_share), default=0.0)
            least = self.tables.least_room[key] = (min(float(ta.room[flags].min()) for ta in on_gpu), most_w)
        return least[0] >= in_flight + deferred * least[1]

    def nowhere(self) -> StageCost:
        """A configuration the search leaves out at this position: infeasible at every block count
        (one read-only instance per problem: the stage loop meets it hundreds of thousands of times)."""
        cost = self._never
        if cost is None:
            never = np.full(len(self.inputs.blocks), INF)
            never.setflags(write=False)
            cost = self._never = StageCost(never, never, None, INF, None)
        return cost
