"""The Plan type (any plan: uniform or heterogeneous) and its parts, and the uniform plan."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.dims import StageDims, context_parallel_problem as dims_cp_problem
from ..core.errors import BadInput
from ..core.runtime_default import DEFAULT_RUNTIME
from ..inputs.hardware import Cluster
from .. import schedules
from ..inputs.model import RECOMPUTE_MODES, Model

PLAN_FORMAT = "planner.plan/v1"
# a stage's recompute: a layer's (model.RECOMPUTE_MODES) for all its layers, or "block" (Stage.recompute_layers)
STAGE_RECOMPUTE_MODES = RECOMPUTE_MODES + ("block",)
# a training's optimizer (Training.optimizer): planner.cost.states.OPTIMIZERS prices each
OPTIMIZER_NAMES = ("adamw", "adamw-8bit", "adafactor", "adamw-bf16", "sgd", "muon")
# a training's fp8 scaling recipe (Training.fp8_recipe): planner.cost.fp8.RECIPES prices each
FP8_RECIPE_NAMES = ("te-delayed", "te-current", "torchao-tensorwise", "torchao-rowwise")
# an MoE training's token dispatcher (Training.moe_dispatcher): CostParams.moe_dispatcher prices each
MOE_DISPATCHERS = ("alltoall", "flex")
SCHEDULES = schedules.SCHEDULES  # by name; planner.schedules registers them


@dataclass(frozen=True)
class Replica:
    dp_rank: int
    batch_share: int  # samples per step
    ranks: tuple[int, ...]  # the model-parallel group: cp groups of tp ranks, TP innermost (Megatron's tp-cp order)
    # its own tensor-parallel degree where it differs from its stage's (Sailor, Strati et al. SOSP'25, and
    # FlashFlex let the replicas of one stage differ: an A100 replica at TP 1 beside V100 replicas at TP 4);
    # 0: the stage's `tp` (Stage.replica_tp)
    tp: int = 0


@dataclass(frozen=True)
class Stage:
    index: int
    layers: tuple[int, int]  # [first, end) over the model's layer list
    tp: int
    zero: int
    recompute: str
    replicas: tuple[Replica, ...]
    pipeline_rank: int
    sequence_parallel: bool = False
    cp: int = 1  # context parallelism (StageDims.cp)
    cp_kind: str = "ring"
    ep: int = 1  # expert parallelism (StageDims.ep)
    etp: int = 0  # expert tensor parallelism; 0: as tp
    # recompute "block": the first recompute_layers decoder blocks of the stage recompute their
    # whole forward, the rest save their activations (Megatron --recompute-method block)
    recompute_layers: int = 0
    # ZeRO-Offload (Ren et al. 2021): fp32 master weights and optimizer states in host memory,
    # the optimizer step on the CPU
    offload: bool = False
    # activation offload (Megatron --cpu-offloading --cpu-offloading-num-layers K): the saved
    # activations of the stage's first K decoder blocks go to host memory (pricing.activation_offload)
    offload_activations: int = 0
    # a power limit on the stage's GPUs (`nvidia-smi -pl`), W; 0: none (planner.cost.power)
    power_cap_W: float = 0.0
    # uneven tensor-parallel shards (HAP, Zhang et al. EuroSys'24): the query heads and FFN columns
    # TP position i of every replica holds, so a faster GPU of a TP group takes more; empty: even
    tp_heads: tuple[int, ...] = ()
    tp_ffn: tuple[int, ...] = ()

    @property
    def uneven_tp(self) -> bool:
        """Whether the stage's TP ranks hold uneven shards (tp_heads, tp_ffn)."""
        return bool(self.tp_heads)

    def replica_tp(self, replica: Replica) -> int:
        """The tensor-parallel degree `replica` runs at: its own, else the stage's."""
        return replica.tp or self.tp

    @property
    def tp_degrees(self) -> tuple[int, ...]:
        """The distinct TP degrees of the stage's replicas, ascending (one unless per-replica TP)."""
        return tuple(sorted({self.replica_tp(r) for r in self.replicas}))

    @property
    def mixed_tp(self) -> bool:
        """Whether the stage's replicas run at different TP degrees (per-replica TP)."""
        return len(self.tp_degrees) > 1

    def at_tp(self, tp: int) -> "Stage":
        """The stage as one of its replicas at `tp` sees it: its dims at that degree (the cost model
        prices each replica by its own; data parallelism still spans every replica)."""
        if tp == self.tp:
            return self
        return replace(self, tp=tp, sequence_parallel=self.sequence_parallel and tp > 1)  # (no SP without TP)

    def for_replica(self, replica: Replica) -> "Stage":
        """at_tp of `replica`'s degree."""
        return self.at_tp(self.replica_tp(replica))

    def tp_label(self) -> str:
        """The TP degree for people: "4", or per-replica degrees with their replica counts, "1x3,4x24"."""
        if self.uneven_tp:
            return f"{self.tp} ({'/'.join(map(str, self.tp_heads))} heads)"
        if not self.mixed_tp:
            return str(self.tp)
        counts = {tp: sum(1 for r in self.replicas if self.replica_tp(r) == tp) for tp in self.tp_degrees}
        return ",".join(f"{tp}x{n}" for tp, n in counts.items())

    def decoder_blocks(self, model: Model) -> int:
        return sum(1 for layer in model.layers[self.layers[0]:self.layers[1]] if layer.kind == "decoder")

    @property
    def dp(self) -> int:
        return len(self.replicas)

    @property
    def dims(self) -> StageDims:
        return StageDims(self.tp, self.sequence_parallel, self.dp, self.zero, cp=self.cp, cp_kind=self.cp_kind,
                         ep=self.ep, etp=self.etp)


@dataclass(frozen=True)
class Training:
    global_batch: int
    seq_len: int
    dtype: str
    micro_batch: int
    schedule: str = "1f1b"
    virtual_stages: int = 1
    attention: str = "flash"
    runtime: str = DEFAULT_RUNTIME  # the software stack it is priced for (planner.cost.runtimes)
    optimizer: str = "adamw"  # OPTIMIZER_NAMES, priced by planner.cost.states.OPTIMIZERS
    # under fp8: FP8_RECIPE_NAMES, the scaling recipe the runtime runs; "": the runtime's default
    fp8_recipe: str = ""
    # the model runs under torch.compile (`--compile`: torchtitan's compile.enable), priced with
    # TorchInductor's fused elementwise kernels (CostParams.torch_compile); only where the runtime
    # compiles (planner.cost.runtimes.capability: Capability.compile)
    compile: bool = False
    # under fp32: its GEMMs run on TF32 tensor cores where the GPU has them (`--tf32/--no-tf32`;
    # CostParams.tf32_matmul); None: the runtime's default (planner.cost.runtimes, Runtime.tf32_matmul)
    tf32_matmul: bool | None = None
    # an MoE model's expert-parallel token dispatcher (`--moe-dispatcher`; CostParams.moe_dispatcher,
    # planner.cost.moe): "alltoall" (Megatron-core's MoEAlltoAllTokenDispatcher) or "flex" (its
    # MoEFlexTokenDispatcher over DeepEP / HybridEP: a token crosses once per other node holding one of
    # its experts); only where the runtime runs it (Capability.moe_dispatchers)
    moe_dispatcher: str = "alltoall"
    # under fp8: FSDP / ZeRO-3 all-gathers the decoder GEMM weights in fp8, 1 byte each
    # (`--fp8-all-gather`; CostParams.fp8_all_gather; torchtitan's enable_fsdp_float8_all_gather);
    # only with a recipe that can (Fp8Recipe.gathers_fp8) on a runtime whose FSDP does (Capability.fp8_all_gather)
    fp8_all_gather: bool = False
    # under a quantized dtype (fp8, mxfp8, nvfp4): the first and the last decoder layers kept in bf16
    # (`--bf16-layers START,END`; megatron-core first_last_layers_bf16 with num_layers_at_start_in_bf16 and
    # num_layers_at_end_in_bf16); the plan's model marks them (ModelConfig.bf16_layers: inputs.model.with_bf16_layers)
    bf16_layers: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class Plan:
    model: Model
    cluster: Cluster
    training: Training
    stages: tuple[Stage, ...]

    @property
    def pp(self) -> int:
        return 1 + max(s.pipeline_rank for s in self.stages)

    @property
    def num_microbatches(self) -> int:
        """Pipeline length: micro-batches of the busiest replica."""
        return max(r.batch_share for s in self.stages for r in s.replicas) // self.training.micro_batch

    def used_ranks(self) -> list[int]:
        ranks: set[int] = set()
        for stage in self.stages:
            for replica in stage.replicas:
                ranks.update(replica.ranks)
        return sorted(ranks)


def even_split(num_items: int, parts: int) -> list[int]:
    """Sizes of `parts` contiguous chunks as even as possible; extra items go to the middle
    chunks first (the first chunk also carries the embedding, the last the head)."""
    if parts <= 0 or num_items < parts:
        raise BadInput(f"cannot split {num_items} decoder layers into {parts} pipeline chunks",
                       field="--pp")
    sizes = [num_items // parts] * parts
    order = list(range(1, parts - 1)) + [0, parts - 1] if parts > 2 else list(range(parts))
    for i in range(num_items % parts):
        sizes[order[i]] += 1
    return sizes


def end_layer_split(num_decoder: int, parts: int) -> list[int]:
    """Decoder layers per chunk where the embedding and the head each count as one layer
    (Megatron-core's account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split, transformer_config.py): with one chunk per layer the
    first chunk holds only the embedding and the last only the output projection and loss, as
    Llama 3 405B ran (Dubey et al. 2024, arXiv 2407.21783, sec 3.3.2)."""
    sizes = even_split(num_decoder + 2, parts)
    sizes[0] -= 1
    sizes[-1] -= 1
    return sizes


def uniform_plan(model: Model, cluster: Cluster, training: Training, *, tp: int, pp: int, dp: int,
                 zero: int = 0, recompute: str = "none", sequence_parallel: bool = False, cp: int = 1,
                 cp_kind: str = "ring", ep: int = 1, etp: int = 0, recompute_layers: int = 0,
                 offload: bool = False, offload_activations: int = 0) -> Plan:
    """The configuration a Megatron-LM user would launch (formats.md section 4):
    TP x CP x PP x DP ranks laid out TP-innermost, then CP, then DP, then PP (Megatron-core's
    order tp-cp-ep-dp-pp); decoder layers split as evenly as possible over PP x V chunks
    (end_layer_split where the chunks outnumber them by at most two); equal batch shares.
    Expert parallelism `ep` (and expert TP `etp`) is carved from the
    TP x CP x DP ranks (Megatron-core MoE parallel folding: the experts' grid etp-ep-edp). Recompute
    "block" recomputes the first `recompute_layers` decoder blocks of every chunk (all of a
    smaller chunk's). Activation offload moves the first `offload_activations` decoder blocks'
    saved activations of every chunk (all of a smaller chunk's) to host memory."""
    problem = StageDims(tp, dp=dp, cp=cp, ep=ep, etp=etp).expert_problem(
        model.config.num_experts if model.config else 1)
    if problem:
        raise BadInput(problem, field="--ep/--etp")
    if tp * cp * pp * dp != cluster.num_gpus:
        shown = f"tp x cp x pp x dp = {tp}x{cp}x{pp}x{dp}" if cp > 1 else f"tp x pp x dp = {tp}x{pp}x{dp}"
        raise BadInput(f"{shown} = {tp * cp * pp * dp}, but the cluster has "
                       f"{cluster.num_gpus} GPUs", field="--tp/--pp/--dp" + ("/--cp" if cp > 1 else ""))
    cp_problem = context_parallel_problem(model, training, tp, cp, cp_kind)
    if cp_problem:
        raise BadInput(cp_problem, field="--cp")
    if training.global_batch % dp:
        raise BadInput(f"global batch {training.global_batch} does not divide over dp={dp} replicas",
                       field="--global-batch")
    share = training.global_batch // dp
    if share % training.micro_batch:
        raise BadInput(f"micro-batch {training.micro_batch} does not divide a replica's batch of {share}",
                       field="--micro-batch")
    v = training.virtual_stages
    chunks = pp * v
    decoder = [layer for layer in model.layers if layer.kind == "decoder"]
    if not decoder:  # a profile without marked decoder layers: split all layers
        sizes = even_split(model.num_layers, chunks)
        starts = [0]
    elif len(decoder) < chunks <= len(decoder) + 2:
        sizes = end_layer_split(len(decoder), chunks)
        starts = [decoder[0].index]
    else:
        sizes = even_split(len(decoder), chunks)
        starts = [decoder[0].index]
    bounds = []
    position = starts[0]
    for c, size in enumerate(sizes):
        first = 0 if c == 0 else position
        position += size
        end = model.num_layers if c == chunks - 1 else position
        bounds.append((first, end))
    stages = []
    group = tp * cp
    schedule = SCHEDULES.get(training.schedule)
    by_rank: dict[int, tuple[Replica, ...]] = {}  # a rank's V chunks share its replicas
    for c, (first, end) in enumerate(bounds):
        p_rank = schedule.chunk_rank(c, pp, v) if schedule is not None else c % pp
        replicas = by_rank.get(p_rank)
        if replicas is None:
            replicas = by_rank[p_rank] = tuple(
                Replica(d, share, tuple(range(p_rank * group * dp + d * group, p_rank * group * dp + (d + 1) * group)))
                for d in range(dp))
        blocks = sum(1 for layer in model.layers[first:end] if layer.kind == "decoder")
        k = min(recompute_layers, blocks) if recompute == "block" else 0
        stages.append(Stage(c, (first, end), tp, zero, recompute, replicas, p_rank, sequence_parallel, cp, cp_kind,
                            ep, etp, k, offload, min(offload_activations, blocks)))
    return Plan(model, cluster, training, tuple(stages))


def context_parallel_problem(model: Model, training: Training, tp: int, cp: int, cp_kind: str) -> str:
    """Why `cp` ranks of kind `cp_kind` cannot share this training's sequences ('' when they can):
    dims.context_parallel_problem on the model's heads and the training's shape."""
    if cp > 1 and model.config is not None and model.config.mamba is not None:
        return "context parallelism over Mamba layers is not priced (cp must be 1 for this hybrid model)"
    heads = model.config.num_heads if model.config is not None else None
    return dims_cp_problem(training.seq_len, training.attention, heads, tp, cp, cp_kind)
