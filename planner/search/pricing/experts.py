"""The search's expert-parallel options (MoE models): which degrees a stage configuration may take
and where its all-to-all runs (planner.search.pricing.stages prices them like any other stage)."""

from __future__ import annotations

from ...core.dims import StageDims
from ...cost.moe import AllToAllGroup
from ...cost.paths import collective_links
from ...cost.pricing import DpLayout
from ...cost.runtimes.capability import Capability, capability
from .stage_types import ProblemInputs, SolverOptions, StageConfig


def expert_degrees(options: SolverOptions, cap: Capability, experts: int, tp: int, cp: int, dp: int,
                   gpus_per_node: int, hidden: bool = False) -> tuple[int, ...]:
    """The expert-parallel degrees > 1 of options.ep_degrees a stage of `dp` replicas of tp x cp
    GPUs may take (expert TP as tp): dividing the experts and the cp x dp expert ranks
    (StageDims.expert_problem), with ep_inside_node only the largest with tp x ep within one node
    (inside a node the all-to-all grows only as (ep - 1) / ep while the experts' memory falls as
    1 / ep: the largest degree stands for the smaller ones), beside cp > 1 only where the
    runtime runs both (Capability.expert_parallel_with_cp). `hidden`: under a schedule that hides
    the all-to-all under another micro-batch's compute (Schedule.overlaps_ep_comm) also the degrees
    across nodes (their slower all-to-all may be hidden), after that largest one inside a node."""
    if experts <= 1 or (cp > 1 and not cap.expert_parallel_with_cp):
        return ()
    degrees = tuple(e for e in options.ep_degrees if e > 1 and experts % e == 0 and (cp * dp) % e == 0)
    if not options.ep_inside_node:
        return degrees
    inside = tuple(e for e in degrees if tp * e <= gpus_per_node)
    return inside[-1:] + (tuple(e for e in degrees if tp * e > gpus_per_node) if hidden else ())


def ep_degrees(inputs: ProblemInputs, nodes: tuple[int, ...], dp: int, tp: int, cp: int = 1) -> tuple[int, ...]:
    """Expert-parallel degrees a stage on `nodes` with `dp` replicas of tp x cp GPUs can take: 1
    (not under a schedule that runs only with expert parallelism, Schedule.needs_ep), and for an MoE
    model expert_degrees, when the stage has one GPU type and its replicas take equal shares (the
    micro-batches divide over dp), as the lock-step all-to-all needs (plan.structural_problems)."""
    config = inputs.model.config
    experts = config.num_experts if config is not None else 1
    if experts <= 1:
        return (1,)
    # options.ep_degrees without 1: EP only
    one = (1,) if 1 in inputs.options.ep_degrees and not inputs.schedule.needs_ep else ()
    if sum(1 for n in nodes if n) != 1 or inputs.microbatches % dp:
        return one
    (group,) = [inputs.groups[i] for i, n in enumerate(nodes) if n]
    cap = capability(inputs.options.space or inputs.training.runtime)
    return one + expert_degrees(inputs.options, cap, experts, tp, cp, dp, group.gpus_per_node,
                                inputs.schedule.overlaps_ep_comm)


def stage_ep_group(inputs: ProblemInputs, config: StageConfig, dims: StageDims) -> AllToAllGroup | None:
    """Where a stage's expert-parallel all-to-all runs (cost.moe.group_alltoall_s): the stage's
    nodes are whole and of one group, and its EP group is ep ranks etp apart (etp x ep
    consecutive GPUs in rank order, StageDims.ep_group: ep consecutive replicas without CP, the
    cp ranks of one or more replicas with it), a node's GPUs / etp of them per node."""
    if config.ep <= 1:
        return None
    (i,) = [i for i, n in enumerate(config.nodes) if n]
    group = inputs.groups[i]
    per_node = min(config.ep, group.gpus_per_node // dims.expert_tp)
    nodes = -(-config.ep // per_node)
    intra, inter = collective_links(inputs.cluster, {group.name: nodes})
    return AllToAllGroup(config.ep, per_node, intra, inter)


def stage_expert_layout(inputs: ProblemInputs, config: StageConfig, dims: StageDims) -> DpLayout | None:
    """Where a stage's routed experts reduce their gradients (cost.stage_tail.grad_reduce_s): the
    expert-data-parallel group of its first GPU (StageDims.edp_group) over the stage's whole
    nodes of one group, in rank order (as replica_pricer's PlanPricer.expert_layout), None without EP."""
    if config.ep <= 1:
        return None
    (i,) = [i for i, n in enumerate(config.nodes) if n]
    group = inputs.groups[i]
    per_node: dict[int, int] = {}
    for position in dims.edp_group(0):
        per_node[position // group.gpus_per_node] = per_node.get(position // group.gpus_per_node, 0) + 1
    intra, inter = collective_links(inputs.cluster, {group.name: len(per_node)})
    return DpLayout(dims.edp, max(per_node.values()), len(per_node), intra, inter)
