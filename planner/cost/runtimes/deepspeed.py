"""DeepSpeed's pipeline engine over a Megatron-LM model (Megatron-DeepSpeed, DeepSpeedExamples'
Megatron-LM v1.1.5 3D parallelism): AMP, Sailor, BLOOM.

The engine all-reduces gradients after the last micro-batch (no overlap with the backward),
in fp32 under bf16 (its BF16 optimizer keeps fp32 gradients), and runs the TP all-reduces
synchronously; standard attention (no flash kernel in these forks); fp32 GEMMs on TF32 where the container allows (NGC PyTorch images do); a fixed host
time per layer and micro-batch (the engine's instruction interpreter, Python modules and
kernel launches), fitted across AMP, Sailor and BLOOM.
"""

from .base import Runtime

RUNTIME = Runtime(
    name="deepspeed", title="DeepSpeed pipeline engine (Megatron-DeepSpeed)",
    overlap_grad_reduce=False, overlap_tp_comm=False, attention="standard", tf32_matmul=True,
    elementwise_traffic_factor=1.0, layer_overhead_s=1.5e-3,  # fitted: AMP, Sailor (MIT, GH200), BLOOM
    # runtime/pipe/engine.py: under bf16, _exec_reduce_grads calls _bf16_reduce_grads, which
    # all-reduces "the optimizer's FP32 grads"
    bf16_fp32_grad_allreduce=True,
    # DeepSpeed-Ulysses: deepspeed.sequence.layer.DistributedAttention (all-to-all; Jacobs et al. 2023)
    context_parallel=("all-to-all",),
    source="DeepSpeed runtime/pipe/engine.py (reduce_gradients after the schedule); fitted layer overhead")
