"""The record of one runtime: Capability (the plans it runs) and RuntimeSpec (everything else).

Each module of planner.cost.runtimes declares one RuntimeSpec; planner.cost.runtimes.registry
holds them by name. A spec holds what the cost model prices (Runtime), the plans the runtime runs
(Capability, its pipeline schedules included), why it lacks a schedule or torch.compile, the
models it cannot build and which `planner export` target runs its plans; the exporters
themselves are keyed by the spec's name in planner.export.targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

from ..p2p import P2P_MODES
from ...schedules import get_schedule
from .base import Runtime

if TYPE_CHECKING:  # the Model type only
    from ...inputs.model import Model

ANY = "any"


@dataclass(frozen=True)
class Capability:
    runtime: str
    title: str  # its name in messages ("Megatron-LM")
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
    # interleaving needs each replica to run at least pp micro-batches (their groups per virtual stage:
    # planner.schedules.interleaved.microbatch_group)
    interleaved_needs_pp_microbatches: bool = False
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
    # a hybrid model's Mamba-2 layers (planner.inputs.mamba): megatron-core's MambaModel builds them
    mamba_layers: bool = False
    # multi-token-prediction modules (ModelConfig.mtp_layers): megatron-core's MultiTokenPredictionBlock
    mtp_layers: bool = False
    # the MoE token dispatchers it runs (Training.moe_dispatcher, `--moe-dispatcher`; planner.plan.MOE_DISPATCHERS)
    moe_dispatchers: tuple[str, ...] = ("alltoall",)
    # its FSDP all-gathers fp8 weights in fp8 (Training.fp8_all_gather, `--fp8-all-gather`)
    fp8_all_gather: bool = False
    # it keeps the first and last decoder layers in bf16 under quantized training (Training.bf16_layers,
    # `--bf16-layers`: megatron-core's first_last_layers_bf16)
    bf16_layers: bool = False
    # the replicas of one stage may run different TP degrees (Replica.tp: Sailor, FlashFlex)
    per_replica_tp: bool = False
    # a stage's TP ranks may hold uneven shards of heads and FFN columns (Stage.tp_heads, tp_ffn: HAP)
    uneven_tp_shares: bool = False
    # the schedules whose stages it cannot run under torch.compile (Training.compile)
    uncompiled_schedules: tuple[str, ...] = ()
    # the schedules under which it runs expert parallelism (ep > 1) only without recomputation
    ep_without_recompute_schedules: tuple[str, ...] = ()

    @property
    def uniform(self) -> bool:
        """One TP degree and one DP degree for every stage (a rectangular device mesh)."""
        return not self.per_stage_tp or not self.per_stage_dp

    def describe(self) -> str:
        return f"{self.title} ({self.version})"


RECOMPUTE_MODES = ("none", "selective", "full")
# recompute "block" (planner.search.pricing.block): Megatron-LM --recompute-method block --recompute-num-layers k
WITH_BLOCK = RECOMPUTE_MODES + ("block",)


@dataclass(frozen=True)
class RuntimeSpec:
    """Everything the planner knows of one runtime, declared once, in its module."""

    pricing: Runtime  # what the cost model prices: overlaps, kernels, fp8 recipe, TF32 default
    capability: Capability  # the plans it runs, its pipeline schedules (Capability.schedules) among them
    # why it has none of these schedules, by planner.schedules name: `export` refuses them
    schedule_refusals: Mapping[str, str] = field(default_factory=dict, compare=False)
    no_compile: str = ""  # why it cannot run the model under torch.compile ('' when Capability.compile)
    # why it cannot build a model at all, whatever the plan ('' when it can); None: it builds any
    model_problem: Callable[["Model"], str] | None = field(default=None, compare=False)
    # what it runs of a model it builds, where that depends on the model (planner.cost.runtimes.capability)
    model_capability: Callable[[Capability, "Model"], Capability] | None = field(default=None, compare=False)
    # the runtime whose `planner export` target runs its plans exactly ('' none)
    exports_as: str = ""

    def __post_init__(self) -> None:
        if self.capability.runtime != self.pricing.name:
            raise ValueError(f"runtime {self.pricing.name!r} has the capability of {self.capability.runtime!r}")
        runs = set(self.capability.schedules) & set(self.schedule_refusals)
        if runs:
            raise ValueError(f"runtime {self.name!r} both runs and refuses {', '.join(sorted(runs))}")
        self._check_p2p()

    def _check_p2p(self) -> None:
        """Every schedule it runs with pipelining names how its sends run (Runtime.pipeline_p2p); a
        schedule the plan search prices chunk by chunk (interleaved) is not blocking, for the search
        prices a rank's receives with one chunk per rank only (planner.search.dp State.receive)."""
        modes = dict(self.pricing.pipeline_p2p)
        for name in self.capability.schedules if self.capability.pipeline else ():
            mode = modes.get(name)
            if mode not in P2P_MODES:
                raise ValueError(f"runtime {self.name!r} names no pipeline send mode for {name!r} "
                                 f"(one of {', '.join(P2P_MODES)})")
            schedule = get_schedule(name)
            if schedule.searched and schedule.max_virtual_stages != 1 and P2P_MODES[mode].blocking:
                raise ValueError(f"runtime {self.name!r}: the search cannot price blocking sends under {name!r}")

    @property
    def name(self) -> str:
        """Its `--runtime` name (training.runtime)."""
        return self.pricing.name


__all__ = ["ANY", "Capability", "RECOMPUTE_MODES", "RuntimeSpec", "WITH_BLOCK"]
