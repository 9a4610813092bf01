"""A lower bound on the step time of every plan one restricted search (a runtime with one TP and
DP degree for every stage, planner.search.orchestration.space.restrictions) can find, so the driver skips the
searches that cannot beat the best plan known without building their tables.

Under a restriction with tp, dp fixed and even shares (cp = 1, no experts), every stage has
G = tp x dp GPUs in dp replicas of tp GPUs inside one node (stages on whole nodes, tp divides the
node), and every replica takes m / dp of the m micro-batches. A replica of GPU type g holding
n blocks is busy at least (m / dp) n t_g, with t_g the least time of one decoder block for one
micro-batch on it over the recompute modes the search may use (layer_price with the node's
link, as the search prices it; embedding, head, ZeRO collectives, sends and offload add
>= 0). Since T >= B_k for every pipeline rank k (evaluate.pipeline_time_s) and a stage is
as busy as its slowest replica,

    T >= max_k (m / dp) n_k t_(k) >= (m / dp) N / sum_k 1 / t_(k)    (the mediant inequality)

with N the decoder blocks and t_(k) the slowest block time among stage k's GPU types. The
stages are disjoint sets of G GPUs, at most P of them (the search's stage limit, or its
ranks when fixed), and no more than floor(C_t / G) of them can hold only GPUs whose block
time is at most t, C_t the GPUs of such types: the sum is largest when the fastest types
fill the most stages, which bounds it (`most_speed`). Under 1F1B the latency c_k of rank k is
its busiest replica's pass (Schedule.latency_s), so with s = m / dp micro-batches a replica,
T >= B_k - c_k + sum_j c_j = (s - 1) c_k + sum_j c_j >= (s - 1) N / sum_k 1 / t_(k) + N t_min,
t_min the fastest type's block time: the fill adds up to a pass of every block. On 31 + 47 + 50 nodes of H100, A100 and
V100 trimmed to 8 bundles this rules out most interleaved searches of 2 to 8 ranks before they
run."""

from __future__ import annotations

from ...core.dims import StageDims
from ...cost.pricing import layer_price
from ...cost.sharding import Sharding
from ..decompose import Decomposition
from ..pricing.stage_types import INF, Restriction, SearchContext
from ..pricing.stage_configs import searched_recompute_modes
from .search_bound import Subproblem, floor_cannot_beat

__all__ = ["RestrictionBound", "restricted_floor_s"]


def most_speed(gpus_and_times: list[tuple[int, float]], stage_gpus: int, stages: int) -> float:
    """The largest sum of 1 / t over at most `stages` stages of `stage_gpus` GPUs each, a stage's
    t the slowest of its GPUs', given (GPUs, block time t) per type (module docstring)."""
    total, taken, gpus = 0.0, 0, 0
    for count, t in sorted(gpus_and_times, key=lambda pair: pair[1]):
        gpus += count
        fill = min(gpus // stage_gpus, stages)
        total += (fill - taken) / t
        taken = fill
    return total


def restricted_floor_s(context: SearchContext, micro_batch: int, restriction: Restriction,
                       stages: int, fill: bool = False) -> float:
    """The least step time of any plan of micro-batch b under `restriction` with at most `stages`
    pipeline ranks (module docstring); `fill`: under 1F1B, with the pipeline's fill; 0.0 where the argument does not hold (no fixed tp or dp,
    uneven shares, CP, experts, a TP group wider than a node), INF where no stage fits."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    tp, dp = restriction.tp, restriction.dp
    config = model.config
    if (tp is None or dp is None or not restriction.even_shares or (restriction.cp or 1) > 1
            or (restriction.ep or 1) > 1 or config is None or getattr(config, "num_experts", 1) > 1
            or any(g.gpus_per_node % tp for g in cluster.groups)):
        return 0.0
    dims = StageDims(tp, restriction.sequence_parallel and tp > 1)
    dec = model.decoder_stand_in()
    per_type: list[tuple[int, float]] = []
    for group in cluster.groups:
        p = options.params_for(group.gpu.name)
        modes = ([restriction.recompute] if restriction.recompute is not None
                 else searched_recompute_modes(options, training, group.gpu.name))
        # "block" recomputes some blocks fully and the rest not at all: between "none" and "full"
        modes = {"none" if m == "block" else m for m in modes} or {"none"}
        t = min(layer_price(dec, Sharding(training.dtype, micro_batch, training.seq_len, training.attention, dims, mode), group.gpu,
                            group.intra_node, p).time_s for mode in sorted(modes))
        if t <= 0.0:
            return 0.0
        per_type.append((group.nodes * group.gpus_per_node, t))
    speed = most_speed(per_type, tp * dp, stages)
    if speed <= 0.0:
        return INF
    share, blocks = (training.global_batch // micro_batch) / dp, model.num_layers - 2
    busy = share * blocks / speed
    if not fill:
        return busy
    # 1F1B: c_k is the busiest replica's pass, so T >= (s - 1) c_k + sum_j c_j, and sum_j c_j holds
    # every block once, at no less than the fastest type's time (module docstring)
    return max(busy, (share - 1) * blocks / speed + blocks * min(t for _, t in per_type))


class RestrictionBound:
    """The floor of the module docstring (a FloorBound) of a search on `parts`, with at most the
    search's ranks or, any number, the options' and restriction's stage limits and one part a stage;
    under 1F1B with the pipeline's fill."""

    def __init__(self, context: SearchContext, parts: Decomposition):
        self.context = context
        self.parts = parts

    def floor_s(self, search: Subproblem) -> float:
        context, options, restriction = self.context, self.context.options, search.restriction
        most = search.ranks if search.ranks is not None else min(
            options.max_stages, restriction.max_stages or options.max_stages,
            sum(self.parts.counts))  # a stage takes a part at least
        return restricted_floor_s(context, search.micro_batch, restriction, most, fill=search.schedule == "1f1b")

    def cannot_beat(self, search: Subproblem, cutoff_s: float) -> bool:
        return cutoff_s != INF and floor_cannot_beat(self.floor_s(search), cutoff_s)
