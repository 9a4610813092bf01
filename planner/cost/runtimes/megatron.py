"""Megatron-LM with megatron-core (2023-): the planner's default runtime.

Overlaps the DP gradient reduce-scatter with the backward (--overlap-grad-reduce) and the TP
input-gradient all-reduce with the weight-gradient GEMMs (Korthikanti et al. 2022, sec 4.2.2);
flash attention via Transformer Engine; fused bias-GeLU/SwiGLU, bias-dropout-add, layer norm
and softmax kernels (the cost model's elementwise traffic counts fused kernels: factor 1);
CUDA-graph-free host overhead is hidden behind the GPU for large layers (0 s).
"""

from .base import Runtime

RUNTIME = Runtime(
    name="megatron", title="Megatron-LM (megatron-core)",
    overlap_grad_reduce=True, overlap_tp_comm=True, attention="flash", tf32_matmul=True,
    elementwise_traffic_factor=1.0, layer_overhead_s=0.0,
    # --context-parallel-size with --cp-comm-type p2p (ring) or a2a (Ulysses): megatron-core
    # transformer_config.py cp_comm_type, docs/source/api-guide/context_parallel.rst
    context_parallel=("ring", "all-to-all"),
    # --fp8-format hybrid: Transformer Engine's linears with delayed scaling (megatron/core/
    # extensions/transformer_engine.py: TELinear, TELayerNormColumnParallelLinear)
    fp8_recipe="te-delayed",
    # megatron/training/arguments.py validate_args: `if args.bf16: ... if not
    # args.accumulate_allreduce_grads_in_fp32: args.accumulate_allreduce_grads_in_fp32 = True`
    # ("bfloat16 requires gradient accumulation and all-reduce to be done in fp32"; fp8 runs with
    # --bf16); megatron-core's DistributedDataParallel then keeps fp32 gradient buffers
    # (distributed_data_parallel.py: grad_dtype = torch.float if grad_reduce_in_fp32)
    bf16_fp32_grads=True,
    # the DP overlap is --overlap-grad-reduce (with the distributed optimizer --overlap-param-gather);
    # the TP overlap is megatron-core's default asynchronous input-gradient all-reduce / reduce-scatter
    # under the weight-gradient GEMM (tensor_parallel/layers.py, CUDA_DEVICE_MAX_CONNECTIONS=1), not
    # --tp-comm-overlap (Transformer Engine userbuffers, which also hide the forward's collectives)
    source="Megatron-LM arguments --overlap-grad-reduce, --overlap-param-gather; megatron-core "
           "tensor_parallel/layers.py; Korthikanti et al. 2022")
