"""A stage's cost at a pipeline position from its costs by memory-capping level (a mixin of
planner.search.pricing.stages.Problem): which configurations a position leaves out, the caps of each
capping level, and the makespans of a family's configurations in one vectorised call
(planner.search.pricing.shares.min_makespan), shared where the prices allow (PriceTables.position_free)."""

from __future__ import annotations

import numpy as np

from .interleave import chunk_latency
from .shares import UNCAPPED, at_least, even_makespan, min_makespan
from .stage_types import INF, ProblemPart, StageCost, TypeArrays


class CappingLevels(ProblemPart):
    """A Problem's pricing by capping level."""

    def stage_costs(self, cids, stage_from_end: int, has_emb: bool, successor_id: int,
                    ranks: int | None = None, receive: int = -1, lead: int = 0) -> list[StageCost]:
        """stage_cost for several configurations on one node vector (a family, or one config) at
        one position. The position (and the pipeline depth of an interleaved search) matters only
        through the in-flight count, which matters only through which replica types' memory caps
        bind at each block count (share_cap), so each (config, flags, link) is priced once, at
        every capping level (`_price_levels`), and a position picks its level per block count.
        The configs on one node vector share their boundary link to any successor; `receive`
        (Problem.family_cost) adds the one from the predecessor (StageLinks.boundaries)."""
        inputs, tables = self.inputs, self.tables
        position = self.problem.deferred.position(stage_from_end, ranks)
        flags = (stage_from_end == 1, has_emb, lead)
        out: list = [None] * len(cids)
        nowhere, blocks, todo = self._sorted_members(tuple(cids), flags, position)
        if nowhere:
            never = self.problem.memory_savers.nowhere()
            for index in nowhere:
                out[index] = never
        if not blocks and not todo:
            return out
        link = self.problem.links.boundaries(self.problem.links.link(cids[0], successor_id), receive)
        lid = self.problem.links.link_key(link)  # (the tables' keys take the link by its number)
        if blocks:
            self.problem.memory_savers.price_blocks(blocks, flags, position[0], link, lid, out)
        if position[1] and todo:  # zero bubble's caps at this position (planner.search.pricing.deferred)
            self.problem.deferred.price_deferred(todo, flags, position, link, lid, out)
            return out
        levels, by_caps = tables.stage_levels, tables.stage_by_caps
        missing = [(cid, flags, lid) for _, cid, _ in todo if (cid, flags, lid) not in levels]
        if missing:
            self._price_levels(missing, link)
        for index, cid, level in todo:
            base_key = (cid, flags, lid)
            level_key = (cid, flags, lid, level[1])
            cost = by_caps.get(level_key)
            if cost is None:
                _, tau, x_levels, slope, split = levels[base_key]
                x = x_levels[level[0], inputs.blocks_index]
                cost = by_caps[level_key] = StageCost(tau, x, slope, float(x.min()), split)
            out[index] = cost
        return out

    def _sorted_members(self, cids: tuple[int, ...], flags: tuple[bool, bool, int], position) -> tuple:
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
        configs, no_shares = self.catalog.configs, tables.no_shares
        leveled = []  # (place in todo, cid) of the configs priced by capping level
        for index, cid in enumerate(cids):
            config = configs[cid]
            if config.offload and self.problem.memory_savers.offload_never_needed(config, flags, position):
                nowhere.append(index)  # (its own arrays never priced)
                continue
            none = no_shares.get(cid)
            if none if none is not None else self._no_shares(cid):
                nowhere.append(index)
                continue
            if config.recompute == "block":  # its recomputed blocks depend on the position: priced per in-flight count
                blocks.append((index, cid))
                continue
            if not deferred:
                leveled.append((len(todo), cid))
            todo.append((index, cid, None))
        rooms: dict[tuple, list] = {}  # the level configs' rooms by shape, with their places in todo
        if leveled:
            by_cid = self._level_caps_many([cid for _, cid in leveled], flags)
            for at, cid in leveled:
                room = by_cid[cid][0]
                rooms.setdefault(room.shape, []).append((at, room))
        # share_cap: a type's cap binds where its memory holds fewer than the in-flight
        # micro-batches; the types capped at a block count are the ones with least room
        # (every config's count per block count in one call; equal level arrays stored once)
        interned = tables.members.setdefault("levels", {})
        for placed in rooms.values():
            counts = (np.stack([room for _, room in placed]) < in_flight).sum(axis=1)
            for (at, _), row in zip(placed, counts):
                data = row.tobytes()
                level = interned.get(data)
                if level is None:
                    level = interned[data] = (row.copy(), data)
                index, cid, _ = todo[at]
                todo[at] = (index, cid, level)
        known = tables.members[key] = (nowhere, blocks, todo)
        return known

    def _level_caps(self, cid: int, flags: tuple[bool, bool, int]) -> tuple:
        """A config's rooms (one row per replica type) and each type's caps at levels 0..G: at
        level j the j types with the least room at a block count take their memory caps."""
        memo = self.tables.caps.get(("levels", cid, flags))
        return memo if memo is not None else self._level_caps_many([cid], flags)[cid]

    def _level_caps_many(self, cids: list[int], flags: tuple[bool, bool, int]) -> dict[int, tuple]:
        """_level_caps of several configs, those not met yet in one call per shape (elementwise per
        block count and sorted per block count, so the same as one call each)."""
        tables = self.tables
        out, todo = {}, {}
        for cid in cids:
            memo_key = ("levels", cid, flags)  # the rooms and caps by level do not depend on the link
            memo = tables.caps.get(memo_key)
            if memo is not None:
                out[cid] = memo
                continue
            # nor on the config beyond its types' rooms, which configs on other node vectors share
            # (StageConfigs._replica_arrays): by their identities, kept alive with the entry
            arrays = tuple(ta.room[flags] for ta in self.problem.types_for(cid))
            by_rooms = ("levels of", tuple(id(a) for a in arrays))
            known = tables.caps.get(by_rooms)
            if known is None or any(a is not b for a, b in zip(known[0], arrays)):
                todo.setdefault(by_rooms, (arrays, []))[1].append(cid)
            else:
                out[cid] = tables.caps[memo_key] = known[1]
        by_shape: dict[tuple, list] = {}
        for by_rooms, (arrays, met) in todo.items():
            by_shape.setdefault(tuple(a.shape for a in arrays), []).append((by_rooms, arrays, met))
        for group in by_shape.values():
            rooms = np.stack([np.stack(arrays) for _, arrays, _ in group])  # (config, type g, block count)
            rank = np.argsort(np.argsort(rooms, axis=1, kind="stable"), axis=1)
            capped = np.maximum(np.floor(rooms), 0).astype(np.int64)
            levels = rooms.shape[1] + 1
            # (config, type g, level j, block count) in one call, a row of (level, block count) per type
            by_level = np.where(rank[:, :, None, :] < np.arange(levels)[None, None, :, None], capped[:, :, None, :],
                                UNCAPPED)
            for (by_rooms, arrays, met), room, caps in zip(group, rooms, by_level):
                value = (room, list(caps))
                tables.caps[by_rooms] = (arrays, value)
                for cid in met:
                    out[cid] = tables.caps[("levels", cid, flags)] = value
        return out

    def _price_levels(self, base_keys: list[tuple], link) -> None:
        """Price (config, flags, link number) entries over `link` at capping levels 0..G (G replica types): at
        level j the j types with the least room at each block count take their memory caps,
        the others are uncapped. The makespans of entries with the same replica counts are
        computed in one vectorised call (elementwise, so the same as pricing each position).
        One-chunk problems of a micro-batch share the makespans with at least one micro-batch per
        replica (PriceTables.level_busy): a zero-bubble problem's, with at least P, follow from them
        (shares.at_least)."""
        inputs, tables = self.inputs, self.tables
        pending: dict[tuple[int, ...], list] = {}
        level_busy = None if inputs.chunked or inputs.restriction.even_shares else tables.level_busy
        for base_key in base_keys:
            cid, flags, lid = base_key
            types = self.problem.types_for(cid)
            rooms, caps = self._level_caps(cid, flags)
            one = None if level_busy is None else level_busy.get((self.catalog.configs[cid], flags, lid))
            pending.setdefault(self.batch_key(types), []).append((base_key, types, rooms, caps, one))
        for batch, items in pending.items():
            all_times = [self.problem.replica_times(types, base_key[1], link) for base_key, types, _, _, _ in items]
            self.state.evaluations += len(items)
            todo = [(times, item) for times, item in zip(all_times, items) if item[4] is None]
            if todo:
                kinds = len(todo[0][1][1])
                busy_all = self.makespan(self._row_counts(batch, [(item[1], kinds + 1) for _, item in todo]),
                                         [np.repeat(np.stack([times[g] for times, _ in todo]), kinds + 1, axis=0)
                                          for g in range(kinds)],
                                         [np.concatenate([item[3][g] for _, item in todo]) for g in range(kinds)],
                                         1 if level_busy is not None else None)
            row = 0
            finished, busies = [], []
            for (base_key, types, rooms, caps, one), times in zip(items, all_times):
                cid, flags, lid = base_key
                levels = len(types) + 1
                replicas = sum(ta.count for ta in types)
                if one is None:
                    busy = one = busy_all[row:row + levels]
                    row += levels
                    if level_busy is not None:
                        level_busy[(self.catalog.configs[cid], flags, lid)] = one
                if level_busy is not None and inputs.least_share > 1:  # (shares.min_makespan, least > 1)
                    busy = np.full(one.shape, INF) if inputs.microbatches < inputs.least_share * replicas else \
                        at_least(inputs.least_share, times, caps, one)
                else:
                    busy = one
                if inputs.chunked:  # (by the types' chunk times: configs on other node vectors share them)
                    # (and their pass times: what overlapped sends hide behind, cost.p2p.p2p_rank_s)
                    chunks = tuple(x for ta in types for x in (ta.chunk, ta.time[flags]))
                    by_chunks = ("latency", tuple(id(c) for c in chunks), flags, lid)
                    known = tables.replica_arrays.get(by_chunks)
                    if known is None or any(a is not b for a, b in zip(known[0], chunks)):
                        known = tables.replica_arrays[by_chunks] = (chunks,
                                                                    chunk_latency(types, flags, link, inputs.virtual_stages, self.problem.p2p,
                                                                                          inputs.num_blocks))
                    latency, split = known[1]
                else:
                    latency, split = self.problem.deferred.latency(types, flags, times), None
                finished.append((self.catalog.configs[cid], types, latency, None))
                busies.append((busy, rooms, split))
            # X of the batch's configurations in one call (every one has as many capping levels)
            xs, slopes = self.problem.finish_many(finished, np.concatenate([busy for busy, _, _ in busies]), flags)
            levels = len(xs) // len(items)
            for at, ((base_key, _, _, _, _), (_, _, latency, _), (_, rooms, split), slope) in enumerate(
                    zip(items, finished, busies, slopes)):
                tables.stage_levels[base_key] = (rooms, latency, xs[at * levels:(at + 1) * levels], slope, split)

    def _no_shares(self, cid: int) -> bool:
        """Whether no batch shares exist for the config's replicas whatever their times and caps, so
        the makespan (min_makespan, even_makespan) is infinite at every block count: fewer
        micro-batches than replicas x least_share, or even shares that do not divide them. Its type
        arrays are priced all the same (they carry the smallest overflow a no-plan message reports)."""
        known = self.tables.no_shares.get(cid)
        if known is None:
            replicas = self.problem.stage_configs.dims(self.catalog.configs[cid]).dp
            inputs = self.inputs
            known = inputs.microbatches < replicas * inputs.least_share or bool(
                inputs.restriction.even_shares and inputs.microbatches % replicas)
            if known:
                self.problem.types_for(cid)
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
        """The makespans of several configurations of one batch (batch_key) in one vectorised
        call: row i from the replica types `all_types[i]`, their times `all_times[i]` and memory
        caps `all_caps[i]` (one array per replica type each)."""
        kinds = len(all_types[0])
        return self.makespan(self._row_counts(batch, [(types, 1) for types in all_types]),
                             [np.stack([times[g] if times[g].shape == caps[g].shape
                                        else np.broadcast_to(times[g], caps[g].shape)
                                        for times, caps in zip(all_times, all_caps)])
                              for g in range(kinds)],
                             [np.stack([caps[g] for caps in all_caps]) for g in range(kinds)])

    def batch_key(self, types: list[TypeArrays]):
        """Which configurations share a makespan call: min_makespan takes a replica count per row,
        so any with as many replica types; even_makespan one count per type, so the same counts."""
        return tuple(ta.count for ta in types) if self.inputs.restriction.even_shares else len(types)

    def _row_counts(self, batch, rows: list[tuple[list[TypeArrays], int]]) -> list:
        """The replica counts of a batch's makespan call, one per type: (types, rows) per
        configuration in order; min_makespan's an integer column, one count per row."""
        if self.inputs.restriction.even_shares:
            return list(batch)
        repeats = [n for _, n in rows]
        return [np.repeat(np.array([types[g].count for types, _ in rows], dtype=np.int64), repeats)[:, None]
                for g in range(batch)]
