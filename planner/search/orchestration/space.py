"""The runtime's search space (planner.cost.runtimes.capability) as the searches the driver runs:
the options cut to what the runtime can run, the restrictions whose union is its space, the
(micro-batch, V, ranks, restriction) subproblems in order, and the uniform configurations that
seed and back up the search (planner.search.orchestration.driver)."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

from ...cost.runtimes.capability import Capability
from ...inputs.model import Model
from ...plan import Plan
from ...schedules import get_schedule, search_schedule, searched_schedules
from ..pricing.context_parallel import cp_choices
from ..pricing.experts import expert_degrees
from ..pricing.stage_configs import cluster_recompute_modes
from ..pricing.stage_types import SearchContext
from ..pricing.stages import Restriction, SolverOptions
from ..uniform import UniformSpace, stages_on_whole_nodes

__all__ = ["in_search_space", "outside_exact_search", "restrictions", "subproblems", "uniform_schedules",
           "uniform_space", "within"]


def within(options: SolverOptions, cap: Capability) -> SolverOptions:
    """The options cut to what the runtime can run: its TP, recompute modes, ZeRO stages and
    schedules (interleaving needs any layer split), one stage without pipelining. ZeRO-0 is
    left out only where ZeRO-1, which dominates it, is allowed. Recompute "block" is searched
    only where stages may recompute different block counts (the search derives each stage's
    count from its position, planner.search.pricing.block); a runtime with one count runs it as
    evaluated (`planner evaluate --recompute block`). ZeRO-Offload and activation offload only where
    the runtime has them."""
    allowed_zero = set(cap.zero_stages) | set(cap.zero_stages_with_pp)
    zeros = tuple(z for z in options.zero_stages if z in allowed_zero)
    if 0 not in zeros and any(0 in allowed and 1 not in allowed
                              for allowed in (cap.zero_stages, cap.zero_stages_with_pp)):
        zeros = (0,) + zeros  # e.g. torchtitan: ZeRO-1 only under PP, DDP without
    interleave = "interleaved" in cap.schedules and cap.layer_split == "any"
    return replace(options,
                   tp_degrees=tuple(t for t in options.tp_degrees if cap.tensor_parallel or t == 1),
                   recompute_modes=tuple(m for m in options.recompute_modes if m in cap.recompute_modes
                                         and (m != "block" or cap.recompute_layers == "per-stage")),
                   offload=options.offload and cap.offload,
                   activation_offload=options.activation_offload and cap.activation_offload,
                   zero_stages=zeros,
                   virtual_stages=tuple(v for v in options.virtual_stages if v == 1 or interleave),
                   max_stages=options.max_stages if cap.pipeline else 1,
                   per_replica_tp=options.per_replica_tp and cap.per_replica_tp,
                   tp_across_types=options.tp_across_types and cap.uneven_tp_shares)


def in_search_space(plan: Plan) -> bool:
    """Whether a uniform plan is one the exact search covers (one chunk per rank under a searched schedule,
    stages on whole nodes)."""
    return (plan.training.virtual_stages == 1 and not outside_exact_search(plan)
            and stages_on_whole_nodes(plan.cluster, plan.stages[0].tp * plan.stages[0].dp))


def lead_in_search(plan: Plan) -> bool:
    """Whether the exact search covers where `plan` holds its model's lead blocks (Model.decoder_lead):
    on any front stages without interleaving, in the embedding's chunk with it (True for a model
    without them)."""
    lead = plan.model.decoder_lead()
    first = min(plan.stages, key=lambda stage: stage.layers[0])
    return lead is None or plan.training.virtual_stages == 1 or first.layers[1] >= 1 + lead[1]


def outside_exact_search(plan: Plan) -> bool:
    """Whether a plan holds what only uniform configurations price (planner.search.uniform): activation
    offload, or a schedule the exact search does not plan (Schedule.uniform_candidate: ZB-V, looped BFS,
    DualPipeV). Such a plan is not proven optimal."""
    return any(s.offload_activations for s in plan.stages) or not get_schedule(plan.training.schedule).searched


def blended_decoders(model: Model) -> bool:
    """Whether the search prices the decoder blocks as a blend of several shapes
    (Model.decoder_stand_in: Gemma's windows, GPT-OSS's alternating attention): its step times are
    then estimates of the plans' and its optimum is not proven. Leading blocks of one shape before
    blocks of another (DeepSeek-V3's dense ones) are not blended: the search prices them as they are
    (Model.decoder_lead)."""
    return model.config is not None and model.decoder_lead() is None and bool(model.decoder_stand_in().blend)


def parts_only(decomposition: str) -> str:
    """Why a plan searched on a cluster's parts alone (Decomposition.describe, decompose.Trim.describe)
    is not proven optimal."""
    return f"searched on {decomposition} only"


def unproven_shape(plan: Plan) -> str:
    """Why a plan that a complete search of the whole cluster found is still not proven optimal:
    its model's decoders are searched as a blend (blended_decoders), or it holds what only uniform
    configurations price (outside_exact_search); "" where neither holds."""
    if blended_decoders(plan.model):
        return "decoder blocks of several shapes are searched at their count-weighted mean cost"
    if outside_exact_search(plan):
        return "a uniform configuration only the uniform scan prices (activation offload, ZB-V, looped BFS or DualPipeV)"
    if not lead_in_search(plan):
        return ("a uniform configuration only the uniform scan prices (interleaved, with the leading decoder blocks "
                "of another shape beyond the embedding's chunk)")
    return ""


def uniform_schedules(options: SolverOptions, cap: Capability) -> tuple[str, ...]:
    """The unsearched schedules priced as uniform configurations (Schedule.uniform_candidate):
    those the runtime runs (Capability.schedules), with pipelining allowed and
    options.uniform_schedules; a split backward (ZB-V, DualPipeV) only with options.zero_bubble."""
    if options.max_stages < 2 or not options.uniform_schedules:
        return ()
    return tuple(name for name in cap.schedules if get_schedule(name).uniform_candidate
                 and (options.zero_bubble or not get_schedule(name).split_backward))


def uniform_space(options: SolverOptions, cap: Capability, whole_nodes: bool = True) -> UniformSpace:
    """The uniform configurations of the runtime: the options' degrees and modes, the most
    memory-frugal first (highest tp, smallest micro-batch, full recompute, highest ZeRO stage),
    so a short time finds one that fits. `whole_nodes`: 1F1B, every stage on whole nodes (the
    search space); else also stages on parts of nodes, interleaving, ZeRO-0 and the unsearched
    schedules the runtime runs (uniform_schedules)."""
    zeros = tuple(sorted(set(options.zero_stages) | ({0} if not whole_nodes else set()), reverse=True))
    # a uniform plan has no expert parallelism: none where options.ep_degrees leave out ep 1
    tps = tuple(sorted(options.tp_degrees, reverse=True)) if 1 in options.ep_degrees else ()
    return UniformSpace(tp_degrees=tps, dp_degrees=options.dp_degrees, pp_degrees=options.pp_degrees,
                        micro_batches=tuple(sorted(options.micro_batches)),
                        recompute_modes=tuple(m for m in reversed(options.recompute_modes) if m != "block"),
                        zero_stages=zeros, virtual_stages=(1,) if whole_nodes else tuple(sorted(options.virtual_stages)),
                        max_stages=options.max_stages, whole_nodes=whole_nodes,
                        sequence_parallel=cap.sequence_parallel,
                        activation_offload=options.activation_offload and cap.activation_offload,
                        schedules=() if whole_nodes else uniform_schedules(options, cap),
                        chunked_experts=not whole_nodes)


def restrictions(context: SearchContext, cap: Capability, micro_batch: int, hidden: bool = False) -> list[Restriction]:
    """The searches that together cover the runtime's space at micro-batch b (module docstring):
    one free search for `any`; else one per (tp, cp, dp, ep, recompute, ZeRO, offload) the runtime allows,
    and per pipeline depth where it splits the blocks equally. Order: tp, dp, ep, recompute, ZeRO,
    offload (off first), depth. A ZeRO stage the runtime has only with (without) pipelining gets
    at least two stages (one); Capability.plain_dp_alone and mixed_precision_needs_sharding
    leave out the (tp, dp, ZeRO) they forbid and keep one stage where only PP would break them.
    `hidden`: for a schedule that hides the expert all-to-all (its EP degrees: _ep_choices)."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    sp = cap.sequence_parallel
    even = not cap.uneven_shares
    if not cap.uniform:
        return [Restriction(even_shares=even, sequence_parallel=sp)]
    heads = model.config.tp_heads if model.config else 1
    microbatches = training.global_batch // micro_batch
    widths: dict[int, int] = {}  # nodes per node width: groups of one width give the same sums pooled
    for g in cluster.groups:
        widths[g.gpus_per_node] = widths.get(g.gpus_per_node, 0) + g.nodes
    totals = {0}  # GPUs a stage on whole nodes can have
    for width, nodes in sorted(widths.items()):
        totals = {t + k * width for t in totals for k in range(nodes + 1)}
    modes = cluster_recompute_modes(options, training, cluster.groups)
    blocks = model.num_layers - 2
    out = []
    kv_heads = model.config.num_kv_heads if model.config else 1
    for tp, cp in ((tp, cp) for tp in options.tp_degrees if heads % tp == 0
                   and not (cap.kv_heads_over_tp and kv_heads % tp)
                   for cp, _ in cp_choices(model, training, options, tp)):
        group = tp * cp  # one replica: tp x cp GPUs (core.dims.StageDims.group_gpus)
        for dp in sorted({t // group for t in totals if t and t % group == 0}):
            if (even and microbatches % dp) or not options.allows_dp(dp):
                continue
            offloads = (False, True) if options.offload and not cap.per_stage_offload else (None,)
            for ep, mode, zero, offload in product(_ep_choices(context, cap, tp, cp, dp, hidden),
                                                   modes if not cap.per_stage_recompute else (None,),
                                                   options.zero_stages if dp > 1 and not cap.per_stage_zero
                                                   else (None,),
                                                   offloads):
                if offload and dp > 1 and (zero or 0) < cap.offload_min_zero:
                    continue  # (Capability.offload_min_zero)
                most, least = options.max_stages, 1
                if zero is not None and zero not in cap.zero_stages_with_pp:
                    most = 1
                if zero is not None and zero not in cap.zero_stages:
                    least = 2
                if cap.plain_dp_alone and zero == 0:  # replicated DP (DDP) beside nothing else
                    if tp > 1 or cp > 1 or ep > 1:
                        continue
                    most = 1
                if cap.mixed_precision_needs_sharding and training.dtype != "fp32" and dp == 1 and cp == 1:
                    if tp > 1:
                        continue
                    most = 1  # one GPU: autocast
                if least > most:
                    continue
                base_r = Restriction(tp, dp, mode, zero, even, sp, None, most, cp, ep, offload, least)
                if cap.layer_split == "any":
                    out.append(base_r)
                    continue
                for depth in range(least, min(most, blocks) + 1):
                    if blocks % depth == 0 and options.allows_pp(depth):
                        out.append(replace(base_r, blocks=blocks // depth, max_stages=depth))
    return out


def _ep_choices(context: SearchContext, cap: Capability, tp: int, cp: int, dp: int,
                hidden: bool = False) -> tuple[int, ...]:
    """The expert-parallel degrees one restriction may fix (planner.search.pricing.experts.ep_degrees
    offers the same per stage): 1, and for an MoE model experts.expert_degrees on the widest node
    (`hidden`: under a schedule that hides the all-to-all)."""
    model, cluster, options = context.model, context.cluster, context.options
    experts = model.config.num_experts if model.config is not None else 1
    widest = max(g.gpus_per_node for g in cluster.groups)
    return (1,) + expert_degrees(options, cap, experts, tp, cp, dp, widest, hidden)


def _runs_model(schedule, model: Model, training) -> bool:
    """Whether `schedule` can run some plan of `model` in `training`'s dtype: one that needs expert
    parallelism an MoE model (Schedule.needs_ep), and a dtype it trains in (Schedule.refused_dtypes)."""
    experts = model.config.num_experts if model.config is not None else 1
    return not (schedule.needs_ep and experts <= 1) and training.dtype not in schedule.refused_dtypes


def subproblems(context: SearchContext, nodes: int, cap: Capability, paired: bool = False):
    """(micro-batch, virtual stages V, pipeline ranks, restriction, schedule name) searched in
    turn: 1F1B (V = 1) with any number of stages in one DP, interleaved and ZB-H1 with the
    number of ranks P fixed per DP, since a rank's in-flight micro-batches (and deferred W
    passes) depend on P (Schedule.in_flight_microbatches); each once per restriction of the
    runtime (restrictions). The schedules are the searched ones the runtime runs
    (schedules.searched_schedules, Capability.schedules); ZB-H1 where each replica can take
    P micro-batches. Order: the smallest micro-batch's ZB-H1 searches, the 1F1B ones, then
    the other depth-dependent ones by micro-batch (`paired`: two groups at a time, below)."""
    model, training, options = context.model, context.training, context.options
    blocks = model.num_layers - 2
    sizes = [b for b in sorted(options.micro_batches) if training.global_batch % b == 0]
    schedules = [(v, s) for v in sorted(set(options.virtual_stages))
                 for s in searched_schedules(v, cap.schedules)
                 if s is search_schedule(v) or (s.name in cap.schedules
                                                and (options.zero_bubble or not s.split_backward)
                                                and _runs_model(s, model, training))]
    per_b: dict[tuple[int, bool], list[Restriction]] = {}
    mtp_layers = model.config.mtp_layers if model.config else 0

    def restricted(micro_batch: int, schedule) -> list[Restriction]:
        """The restrictions of `schedule` at `micro_batch`: its EP degrees, none at EP 1 where it needs EP
        nor with a recompute mode it refuses (Schedule.needs_ep, refused_recompute)."""
        key = (micro_batch, schedule.overlaps_ep_comm)
        if key not in per_b:
            per_b[key] = restrictions(context, cap, micro_batch, schedule.overlaps_ep_comm)
        return [r for r in per_b[key] if not (schedule.needs_ep and r.ep == 1)
                and r.recompute not in schedule.refused_recompute]

    def by_depth(micro_batch: int, virtual_stages: int, schedule):
        for r in restricted(micro_batch, schedule):
            most = options.max_stages if r.max_stages is None else min(options.max_stages, r.max_stages)
            # each chunk of an interleaved rank holds a block; a one-chunk rank any layer
            layers = blocks // virtual_stages if schedule.chunks_per_rank(virtual_stages) > 1 else blocks + 2
            for ranks in range(schedule.min_pp, min(most, nodes, layers) + 1):
                # the layouts it runs (combined 1F1B: one rank of one chunk, or two or more of two or more)
                if not schedule.accepts_layout(ranks, virtual_stages) \
                        or schedule.refusals((), training.dtype, mtp_layers, ranks):
                    continue
                # capability.interleaved_microbatch_multiple / _needs_pp_microbatches (r.dp is fixed where it applies)
                per_replica = training.global_batch // micro_batch // r.dp if r.dp else 0
                if cap.interleaved_microbatch_multiple and r.dp and per_replica % ranks:
                    continue
                if cap.interleaved_needs_pp_microbatches and r.dp and virtual_stages > 1 and per_replica < ranks:
                    continue
                # zero bubble: every replica takes at least P micro-batches (planner.plan)
                if schedule.split_backward and training.global_batch // micro_batch < ranks * (r.dp or 1):
                    continue
                yield micro_batch, virtual_stages, ranks, r, schedule.name

    # The smallest micro-batch's zero-bubble searches first: one cheap DP per depth, and ZB-H1's
    # latency is 1F1B's less 2 W, so their plans are often the fastest and bound the rest.
    # Then 1F1B: its best plan bounds the interleaved searches, which cost more.
    first = [(b, v, schedule) for b in sizes[:1] for v, schedule in schedules
             if schedule.depth_dependent() and schedule.split_backward]
    head = [search for b, v, schedule in first for search in by_depth(b, v, schedule)]
    lane_of: dict[int, int] = {}  # micro-batch -> the lane of its first 1F1B search (`paired`)
    for b in sizes:
        for v, schedule in schedules:
            if not schedule.depth_dependent():
                for r in restricted(b, schedule):
                    lane_of.setdefault(b, len(head) % 2)
                    head.append((b, v, None, r, schedule.name))
    yield from head
    # The other depth-dependent groups (one per micro-batch, V and schedule). `paired`: searches j
    # and j + 1 run side by side on two lanes (planner.search.orchestration.lanes: search j on lane j % 2), so the
    # groups go to the lane that searched their micro-batch's 1F1B (whose tables they share) and
    # the two lanes' groups alternate search by search; each search starts from its group's searches
    # before it. The order for a search on parts of nodes, where the skip checks (their floors the
    # whole cluster's) rule few searches out and nearly every one runs its DP. Unpaired, a group's
    # searches alternate lanes: on a cluster searched whole most are ruled out, and the few DPs
    # left run side by side.
    rest = [(b, list(by_depth(b, v, schedule))) for b in sizes for v, schedule in schedules
            if schedule.depth_dependent() and (b, v, schedule) not in first]
    if not paired:
        for _, group in rest:
            yield from group
        return
    queues: list[list] = [[], []]
    for b, group in rest:
        queues[lane_of.get(b, 0)].extend(group)
    at = len(head)
    while queues[0] or queues[1]:
        lane = at % 2 if queues[at % 2] else 1 - at % 2
        yield queues[lane].pop(0)
        at += 1
