"""DeepSpeed's pipeline engine over a Megatron-LM model (Megatron-DeepSpeed, DeepSpeedExamples'
Megatron-LM v1.1.5 3D parallelism): AMP, Sailor, BLOOM.

The engine all-reduces gradients after the last micro-batch (no overlap with the backward),
in fp32 under bf16 (its BF16 optimizer keeps fp32 gradients), and runs the TP all-reduces
synchronously; standard attention (no flash kernel in these forks); fp32 GEMMs on TF32 where the container allows (NGC PyTorch images do); a fixed host
time per layer and micro-batch (the engine's instruction interpreter, Python modules and
kernel launches), fitted across AMP, Sailor and BLOOM.
"""

from .base import Runtime
from .spec import Capability, RuntimeSpec

SPEC = RuntimeSpec(
    pricing=Runtime(
        name="deepspeed", title="DeepSpeed pipeline engine (Megatron-DeepSpeed)",
        overlap_grad_reduce=False, overlap_tp_comm=False, attention="standard", tf32_matmul=True,
        # fitted: AMP, Sailor (MIT, GH200), BLOOM (fit_cost_params' loss over the four, with fp32
        # CUDA-core GEMMs at their own knee, formulas.gemm_half_dim, the engine's sequential sends,
        # the quad-GH200 node's per-GPU NVLink and Sailor's MIT cards as RTX 2080 Ti)
        elementwise_traffic_factor=1.0, layer_overhead_s=2.5e-3,
        # runtime/pipe/engine.py: under bf16, _exec_reduce_grads calls _bf16_reduce_grads, which
        # all-reduces "the optimizer's FP32 grads"
        bf16_fp32_grad_allreduce=True,
        # DeepSpeed-Ulysses: deepspeed.sequence.layer.DistributedAttention (all-to-all; Jacobs et al. 2023)
        context_parallel=("all-to-all",),
        # Megatron-DeepSpeed megatron/model/transformer.py ParallelAttention: flash kernels only under
        # --use-flash-attn-v1/-v2/-triton (off by default; flash-attn 2 needs sm80), else CoreAttention
        flash_attention=(("volta", "standard"), ("turing", "standard")),
        # runtime/pipe/engine.py _exec_send_activations / _exec_recv_grads (and the reverse pair) call
        # p2p.send / p2p.recv without async_op (runtime/pipe/p2p.py: dist.send / dist.recv or a
        # two-rank broadcast), one TrainSchedule instruction after another: each message blocks both ends
        pipeline_p2p=(("1f1b", "sequential"),),
        source="DeepSpeed runtime/pipe/engine.py (reduce_gradients after the schedule); fitted layer overhead"),
    capability=Capability(
        runtime="deepspeed", title="DeepSpeed", version="DeepSpeed 0.19.8 (Megatron-DeepSpeed)",
        pipeline=True, tensor_parallel=True,
        # runtime/pipe/topology.py PipeModelDataParallelTopology: one (pipe, data, model) grid
        per_stage_tp=False, per_stage_dp=False, uneven_shares=False,
        # runtime/pipe/module.py PipelineModule._partition_layers: "uniform" (partition_uniform:
        # equal layer-list items +-1, the first parts one more), "parameters" and "type:regex"
        # (partition_balanced over parameter counts / matching layers), no explicit boundaries.
        # The export writes "type:transformer" (Megatron-DeepSpeed's GPTModelPipe default), which
        # gives every stage the same decoder blocks when the stages divide them, the embedding in
        # the first and the head in the last: the only split the planner plans for it
        layer_split="equal",
        schedules=("1f1b",), interleaved_microbatch_multiple=True,  # runtime/pipe/schedule.py TrainSchedule
        # runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
        zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1), per_stage_zero=False,
        recompute_modes=("none", "full"), per_stage_recompute=False,  # activation_checkpoint_interval, global
        sequence_parallel=False,  # Megatron-DeepSpeed's SP is Ulysses, not Megatron-style SP
        stage_placement=True,  # pipe axis outermost: hostfile order picks nodes
        # zero_optimization.offload_optimizer {device: cpu} (runtime/zero/offload_config.py), for the
        # whole engine, with ZeRO >= 1
        offload=True, per_stage_offload=False, offload_min_zero=1,
        # ds_config fp16 / bf16 sections or fp32; no fp8 path in the pipeline engine
        dtypes=("fp32", "fp16", "bf16"),
        # Megatron-DeepSpeed's ParallelAttention divides the query groups over TP like Megatron's
        kv_heads_over_tp=True),
    schedule_refusals=dict.fromkeys(("zb-h1", "zbv", "looped-bfs", "dualpipev", "combined-1f1b"),
                                    "DeepSpeed's pipeline engine runs its own 1F1B (TrainSchedule)"),
    # engine.compile() is a call of the training script; Megatron-DeepSpeed's pretrain_gpt makes none
    no_compile="Megatron-DeepSpeed's training script does not compile the model (DeepSpeed's "
               "engine.compile() is a call no config key makes)",
    exports_as="deepspeed")
