"""A closed-form lower bound on the step time of every plan one unrestricted search (one
micro-batch b, V chunks per rank, a schedule, P pipeline ranks or any number) can find, from busy
time over the replicas its micro-batches can feed, the pipeline's fill and a per-GPU memory cap on
blocks, so the driver skips the searches that cannot beat the best plan known without building
their tables. The argument: docs/solver.md, "The closed-form floor's argument"."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from ...core.dims import StageDims
from ..pricing.across_types import across_types_possible
from ...cost.pricing import layer_price
from ...cost.sharding import Sharding
from ...cost.states import model_state_bytes
from ...inputs.hardware import Cluster
from ...schedules import get_schedule
from .bound import ends_floor, latency_floor_s
from .completion import BLOCK_MODES
from ..pricing.context_parallel import cp_choices
from .rank_costs import KnownCosts
from .rank_floor import RankBound
from .search_bound import Subproblem, floor_cannot_beat
from ..pricing.stage_types import INF, SearchContext

__all__ = ["AnyRuntimeBound", "ClosedFormBound"]


def _configs(context: SearchContext, micro_batch: int,
             schedule: str,
             virtual_stages: int) -> list[list[tuple[int, int, float, float, float, float]]]:
    """Per node group, per replica shape (tp, cp): (tp, cp, a: the least time of one block for one
    micro-batch, lambda: the least it adds to the rank's latency, the least activation bytes one
    GPU keeps for it, the block's weight parameters per GPU), over sp and recompute modes."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    decoders = [layer for layer in model.layers if layer.kind == "decoder"]
    shapes = {(layer.config, layer.params, layer.weight_params, layer.fixed, layer.blend): layer
              for layer in decoders}.values()
    out = []
    for g in cluster.groups:
        p = options.params_for(g.gpu.name)
        rows = []
        for tp in options.tp_degrees:
            if g.gpus_per_node % tp:
                continue
            for cp, kind in cp_choices(model, training, options, tp):
                a = lam = act = INF
                for sp in ((False, True) if tp > 1 else (False,)):
                    for mode in BLOCK_MODES:
                        sh = Sharding(training.dtype, micro_batch, training.seq_len, training.attention,
                                      StageDims(tp, sp, cp=cp, cp_kind=kind), mode)
                        for layer in shapes:
                            # cp_link None: the ring inside the node, the fastest link it could have
                            price = layer_price(layer, sh, g.gpu, g.intra_node, p)
                            a = min(a, price.time_s)
                            floor = latency_floor_s(schedule, price, virtual_stages)
                            lam = min(lam, 0.0 if floor is None else floor)
                            act = min(act, price.act_bytes)
                rows.append((tp, cp, a, lam, act, min(layer.weight_params for layer in shapes) / tp))
        out.append(rows)
    return out


def _most_rate(cluster: Cluster, configs: list, replicas: int) -> float:
    """R*: the largest sum of 1 / a over at most `replicas` replicas, each of tp x cp GPUs of one
    group, no group giving more GPUs than it has (the linear relaxation; the floor's argument, 2)."""
    import pulp

    from ..pricing.shares import highs, quiet_stdout

    prob = pulp.LpProblem("most_rate", pulp.LpMaximize)
    counts = {}
    for i, (g, rows) in enumerate(zip(cluster.groups, configs)):
        for j, (tp, cp, a, *_rest) in enumerate(rows):
            if 0 < a < INF:
                counts[(i, j)] = prob.add_variable(f"q_{i}_{j}", lowBound=0)
        prob += pulp.lpSum(counts[(i, j)] * rows[j][0] * rows[j][1] for j in range(len(rows))
                           if (i, j) in counts) <= g.num_gpus, f"gpus_{i}"
    if not counts:
        return 0.0
    prob += pulp.lpSum(counts.values()) <= replicas, "replicas"
    prob += pulp.lpSum(q / configs[i][j][2] for (i, j), q in counts.items())
    with quiet_stdout():
        prob.solve(highs())
    if prob.status != pulp.LpStatusOptimal:
        return INF  # no bound
    return float(pulp.value(prob.objective))


def _most_blocks(context: SearchContext, configs: list, replicas: int) -> int:
    """n_max: the most decoder blocks one GPU of any group holds with the states and one
    micro-batch's activations of each (the closed-form floor's argument, 4)."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    zeros = sorted(set(options.zero_stages) | {0})
    keep = 3 - int(bool(options.offload))  # ZeRO-Offload takes the optimizer states off the GPU
    most = 0
    for g, rows in zip(cluster.groups, configs):
        room = g.gpu.memory_bytes - options.params_for(g.gpu.name).reserved_memory_bytes
        for tp, cp, _a, _lam, act, params in rows:
            dp = max(1, min(replicas * cp, options.most_replicas(cluster.num_gpus, tp)))
            states = min(sum(model_state_bytes(params, training.dtype, z, dp, training.optimizer)[:keep]) for z in zeros)
            held = states + act
            if held <= 0:
                return model.num_layers
            most = max(most, int(room // held))
    return most


class ClosedFormBound:
    """The closed-form floor of an unrestricted search (a FloorBound; its argument in docs/solver.md)."""

    def __init__(self, context: SearchContext):
        self.context = context

    def floor_s(self, search: Subproblem) -> float:
        return _floor_s(self.context, search.micro_batch, search.virtual_stages, search.ranks, search.schedule)

    def cannot_beat(self, search: Subproblem, cutoff_s: float) -> bool:
        return cutoff_s != INF and floor_cannot_beat(self.floor_s(search), cutoff_s)


class AnyRuntimeBound:
    """The skip test of an unrestricted search (a Bound; the restricted ones: restriction_bound):
    the closed-form floor, then rank_floor's (`known`: the costs the solve's checks share,
    rank_costs.KnownCosts; None: none shared; `most_vectors` and `check`: RankBound's)."""

    def __init__(self, context: SearchContext, known: KnownCosts | None = None, most_vectors: int = 0,
                 check: Callable[[], None] | None = None):
        self.closed_form = ClosedFormBound(context)
        self.ranks = RankBound(context, known, most_vectors, check)

    def cannot_beat(self, search: Subproblem, cutoff_s: float) -> bool:
        if search.restriction.tp is not None or cutoff_s == INF:
            return False
        if across_types_possible(self.closed_form.context, search.virtual_stages, search.schedule):
            return False  # (the floors price TP groups within a GPU type only)
        return self.closed_form.cannot_beat(search, cutoff_s) or self.ranks.cannot_beat(search, cutoff_s)


@lru_cache(maxsize=256)
def _floor_s(context: SearchContext, micro_batch: int, virtual_stages: int, ranks: int | None, schedule: str) -> float:
    """The least step time of any plan of the search (b, V = v, `ranks` pipeline ranks or up to
    options.max_stages and the cluster's nodes, `schedule`) (the floor's argument); 0.0 where the
    argument does not hold."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    config = model.config
    if config is None or getattr(config, "num_experts", 1) > 1 or training.global_batch % micro_batch:
        return 0.0
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    m = training.global_batch // micro_batch
    least = ranks if ranks is not None and get_schedule(schedule).split_backward else 1
    per_rank = m // least
    # every rank takes whole nodes (or parts of them), so a cluster's nodes cap the depth too
    most_ranks = ranks if ranks is not None else min(options.max_stages, sum(g.nodes for g in cluster.groups))
    if per_rank < 1:
        return INF  # no replica can take its least share
    configs = _configs(context, micro_batch, schedule, virtual_stages)
    rate = _most_rate(cluster, configs, most_ranks * per_rank)
    if rate == INF:
        return 0.0
    if rate <= 0.0:
        return INF
    busy = m * blocks / rate
    lam = min((row[3] for rows in configs for row in rows), default=0.0)
    delta = ends_floor(context, micro_batch, [schedule])[1]
    if lam >= 0.0:
        fill = lam * max(0, blocks - _most_blocks(context, configs, per_rank)) + delta
    else:
        fill = lam * blocks + delta
    return busy + fill

