"""The interleaved schedule's stage pricing (planner.search.pricing.stages.Problem with V > 1): per-chunk
times and a rank's slowest-chunk latency. A rank's V chunks hold its blocks; the embedding's
chunk (rank 0) or the head's (the last rank) takes the count that makes the slowest chunk
fastest, the others share the rest as evenly as possible (Narayanan et al. 2021, sec 2.2:
the bubble is one chunk's latency per rank)."""

from __future__ import annotations

from functools import lru_cache, reduce

import numpy as np

from ...inputs.hardware import Link
from ...inputs.model import Layer
from ...core.dims import StageDims
from ...cost.p2p import P2PMode, p2p_message_s, p2p_rank_s
from ...cost.fp8 import fp8_gather_block_params
from ...cost.moe import AllToAllGroup
from ...cost.pricing import (DpLayout, ZeroComm, layer_price, rank_zero_share, span_price, zero_comm,
                             zero_rank_overlapped)
from ...inputs.model import DTYPE_BYTES
from ...cost.sharding import Sharding
from .lead import Lead, lead_fp8_gathered, lead_parts, lead_price
from .stage_types import INF, TypeArrays


def interleaved_type_arrays(base_types: list[TypeArrays], dims: StageDims, sh: Sharding,
                            layout: DpLayout | None, layers: tuple[Layer, Layer, Layer], block_counts: np.ndarray,
                            virtual_stages: int, lead: Lead = None, ep_group: AllToAllGroup | None = None
                            ) -> list[TypeArrays]:
    """Interleaved type arrays from the 1F1B ones of the same micro-batch (`base_types`): the
    same but for ZeRO-2/3's per-chunk collectives (V latencies) and the per-chunk times of
    `layers` (decoder block, embedding, head) over the block counts `n`, the embedding's chunk
    with the `lead` blocks (ProblemInputs.lead); `ep_group`: where an expert-parallel stage's all-to-all
    runs (pricing.experts.stage_ep_group)."""
    out = []
    for ta in base_types:
        p, gpu, link = ta.cost_params, ta.group.gpu, ta.group.intra_node
        dec, emb, head = (layer_price(layer, sh, gpu, link, p, ta.cp_link, ep_group) for layer in layers)
        lead_lp = lead_price(lead, lambda layer: layer_price(layer, sh, gpu, link, p, ta.cp_link, ep_group))
        # ZeRO-2/3's per-micro-batch collectives (pricing.zero_comm) are affine in their bytes,
        # fixed + per_weight * w: each chunk pays its own (what its compute does not hide, where
        # the runtime prefetches), so V chunks pay V - 1 more fixed parts than the rank's span
        # as one (ta.time)
        one, two = (zero_comm(w, dims, sh.dtype, layout, p) for w in (1.0, 2.0))
        per_weight = two.total_s - one.total_s
        fixed = one.total_s - per_weight
        # the decoder weights all-gathered in fp8 gather as fewer 16-bit weights (dp_comm.zero_comm's saving)
        fp8_gathered = block_counts * fp8_gather_block_params(dec.weight_params, dec.expert_params, dims, sh.dtype,
                                                              p.fp8_recipe, p.fp8_all_gather) if p.fp8_all_gather else 0.0

        def zero_of(span, chunks, lead_blocks):  # (the collectives of `chunks` chunks holding `span` together)
            w = span.weight_params
            fp8 = fp8_gathered + lead_fp8_gathered(lead, dims, sh.dtype, p, lead_blocks)
            gathered = w - fp8 * (DTYPE_BYTES[sh.dtype] - 1) / DTYPE_BYTES[sh.dtype]
            return ZeroComm(*(chunks * (2 * x - y) + (y - x) * v
                              for x, y, v in ((one.reduce_scatter_s, two.reduce_scatter_s, w),
                                              (one.gather_s, two.gather_s, gathered))),
                            one.overlap, one.reduce_scatter_overlap)

        # a rank whose chunks hide their reduce-scatters behind its whole backward (dp_comm.zero_rank_overlapped)
        # exposes what its span's compute does not hide of its V chunks' collectives, each chunk an equal
        # share (dp_comm.rank_zero_share, as replica_pricer prices it): by its block count and ends alone
        by_rank = zero_rank_overlapped(p)
        chunk_times = {}
        for kind, has_head, has_emb in (("plain", 0.0, 0.0), ("emb", 0.0, 1.0), ("head", 1.0, 0.0)):
            # the embedding's chunk holds the lead blocks (interleaved searches keep them there)
            lead_blocks = lead[1] if lead is not None and has_emb else 0
            span = span_price(((block_counts, dec), (has_head, head), (has_emb, emb))
                              + lead_parts(lead_lp, lead_blocks), sh.dims)
            chunk_times[kind] = span.time_s if by_rank else span.time_s + zero_of(span, 1, lead_blocks).exposed_s(span)
        zero_shares = {}
        if by_rank:
            times = {}
            for flags, time in ta.time.items():
                span = span_price(((block_counts, dec), (float(flags[0]), head), (float(flags[1]), emb))
                                  + lead_parts(lead_lp, flags[2]), sh.dims)
                share = sum(rank_zero_share(zero_of(span, virtual_stages, flags[2]), span.fwd_s, span.bwd_s,
                                            virtual_stages))
                times[flags] = time - zero_of(span, 1, flags[2]).exposed_s(span) + virtual_stages * share
                zero_shares[flags] = share * np.ones(len(block_counts))
        else:
            times = {flags: time + (virtual_stages - 1) * fixed for flags, time in ta.time.items()}
        out.append(TypeArrays(ta.count, ta.group, times, ta.bwd, ta.params, ta.experts, ta.room, ta.boundary_bytes, p,
                              chunk_times, ta.cp_link, zero_share=zero_shares, ns=ta.ns))
    return out


def chunk_latency(types: list[TypeArrays], flags: tuple[bool, bool, int], link: Link | None, virtual_stages: int,
                  mode: P2PMode, blocks: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Interleaved: the latency of a rank's slowest chunk by the rank's block count n, and
    the blocks of its embedding or head chunk (None for a middle rank). The other chunks
    share their blocks as evenly as possible; the embedding's or head's chunk takes the
    count a in 1..n-V+1 (0..n-V+1 for an embedding's chunk holding lead blocks) that makes the
    slowest chunk (of the slowest replica type) fastest, the smallest such a on ties. Every chunk sends on, except the head's, and waits for
    its share of what the rank waits for of its sends under `mode` (cost.p2p.p2p_rank_s, shared by
    the sending chunks as cost.replica_pricer shares it), by n. flags: (head, embedding, lead blocks:
    ProblemInputs.lead, which an interleaved search keeps in the embedding's chunk)."""
    has_head, has_emb, lead = flags
    count = virtual_stages - 1 if has_head else virtual_stages
    # (and its equal share of what the rank exposes of its ZeRO collectives, TypeArrays.zero_share)
    zeros = [ta.zero_share.get(flags, 0.0) for ta in types]
    sends = [0.0 if link is None else
             p2p_rank_s(mode, count * p2p_message_s(ta.boundary_bytes, link, False, ta.cost_params), 0.0,
                        ta.time[flags])[0] / count for ta in types]
    counts = np.arange(blocks + 1)
    if not has_head and not has_emb:
        per_chunk = np.minimum(-(-counts // virtual_stages), blocks)
        latency = reduce(np.maximum, [ta.chunk["plain"][per_chunk] + send + zero
                                      for ta, send, zero in zip(types, sends, zeros)])
        latency = np.where(counts >= virtual_stages, latency, INF)
        return latency, None
    extra = "head" if has_head else "emb"
    special, others, valid = _split_grid(blocks, virtual_stages, 0 if has_emb and lead else 1)
    grid = None
    for ta, send, zero in zip(types, sends, zeros):
        send = send[:, None] if np.ndim(send) else send  # (by the rank's count n: the grid's rows)
        zero = zero[:, None] if np.ndim(zero) else zero
        own = ta.chunk[extra][special] + zero + (0.0 if has_head else send)
        slowest = np.maximum(own, ta.chunk["plain"][others] + send + zero)
        grid = slowest if grid is None else np.maximum(grid, slowest)
    grid = np.where(valid, grid, INF)
    best_a = np.argmin(grid, axis=1)  # first minimum: the smallest a
    latency = grid[counts, best_a]
    return latency, np.where(np.isfinite(latency), best_a, 0)


@lru_cache(maxsize=64)
def _split_grid(blocks: int, virtual_stages: int, least: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """chunk_latency's grid over (n, a), the special chunk holding a of a rank's n blocks (at least
    `least`) and the other V - 1 sharing n - a: a, the blocks of the largest other chunk, and whether
    the split is valid (read-only: shared by every call with these arguments)."""
    counts = np.arange(blocks + 1)
    total, special = np.meshgrid(counts, counts, indexing="ij")
    rest = total - special
    valid = (special >= least) & (rest >= virtual_stages - 1)
    others = np.clip(-(-rest // (virtual_stages - 1)), 0, blocks)
    for array in (special, others, valid):
        array.setflags(write=False)
    return special, others, valid
