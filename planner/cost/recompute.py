"""The time a layer's backward spends recomputing its forward, by activation recomputation mode
(Korthikanti et al. 2022, sec 5; torchtitan's per-op selective checkpointing)."""

from __future__ import annotations

from ..inputs.model import Layer
from .sharding import Sharding


def layer_recompute_s(layer: Layer, sh: Sharding, selective_recompute: str, layer_overhead_s: float, fwd: float,
                      gemm_times: list[float], elem_fwd: float, cast_fwd: float, attn_fwd: float,
                      score_fwd: float) -> float:
    """Recomputation (Korthikanti et al. 2022, sec 5): full repeats the forward; selective
    repeats only the attention-score part (softmax, dropout, QK^T, PV), or under a runtime
    whose selective checkpointing is per-op (torchtitan) every second matmul and the
    elementwise kernels (op_sac_recomputed_gemm_s). `selective_recompute` and `layer_overhead_s` are
    the CostParams fields; the times are the layer's forward parts (formulas.layer_time)."""
    recompute = sh.recompute
    if recompute == "full":
        return fwd
    if recompute == "selective" and selective_recompute == "op":
        return (op_sac_recomputed_gemm_s(layer, gemm_times) + elem_fwd + cast_fwd / 2
                + layer_overhead_s / 3
                if layer.kind == "decoder" else 0.0)
    if recompute == "selective" and sh.attention == "standard":
        return attn_fwd + score_fwd
    return 0.0


def op_sac_recomputed_gemm_s(layer: Layer, gemm_times: list[float]) -> float:
    """The matmuls torchtitan's per-op selective checkpointing recomputes in a block's backward:
    it saves the output of every compute op except every second matmul (torchtitan's op-level
    SAC policy: "Saves output of all compute ops, except every second mm"); in call order q, k, v, o, then w1, w3, w2 (gated MLP) or w1, w2, it recomputes k, o
    and w3 (or w2). `gemm_times` are the block's forward GEMM times in Layer.gemms' order."""
    c = layer.config
    qkv, out, mlp_in, mlp_down = gemm_times[:4]
    per_kv = c.kv_dim / (c.hidden + 2 * c.kv_dim)
    calls = [qkv * (1 - 2 * per_kv), qkv * per_kv, qkv * per_kv, out]
    calls += [mlp_in / 2, mlp_in / 2] if c.gated_mlp else [mlp_in]
    calls.append(mlp_down)
    return sum(calls[1::2])
