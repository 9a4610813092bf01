"""Cost parameters that belong to a GPU architecture (and its segment), not to one GPU or run.

Keyed by the catalog's `architecture` and `segment` words (profiles/hardware/gpus.yaml). A
figure absent here keeps planner.cost.CostParams' default (fitted on Ampere datacenter
parts, Narayanan et al. 2021 and Korthikanti et al. 2022). Each figure names its source or
the fit that produced it (benchmarks/fit_cost_params.py).
"""

from __future__ import annotations

from .devices import GpuSpec

# (architecture, segment) or architecture -> CostParams fields
ARCHITECTURES: dict[str, dict[str, float]] = {
    # FlashAttention-2 reaches 35 % of H100's dense peak (Shah et al. 2024, FlashAttention-3, sec 1)
    "hopper": {"attention_efficiency": 0.35},
}


def architecture_params(gpu: GpuSpec) -> dict[str, float]:
    """The CostParams fields `gpu`'s architecture sets (empty for an unknown architecture)."""
    out = dict(ARCHITECTURES.get(gpu.architecture, {}))
    out.update(ARCHITECTURES.get(f"{gpu.architecture}-{gpu.segment}", {}))
    return out
