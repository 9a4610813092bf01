"""Uniform configurations: the same tp, pp and dp everywhere, even layers and even batch
shares, as a Megatron-LM user would launch them (plan.uniform_plan), and the fastest one
that fits.

The solver prices the uniform configurations of its own search space first (1F1B, every
stage on whole nodes, its tp degrees, micro-batches, recompute modes and ZeRO stages), so it
holds a valid plan within a fraction of a second: that plan bounds the dynamic programme
from the start and is what a time limit returns when the exact search has found nothing
better yet. benchmarks/plan_quality.py uses the wider space (ZeRO-0, interleaving, stages
on parts of nodes) as its heterogeneity-blind baseline.

UniformSpace.schedules adds the schedules priced as uniform candidates (ZB-V, looped BFS and DualPipeV, which the
exact search does not plan, and combined 1F1B; planner.search.orchestration.space.uniform_schedules): each V's
searched schedule is tried first, then these at the V they accept, so a tie keeps the searched one.
UniformSpace.chunked_experts adds to an MoE model's plans of several chunks per rank the expert-parallel
degrees a stage of the search would take (pricing.experts.expert_degrees; every degree, across nodes too,
under a schedule that hides the all-to-all), the largest first, on a cluster of one GPU type.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from typing import Callable, Iterator, Mapping

from ..core.clock import SearchClock, SearchTimeout
from ..cost.formulas import CostParams
from ..core.errors import BadInput
from ..cost.evaluate import Estimate, evaluate
from ..inputs.hardware import Cluster
from ..plan import Plan, uniform_plan
from ..schedules import Schedule, get_schedule, search_schedule
from .bounds.uniform_bound import busy_lower_bound_s, screen, surely_overflows
from ..cost.runtimes.capability import Capability, capability
from .pricing.experts import expert_degrees
from .pricing.stage_configs import selective_differs
from .pricing.stage_types import SearchContext


@dataclass(frozen=True)
class UniformSpace:
    """Which uniform configurations to price."""

    tp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    recompute_modes: tuple[str, ...] = ("none", "full")
    zero_stages: tuple[int, ...] = (0, 1)  # used when dp > 1; dp = 1 always has ZeRO-0
    virtual_stages: tuple[int, ...] = (1, 2)
    max_stages: int | None = None  # None: any pp
    dp_degrees: tuple[int, ...] = ()  # the dp and pp allowed (SolverOptions.dp_degrees, pp_degrees); empty: any
    pp_degrees: tuple[int, ...] = ()
    whole_nodes: bool = False  # every pipeline stage on whole nodes (the solver's space)
    sequence_parallel: bool = True  # with tp > 1
    # a one-stage plan without recomputation that does not fit: also with the fewest decoder
    # blocks' activations offloaded that fit (fewest_offloaded)
    activation_offload: bool = False
    # schedules the exact search does not plan (planner.schedules, searched=False: ZB-V, looped
    # BFS), each also tried at every V of virtual_stages it accepts, after the searched one
    schedules: tuple[str, ...] = ()
    # an MoE model's plans of V > 1 chunks per rank also with expert parallelism (module docstring)
    chunked_experts: bool = False


def stages_on_whole_nodes(cluster: Cluster, ranks_per_stage: int) -> bool:
    """Whether the rank ranges [k r, (k + 1) r) each cover whole nodes."""
    boundaries = {g.first_rank + k * g.gpus_per_node for g in cluster.groups for k in range(g.nodes + 1)}
    return all(start in boundaries for start in range(0, cluster.num_gpus + 1, ranks_per_stage))


def uniform_candidates(context: SearchContext, space: UniformSpace) -> Iterator[Plan]:
    """Every uniform plan of `space`, in (tp, micro-batch, recompute, ZeRO, V, schedule, pp)
    order, the searched schedule of each V first."""
    for _, plan in indexed_candidates(context, space):
        yield plan


def indexed_candidates(context: SearchContext, space: UniformSpace,
                       share: tuple[int, int] = (0, 1)) -> Iterator[tuple[int, Plan]]:
    """(candidate index, plan) of uniform_candidates; with `share` (k, n) only those whose index
    is k modulo n, the others never built. An index counts the configurations in order, so it is
    the same whatever the share."""
    model, cluster, training = context.model, context.cluster, context.training
    part, parts = share
    index = -1
    n = cluster.num_gpus
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    heads = model.config.tp_heads if model.config else 1
    mtp_layers = model.config.mtp_layers if model.config else 0
    # selective recompute is none's twin where every GPU runs flash attention (stage_configs)
    selective = any(selective_differs(context.options, training, group.gpu.name) for group in cluster.groups)
    experts_cap = _chunked_experts_capability(context, space)
    for tp, b, recompute, zero, v in product(space.tp_degrees, space.micro_batches, space.recompute_modes,
                                             space.zero_stages, space.virtual_stages):
        if n % tp or heads % tp or any(g.gpus_per_node % tp for g in cluster.groups):
            continue
        if training.global_batch % b or (recompute == "selective" and not selective):
            continue
        tried = _schedules(space, v)
        for schedule in tried:
            for pp in range(1, n // tp + 1):
                if (n // tp) % pp or pp * v > blocks or not schedule.accepts_layout(pp, v) \
                        or not schedule.runs_with(recompute, training.dtype, mtp_layers, pp):
                    continue
                if space.max_stages is not None and pp > space.max_stages:
                    break
                dp = n // (tp * pp)
                if training.global_batch % (dp * b) or (space.dp_degrees and dp not in space.dp_degrees) \
                        or (space.pp_degrees and pp not in space.pp_degrees):
                    continue
                # the micro-batches per replica the schedule needs (Schedule.fewest_microbatches, as
                # planner.plan structural_problems checks it: a split backward's p, DualPipeV's 2p)
                if training.global_batch // (dp * b) < schedule.fewest_microbatches(pp, v):
                    continue
                if space.whole_nodes and not stages_on_whole_nodes(cluster, tp * dp):
                    continue
                # a schedule outside the exact search: ZeRO-0 only where ZeRO-1 is not in the space,
                # which is never slower and never uses more memory under the cost model (planner.search.orchestration.driver)
                if not schedule.searched and zero == 0 and dp > 1 and 1 in space.zero_stages:
                    continue
                eps = (1,) if (v == 1 and not schedule.overlaps_ep_comm) or experts_cap is None \
                    else _chunked_ep_degrees(context, experts_cap, tp, dp, schedule)
                for ep in eps:
                    if ep == 1 and (schedule.needs_ep or any(schedule.without_ep_as == other.name for other in tried)):
                        continue  # refused at ep 1, or that schedule's plan is never slower (Schedule.without_ep_as)
                    index += 1
                    if index % parts != part:
                        continue
                    planned = replace(training, micro_batch=b, schedule=schedule.name, virtual_stages=v)
                    try:
                        yield index, uniform_plan(model, cluster, planned, tp=tp, pp=pp, dp=dp,
                                                  zero=zero if dp > 1 else 0, recompute=recompute,
                                                  sequence_parallel=space.sequence_parallel and tp > 1, ep=ep)
                    except BadInput:
                        continue


def _chunked_experts_capability(context: SearchContext, space: UniformSpace) -> Capability | None:
    """The runtime's capability where an MoE model's plans of V > 1 chunks take expert parallelism
    (UniformSpace.chunked_experts, a cluster of one GPU type and node size); None where they do not."""
    config, cluster = context.model.config, context.cluster
    if not space.chunked_experts or config is None or config.num_experts <= 1 \
            or len({(g.gpu.name, g.gpus_per_node) for g in cluster.groups}) > 1:
        return None
    return capability(context.options.space or context.training.runtime, context.model)


def _chunked_ep_degrees(context: SearchContext, cap: Capability, tp: int, dp: int,
                        schedule: Schedule) -> tuple[int, ...]:
    """The expert-parallel degrees of a uniform plan of V > 1 chunks per rank (_chunked_experts_capability):
    the largest first, then 1 where options.ep_degrees has it. Those a stage of the search takes
    (expert_degrees: with options.ep_inside_node the largest inside a node, which stands for the smaller
    ones because the all-to-all grows with the degree), except under a schedule that hides the
    all-to-all (Schedule.overlaps_ep_comm): there every degree of options.ep_degrees that divides the
    experts and the replicas, across nodes too."""
    options, experts = context.options, context.model.config.num_experts
    if schedule.overlaps_ep_comm:
        degrees = tuple(e for e in options.ep_degrees if e > 1 and experts % e == 0 and dp % e == 0)
    else:
        degrees = expert_degrees(options, cap, experts, tp, 1, dp, context.cluster.groups[0].gpus_per_node)
    return tuple(sorted(degrees, reverse=True)) + ((1,) if 1 in options.ep_degrees else ())


def _schedules(space: UniformSpace, virtual_stages: int) -> list[Schedule]:
    """The schedules tried at V: the searched one, then each of space.schedules that takes V."""
    extra = [get_schedule(name) for name in space.schedules]
    return [search_schedule(virtual_stages)] + [s for s in extra if s.accepts_virtual_stages(virtual_stages)]


def improving_uniform(context: SearchContext, space: UniformSpace,
                      params: CostParams | Mapping[str, CostParams] | None = None,
                      clock: SearchClock | None = None,
                      accept: Callable[[Plan], bool] | None = None,
                      bound_s: float = float("inf")) -> Iterator[tuple[Plan, Estimate]]:
    """Each uniform plan of `space` that fits and is faster than every one before it, in
    candidate order (so ties keep the first); the last one yielded is the fastest. A caller
    cut off by the clock keeps the best so far. `accept`: only the plans it accepts are priced;
    nor are those whose busy_lower_bound_s reaches the best step time so far (they cannot improve)
    or exceeds `bound_s` (a step time the caller already holds: they cannot beat it, nor tie), nor
    those that uniform_bound.screen finds not fitting or bounds likewise with the pipeline's fill
    (but a one-stage plan activation offload may fit, bounded by its busy time alone)."""
    for _, plan, estimate in _improving(context, space, params, clock, accept, bound_s, (0, 1)):
        yield plan, estimate


@dataclass(frozen=True)
class UniformSeed:
    """The fastest uniform plan of a share of the candidates: (candidate index, plan, estimate), None
    when none fits; `complete` False when the clock stopped the scan (`best` is then the best so far)."""

    best: tuple[int, Plan, Estimate] | None
    complete: bool = True


def best_uniform_share(context: SearchContext, space: UniformSpace,
                       params: CostParams | Mapping[str, CostParams] | None, clock: SearchClock | None,
                       accept: Callable[[Plan], bool] | None, bound_s: float, share: tuple[int, int]) -> UniformSeed:
    """improving_uniform's last plan over the candidates of `share` (indexed_candidates), with its
    index: the fastest of them, ties to the first. The shares (k, n), k = 0 .. n - 1, merged by
    merge_seeds give improving_uniform's plan (each share's pruning is exact, by its own best)."""
    best = None
    try:
        for best in _improving(context, space, params, clock, accept, bound_s, share):
            pass
    except SearchTimeout:
        return UniformSeed(best, False)
    return UniformSeed(best)


def merge_seeds(seeds: list[UniformSeed]) -> UniformSeed:
    """The fastest plan of several shares, ties to the smallest candidate index; complete when every share is."""
    found = [seed.best for seed in seeds if seed.best is not None]
    best = min(found, key=lambda entry: (entry[2].step_time_s, entry[0])) if found else None
    return UniformSeed(best, all(seed.complete for seed in seeds))


def _improving(context: SearchContext, space: UniformSpace,
               params: CostParams | Mapping[str, CostParams] | None, clock: SearchClock | None,
               accept: Callable[[Plan], bool] | None, bound_s: float,
               share: tuple[int, int]) -> Iterator[tuple[int, Plan, Estimate]]:
    """improving_uniform over the candidates of `share`, each with its candidate index."""
    best_s = float("inf")
    seen: set = set()
    computes: dict = {}  # busy_lower_bound_s's chunk computes, shared by the candidates
    for index, plan in indexed_candidates(context, space, share):
        if clock is not None:
            clock.check()
        offloadable = space.activation_offload and len(plan.stages) == 1 and plan.stages[0].recompute == "none"
        accepted = accept is None or accept(plan)
        if not accepted and not offloadable:
            continue
        # dp = 1 makes every ZeRO stage the same plan (uniform_candidates yields every other
        # configuration once; comparing a plan of 1,000 replicas costs more than skipping it saves)
        if len(plan.stages[0].replicas) == 1:
            key = (plan.training, plan.stages)
            if key in seen:
                continue
            seen.add(key)
        if min(best_s, bound_s) < float("inf"):
            floor_s = busy_lower_bound_s(plan, params, computes)
            if floor_s >= best_s or floor_s > bound_s:
                continue  # it cannot be faster (its offloaded form neither: the same compute), not priced
        if not offloadable:
            floor_s, overflows = screen(plan, params)  # tighter: with the pipeline's fill
            if floor_s >= best_s or floor_s > bound_s or overflows:
                continue  # it cannot be faster, or does not fit (evaluate would say so): not priced
        estimate = evaluate(plan, params)
        if offloadable and not estimate.fits and _activations_overflow(estimate):
            plan, estimate = fewest_offloaded(plan, params) or (plan, estimate)
            accepted = accept is None or accept(plan)
        if accepted and estimate.fits and estimate.step_time_s < best_s:
            best_s = estimate.step_time_s
            yield index, plan, estimate


def _gpu_fits(estimate: Estimate) -> bool:
    """Whether every GPU fits (host-memory overflows aside: evaluate's Overflow of a node's host)."""
    return all(o.gpu.startswith("host memory") for o in estimate.overflows)


def _activations_overflow(estimate: Estimate) -> bool:
    """Whether every GPU would fit without its activations (else offloading them cannot help)."""
    return all(estimate.memory_by_rank[o.rank].total_bytes - estimate.memory_by_rank[o.rank].activations_bytes
               <= o.capacity_bytes for o in estimate.overflows if not o.gpu.startswith("host memory"))


def fewest_offloaded(plan: Plan, params: CostParams | Mapping[str, CostParams] | None = None
                     ) -> tuple[Plan, Estimate] | None:
    """One-stage `plan` with the fewest decoder blocks' activations offloaded
    (Stage.offload_activations) that fits, or None. Offloading K blocks keeps a double buffer
    of two on the GPU (pricing.activation_offload), so K <= 2 frees nothing; from K = 2 on,
    GPU memory falls and step time and host memory rise with K, so the fewest K that fits the
    GPUs (bisection) is the fastest, and when the hosts cannot take it no larger K fits.
    K stays below the stage's blocks (Megatron-core's cpu_offloading_num_layers < num_layers)."""
    stage = plan.stages[0]
    most = stage.decoder_blocks(plan.model) - 1

    def priced(offloaded: int) -> tuple[Plan, Estimate]:
        form = replace(plan, stages=(replace(stage, offload_activations=offloaded),))
        return form, evaluate(form, params)

    def gpus_fit(offloaded: int) -> bool:
        # _gpu_fits(evaluate(form)) without the rest of evaluate's pricing
        form = replace(plan, stages=(replace(stage, offload_activations=offloaded),))
        return not surely_overflows(form, params, every_replica=True)

    if most < 3 or not gpus_fit(most):
        return None
    low, high = 2, most  # K = low does not fit the GPUs, K = high does
    while high - low > 1:
        middle = (low + high) // 2
        if gpus_fit(middle):
            high = middle
        else:
            low = middle
    form, estimate = priced(high)
    return (form, estimate) if estimate.fits else None


def best_uniform(context: SearchContext, space: UniformSpace,
                 params: CostParams | Mapping[str, CostParams] | None = None) -> tuple[Plan, Estimate] | None:
    """The fastest uniform plan of `space` that fits (ties: the first in candidate order),
    or None when none fits."""
    best = None
    for best in improving_uniform(context, space, params):
        pass
    return best
