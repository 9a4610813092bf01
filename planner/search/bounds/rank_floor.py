"""Whether any plan of one unrestricted search (micro-batch b, V chunks per rank, a schedule, P
pipeline ranks or any number) can beat a cutoff: an exact knapsack over whole pipeline ranks with
relaxed per-rank costs (planner.search.bounds.rank_costs), asked by planner.search.bounds.any_bound
where its closed-form floor does not decide, its bound on the bottleneck term descended as the
search does. The argument, bound by bound: docs/solver.md, "The rank floor's argument"."""


from __future__ import annotations

from functools import lru_cache
from itertools import product
from typing import Callable

import numpy as np

from ...cost.runtimes import p2p_mode
from ...schedules import get_schedule
from .bound import ends_floor
from ..pricing.context_parallel import cp_choices
from .block_costs import rank_blocks
from .rank_costs import KnownCosts, rank_costs
from .search_bound import ROUNDING_MARGIN, Subproblem
from ..pricing.stage_types import INF, SearchContext

__all__ = ["RANK_FLOOR_LIMITS", "RankBound"]

# most node vectors (prod of nodes + 1) and decoder blocks: beyond, the table costs more than the
# searches it saves where the DP runs over fewer (parts of nodes; 3+3+4 nodes under `--runtime any`,
# 80 vectors: 11.0 CPU s with it, 8.8 without). A search of the whole cluster node by node runs its DP
# over the same vectors, many configurations each, and takes the floor up to its own count (RankBound)
RANK_FLOOR_LIMITS = (64, 256)
_STEPS = 10  # descents of W before giving up


@lru_cache(maxsize=16)
def _moves(counts: tuple[int, ...]) -> tuple[list, list]:
    """The knapsack's node vectors (by node count) and its steps: per vector used (its index), the
    (nodes of one more rank, index of the vector after) that stay within `counts`."""
    vectors = sorted(product(*(range(c + 1) for c in counts)), key=sum)
    index = {nu: k for k, nu in enumerate(vectors)}
    steps = []
    for k, used in enumerate(vectors):
        moves = []
        for nu in vectors:
            after = tuple(u + x for u, x in zip(used, nu))
            if any(nu) and all(a <= c for a, c in zip(after, counts)):
                moves.append((nu, index[after]))
        steps.append((k, moves))
    return vectors, steps


def _least_cost(bound: float, bottleneck: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """The least latency c over a rank's options whose bottleneck term y (busy time less latency) is
    at most `bound`, per (position, n)."""
    return np.where(bottleneck <= bound, latency, INF).min(axis=1)


def _least_latencies(bound: float, ranked: dict, counts: tuple[int, ...], blocks: int, ranks: int,
                     exact: bool, first: dict | None = None) -> float:
    """S(W): the least sum of c over choices of ranks (disjoint node sets, blocks summing to L,
    exactly `ranks` of them, or 1 to `ranks` unless `exact`) whose every y is at most W = `bound`:
    a knapsack over (nodes used, ranks placed, blocks placed), the ranks placed from the last
    (ranked[nu] = (y, c), arrays over (position from the end, option, n)); `first` (not `exact`):
    the options of the first rank, the last placed, where they differ (it holds the embedding)."""
    width = 2 * (blocks + 1)  # (sums past L land in the upper half, never read)
    vectors, steps = _moves(counts)
    stride = (ranks + 1) * width  # one vector's part of the table
    cost, finite = {}, {}
    for nu, (y, c) in ranked.items():
        least = _least_cost(bound, y, c)
        finite[nu] = took = np.flatnonzero(np.isfinite(least).any(axis=0))
        cost[nu] = least[:, took]  # (position, finite n)
    table = np.full((len(vectors), ranks + 1, width), INF)
    table[0, 0, 0] = 0.0
    flat = table.ravel()
    for used, moves in steps:
        sums = table[used]
        placed, held = np.nonzero(np.isfinite(sums[:ranks, :blocks + 1]))
        if not len(placed) or not moves:
            continue
        start = sums[placed, held][:, None]
        base = ((placed + 1) * width + held)[:, None]
        # min-plus convolution over the finite entries, every move at once: one more rank, its blocks
        # added (each move lands in its own vector's part of the table)
        value = start + np.concatenate([cost[nu][placed] for nu, _ in moves], axis=1)
        into = np.concatenate([after * stride + finite[nu] for nu, after in moves])
        np.minimum.at(flat, (base + into[None, :]).ravel(), value.ravel())
    if exact:
        return float(table[:, ranks, blocks].min())
    if first is None:
        return float(table[:, 1:, blocks].min())
    # the first rank last: at position p + 1 after p placed, with the blocks left
    closing = {nu: _least_cost(bound, y, c)[:ranks, ::-1] for nu, (y, c) in first.items()}
    return min((float((table[used, :ranks, :blocks + 1][None] + np.stack([closing[nu] for nu, _ in moves])).min())
                for used, moves in steps if moves), default=INF)


def _held(schedule, from_end: int, ranks: int | None, virtual_stages: int, microbatches: int,
          first: bool = False) -> tuple[float, float, tuple]:
    """(in-flight micro-batches, deferred W passes) of the rank `from_end` from the last of a pipeline
    of `ranks` ranks (None: any depth, for a schedule whose count depends on the distance from the
    end only; Schedule.in_flight_microbatches, deferred_w_microbatches)."""
    depth = from_end if ranks is None else ranks
    # the last rank holds the head; the first the embedding, known only where the depth is
    ends = ("head",) * (from_end == 1) + ("embedding",) * (first or (ranks is not None and from_end == ranks))
    return (schedule.in_flight_microbatches(depth - from_end, depth, virtual_stages, microbatches),
            schedule.deferred_w_microbatches(depth - from_end, depth, virtual_stages, microbatches), ends)


class RankBound:
    """The rank floor (a Bound; its argument in docs/solver.md). `known`: the costs shared with the solve's
    other checks (None: none shared, a KnownCosts for each call)."""

    def __init__(self, context: SearchContext, known: KnownCosts | None = None, most_vectors: int = 0,
                 check: Callable[[], None] | None = None):
        self.context = context
        self.known = known
        self.check = check  # called as the floor prices and descends (it raises clock.SearchTimeout past the limit)
        # the most node vectors the floor's table takes: RANK_FLOOR_LIMITS', or more where the search it
        # rules on runs its DP over as many (the whole cluster node by node: lanes.Lane)
        self.most_vectors = max(RANK_FLOOR_LIMITS[0], most_vectors)

    def cannot_beat(self, search: Subproblem, cutoff_s: float) -> bool:
        return _cannot_beat(self.context, search.micro_batch, search.virtual_stages, search.ranks, search.schedule,
                            search.least_share, cutoff_s, self.known, self.most_vectors, self.check)


def _cannot_beat(context: SearchContext, micro_batch: int, virtual_stages: int,
                 ranks: int | None,
                 schedule: str, least: int, cutoff_s: float,
                 known: KnownCosts | None, most_vectors: int, check: Callable[[], None] | None) -> bool:
    """Whether no plan of the search (b, V = v, exactly `ranks` pipeline ranks or, None, any number
    up to options.max_stages, `schedule`, every replica taking at least `least` micro-batches) can
    be faster than `cutoff_s` (the rank floor's argument); False where the argument does not hold."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    config = model.config
    blocks = sum(1 for layer in model.layers if layer.kind == "decoder")
    counts = tuple(g.nodes for g in cluster.groups)
    if (cutoff_s == INF or config is None or getattr(config, "num_experts", 1) > 1 or training.global_batch % micro_batch
            or len({(l.config, l.params, l.weight_params, l.blend) for l in model.layers if l.kind == "decoder"}) > 1
            or int(np.prod([c + 1 for c in counts])) > most_vectors or blocks > RANK_FLOOR_LIMITS[1]
            or any(len(cp_choices(model, training, options, tp)) > 1 for tp in options.tp_degrees)):
        return False
    m = training.global_batch // micro_batch
    if ranks is None and get_schedule(schedule).depth_dependent():
        return False  # the in-flight counts need the depth
    most_replicas = m // least
    if most_replicas < 1:
        return True  # no replica can take its least share
    info = rank_blocks(context, micro_batch, schedule, virtual_stages)
    if any(point[3] < 0 for points, *_ in info.values() for point in points):
        return False  # c >= 0 is assumed below
    target = cutoff_s * (1 - ROUNDING_MARGIN)
    vectors = [nu for nu in product(*(range(c + 1) for c in counts)) if any(nu)]
    by_groups: dict = {}  # the vectors on the same groups, priced together
    for nu in vectors:
        by_groups.setdefault(tuple(bool(x) for x in nu), []).append(nu)
    depth = ranks if ranks is not None else min(options.max_stages, sum(counts))
    known = known if known is not None else KnownCosts()
    shared = known.part(context, micro_batch)
    memo = known.scope(shared, schedule, virtual_stages)
    memo.setdefault("p2p", p2p_mode(training.runtime, schedule))  # (rank_costs' send floors)
    if "delta" not in memo:
        memo["delta"] = ends_floor(context, micro_batch, [schedule])[1]
    delta = memo["delta"]

    def options_of(helds: tuple) -> dict:
        """(y, c) of every node vector's options at these positions, over (position, option, n)."""
        costs = {}
        for same in by_groups.values():
            if check is not None:
                check()
            # (what ranks on other nodes and other searches share is kept in `known`, not the whole)
            costs.update(rank_costs(context, info, same, blocks, m, most_replicas, helds, least, virtual_stages,
                                    memo, shared, target - delta))
        out = {}
        for nu in vectors:
            busy, latency = costs[nu]
            # T >= B_k + delta: a rank busier than the cutoff (less delta) is in no plan that beats it;
            # every chunk holds a block, a rank without the embedding or head one at least (Problem._finish)
            able = (busy <= target - delta) | (np.arange(blocks + 1) == 0)
            able &= (np.arange(blocks + 1) >= virtual_stages) if virtual_stages > 1 else \
                ((np.arange(blocks + 1) > 0) | np.array([[[bool(ends)]] for _, _, ends in helds]))
            with np.errstate(invalid="ignore"):
                out[nu] = (np.where(able, busy - latency, INF), np.where(able, latency, INF))
        return out
    positions = range(1, depth + 1)
    ranked = options_of(tuple(_held(get_schedule(schedule), j, ranks, virtual_stages, m) for j in positions))
    if _descends_past(target, delta, ranked, counts, blocks, depth, ranks is not None, None, check):
        return True
    if ranks is not None:
        return False
    # any depth: the first rank, placed last at a position not known before, holds the embedding
    # (priced only where the search is not ruled out without it)
    first = options_of(tuple(_held(get_schedule(schedule), j, ranks, virtual_stages, m, first=True) for j in positions))
    return _descends_past(target, delta, ranked, counts, blocks, depth, False, first, check)


def _descends_past(target: float, delta: float, ranked: dict, counts: tuple[int, ...], blocks: int, depth: int,
                   exact: bool, first: dict | None, check: Callable[[], None] | None = None) -> bool:
    """Whether T >= max_k y_k + S(W) + delta reaches `target` for every choice of ranks (the rank
    floor's argument): W descends from where T >= target surely (Alpa's t_max enumeration, as the
    driver); plans whose largest y is in (target - S(W) - delta, W] cannot beat the cutoff, so W
    drops to that; done when no plan is left, given up when W stalls."""
    bound = target - delta
    lowest = 0.0  # T >= X_j + sum_k c_k and X_j >= 0 (the rank floor's argument)
    for _ in range(_STEPS):
        if check is not None:
            check()
        least_sum = _least_latencies(bound, ranked, counts, blocks, depth, exact, first)
        if least_sum == INF or lowest + least_sum + delta >= target:
            return True
        # just below: a plan whose largest y is `lower` has T >= target already, to rounding
        lower = target - least_sum - delta - abs(target) * 1e-12
        if lower >= bound:
            return False
        bound = lower
    return False
