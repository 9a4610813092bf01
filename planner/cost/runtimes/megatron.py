"""Megatron-LM with megatron-core (2023-): the planner's default runtime.

Overlaps the DP gradient reduce-scatter with the backward (--overlap-grad-reduce) and the TP
input-gradient all-reduce with the weight-gradient GEMMs (Korthikanti et al. 2022, sec 4.2.2);
flash attention via Transformer Engine; fused bias-GeLU/SwiGLU, bias-dropout-add, layer norm
and softmax kernels (the cost model's elementwise traffic counts fused kernels: factor 1);
CUDA-graph-free host overhead is hidden behind the GPU for large layers (0 s).
"""

from .base import Runtime
from .spec import WITH_BLOCK, Capability, RuntimeSpec

SPEC = RuntimeSpec(
    pricing=Runtime(
        name="megatron", title="Megatron-LM (megatron-core)",
        overlap_grad_reduce=True, overlap_tp_comm=True, attention="flash", tf32_matmul=True,
        elementwise_traffic_factor=1.0, layer_overhead_s=0.0,
        # a dropless MoE layer's host time, forward + backward per micro-batch, that its GPU waits for:
        # the token dispatcher copies the per-expert token counts to the host (all-to-all splits,
        # TEGroupedLinear's m_splits), which drains the launch queue, and the router, permutation and
        # per-expert kernels are then launched one by one (Megatron-core moe/token_dispatcher.py; the
        # CUDA-graph scopes moe_router / moe_preprocess exist to remove it). Fitted: the median gap of
        # the Megatron-Bridge Qwen3-30B-A3B runs on H100 (EP 8 and 16) and B200 (EP 8) with the
        # other terms priced, 2.2-2.7 ms per layer and micro-batch on both GPUs
        moe_layer_host_s=2.5e-3,
        # --context-parallel-size with --cp-comm-type p2p (ring) or a2a (Ulysses): megatron-core
        # transformer_config.py cp_comm_type, docs/source/api-guide/context_parallel.rst
        context_parallel=("ring", "all-to-all"),
        # --fp8-format hybrid: Transformer Engine's linears with delayed scaling (megatron/core/
        # extensions/transformer_engine.py: TELinear, TELayerNormColumnParallelLinear)
        fp8_recipe="te-delayed",
        # before sm80 Transformer Engine runs UnfusedDotProductAttention: its get_attention_backend
        # (pytorch/attention/dot_product_attention/utils.py) disables FlashAttention 2 and FusedAttention
        # (cuDNN) "for compute capability < sm80"; megatron-core's local spec is unfused as well
        flash_attention=(("volta", "standard"), ("turing", "standard")),
        # 1F1B: core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving pairs
        # send_forward_recv_backward / send_backward_recv_forward, each one batch_isend_irecv waited at
        # once (p2p_communication.py _communicate, batch_p2p_comm): blocking, both directions together.
        # Interleaved: --overlap-p2p-communication (on unless turned off; training/arguments.py turns it
        # off without virtual stages) posts them ahead and waits after the next chunk's compute
        # off without virtual stages) posts them ahead and waits after the next chunk's compute; the
        # combined 1F1B of --overlap-moe-expert-parallel-comm runs its interleaved sends the same way
        pipeline_p2p=(("1f1b", "exchange"), ("interleaved", "overlapped"), ("combined-1f1b", "overlapped")),
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
               "tensor_parallel/layers.py; Korthikanti et al. 2022"),
    capability=Capability(
        runtime="megatron", title="Megatron-LM", version="Megatron-LM core_r0.13", pipeline=True, tensor_parallel=True,
        # megatron-core models/mamba (MambaModel, hybrid_override_pattern; pretrain_mamba.py)
        mamba_layers=True, mtp_layers=True,
        # --first-last-layers-bf16, --num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16 (transformer_config.py)
        bf16_layers=True,
        # megatron/core/parallel_state.py initialize_model_parallel: one tensor_model_parallel_size
        # and one data-parallel size for the whole world (world = tp * cp * pp * dp)
        per_stage_tp=False, per_stage_dp=False,
        # megatron/core/num_microbatches_calculator.py: every DP rank runs
        # global_batch / (micro_batch * dp) micro-batches
        uneven_shares=False,
        # --pipeline-model-parallel-layout (core/transformer/pipeline_parallel_layer_layout.py,
        # docs "Custom Pipeline Model Parallel Layout"): any decoder layers per (virtual) stage
        layer_split="any",
        # core/pipeline_parallel/schedules.py: forward_backward_pipelining_without_interleaving
        # (1F1B) and _with_interleaving (--num-virtual-stages-per-pipeline-rank / the layout); with
        # --overlap-moe-expert-parallel-comm, combined_1f1b.py's (planner.schedules.combined_1f1b)
        schedules=("1f1b", "interleaved", "combined-1f1b"),
        # megatron-core 0.16.1 schedules.py runs the micro-batches in groups of N in [pp, M] per virtual
        # stage (--microbatch-group-size-per-virtual-pipeline-stage; M % N = 0 or >= pp), so any M >= pp
        # interleaves (planner.schedules.interleaved.microbatch_group); megatron-core <= 0.7 asked M % pp = 0
        interleaved_microbatch_multiple=False, interleaved_needs_pp_microbatches=True,
        # --use-distributed-optimizer shards the optimizer state over DP (ZeRO-1), with or without
        # PP; ZeRO-0 without it. Megatron FSDP (--use-custom-fsdp) is not modelled here.
        zero_stages=(0, 1), zero_stages_with_pp=(0, 1), per_stage_zero=False,
        # --recompute-granularity {full,selective} with --recompute-method/--recompute-num-layers:
        # one setting for every pipeline stage (megatron/training/arguments.py)
        # --recompute-method block --recompute-num-layers k: the first k layers of every pipeline
        # stage's (chunk's) block (core/transformer/transformer_block.py _checkpointed_forward):
        # one k for all stages
        recompute_modes=WITH_BLOCK, per_stage_recompute=False,
        sequence_parallel=True,  # --sequence-parallel (Korthikanti et al. 2022), global
        # rank order "tp-cp-ep-dp-pp" (parallel_state.RankGenerator): pp is outermost, so each
        # stage is a contiguous block of tp * dp ranks and torchrun's --node-rank decides which
        # nodes (GPU types) hold which stage; unlaunched nodes stay idle
        stage_placement=True, recompute_layers="first",
        # --optimizer-cpu-offload (core/optimizer/cpu_offloading HybridDeviceOptimizer), global;
        # arguments.py asserts --use-distributed-optimizer with it
        offload=True, per_stage_offload=False, offload_min_zero=1,
        # core/transformer/attention.py: num_query_groups // tensor-model-parallel size per rank
        kv_heads_over_tp=True,
        # --cpu-offloading --cpu-offloading-num-layers K (model_parallel_config.py cpu_offloading,
        # run by Transformer Engine's cpu_offload.py); megatron-core 0.16.1 transformer_config.py
        # __post_init__ raises with pipeline parallelism, with any recompute granularity, and
        # unless K < num_layers
        activation_offload=True, activation_offload_alone=True,
        # megatron-core 0.16.1 parallel_state.initialize_model_parallel: the expert RankGenerator
        # (tp=etp, ep, dp=edp, cp=1) spans world / pp = tp x cp x dp, so --expert-model-parallel-size
        # runs beside --context-parallel-size (the MoE layers take each cp rank's tokens)
        expert_parallel_with_cp=True,
        # transformer_config.py fp8_recipe 'tensorwise' (TE Float8CurrentScaling), 'delayed',
        # 'mxfp8' (Blackwell), fp4 'e2m1' with fp4_recipe 'nvfp4' (TE >= 2.7; fp4 and fp8 not together)
        dtypes=("fp32", "fp16", "bf16", "fp8", "mxfp8", "nvfp4"),
        # megatron-core 0.16.1 transformer_config.py moe_token_dispatcher_type 'alltoall' or 'flex'
        # (MoEFlexTokenDispatcher, moe_flex_dispatcher_backend 'deepep' or 'hybridep')
        moe_dispatchers=("alltoall", "flex")),
    schedule_refusals={
        "zb-h1": "Megatron-LM runs 1F1B, interleaved 1F1B and its combined 1F1B; ZB-H1 is in the authors' fork only",
        **dict.fromkeys(("zbv", "looped-bfs", "dualpipev"),
                        "Megatron-LM runs 1F1B, interleaved 1F1B and its combined 1F1B only")},
    # megatron/training/arguments.py has no option that compiles the model: its speed comes from its
    # own fused kernels (Transformer Engine, apex), which the cost model already prices fused
    no_compile="Megatron-LM has no torch.compile of the model (its fused kernels are priced already)",
    exports_as="megatron")
