"""torchtitan (Liang et al. 2024, arXiv 2410.06511): FSDP2 + TP + PP in eager PyTorch.

FSDP2 prefetches the next layer's all-gather and reduce-scatters per layer (the cost model
prices ZeRO-3's collectives as exposed); TP without async-TP is synchronous; SDPA flash
attention; eager elementwise kernels (RMSNorm, SwiGLU, RoPE unfused) without torch.compile.
"""

from .base import Runtime

RUNTIME = Runtime(
    name="torchtitan", title="torchtitan (FSDP2)",
    overlap_grad_reduce=True, overlap_tp_comm=False, attention="flash", tf32_matmul=False,
    # eager kernels: 1.5x the fused traffic, fitted jointly on torchtitan's and llm-foundry's runs
    elementwise_traffic_factor=1.5, layer_overhead_s=0.0,
    source="torchtitan docs (FSDP2, async TP off by default, compile off by default)")
