"""One stage replica's memory: its peak on the GPU (replica_memory: model states under ZeRO,
saved activations of the micro-batches in flight, working sets, the reserve) and ZeRO-Offload's
host side (its states, its fit, its optimizer step on the CPU). Scalars or numpy arrays over a
block count, as planner.cost.pricing."""

from __future__ import annotations

import numpy as np

from .formulas import CostParams
from .offload import NO_ACTIVATION_OFFLOAD, ActivationOffload, offloaded_activation_bytes
from .pricing import SpanPrice
from .states import WEIGHT_BYTES_FP32_TRAINING, MemoryBreakdown, get_optimizer, gradient_bytes, model_state_bytes
from ..core.dims import StageDims, zero_divisors
from ..inputs.devices import QUANTIZED_FORMATS
from ..inputs.hardware import HostSpec
from ..inputs.model import DTYPE_BYTES


def zero3_gather_bytes(layer_params, dtype: str):
    """The 16-bit weights ZeRO-3 / FSDP holds all-gathered beside its shards: the layer running
    and the next one, which its prefetching gathers meanwhile (Zhao et al. 2023, PyTorch FSDP,
    sec 3.3-3.4: forward and backward prefetch; FSDP2's root and torchtitan's [norm, output] group
    also stay gathered from their forward to their backward, torch fully_shard _fsdp_state.py,
    torchtitan parallelize.py apply_fsdp): at most two of the largest layer's."""
    return 2 * layer_params * DTYPE_BYTES[dtype]


def held_gradient_bytes(dtype: str, zero: int, p: CostParams) -> int:
    """Bytes of one gradient element the runtime holds and reduces below ZeRO-2: 4 where its
    unsharded gradients accumulate in fp32 (CostParams.fp32_grad_accumulation, any 16-bit dtype)
    or its bf16 / fp8 gradient buffers are fp32 (CostParams.bf16_fp32_grads, Megatron-LM);
    otherwise the dtype's (gradient_bytes)."""
    if zero <= 1 and ((p.fp32_grad_accumulation and dtype != "fp32")
                      or (p.bf16_fp32_grads and dtype in ("bf16", *QUANTIZED_FORMATS))):
        return WEIGHT_BYTES_FP32_TRAINING
    return gradient_bytes(dtype)


def held_microbatches(schedule, k: int, pp: int, v: int, n_micro: int, chunk_act_bytes, act_bytes: float
                       ) -> tuple[float, float]:
    """What rank k's replica of `n_micro` micro-batches holds at its peak: the micro-batches of
    activations in flight (Schedule.in_flight_microbatches; where the schedule counts them per
    chunk, Schedule.chunk_in_flight, those counts weighed by each chunk's activations
    `chunk_act_bytes` over the rank's `act_bytes`) and the deferred W passes
    (Schedule.deferred_w_microbatches): replica_memory's `in_flight` and `deferred`."""
    in_flight = schedule.in_flight_microbatches(k, pp, v, n_micro)
    by_chunk = schedule.chunk_in_flight(k, pp, v, n_micro)
    if by_chunk is not None and act_bytes > 0:
        in_flight = sum(a * n for a, n in zip(chunk_act_bytes, by_chunk)) / act_bytes
    return in_flight, schedule.deferred_w_microbatches(k, pp, v, n_micro)


def replica_memory(span: SpanPrice, in_flight, dtype: str, dims: StageDims, p: CostParams,
                   deferred=0.0, optimizer: str = "adamw", offload: bool = False,
                   act_offload: ActivationOffload = NO_ACTIVATION_OFFLOAD) -> MemoryBreakdown:
    """A replica's peak memory holding `span`: its model states (ZeRO-sharded over the stage's
    dp replicas, cost.model_state_bytes; the routed experts' over the expert-data-parallel
    group, StageDims.edp; with `offload` the optimizer states live in host memory), the saved
    activations of `in_flight` micro-batches (Schedule.in_flight_microbatches), the weight-GEMM
    inputs of `deferred` micro-batches whose W pass waits (Schedule.deferred_w_microbatches),
    full recomputation's working set, and the reserve. With `act_offload` the offloaded blocks'
    activations of every micro-batch in flight are in host memory but for its double buffer."""
    # what an orthogonalized optimizer (Muon) leaves to AdamW
    adam = dims.weight_share(span.adam_params) if get_optimizer(optimizer).orthogonalized else 0.0
    if dims.ep == 1 and not dims.etp:  # no expert grid: one sharding for all
        weights, grads, states = model_state_bytes(span.weight_params, dtype, dims.zero, dims.grad_reduce_ranks,
                                                   optimizer, adam)
    else:
        experts = span.expert_params
        dense = model_state_bytes(span.weight_params - experts, dtype, dims.zero, dims.grad_reduce_ranks, optimizer,
                                  adam)
        expert = model_state_bytes(experts, dtype, dims.zero, dims.edp, optimizer)
        weights, grads, states = (d + e for d, e in zip(dense, expert))
    grads = grads * held_gradient_bytes(dtype, dims.zero, p) / gradient_bytes(dtype)  # the runtime's width
    # the runtime's fp8 weight copies (fp8.weight_cache_bytes); where they are the parameters (its
    # optimizer sharded, ZeRO >= 1) they replace the 16-bit weights (fp8.fp8_params_saving), and
    # ZeRO-3 shards both alike
    fp8_weights = span.fp8_cache_bytes - (span.fp8_params_saving if dims.zero >= 1 else 0.0)
    weights = weights + fp8_weights / zero_divisors(dims.zero, dims.grad_reduce_ranks)[0]
    if dims.zero >= 3 and dims.grad_reduce_ranks > 1:
        weights = weights + zero3_gather_bytes(span.largest_layer_weight_params, dtype)
    if offload:
        states = 0.0  # in host memory (ZeRO-Offload, Ren et al. 2021, sec 4.1): offloaded_state_bytes
    activations = span.act_bytes * in_flight + span.transient_bytes
    if act_offload.host_bytes:  # in host memory: offloaded_activation_bytes; on the GPU: the double buffer
        activations = activations - offloaded_activation_bytes(act_offload, in_flight) + act_offload.buffer_bytes
    if np.ndim(deferred) or deferred:
        activations = activations + span.wgrad_act_bytes * deferred
    return MemoryBreakdown(weights, grads, states, activations, p.reserved_memory_bytes)


def offloaded_state_bytes(weight_params, dims: StageDims, dtype: str, optimizer: str):
    """What one GPU's ZeRO-Offload keeps in host memory: its (ZeRO-sharded) fp32 master weights
    and optimizer states (model_state_bytes' optimizer part; Ren et al. 2021, sec 4.1)."""
    return model_state_bytes(weight_params, dtype, dims.zero, dims.grad_reduce_ranks, optimizer)[2]


def offload_fits(weight_params, dims: StageDims, dtype: str, optimizer: str, host: HostSpec, gpus_per_node: int):
    """Whether one GPU's offloaded states fit its share of its node's host memory."""
    return offloaded_state_bytes(weight_params, dims, dtype, optimizer) <= host.memory_bytes / gpus_per_node


def offload_step_s(params_on_device, host: HostSpec, gpus_per_node: int, dtype: str, optimizer: str):
    """ZeRO-Offload's optimizer step for one GPU (Ren et al. 2021, sec 4.1-4.2): its 16-bit
    gradients down over PCIe, the step on the CPU streaming the states in host memory at the
    GPU's share of the node's memory bandwidth (the optimizer's traffic, Optimizer), the updated
    16-bit weights up; counted after the last backward, none of it overlapped (no delayed
    parameter update, sec 4.3)."""
    pcie_s = params_on_device * (gradient_bytes(dtype) + DTYPE_BYTES[dtype]) / host.pcie_bytes_per_s
    cpu_s = (params_on_device * get_optimizer(optimizer).step_traffic_bytes
             / (host.memory_bandwidth_bytes_per_s / gpus_per_node))
    return pcie_s + cpu_s
