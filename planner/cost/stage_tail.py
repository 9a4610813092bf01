"""A stage's work after its last micro-batch: the data-parallel gradient reduction the last
backward does not hide, and the optimizer step (on the GPUs, or on the nodes' CPUs under
ZeRO-Offload). Scalars or numpy arrays over a block count, as planner.cost.pricing."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Iterable

from .formulas import CostParams, optimizer_step_s
from .muon import newton_schulz_rate
from .arrays import maximum as _maximum
from .dp_comm import DpLayout
from .stage_memory import held_gradient_bytes, offload_step_s
from .states import get_optimizer, gradient_bytes
from ..core.dims import StageDims
from ..inputs.hardware import GpuSpec, HostSpec
from ..inputs.model import DTYPE_BYTES


@dataclass(frozen=True)
class StageTail:
    grad_reduce_s: float  # the data-parallel gradient reduction not hidden by the last backward
    optimizer_s: float

    @property
    def total_s(self):
        return self.grad_reduce_s + self.optimizer_s


def optimizer_s(weight_params, dims: StageDims, gpu: GpuSpec, p: CostParams, expert_params=0.0,
                optimizer: str = "adamw", ns_flops=0.0, ns_expert_flops=0.0):
    """The optimizer step of one replica: ZeRO-0 steps every replica's full copy; ZeRO-1 and
    above shard the optimizer state, and so its step, over the dp replicas (Rajbhandari et
    al. 2020, sec 5.1; StageDims.state_divisors), the routed experts' `expert_params` (of
    weight_params) over the expert-data-parallel group (StageDims.expert_state_divisors). Muon
    adds its Newton-Schulz matmuls (cost.muon; `ns_flops`, `ns_expert_flops`: the stage's whole
    matrices), each TP rank orthogonalizing whole matrices (megatron-core's default --muon-tp-mode
    duplicated), each EP rank its own experts, sharded over dp as the states are (ZeRO-1 is
    Megatron-LM's layer-wise distributed optimizer under Muon)."""
    ns_s = 0.0
    if get_optimizer(optimizer).orthogonalized:
        ns_s = ((ns_flops / dims.state_divisors[2] + ns_expert_flops / dims.ep / dims.expert_state_divisors[2])
                / newton_schulz_rate(gpu, p.gemm_efficiency))
    if dims.ep == 1 and not dims.etp:
        return optimizer_step_s(weight_params / dims.state_divisors[2], gpu, p, optimizer) + ns_s
    return optimizer_step_s((weight_params - expert_params) / dims.state_divisors[2]
                            + expert_params / dims.expert_state_divisors[2], gpu, p, optimizer) + ns_s


def looped_reduce_s(reduce_s, loops: int, loop_bwd_s):
    """The gradient reduction still running after the last backward when a rank's `loops`
    chunks finish their backwards one loop (`loop_bwd_s`) apart and each reduces its 1/loops
    of the gradients as soon as its loop ends, one reduction after the other: the last to
    finish of (j + 1) reduce/loops - j loop_bwd (Lamy-Poirier 2023, Breadth-First Pipeline
    Parallelism, sec 3.2: the reduction of earlier loops overlaps the remaining backwards)."""
    return reduce(_maximum, ((j + 1) * reduce_s / loops - j * loop_bwd_s for j in range(loops)))


def grad_reduce_s(weight_params, dims: StageDims, dtype: str, layout: DpLayout, p: CostParams, min_bwd_s,
                  loops: int = 1, loop_bwd_s=0.0, expert_params=0.0, expert_layout: DpLayout | None = None):
    """The data-parallel gradient reduction after the last backward, exposed: an all-reduce's
    volume (ZeRO-1: reduce-scatter the gradients, all-gather the weights); ZeRO-2 only
    all-gathers the weights (its reduce-scatters ran per micro-batch); ZeRO-3 needs nothing.
    With `expert_layout` (expert parallelism) the routed experts' `expert_params` (of
    weight_params) reduce over their expert-data-parallel group instead, after the dense ones
    (Megatron-core DistributedDataParallel: the expert parameters in their own buffers, reduced
    over the expert-data-parallel group; StageDims.edp_group).
    With overlap it hides behind the last micro-batch's backward (Megatron, PyTorch DDP).
    A breadth-first schedule's `loops` reduce as each loop ends (looped_reduce_s)."""
    if dims.zero >= 3 or (layout.replicas <= 1 and (expert_layout is None or expert_layout.replicas <= 1)):
        return 0.0
    if expert_layout is None:
        seconds = _reduce_volume_s(weight_params, dims, dtype, layout, p)
    else:
        seconds = (_reduce_volume_s(weight_params - expert_params, dims, dtype, layout, p)
                   + _reduce_volume_s(expert_params, dims, dtype, expert_layout, p))
    if loops > 1:
        seconds = looped_reduce_s(seconds, loops, loop_bwd_s)
    if p.overlap_grad_reduce:
        seconds = _maximum(0.0, seconds - min_bwd_s / loops)
    return seconds


def _reduce_volume_s(weight_params, dims: StageDims, dtype: str, layout: DpLayout, p: CostParams):
    """grad_reduce_s of `weight_params` over `layout`, before overlap."""
    if layout.replicas <= 1:
        return 0.0
    if dtype == "bf16" and p.bf16_fp32_grad_allreduce and dims.zero <= 1:
        # DeepSpeed's pipeline engine under bf16 all-reduces its BF16 optimizer's fp32 gradients
        # (PipelineEngine._bf16_reduce_grads); with ZeRO-1 the optimizer then all-gathers the
        # updated 16-bit weights of its shards (half an all-reduce)
        seconds = layout.allreduce_s(weight_params * 4, p)
        if dims.zero == 1:
            seconds = seconds + layout.allreduce_s(weight_params * DTYPE_BYTES[dtype], p) / 2
    elif held_gradient_bytes(dtype, dims.zero, p) != gradient_bytes(dtype) and (p.bf16_fp32_grads
                                                                                 or p.fp32_grad_accumulation):
        # Megatron's fp32 gradient buffers (CostParams.bf16_fp32_grads): DDP all-reduces them at
        # 4 bytes; its distributed optimizer (ZeRO-1) reduce-scatters them at 4 bytes and
        # all-gathers the updated 16-bit weights (megatron-core param_and_grad_buffer.py
        # start_grad_sync / start_param_sync): each half an all-reduce of its volume. FSDP2 under
        # PP (ZeRO-1) likewise reduce-scatters its fp32-accumulated gradients once per step in
        # reduce_dtype float32 (CostParams.fp32_grad_accumulation) and gathers 16-bit weights
        grads_s = layout.allreduce_s(weight_params * held_gradient_bytes(dtype, dims.zero, p), p)
        seconds = grads_s if dims.zero == 0 else (grads_s + layout.allreduce_s(weight_params * DTYPE_BYTES[dtype], p)) / 2
    else:
        seconds = layout.allreduce_s(weight_params * gradient_bytes(dtype), p)
    if dims.zero == 2:
        seconds = seconds / 2
    return seconds


def stage_tail(weight_params, dims: StageDims, dtype: str, layout: DpLayout, reduce_params: CostParams, min_bwd_s,
               steppers: Iterable[tuple[GpuSpec, CostParams]], loops: int = 1, loop_bwd_s=0.0,
               expert_params=0.0, optimizer: str = "adamw",
               offload_hosts: Iterable[tuple[HostSpec, int]] = (),
               expert_layout: DpLayout | None = None, ns_flops=0.0, ns_expert_flops=0.0) -> StageTail:
    """What a stage adds after its last micro-batch: the gradient reduction (at the
    parameters of its slowest GPU, `reduce_params`, hidden behind its fastest replica's
    backward `min_bwd_s`; breadth-first `loops`; the experts' over `expert_layout` under
    expert parallelism; grad_reduce_s) and the slowest optimizer step of its replicas' GPU
    types (ZeRO-Offload: of its nodes' CPUs, offload_step_s)."""
    reduce_s = grad_reduce_s(weight_params, dims, dtype, layout, reduce_params, min_bwd_s, loops, loop_bwd_s,
                             expert_params, expert_layout)
    offload_hosts = tuple(offload_hosts)
    if offload_hosts:  # the stage's optimizer runs on the CPUs of its nodes (`host`, GPUs per node)
        params = weight_params / dims.state_divisors[2]
        step = reduce(_maximum, (offload_step_s(params, host, per_node, dtype, optimizer)
                                 for host, per_node in offload_hosts))
    else:
        step = reduce(_maximum, (optimizer_s(weight_params, dims, gpu, p, expert_params, optimizer, ns_flops,
                                             ns_expert_flops)
                                 for gpu, p in steppers))
    return StageTail(reduce_s, step)


def per_replica_tp_tail(tails_by_tp: dict[int, StageTail]) -> StageTail:
    """The tail of a stage whose replicas run different TP degrees (per-replica TP), from its tail at each
    degree (stage_tail of that degree's replicas): each slice of the gradients is reduced over the ranks of
    every replica that hold it, so a rank of the replicas of least TP, which hold the most, moves the most
    and sets the reduction's time; the optimizer step is the slowest degree's."""
    least = tails_by_tp[min(tails_by_tp)]
    if len(tails_by_tp) == 1:
        return least
    return StageTail(least.grad_reduce_s, reduce(_maximum, (tail.optimizer_s for tail in tails_by_tp.values())))


def uneven_tp_tail(tails_by_position: list[StageTail]) -> StageTail:
    """The tail of a stage whose TP ranks hold uneven shards (Stage.tp_heads, tp_ffn), from the tail of each
    TP position (stage_tail of its slice on its GPU): every position reduces its slice over its own ring at
    once and steps its own optimizer shard, so the largest reduction and the slowest step set the tail."""
    return StageTail(reduce(_maximum, (tail.grad_reduce_s for tail in tails_by_position)),
                     reduce(_maximum, (tail.optimizer_s for tail in tails_by_position)))
