"""The Runtime type: what a software stack does that the cost model prices.

A runtime is the training software (Megatron-LM, DeepSpeed's pipeline engine, torchtitan,
FSDP1 under llm-foundry, ...), not the hardware: which communication it overlaps, which
attention kernel it runs, whether fp32 GEMMs take the TF32 path, how fused its elementwise
kernels are and its fixed host time per layer and micro-batch. Each module of this package
registers one; every figure names its source or the fit that produced it
(benchmarks/fit_cost_params.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..formulas import CostParams


@dataclass(frozen=True)
class Runtime:
    name: str
    title: str
    overlap_grad_reduce: bool  # DP gradient reduction overlaps the last backward
    overlap_tp_comm: bool  # backward TP all-reduce overlaps the weight-gradient GEMMs
    attention: str  # the attention kernel it runs: "flash" or "standard"
    tf32_matmul: bool  # fp32 GEMMs on TF32 tensor cores (where the GPU has them)
    elementwise_traffic_factor: float  # HBM traffic of its elementwise kernels / fully fused
    layer_overhead_s: float  # host time per layer per micro-batch, forward + backward
    moe_layer_host_s: float = 0.0  # and per routed-expert layer on top (CostParams.moe_layer_host_s)
    source: str = ""
    attention_efficiency: float | None = None  # its attention kernel's fraction of peak; None: the architecture's
    bf16_fp32_grad_allreduce: bool = False  # under bf16 its DP reduction all-reduces fp32 gradients
    selective_recompute: str = "attention"  # what its selective checkpointing recomputes (CostParams)
    overlap_zero_comm: float = 0.0  # share of its ZeRO-3/FSDP collectives its prefetching hides behind compute
    context_parallel: tuple[str, ...] = ()  # the CP kinds it runs (StageDims.cp_kind); () none
    cp_ring: str = "p2p"  # how its ring CP passes K and V (CostParams.cp_ring)
    cross_entropy: str = "fused"  # how its loss computes cross entropy (CostParams.cross_entropy)
    fp32_grad_accumulation: bool = False  # unsharded gradients accumulate in fp32 (CostParams.fp32_grad_accumulation)
    tp_saves_gathered_inputs: bool = False  # (CostParams.tp_saves_gathered_inputs)
    bf16_fp32_grads: bool = False  # under bf16/fp8 fp32 gradient buffers and reduction (CostParams.bf16_fp32_grads)
    # how its pipeline sends run under each schedule it runs, (schedule, pricing.P2P_MODES name)
    # pairs: "exchange", "sequential" or "overlapped" (pricing.p2p_rank_s); every schedule of its
    # Capability.schedules is named (RuntimeSpec checks)
    pipeline_p2p: tuple[tuple[str, str], ...] = ()
    # what `attention: flash` runs under it, (architecture, attention_kernels name) pairs, where that
    # is not the architecture's own kernel (architectures.ARCHITECTURES "fused_attention": FlashAttention-2
    # from Ampere, the CUTLASS memory-efficient kernel of PyTorch SDPA / xFormers on Volta and Turing);
    # "standard": it runs no fused kernel there (attention_kernels.STANDARD)
    flash_attention: tuple[tuple[str, str], ...] = ()

    def p2p_mode(self, schedule: str) -> str:
        """How its pipeline sends run under `schedule` (pipeline_p2p); "exchange" for a schedule it
        does not name (a runtime without pipelining sends nothing)."""
        return dict(self.pipeline_p2p).get(schedule, "exchange")

    def flash_kernel(self, architecture: str, native: str) -> str:
        """The kernel `attention: flash` runs under it on `architecture`, whose own is `native`."""
        return dict(self.flash_attention).get(architecture, native)

    def context_parallel_problem(self, cp: int, cp_kind: str) -> str:
        """Why this runtime cannot run `cp` context-parallel ranks of `cp_kind` ('' when it can)."""
        if cp <= 1 or cp_kind in self.context_parallel:
            return ""
        if not self.context_parallel:
            return f"the {self.name} runtime has no context parallelism (use --runtime megatron or torchtitan)"
        return (f"the {self.name} runtime runs {' and '.join(self.context_parallel)} context parallelism, "
                f"not {cp_kind}")
    fp8_recipe: str = ""  # how it runs fp8 linears (planner.cost.fp8.RECIPES); "": no fp8 path

    def params(self, base: CostParams, architecture: str = "") -> CostParams:
        """`base` (already carrying the GPU `architecture`'s figures) under this software; what its
        `flash` attention runs there (flash_kernel) is CostParams.fused_attention."""
        base = base.with_updates(fused_attention=self.flash_kernel(architecture, base.fused_attention))
        if self.attention_efficiency is not None:
            base = base.with_updates(attention_efficiency=self.attention_efficiency)
        return base.with_updates(overlap_grad_reduce=self.overlap_grad_reduce, overlap_tp_comm=self.overlap_tp_comm,
                                 tf32_matmul=self.tf32_matmul,
                                 elementwise_traffic_factor=self.elementwise_traffic_factor,
                                 layer_overhead_s=self.layer_overhead_s, moe_layer_host_s=self.moe_layer_host_s,
                                 bf16_fp32_grad_allreduce=self.bf16_fp32_grad_allreduce,
                                 selective_recompute=self.selective_recompute, cp_ring=self.cp_ring,
                                 overlap_zero_comm=self.overlap_zero_comm, fp8_recipe=self.fp8_recipe,
                                 cross_entropy=self.cross_entropy,
                                 fp32_grad_accumulation=self.fp32_grad_accumulation,
                                 tp_saves_gathered_inputs=self.tp_saves_gathered_inputs,
                                 bf16_fp32_grads=self.bf16_fp32_grads)
