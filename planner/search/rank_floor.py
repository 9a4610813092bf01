"""Whether any plan of one unrestricted search (micro-batch b, V chunks per rank, a schedule, P
pipeline ranks or any number) can beat a cutoff, from a dynamic programme over whole ranks with
relaxed costs (planner.search.any_bound asks it where its closed-form floor, which lets ranks blend,
does not decide).

T = max_j (B_j + E_j - c_j) + sum_k c_k >= B_j + sum_(k != j) c_k for every rank j
(evaluate.pipeline_time_s, E_j >= 0), so with lower bounds B'_k <= B_k and c'_k <= c_k,
    T >= max_k y_k + sum_k c'_k + delta,   y_k = B'_k - c'_k,
delta <= 0 what the embedding and head add at least to the latencies (bound.ends_floor). Each rank is a
set of whole nodes, nu_g of group g, holding n decoder blocks with one TP degree tp (inside a node;
stage_configs): its replicas are the tp-GPU slices of its nodes, at most D = m // least of which take
micro-batches (any_bound, 2). Every replica takes `least` >= 1 of them (ProblemInputs.least_share),
so a rank has at most D replicas, and X_j >= 0: a rank's latency (a replica's pass, less its W under
ZB-H1, or its slowest chunk) is no more than that replica's busy time; so T >= X_j + sum_k c_k gives
T >= max(0, max_k y_k) + sum_k c'_k + delta too. The bounds:
  * every GPU of the rank holds the n blocks' weights, gradients and optimizer states (ZeRO over
    the rank's replicas, none of the optimizer states where ZeRO-Offload may take them) and at
    least one micro-batch's activations (every schedule keeps one in flight,
    Schedule.in_flight_microbatches >= 1) within its memory less the reserve, or the rank cannot
    hold n blocks; in the room A the states leave, a replica's pass over n blocks is at least
    n h(A / n): h the lower convex envelope of the points (activation bytes, time) of one block
    per recompute mode (none, selective, full; layer_price at b, the node's own link; "block"
    recomputation mixes full and none block by block, and h is convex and falls);
  * B'_k = m / R, R the sum of 1 / pass over its replicas (any_bound, 1);
  * c'_k = n max_g lambda_g >= 0, lambda_g the least a block adds to the latency of a replica of
    group g (bound.latency_floor_s, over the modes);
  * a rank with B'_k + delta >= the cutoff is in no plan that beats it (T >= B_k + delta).
S(W), the least sum of c' over the choices of ranks (disjoint node sets, blocks summing to L, P
ranks; idle nodes allowed) whose every y is at most W, is a knapsack over (nodes used, ranks
placed, blocks placed), solved exactly. A plan whose largest y lies in (cutoff - S(W) - delta, W]
has T > cutoff, so W descends from cutoff - delta to that bound (Alpa's t_max enumeration, as in
planner.search.driver); when no choice of ranks is left, or S(W) + delta reaches the cutoff, the
search cannot beat it. Left
out (no answer): context parallelism, MoE models, decoders of several shapes, and clusters or
models too large for the table (RANK_FLOOR_LIMITS)."""

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
from .bound import ends_floor, latency_floor_s
from .completion import BLOCK_MODES
from .context_parallel import cp_choices
from .stage_types import INF, SolverOptions

__all__ = ["RANK_FLOOR_LIMITS", "ranks_cannot_beat"]

# most node vectors (prod of nodes + 1) and decoder blocks: beyond, the table costs more than the
# searches it saves (3+3+4 nodes under `--runtime any`, 80 vectors: 11.0 CPU s with it, 8.8 without)
RANK_FLOOR_LIMITS = (64, 256)
_STEPS = 6  # descents of W before giving up


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
            for mode in BLOCK_MODES:
                for sp in ((False, True) if tp > 1 else (False,)):
                    price = layer_price(dec, Sharding(base.dtype, b, base.seq_len, base.attention, StageDims(tp, sp),
                                                      mode), g.gpu, g.intra_node, p)
                    points.append((price.act_bytes, price.time_s))
                    floor = latency_floor_s(schedule, price, v)
                    lam = min(lam, 0.0 if floor is None else floor)

            def states(dp: int, tp: int = tp) -> float:
                return min(sum(model_state_bytes(dec.weight_params / tp, base.dtype, z, dp, base.optimizer)[:keep])
                           for z in zeros)
            out[(i, tp)] = (_envelope(points), lam, room, states)
    return out


def _rank_options(cluster: Cluster, options: SolverOptions, info: dict, nodes: tuple[int, ...], blocks: int,
                  m: int, most_replicas: int, busiest_s: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per tp, (y, c) over n = 0..blocks for a rank on `nodes`: y = B - c and c of the module
    docstring; INF where the rank cannot hold n blocks or is busier than `busiest_s`."""
    n = np.arange(blocks + 1, dtype=float)
    out = []
    for tp in options.tp_degrees:
        groups = [i for i, count in enumerate(nodes) if count]
        if any((i, tp) not in info for i in groups):
            continue
        replicas = {i: nodes[i] * cluster.groups[i].gpus_per_node // tp for i in groups}
        dp = sum(replicas.values())
        if dp > most_replicas:
            continue  # every replica takes `least` micro-batches at least
        passes, latency, fits = [], np.zeros(blocks + 1), np.ones(blocks + 1, dtype=bool)
        for i in groups:
            hull, lam, room, states = info[(i, tp)]
            with np.errstate(divide="ignore", invalid="ignore"):
                per_block = np.where(n > 0, (room - n * states(dp)) / np.where(n > 0, n, 1.0), INF)
            # every GPU of the rank holds its n blocks' states and a micro-batch's activations
            one = n * _least_time(hull, per_block)
            fits &= np.isfinite(one)
            passes += [one] * replicas[i]
            latency = np.maximum(latency, n * lam)
        with np.errstate(divide="ignore"):
            busy = m / (1.0 / np.array(passes)).sum(axis=0)
        busy[0] = 0.0  # no decoder block: the embedding or head alone, B, c >= 0
        # T >= B_k + delta: a rank busier than the cutoff (less delta) is in no plan that beats it
        able = fits & (busy <= busiest_s)
        able[0] = True
        out.append((np.where(able, busy - latency, INF), np.where(able, latency, INF)))
    return out


def _least_latencies(bound: float, ranked: dict, counts: tuple[int, ...], blocks: int, ranks: int,
                     exact: bool) -> float:
    """S(W): the least sum of c over choices of ranks (disjoint node sets, blocks summing to L,
    exactly `ranks` of them, or 1 to `ranks` unless `exact`) whose every y is at most W = `bound`:
    a knapsack over (nodes used, ranks placed, blocks placed)."""
    cost = {}
    for nu, choices in ranked.items():
        least = np.full(blocks + 1, INF)
        least[0] = 0.0
        for y, c in choices:
            least = np.minimum(least, np.where(y <= bound, c, INF))
        cost[nu] = least
    finite = {nu: np.flatnonzero(np.isfinite(c)) for nu, c in cost.items()}
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
        for nu, took in finite.items():
            after = tuple(u + x for u, x in zip(used, nu))
            if any(a > c for a, c in zip(after, counts)):
                continue
            # min-plus convolution over the finite entries: one more rank, its blocks added
            total = np.add.outer(held, took)
            keep = total <= blocks
            index = ((placed + 1)[:, None] * width + total)[keep]
            value = np.add.outer(sums[placed, held], cost[nu][took])[keep]
            row = table.setdefault(after, np.full((ranks + 1, width), INF))
            np.minimum.at(row.ravel(), index, value)
    if exact:
        return min((float(sums[ranks, blocks]) for sums in table.values()), default=INF)
    return min((float(sums[1:, blocks].min()) for sums in table.values()), default=INF)


def ranks_cannot_beat(model: Model, cluster: Cluster, base: Training, b: int, v: int, ranks: int | None,
                      schedule: str, least: int, options: SolverOptions, cutoff_s: float) -> bool:
    """Whether no plan of the search (b, V = v, exactly `ranks` pipeline ranks or, None, any number
    up to options.max_stages, `schedule`, every replica taking at least `least` micro-batches) can
    be faster than `cutoff_s` (module docstring); False where the argument does not hold."""
    config = model.config
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    counts = tuple(g.nodes for g in cluster.groups)
    if (cutoff_s == INF or config is None or getattr(config, "num_experts", 1) > 1 or base.global_batch % b
            or len({(l.config, l.params, l.weight_params, l.blend) for l in model.layers if l.kind == "decoder"}) > 1
            or int(np.prod([c + 1 for c in counts])) > RANK_FLOOR_LIMITS[0] or blocks > RANK_FLOOR_LIMITS[1]
            or any(len(cp_choices(model, base, options, tp)) > 1 for tp in options.tp_degrees)):
        return False
    m = base.global_batch // b
    most_replicas = m // least
    if most_replicas < 1:
        return True  # no replica can take its least share
    info = _blocks(model, cluster, base, options, b, schedule, v)
    if any(lam < 0 for _, lam, _, _ in info.values()):
        return False  # c >= 0 is assumed below
    target = cutoff_s * (1 - 1e-9)  # the DP's rounding margin (completion)
    delta = ends_floor(model, cluster, base, options, b, [schedule])[1]
    vectors = [nu for nu in product(*(range(c + 1) for c in counts)) if any(nu)]
    ranked = {nu: _rank_options(cluster, options, info, nu, blocks, m, most_replicas, target - delta) for nu in vectors}
    depth = ranks if ranks is not None else min(options.max_stages, sum(counts))
    # T >= max_k y_k + S + delta: descend W from where T >= target surely (Alpa's t_max
    # enumeration, as the driver): plans whose largest y is in (target - S(W) - delta, W] cannot
    # beat the cutoff, so W drops to that; done when no plan is left, given up when W stalls
    bound = target - delta
    lowest = 0.0  # T >= X_j + sum_k c_k and X_j >= 0 (module docstring)
    for _ in range(_STEPS):
        least_sum = _least_latencies(bound, ranked, counts, blocks, depth, ranks is not None)
        if least_sum == INF or lowest + least_sum + delta >= target:
            return True
        # just below: a plan whose largest y is `lower` has T >= target already, to rounding
        lower = target - least_sum - delta - abs(target) * 1e-12
        if lower >= bound:
            return False
        bound = lower
    return False
