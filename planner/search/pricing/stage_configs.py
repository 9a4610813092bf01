"""The stage configurations a search enumerates (StageConfigs.configs: nodes, tp, cp, ep,
recompute, ZeRO, offload within the runtime's restriction) and what each one costs per decoder
block on every replica type (type_arrays), with its parallel dimensions and data-parallel layout:
the per-configuration half of planner.search.pricing.stages.Problem, which mixes it in."""

from __future__ import annotations

from dataclasses import replace
from itertools import product
from typing import Iterable, Iterator

import numpy as np

from ...core.dims import StageDims
from ...cost.paths import collective_links, whole_node_layout
from .interleave import interleaved_type_arrays
from ...inputs.hardware import NodeGroup
from ...plan import Training
from .context_parallel import cp_choices, places
from ...cost.fp8 import fp8_gather_block_params
from .lead import lead_fp8_gathered, lead_parts, lead_price
from ...cost.pricing import ChunkTime, DpLayout, boundary_bytes, layer_price, span_price, zero_comm
from ...cost.stage_memory import offload_fits, replica_memory
from .experts import ep_degrees, stage_ep_group, stage_expert_layout
from ...cost.attention_kernels import priced_attention
from ...cost.sharding import Sharding
from .across_types import AcrossTypes
from .block import BlockPrices
from .shares import UNCAPPED
from .stage_types import INF, ProblemPart, SolverOptions, StageConfig, TypeArrays


def searched_recompute_modes(options: SolverOptions, training: Training, gpu_name: str) -> list[str]:
    """The recompute modes the search tries: Megatron's selective recompute is identical to none
    under flash attention (as the runtime runs it on the GPU: attention_kernels.priced_attention);
    a runtime whose selective checkpointing is per-op (torchtitan) saves less, so it stays a choice."""
    return [m for m in options.recompute_modes if m != "selective" or selective_differs(options, training, gpu_name)]


def selective_differs(options: SolverOptions, training: Training, gpu_name: str) -> bool:
    """Whether selective recompute prices apart from none on this GPU (searched_recompute_modes)."""
    params = options.params_for(gpu_name)
    flash = priced_attention(training.attention, params.fused_attention) == "flash"
    return not flash or params.selective_recompute == "op"


def cluster_recompute_modes(options: SolverOptions, training: Training, groups: Iterable[NodeGroup]) -> list[str]:
    """The recompute modes searched on a cluster of these node groups: those searched_recompute_modes
    keeps on some group's GPU (selective stays where some GPU runs attention without flash, e.g.
    Megatron-LM's standard attention before Ampere), in the options' order."""
    kept = {m for group in groups for m in searched_recompute_modes(options, training, group.gpu.name)}
    return [m for m in options.recompute_modes if m in kept]


def group_tp_degrees(tp_degrees, group: NodeGroup, heads: int) -> list[int]:
    """The TP degrees (of `tp_degrees`) a node group's replicas may take under per-replica TP: each dividing
    its GPUs per node and the heads."""
    return [tp for tp in tp_degrees if group.gpus_per_node % tp == 0 and heads % tp == 0]


class StageConfigs(ProblemPart):
    """A Problem's configurations and per-configuration tables; the stage shapes per nodes used
    are the problem's `shapes`, one memo for every problem of a solve."""

    def __init__(self, problem):
        super().__init__(problem)
        self.shapes: dict = problem.shapes
        self.across = AcrossTypes(problem)

    @property
    def max_stages(self) -> int:
        """Pipeline stages a plan may have: the options', less where the restriction says."""
        fixed = self.inputs.restriction.max_stages
        return self.inputs.options.max_stages if fixed is None else min(fixed, self.inputs.options.max_stages)

    def configs(self, used: tuple[int, ...]) -> Iterator[StageConfig]:
        inputs = self.inputs
        fixed = inputs.restriction
        # "block" derives its recomputed-block count from the rank's in-flight micro-batches, which
        # 1F1B fixes per position; the interleaved and zero-bubble searches leave it out
        # (planner.search.pricing.block, planner.search.pricing.deferred)
        # (and the modes the schedule does not run with: Schedule.refused_recompute)
        modes = [m for m in cluster_recompute_modes(inputs.options, inputs.training, inputs.groups)
                 if not (m == "block" and (inputs.chunked or inputs.schedule.split_backward))
                 and m not in inputs.schedule.refused_recompute]
        # ZeRO-Offload per stage (planner.search.pricing.block.MemorySavers): both, or what the restriction fixes
        offloads = [o for o in ((False, True) if inputs.options.offload else (False,)) if fixed.offload in (None, o)]
        # interleaved: the rank time (planner.search.pricing.interleave, the 1F1B span plus V - 1 fixed parts)
        # is exact only where no ZeRO collective is partly hidden per chunk; prefetching (pricing.zero_exposed_s)
        # hides min(comm, compute) per chunk, not affine in a chunk's blocks. So ZeRO-2/3 is left out
        # of interleaved searches under physics that overlap it (the FSDP runtimes, which run no
        # ZeRO-2/3 beside interleaving anyway: capability.py). A reduce-scatter hidden behind the
        # rank's whole backward (dp_comm.zero_rank_overlapped) depends on the rank's blocks alone: kept
        overlaps = any(inputs.options.params_for(g.gpu.name).overlap_zero_comm for g in inputs.groups)
        zeros = tuple(z for z in inputs.options.zero_stages if not (inputs.chunked and overlaps and z >= 2))
        for nodes, shapes in self._stage_shapes(used):
            if self.state.clock is not None:
                self.state.clock.check()
            for tps, cp, kind, dp in shapes:
                # per-replica TP: a tuple of degrees per node group (its least the stage's tp)
                tp, group_tps = (min(t for t in tps if t), tps) if isinstance(tps, tuple) else (tps, ())
                # (per-replica TP: not in the interleaved problems, which price a rank's chunks at one degree)
                if fixed.tp not in (None, tp) or fixed.cp not in (None, cp) or fixed.dp not in (None, dp) \
                        or not inputs.options.allows_dp(dp) or (group_tps and (fixed.tp is not None or inputs.chunked)):
                    continue
                for ep in ep_degrees(inputs, nodes, dp, tp, cp):
                    if fixed.ep not in (None, ep):
                        continue
                    for mode in modes:
                        if fixed.recompute not in (None, mode) or (group_tps and mode == "block"):
                            continue
                        for zero in (zeros if dp > 1 else (0,)):
                            if dp > 1 and fixed.zero not in (None, zero):
                                continue
                            for offload in offloads:
                                yield StageConfig(nodes, tp, mode, zero, cp, kind, ep, offload, group_tps)
        yield from self.across.configs(used, modes, zeros)

    def _stage_shapes(self, used: tuple[int, ...]) -> list[tuple[tuple[int, ...], list[tuple[int, int, str, int]]]]:
        """(node vector, its (tp, cp, CP kind, dp) shapes) of every stage that can follow `used` parts,
        in configs' order, whatever the restriction: the same for every problem of a solve (the
        model, sequence, options and decomposition alike), so kept in `shapes`, which the lane's
        problems share (planner.search.orchestration.lanes)."""
        known = self.shapes.get(used)
        if known is not None:
            return known
        inputs = self.inputs
        ranges = [range(0, total - u + 1) for total, u in zip(inputs.bundle_nodes, used)]
        heads = inputs.model.config.tp_heads if inputs.model.config else 1
        out = []
        clock = self.state.clock
        for take in product(*ranges):
            if not any(take):
                continue
            if clock is not None:
                clock.check()
            nodes = inputs.parts.nodes(used, take)
            sizes = [(inputs.groups[i].gpus_per_node, n) for i, n in enumerate(nodes) if n]
            gpus = sum(n * inputs.groups[i].gpus_per_node for i, n in enumerate(nodes))
            shapes = []
            for tp in inputs.options.tp_degrees:
                if any(g % tp for g, _ in sizes) or heads % tp:
                    continue
                for cp, kind in cp_choices(inputs.model, inputs.training, inputs.options, tp):
                    if places(sizes, tp * cp):
                        shapes.append((tp, cp, kind, StageDims(tp, cp=cp).replicas_on(gpus)))
            shapes += self._per_replica_tp_shapes(nodes, heads)
            out.append((nodes, shapes))
        self.shapes[used] = out
        return out

    def _per_replica_tp_shapes(self, nodes: tuple[int, ...], heads: int) -> list[tuple[tuple[int, ...], int, str, int]]:
        """Per-replica TP shapes of a stage on `nodes` of two or more node groups: a TP degree per group
        (each dividing its GPUs per node and the heads; not all alike, the uniform shapes' case), cp 1,
        as (degrees per group, 0 where unused; 1; "ring"; replicas), in the degrees' order. 1F1B and
        ZB-H1 problems only, without recompute "block" (configs)."""
        inputs = self.inputs
        used = [i for i, n in enumerate(nodes) if n]
        if not inputs.options.per_replica_tp or len(used) < 2 or 1 not in inputs.options.cp_degrees:
            return []
        choices = [group_tp_degrees(inputs.options.tp_degrees, inputs.groups[i], heads) for i in used]
        out = []
        for picked in product(*choices):
            if len(set(picked)) == 1:
                continue
            tps = [0] * len(nodes)
            for i, tp in zip(used, picked):
                tps[i] = tp
            replicas = sum(nodes[i] * inputs.groups[i].gpus_per_node // tp for i, tp in zip(used, picked))
            out.append((tuple(tps), 1, "ring", replicas))
        return out

    def group_dims(self, config: StageConfig, group: int) -> StageDims:
        """The dimensions of the stage's replicas on node group `group`: the stage's, at that group's own
        TP degree under per-replica TP (sequence parallelism only with TP, as Stage.at_tp)."""
        dims = self.dims(config)
        tp = config.group_tp(group)
        return dims if tp == dims.tp else replace(dims, tp=tp, sequence_parallel=dims.sequence_parallel and tp > 1)

    def type_arrays(self, config: StageConfig) -> list[TypeArrays] | None:
        inputs = self.inputs
        if config in self.tables.types:
            return self.tables.types[config]
        dims = self.dims(config)
        if config.group_tps:
            return self._per_replica_tp_arrays(config)
        if config.tp_split:
            layout = self.dp_layout(config) if config.zero >= 2 else None
            self.tables.types[config] = [self.across.type_arrays(config, dims, layout, self._position_arrays)]
            return self.tables.types[config]
        if self.problem.base_problem is not None:
            t = inputs.training
            sharding = Sharding(t.dtype, inputs.micro_batch, t.seq_len, t.attention, dims.within_replica,
                                config.recompute)
            layout = self.dp_layout(config) if config.zero >= 2 else None
            out = []
            for ta in self.problem.base_problem.stage_configs.type_arrays(config):
                # once per 1F1B replica type's arrays (_replica_arrays: they fix dims, sharding and
                # layout), by identity, kept alive with the entry
                known = self.tables.replica_arrays.get(("chunked", id(ta.time)))
                if known is None or known[0] is not ta.time:
                    known = self.tables.replica_arrays[("chunked", id(ta.time))] = (ta.time, interleaved_type_arrays(
                        [ta], dims, sharding, layout, (inputs.dec, inputs.emb, inputs.head), inputs.blocks,
                        inputs.virtual_stages, inputs.lead, stage_ep_group(inputs, config, dims))[0])
                out.append(known[1] if known[1].count == ta.count else replace(known[1], count=ta.count))
            self.tables.types[config] = out
            base_overflow = self.problem.base_problem.state.smallest_overflow
            if self.state.smallest_overflow is None or (base_overflow is not None
                                                        and base_overflow[0] < self.state.smallest_overflow[0]):
                self.state.smallest_overflow = base_overflow
            return self.tables.types[config]
        t, b, s = inputs.training, inputs.micro_batch, inputs.training.seq_len
        block = config.recompute == "block"  # priced here as "none", per position by priced_types
        if block and "none" in inputs.options.recompute_modes:
            return self.problem.memory_savers.block_from_none(config)
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
        for i, count in counts.items():
            # the same on every node vector with these dimensions (and ZeRO-2/3 layout): priced once
            key = (i, dims, sh.recompute, block, config.offload, layout, ep_group, expert_layout)
            priced = self.tables.replica_arrays.get(key)
            if priced is None:
                priced = self.tables.replica_arrays[key] = self._replica_arrays(i, dims, sh, ep_group, layout,
                                                                                expert_layout, config.offload, block)
            arrays, worst, block_prices = priced
            if block:
                self.tables.block_prices[config].append(block_prices)
            times, bwds, params, experts, rooms, nbytes, p, cp_link, wgrads, wgrad_shares, ns = arrays
            out.append(TypeArrays(count, inputs.groups[i], times, bwds, params, experts, rooms, nbytes, p,
                                  cp_link=cp_link, wgrad=wgrads, wgrad_share=wgrad_shares, ns=ns))
            config_worst = max(config_worst, worst)
        if self.state.smallest_overflow is None or config_worst[0] < self.state.smallest_overflow[0]:
            self.state.smallest_overflow = config_worst
        self.tables.types[config] = out
        return out

    def _per_replica_tp_arrays(self, config: StageConfig) -> list[TypeArrays]:
        """type_arrays of a per-replica TP configuration (1F1B or ZB-H1, no recompute "block": configs):
        each node group's replicas priced at their own degree (group_dims), with the stage's replica count
        and so its ZeRO sharding, as cost.evaluate prices each replica at its own degree."""
        inputs, t = self.inputs, self.inputs.training
        layout = self.dp_layout(config) if config.zero >= 2 else None
        out = []
        config_worst = (-INF, "")
        for i, n in enumerate(config.nodes):
            if not n:
                continue
            dims = self.group_dims(config, i)
            sh = Sharding(t.dtype, inputs.micro_batch, t.seq_len, t.attention, dims.within_replica, config.recompute)
            key = (i, dims, sh.recompute, False, config.offload, layout, None, None)
            priced = self.tables.replica_arrays.get(key)
            if priced is None:
                priced = self.tables.replica_arrays[key] = self._replica_arrays(i, dims, sh, None, layout, None,
                                                                                config.offload, False)
            arrays, worst, _ = priced
            times, bwds, params, experts, rooms, nbytes, p, cp_link, wgrads, wgrad_shares, ns = arrays
            out.append(TypeArrays(dims.replicas_on(n * inputs.groups[i].gpus_per_node), inputs.groups[i], times,
                                  bwds, params, experts, rooms, nbytes, p, cp_link=cp_link, wgrad=wgrads,
                                  wgrad_share=wgrad_shares, ns=ns))
            config_worst = max(config_worst, worst)
        if self.state.smallest_overflow is None or config_worst[0] < self.state.smallest_overflow[0]:
            self.state.smallest_overflow = config_worst
        self.tables.types[config] = out
        return out

    def _position_arrays(self, group_index: int, dims: StageDims, sh: Sharding, layout: DpLayout | None,
                         dec, tp_link) -> tuple:
        """(_replica_arrays' arrays, its overflow) of one TP position across GPU types (AcrossTypes): its
        slice `dec` on node group i's GPU, its TP collectives over `tp_link`; once per slice."""
        key = ("across", group_index, dims, sh.recompute, layout, dec.params, dec.config, tp_link)
        priced = self.tables.replica_arrays.get(key)
        if priced is None:
            priced = self.tables.replica_arrays[key] = self._replica_arrays(
                group_index, dims, sh, None, layout, None, False, False, dec, tp_link)[:2]
        return priced

    def _replica_arrays(self, group_index: int, dims: StageDims, sh: Sharding, ep_group, layout: DpLayout | None,
                        expert_layout: DpLayout | None, offload: bool, block: bool, dec=None, tp_link=None) -> tuple:
        """type_arrays for the replicas on node group i: (the TypeArrays fields after count and
        group, the overflow a "does not fit" message reports, recompute "block"'s BlockPrices);
        `dec`, `tp_link`: a decoder slice and its TP group's link (AcrossTypes), else the model's
        decoder and the group's intra-node link."""
        inputs, t = self.inputs, self.inputs.training
        n = inputs.blocks
        group = inputs.groups[group_index]
        decoder = inputs.dec if dec is None else dec
        link = group.intra_node if tp_link is None else tp_link
        gpu = group.gpu
        p = inputs.options.params_for(gpu.name)
        cp_link = None
        if dims.group_gpus > group.gpus_per_node:  # the CP ring spans nodes (replica_pricer.replica_links)
            cp_link = collective_links(inputs.cluster, {group.name: dims.group_gpus // group.gpus_per_node})[1]
        dec, emb, head = (layer_price(layer, sh, gpu, link, p, cp_link, ep_group)
                          for layer in (decoder, inputs.emb, inputs.head))
        lead = lead_price(inputs.lead, lambda layer: layer_price(layer, sh, gpu, link, p, cp_link, ep_group))
        block_prices = None
        if block:
            full = layer_price(inputs.dec, replace(sh, recompute="full"), gpu, group.intra_node, p, cp_link, ep_group)
            block_prices = BlockPrices(dec, full, emb, head)
        times, bwds, params, rooms, experts, wgrads, wgrad_shares, ns = {}, {}, {}, {}, {}, {}, {}, {}
        worst = (-INF, "")
        # the spans depend on the replica's own dimensions alone (span_price: dims.within_replica), not on
        # its stage's replica count, ZeRO stage or offload: built once, their totals kept (SpanPrice)
        span_key = ("spans", group_index, dims.within_replica, sh, ep_group, decoder.params, decoder.config, link)
        spans = self.tables.replica_arrays.get(span_key)
        if spans is None:
            spans = self.tables.replica_arrays[span_key] = {
                (has_head, has_emb, lead_blocks): span_price(((n, dec), (float(has_head), head), (float(has_emb), emb))
                                                             + lead_parts(lead, lead_blocks), dims)
                for has_head, has_emb, lead_blocks in inputs.flag_sets}
        # the decoder weights FSDP all-gathers in fp8 (replica_pricer: fp8_gather_params of the span's layers)
        fp8_blocks = n * fp8_gather_block_params(decoder.weight_params, decoder.expert_params, dims, t.dtype,
                                                 p.fp8_recipe, p.fp8_all_gather) if p.fp8_all_gather else 0.0
        for flags in inputs.flag_sets:
            span = spans[flags]
            fp8_gathered = fp8_blocks + lead_fp8_gathered(inputs.lead, dims, t.dtype, p, flags[2])
            w = params[flags] = span.weight_params
            experts[flags] = span.expert_params
            ns[flags] = (span.ns_flops, span.ns_expert_flops)
            times[flags] = ChunkTime(span, zero_comm(w, dims, t.dtype, layout, p, span.expert_params,
                                                     expert_layout, fp8_gathered)).time_s
            bwds[flags] = span.bwd_s
            acts = span.act_bytes
            wgrads[flags] = span.wgrad_s
            with np.errstate(divide="ignore", invalid="ignore"):  # (planner.search.pricing.deferred)
                wgrad_shares[flags] = np.where(acts > 0, span.wgrad_act_bytes / np.where(acts > 0, acts, 1.0), 0.0)
            free = gpu.memory_bytes - replica_memory(span, 0.0, t.dtype, dims, p, optimizer=t.optimizer,
                                                     offload=offload).total_bytes
            with np.errstate(divide="ignore", invalid="ignore"):
                room = np.where(acts > 0, free / np.where(acts > 0, acts, 1.0), float(UNCAPPED))
            rooms[flags] = np.where(free < 0, -1.0, np.minimum(room, float(UNCAPPED)))
            if offload:  # the host memory of its nodes holds the states
                fits = offload_fits(w, dims, t.dtype, t.optimizer, group.host, group.gpus_in_node)
                rooms[flags] = np.where(fits, rooms[flags], -1.0)
            if flags == (False, False, 0):
                # some stage must hold this many blocks; its overflow with one
                # micro-batch in flight is what a "does not fit" message reports
                most_stages = max(1, min(inputs.options.max_stages, sum(inputs.bundle_nodes)))
                need = -(-inputs.num_blocks // most_stages)
                over = float(acts[need] - free[need]) if np.ndim(free) else float(acts[need] - free)
                worst = max(worst, (over, gpu.name))
        arrays = (times, bwds, params, experts, rooms, boundary_bytes(decoder, sh), p, cp_link, wgrads, wgrad_shares,
                  ns)
        return arrays, worst, block_prices

    def dims(self, config: StageConfig) -> StageDims:
        """The stage's parallel dimensions: its replicas (tp > 1 with sequence parallelism)."""
        dims = self.tables.dims.get(config)
        if dims is None:
            sp = self.inputs.restriction.sequence_parallel and max(config.group_tps or (config.tp,)) > 1
            dp = self.across.replicas(config) if config.tp_split else \
                sum(StageDims(config.group_tp(i), cp=config.cp).replicas_on(n * self.inputs.groups[i].gpus_per_node)
                    for i, n in enumerate(config.nodes) if n)
            dims = self.tables.dims[config] = StageDims(config.tp, sp, dp, config.zero, config.cp, config.cp_kind,
                                                        ep=config.ep)
        return dims

    def dp_layout(self, config: StageConfig) -> DpLayout:
        """How a stage's data-parallel collectives run (cost.paths.dp_layout): its nodes,
        replicas per node, the intra- and per-GPU inter-node links (collective_links)."""
        inputs = self.inputs
        layout = self.tables.dp_layouts.get(config)
        if layout is None and config.tp_split:
            layout = self.tables.dp_layouts[config] = self.across.layout(config)
        if layout is None:
            dims = self.dims(config)
            # gradients are reduced over dp x cp ranks (StageDims.grad_reduce_ranks), one per TP group
            tps = config.group_tps or tuple(dims.tp for _ in config.nodes)
            layout = self.tables.dp_layouts[config] = whole_node_layout(inputs.cluster, config.nodes, tps,
                                                                        dims.grad_reduce_ranks)
        return layout

