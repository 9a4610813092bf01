"""A decoder block's costs on one pipeline rank for planner.search.bounds.rank_costs: per node group
and TP degree its (activations, pass time, latency floor) per recompute mode (rank_blocks), and the
least pass and latency of n blocks held in a rank's memory, through the lower convex envelope of
those points (block_costs; the argument is in docs/solver.md, "The rank floor's argument")."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...core.dims import StageDims
from ...cost.pricing import boundary_bytes, layer_price
from ...cost.sharding import Sharding
from ...cost.states import model_state_bytes
from .bound import latency_floor_s
from .completion import BLOCK_MODES
from ..pricing.stage_types import INF, SearchContext

__all__ = ["block_costs", "rank_blocks"]


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


def _lines(hull: list[tuple[float, float]]) -> tuple[list[float], list[float], float]:
    """The envelope as the maximum of lines (slopes, intercepts; the last flat at the fastest
    mode) and the leanest mode's bytes, below which it is INF."""
    slopes, heights = [], []
    for (x0, y0), (x1, y1) in zip(hull, hull[1:]):
        slope = (y1 - y0) / (x1 - x0)
        slopes.append(slope)
        heights.append(y0 - slope * x0)
    return slopes + [0.0], heights + [hull[-1][1]], hull[0][0]


def _least_times(lines: list[tuple[list[float], list[float], float]], per_block: np.ndarray,
                 which: list[int]) -> np.ndarray:
    """h(per_block) for each row of per_block, with the envelope lines[which[row]] (as _lines gives
    it): the least time of one block whose activations average `per_block` bytes (INF below the
    leanest mode); a convex envelope is the maximum of the lines through its segments."""
    width = max(len(slopes) for slopes, _, _ in lines)
    slopes = np.array([sl + [0.0] * (width - len(sl)) for sl, _, _ in lines])
    heights = np.array([h + [-INF] * (width - len(h)) for _, h, _ in lines])
    lean = np.array([[x0] for _, _, x0 in lines])
    slopes, heights, lean = slopes[which], heights[which], lean[which]
    x = np.minimum(per_block, 1e300)[:, None, :]  # (INF: 0 x INF would be undefined)
    out = (heights[:, :, None] + slopes[:, :, None] * x).max(axis=1)
    return np.where(per_block < lean, INF, out)


@lru_cache(maxsize=64)
def rank_blocks(context: SearchContext, micro_batch: int, schedule: str, virtual_stages: int) -> dict:
    """Per group and tp: (points, room, states, a block's price, cost parameters): points the
    (activation bytes, deferred-W bytes, pass time, latency floor) of one block per recompute mode
    and sp; states(dp, zero, offload) a block's model states on one GPU (ZeRO-Offload: without the
    optimizer states, which it keeps in host memory)."""
    model, cluster, training, options = context.model, context.cluster, context.training, context.options
    decoders = [layer for layer in model.layers if layer.kind == "decoder"]
    dec = decoders[0]
    out = {}
    for i, g in enumerate(cluster.groups):
        p = options.params_for(g.gpu.name)
        room = g.gpu.memory_bytes - p.reserved_memory_bytes
        for tp in options.tp_degrees:
            if g.gpus_per_node % tp:
                continue
            shardings = [Sharding(training.dtype, micro_batch, training.seq_len, training.attention, StageDims(tp, sp), mode)
                         for mode in BLOCK_MODES for sp in ((False, True) if tp > 1 else (False,))]
            block_prices = [layer_price(dec, sh, g.gpu, g.intra_node, p) for sh in shardings]
            points = []
            for price in block_prices:
                floor = latency_floor_s(schedule, price, virtual_stages)
                points.append((price.act_bytes, price.wgrad_act_bytes, price.time_s, 0.0 if floor is None else floor))

            def states(dp: int, zero: int, offload: bool, tp: int = tp, params: float = dec.weight_params) -> float:
                keep = 2 if offload else 3  # ZeRO-Offload takes the optimizer states off the GPU
                return sum(model_state_bytes(params / tp, training.dtype, zero, dp, training.optimizer)[:keep])
            ends = {}
            for kind in ("embedding", "head"):
                layer = next(layer for layer in model.layers if layer.kind == kind)
                prices = [layer_price(layer, sh, g.gpu, g.intra_node, p) for sh in shardings]
                floors = [latency_floor_s(schedule, price, virtual_stages) for price in prices]
                # the least of each over the modes: activations, deferred-W inputs, pass, latency >= 0
                ends[kind] = (min(x.act_bytes for x in prices), min(x.wgrad_act_bytes for x in prices),
                              min(x.time_s for x in prices), max(0.0, min(0.0 if f is None else f for f in floors)),
                              layer.weight_params, prices[0], max(x.bwd_s for x in prices))
            sent = min(boundary_bytes(dec, sh) for sh in shardings if sh.recompute == "none")
            slowest_bwd = max(price.bwd_s for price in block_prices)
            price = block_prices[-1]  # a block's price (its weights: the same in every mode)
            out[(i, tp)] = (tuple(points), room, states, price, p, ends, sent, slowest_bwd)
    return out


@lru_cache(maxsize=1024)
def _curves(points: tuple, whole: float, deferred: float) -> tuple[tuple, tuple]:
    """The envelopes h of a replica holding `whole` micro-batches' activations and the deferred-W
    inputs of `deferred` more, as lines (_lines): (bytes per block, pass time) and (bytes per block,
    latency floor)."""
    held = [whole * act + deferred * wgrad for act, wgrad, _, _ in points]
    return (_lines(_envelope([(x, time) for x, (_, _, time, _) in zip(held, points)])),
            _lines(_envelope([(x, lat) for x, (_, _, _, lat) in zip(held, points)])))


def block_costs(info: dict, wanted: list[tuple], block_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A replica's pass and latency floor over n blocks for each (group, tp, dp, ZeRO stage, offload,
    (whole, deferred, ends) held) of `wanted`: its group's blocks at tp (their rank_blocks entry), dp
    replicas, ZeRO-`zero` (with ZeRO-Offload or not), `whole` micro-batches' activations and the
    deferred-W inputs of `deferred` more held, the embedding's or head's (`ends`) with them: arrays
    over (wanted, n) (the rank floor's argument, docs/solver.md: the memory bound)."""
    rooms, held, pass_s, lat_s, which = [], [], [], [], []
    # per (group, tp, dp, ZeRO stage, offload), (group, tp, ends), (group, tp, held)
    parts, extras, curves = {}, {}, {}
    for i, tp, dp, zero, offload, (whole, deferred, kinds) in wanted:
        points, room, states, price, p, ends, *_ = info[(i, tp)]
        if (i, tp, dp, zero, offload) not in parts:
            # a block's states, and the embedding's and head's
            parts[(i, tp, dp, zero, offload)] = (states(dp, zero, offload), {
                kind: states(dp, zero, offload, params=ends[kind][4]) for kind in ends})
        state, end_states = parts[(i, tp, dp, zero, offload)]
        if (i, tp, kinds) not in extras:
            extra = [ends[kind] for kind in kinds]
            extras[(i, tp, kinds)] = (extra, sum(e[2] for e in extra), sum(e[3] for e in extra))
        extra, end_pass, end_lat = extras[(i, tp, kinds)]
        # every GPU of the rank holds its n blocks' states and what it keeps in flight, and
        # the embedding's or head's states and activations where the rank holds them
        rooms.append(room - sum(end_states[kind] + whole * e[0] + deferred * e[1] for kind, e in zip(kinds, extra)))
        held.append(state)
        pass_s.append(end_pass)
        lat_s.append(end_lat)
        if (i, tp, whole, deferred) not in curves:
            curves[(i, tp, whole, deferred)] = len(curves), _curves(points, whole, deferred)
        which.append(curves[(i, tp, whole, deferred)][0])
    lines = [pair for _, pair in curves.values()]
    rooms = np.array(rooms)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_block = np.where(block_counts > 0, (rooms - block_counts * np.array(held)[:, None]) / np.where(block_counts > 0, block_counts, 1.0), INF)
    per_block = np.where(rooms < 0, -1e300, per_block)  # (the ends alone do not fit)
    with np.errstate(invalid="ignore"):
        return (np.where(block_counts > 0, block_counts * _least_times([c[0] for c in lines], per_block, which), 0.0)
                + np.array(pass_s)[:, None],
                np.where(block_counts > 0, block_counts * _least_times([c[1] for c in lines], per_block, which), 0.0)
                + np.array(lat_s)[:, None])
