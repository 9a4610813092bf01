"""What each runtime can express, for a pinned version: the plan search's space under `--runtime`.

A plan is runnable by a runtime when `violations(plan, runtime)` is empty. The search
(planner.search.driver) searches exactly the plans a runtime's Capability allows; `any` is
everything the search supports (per-stage TP, DP, ZeRO, recomputation (with "block": per-stage
counts of recomputed blocks) and ZeRO-Offload, uneven batch shares, any contiguous layer ranges,
1F1B and interleaved 1F1B).

Pinned versions and sources (each field's source is in a comment next to it):
  megatron    Megatron-LM core_r0.13 (megatron-core 0.13)
  megatron-2021  Megatron-LM v2.x as of Narayanan et al. 2021 (SC'21)
  torchtitan  torchtitan 0.2.2
  deepspeed   DeepSpeed 0.19.8 pipeline engine under Megatron-DeepSpeed
  fsdp1       PyTorch FSDP1 under llm-foundry (Composer)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.errors import BadInput

if TYPE_CHECKING:  # the Plan type only (planner.plan sits below cost)
    from ...inputs.model import Model
    from ...plan import Plan

ANY = "any"


@dataclass(frozen=True)
class Capability:
    runtime: str
    version: str
    pipeline: bool  # more than one pipeline stage
    tensor_parallel: bool  # tp > 1
    per_stage_tp: bool  # stages may have different TP degrees
    per_stage_dp: bool  # stages may have different numbers of data-parallel replicas
    uneven_shares: bool  # replicas may take different numbers of micro-batches
    layer_split: str  # "any": any contiguous layer ranges; "equal": every stage the same decoder blocks
    schedules: tuple[str, ...]  # pipeline schedules (planner.schedules names)
    # interleaving needs each replica's micro-batches to be a multiple of the pipeline depth
    interleaved_microbatch_multiple: bool
    zero_stages: tuple[int, ...]  # ZeRO/FSDP stages with dp > 1 and one pipeline stage (0: plain DP)
    zero_stages_with_pp: tuple[int, ...]  # ... with more than one pipeline stage
    per_stage_zero: bool  # stages may use different ZeRO stages
    recompute_modes: tuple[str, ...]
    per_stage_recompute: bool  # stages may recompute differently
    sequence_parallel: bool  # Megatron-style sequence parallelism with tp > 1
    # stages on chosen nodes (GPU types), one stage's replicas on several types, nodes left idle
    stage_placement: bool
    # recompute "block" (k of a stage's decoder blocks recompute): "per-stage" any k per stage;
    # "first": one count K for every stage, each recomputing its first min(K, blocks); "every-nth":
    # one N for every stage, each recomputing every N-th block, floor(blocks / N) of them
    recompute_layers: str = "first"
    offload: bool = False  # ZeRO-Offload: optimizer states and their step on the CPU
    per_stage_offload: bool = False  # some stages offload, others not
    offload_min_zero: int = 0  # the ZeRO stage offload needs (1: a distributed optimizer)
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16", "fp8")  # training dtypes (Training.dtype)
    # replicated data parallelism (ZeRO-0 with dp > 1) only when it is the only parallelism
    plain_dp_alone: bool = False
    # bf16/fp8 mixed precision with TP or PP only where the replicas shard (dp > 1) or CP > 1
    mixed_precision_needs_sharding: bool = False
    sequence_parallel_always: bool = False  # TP always shards the sequence (no TP without SP)
    kv_heads_over_tp: bool = False  # the query groups (KV heads) split over TP: kv_heads % tp == 0
    # activation offload (Stage.offload_activations): some decoder blocks' saved activations in host memory
    activation_offload: bool = False
    # ... only as Megatron-core allows it: one pipeline stage, no recomputation, fewer blocks than the model's
    activation_offload_alone: bool = False
    # MoE expert parallelism (ep > 1) beside context parallelism (cp > 1) in one stage, the expert
    # grid folded over tp x cp x dp (core.dims.StageDims.edp)
    expert_parallel_with_cp: bool = False
    # the model under torch.compile (Training.compile, `--compile`): a switch of the runtime's own
    # that the planner prices (CostParams.torch_compile) and exports
    compile: bool = False

    @property
    def uniform(self) -> bool:
        """One TP degree and one DP degree for every stage (a rectangular device mesh)."""
        return not self.per_stage_tp or not self.per_stage_dp

    def describe(self) -> str:
        return CAPABILITY_TITLES.get(self.runtime, self.runtime) + f" ({self.version})"


_ALL_RECOMPUTE = ("none", "selective", "full")
# recompute "block" (planner.search.block): Megatron-LM --recompute-method block --recompute-num-layers k
_WITH_BLOCK = _ALL_RECOMPUTE + ("block",)

CAPABILITIES: dict[str, Capability] = {
    ANY: Capability(
        runtime=ANY, version="the planner's search space", pipeline=True, tensor_parallel=True,
        per_stage_tp=True, per_stage_dp=True, uneven_shares=True, layer_split="any",
        schedules=("1f1b", "interleaved", "gpipe", "zb-h1", "zbv", "looped-bfs"), interleaved_microbatch_multiple=False,
        zero_stages=(0, 1, 2, 3), zero_stages_with_pp=(0, 1, 2, 3),
        per_stage_zero=True, recompute_modes=_WITH_BLOCK, per_stage_recompute=True,
        sequence_parallel=True, stage_placement=True, recompute_layers="per-stage",
        offload=True, per_stage_offload=True, activation_offload=True, expert_parallel_with_cp=True,
        compile=True),
    "megatron": Capability(
        runtime="megatron", version="Megatron-LM core_r0.13", pipeline=True, tensor_parallel=True,
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
        # (1F1B) and _with_interleaving (--num-virtual-stages-per-pipeline-rank / the layout)
        schedules=("1f1b", "interleaved"),
        # get_forward_backward_func raised "number of microbatches is not divisible by
        # pipeline-model-parallel-size when using interleaved schedule" (megatron-core <= 0.7,
        # apex); kept as a conservative requirement for the pinned version
        interleaved_microbatch_multiple=True,
        # --use-distributed-optimizer shards the optimizer state over DP (ZeRO-1), with or without
        # PP; ZeRO-0 without it. Megatron FSDP (--use-custom-fsdp) is not modelled here.
        zero_stages=(0, 1), zero_stages_with_pp=(0, 1), per_stage_zero=False,
        # --recompute-granularity {full,selective} with --recompute-method/--recompute-num-layers:
        # one setting for every pipeline stage (megatron/training/arguments.py)
        # --recompute-method block --recompute-num-layers k: the first k layers of every pipeline
        # stage's (chunk's) block (core/transformer/transformer_block.py _checkpointed_forward):
        # one k for all stages
        recompute_modes=_WITH_BLOCK, per_stage_recompute=False,
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
        expert_parallel_with_cp=True),
    "megatron-2021": Capability(
        runtime="megatron-2021", version="Megatron-LM v2 (SC'21)", pipeline=True, tensor_parallel=True,
        per_stage_tp=False, per_stage_dp=False, uneven_shares=False,  # mpu/initialize.py: one tp, dp
        # megatron/model/transformer.py ParallelTransformer: num_layers // pipeline size per stage
        # (asserted divisible); the planner plans 1F1B only for it
        layer_split="equal", schedules=("1f1b",), interleaved_microbatch_multiple=True,
        zero_stages=(0,), zero_stages_with_pp=(0,), per_stage_zero=False,  # no distributed optimizer yet (2022)
        recompute_modes=("none", "full"), per_stage_recompute=False,  # --checkpoint-activations (global)
        sequence_parallel=False,  # arrived in 2022 (Korthikanti et al.)
        stage_placement=True),  # mpu rank order: pipeline outermost
    "torchtitan": Capability(
        runtime="torchtitan", version="torchtitan 0.2.2", pipeline=True, tensor_parallel=True,
        # torchtitan/distributed/parallel_dims.py: one DeviceMesh ["pp", "dp_replicate",
        # "dp_shard", "cp", "tp"], the same degrees for every stage
        per_stage_tp=False, per_stage_dp=False, uneven_shares=False,
        # parallelism.module_fqns_per_model_part: any layers per stage (pipeline_parallel.py)
        layer_split="any",
        # parallelism.pipeline_parallel_schedule: 1F1B, Interleaved1F1B, GPipe, ZBVZeroBubble and
        # LoopedBFS (torch.distributed.pipelining.schedules; torchtitan/distributed/pipeline_parallel.py
        # places "v" stages for ZBVZeroBubble, asserting 2 per rank, "loop" stages otherwise)
        schedules=("1f1b", "interleaved", "gpipe", "zbv", "looped-bfs"),
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
        recompute_modes=_WITH_BLOCK, per_stage_recompute=False,
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
        compile=True),
    "deepspeed": Capability(
        runtime="deepspeed", version="DeepSpeed 0.19.8 (Megatron-DeepSpeed)", pipeline=True, tensor_parallel=True,
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
    "fsdp1": Capability(
        runtime="fsdp1", version="PyTorch FSDP1 (llm-foundry)", pipeline=False, tensor_parallel=False,
        per_stage_tp=False, per_stage_dp=False, uneven_shares=False, layer_split="equal",
        schedules=("1f1b",), interleaved_microbatch_multiple=True,
        # llm-foundry fsdp_config sharding_strategy FULL_SHARD (ZeRO-3) or SHARD_GRAD_OP (ZeRO-2)
        zero_stages=(2, 3), zero_stages_with_pp=(), per_stage_zero=False,
        recompute_modes=("none", "full"), per_stage_recompute=False,  # fsdp_config activation_checkpointing
        sequence_parallel=False, stage_placement=True),
}

CAPABILITY_TITLES = {ANY: "any runtime", "megatron": "Megatron-LM", "megatron-2021": "Megatron-LM (2021)",
                     "torchtitan": "torchtitan", "deepspeed": "DeepSpeed", "fsdp1": "FSDP1"}


def capability(runtime: str) -> Capability:
    """The Capability of `runtime` (a planner.cost.runtimes name or `any`)."""
    if runtime not in CAPABILITIES:
        raise BadInput(f"unknown runtime {runtime!r}, expected one of {', '.join(CAPABILITIES)}", "--runtime")
    return CAPABILITIES[runtime]


def model_problem(runtime: str, model: "Model") -> str:
    """Why `runtime` cannot build `model` at all, whatever the plan ('' when it can): torchtitan
    builds only its named llama3 flavours (planner.inputs.titan_flavors), the same reason
    `export --to torchtitan` gives."""
    if runtime != "torchtitan":
        return ""
    from ...inputs.titan_flavors import titan_model_problem

    return titan_model_problem(model)


def decoder_blocks(plan: "Plan") -> list[int]:
    """Decoder blocks of each stage (chunk), by stage order."""
    kinds = [layer.kind for layer in plan.model.layers]
    return [sum(1 for k in kinds[s.layers[0]:s.layers[1]] if k == "decoder") for s in plan.stages]


def violations(plan: "Plan", runtime: str) -> tuple[str, ...]:
    """Why `runtime` cannot run `plan`, one human reason each; () when it can."""
    cap = capability(runtime)
    name = cap.describe()
    out: list[str] = []
    stages = plan.stages
    pp = plan.pp
    if pp > 1 and not cap.pipeline:
        out.append(f"{name} has no pipeline parallelism (the plan has {pp} stages)")
    tps = sorted({s.tp for s in stages})
    if not cap.tensor_parallel and tps != [1]:
        out.append(f"{name} has no tensor parallelism (the plan uses tp {tps[-1]})")
    if not cap.per_stage_tp and len(tps) > 1:
        out.append(f"{name} runs one TP degree in every stage (the plan has {', '.join(map(str, tps))})")
    cps = sorted({s.cp for s in stages})
    if not cap.per_stage_tp and len(cps) > 1:  # one model-parallel grid (tp-cp-ep-dp-pp) for all stages
        out.append(f"{name} runs one CP degree in every stage (the plan has {', '.join(map(str, cps))})")
    eps = sorted({s.ep for s in stages})
    if not cap.per_stage_tp and len(eps) > 1:
        out.append(f"{name} runs one EP degree in every stage (the plan has {', '.join(map(str, eps))})")
    both = next((s for s in stages if s.ep > 1 and s.cp > 1), None)
    if both is not None and not cap.expert_parallel_with_cp:
        out.append(f"{name} has no expert parallelism beside context parallelism (the plan has ep {both.ep} "
                   f"with cp {both.cp})")
    dps = sorted({s.dp for s in stages})
    if not cap.per_stage_dp and len(dps) > 1:
        out.append(f"{name} runs one DP degree in every stage (the plan has {', '.join(map(str, dps))})")
    shares = sorted({r.batch_share for s in stages for r in s.replicas})
    if not cap.uneven_shares and len(shares) > 1:
        out.append(f"{name} gives every replica the same batch share (the plan has "
                   f"{', '.join(map(str, shares))} samples)")
    if cap.layer_split == "equal" and len(set(decoder_blocks(plan))) > 1:
        out.append(f"{name} splits the decoder blocks evenly over the stages (the plan has "
                   f"{', '.join(map(str, decoder_blocks(plan)))})")
    if pp > 1 and plan.training.schedule not in cap.schedules:
        out.append(f"{name} has no {plan.training.schedule} schedule (it has {', '.join(cap.schedules)})")
    if pp > 1 and plan.training.virtual_stages > 1 and cap.interleaved_microbatch_multiple \
            and plan.num_microbatches % pp:
        out.append(f"{name} interleaves only when each replica's micro-batches ({plan.num_microbatches}) are a "
                   f"multiple of the pipeline depth ({pp})")
    allowed_zero = cap.zero_stages_with_pp if pp > 1 else cap.zero_stages
    zeros = sorted({s.zero for s in stages if s.dp > 1})
    bad_zero = [z for z in zeros if z not in allowed_zero]
    if bad_zero:
        with_pp = " with pipeline parallelism" if pp > 1 else ""
        out.append(f"{name} cannot run ZeRO-{bad_zero[0]}{with_pp} "
                   f"(it has {', '.join(f'ZeRO-{z}' for z in allowed_zero) or 'none'})")
    if not cap.per_stage_zero and len(zeros) > 1:
        out.append(f"{name} runs one ZeRO stage in every stage (the plan has {', '.join(map(str, zeros))})")
    modes = sorted({s.recompute for s in stages})
    bad_modes = [m for m in modes if m not in cap.recompute_modes]
    if bad_modes:
        out.append(f"{name} has no {bad_modes[0]} recomputation (it has {', '.join(cap.recompute_modes)})")
    if not cap.per_stage_recompute and len(modes) > 1:
        out.append(f"{name} recomputes alike in every stage (the plan has {', '.join(modes)})")
    block = [(s.recompute_layers, n) for s, n in zip(stages, decoder_blocks(plan)) if s.recompute == "block"]
    if block and not runs_block_counts(block, cap.recompute_layers):
        rule = "every N-th block, one N" if cap.recompute_layers == "every-nth" else "the same number of blocks"
        out.append(f"{name} recomputes {rule} in every stage (the plan recomputes "
                   f"{', '.join(f'{k} of {n}' for k, n in block)})")
    offloads = sorted({s.offload for s in stages})
    if True in offloads and not cap.offload:
        out.append(f"{name} has no ZeRO-Offload of the optimizer alone")
    elif len(offloads) > 1 and not cap.per_stage_offload:
        out.append(f"{name} offloads the optimizer of every stage or of none (the plan offloads some)")
    elif True in offloads and any(s.zero < cap.offload_min_zero for s in stages if s.dp > 1):
        out.append(f"{name} offloads the optimizer only with ZeRO-{cap.offload_min_zero} or above "
                   "(a distributed optimizer)")
    dtype = plan.training.dtype
    if dtype not in cap.dtypes:
        out.append(f"{name} has no {dtype} training (it has {', '.join(cap.dtypes)})")
    if cap.plain_dp_alone and any(s.zero == 0 and s.dp > 1 for s in stages) \
            and (pp > 1 or tps[-1] > 1 or cps[-1] > 1 or eps[-1] > 1):
        out.append(f"{name} replicates data-parallel ranks (ZeRO-0) only when data parallelism is the only "
                   f"parallelism (the plan has pp {pp}, tp {tps[-1]}" + (f", cp {cps[-1]}" if cps[-1] > 1 else "") + ")")
    if cap.mixed_precision_needs_sharding and dtype != "fp32" and (pp > 1 or tps[-1] > 1) \
            and dps[-1] == 1 and cps[-1] == 1:
        out.append(f"{name} trains in {dtype} with TP or PP only where FSDP shards over dp > 1 or CP > 1 "
                   "(the plan has dp 1: it would train in fp32)")
    if plan.training.compile and not cap.compile:
        out.append(f"{name} does not run the model under torch.compile (training.compile)")
    c = plan.model.config
    if cap.kv_heads_over_tp and c is not None and c.num_kv_heads % tps[-1]:
        out.append(f"{name} splits the {c.num_kv_heads} query groups over TP (the plan has tp {tps[-1]})")
    out += activation_offload_violations(plan, cap)
    sps = {s.sequence_parallel for s in stages if s.tp > 1}
    if cap.sequence_parallel_always and False in sps:
        out.append(f"{name}'s tensor parallelism always shards the sequence (the plan has TP without "
                   "sequence parallelism)")
    if True in sps and not cap.sequence_parallel:
        out.append(f"{name} has no Megatron-style sequence parallelism")
    elif len(sps) > 1 and not cap.per_stage_tp:
        out.append(f"{name} turns sequence parallelism on or off for every stage at once")
    return tuple(out)


def activation_offload_violations(plan: "Plan", cap: Capability) -> list[str]:
    """Why `cap`'s runtime cannot offload the plan's activations as planned (Capability.activation_offload)."""
    name = cap.describe()
    counts = [(s.offload_activations, n) for s, n in zip(plan.stages, decoder_blocks(plan))]
    if not any(k for k, _ in counts):
        return []
    if not cap.activation_offload:
        return [f"{name} has no activation offload to host memory"]
    if not cap.activation_offload_alone:
        return []
    out = []
    if len(plan.stages) > 1:
        out.append(f"{name} offloads activations only without pipeline parallelism (the plan has "
                   f"{len(plan.stages)} stages)")
    recomputing = sorted({s.recompute for s in plan.stages} - {"none"})
    if recomputing:
        out.append(f"{name} offloads activations only without recomputation (the plan recomputes {recomputing[0]})")
    if any(k >= n for k, n in counts):
        out.append(f"{name} offloads fewer blocks than the stage holds (the plan offloads "
                   f"{', '.join(f'{k} of {n}' for k, n in counts)})")
    return out


def one_block_count(block: list[tuple[int, int]]) -> bool:
    """Whether one count K of recomputed blocks (each stage the first min(K, its blocks)) gives
    every stage's (recomputed, blocks) in `block`: Megatron's --recompute-num-layers."""
    most = max(k for k, _ in block)
    return all(k == min(most, n) for k, n in block)


def every_nth(block: list[tuple[int, int]]) -> int | None:
    """The N with which recomputing every N-th block gives every stage's (recomputed, blocks)
    in `block` (floor(blocks / N) each; torchtitan's per-layer selective checkpointing), else None."""
    counted = [(k, n) for k, n in block if k > 0]
    if not counted:
        return None
    freq = min(n // k for k, n in counted)
    return freq if all(n // freq == k for k, n in block) else None


def runs_block_counts(block: list[tuple[int, int]], rule: str) -> bool:
    """Whether (recomputed, blocks) per "block" stage follow Capability.recompute_layers `rule`."""
    if rule == "per-stage":
        return True
    return one_block_count(block) if rule == "first" else every_nth(block) is not None


__all__ = ["ANY", "CAPABILITIES", "Capability", "capability", "decoder_blocks", "every_nth", "one_block_count",
           "runs_block_counts", "violations"]
