"""The least busy time B' of a pipeline rank's replicas for planner.search.bounds.rank_costs (the argument
is the B' item of docs/solver.md, "The rank floor's argument")."""

from __future__ import annotations

import numpy as np

from ..pricing.stage_types import INF

__all__ = ["least_busy"]


def least_busy(microbatches: int, counts: np.ndarray, ones: np.ndarray, fulls: np.ndarray, below: np.ndarray,
               limit: float = INF, tails: np.ndarray | None = None) -> np.ndarray:
    """B' per row (an option at a position) and n: the least busy time in which a rank's replicas
    take `microbatches` micro-batches, counts[i, k] of group i with pass ones[i, k] (over n) while holding fewer
    than the in-flight count (at most below[k] micro-batches each; 0: none may) and fulls[i, k]
    holding it (the rank floor's argument, docs/solver.md: B'). Where B' + `tails` (per row and n) surely
    exceeds `limit`, some value no less than B' (the rank is in no plan that beats the cutoff)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        whole = microbatches / (counts[:, :, None] / fulls).sum(axis=0)
        # B' = m / sum(counts / full) where there every replica would take more than `below`
        need = (below[:, None] > 0) & ~(whole[None] > below[None, :, None] * fulls).all(axis=0)
        need &= np.isfinite(ones).all(axis=0)  # (else no replica holds a micro-batch: rank_costs' fits)
        if limit < INF:
            # a replica takes g_i(B) <= B max(1 / one_i, 1 / full_i) in B, so B' >= m / sum(counts x that)
            # (every root below is, to rounding, so the sum with the tails rounds no lower than that
            # bound's); where that passes `limit`, B' <= whole does too
            fastest = np.maximum(1.0 / ones, 1.0 / fulls)
            need &= ~(microbatches / (counts[:, :, None] * fastest).sum(axis=0) * (1 - 1e-6) + tails > limit)
    if not need.any():
        return whole
    # g_i(B) = max(min(below, B / one_i), B / full_i) micro-batches of a replica in B: continuous,
    # piecewise linear and rising; B' solves sum_i counts_i g_i(B) = m on the piece holding its root
    rows, cols = np.nonzero(need)
    ones, fulls = ones[:, rows, cols], fulls[:, rows, cols]  # (i, entry)
    counts, cap = counts[:, rows], below[rows][None]
    best = np.full(len(rows), INF)
    with np.errstate(divide="ignore", invalid="ignore"):
        first_end = cap * ones  # the cap reached
        last_start = cap * fulls  # B / full past it
        # the pieces' lows, sorted: a piece runs from its low to the next greater breakpoint, `highs`
        lows = np.sort(np.concatenate([np.zeros((1,) + fulls.shape[1:]), first_end, last_start]), axis=0)
        highs = np.full_like(lows, INF)
        for k in range(len(lows) - 2, -1, -1):
            highs[k] = np.where(lows[k + 1] > lows[k], lows[k + 1], highs[k + 1])
        rising, held = counts * (1.0 / ones), counts * cap  # (i, entry): micro-batches per second below the cap, the cap
        after = counts * (1.0 / fulls)
        for low, high in zip(lows, highs):  # one piece at a time
            first = low[None] < first_end  # (i, entry)
            last = low[None] >= last_start
            slope = np.where(first, rising, np.where(last, after, 0.0)).sum(axis=0)
            flat = np.where(first | last, 0.0, held).sum(axis=0)
            root = np.where(slope > 0, (microbatches - flat) / slope, np.where(flat >= microbatches, low, INF))
            # a root past the piece is not G's
            inside = (root >= low * (1 - 1e-12)) & (root <= high * (1 + 1e-12))
            best = np.minimum(best, np.where(inside, np.maximum(root, low), INF))
    out = whole.copy()
    out[rows, cols] = np.minimum(best, whole[rows, cols])
    return out
