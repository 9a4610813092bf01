"""Stage configurations of the plan search and their cost as a function of the number of
decoder blocks: the same formulas as planner.cost.evaluate, vectorised over block counts so the
dynamic programme (planner.search.dp) can price a stage for every layer split at once."""

from __future__ import annotations

from dataclasses import replace
from functools import reduce
from itertools import product
from typing import Iterator

import numpy as np

from ..core.clock import SearchClock
from .decompose import Decomposition
from ..core.dims import StageDims
from ..cost.paths import collective_links, pair_link, slowest
from ..inputs.hardware import Cluster, Link
from .interleave import chunk_latency, interleaved_type_arrays
from ..inputs.model import Model
from ..plan import Training
from .context_parallel import cp_choices, places
from ..cost.pricing import ChunkTime, DpLayout, boundary_bytes, layer_price, p2p_s, span_price, zero_comm
from ..cost.stage_memory import offload_fits, replica_memory
from ..cost.stage_tail import stage_tail
from .experts import ep_degrees, stage_ep_group, stage_expert_layout
from ..cost.sharding import Sharding
from .block import BlockPrices, MemorySavers
from .deferred import DeferredW
from .shares import UNCAPPED, even_makespan, min_makespan
from .stage_types import (INF, Catalog, PriceTables, ProblemInputs, Restriction, SearchState, SolverOptions, StageConfig,
                          StageCost,
                          TypeArrays, Variant, pareto_front, share_cap)

__all__ = ["INF", "Problem", "Restriction", "searched_recompute_modes", "SolverOptions", "StageConfig", "StageCost", "TypeArrays", "Variant", "share_cap"]


def searched_recompute_modes(options: SolverOptions, t: Training, gpu_name: str) -> list[str]:
    """The recompute modes the search tries: Megatron's selective recompute is identical to none
    under flash attention; a runtime whose selective checkpointing is per-op (torchtitan) saves
    less, so it stays a choice."""
    per_op = options.params_for(gpu_name).selective_recompute == "op"
    return [m for m in options.recompute_modes if not (m == "selective" and t.attention == "flash" and not per_op)]


class Problem(MemorySavers, DeferredW):
    """Prices stage configurations for one (micro-batch, decomposition, V) search. Its parts:
    `inputs` (frozen: what the search fixes), `catalog` (the configurations, families and
    signatures met, numbered), `tables` (prices derived from the inputs on first use) and
    `state` (the clock, the evaluation count, the smallest overflow met)."""

    def __init__(self, model: Model, cluster: Cluster, base: Training, b: int, parts: Decomposition,
                 options: SolverOptions, virtual_stages: int = 1, base_problem: "Problem | None" = None,
                 clock: SearchClock | None = None, restriction: Restriction = Restriction(),
                 schedule_name: str | None = None, least_share: int = 1, shared: "Problem | None" = None):
        self.inputs = ProblemInputs.of(model, cluster, base, b, parts, options, virtual_stages, restriction,
                                       schedule_name, least_share)
        self.catalog = Catalog()
        self.tables = PriceTables()
        if shared is not None:  # a one-chunk problem of the same b and restriction: its position-free prices
            self.tables = shared.tables.position_free()
        self.state = SearchState(clock)
        # a chunked problem derives its per-config arrays from the 1F1B one of the same b
        self.base: Problem | None = None
        if self.inputs.chunked:
            self.base = base_problem or Problem(model, cluster, base, b, parts, options, clock=clock,
                                                restriction=restriction)

    def release_position_prices(self) -> None:
        """Drop the prices by position, successor and bound (its 1F1B search is done); keep the
        per-config type arrays an interleaved problem of the same micro-batch derives its own from.
        Anything dropped is priced again on use (tracing a plan), so only memory changes."""
        t = self.tables
        for table in (t.stage, t.stage_by_caps, t.stage_levels, t.family, t.family_by_costs, t.recipes,
                      t.block_types, t.tails, t.caps, t.per_block_left):
            table.clear()

    # the search's shorthands (planner.search.driver, planner.search.dp) -----------------------------

    model = property(lambda self: self.inputs.model)
    cluster = property(lambda self: self.inputs.cluster)
    options = property(lambda self: self.inputs.options)
    b = property(lambda self: self.inputs.b)
    parts = property(lambda self: self.inputs.parts)
    v = property(lambda self: self.inputs.v)
    t = property(lambda self: self.inputs.t)
    chunked = property(lambda self: self.inputs.chunked)
    groups = property(lambda self: self.inputs.groups)
    bundle_nodes = property(lambda self: self.inputs.bundle_nodes)
    num_blocks = property(lambda self: self.inputs.num_blocks)
    microbatches = property(lambda self: self.inputs.microbatches)
    config_list = property(lambda self: self.catalog.configs)
    restriction = property(lambda self: self.inputs.restriction)
    evaluations = property(lambda self: self.state.evaluations)
    smallest_overflow = property(lambda self: self.state.smallest_overflow)

    # configurations -------------------------------------------------------------------

    @property
    def max_stages(self) -> int:
        """Pipeline stages a plan may have: the options', less where the restriction says."""
        fixed = self.inputs.restriction.max_stages
        return self.inputs.options.max_stages if fixed is None else min(fixed, self.inputs.options.max_stages)

    def configs(self, used: tuple[int, ...]) -> Iterator[StageConfig]:
        inputs = self.inputs
        fixed = inputs.restriction
        ranges = [range(0, total - u + 1) for total, u in zip(inputs.bundle_nodes, used)]
        heads = inputs.model.config.num_heads if inputs.model.config else 1
        # "block" derives its recomputed-block count from the rank's in-flight micro-batches, which
        # 1F1B fixes per position; the interleaved and zero-bubble searches leave it out
        # (planner.search.block, planner.search.deferred)
        modes = [m for m in searched_recompute_modes(inputs.options, inputs.t, inputs.groups[0].gpu.name)
                 if not (m == "block" and (inputs.chunked or inputs.schedule.split_backward))]
        # ZeRO-Offload per stage (planner.search.block.MemorySavers): both, or what the restriction fixes
        offloads = [o for o in ((False, True) if inputs.options.offload else (False,)) if fixed.offload in (None, o)]
        # interleaved: the rank time (planner.search.interleave, the 1F1B span plus V - 1 fixed parts)
        # is exact only where no ZeRO collective is partly hidden; prefetching (pricing.zero_exposed_s)
        # hides min(comm, compute) per chunk, not affine in a chunk's blocks. So ZeRO-2/3 is left out
        # of interleaved searches under physics that overlap it (the FSDP runtimes, which run no
        # ZeRO-2/3 beside interleaving anyway: capability.py)
        overlaps = any(inputs.options.params_for(g.gpu.name).overlap_zero_comm for g in inputs.groups)
        zeros = tuple(z for z in inputs.options.zero_stages if not (inputs.chunked and overlaps and z >= 2))
        for take in product(*ranges):
            if not any(take):
                continue
            nodes = inputs.parts.nodes(used, take)
            if self.state.clock is not None:
                self.state.clock.check()
            gpn = [inputs.groups[i].gpus_per_node for i, n in enumerate(nodes) if n]
            for tp in inputs.options.tp_degrees:
                if any(g % tp for g in gpn) or heads % tp or fixed.tp not in (None, tp):
                    continue
                for cp, kind in cp_choices(inputs.model, inputs.t, inputs.options, tp):
                    if fixed.cp not in (None, cp):
                        continue
                    if not places([(inputs.groups[i].gpus_per_node, n) for i, n in enumerate(nodes) if n], tp * cp):
                        continue
                    dp = StageDims(tp, cp=cp).replicas_on(sum(n * inputs.groups[i].gpus_per_node
                                                              for i, n in enumerate(nodes)))
                    if fixed.dp not in (None, dp):
                        continue
                    for ep in ep_degrees(inputs, nodes, dp, tp, cp):
                        if fixed.ep not in (None, ep):
                            continue
                        for mode in modes:
                            if fixed.recompute not in (None, mode):
                                continue
                            for zero in (zeros if dp > 1 else (0,)):
                                if dp > 1 and fixed.zero not in (None, zero):
                                    continue
                                for offload in offloads:
                                    yield StageConfig(nodes, tp, mode, zero, cp, kind, ep, offload)

    def type_arrays(self, config: StageConfig) -> list[TypeArrays] | None:
        inputs = self.inputs
        if config in self.tables.types:
            return self.tables.types[config]
        dims = self.dims(config)
        if self.base is not None:
            t = inputs.t
            sharding = Sharding(t.dtype, inputs.b, t.seq_len, t.attention, dims.within_replica, config.recompute)
            layout = self.dp_layout(config) if config.zero >= 2 else None
            self.tables.types[config] = interleaved_type_arrays(self.base.type_arrays(config), dims, sharding, layout,
                                                                (inputs.dec, inputs.emb, inputs.head), inputs.blocks,
                                                                inputs.v)
            base_overflow = self.base.state.smallest_overflow
            if self.state.smallest_overflow is None or (base_overflow is not None
                                                        and base_overflow[0] < self.state.smallest_overflow[0]):
                self.state.smallest_overflow = base_overflow
            return self.tables.types[config]
        t, b, s = inputs.t, inputs.b, inputs.t.seq_len
        block = config.recompute == "block"  # priced here as "none", per position by priced_types
        if block and "none" in inputs.options.recompute_modes:
            return self.block_from_none(config)
        sh = Sharding(t.dtype, b, s, t.attention, dims.within_replica, "none" if block else config.recompute)
        ep_group = stage_ep_group(inputs, config, dims)
        expert_layout = stage_expert_layout(inputs, config, dims) if dims.zero >= 2 else None
        if block:
            self.tables.block_prices[config] = []
        counts = {i: dims.replicas_on(n * inputs.groups[i].gpus_per_node)
                  for i, n in enumerate(config.nodes) if n}
        layout = self.dp_layout(config) if dims.zero >= 2 else None  # for the ZeRO-2/3 collectives only
        out = []
        config_worst = (-INF, "")
        n = inputs.blocks
        for i, count in counts.items():
            group = inputs.groups[i]
            gpu = group.gpu
            p = inputs.options.params_for(gpu.name)
            cp_link = None
            if dims.group_gpus > group.gpus_per_node:  # the CP ring spans nodes (evaluate.replica_links)
                cp_link = collective_links(inputs.cluster, {group.name: dims.group_gpus // group.gpus_per_node})[1]
            dec, emb, head = (layer_price(layer, sh, gpu, group.intra_node, p, cp_link, ep_group)
                              for layer in (inputs.dec, inputs.emb, inputs.head))
            if block:
                full = layer_price(inputs.dec, replace(sh, recompute="full"), gpu, group.intra_node, p, cp_link,
                                   ep_group)
                self.tables.block_prices[config].append(BlockPrices(dec, full, emb, head))
            times, bwds, params, rooms, experts, wgrads, wgrad_shares = {}, {}, {}, {}, {}, {}, {}
            worst = (-INF, "")
            for has_head, has_emb in product((False, True), repeat=2):
                span = span_price(((n, dec), (float(has_head), head), (float(has_emb), emb)), dims)
                w = params[(has_head, has_emb)] = span.weight_params
                experts[(has_head, has_emb)] = span.expert_params
                times[(has_head, has_emb)] = ChunkTime(span, zero_comm(w, dims, t.dtype, layout, p, span.expert_params,
                                                                       expert_layout)).time_s
                bwds[(has_head, has_emb)] = span.bwd_s
                acts = span.act_bytes
                wgrads[(has_head, has_emb)] = span.wgrad_s
                with np.errstate(divide="ignore", invalid="ignore"):  # (planner.search.deferred)
                    wgrad_shares[(has_head, has_emb)] = np.where(acts > 0, span.wgrad_act_bytes
                                                                 / np.where(acts > 0, acts, 1.0), 0.0)
                free = gpu.memory_bytes - replica_memory(span, 0.0, t.dtype, dims, p, optimizer=t.optimizer,
                                                         offload=config.offload).total_bytes
                with np.errstate(divide="ignore", invalid="ignore"):
                    room = np.where(acts > 0, free / np.where(acts > 0, acts, 1.0), float(UNCAPPED))
                rooms[(has_head, has_emb)] = np.where(free < 0, -1.0, np.minimum(room, float(UNCAPPED)))
                if config.offload:  # the host memory of its nodes holds the states
                    fits = offload_fits(w, dims, t.dtype, t.optimizer, group.host, group.gpus_per_node)
                    rooms[(has_head, has_emb)] = np.where(fits, rooms[(has_head, has_emb)], -1.0)
                if (has_head, has_emb) == (False, False):
                    # some stage must hold this many blocks; its overflow with one
                    # micro-batch in flight is what a "does not fit" message reports
                    most_stages = max(1, min(inputs.options.max_stages, sum(inputs.bundle_nodes)))
                    need = -(-inputs.num_blocks // most_stages)
                    over = float(acts[need] - free[need]) if np.ndim(free) else float(acts[need] - free)
                    worst = max(worst, (over, gpu.name))
            out.append(TypeArrays(count, group, times, bwds, params, experts, rooms, boundary_bytes(inputs.dec, sh), p,
                                  cp_link=cp_link, wgrad=wgrads, wgrad_share=wgrad_shares))
            config_worst = max(config_worst, worst)
        if self.state.smallest_overflow is None or config_worst[0] < self.state.smallest_overflow[0]:
            self.state.smallest_overflow = config_worst
        self.tables.types[config] = out
        return out

    def dims(self, config: StageConfig) -> StageDims:
        """The stage's parallel dimensions: its replicas (tp > 1 with sequence parallelism)."""
        dims = self.tables.dims.get(config)
        if dims is None:
            sp = self.inputs.restriction.sequence_parallel and config.tp > 1
            shape = StageDims(config.tp, sp, cp=config.cp)
            dp = sum(shape.replicas_on(n * self.inputs.groups[i].gpus_per_node)
                     for i, n in enumerate(config.nodes) if n)
            dims = self.tables.dims[config] = StageDims(config.tp, sp, dp, config.zero, config.cp, config.cp_kind,
                                                        ep=config.ep)
        return dims

    def dp_layout(self, config: StageConfig) -> DpLayout:
        """How a stage's data-parallel collectives run (cost.paths.dp_layout): its nodes,
        replicas per node, the intra- and per-GPU inter-node links (collective_links)."""
        inputs = self.inputs
        layout = self.tables.dp_layouts.get(config)
        if layout is None:
            per_group = {inputs.groups[i].name: n for i, n in enumerate(config.nodes) if n}
            intra, inter = collective_links(inputs.cluster, per_group)
            dims = self.dims(config)
            # gradients are reduced over dp x cp ranks (StageDims.grad_reduce_ranks), one per TP
            # group: a node's GPUs / tp of them on each node
            per_node = max(StageDims(dims.tp).replicas_on(inputs.groups[i].gpus_per_node)
                           for i, n in enumerate(config.nodes) if n)
            layout = self.tables.dp_layouts[config] = DpLayout(dims.grad_reduce_ranks, per_node,
                                                               sum(per_group.values()), intra, inter)
        return layout

    def transitions(self, used: tuple[int, ...]) -> list[tuple[int, tuple[int, ...], int]]:
        """(family id, nodes used after it, its signature id) for every node vector that fits.
        A family is every config on one node vector (tp, recompute, ZeRO stage)."""
        if used not in self.catalog.fitting:
            families: dict[tuple[int, ...], list[int]] = {}
            for config in self.configs(used):
                if config not in self.catalog.config_ids:
                    self.catalog.config_ids[config] = len(self.catalog.configs)
                    self.catalog.configs.append(config)
                families.setdefault(config.nodes, []).append(self.catalog.config_ids[config])
            out = []
            for nodes, members in families.items():
                if nodes not in self.catalog.family_ids:
                    self.catalog.family_ids[nodes] = len(self.catalog.families)
                    self.catalog.families.append(tuple(members))
                new_used = self.inputs.parts.after(used, nodes)
                groups = frozenset(i for i, n in enumerate(nodes) if n)
                out.append((self.catalog.family_ids[nodes], new_used, self.signature_id(groups)))
            self.catalog.fitting[used] = out
        return self.catalog.fitting[used]

    def family_cost(self, fid: int, stage_from_end: int, has_emb: bool, successor_id: int,
                    ranks: int | None = None) -> tuple["Variant", ...]:
        """The family's configs merged per block count: at each count only the configs not
        dominated in both tau and X matter (a dominated one is never better for any bound),
        so variant j holds the j-th such config by tau. Usually one variant remains.
        Cached by the family's position and its boundary link to the successor (every member
        sits on the same nodes, so successors of the same link price it alike)."""
        tables = self.tables
        fast_key = (fid, stage_from_end, ranks, has_emb, successor_id)
        cached = tables.family.get(fast_key)
        if cached is not None:
            return cached
        members = self.catalog.families[fid]
        key = (fid, self.position(stage_from_end, ranks), stage_from_end == 1, has_emb,
               self.link(members[0], successor_id))
        cached = tables.family.get(key)
        if cached is None:
            cached = tables.family[key] = self._merged_family(fid, stage_from_end, has_emb, successor_id, ranks)
        tables.family[fast_key] = cached
        return cached

    def _merged_family(self, fid: int, stage_from_end: int, has_emb: bool, successor_id: int,
                       ranks: int | None) -> tuple["Variant", ...]:
        """family_cost, uncached."""
        members = self.catalog.families[fid]
        costs = self.stage_costs(members, stage_from_end, has_emb, successor_id, ranks)
        if any(c.x_min == INF for c in costs):  # left out at this position (MemorySavers): merge the rest
            kept = [(m, c) for m, c in zip(members, costs) if c.x_min < INF]
            members, costs = tuple(m for m, _ in kept), [c for _, c in kept]
            if not members:
                return ()
        costs_key = (fid, tuple(id(c) for c in costs))  # the costs are cached, so ids are stable
        merged = self.tables.family_by_costs.get(costs_key)
        if merged is not None:
            return merged
        taus = np.stack([c.tau for c in costs])
        xs = np.stack([c.x for c in costs])
        feasible = np.isfinite(xs)
        taus = np.where(feasible, taus, INF)
        order, count = pareto_front(taus, xs)
        variants = []
        columns = np.arange(taus.shape[1])
        for j in range(int(count.max()) if count.size else 0):
            pick = order[j]
            valid = j < count
            member = np.where(valid, np.asarray(members)[pick], -1)
            tau_v = np.where(valid, taus[pick, columns], INF)
            x_v = np.where(valid, xs[pick, columns], INF)
            slopes = {cid: c.slope for cid, c in zip(members, costs)}
            runs = tuple((int(cid), member == cid, slopes[int(cid)]) for cid in np.unique(member[member >= 0]))
            variants.append(Variant(tau_v, x_v, member, float(x_v.min()), runs))
        self.tables.family_by_costs[costs_key] = tuple(variants)
        return self.tables.family_by_costs[costs_key]

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

    def in_flight(self, stage_from_end: int, ranks: int | None) -> float:
        """Micro-batches of activations a rank holds at its peak (Schedule.in_flight_microbatches):
        1F1B holds P - k = stage_from_end for any depth P; a depth-dependent schedule
        (interleaved) needs the pipeline depth P = `ranks`."""
        inputs = self.inputs
        if ranks is None:
            assert not inputs.schedule.depth_dependent(), "the search fixes the number of pipeline ranks"
            ranks = stage_from_end
        return inputs.schedule.in_flight_microbatches(ranks - stage_from_end, ranks, inputs.v, inputs.microbatches)

    def stage_cost(self, cid: int, stage_from_end: int, has_emb: bool, successor_id: int,
                   ranks: int | None = None) -> StageCost:
        """StageCost (tau, X, slope, min X, split) over block counts for a pipeline rank placed
        `stage_from_end` (1 = last) before a successor with signature `successor_id` (-1:
        none), in a pipeline of `ranks` ranks (interleaved only). tau is the latency of one
        micro-batch through the rank, interleaved through its slowest chunk, and
        X = B + E - tau, so that T = max X + sum tau (evaluate.pipeline_time_s). `slope` is
        set when tau is affine in the block count (1F1B, one replica type), else None;
        `split` is the blocks of the embedding's or head's chunk (interleaved, else None).

        Interleaved: each of the rank's V chunks sends its activations on, to the next rank,
        or for the last rank's first V - 1 chunks around to rank 0, whose signature the
        search passes as the last rank's successor (interleave.chunk_latency)."""
        return self.stage_costs((cid,), stage_from_end, has_emb, successor_id, ranks)[0]

    def stage_costs(self, cids, stage_from_end: int, has_emb: bool, successor_id: int,
                    ranks: int | None = None) -> list[StageCost]:
        """stage_cost for several configurations at one position. The position (and the
        pipeline depth of an interleaved search) matters only through the in-flight count,
        which matters only through which replica types' memory caps bind at each block count
        (share_cap), so each (config, flags, link) is priced once, at every capping level
        (`_price_levels`), and a position picks its level per block count."""
        inputs, tables = self.inputs, self.tables
        has_head = stage_from_end == 1
        position = self.position(stage_from_end, ranks)
        in_flight, deferred = position
        flags = (has_head, has_emb)
        out: list = [None] * len(cids)
        todo, blocks = [], []
        for index, cid in enumerate(cids):
            key = (cid, position, has_head, has_emb, successor_id)
            cached = tables.stage.get(key)
            if cached is not None:
                out[index] = cached
                continue
            config = self.catalog.configs[cid]
            if config.offload:
                never_key = ("offload never needed", cid, flags, position)
                never = tables.caps.get(never_key)
                if never is None:
                    never = tables.caps[never_key] = self._offload_never_needed(config, flags, position)
                if never:
                    tables.stage[key] = out[index] = self._nowhere()  # (its own arrays never priced)
                    continue
            if self._no_shares(cid):
                tables.stage[key] = out[index] = self._nowhere()
                continue
            if config.recompute == "block":  # its recomputed blocks depend on the position: priced per in-flight count
                blocks.append((index, key, cid, self.link(cid, successor_id)))
                continue
            todo.append((index, key, (cid, flags, self.link(cid, successor_id))))
        if blocks:
            self._price_blocks(blocks, flags, in_flight, out)
        if deferred and todo:  # zero bubble's caps at this position (planner.search.deferred)
            self._price_deferred(todo, flags, position, out)
            return out
        missing = [base_key for _, _, base_key in todo if base_key not in tables.stage_levels]
        if missing:
            self._price_levels(list(dict.fromkeys(missing)))
        for index, key, base_key in todo:
            rooms, tau, x_levels, slope, split = tables.stage_levels[base_key]
            # share_cap: a type's cap binds where its memory holds fewer than the in-flight
            # micro-batches; the types capped at a block count are the ones with least room
            level = (rooms < in_flight).sum(axis=0)
            level_key = (base_key, level.tobytes())
            cost = tables.stage_by_caps.get(level_key)
            if cost is None:
                x = x_levels[level, inputs.blocks_index]
                cost = tables.stage_by_caps[level_key] = StageCost(tau, x, slope, float(x.min()), split)
            tables.stage[key] = out[index] = cost
        return out

    def _price_levels(self, base_keys: list[tuple]) -> None:
        """Price (config, flags, link) entries at capping levels 0..G (G replica types): at
        level j the j types with the least room at each block count take their memory caps,
        the others are uncapped. The makespans of entries with the same replica counts are
        computed in one vectorised call (elementwise, so the same as pricing each position)."""
        inputs, tables = self.inputs, self.tables
        pending: dict[tuple[int, ...], list] = {}
        for base_key in base_keys:
            cid, flags, link = base_key
            types = self._types_for(cid)
            rooms = np.stack([ta.room[flags] for ta in types])
            rank = np.argsort(np.argsort(rooms, axis=0, kind="stable"), axis=0)
            capped = np.maximum(np.floor(rooms), 0).astype(np.int64)
            levels = len(types) + 1
            caps = [np.stack([np.where(rank[g] < j, capped[g], UNCAPPED) for j in range(levels)])
                    for g in range(len(types))]
            pending.setdefault(tuple(ta.count for ta in types), []).append((base_key, types, rooms, caps))
        for counts, items in pending.items():
            all_times = [self.replica_times(types, base_key[1], base_key[2]) for base_key, types, _, _ in items]
            self.state.evaluations += len(items)
            busy_all = self.makespan(counts,
                                [np.concatenate([np.broadcast_to(times[g], item[3][g].shape)
                                                 for times, item in zip(all_times, items)])
                                 for g in range(len(counts))],
                                [np.concatenate([item[3][g] for item in items]) for g in range(len(counts))])
            row = 0
            for (base_key, types, rooms, caps), times in zip(items, all_times):
                cid, flags, link = base_key
                levels = len(types) + 1
                busy = busy_all[row:row + levels]
                row += levels
                if inputs.chunked:
                    latency, split = chunk_latency(types, flags, link, inputs.v, inputs.num_blocks)
                else:
                    latency, split = self.latency(types, flags, times), None
                x, slope = self._finish(self.catalog.configs[cid], types, latency, busy, flags)
                tables.stage_levels[base_key] = (rooms, latency, x, slope, split)

    def _no_shares(self, cid: int) -> bool:
        """Whether no batch shares exist for the config's replicas whatever their times and caps, so
        the makespan (min_makespan, even_makespan) is infinite at every block count: fewer
        micro-batches than replicas x least_share, or even shares that do not divide them. Its type
        arrays are priced all the same (they carry the smallest overflow a no-plan message reports)."""
        known = self.tables.no_shares.get(cid)
        if known is None:
            replicas = self.dims(self.catalog.configs[cid]).dp
            inputs = self.inputs
            known = inputs.microbatches < replicas * inputs.least_share or bool(
                inputs.restriction.even_shares and inputs.microbatches % replicas)
            if known:
                self._types_for(cid)
            self.tables.no_shares[cid] = known
        return known

    def makespan(self, counts, times, caps) -> np.ndarray:
        """shares.min_makespan of the step's micro-batches, or even_makespan where the runtime
        gives every replica the same share (Restriction.even_shares)."""
        fn = even_makespan if self.inputs.restriction.even_shares else min_makespan
        return fn(self.inputs.microbatches, list(counts), times, caps, self.inputs.least_share)

    def stacked_makespans(self, counts, all_times, all_caps) -> np.ndarray:
        """The makespans of several configurations with the same replica-type counts in one
        vectorised call: row i from the times `all_times[i]` and the memory caps `all_caps[i]`
        (one array per replica type each)."""
        return self.makespan(counts,
                             [np.stack([np.broadcast_to(times[g], caps[g].shape) for times, caps in zip(all_times, all_caps)])
                              for g in range(len(counts))],
                             [np.stack([caps[g] for caps in all_caps]) for g in range(len(counts))])

    def replica_times(self, types: list[TypeArrays], flags: tuple[bool, bool], link: Link | None) -> list[np.ndarray]:
        """Per-micro-batch time of each replica type with its sends over `link` (None: the last
        stage of 1F1B): one in 1F1B; interleaved one per chunk, V - 1 for the last rank, whose
        head chunk sends nothing."""
        inputs = self.inputs
        if link is None:
            return [ta.time[flags] for ta in types]
        sends = 1 if not inputs.chunked else (inputs.v - 1 if flags[0] else inputs.v)
        return [ta.time[flags] + sends * p2p_s(ta.boundary_bytes, link, False, ta.cost_params) for ta in types]

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

    def _types_for(self, cid: int) -> list[TypeArrays]:
        if cid not in self.tables.types_by_id:
            self.tables.types_by_id[cid] = self.type_arrays(self.catalog.configs[cid])
        return self.tables.types_by_id[cid]

    def _finish(self, config: StageConfig, types: list[TypeArrays], latency: np.ndarray,
                busy: np.ndarray, flags: tuple[bool, bool], k: np.ndarray | None = None
                ) -> tuple[np.ndarray, float | None]:
        """X = B + E - tau (rows of `busy`: capping levels) and tau's slope when affine; recompute
        "block": `k`, its recomputed blocks per block count (-1: left out there, MemorySavers)."""
        inputs = self.inputs
        has_head, has_emb = flags
        tau = latency
        # "block": the tail's backward (what hides the gradient reduction) depends on k
        tail_key = (config, flags) if k is None else (config, flags, k.tobytes())
        tail = self.tables.tails.get(tail_key)
        if tail is None:
            tail = self.tables.tails[tail_key] = self._tail(config, types, flags)
        with np.errstate(invalid="ignore"):
            x = busy + tail - tau
        x = np.where(np.isfinite(busy) & np.isfinite(tau), x, INF)
        if inputs.chunked:
            x[..., :inputs.v] = INF  # every chunk holds at least one block
        elif not has_head and not has_emb:
            x[..., 0] = INF  # a stage holds at least one layer
        if inputs.restriction.blocks is not None:
            x[..., np.arange(x.shape[-1]) != inputs.restriction.blocks] = INF  # an equal layer split
        if k is not None:
            x = np.where(k >= 0, x, INF)
        slope = None
        if not inputs.chunked and len(types) == 1 and len(tau) > 1:
            slope = float(tau[1] - tau[0])
        return x, slope

    def _tail(self, config: StageConfig, types: list[TypeArrays], flags: tuple[bool, bool]) -> np.ndarray:
        """Exposed gradient reduction and optimizer step after the last micro-batch
        (cost.stage_tail.stage_tail, as evaluate.evaluate); independent of the stage's position."""
        slow = min(types, key=lambda ta: (min(f for _, f in ta.group.gpu.peak_flops), ta.group.gpu.name))
        tail = stage_tail(types[0].params[flags], self.dims(config), self.inputs.t.dtype, self.dp_layout(config),
                          slow.cost_params,
                          reduce(np.minimum, [ta.bwd[flags] for ta in types]),
                          [(ta.group.gpu, ta.cost_params) for ta in types],
                          expert_params=types[0].experts[flags], optimizer=self.inputs.t.optimizer,
                          offload_hosts=[(ta.group.host, ta.group.gpus_per_node) for ta in types]
                          if config.offload else (),
                          expert_layout=stage_expert_layout(self.inputs, config, self.dims(config)))
        return tail.total_s

