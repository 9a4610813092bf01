"""PyTorch FSDP1 as llm-foundry/Composer runs it (MosaicML MPT benchmarks).

FULL_SHARD (ZeRO-3) with backward prefetch; flash attention (triton/FA2); eager elementwise
kernels (low-precision LayerNorm, GeLU) without torch.compile.
"""

from .base import Runtime

RUNTIME = Runtime(
    name="fsdp1", title="PyTorch FSDP1 (llm-foundry)",
    overlap_grad_reduce=True, overlap_tp_comm=False, attention="flash", tf32_matmul=False,
    # eager kernels: 2x the fused traffic, fitted jointly on torchtitan's and llm-foundry's runs
    elementwise_traffic_factor=2.0, layer_overhead_s=0.0,
    source="llm-foundry scripts/train/benchmarking/README.md; PyTorch FSDP (Zhao et al. 2023)")
