"""Stage configurations of the plan search and their cost as a function of the number of
decoder blocks: the same formulas as planner.cost.evaluate, vectorised over block counts so the
dynamic programme (planner.search.dp) can price a stage for every layer split at once."""

from __future__ import annotations

from functools import reduce

import numpy as np

from ...core.clock import SearchClock
from ..decompose import Decomposition
from ...inputs.hardware import Link
from ...cost.p2p import p2p_message_s, p2p_rank_s
from ...cost.runtimes import p2p_mode
from ...cost.stage_tail import per_replica_tp_tail, stage_tail
from .experts import stage_expert_layout
from .block import MemorySavers
from .deferred import DeferredW
from .stage_configs import StageConfigs
from .stage_links import SendReceive, StageLinks
from .levels import CappingLevels
from .stage_types import (INF, Catalog, PriceTables, ProblemInputs, Restriction, SearchContext, SearchState, SolverOptions,
                          StageConfig,
                          StageCost,
                          TypeArrays, Variant, pareto_front, share_cap)

__all__ = ["INF", "Problem", "Restriction", "SolverOptions", "StageConfig", "StageCost", "TypeArrays", "Variant", "share_cap"]


class Problem:
    """Prices stage configurations for one (micro-batch, decomposition, V) search. Its data:
    `inputs` (frozen: what the search fixes), `catalog` (the configurations, families and
    signatures met, numbered), `tables` (prices derived from the inputs on first use) and
    `state` (the clock, the evaluation count, the smallest overflow met). Its parts, which
    share that data: `stage_configs` (the configurations and their type arrays), `links`
    (signatures and boundary links), `levels` (prices by memory-capping level),
    `memory_savers` (recompute "block" and offload) and `deferred` (the split backward)."""

    def __init__(self, context: SearchContext, micro_batch: int, parts: Decomposition, virtual_stages: int = 1,
                 base_problem: "Problem | None" = None, clock: SearchClock | None = None,
                 restriction: Restriction = Restriction(), schedule_name: str | None = None, least_share: int = 1,
                 shared: "Problem | None" = None, shapes: dict | None = None):
        self.inputs = ProblemInputs.of(context, micro_batch, parts, virtual_stages, restriction, schedule_name,
                                       least_share)
        # how its runtime's sends run under its schedule (cost.p2p); blocking ones price each
        # stage with the link it receives over too (dp.State.receive)
        self.p2p = p2p_mode(self.inputs.training.runtime, self.inputs.schedule.name)
        # the stage shapes per nodes used (StageConfigs._stage_shapes): one memo for every problem
        # of a solve (same model, sequence, options and decomposition), which the caller passes
        self.shapes: dict = {} if shapes is None else shapes
        self.catalog = Catalog()
        self.tables = PriceTables()
        # a one-chunk problem takes the position-free prices of another of the same b and restriction
        if shared is not None and not self.inputs.chunked:
            self.tables = shared.tables.position_free()
        self.state = SearchState(clock)
        self._most_blocks: dict[tuple[int, bool], int] = {}  # (family id, holds the head) -> most_blocks
        # a chunked problem derives its per-config arrays from the 1F1B one of the same b
        self.base_problem: Problem | None = None
        if self.inputs.chunked:
            # one chunked problem serves every depth of its micro-batch, V and restriction (the
            # driver passes the ranks to run_dp); a chunked config's tail (exposed gradient
            # reduction, optimizer step) is its 1F1B one, so the tails are the base's
            # (a schedule that hides the expert all-to-all prices its chunks from its own one-chunk problem)
            twin = self.inputs.schedule.name if self.inputs.schedule.overlaps_ep_comm else None
            self.base_problem = base_problem or Problem(context, micro_batch, parts, clock=clock,
                                                        restriction=restriction, schedule_name=twin,
                                                        shapes=self.shapes)
            self.tables = PriceTables(dims=self.base_problem.tables.dims,
                                      dp_layouts=self.base_problem.tables.dp_layouts,
                                      tails=self.base_problem.tables.tails)
        self.stage_configs = StageConfigs(self)
        self.links = StageLinks(self)
        self.levels = CappingLevels(self)
        self.memory_savers = MemorySavers(self)
        self.deferred = DeferredW(self)

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

    # the search's shorthands (planner.search.orchestration.driver, planner.search.dp) -----------------------------

    model = property(lambda self: self.inputs.model)
    cluster = property(lambda self: self.inputs.cluster)
    options = property(lambda self: self.inputs.options)
    micro_batch = property(lambda self: self.inputs.micro_batch)
    parts = property(lambda self: self.inputs.parts)
    virtual_stages = property(lambda self: self.inputs.virtual_stages)
    training = property(lambda self: self.inputs.training)
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
        A family is every config on one node vector (tp, recompute, ZeRO stage), its TP groups within a
        GPU type or across types (StageConfig.family)."""
        if used not in self.catalog.fitting:
            families: dict[tuple, list[int]] = {}  # by StageConfig.family
            # the configurations are the same for every problem sharing these tables (PriceTables)
            key = (used, self.inputs.chunked, self.inputs.schedule.split_backward)
            configs = self.tables.config_lists.get(key)
            if configs is None:
                # one object per configuration in every list (a StageConfig hashes in Python, an
                # object's id in C): the same configuration on other nodes used is found by its object
                interned = self.tables.config_lists.setdefault("configs", {})
                configs = self.tables.config_lists[key] = [interned.setdefault(c, c) for c in self.stage_configs.configs(used)]
            # ids by value, found by the object first: the entry keeps its object, so its id stays its own
            by_object = self.catalog.config_objects
            for config in configs:
                known = by_object.get(id(config))
                if known is None or known[0] is not config:
                    cid = self.catalog.config_ids.get(config)
                    if cid is None:
                        cid = self.catalog.config_ids[config] = len(self.catalog.configs)
                        self.catalog.configs.append(config)
                    known = by_object[id(config)] = (config, cid)
                families.setdefault(config.family, []).append(known[1])
            out = []
            for family, members in families.items():
                if family not in self.catalog.family_ids:
                    self.catalog.family_ids[family] = len(self.catalog.families)
                    self.catalog.families.append(tuple(members))
                first = self.catalog.configs[members[0]]
                new_used = self.inputs.parts.after(used, first.nodes)
                out.append((self.catalog.family_ids[family], new_used, self.links.signature_id(first.groups())))
            self.catalog.fitting[used] = out
        return self.catalog.fitting[used]

    def family_cost(self, fid: int, stage_from_end: int, has_emb: bool, successor_id: int,
                    ranks: int | None = None, receive: int = -1, lead: int = 0) -> tuple["Variant", ...]:
        """The family's configs merged per block count: at each count only the configs not
        dominated in both tau and X matter (a dominated one is never better for any bound),
        so variant j holds the j-th such config by tau. Usually one variant remains.
        Cached by the family's position and its boundary link to the successor (every member
        sits on the same nodes, so successors of the same link price it alike). `receive`: the
        number (StageLinks.link_key) of the link its predecessor sends to it over, where the
        runtime's sends block (-1: none, or they do not). `lead`: the lead blocks the stage holds besides
        the counted ones (ProblemInputs.lead)."""
        tables = self.tables
        fast_key = (fid, stage_from_end, ranks, has_emb, successor_id, receive, lead)
        cached = tables.family.get(fast_key)
        if cached is not None:
            return cached
        members = self.catalog.families[fid]
        key = (fid, self.deferred.position(stage_from_end, ranks), stage_from_end == 1, has_emb,
               self.links.link(members[0], successor_id), receive, lead)
        cached = tables.family.get(key)
        if cached is None:
            cached = tables.family[key] = self._merged_family(fid, stage_from_end, has_emb, successor_id, ranks,
                                                              receive, lead)
        tables.family[fast_key] = cached
        return cached

    def most_blocks(self, fid: int, has_head: bool) -> int:
        """The most counted blocks any configuration of family `fid` can hold without the embedding or lead
        blocks (some replica type's memory room not negative: StageConfigs._replica_arrays), an upper bound
        for the same stage with them, which only take room (the DP skips the stages with lead blocks or the
        embedding no state can reach: dp._offers)."""
        key = (fid, has_head)
        most = self._most_blocks.get(key)
        if most is None:
            flags = (has_head, False, 0)
            fits = [np.flatnonzero(ta.room[flags] >= 0) for cid in self.catalog.families[fid]
                    for ta in self.types_for(cid)]
            most = self._most_blocks[key] = max((int(k[-1]) for k in fits if k.size), default=-1)
        return most

    def _merged_family(self, fid: int, stage_from_end: int, has_emb: bool, successor_id: int,
                       ranks: int | None, receive: int, lead: int = 0) -> tuple["Variant", ...]:
        """family_cost, uncached."""
        members = self.catalog.families[fid]
        costs = self.levels.stage_costs(members, stage_from_end, has_emb, successor_id, ranks, receive, lead)
        if any(c.x_min == INF for c in costs):  # left out at this position (MemorySavers): merge the rest
            kept = [(m, c) for m, c in zip(members, costs) if c.x_min < INF]
            members, costs = tuple(m for m, _ in kept), [c for _, c in kept]
            if not members:
                return ()
        # the costs are cached, so ids are stable
        costs_key = (fid, tuple(id(c) for c in costs))
        merged = self.tables.family_by_costs.get(costs_key)
        if merged is not None:
            return merged
        taus = np.stack([c.tau for c in costs])
        xs = np.stack([c.x for c in costs])
        feasible = np.isfinite(xs)
        taus = np.where(feasible, taus, INF)
        order, count = pareto_front(taus, xs)
        variants = []
        depth = int(count.max()) if count.size else 0
        if depth:
            # variant j's rows at once: the j-th kept config per block count, -1 and inf past the kept ones
            picks = order[:depth]
            valid = np.arange(depth)[:, None] < count
            columns = np.arange(taus.shape[1])
            member_all = np.where(valid, np.asarray(members)[picks], -1)
            tau_all = np.where(valid, taus[picks, columns], INF)
            x_all = np.where(valid, xs[picks, columns], INF)
            x_mins = x_all.min(axis=1)
            slopes = {cid: c.slope for cid, c in zip(members, costs)}
            for j in range(depth):
                member = member_all[j]
                runs = tuple((int(cid), member == cid, slopes[int(cid)]) for cid in np.unique(member[member >= 0]))
                variants.append(Variant(tau_all[j], x_all[j], member, float(x_mins[j]), runs))
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
        return inputs.schedule.in_flight_microbatches(ranks - stage_from_end, ranks, inputs.virtual_stages,
                                                      inputs.microbatches)

    def stage_cost(self, cid: int, stage_from_end: int, has_emb: bool, successor_id: int,
                   ranks: int | None = None, receive: int = -1, lead: int = 0) -> StageCost:
        """StageCost (tau, X, slope, min X, split) over block counts for a pipeline rank placed
        `stage_from_end` (1 = last) before a successor with signature `successor_id` (-1:
        none), in a pipeline of `ranks` ranks (interleaved only). tau is the latency of one
        micro-batch through the rank, interleaved through its slowest chunk, and
        X = B + E - tau, so that T = max X + sum tau (evaluate.pipeline_time_s). `slope` is
        set when tau is affine in the block count (1F1B, one replica type), else None;
        `split` is the blocks of the embedding's or head's chunk (interleaved, else None).

        Interleaved: each of the rank's V chunks sends its activations on, to the next rank,
        or for the last rank's first V - 1 chunks around to rank 0, whose signature the
        search passes as the last rank's successor (interleave.chunk_latency). The rank holds `lead`
        lead blocks besides the counted ones (ProblemInputs.lead)."""
        return self.levels.stage_costs((cid,), stage_from_end, has_emb, successor_id, ranks, receive, lead)[0]

    def replica_times(self, types: list[TypeArrays], flags: tuple[bool, bool, int],
                      link: "Link | SendReceive | None") -> list[np.ndarray]:
        """Per-micro-batch time of each replica type with what it waits for of its sends over
        `link` (None: the last stage of 1F1B) and, where the runtime's sends block, its receives
        (SendReceive) under the runtime's schedule (cost.p2p.p2p_rank_s, as
        cost.replica_pricer prices them): one send in 1F1B; interleaved one per chunk, V - 1 for
        the last rank, whose head chunk sends nothing."""
        inputs = self.inputs
        send, receive = (link.send, link.receive) if isinstance(link, SendReceive) else (link, None)
        if send is None and receive is None:
            return [ta.time[flags] for ta in types]
        sends = 1 if not inputs.chunked else (inputs.virtual_stages - 1 if flags[0] else inputs.virtual_stages)
        out = []
        for ta in types:
            time = ta.time[flags]
            sent = 0.0 if send is None else sends * p2p_message_s(ta.boundary_bytes, send, False, ta.cost_params)
            received = 0.0 if receive is None else p2p_message_s(ta.boundary_bytes, receive, False, ta.cost_params)
            send_side, receive_side = p2p_rank_s(self.p2p, sent, received, time)
            out.append(time + (send_side + receive_side))
        return out

    def types_for(self, cid: int) -> list[TypeArrays]:
        if cid not in self.tables.types_by_id:
            self.tables.types_by_id[cid] = self.stage_configs.type_arrays(self.catalog.configs[cid])
        return self.tables.types_by_id[cid]

    def _finish(self, config: StageConfig, types: list[TypeArrays], latency: np.ndarray,
                busy: np.ndarray, flags: tuple[bool, bool, int], recomputed: np.ndarray | None = None
                ) -> tuple[np.ndarray, float | None]:
        """X = B + E - tau (rows of `busy`: capping levels) and tau's slope when affine; recompute
        "block": `k`, its recomputed blocks per block count (-1: left out there, MemorySavers)."""
        xs, slopes = self.finish_many([(config, types, latency, recomputed)], busy.reshape(-1, busy.shape[-1]), flags)
        return xs.reshape(busy.shape), slopes[0]

    def finish_many(self, items: list[tuple], busy: np.ndarray, flags: tuple[bool, bool, int]
                     ) -> tuple[np.ndarray, list[float | None]]:
        """_finish of several configurations (config, types, latency, k or None) in one call:
        `busy` holds as many rows for each (its capping levels), in order; X in the same rows."""
        inputs = self.inputs
        has_head, has_emb, lead = flags
        shape = busy.shape[-1:]
        tails, taus, ks = [], [], []
        for config, types, latency, k in items:
            # "block": the tail's backward (what hides the gradient reduction) depends on k
            tail_key = (config, flags) if k is None else (config, flags, k.tobytes())
            tail = self.tables.tails.get(tail_key)
            if tail is None:
                tail = self.tables.tails[tail_key] = self._shared_tail(config, types, flags)
            tails.append(tail if getattr(tail, "shape", None) == shape else np.broadcast_to(tail, shape))
            taus.append(latency)
            if k is not None:
                ks.append(k)
        tail, tau = np.stack(tails), np.stack(taus)
        rows = len(busy) // len(items)
        if rows > 1:
            tail, tau = np.repeat(tail, rows, axis=0), np.repeat(tau, rows, axis=0)
        with np.errstate(invalid="ignore"):
            x = busy + tail - tau
            # infinite where busy or tau is: busy and tau are +inf there, never -inf or nan, and the
            # tail finite, so x is +inf, -inf or nan exactly there
            x = np.where(x > -INF, x, INF)
        if inputs.chunked:
            # every chunk holds at least one block (the embedding's, with the lead blocks, holds those)
            x[..., :inputs.virtual_stages - (1 if lead else 0)] = INF
        elif not has_head and not has_emb and not lead:
            x[..., 0] = INF  # a stage holds at least one layer
        if inputs.restriction.blocks is not None:  # an equal layer split
            x[..., np.arange(x.shape[-1]) != inputs.restriction.blocks - lead] = INF
        if ks:
            assert len(ks) == len(items) and rows == 1, "recompute block: one row per configuration"
            x = np.where(np.stack(ks) >= 0, x, INF)
        slopes = [float(latency[1] - latency[0]) if not inputs.chunked and len(types) == 1 and len(latency) > 1
                  else None for _, types, latency, _ in items]
        return x, slopes

    def _shared_tail(self, config: StageConfig, types: list[TypeArrays], flags: tuple[bool, bool, int]) -> np.ndarray:
        """_tail, once per its replica types' arrays, dimensions and layouts, which configurations on
        other node vectors share (StageConfigs._replica_arrays): by the arrays' identities, kept
        alive with the entry (released with the recomputed-block counts' tails)."""
        dims = self.stage_configs.dims(config)
        arrays = tuple(ta.time for ta in types)
        key = ("tail of", flags, dims, self.stage_configs.dp_layout(config), stage_expert_layout(self.inputs, config, dims),
               config.offload, tuple(id(a) for a in arrays))
        known = self.tables.tails.get(key)
        if known is None or any(a is not b for a, b in zip(known[0], arrays)):
            known = self.tables.tails[key] = (arrays, self._tail(config, types, flags))
        return known[1]

    def _tail(self, config: StageConfig, types: list[TypeArrays], flags: tuple[bool, bool, int]) -> np.ndarray:
        """Exposed gradient reduction and optimizer step after the last micro-batch
        (cost.stage_tail.stage_tail, as evaluate.evaluate); independent of the stage's position."""
        if config.tp_split:
            return self.stage_configs.across.tail(config, types, self.stage_configs.dims(config),
                                                  self.stage_configs.dp_layout(config), flags)
        slow = min(types, key=lambda ta: (min(f for _, f in ta.group.gpu.peak_flops), ta.group.gpu.name))
        min_bwd = reduce(np.minimum, [ta.bwd[flags] for ta in types])
        groups = [i for i, n in enumerate(config.nodes) if n]  # types' order
        by_tp: dict[int, list[TypeArrays]] = {}
        first_group: dict[int, int] = {}  # per degree, its first group (whose dimensions it takes)
        for i, ta in zip(groups, types):
            by_tp.setdefault(config.group_tp(i), []).append(ta)
            first_group.setdefault(config.group_tp(i), i)
        tails = {}
        for tp, alike in sorted(by_tp.items()):
            dims = self.stage_configs.group_dims(config, first_group[tp])
            tails[tp] = stage_tail(alike[0].params[flags], dims, self.inputs.training.dtype,
                                   self.stage_configs.dp_layout(config), slow.cost_params, min_bwd,
                                   [(ta.group.gpu, ta.cost_params) for ta in alike],
                                   expert_params=alike[0].experts[flags], optimizer=self.inputs.training.optimizer,
                                   **_ns_of(alike[0], flags),
                                   offload_hosts=[(ta.group.host, ta.group.gpus_in_node) for ta in alike]
                                   if config.offload else (),
                                   expert_layout=stage_expert_layout(self.inputs, config, self.stage_configs.dims(config)))
        return per_replica_tp_tail(tails).total_s


def _ns_of(arrays: TypeArrays, flags: tuple[bool, bool, int]) -> dict:
    """stage_tail's Newton-Schulz FLOPs of a replica type (TypeArrays.ns; none where not priced)."""
    dense, experts = arrays.ns.get(flags, (0.0, 0.0))
    return {"ns_flops": dense, "ns_expert_flops": experts}
