"""torchtitan (Liang et al. 2024, arXiv 2410.06511): FSDP2 + TP + PP in eager PyTorch.

FSDP2 prefetches the next layer's all-gather and reduce-scatters per layer behind the
compute (only what exceeds it is exposed); TP without async-TP is synchronous; SDPA flash
attention; eager elementwise kernels (RMSNorm, SwiGLU, RoPE unfused) without torch.compile
(its default; with compile.enable the fused ones, CostParams.torch_compile, which `--compile`
(Training.compile) sets, as the fidelity replay does for the published runs that used it);
"selective" recomputation is its per-op policy (every second matmul and the elementwise ops).
"""

from .base import Runtime

RUNTIME = Runtime(
    name="torchtitan", title="torchtitan (FSDP2)",
    overlap_grad_reduce=True, overlap_tp_comm=False, attention="flash", tf32_matmul=False,
    # FSDP2 prefetches the next layer's all-gather and reduce-scatters behind the compute
    overlap_zero_comm=0.5,
    # eager kernels: 1.5x the fused traffic, fitted jointly on torchtitan's and llm-foundry's runs
    elementwise_traffic_factor=1.5, layer_overhead_s=0.5e-3,
    # its selective activation checkpointing is per-op (selective_ac_option = 'op', the
    # train_configs default; the planner's torchtitan export writes it)
    selective_recompute="op",
    # parallelism.context_parallel_degree: ring attention through torch.distributed.tensor.experimental
    # context_parallel, causal load balancing (torchtitan docs/context_parallel)
    context_parallel=("ring",),
    # torch.distributed.tensor.experimental._attention with torchtitan's default
    # context_parallel_rotate_method "allgather" (planner.cost.context_parallel._torch_ring_s)
    cp_ring="torch-allgather",
    # model.converters = ["float8"]: torchao float8 linears, dynamic tensorwise scaling by default
    # (torchtitan/components/quantization/float8.py)
    fp8_recipe="torchao-tensorwise",
    # components/loss.py cross_entropy_loss: torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), ...)
    # in eager PyTorch (the Dec 2024 benchmarks compile only the blocks; the model's output
    # .float() then), under TP through loss_parallel's sharded log_softmax / nll_loss
    cross_entropy="eager",
    # training.mixed_precision_reduce = "float32": FSDP2 accumulates unsharded gradients in fp32
    # between the micro-batches of a pipeline step (its ZeRO-1 form under PP)
    fp32_grad_accumulation=True,
    # parallelize.py apply_tp: SequenceParallel norms, ColwiseParallel wq/wk/wv, w1/w3 and output
    # (input_layouts Shard(1), all-gathered to Replicate inside autograd)
    tp_saves_gathered_inputs=True,
    source="torchtitan docs (FSDP2, async TP off by default, compile off by default)")
