"""A lower bound on the step time of every plan one unrestricted search (one micro-batch b, V chunks
per rank, a schedule, P pipeline ranks or any number; planner.search.orchestration.space.subproblems) can find, so
the driver skips the searches that cannot beat the best plan known without building their tables
(restriction_bound does the same for the restricted searches of a runtime like Megatron-LM).

Notation: m = global batch / b micro-batches, L decoder blocks, ranks k = 1..P with n_k blocks.

1. Busy time. A replica r of rank k takes s_r whole micro-batches (sum_r s_r = m) and its pass
   over n_k blocks takes t_r >= n_k a_r, a_r the least time of one decoder block for one
   micro-batch on a replica of its GPU type and size over the shardings the search may give it
   (tp, cp, sequence parallelism, recompute mode; layer_price on the node's own link, the
   fastest a TP or CP group has; ChunkTime adds ZeRO collectives, sends, embedding and head,
   all >= 0), as completion.block_gpu_seconds. Rank k is busy B_k >= s_r t_r for every r, so
   m = sum_r s_r <= B_k sum_r 1 / t_r <= B_k R_k / n_k with R_k = sum_r 1 / a_r, i.e.
   B_k >= m n_k / R_k.
2. Replicas. A replica takes at least `least` micro-batches (ZB-H1: P, planner.search.pricing.deferred;
   else 1, and a replica with no micro-batch adds nothing to R_k), so a rank has at most
   D = m // least of them, the plan at most Q = P D; the replicas are disjoint sets of GPUs of one
   group. So sum_k R_k <= R*, the largest sum of 1 / a over at most Q replicas that the GPUs of
   each group can form (`_most_rate`, a linear programme: its optimum bounds the integer one).
3. Fill. T = max_j (B_j + E_j - c_j) + sum_k c_k >= B_j + sum_(k != j) c_k for every rank j
   (evaluate.pipeline_time_s, E_j >= 0). Rank k's latency c_k (Schedule.latency_s) is at least
   n_k lambda plus what its embedding or head adds, at least delta (<= 0) over both
   (bound.ends_floor): lambda the least a decoder block adds to it under the schedule
   (bound.latency_floor_s: 1F1B the pass; interleaved the slowest chunk, at least the pass / V;
   ZB-H1 the pass less twice its W), over the same shardings.
4. Memory. Every GPU of rank k holds its n_k blocks' weights, gradients and optimizer states
   (cost.model_state_bytes at tp, ZeRO over at most D x cp replicas, no more than the cluster's
   GPUs / tp; without the optimizer states where ZeRO-Offload may take them) and the activations
   of at least one micro-batch (every schedule keeps one in flight; the least over recompute
   modes), beside the reserve; so n_k <= n_max, the most blocks any group's GPUs hold so.
Weighting the inequality of 3 by w_j = R_j / sum_k R_k and using 1,
    T >= m L / sum_k R_k + lambda (L - sum_j w_j n_j) + delta
      >= m L / R* + lambda (L - n_max) + delta        (lambda >= 0; else lambda L + delta),
the floor (ClosedFormBound.floor_s). MoE models are left out (floor 0): the expert all-to-all and
expert parallelism change a block's cost in ways this argument does not cover."""

from __future__ import annotations

from functools import lru_cache

from ...core.dims import StageDims
from ...cost.pricing import layer_price
from ...cost.sharding import Sharding
from ...cost.states import model_state_bytes
from ...inputs.hardware import Cluster
from ...inputs.model import Model
from ...plan import Training
from ...schedules import get_schedule
from .bound import ends_floor, latency_floor_s
from .completion import BLOCK_MODES
from ..pricing.context_parallel import cp_choices
from .rank_costs import KnownCosts
from .rank_floor import RankBound
from .search_bound import Subproblem, floor_cannot_beat
from ..pricing.stage_types import INF, SearchContext, SolverOptions

__all__ = ["AnyRuntimeBound", "ClosedFormBound"]


def _configs(model: Model, cluster: Cluster, training: Training, options: SolverOptions, micro_batch: int,
             schedule: str,
             virtual_stages: int) -> list[list[tuple[int, int, float, float, float, float]]]:
    """Per node group, per replica shape (tp, cp): (tp, cp, a: the least time of one block for one
    micro-batch, lambda: the least it adds to the rank's latency, the least activation bytes one
    GPU keeps for it, the block's weight parameters per GPU), over sp and recompute modes."""
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
    group, no group giving more GPUs than it has (the linear relaxation; module docstring, 2)."""
    import pulp

    from ..pricing.shares import quiet_stdout

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
        prob.solve(pulp.HiGHS(msg=False))
    if prob.status != pulp.LpStatusOptimal:
        return INF  # no bound
    return float(pulp.value(prob.objective))


def _most_blocks(model: Model, cluster: Cluster, training: Training, options: SolverOptions, configs: list,
                 replicas: int) -> int:
    """n_max: the most decoder blocks one GPU of any group holds with the states and one
    micro-batch's activations of each (module docstring, 4)."""
    zeros = sorted(set(options.zero_stages) | {0})
    keep = 3 - int(bool(options.offload))  # ZeRO-Offload takes the optimizer states off the GPU
    most = 0
    for g, rows in zip(cluster.groups, configs):
        room = g.gpu.memory_bytes - options.params_for(g.gpu.name).reserved_memory_bytes
        for tp, cp, _a, _lam, act, params in rows:
            dp = max(1, min(replicas * cp, cluster.num_gpus // tp))
            states = min(sum(model_state_bytes(params, training.dtype, z, dp, training.optimizer)[:keep]) for z in zeros)
            held = states + act
            if held <= 0:
                return model.num_layers
            most = max(most, int(room // held))
    return most


class ClosedFormBound:
    """The floor of the module docstring, of an unrestricted search (a FloorBound)."""

    def __init__(self, context: SearchContext):
        self.context = context

    def floor_s(self, search: Subproblem) -> float:
        context = self.context
        return _floor_s(context.model, context.cluster, context.training, search.micro_batch,
                        search.virtual_stages, search.ranks, search.schedule, context.options)

    def cannot_beat(self, search: Subproblem, cutoff_s: float) -> bool:
        return cutoff_s != INF and floor_cannot_beat(self.floor_s(search), cutoff_s)


class AnyRuntimeBound:
    """The skip test of an unrestricted search (a Bound; the restricted ones: restriction_bound):
    the closed-form floor, then rank_floor's (`known`: the costs the solve's checks share,
    rank_costs.KnownCosts; None: none shared)."""

    def __init__(self, context: SearchContext, known: KnownCosts | None = None):
        self.closed_form = ClosedFormBound(context)
        self.ranks = RankBound(context, known)

    def cannot_beat(self, search: Subproblem, cutoff_s: float) -> bool:
        if search.restriction.tp is not None or cutoff_s == INF:
            return False
        return self.closed_form.cannot_beat(search, cutoff_s) or self.ranks.cannot_beat(search, cutoff_s)


@lru_cache(maxsize=256)
def _floor_s(model: Model, cluster: Cluster, training: Training, micro_batch: int, virtual_stages: int,
             ranks: int | None,
             schedule: str, options: SolverOptions) -> float:
    """The least step time of any plan of the search (b, V = v, `ranks` pipeline ranks or up to
    options.max_stages, `schedule`) (module docstring); 0.0 where the argument does not hold."""
    config = model.config
    if config is None or getattr(config, "num_experts", 1) > 1 or training.global_batch % micro_batch:
        return 0.0
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    m = training.global_batch // micro_batch
    least = ranks if ranks is not None and get_schedule(schedule).split_backward else 1
    per_rank = m // least
    most_ranks = ranks if ranks is not None else options.max_stages
    if per_rank < 1:
        return INF  # no replica can take its least share
    configs = _configs(model, cluster, training, options, micro_batch, schedule, virtual_stages)
    rate = _most_rate(cluster, configs, most_ranks * per_rank)
    if rate == INF:
        return 0.0
    if rate <= 0.0:
        return INF
    busy = m * blocks / rate
    lam = min((row[3] for rows in configs for row in rows), default=0.0)
    delta = ends_floor(model, cluster, training, options, micro_batch, [schedule])[1]
    if lam >= 0.0:
        fill = lam * max(0, blocks - _most_blocks(model, cluster, training, options, configs, per_rank)) + delta
    else:
        fill = lam * blocks + delta
    return busy + fill

