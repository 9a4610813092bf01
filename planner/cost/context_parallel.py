"""The collectives of context parallelism (StageDims.cp, cp_kind) per layer: one function for
both kinds, the part attention does not hide (planner.cost.pricing adds it to a layer's time)."""

from __future__ import annotations

from functools import lru_cache

from ..inputs.hardware import GpuSpec, Link
from ..inputs.linkcurve import collective_s
from ..inputs.model import Layer
from .formulas import CostParams, attention_s, link_efficiency
from .sharding import Sharding


@lru_cache(maxsize=65536)
def cp_comm(layer: Layer, sh: Sharding, gpu: GpuSpec, link: Link, params: CostParams) -> tuple[float, float]:
    """Context-parallel communication of one layer for one micro-batch on one GPU, the part
    attention does not hide: (forward, backward incl. a fully recomputed forward's).

    ring (Liu et al. 2023, Ring Attention, sec 3; Megatron-core context_parallel docs): each
    rank's K and V block (its local_seq_len tokens, head_share(kv_dim) wide) goes round the ring in cp - 1
    send/recv steps, step i overlapped with the attention of block i (1/cp of the pass); the
    backward passes K, V and their gradients dK, dV (2x the bytes). Exposed per step:
    max(0, transfer - that step's attention).
    all-to-all (Jacobs et al. 2023, DeepSpeed-Ulysses, sec 3.1): four all-to-alls forward (Q, K,
    V to a head split; the output back to the sequence split) and four backward, each moving
    (cp-1)/cp of the GPU's buffer, not overlapped."""
    dims = sh.dims
    cp = dims.cp
    if layer.blend:  # a blend of decoder shapes (model.Model.decoder_stand_in): the count-weighted mean
        parts = [(cp_comm(part, sh, gpu, link, params), n) for part, n in layer.blend]
        total = sum(n for _, n in parts)
        return (sum(f * n for (f, _), n in parts) / total, sum(b * n for (_, b), n in parts) / total)
    if cp <= 1 or layer.kind != "decoder" or layer.config is None:
        return 0.0, 0.0
    attn_fwd_s, attn_bwd_s = attention_s(layer, gpu, sh, params)
    c = layer.config
    tokens = sh.micro_batch * dims.local_seq_len(sh.seq_len)
    nb = sh.dtype_bytes
    eff = link_efficiency(link, params)
    if dims.cp_kind == "all-to-all":
        nbytes = nb * tokens * dims.head_share(c.q_dim + 2 * c.kv_dim + c.o_dim)
        if link.curves:
            one_pass = collective_s("all_to_all", nbytes, cp, link.curves, link.bandwidth_bytes_per_s, link.latency_s)
        else:
            one_pass = (cp - 1) / cp * nbytes / (link.bandwidth_bytes_per_s * eff) + (cp - 1) * link.latency_s
        fwd = bwd = one_pass
    else:
        kv_bytes = nb * tokens * dims.head_share(2 * c.kv_dim)

        def step_s(nbytes):
            if link.curves:
                return collective_s("sendrecv", nbytes, 2, link.curves, link.bandwidth_bytes_per_s, link.latency_s)
            return link.latency_s + nbytes / (link.bandwidth_bytes_per_s * eff)

        fwd = (cp - 1) * max(0.0, step_s(kv_bytes) - attn_fwd_s / cp)
        bwd = (cp - 1) * max(0.0, step_s(2 * kv_bytes) - attn_bwd_s / cp)
    if sh.recompute == "full":
        bwd += fwd
    return fwd, bwd
