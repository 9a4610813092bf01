"""The DP's transitions (planner.search.dp): a stage family's variant relaxed from a layer of states,
as sliding-window minima over the items placed, and the block count a traced stage took. A stage
holding lead blocks (ProblemInputs.lead) or the embedding ends at one of a few items: relax_lead."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .pricing.stages import INF, Variant


def window_min(values: np.ndarray, width: int) -> np.ndarray:
    """out[..., q] = min(values[..., q - width + 1 .. q]) (indices below 0 ignored), by doubling."""
    acc = values
    span = 1
    length = values.shape[-1]
    pad_shape = values.shape[:-1]

    def shift(array: np.ndarray, by: int) -> np.ndarray:
        if by >= length:
            return np.full(array.shape, INF)
        return np.concatenate([np.full(pad_shape + (by,), INF), array[..., :-by]], axis=-1)

    while span * 2 <= width:
        acc = np.minimum(acc, shift(acc, span))
        span *= 2
    rest = width - span
    if rest:
        acc = np.minimum(acc, shift(acc, rest))
    return acc


@dataclass(frozen=True)
class Recipe:
    """What `relax` needs of a variant under one bound: the allowed block counts, split into
    affine runs (low, high, slope, intercept) and the rest (lo, hi, reversed tau on lo..hi)."""

    ok: np.ndarray
    affine: tuple
    general: tuple | None


def recipe(variant: Variant, ok: np.ndarray) -> Recipe | None:
    """The recipe of a variant whose allowed block counts are `ok` (finite X <= the bound;
    X is infinite where the variant has no config, Problem.family_cost)."""
    tau = variant.tau
    if not ok.any():
        return None
    general = np.zeros(len(tau), dtype=bool)
    affine = []
    for _, run_mask, slope in variant.runs:
        mask = ok if len(variant.runs) == 1 else ok & run_mask
        allowed = np.flatnonzero(mask)
        if not allowed.size:
            continue
        low, high = int(allowed[0]), int(allowed[-1])
        if slope is None or high - low + 1 != allowed.size:
            general |= mask
            continue
        affine.append((low, high, slope, float(tau[low]) - slope * low))
    rest = None
    if general.any():
        allowed = np.flatnonzero(general)
        lo, hi = int(allowed[0]), int(allowed[-1])
        rest = (lo, hi, np.where(general, tau, INF)[lo:hi + 1][::-1].copy())
    return Recipe(ok, tuple(affine), rest)


def relax(value: np.ndarray, variant: Variant, bound: float, head: int, has_emb: bool,
          items: int, prepared: Recipe | None = None, lead_blocks: int = 0, spread: int = 0) -> np.ndarray | None:
    """cand[..., l + blocks + head + emb] = min over allowed blocks of value[..., l] + tau[blocks],
    where a block count is allowed when the stage's X is finite and <= bound. `value` is
    one state's array or a stack of states' (one row each); `prepared` is recipe(variant,
    bound) when the caller has it. `spread`: the lead blocks placed as items of their own (the
    last before the embedding), of which the stage holds `lead_blocks` (relax_lead)."""
    prepared = prepared or recipe(variant, np.isfinite(variant.x) if bound == INF else variant.x <= bound)
    if prepared is None:
        return None
    if spread and (lead_blocks or has_emb):
        return relax_lead(value, variant.tau, prepared.ok, head, has_emb, items, lead_blocks, spread)
    limit = items - spread  # a stage without lead blocks ends before them
    tau = variant.tau
    n_blocks = len(tau) - 1
    lead = value.shape[:-1]
    cand = np.full(lead + (items + 1,), INF)
    if has_emb:
        # the stage takes every remaining item: l + blocks + head + 1 == items
        ell = np.arange(items - head)  # blocks = items - 1 - head - l >= 0
        blocks = items - 1 - head - ell
        inside = (blocks <= n_blocks) & (blocks >= 0)
        ell, blocks = ell[inside], blocks[inside]
        if not ell.size:
            return None
        totals = np.where(prepared.ok[blocks], value[..., ell] + tau[blocks], INF)
        cand[..., items] = totals.min(axis=-1)
        return cand
    # configs whose tau is affine on a contiguous run of block counts: a sliding-window
    # minimum of value[l] - slope * l
    for low, high, slope, intercept in prepared.affine:
        ell = np.arange(items + 1, dtype=float)
        shifted = window_min(value - slope * ell, high - low + 1)
        targets = np.arange(head + low, limit)  # j < items: the embedding is not placed yet
        if targets.size:
            q = targets - head - low
            cand[..., targets] = np.minimum(cand[..., targets],
                                            intercept + slope * (targets - head) + shifted[..., q])
    # the rest together: for q = j - head, min over k in lo..hi of value[q - k] + tau[k]
    if prepared.general is not None:
        lo, hi, tau_reversed = prepared.general
        rows = limit - head
        # only q within reach of a finite value[q - k] (k in lo..hi) can get a finite sum: the
        # others stay infinite, so the windows run over those q alone
        finite = np.flatnonzero(np.isfinite(value).reshape(-1, value.shape[-1]).any(axis=0))
        first_q, last_q = (max(int(finite[0]) + lo, 0), min(int(finite[-1]) + hi, rows - 1)) if finite.size else (1, 0)
        if first_q <= last_q:
            padded = np.concatenate([np.full(lead + (hi,), INF), value], axis=-1)
            # windows[..., q - first_q, :] = padded[..., q:q + width] (a strided view, no copy)
            step = padded.strides[-1]
            windows = np.ndarray(lead + (last_q - first_q + 1, hi - lo + 1), padded.dtype, padded, first_q * step,
                                 padded.strides[:-1] + (step, step))
            sums = (windows + tau_reversed).min(axis=-1)
            span = slice(head + first_q, head + last_q + 1)
            cand[..., span] = np.minimum(cand[..., span], sums)
        cand[..., limit:] = INF
    return cand


def lead_mask(k: np.ndarray, ell: np.ndarray, head: int, lead: int, has_emb: bool, counted_end: int) -> np.ndarray:
    """Which block counts k (starting after `ell` items placed) keep a stage holding `lead` lead blocks
    or the embedding in order: the lead blocks come right before the counted ones, which end at item
    `counted_end` from the end (the head and every counted block), so a stage holding lead blocks
    or the embedding and counted blocks ends its counted ones there, and one holding no counted
    block starts at or past it."""
    if not lead and not has_emb:
        return ell + head + k <= counted_end
    return np.where(k >= 1, ell + head + k == counted_end, ell + head >= counted_end)


def relax_lead(value: np.ndarray, tau: np.ndarray, ok: np.ndarray, head: int, has_emb: bool, items: int,
               lead: int, spread: int) -> np.ndarray | None:
    """relax for a stage holding `lead` of the `spread` lead blocks or the embedding: it ends inside
    the lead blocks or, with the embedding, at the last item; for each such end the least value over
    the block counts lead_mask allows (a few ends: computed directly)."""
    counted_end = items - 1 - spread
    k = np.arange(len(tau))
    cand = np.full(value.shape[:-1] + (items + 1,), INF)
    for target in ((items,) if has_emb else range(counted_end + 1, items)):
        ell = target - head - k - lead - int(has_emb)
        allowed = ok & (ell >= 0) & lead_mask(k, ell, head, lead, has_emb, counted_end)
        if allowed.any():
            cand[..., target] = (value[..., ell[allowed]] + tau[allowed]).min(axis=-1)
    return cand if np.isfinite(cand).any() else None


def choose_blocks(value: np.ndarray, variant: Variant, bound: float, head: int,
                   has_emb: bool, target: int, lead: int = 0, spread: int = 0) -> int:
    """The block count a stage took to reach item count `target` (smallest on ties); `lead`,
    `spread` as relax's."""
    k = np.arange(len(variant.tau))
    ell = target - head - k - int(has_emb) - (lead if spread else 0)
    allowed = (variant.member >= 0) & (variant.x <= bound) & np.isfinite(variant.x) & (ell >= 0)
    if spread:
        allowed &= lead_mask(k, ell, head, lead, has_emb, len(value) - 2 - spread)
    totals = np.full(len(k), INF)
    totals[allowed] = value[ell[allowed]] + variant.tau[allowed]
    best_k = int(totals.argmin())  # the first of equal totals: the smallest count
    assert totals[best_k] < INF, "a traced move must have a block count"
    return best_k
