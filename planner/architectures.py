"""Cost parameters that belong to a GPU architecture (and its segment), not to one GPU or run.

Keyed by the catalog's `architecture` and `segment` words (profiles/hardware/gpus.yaml). A
figure absent here keeps planner.cost.CostParams' default (fitted on Ampere datacenter
parts, Narayanan et al. 2021 and Korthikanti et al. 2022). Each figure names its source or
the fit that produced it (benchmarks/fit_cost_params.py).
"""

from __future__ import annotations

from .devices import GpuSpec

# (architecture, segment) or architecture -> CostParams fields
# Fitted values: `python benchmarks/fit_cost_params.py` (coordinate descent over its grids).
ARCHITECTURES: dict[str, dict[str, float]] = {
    # FlashAttention-2 reaches 35 % of H100's dense peak (Shah et al. 2024, FlashAttention-3,
    # sec 1); large GEMMs 55 % of the datasheet peak, fitted across Sailor's GH200 runs (TF32)
    # and torchtitan's H100 runs (bf16, 500 W parts)
    "hopper": {"attention_efficiency": 0.35, "gemm_efficiency": 0.55},
    # T4 (70 W): tensor GEMMs at 16 % of the 65 TF/s datasheet peak. Fitted on one source only
    # (AMP's 47 runs); the card's power limit holds its clock far below the boost the peak assumes
    "turing-datacenter": {"gemm_efficiency": 0.16},
    # TITAN RTX / RTX 2080 in fp32 (CUDA cores, no TF32): 90 % of the FP32 peak, the top of the
    # fit's grid. Fitted on one source only (Sailor's MIT runs)
    "turing-consumer": {"gemm_efficiency": 0.90},
}


def architecture_params(gpu: GpuSpec) -> dict[str, float]:
    """The CostParams fields `gpu`'s architecture sets (empty for an unknown architecture)."""
    out = dict(ARCHITECTURES.get(gpu.architecture, {}))
    out.update(ARCHITECTURES.get(f"{gpu.architecture}-{gpu.segment}", {}))
    return out
