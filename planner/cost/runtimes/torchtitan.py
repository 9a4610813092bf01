"""torchtitan (Liang et al. 2024, arXiv 2410.06511): FSDP2 + TP + PP in eager PyTorch.

FSDP2 prefetches the next layer's all-gather and reduce-scatters per layer behind the
compute (only what exceeds it is exposed); TP without async-TP is synchronous; SDPA flash
attention; eager elementwise kernels (RMSNorm, SwiGLU, RoPE unfused) without torch.compile
(its default; with compile.enable the fused ones, CostParams.torch_compile, which `--compile`
(Training.compile) sets, as the fidelity replay does for the published runs that used it);
"selective" recomputation is its per-op policy (every second matmul and the elementwise ops).
"""

from dataclasses import replace

from ...inputs.titan_flavors import titan_family, titan_model_problem
from .base import Runtime
from .spec import WITH_BLOCK, Capability, RuntimeSpec


def _model_capability(cap: Capability, model) -> Capability:
    """torchtitan's qwen3 and gpt_oss packages have no pipelining_fn: one stage."""
    found = titan_family(model.config)
    if found is None or found[0].pipelines:
        return cap
    return replace(cap, pipeline=False, title=f"torchtitan's {found[0].name} model")


SPEC = RuntimeSpec(
    pricing=Runtime(
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
        # torch.distributed.pipelining schedules.py: Schedule1F1B batches a forward's sends with the
        # backward's receives and waits for them before the backward, ScheduleGPipe waits for each
        # forward's receive: blocking. The multi-stage schedules (_PipelineScheduleRuntime) post
        # RECV_F/RECV_B as actions ahead of the compute that waits for them and wait for sends last
        pipeline_p2p=(("1f1b", "exchange"), ("gpipe", "exchange"), ("interleaved", "overlapped"),
                      ("zbv", "overlapped"), ("looped-bfs", "overlapped"), ("dualpipev", "overlapped")),
        source="torchtitan docs (FSDP2, async TP off by default, compile off by default)"),
    capability=Capability(
        runtime="torchtitan", title="torchtitan", version="torchtitan 0.2.2", pipeline=True, tensor_parallel=True,
        # torchtitan/distributed/parallel_dims.py: one DeviceMesh ["pp", "dp_replicate",
        # "dp_shard", "cp", "tp"], the same degrees for every stage
        per_stage_tp=False, per_stage_dp=False, uneven_shares=False,
        # parallelism.module_fqns_per_model_part: any layers per stage (pipeline_parallel.py)
        layer_split="any",
        # parallelism.pipeline_parallel_schedule: 1F1B, Interleaved1F1B, GPipe, ZBVZeroBubble,
        # LoopedBFS and DualPipeV (torch.distributed.pipelining.schedules; torchtitan/distributed/
        # pipeline_parallel.py places "v" stages for ZBVZeroBubble and DualPipeV, 2 per rank, "loop"
        # stages otherwise)
        schedules=("1f1b", "interleaved", "gpipe", "zbv", "looped-bfs", "dualpipev"),
        # torch.distributed.pipelining ScheduleInterleaved1F1B needs n_microbatches divisible by
        # max(1, n_microbatches // pp) (schedules.py); a multiple of pp always is: kept as the rule
        interleaved_microbatch_multiple=True,
        # models/llama3/infra/parallelize.py: data_parallel_shard_degree > 1 is FSDP2 (apply_fsdp),
        # data_parallel_replicate_degree alone is DDP (apply_ddp), which raises "DDP has not
        # supported > 1D parallelism" beside TP/PP/CP (plain_dp_alone). Without PP, torchtitan's
        # train loop reduce-scatters every micro-batch: fsdp_reshard_after_forward "always" is
        # ZeRO-3 (gather before forward and backward); "never" gathers again every micro-batch
        # (reshard after backward), which no ZeRO stage prices, so no ZeRO-1/2. Under PP,
        # torch.distributed.pipelining (stage.py backward_maybe_with_nosync) syncs gradients and
        # reshards only on the last micro-batch: "never" (the PP "default") gathers the weights
        # once and reduce-scatters the accumulated unsharded gradients once per step, with the
        # optimizer states sharded: ZeRO-1's memory and traffic; "always" keeps unsharded
        # gradients beside sharded weights, which no ZeRO stage prices. HSDP (replicate x shard)
        # has no planner form.
        zero_stages=(0, 3), zero_stages_with_pp=(1,), per_stage_zero=False, plain_dp_alone=True,
        # activation_checkpoint.mode {none, selective, full}: one setting for the model; "block" as
        # per-layer selective checkpointing, selective_ac_option "N": every N-th block
        # (distributed/activation_checkpoint.py _apply_layer_sac)
        recompute_modes=WITH_BLOCK, per_stage_recompute=False,
        # its TP plan always shards norms on the sequence (parallelize.py apply_tp SequenceParallel)
        sequence_parallel=True, sequence_parallel_always=True,
        stage_placement=True,  # pp outermost in the mesh: node rank picks nodes
        recompute_layers="every-nth",
        # config/job_config.py training.mixed_precision_param: bfloat16 or float32 (no fp16);
        # fp8: torchao float8 linears (model.converters); distributed/utils.py maybe_enable_amp:
        # with TP or PP mixed precision comes only from fully_shard (dp_shard > 1 or CP), else fp32
        dtypes=("fp32", "bf16", "fp8"), mixed_precision_needs_sharding=True,
        # distributed/parallel_dims.py build_mesh: sparse mesh ["pp", "dp_replicate", "efsdp", "ep",
        # "etp"], efsdp = dp_shard x cp x tp / (etp x ep): expert_parallel_degree beside
        # context_parallel_degree (models/qwen3, deepseek_v3 infra/parallelize.py apply both)
        expert_parallel_with_cp=True,
        # config/job_config.py Compile.enable (default False; components ["model", "loss"]):
        # models/llama3/infra/parallelize.py apply_compile wraps each TransformerBlock in torch.compile
        compile=True,
        # config/job_config.py Float8 enable_fsdp_float8_all_gather (torchao tensorwise scaling only:
        # components/quantization/float8.py refuses it with a recipe_name; docs/float8.md pairs it with
        # precompute_float8_dynamic_scale_for_fsdp)
        fp8_all_gather=True,
        # torch.distributed.pipelining ScheduleZBVZeroBubble and ScheduleDualPipeV raise on stage
        # modules that used torch.compile (_check_torch_compile_compatibility: the split backward)
        uncompiled_schedules=("zbv", "dualpipev"),
        # distributed/dual_pipe_v.py get_dual_pipe_v_flag: "Expert Parallel with DualPipeV and
        # Activation Checkpointing cannot be used together"
        ep_without_recompute_schedules=("dualpipev",)),
    schedule_refusals={
        "zb-h1": "torchtitan's zero-bubble schedules (InterleavedZeroBubble, ZBVZeroBubble) need at least "
                 "2 stages per rank: use zbv",
        "combined-1f1b": "torchtitan overlaps the expert-parallel all-to-all under DualPipeV, not Megatron-core's "
                         "combined 1F1B: use dualpipev"},
    # it builds only its packages' named flavours (planner.inputs.titan_flavors), the check
    # `export --to torchtitan` makes too
    model_problem=titan_model_problem, model_capability=_model_capability,
    exports_as="torchtitan")
