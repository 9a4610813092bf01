"""Cost parameters that belong to a GPU architecture (and its segment), not to one GPU or run.

Keyed by the catalog's `architecture` and `segment` words (profiles/hardware/gpus.yaml). A
figure absent here keeps planner.cost.formulas.CostParams' default (fitted on Ampere datacenter
parts, Narayanan et al. 2021 and Korthikanti et al. 2022). Each figure names its source or
the fit that produced it (benchmarks/fit_cost_params.py), and every fitted one is fitted on
runs of at least two sources.
"""

from __future__ import annotations

from .formulas import DEFAULT_PARAMS
from ..inputs.devices import GpuSpec

HOPPER = {"attention_efficiency": 0.35, "gemm_efficiency": 0.55, "fp8_gemm_efficiency": 0.6}

# (architecture, segment) or architecture -> CostParams fields
# Fitted values: `python benchmarks/fit_cost_params.py` (coordinate descent over its grids).
ARCHITECTURES: dict[str, dict[str, float | str]] = {
    # Volta: cuBLAS GEMMs on the tensor cores reach up to 83 of the V100's 125 TF/s (Markidis et al.
    # 2018, "NVIDIA Tensor Core Programmability, Performance & Precision", IPDPSW, abstract and
    # sec V). No FlashAttention-2 before compute capability 8.0: `flash` runs the CUTLASS
    # memory-efficient kernel (planner.cost.attention_kernels)
    "volta": {"gemm_efficiency": 83 / 125, "fused_attention": "cutlass"},
    # FlashAttention-2 reaches 35 % of H100's dense peak (Shah et al. 2024, FlashAttention-3,
    # sec 1); large GEMMs 55 % of the datasheet peak, fitted across Sailor's GH200 runs (TF32)
    # and torchtitan's H100 runs (bf16, 500 W parts at their SUSTAINED_CLOCK)
    # fp8 GEMMs (planner.cost.fp8) at 60 % of the fp8 datasheet peak, fitted across NeMo 24.07's
    # DGX H100 runs (Transformer Engine) and torchtitan's H100/H200 runs (torchao float8)
    "hopper": HOPPER,
    # Blackwell: Megatron-Bridge's MoE tables are its only published runs here, one source, too few to
    # fit on (a parameter is fitted across at least two): it takes the nearest fitted architecture's,
    # Hopper's, as the power model does for unmeasured parts (planner.cost.power)
    "blackwell": dict(HOPPER),
    # Turing, datacenter and consumer alike: large GEMMs at this fraction of the datasheet peak
    # of the path they run on (tensor cores in fp16, CUDA cores in fp32) at the sustained clock
    # (SUSTAINED_CLOCK below). Fitted jointly on AMP's T4 runs (fp16 tensor cores) and Sailor's
    # TITAN-RTX/RTX-2080 runs (fp32). FlashAttention-2 needs compute capability 8.0: `flash` runs
    # the CUTLASS memory-efficient kernel, as on Volta (planner.cost.attention_kernels)
    "turing": {"gemm_efficiency": 0.7, "fused_attention": "cutlass"},
}

# GPU -> (sustained clock / the clock its datasheet peak assumes, source). A power-capped card
# cannot hold its boost clock under dense GEMMs; its compute-bound kernels run at this fraction.
SUSTAINED_CLOCK: dict[str, tuple[float, str]] = {
    # 70 W, passively cooled: the datasheet guarantees its 585 MHz base clock, its 65 TF/s
    # tensor peak assumes the 1590 MHz boost (NVIDIA T4 datasheet; Jia et al. 2019, arXiv
    # 1903.07486, study its clock throttling under compute-bound load)
    "T4": (585 / 1590, "NVIDIA T4 datasheet: 585 MHz base, 1590 MHz boost, 70 W"),
    # the 500 W part of torchtitan's benchmarks ("We used the default 500W power limit", benchmarks/
    # llama3_h100_202412_torchtitan.md) against the 700 W the H100 SXM5 draws at its datasheet clock
    # under dense tensor-core work (NVIDIA H100 datasheet: max TDP 700 W): CMOS dynamic power is
    # C V^2 f with the voltage scaled with the clock (Hennessy & Patterson, Computer Architecture,
    # 6th ed., sec 1.5), so a capped part sustains (500/700)^(1/3) of the clock
    "H100-SXM5-96GB": ((500 / 700) ** (1 / 3), "500 W power limit of a 700 W part, cube-root clock law"),
}

COMPUTE_BOUND_FIELDS = ("gemm_efficiency", "attention_efficiency", "fp8_gemm_efficiency")


def architecture_params(gpu: GpuSpec, overrides: dict[str, float] | None = None) -> dict[str, float | str]:
    """The CostParams fields `gpu`'s architecture sets (empty for an unknown architecture),
    with its sustained-clock factor applied to the compute-bound efficiencies. `overrides`
    (a fitter's trial values) are keyed "ARCH.field" or "ARCH-SEGMENT.field"."""
    out: dict[str, float | str] = {}
    for key in (gpu.architecture, f"{gpu.architecture}-{gpu.segment}"):
        out.update(ARCHITECTURES.get(key, {}))
        out.update({k.partition(".")[2]: v for k, v in (overrides or {}).items() if k.partition(".")[0] == key})
    if gpu.name in SUSTAINED_CLOCK:
        clock = SUSTAINED_CLOCK[gpu.name][0]
        for name in COMPUTE_BOUND_FIELDS:
            value = out.get(name, getattr(DEFAULT_PARAMS, name))
            if value is not None:  # fp8_gemm_efficiency None: the (scaled) gemm_efficiency
                out[name] = value * clock
    return out
