"""Stage configurations of the plan search and their cost as a function of the number of
decoder blocks: the same formulas as planner.cost.evaluate, vectorised over block counts so the
dynamic programme (planner.search.dp) can price a stage for every layer split at once."""

from __future__ import annotations

import weakref
from functools import reduce

import numpy as np

from ..core.clock import SearchClock
from .decompose import Decomposition
from ..inputs.hardware import Cluster, Link
from .interleave import chunk_latency
from ..inputs.model import Model
from ..plan import Training
from ..cost.pricing import p2p_s
from ..cost.stage_tail import stage_tail
from .experts import stage_expert_layout
from .block import MemorySavers
from .deferred import DeferredW
from .stage_configs import StageConfigs
from .stage_links import StageLinks
from .shares import UNCAPPED, at_least, even_makespan, min_makespan
from .stage_types import (INF, Catalog, PriceTables, ProblemInputs, Restriction, SearchState, SolverOptions, StageConfig,
                          StageCost,
                          TypeArrays, Variant, pareto_front, share_cap)

__all__ = ["INF", "Problem", "Restriction", "SolverOptions", "StageConfig", "StageCost", "TypeArrays", "Variant", "share_cap"]


class _ChunkGroup:
    """What the chunked (interleaved) problems of one micro-batch, V and restriction share whatever
    their depth: the 1F1B problem they derive their type arrays from, and price tables (their
    type arrays, tails, costs by capping level: PriceTables.depth_free). The tails are the base's:
    a chunked config's tail (exposed gradient reduction, optimizer step) is its 1F1B one."""

    __slots__ = ("base", "tables", "__weakref__")

    def __init__(self, base: "Problem"):
        self.base = base
        self.tables = PriceTables(dims=base.tables.dims, dp_layouts=base.tables.dp_layouts, tails=base.tables.tails)


# live groups by their inputs' identities (a group lives while one of its problems does)
_CHUNK_GROUPS: "weakref.WeakValueDictionary[tuple, _ChunkGroup]" = weakref.WeakValueDictionary()


class Problem(StageConfigs, StageLinks, MemorySavers, DeferredW):
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
        # a one-chunk problem takes the position-free prices of another of the same b and restriction
        if shared is not None and not self.inputs.chunked:
            self.tables = shared.tables.position_free()
        self.state = SearchState(clock)
        # a chunked problem derives its per-config arrays from the 1F1B one of the same b
        self.base: Problem | None = None
        if self.inputs.chunked:
            # the chunked problems of one micro-batch, V and restriction (one per depth) share a base
            # and their depth-free prices (_ChunkGroup), while one of them lives
            key = (id(model), id(cluster), base, b, id(parts), id(options), virtual_stages, restriction,
                   schedule_name, least_share, id(base_problem))
            group = _CHUNK_GROUPS.get(key)
            if group is None:
                group = _CHUNK_GROUPS[key] = _ChunkGroup(
                    base_problem or Problem(model, cluster, base, b, parts, options, clock=clock,
                                            restriction=restriction))
            self._group = group  # (holds it while this problem lives)
            self.base = group.base
            self.tables = group.tables.depth_free()

    def release_position_prices(self) -> None:
        """Drop the prices by position, successor and bound (its 1F1B search is done); keep the
        per-config type arrays an interleaved problem of the same micro-batch derives its own from.
        Anything dropped is priced again on use (tracing a plan), so only memory changes.
        The tails by (config, flags) stay: position-free, they are shared with the other one-chunk
        problems of this micro-batch (PriceTables.position_free), which would price them again;
        the tails of recompute "block" by its recomputed-block counts (one per position) go."""
        t = self.tables
        for table in (t.members, t.stage_by_caps, t.stage_levels, t.family, t.family_by_costs, t.recipes,
                      t.block_types, t.caps, t.per_block_left):
            table.clear()
        for key in [key for key in t.tails if len(key) > 2]:  # (config, flags, k bytes): _finish
            del t.tails[key]

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

    def transitions(self, used: tuple[int, ...]) -> list[tuple[int, tuple[int, ...], int]]:
        """(family id, nodes used after it, its signature id) for every node vector that fits.
        A family is every config on one node vector (tp, recompute, ZeRO stage)."""
        if used not in self.catalog.fitting:
            families: dict[tuple[int, ...], list[int]] = {}
            # the configurations are the same for every problem sharing these tables (PriceTables)
            key = (used, self.inputs.chunked, self.inputs.schedule.split_backward)
            configs = self.tables.config_lists.get(key)
            if configs is None:
                configs = self.tables.config_lists[key] = list(self.configs(used))
            for config in configs:
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
        """stage_cost for several configurations on one node vector (a family, or one config) at
        one position. The position (and the pipeline depth of an interleaved search) matters only
        through the in-flight count, which matters only through which replica types' memory caps
        bind at each block count (share_cap), so each (config, flags, link) is priced once, at
        every capping level (`_price_levels`), and a position picks its level per block count.
        The configs on one node vector share their boundary link to any successor."""
        inputs, tables = self.inputs, self.tables
        position = self.position(stage_from_end, ranks)
        flags = (stage_from_end == 1, has_emb)
        out: list = [None] * len(cids)
        nowhere, blocks, todo = self._sorted_members(tuple(cids), flags, position)
        if nowhere:
            never = self._nowhere()
            for index in nowhere:
                out[index] = never
        if not blocks and not todo:
            return out
        link = self.link(cids[0], successor_id)
        if blocks:
            self._price_blocks(blocks, flags, position[0], link, out)
        if position[1] and todo:  # zero bubble's caps at this position (planner.search.deferred)
            self._price_deferred(todo, flags, position, link, out)
            return out
        levels, by_caps = tables.stage_levels, tables.stage_by_caps
        missing = [(cid, flags, link) for _, cid, _ in todo if (cid, flags, link) not in levels]
        if missing:
            self._price_levels(missing)
        for index, cid, level in todo:
            base_key = (cid, flags, link)
            level_key = (base_key, level[1])
            cost = by_caps.get(level_key)
            if cost is None:
                _, tau, x_levels, slope, split = levels[base_key]
                x = x_levels[level[0], inputs.blocks_index]
                cost = by_caps[level_key] = StageCost(tau, x, slope, float(x.min()), split)
            out[index] = cost
        return out

    def _sorted_members(self, cids: tuple[int, ...], flags: tuple[bool, bool], position) -> tuple:
        """What stage_costs does with each config at a position, whatever the successor: (indices
        left out there (MemorySavers, _no_shares), (index, cid) of recompute "block", priced per
        in-flight count, and (index, cid, level) of the rest, level the capping level per block
        count with its bytes (None where W passes are deferred: priced by their caps))."""
        tables = self.tables
        key = (cids, flags, position)
        known = tables.members.get(key)
        if known is not None:
            return known
        in_flight, deferred = position
        nowhere, blocks, todo = [], [], []
        interned = tables.members.setdefault("levels", {})  # equal level arrays stored once
        for index, cid in enumerate(cids):
            config = self.catalog.configs[cid]
            if config.offload:
                never_key = ("offload never needed", cid, flags, position)
                never = tables.caps.get(never_key)
                if never is None:
                    never = tables.caps[never_key] = self._offload_never_needed(config, flags, position)
                if never:
                    nowhere.append(index)  # (its own arrays never priced)
                    continue
            if self._no_shares(cid):
                nowhere.append(index)
                continue
            if config.recompute == "block":  # its recomputed blocks depend on the position: priced per in-flight count
                blocks.append((index, cid))
                continue
            level = None
            if not deferred:
                # share_cap: a type's cap binds where its memory holds fewer than the in-flight
                # micro-batches; the types capped at a block count are the ones with least room
                counts = (self._level_caps(cid, flags)[0] < in_flight).sum(axis=0)
                level = interned.setdefault(counts.tobytes(), (counts, counts.tobytes()))
            todo.append((index, cid, level))
        known = tables.members[key] = (nowhere, blocks, todo)
        return known

    def _level_caps(self, cid: int, flags: tuple[bool, bool]) -> tuple:
        """A config's rooms (one row per replica type) and each type's caps at levels 0..G: at
        level j the j types with the least room at a block count take their memory caps."""
        tables = self.tables
        memo_key = ("levels", cid, flags)  # the rooms and caps by level do not depend on the link
        memo = tables.caps.get(memo_key)
        if memo is None:
            # nor on the config beyond its types' rooms, which configs on other node vectors share
            # (StageConfigs._replica_arrays): by their identities, kept alive with the entry
            arrays = tuple(ta.room[flags] for ta in self._types_for(cid))
            by_rooms = ("levels of", tuple(id(a) for a in arrays))
            known = tables.caps.get(by_rooms)
            if known is None or any(a is not b for a, b in zip(known[0], arrays)):
                rooms = np.stack(arrays)
                rank = np.argsort(np.argsort(rooms, axis=0, kind="stable"), axis=0)
                capped = np.maximum(np.floor(rooms), 0).astype(np.int64)
                levels = len(arrays) + 1
                known = tables.caps[by_rooms] = (arrays, (rooms, [
                    np.stack([np.where(rank[g] < j, capped[g], UNCAPPED) for j in range(levels)])
                    for g in range(len(arrays))]))
            memo = tables.caps[memo_key] = known[1]
        return memo

    def _price_levels(self, base_keys: list[tuple]) -> None:
        """Price (config, flags, link) entries at capping levels 0..G (G replica types): at
        level j the j types with the least room at each block count take their memory caps,
        the others are uncapped. The makespans of entries with the same replica counts are
        computed in one vectorised call (elementwise, so the same as pricing each position).
        One-chunk problems of a micro-batch share the makespans with at least one micro-batch per
        replica (PriceTables.level_busy): a zero-bubble problem's, with at least P, follow from them
        (shares.at_least)."""
        inputs, tables = self.inputs, self.tables
        pending: dict[tuple[int, ...], list] = {}
        chunk_levels = tables.chunk_levels if inputs.chunked else None
        level_busy = None if inputs.chunked or inputs.restriction.even_shares else tables.level_busy
        for base_key in base_keys:
            cid, flags, link = base_key
            if chunk_levels is not None:  # priced by another depth's problem (_ChunkGroup)
                known = chunk_levels.get((self.catalog.configs[cid], flags, link))
                if known is not None:
                    tables.stage_levels[base_key] = known
                    continue
            types = self._types_for(cid)
            rooms, caps = self._level_caps(cid, flags)
            one = None if level_busy is None else level_busy.get((self.catalog.configs[cid], flags, link))
            pending.setdefault(self._batch_key(types), []).append((base_key, types, rooms, caps, one))
        for batch, items in pending.items():
            all_times = [self.replica_times(types, base_key[1], base_key[2]) for base_key, types, _, _, _ in items]
            self.state.evaluations += len(items)
            todo = [(times, item) for times, item in zip(all_times, items) if item[4] is None]
            if todo:
                kinds = len(todo[0][1][1])
                busy_all = self.makespan(self._row_counts(batch, [(item[1], kinds + 1) for _, item in todo]),
                                         [np.concatenate([np.broadcast_to(times[g], item[3][g].shape)
                                                          for times, item in todo])
                                          for g in range(kinds)],
                                         [np.concatenate([item[3][g] for _, item in todo]) for g in range(kinds)],
                                         1 if level_busy is not None else None)
            row = 0
            for (base_key, types, rooms, caps, one), times in zip(items, all_times):
                cid, flags, link = base_key
                levels = len(types) + 1
                replicas = sum(ta.count for ta in types)
                if one is None:
                    busy = one = busy_all[row:row + levels]
                    row += levels
                    if level_busy is not None:
                        level_busy[(self.catalog.configs[cid], flags, link)] = one
                if level_busy is not None and inputs.least_share > 1:  # (shares.min_makespan, least > 1)
                    busy = np.full(one.shape, INF) if inputs.microbatches < inputs.least_share * replicas else \
                        at_least(inputs.least_share, [np.broadcast_to(t, c.shape) for t, c in zip(times, caps)],
                                 caps, one)
                else:
                    busy = one
                if inputs.chunked:
                    latency, split = chunk_latency(types, flags, link, inputs.v, inputs.num_blocks)
                else:
                    latency, split = self.latency(types, flags, times), None
                x, slope = self._finish(self.catalog.configs[cid], types, latency, busy, flags)
                tables.stage_levels[base_key] = (rooms, latency, x, slope, split)
                if chunk_levels is not None:
                    chunk_levels[(self.catalog.configs[cid], flags, link)] = tables.stage_levels[base_key]

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

    def makespan(self, counts, times, caps, least: int | None = None) -> np.ndarray:
        """shares.min_makespan of the step's micro-batches, or even_makespan where the runtime
        gives every replica the same share (Restriction.even_shares); each replica takes at least
        `least` (default the problem's least_share)."""
        fn = even_makespan if self.inputs.restriction.even_shares else min_makespan
        return fn(self.inputs.microbatches, list(counts), times, caps,
                  self.inputs.least_share if least is None else least)

    def stacked_makespans(self, batch, all_types, all_times, all_caps) -> np.ndarray:
        """The makespans of several configurations of one batch (_batch_key) in one vectorised
        call: row i from the replica types `all_types[i]`, their times `all_times[i]` and memory
        caps `all_caps[i]` (one array per replica type each)."""
        kinds = len(all_types[0])
        return self.makespan(self._row_counts(batch, [(types, 1) for types in all_types]),
                             [np.stack([np.broadcast_to(times[g], caps[g].shape) for times, caps in zip(all_times, all_caps)])
                              for g in range(kinds)],
                             [np.stack([caps[g] for caps in all_caps]) for g in range(kinds)])

    def _batch_key(self, types: list[TypeArrays]):
        """Which configurations share a makespan call: min_makespan takes a replica count per row,
        so any with as many replica types; even_makespan one count per type, so the same counts."""
        return tuple(ta.count for ta in types) if self.inputs.restriction.even_shares else len(types)

    def _row_counts(self, batch, rows: list[tuple[list[TypeArrays], int]]) -> list:
        """The replica counts of a batch's makespan call, one per type: (types, rows) per
        configuration in order; min_makespan's an integer column, one count per row."""
        if self.inputs.restriction.even_shares:
            return list(batch)
        return [np.concatenate([np.full((n, 1), types[g].count, dtype=np.int64) for types, n in rows])
                for g in range(batch)]

    def replica_times(self, types: list[TypeArrays], flags: tuple[bool, bool], link: Link | None) -> list[np.ndarray]:
        """Per-micro-batch time of each replica type with its sends over `link` (None: the last
        stage of 1F1B): one in 1F1B; interleaved one per chunk, V - 1 for the last rank, whose
        head chunk sends nothing."""
        inputs = self.inputs
        if link is None:
            return [ta.time[flags] for ta in types]
        sends = 1 if not inputs.chunked else (inputs.v - 1 if flags[0] else inputs.v)
        return [ta.time[flags] + sends * p2p_s(ta.boundary_bytes, link, False, ta.cost_params) for ta in types]

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

