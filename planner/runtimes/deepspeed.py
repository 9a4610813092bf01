"""DeepSpeed's pipeline engine over a Megatron-LM model (Megatron-DeepSpeed, DeepSpeedExamples'
Megatron-LM v1.1.5 3D parallelism): AMP, Sailor, BLOOM.

The engine all-reduces gradients after the last micro-batch (no overlap with the backward)
and runs the TP all-reduces synchronously; standard attention (no flash kernel in these
forks); fp32 GEMMs on TF32 where the container allows (NGC PyTorch images do); a fixed host
time per layer and micro-batch (the engine's instruction interpreter, Python modules and
kernel launches), fitted across AMP, Sailor and BLOOM.
"""

from .base import Runtime

RUNTIME = Runtime(
    name="deepspeed", title="DeepSpeed pipeline engine (Megatron-DeepSpeed)",
    overlap_grad_reduce=False, overlap_tp_comm=False, attention="standard", tf32_matmul=True,
    elementwise_traffic_factor=1.0, layer_overhead_s=2.0e-3,  # fitted: AMP, Sailor (MIT, GH200), BLOOM
    source="DeepSpeed runtime/pipe/engine.py (reduce_gradients after the schedule); fitted layer overhead")
