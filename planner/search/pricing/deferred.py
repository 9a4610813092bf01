"""Zero bubble in the search (planner.search.pricing.stages.Problem's DeferredW part): ZB-H1 (Qi et al.
2023, Zero Bubble, sec 3.1) runs 1F1B with the backward split into B and W, rank k holding back
k W passes. Two things change against 1F1B, both per pipeline position:

- the memory caps: a rank holds its in-flight micro-batches whole and the weight-GEMM inputs
  of `deferred` more (Schedule.deferred_w_microbatches), so a replica type's cap at a position
  is stagetypes.deferred_share_cap, not the floor of its room; the level pricing (caps = floor
  of the room for the capped types) holds only where nothing is deferred (the first rank), so
  the other positions are priced by their caps, each distinct (config, flags, link, caps) once;
- the latency: T_F + T_B - T_W per rank (Schedule.latency_s), position-free, so the level
  tables of a zero-bubble Problem carry it.

Every replica takes at least p micro-batches (planner.plan: the zero-bubble bubble holds with
p per replica), so a zero-bubble Problem is built per pipeline depth p (ProblemInputs.least_share).
Recompute "block" derives its count from the in-flight micro-batches alone, so a zero-bubble
search leaves it out, as the interleaved one does."""

from __future__ import annotations

from functools import reduce

import numpy as np

from .stage_types import ProblemPart, StageCost, TypeArrays, deferred_share_cap, share_cap

Position = tuple[float, float]  # (in-flight micro-batches, deferred W passes) of a pipeline rank


class DeferredW(ProblemPart):
    """The split backward's part of planner.search.pricing.stages.Problem."""

    def position(self, stage_from_end: int, ranks: int | None) -> Position:
        """A rank's in-flight micro-batches (Problem.in_flight) and deferred W passes
        (Schedule.deferred_w_microbatches, 0 but for a split backward)."""
        inputs = self.inputs
        in_flight = self.problem.in_flight(stage_from_end, ranks)
        if not inputs.schedule.split_backward:
            return in_flight, 0.0
        ranks = stage_from_end if ranks is None else ranks
        return in_flight, inputs.schedule.deferred_w_microbatches(ranks - stage_from_end, ranks, inputs.virtual_stages,
                                                                  inputs.microbatches)

    def share_caps(self, types: list[TypeArrays], flags: tuple[bool, bool, int], position: Position) -> list[np.ndarray]:
        """Each replica type's most micro-batches per block count at `position`."""
        in_flight, deferred = position
        if not deferred:
            return [share_cap(ta.room[flags], in_flight) for ta in types]
        return [deferred_share_cap(ta.room[flags], ta.wgrad_share[flags], in_flight, deferred) for ta in types]

    def _deferred_cap(self, ta: TypeArrays, flags: tuple[bool, bool, int], position: Position) -> np.ndarray:
        """deferred_share_cap of one replica type, once per its arrays (which configurations on
        other node vectors share, StageConfigs._replica_arrays), by identity, kept with the entry."""
        room, share = ta.room[flags], ta.wgrad_share[flags]
        key = ("deferred cap", id(room), id(share), position)
        known = self.tables.caps.get(key)
        if known is None or known[0] is not room or known[1] is not share:
            known = self.tables.caps[key] = (room, share, deferred_share_cap(room, share, *position))
        return known[2]

    def _deferred_caps_at(self, all_types: list[list[TypeArrays]], flags: tuple[bool, bool, int], position: Position) -> None:
        """_deferred_cap of every replica type of `all_types` not met yet at `position`, in one call
        (deferred_share_cap is elementwise, so the same as one call per type)."""
        caps = self.tables.caps
        todo: dict[tuple, tuple] = {}
        for types in all_types:
            for ta in types:
                room, share = ta.room[flags], ta.wgrad_share[flags]
                key = ("deferred cap", id(room), id(share), position)
                known = caps.get(key)
                if (known is None or known[0] is not room or known[1] is not share) and key not in todo:
                    todo[key] = (room, share)
        by_shape: dict[tuple, list] = {}
        for key, (room, share) in todo.items():
            by_shape.setdefault((room.shape, share.shape), []).append((key, room, share))
        for group in by_shape.values():
            rows = deferred_share_cap(np.stack([room for _, room, _ in group]), np.stack([share for _, _, share in group]),
                                      *position)
            for (key, room, share), row in zip(group, rows):
                caps[key] = (room, share, row)

    def latency(self, types: list[TypeArrays], flags: tuple[bool, bool, int], times: list[np.ndarray]) -> np.ndarray:
        """tau of a one-chunk rank: its slowest replica type's Schedule.latency_s (1F1B: the time
        per micro-batch with its sends; ZB-H1: less 2 W)."""
        schedule, v = self.inputs.schedule, self.inputs.virtual_stages
        if not schedule.split_backward:
            return reduce(np.maximum, times)
        return reduce(np.maximum, [schedule.latency_s(tm, tm, v, ta.wgrad[flags]) for tm, ta in zip(times, types)])

    def _times_and_latency(self, cid: int, types: list[TypeArrays], flags: tuple[bool, bool, int], link, lid: int
                           ) -> tuple[list[np.ndarray], np.ndarray]:
        """A config's replica times over `link` (number `lid`) and its latency, the same at every position."""
        key = ("times", cid, flags, lid)
        known = self.tables.caps.get(key)
        if known is None:
            times = self.problem.replica_times(types, flags, link)
            known = self.tables.caps[key] = (times, self.latency(types, flags, times))
        return known

    def price_deferred(self, todo: list[tuple], flags: tuple[bool, bool, int], position: Position, link, lid: int,
                        out: list) -> None:
        """stage_costs for (index, cid, _) over `link` (number `lid`) at a position with deferred W passes:
        each distinct (config, flags, link, caps) priced once, the makespans of the same replica
        counts in one vectorised call (as CappingLevels._price_levels)."""
        tables = self.tables
        pending: dict[tuple[int, ...], list] = {}
        new = [cid for _, cid, _ in todo if ("deferred", cid, flags, position) not in tables.caps]
        if new:  # their types' caps at this position in one call
            self._deferred_caps_at([self.problem.types_for(cid) for cid in new], flags, position)
        for index, cid, _ in todo:
            memo_key = ("deferred", cid, flags, position)  # the caps do not depend on the link
            memo = tables.caps.get(memo_key)
            if memo is None:
                types = self.problem.types_for(cid)
                caps = [self._deferred_cap(ta, flags, position) for ta in types]  # (as share_caps)
                memo = tables.caps[memo_key] = (caps, b"".join(c.tobytes() for c in caps), types)
            caps, caps_bytes, types = memo
            caps_key = ("deferred", cid, flags, lid, caps_bytes)
            cached = tables.stage_by_caps.get(caps_key)
            if cached is not None:
                out[index] = cached
                continue
            pending.setdefault(self.problem.levels.batch_key(types), []).append((index, cid, caps_key, types, caps))
        for batch, group in pending.items():
            timed = [self._times_and_latency(cid, types, flags, link, lid) for _, cid, _, types, _ in group]
            self.state.evaluations += len(group)
            busy_all = self.problem.levels.stacked_makespans(batch, [item[3] for item in group], [times for times, _ in timed],
                                              [item[4] for item in group])
            xs, slopes = self.problem.finish_many([(self.catalog.configs[cid], types, latency, None) for (_, cid, _, types, _),
                                            (_, latency) in zip(group, timed)], busy_all, flags)
            for (index, _, caps_key, _, _), (_, latency), x, slope, x_min in zip(group, timed, xs, slopes,
                                                                                  xs.min(axis=1)):
                tables.stage_by_caps[caps_key] = out[index] = StageCost(latency, x, slope, float(x_min), None)
