"""Megatron-LM as of SC'21 (Narayanan et al. 2021): the software of the 20 reference runs.

It reduced gradients after the backward pass and ran the TP all-reduces synchronously (both
overlaps arrived in 2022-23); standard attention with the fused scale-mask-softmax kernel;
fused bias-GeLU and bias-dropout-add (factor 1).
"""

from .base import Runtime

RUNTIME = Runtime(
    name="megatron-2021", title="Megatron-LM (SC'21)",
    overlap_grad_reduce=False, overlap_tp_comm=False, attention="standard", tf32_matmul=True,
    elementwise_traffic_factor=1.0, layer_overhead_s=0.0,
    source="Narayanan et al. 2021 (arXiv 2104.04473), Megatron-LM v2.x")
