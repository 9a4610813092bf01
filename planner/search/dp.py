"""The dynamic programme of the plan search for one bound W on the bottleneck term, and the
reconstruction of a plan's stages from its states (see planner.search.orchestration.driver for the whole)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..core.clock import SearchClock
from .bounds.completion import BLOCK_MODES, block_gpu_seconds, seconds_per_block_left
from .pricing.across_types import across_block_seconds
from .pricing.stages import INF, Problem, StageConfig
from .relax import choose_blocks, recipe, relax


# --- the dynamic programme for one bound W ---------------------------------------------------


class State(NamedTuple):
    """A DP state (a NamedTuple: states are sorted and hashed in the hot loop)."""

    used: tuple[int, ...]  # nodes used per bundle group
    placed: int  # stages placed so far, from the end
    successor: int  # signature id of the last placed stage (the next placed stage's successor)
    first: int  # signature id the first rank must have (interleaved), -1 for 1F1B
    # where the runtime's sends block (cost.p2p): the link (StageLinks.link_key) the last placed
    # stage was priced receiving over, which the next placed stage must send over; -1 none
    receive: int = -1


@dataclass
class Cell:
    value: np.ndarray  # min sum tau over items placed from the end (0..L+2)
    parent: np.ndarray  # index into `moves` per item count (-1: none)


@dataclass(frozen=True)
class Move:
    prev: State
    fid: int
    variant: int
    has_emb: bool
    lead: int = 0  # lead blocks the stage holds (ProblemInputs.lead)


def run_dp(problem: Problem, bound: float, ranks: int | None = None, cutoff: float = INF,
           clock: SearchClock | None = None) -> tuple[dict[State, Cell], list[dict[State, Cell]], list[Move]]:
    """All states reachable with every stage's X <= bound; value = min sum tau.

    A State is (nodes used per group, stages placed, signature id of the last placed
    stage, signature id of the first stage); its value is an array over the number of
    layer items placed from the end. 1F1B (`ranks` None): any number of stages, the first
    stage's signature is unused (-1). Interleaved: exactly `ranks` pipeline ranks, and the
    last rank sends around to the first, so the search starts once per possible signature
    of the first rank and keeps only plans whose first rank has it.

    `cutoff` is the best step time known: a partial plan whose sum of tau plus the X of its
    newest stage reaches it cannot lead to a faster plan (T = max X + sum tau) and is dropped,
    as is one whose sum of tau plus the least busy time its remaining blocks force on the nodes
    left (planner.search.bounds.completion) reaches it.
    `clock` is checked once per stage family (clock.SearchTimeout past the time limit).
    """
    items = problem.inputs.items
    zeros = tuple(0 for _ in problem.bundle_nodes)
    max_stages, start = _start_layer(problem, ranks, items, zeros)
    layers: list[dict[State, Cell]] = [start]
    moves: list[Move] = []
    finals: dict[State, Cell] = {}
    per_block_left = _per_block_left(problem)
    if cutoff < INF and per_block_left(zeros) * problem.num_blocks * (1 - 1e-9) >= cutoff:
        return {}, [{}], []  # the blocks alone keep every plan from beating the cutoff (completion)
    # counted blocks still to place once a stage leaves `l` items placed from the end (the embedding
    # and the spread lead blocks aside: they add no less than nothing)
    blocks_left = np.maximum(items - 1 - problem.inputs.spread_lead - np.arange(items + 1), 0)
    for placed in range(max_stages):
        batches = _batches(problem, layers[placed], items)
        offers = _offers(problem, layers[placed], batches, placed, bound, ranks, cutoff, clock,
                         per_block_left, blocks_left)
        nxt = _merge_offers(offers, items, moves)
        for key, cell in nxt.items():
            # Restriction.min_stages: fewer stages are placed but never final
            # and SolverOptions.pp_degrees: only the depths allowed are plans
            if np.isfinite(cell.value[items]) and placed + 1 >= problem.restriction.min_stages \
                    and problem.options.allows_pp(placed + 1):
                finals[key] = cell
        layers.append(nxt)
        if not nxt:
            break
    return finals, layers, moves


def _start_layer(problem: Problem, ranks: int | None, items: int,
                 zeros: tuple[int, ...]) -> tuple[int, dict[State, Cell]]:
    """The most stages a plan may have, and the DP's first layer: one empty state per signature
    the first rank may have (-1 alone for 1F1B), at value 0 with no item placed."""
    if ranks is None or not problem.chunked:  # (zero bubble: P ranks, no send around to rank 0)
        firsts = [-1]
        max_stages = min(problem.stage_configs.max_stages, sum(problem.bundle_nodes), items)
    else:
        firsts = sorted({sig for _, _, sig in problem.transitions(zeros)})
        max_stages = ranks
    layer: dict[State, Cell] = {}
    for first in firsts:
        start = Cell(np.full(items + 1, INF), np.full(items + 1, -1, dtype=np.int64))
        start.value[0] = 0.0
        layer[State(zeros, 0, first, first)] = start
    return max_stages, layer


def _batches(problem: Problem, layer: dict[State, Cell], items: int) -> dict[int, dict[int, list]]:
    """The layer's live states by successor, then by the stage family each can place next, as
    (state, nodes used after the stage, the stage's signature id), in state order."""
    # states with the same successor see the same stage costs (whatever their first
    # rank): relax each family from all of them at once, one row per state; where a state's
    # successor was priced receiving over a link, only the families that send over it follow
    batches: dict[tuple[int, int], dict[int, list]] = {}
    for key in sorted(layer):
        cell = layer[key]
        used, successor = key.used, key.successor
        if not np.isfinite(cell.value[:items]).any():
            continue
        by_family = batches.setdefault((successor, key.receive), {})
        for fid, new_used, sig in problem.transitions(used):
            if key.receive < 0 or problem.links.link_key(
                    problem.links.link(problem.catalog.families[fid][0], successor)) == key.receive:
                by_family.setdefault(fid, []).append((key, new_used, sig))
    return batches


def _offers(problem: Problem, layer: dict[State, Cell], batches: dict[int, dict[int, list]], placed: int,
            bound: float, ranks: int | None, cutoff: float, clock: SearchClock | None,
            per_block_left, blocks_left: np.ndarray) -> dict[State, list]:
    """The candidate values of each state one stage further than `layer`, as
    (values per item count, source state, family id, variant index, has_emb, lead blocks)."""
    items = problem.inputs.items
    head = 1 if placed == 0 else 0
    front_choices = (False, True) if ranks is None else ((True,) if placed + 1 == ranks else (False,))
    recipes = problem.tables.recipes  # (id(variant), allowed block counts) -> (variant, recipe)
    # candidates per new state, in the order met: the first candidate reaching the least
    # value at an item count is its parent there (as a strict-improvement scan would pick;
    # a new state's candidates all share its first rank, so they are met in the order of
    # (successor, family, has_emb, variant, source state))
    offers: dict[State, list] = {}
    for (successor, _), by_family in sorted(batches.items()):
        for fid, all_sources in sorted(by_family.items()):
            if clock is not None:
                clock.check()
            all_values = np.stack([layer[key].value for key, _, _ in all_sources])
            sig = all_sources[0][2]
            # a stage with the embedding or lead blocks ends past the counted blocks, which its own
            # counted blocks (at most most_blocks) must reach from some state's placed items: where
            # none can, those stages are not priced here
            reaches_lead = _reaches(all_values) + head + problem.most_blocks(fid, bool(head)) \
                >= items - 1 - problem.inputs.spread_lead
            all_future = None
            if cutoff < INF:  # the least the remaining blocks add, per source row and item count
                rates = np.array([per_block_left(new_used) for _, new_used, _ in all_sources])
                with np.errstate(invalid="ignore"):
                    all_future = np.where(blocks_left > 0, rates[:, None] * blocks_left, 0.0)
                all_future *= 1 - 1e-9  # never prune on rounding
            for has_emb in front_choices:
                if has_emb and not reaches_lead:
                    continue
                sources, values = all_sources, all_values
                if ranks is not None and problem.chunked and has_emb:
                    # the first rank must have the signature the search started from
                    rows = [i for i, (key, _, _) in enumerate(all_sources) if key.first == sig]
                    if not rows:
                        continue
                    sources, values = [all_sources[i] for i in rows], all_values[rows]
                    future = None if all_future is None else all_future[rows]
                else:
                    future = all_future
                # blocking sends: a stage with a predecessor is priced once per link it may receive over
                receives = problem.links.receive_ids(sig) if problem.p2p.blocking and not has_emb else (-1,)
                for receive, lead, v_index, variant in ((r, j, i, v) for r in receives
                                                        for j in (_leads(problem, has_emb) if reaches_lead else (0,))
                                                        for i, v in enumerate(problem.family_cost(
                                                            fid, placed + 1, has_emb, successor, ranks, r, j))):
                    if variant.x_min > bound:
                        continue
                    ok = np.isfinite(variant.x) if bound == INF else variant.x <= bound
                    recipe_key = (id(variant), ok.tobytes())
                    prepared = recipes.get(recipe_key)
                    if prepared is None:
                        prepared = recipes[recipe_key] = (variant, recipe(variant, ok))
                    if prepared[1] is None:
                        continue
                    cands = relax(values, variant, bound, head, has_emb, items, prepared[1], lead,
                                  problem.inputs.spread_lead)
                    if cands is None:
                        continue
                    if cutoff < INF:
                        cands[cands + np.maximum(variant.x_min, future) >= cutoff] = INF
                    alive = np.isfinite(cands).any(axis=-1)
                    for row in np.flatnonzero(alive):
                        key, new_used, _ = sources[row]
                        offers.setdefault(State(new_used, placed + 1, sig, key.first, receive), []).append(
                            (cands[row], key, fid, v_index, has_emb, lead))
    return offers


def _reaches(values: np.ndarray) -> int:
    """The most items placed with a finite value in any row of `values` (-1: none)."""
    finite = np.flatnonzero(np.isfinite(values).any(axis=0))
    return int(finite[-1]) if finite.size else -1


def _leads(problem: Problem, has_emb: bool):
    """The lead blocks (ProblemInputs.lead) a stage may hold: any count up to the model's where the DP
    places them as items of their own (one-chunk searches), else all of them with the embedding."""
    inputs = problem.inputs
    if inputs.spread_lead:
        return range(inputs.spread_lead + 1)
    return (inputs.lead_blocks,) if has_emb else (0,)


def _merge_offers(offers: dict[State, list], items: int, moves: list[Move]) -> dict[State, Cell]:
    """Each new state's cell: per item count the least value offered and, in `moves` (appended
    to), the move of the first offer reaching it."""
    nxt: dict[State, Cell] = {}
    for new_key, offered in offers.items():
        stacked = np.stack([o[0] for o in offered])
        winner = stacked.argmin(axis=0)
        value = stacked[winner, np.arange(items + 1)]
        parent = np.full(items + 1, -1, dtype=np.int64)
        finite = np.isfinite(value)
        for index in np.unique(winner[finite]):
            _, key, fid, v_index, has_emb, lead = offered[index]
            moves.append(Move(key, fid, v_index, has_emb, lead))
            parent[finite & (winner == index)] = len(moves) - 1
        nxt[new_key] = Cell(value, parent)
    return nxt


def _per_block_left(problem: Problem):
    """new_used -> the least step time each remaining decoder block adds (completion), cached."""
    tables = problem.tables
    if not tables.kappas:
        across = across_block_seconds(problem.inputs, BLOCK_MODES)  # once per mixed node, not per type
        tables.kappas.update((g, block_gpu_seconds(problem.inputs, g, across)) for g in range(len(problem.groups)))
    cache, inputs = tables.per_block_left, problem.inputs
    kappas = tuple(tables.kappas[g] for g in range(len(problem.groups)))

    def lookup(used: tuple[int, ...]) -> float:
        value = cache.get(used)
        if value is None:
            value = cache[used] = seconds_per_block_left(inputs, kappas, used)
        return value
    return lookup


# --- reconstruction, shares, verification ---------------------------------------------------


@dataclass(frozen=True)
class StageChoice:
    cid: int
    config: StageConfig
    blocks: int
    has_head: bool
    has_emb: bool
    successor: int  # signature id of the next stage (interleaved: rank 0's for the last), -1 none
    from_end: int
    ranks: int | None = None  # pipeline ranks of an interleaved plan, None for 1F1B
    receive: int = -1  # the link it receives over where sends block (State.receive), -1 none
    lead: int = 0  # the lead blocks it holds before its counted ones (ProblemInputs.lead)


def trace(problem: Problem, key: State, layers: list[dict[State, Cell]], moves: list[Move],
          bound: float, ranks: int | None = None) -> list[StageChoice]:
    """Stages of the plan ending in state `key`, front (embedding) to back (head)."""
    items, spread = problem.inputs.items, problem.inputs.spread_lead
    out = []
    ell = items
    while key.placed > 0:
        cell = layers[key.placed][key]
        move = moves[int(cell.parent[ell])]
        has_head = move.prev.placed == 0
        prev_cell = layers[move.prev.placed][move.prev]
        variant = problem.family_cost(move.fid, key.placed, move.has_emb, move.prev.successor, ranks,
                                      key.receive, move.lead)[move.variant]
        blocks = choose_blocks(prev_cell.value, variant, bound, int(has_head), move.has_emb, ell, move.lead, spread)
        cid = int(variant.member[blocks])
        out.append(StageChoice(cid, problem.config_list[cid], blocks, has_head, move.has_emb,
                               move.prev.successor, key.placed, ranks, key.receive, move.lead))
        ell -= blocks + int(has_head) + int(move.has_emb) + (move.lead if spread else 0)
        key = move.prev
    assert ell == 0, "trace must consume every layer"
    return out


def price(problem: Problem, choices: list[StageChoice]) -> tuple[float, float, float]:
    """(T, sum tau, max X) of a traced plan, from the DP's own stage costs."""
    taus, xs = [], []
    for c in choices:
        cost = problem.stage_cost(c.cid, c.from_end, c.has_emb, c.successor, c.ranks, c.receive, c.lead)
        taus.append(float(cost.tau[c.blocks]))
        xs.append(float(cost.x[c.blocks]))
    return max(xs) + sum(taus), sum(taus), max(xs)


