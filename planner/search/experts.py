"""The search's expert-parallel options (MoE models): which degrees a stage configuration may take
and where its all-to-all runs (planner.search.stages prices them like any other stage)."""

from __future__ import annotations

from ..core.dims import StageDims
from ..cost.moe import AllToAllGroup
from ..cost.paths import collective_links
from .stage_types import ProblemInputs, StageConfig


def ep_degrees(inputs: ProblemInputs, nodes: tuple[int, ...], dp: int, tp: int) -> tuple[int, ...]:
    """Expert-parallel degrees a stage on `nodes` with `dp` replicas of `tp` GPUs can take: 1,
    and for an MoE model those of SolverOptions.ep_degrees dividing its experts and dp (with
    ep_inside_node: the largest with tp x ep within one node), when the stage has one GPU type
    and its replicas take equal shares (the micro-batches divide over dp), as the lock-step
    all-to-all needs (plan.structural_problems); 1F1B only (not the interleaved problems)."""
    config = inputs.model.config
    experts = config.num_experts if config is not None else 1
    if experts <= 1 or sum(1 for n in nodes if n) != 1 or inputs.chunked or inputs.microbatches % dp:
        return (1,)
    options = inputs.options
    (group,) = [inputs.groups[i] for i, n in enumerate(nodes) if n]
    degrees = tuple(e for e in options.ep_degrees if e > 1 and experts % e == 0 and dp % e == 0
                    and not (options.ep_inside_node and tp * e > group.gpus_per_node))
    # inside a node the all-to-all grows only as (ep - 1) / ep while the experts' memory falls
    # as 1 / ep and their GEMMs grow: the largest degree stands for the smaller ones
    return (1,) + degrees[-1:] if options.ep_inside_node else (1,) + degrees


def stage_ep_group(inputs: ProblemInputs, config: StageConfig, dims: StageDims) -> AllToAllGroup | None:
    """Where a stage's expert-parallel all-to-all runs (cost.moe.group_alltoall_s): the stage's
    nodes are whole and of one group, and its EP group is ep consecutive replicas (tp x ep GPUs
    in rank order, StageDims.ep_group), as many per node as it holds replicas."""
    if config.ep <= 1:
        return None
    (i,) = [i for i, n in enumerate(config.nodes) if n]
    group = inputs.groups[i]
    per_node = min(config.ep, dims.replicas_on(group.gpus_per_node))
    nodes = -(-config.ep // per_node)
    intra, inter = collective_links(inputs.cluster, {group.name: nodes})
    return AllToAllGroup(config.ep, per_node, intra, inter)
