"""The Muon optimizer's work (`--optimizer muon`; Jordan et al. 2024, "Muon: An optimizer for hidden
layers in neural networks"; Liu et al. 2025, "Muon is Scalable for LLM Training", which Kimi K2
trains with): the 2-D weights of the decoder blocks take momentum SGD whose update is orthogonalized
by Newton-Schulz iterations; embeddings, the output head and every 1-D parameter (norms, biases) keep
AdamW (megatron-core optimizer/muon.py: "only allow 2D non-embedding weight"). Pure arithmetic.
"""

from __future__ import annotations

from ..inputs.devices import GpuSpec
from ..inputs.model import Layer

# megatron-core's default --muon-num-ns-steps (optimizer_config.py muon_num_ns_steps)
NS_STEPS = 5


def newton_schulz_flops(rows: float, cols: float, steps: int = NS_STEPS) -> float:
    """FLOPs to orthogonalize one rows x cols matrix X (m = the smaller side, n the larger): each
    quintic iteration forms A = X X^T (2 m^2 n), B = b A + c A^2 (2 m^3) and X <- a X + B X (2 m^2 n)
    (Jordan et al. 2024, zeropower_via_newtonschulz5)."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m * m * m)


def muon_matrices(layer: Layer) -> tuple[float, float, float]:
    """(matrix parameters, Newton-Schulz FLOPs of the dense matrices, of the routed experts') of one
    whole layer: its weight GEMMs' matrices as megatron-core stores them (fused QKV, fused gate and up
    projections, the router; each expert's own), none for the embedding and the head (AdamW's)."""
    if layer.blend:  # the search's stand-in for decoders of several shapes: their count-weighted mean
        total = sum(n for _, n in layer.blend)
        parts = [tuple(n * x for x in muon_matrices(part)) for part, n in layer.blend]
        return tuple(sum(column) / total for column in zip(*parts))
    if layer.kind != "decoder" or layer.config is None:  # (a measured profile's layers: no shapes, AdamW)
        return 0.0, 0.0, 0.0
    params = dense = experts = 0.0
    for gemm in layer.gemms(1, tp=1):
        params += gemm.n * gemm.k * gemm.count
        flops = gemm.count * newton_schulz_flops(gemm.n, gemm.k)
        if gemm.expert:
            experts += flops
        else:
            dense += flops
    return params, dense, experts


def newton_schulz_rate(gpu: GpuSpec, gemm_efficiency: float) -> float:
    """FLOP/s of the orthogonalization's matmuls: fp32 matrices at torch's "medium" matmul precision
    (megatron-core's default --muon-fp32-matmul-prec), bf16 tensor cores where the GPU has them, else fp32."""
    return (gpu.peak("bf16") if gpu.supports("bf16") else gpu.peak("fp32")) * gemm_efficiency
