"""PyTorch FSDP1 as llm-foundry/Composer runs it (MosaicML MPT benchmarks).

FULL_SHARD (ZeRO-3) with backward prefetch (its collectives hidden behind the compute where
it is longer); FlashAttention-1; eager elementwise
kernels (low-precision LayerNorm, GeLU) without torch.compile.
"""

from .base import Runtime
from .spec import Capability, RuntimeSpec

SPEC = RuntimeSpec(
    pricing=Runtime(
        name="fsdp1", title="PyTorch FSDP1 (llm-foundry)",
        overlap_grad_reduce=True, overlap_tp_comm=False, attention="flash", tf32_matmul=False,
        # FSDP1 prefetches the next layer's all-gather and reduce-scatters behind the compute
        overlap_zero_comm=0.5,
        # eager kernels: 1.5x the fused traffic, fitted jointly on torchtitan's and llm-foundry's runs
        elementwise_traffic_factor=1.5, layer_overhead_s=0.5e-3,
        # FlashAttention(-1), as llm-foundry v0.0.4 ran it: "25-40% of the theoretical maximum FLOPs/s"
        # on A100 (Dao 2023, FlashAttention-2, abstract); 0.35 taken inside that range
        attention_efficiency=0.35,
        source="llm-foundry scripts/train/benchmarking/README.md; PyTorch FSDP (Zhao et al. 2023)"),
    capability=Capability(
        runtime="fsdp1", title="FSDP1", version="PyTorch FSDP1 (llm-foundry)", pipeline=False, tensor_parallel=False,
        per_stage_tp=False, per_stage_dp=False, uneven_shares=False, layer_split="equal",
        schedules=("1f1b",), interleaved_microbatch_multiple=True,
        # llm-foundry fsdp_config sharding_strategy FULL_SHARD (ZeRO-3) or SHARD_GRAD_OP (ZeRO-2)
        zero_stages=(2, 3), zero_stages_with_pp=(), per_stage_zero=False,
        recompute_modes=("none", "full"), per_stage_recompute=False,  # fsdp_config activation_checkpointing
        sequence_parallel=False, stage_placement=True),
    # llm-foundry's compile_config is not in the v0.0.4 runs the runtime is fitted on, nor in any export
    no_compile="the fsdp1 runtime is priced as llm-foundry's published runs ran, eager, and has no export")
