"""A lower bound on the step time of the plans of one unrestricted search with exactly P pipeline
ranks, from a dynamic programme over whole ranks with relaxed costs (planner.search.any_bound uses
it beside its closed-form floor; the closed form lets ranks blend, this one keeps each rank whole).

Averaging T = max_j (B_j + E_j - c_j) + sum_k c_k >= B_j + sum_(k != j) c_k (evaluate.pipeline_time_s,
E_j >= 0) over the P ranks j,
    T >= sum_k f_k + delta,   f_k = B_k / P + (P - 1) / P c_k,
a sum over ranks (delta <= 0: what the embedding and head add at least to the latencies,
bound._ends). Each rank is a set of whole nodes, nu_g of group g, holding n decoder blocks with one
TP degree tp (inside a node; stage_configs): its replicas are the tp-GPU slices of its nodes, at
most D = m // least of which take micro-batches (any_bound, 2). Lower bounds on its terms:
  * every GPU of the rank holds the n blocks' weights, gradients and optimizer states (ZeRO over
    the rank's replicas, none of the optimizer states where ZeRO-Offload may take them) within
    its memory less the reserve, or the rank cannot hold n blocks;
  * a replica that takes micro-batches keeps one micro-batch's activations at least (every
    schedule does, Schedule.in_flight_microbatches >= 1) in the room A left, so its pass over n
    blocks is at least n h(A / n): h the lower convex envelope of the points (activation bytes,
    time) of one block per recompute mode (none, selective, full; layer_price at b, the node's own
    link; "block" recomputation mixes full and none block by block, and h is convex and falls);
    without room for the leanest, it takes none;
  * B_k >= m / R, R the sum of 1 / pass of the D fastest replicas (any_bound, 1);
  * c_k >= n max_g lambda_g, lambda_g the least a block adds to the latency of a replica of group
    g (bound._latency_floor_s, over the modes);
  * a rank with B_k + delta >= the cutoff cannot be in a plan that beats it (T >= B_k + delta).
The least sum over every choice of ranks (disjoint node sets, blocks summing to L, P ranks; idle
nodes allowed) is a knapsack over (nodes used, ranks, blocks), solved exactly, so the bound
holds for every plan of the search. Left out (no bound): context parallelism, MoE models, and
clusters or models too large for the table (RANK_FLOOR_LIMITS)."""

from __future__ import annotations

from functools import lru_cache
from itertools import product

import numpy as np

from ..core.dims import StageDims
from ..cost.pricing import layer_price
from ..cost.sharding import Sharding
from ..cost.states import model_state_bytes
from ..inputs.hardware import Cluster
from ..inputs.model import Model
from ..plan import Training
from .bound import _ends, _latency_floor_s
from .context_parallel import cp_choices
from .stage_types import INF, SolverOptions

__all__ = ["RANK_FLOOR_LIMITS", "rank_floor_s"]

RANK_FLOOR_LIMITS = (256, 256)  # most node vectors (prod of nodes + 1), most decoder blocks
_MODES = ("none", "selective", "full")


def _envelope(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lower convex envelope of (activation bytes, time) points, by increasing bytes, keeping
    only the part where time falls as bytes grow."""
    hull: list[tuple[float, float]] = []
    for x, y in sorted(set(points)):
        if hull and y >= hull[-1][1]:
            continue  # no faster for more memory
        while len(hull) >= 2 and (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0]) >= (y - hull[-2][1]) * (hull[-1][0] - hull[-2][0]):
            hull.pop()
        hull.append((x, y))
    return hull


def _least_time(hull: list[tuple[float, float]], per_block: np.ndarray) -> np.ndarray:
    """h(per_block): the least time of one block whose activations average `per_block` bytes
    (INF below the leanest mode)."""
    xs = np.array([x for x, _ in hull])
    ys = np.array([y for _, y in hull])
    out = np.interp(per_block, xs, ys)  # flat at the fastest mode beyond its bytes
    return np.where(per_block < xs[0], INF, out)


@lru_cache(maxsize=64)
def _blocks(model: Model, cluster: Cluster, base: Training, options: SolverOptions, b: int, schedule: str,
            v: int) -> dict:
    """Per group and tp: (envelope, lambda, room, states of one block per dp replicas)."""
    decoders = [layer for layer in model.layers if layer.kind == "decoder"]
    dec = decoders[0]
    keep = 3 - int(bool(options.offload))  # ZeRO-Offload takes the optimizer states off the GPU
    zeros = sorted(set(options.zero_stages) | {0})
    out = {}
    for i, g in enumerate(cluster.groups):
        p = options.params_for(g.gpu.name)
        room = g.gpu.memory_bytes - p.reserved_memory_bytes
        for tp in options.tp_degrees:
            if g.gpus_per_node % tp:
                continue
            points, lam = [], INF
            for mode in _MODES:
                for sp in ((False, True) if tp > 1 else (False,)):
                    price = layer_price(dec, Sharding(base.dtype, b, base.seq_len, base.attention, StageDims(tp, sp),
                                                      mode), g.gpu, g.intra_node, p)
                    points.append((price.act_bytes, price.time_s))
                    floor = _latency_floor_s(schedule, price, v)
                    lam = min(lam, 0.0 if floor is None else floor)

            def states(dp: int, tp: int = tp) -> float:
                return min(sum(model_state_bytes(dec.weight_params / tp, base.dtype, z, dp, base.optimizer)[:keep])
                           for z in zeros)
            out[(i, tp)] = (_envelope(points), lam, room, states)
    return out


def _rank_costs(cluster: Cluster, options: SolverOptions, info: dict, nodes: tuple[int, ...], blocks: int,
                m: int, most_replicas: int, ranks: int, cutoff_s: float) -> np.ndarray:
    """f over n = 0..blocks for a rank on `nodes` (module docstring); INF where it cannot be."""
    n = np.arange(blocks + 1, dtype=float)
    best = np.full(blocks + 1, INF)
    best[0] = 0.0  # no decoder block: the embedding or head alone, B, c >= 0
    for tp in options.tp_degrees:
        groups = [i for i, count in enumerate(nodes) if count]
        if any((i, tp) not in info for i in groups):
            continue
        replicas = {i: nodes[i] * cluster.groups[i].gpus_per_node // tp for i in groups}
        dp = sum(replicas.values())
        passes, latency, fits = [], np.zeros(blocks + 1), np.ones(blocks + 1, dtype=bool)
        for i in groups:
            hull, lam, room, states = info[(i, tp)]
            with np.errstate(divide="ignore", invalid="ignore"):
                per_block = np.where(n > 0, (room - n * states(dp)) / np.where(n > 0, n, 1.0), INF)
            # every GPU of the rank holds its n blocks' states; one that has no room for a
            # micro-batch's activations too takes none (rate 0)
            fits &= room - n * states(dp) >= 0
            passes += [n * _least_time(hull, per_block)] * replicas[i]
            latency = np.maximum(latency, n * lam)
        with np.errstate(divide="ignore"):
            rates = np.sort(1.0 / np.array(passes), axis=0)[::-1][:most_replicas]  # the fastest D
            busy = m / rates.sum(axis=0)
        # T >= B_k + delta: a rank busier than the cutoff (less delta) is in no plan that beats it
        cost = np.where(fits & (busy <= cutoff_s * (1 + 1e-6)), busy / ranks + (ranks - 1) / ranks * latency, INF)
        cost[0] = 0.0
        best = np.minimum(best, cost)
    return best


def rank_floor_s(model: Model, cluster: Cluster, base: Training, b: int, v: int, ranks: int, schedule: str,
                 least: int, options: SolverOptions, cutoff_s: float) -> float:
    """The least step time of any plan of the search (b, V = v, exactly `ranks` pipeline ranks,
    `schedule`, every replica taking at least `least` micro-batches) that could beat `cutoff_s`,
    or at least `cutoff_s` when none can (module docstring); 0.0 where the argument does not hold."""
    config = model.config
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    counts = tuple(g.nodes for g in cluster.groups)
    if (config is None or getattr(config, "num_experts", 1) > 1 or base.global_batch % b
            or len({(l.config, l.params, l.weight_params, l.blend) for l in model.layers if l.kind == "decoder"}) > 1
            or int(np.prod([c + 1 for c in counts])) > RANK_FLOOR_LIMITS[0] or blocks > RANK_FLOOR_LIMITS[1]
            or any(len(cp_choices(model, base, options, tp)) > 1 for tp in options.tp_degrees)):
        return 0.0
    m = base.global_batch // b
    most_replicas = m // least
    if most_replicas < 1:
        return INF
    delta = _ends(model, cluster, base, options, b, [schedule])[1]
    info = _blocks(model, cluster, base, options, b, schedule, v)
    vectors = [nu for nu in product(*(range(c + 1) for c in counts)) if any(nu)]
    cost = {nu: _rank_costs(cluster, options, info, nu, blocks, m, most_replicas, ranks, cutoff_s - delta)
            for nu in vectors}
    finite = {nu: np.flatnonzero(np.isfinite(c)) for nu, c in cost.items()}
    # knapsack: per nodes used, the least sum of f per (ranks placed, blocks placed)
    width = blocks + 1
    first = np.full((ranks + 1, width), INF)
    first[0, 0] = 0.0
    table: dict[tuple[int, ...], np.ndarray] = {tuple(0 for _ in counts): first}
    for used in sorted(product(*(range(c + 1) for c in counts)), key=sum):
        sums = table.get(used)
        if sums is None:
            continue
        placed, held = np.nonzero(np.isfinite(sums[:ranks]))
        if not len(placed):
            continue
        for nu in vectors:
            after = tuple(u + x for u, x in zip(used, nu))
            if any(a > c for a, c in zip(after, counts)):
                continue
            took = finite[nu]
            # min-plus convolution over the finite entries: one more rank, its blocks added
            total = np.add.outer(held, took)
            keep = total <= blocks
            index = ((placed + 1)[:, None] * width + total)[keep]
            value = np.add.outer(sums[placed, held], cost[nu][took])[keep]
            row = table.setdefault(after, np.full((ranks + 1, width), INF))
            np.minimum.at(row.ravel(), index, value)
    least_sum = min((float(sums[ranks, blocks]) for sums in table.values()), default=INF)
    return least_sum + delta
