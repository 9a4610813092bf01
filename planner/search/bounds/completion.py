"""A lower bound on what the stages not yet placed add to a partial plan's step time, so the
dynamic programme (planner.search.dp) drops partial plans that cannot beat the best plan known.

The DP places stages from the last backwards. A partial plan has the sum S of its stages'
latencies tau; the stages still to come hold the remaining r decoder blocks on the nodes not
yet used. For any future stage j, T = max X + sum tau >= X_j + tau_j + S = B_j + E_j + S >= S + B_j
(evaluate.pipeline_time_s: X = B + E - tau, E >= 0). A replica of G = tp x cp GPUs taking s
micro-batches of n blocks is busy s x t(n) >= s x n x kappa / G, where kappa is the least
GPU-seconds one decoder block of one micro-batch costs on that GPU type over every sharding the
search may give it (tp, cp, sequence parallelism, recompute mode; ChunkTime.time_s adds ZeRO
collectives, sends, embedding and head on top, all >= 0). So a stage with N_g GPUs of type g
has B_j >= m n_j / sum_g (N_g / kappa_g), and since the future stages' GPUs are disjoint and
among the nodes left, max_j B_j >= m r / sum_g (N_g,left / kappa_g) (the mediant inequality).
With no GPUs left and blocks remaining, no plan completes (infinite bound).

MoE models are left out (no bound): the expert all-to-all and expert parallelism change a
block's per-GPU cost in ways this argument does not cover."""

from __future__ import annotations

from ...core.dims import StageDims
from ...cost.pricing import layer_price
from ...cost.sharding import Sharding
from ..pricing.across_types import across_block_seconds
from ..pricing.context_parallel import cp_choices
from ..pricing.stage_types import INF, ProblemInputs

__all__ = ["BLOCK_MODES", "block_gpu_seconds", "seconds_per_block_left"]

# recompute modes that price a decoder block; "block" recomputes k blocks "full", the rest "none"
BLOCK_MODES = ("none", "selective", "full")


def block_gpu_seconds(inputs: ProblemInputs, group_index: int, across: dict[int, float] | None = None) -> float:
    """kappa: the least tp x cp x (one decoder block's time for one micro-batch on one replica)
    on this group's GPUs over the shardings the search may use (module docstring); 0.0 (no
    bound) for MoE models. `across`: across_block_seconds of the inputs, where the caller has it."""
    config = inputs.model.config
    if config is not None and getattr(config, "num_experts", 1) > 1:
        return 0.0
    group = inputs.groups[group_index]
    p = inputs.options.params_for(group.gpu.name)
    t = inputs.training
    best = INF
    for tp in inputs.options.tp_degrees:
        if group.gpus_per_node % tp:
            continue
        for cp, kind in cp_choices(inputs.model, t, inputs.options, tp):
            for sp in ((False, True) if tp > 1 else (False,)):
                dims = StageDims(tp, sp, cp=cp, cp_kind=kind)
                for mode in BLOCK_MODES:
                    sh = Sharding(t.dtype, inputs.micro_batch, t.seq_len, t.attention, dims, mode)
                    # cp_link None: the ring inside the node, the fastest link it could have
                    price = layer_price(inputs.dec, sh, group.gpu, group.intra_node, p)
                    best = min(best, tp * cp * price.time_s)
    # a TP group across the types of a mixed node: these GPUs' kappa at most tp x its block time, so the
    # bound holds for its stages too (GPUs N_g of its types: sum_g N_g / kappa_g >= replicas / block time)
    across = across_block_seconds(inputs, BLOCK_MODES) if across is None else across
    best = min(best, across.get(group_index, INF))
    return 0.0 if best == INF else best


def seconds_per_block_left(inputs: ProblemInputs, kappas: tuple[float, ...], used: tuple[int, ...]) -> float:
    """m / sum_g (GPUs of type g left / kappa_g): the step time each remaining decoder block adds
    at least (module docstring); INF with no GPUs left, 0.0 where some kappa is 0 (no bound)."""
    left = inputs.parts.nodes(used, tuple(c - u for c, u in zip(inputs.bundle_nodes, used)))
    rate = 0.0
    for g, nodes in enumerate(left):
        if not nodes:
            continue
        if kappas[g] <= 0.0:
            return 0.0
        rate += nodes * inputs.groups[g].gpus_per_node / kappas[g]
    return INF if rate == 0.0 else inputs.microbatches / rate
