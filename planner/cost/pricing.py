"""The price of one stage replica, each formula written once (one source named per formula).

Every function here is plain arithmetic that takes Python numbers or numpy arrays over a
decoder-block count n, and gives the same figures either way: planner.cost.evaluate and
planner.report.show price a plan's replicas with scalars (each layer of a chunk counted once),
planner.search.stages and planner.search.interleave price a stage configuration for every block count
at once (`n = np.arange(L + 1)` decoder blocks, plus 0 or 1 embedding and head).

Per micro-batch on one replica (one tensor-parallel group):
  span_price   forward, backward (with recomputation) and TP communication of a span of
               layers, with its weights and saved activations: count x layer, summed;
  zero_comm    the ZeRO-2/3 collectives after every micro-batch;
  p2p_s        the send across a stage boundary (boundary_bytes of activations);
  ChunkTime    one chunk's (stage's) micro-batch: the three above together.
Per replica:   replica_memory, the peak memory with some micro-batches in flight.
Per stage, after its last micro-batch: stage_tail, the exposed data-parallel gradient
reduction and the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache, reduce
from typing import Iterable

import numpy as np

from .formulas import (CostParams, MemoryBreakdown, gradient_bytes, hierarchical_allreduce_s, layer_time, link_efficiency,
                       get_optimizer, model_state_bytes, optimizer_step_s)
from ..core.dims import StageDims
from ..inputs.hardware import GpuSpec, HostSpec, Link
from ..inputs.linkcurve import collective_s
from ..inputs.model import DTYPE_BYTES, Layer
from .sharding import Sharding


def _where(cond, a, b):
    """np.where that keeps scalars scalar."""
    if np.ndim(cond) == 0:
        return a if cond else b
    return np.where(cond, a, b)


def _minimum(a, b):
    """np.minimum that keeps scalars scalar."""
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return min(a, b)
    return np.minimum(a, b)


def _maximum(a, b):
    """np.maximum that keeps scalars scalar."""
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return max(a, b)
    return np.maximum(a, b)


# --- one layer ------------------------------------------------------------------------------


def saved_activation_bytes(layer: Layer, sh: Sharding, selective: str = "attention") -> float:
    """Activations one micro-batch leaves for the backward on one TP rank (Korthikanti et al.
    2022, Table 2; model.Layer.act_bytes_per_sample); "selective" under a runtime whose
    selective checkpointing is per-op (`selective` "op", torchtitan): Layer.op_sac_act_bytes_per_sample."""
    if sh.recompute == "selective" and selective == "op":
        return layer.op_sac_act_bytes_per_sample(sh.seq_len, sh.tp, sh.sequence_parallel,
                                                 sh.dtype_bytes) * sh.micro_batch
    return layer.act_bytes_per_sample(sh.seq_len, sh.recompute, sh.tp, sh.sequence_parallel, sh.attention,
                                      sh.dtype_bytes) * sh.micro_batch


def transient_activation_bytes(layer: Layer, sh: Sharding) -> float:
    """Full recomputation re-materialises one block's activations during its backward
    (Korthikanti et al. 2022, sec 5): that block's activations without recomputation."""
    if sh.recompute != "full" or layer.kind != "decoder":
        return 0.0
    return layer.act_bytes_per_sample(sh.seq_len, "none", sh.tp, sh.sequence_parallel, sh.attention,
                                      sh.dtype_bytes) * sh.micro_batch


def boundary_bytes(layer: Layer, sh: Sharding) -> float:
    """What one TP rank sends on after `layer` for one micro-batch (StageDims.boundary_share)."""
    return sh.dims.boundary_share(layer.out_bytes_per_sample(sh.seq_len, sh.dtype_bytes) * sh.micro_batch)


@dataclass(frozen=True)
class LayerPrice:
    """One layer per micro-batch on one TP rank of one GPU type (cost.layer_time)."""

    fwd_s: float
    bwd_s: float  # with the forward recomputed in the backward
    compute_s: float
    tp_comm_fwd_s: float
    tp_comm_bwd_s: float
    tp_comm_s: float
    time_s: float  # compute and TP communication
    act_bytes: float  # saved for the backward
    transient_bytes: float  # full recomputation's working set while this layer's backward runs
    weight_params: int  # of the whole layer (not divided by tp)


@lru_cache(maxsize=65536)
def layer_price(layer: Layer, sh: Sharding, gpu: GpuSpec, tp_link: Link, p: CostParams) -> LayerPrice:
    t = layer_time(layer, gpu, sh, tp_link, p)
    return LayerPrice(t.fwd_s, t.bwd_s + t.recompute_s, t.compute_s, t.tp_comm_fwd_s, t.tp_comm_bwd_s, t.tp_comm_s,
                      t.compute_s + t.tp_comm_s, saved_activation_bytes(layer, sh, p.selective_recompute),
                      transient_activation_bytes(layer, sh), layer.weight_params)


# --- a span of layers -----------------------------------------------------------------------


class _Total:
    """A span's figure: the sum over its parts of count x the layer's figure `of`, computed
    on first use and then kept."""

    def __init__(self, of: str, doc: str = "", per_gpu: bool = False):
        self.of, self.__doc__, self.per_gpu = of, doc, per_gpu

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, span, owner=None):
        if span is None:
            return self
        total = None
        for count, lp in span.parts:
            if type(count) is not np.ndarray and not count:
                continue  # a part the span leaves out (adding 0 x its figure changes nothing)
            term = count * getattr(lp, self.of)
            total = term if total is None else total + term
        if total is None:
            total = 0.0
        if self.per_gpu:
            total = span.dims.weight_share(total)
        span.__dict__[self.name] = total
        return total


@dataclass(frozen=True, eq=False)
class SpanPrice:
    """A span of layers per micro-batch on one replica: `parts` are (count, LayerPrice), the
    count a number or an array over block counts (then every figure is such an array)."""

    parts: tuple[tuple[object, LayerPrice], ...]
    dims: StageDims  # within one replica

    fwd_s = _Total("fwd_s")
    bwd_s = _Total("bwd_s", "Backward with the recomputed forward.")
    compute_s = _Total("compute_s")
    tp_comm_fwd_s = _Total("tp_comm_fwd_s")
    tp_comm_bwd_s = _Total("tp_comm_bwd_s")
    tp_comm_s = _Total("tp_comm_s")
    time_s = _Total("time_s", "Compute and TP communication (no ZeRO collectives, no pipeline send).")
    weight_params = _Total("weight_params", "Weight parameters on one GPU of the TP group "
                           "(StageDims.weight_share).", per_gpu=True)
    act_bytes = _Total("act_bytes", "Activations one micro-batch through the span leaves for its backward.")

    @property
    def transient_bytes(self):
        """The largest recomputation working set of a layer the span holds (one runs at a time)."""
        return reduce(_maximum, (_where(count >= 1, lp.transient_bytes, 0.0) for count, lp in self.parts
                                 if lp.transient_bytes), 0.0)


def span_price(parts: Iterable[tuple[object, LayerPrice]], dims: StageDims) -> SpanPrice:
    return SpanPrice(tuple(parts), dims.within_replica)


def layers_price(layers: Iterable[Layer], sh: Sharding, gpu: GpuSpec, tp_link: Link, p: CostParams,
                 recompute_layers: int = 0) -> SpanPrice:
    """The span of these layers, each counted once (a plan's stage). Recompute "block"
    recomputes the whole forward of the first `recompute_layers` decoder blocks and none of
    the rest (Megatron-LM transformer_block.py _checkpointed_forward, recompute_method
    "block"): those blocks priced as "full", the others as "none"."""
    if sh.recompute != "block":
        return span_price(((1, layer_price(layer, sh, gpu, tp_link, p)) for layer in layers), sh.dims)
    full, none = block_shardings(sh)
    parts, seen = [], 0
    for layer in layers:
        recomputed = layer.kind == "decoder" and seen < recompute_layers
        seen += layer.kind == "decoder"
        parts.append((1, layer_price(layer, full if recomputed else none, gpu, tp_link, p)))
    return span_price(parts, sh.dims)


def block_shardings(sh: Sharding) -> tuple[Sharding, Sharding]:
    """The shardings of a "block" stage's recomputed and kept layers: "full" and "none"."""
    return replace(sh, recompute="full"), replace(sh, recompute="none")


# --- communication --------------------------------------------------------------------------


@dataclass(frozen=True)
class DpLayout:
    """Where a stage's data-parallel collectives run: `replicas` replicas (one rank per TP
    position, each position reducing its own shard at once) on `nodes` nodes, at most
    `ranks_per_node` in one node; `intra` inside a node, `inter` one GPU's share between."""

    replicas: int
    ranks_per_node: int
    nodes: int
    intra: Link
    inter: Link

    def allreduce_s(self, nbytes, p: CostParams):
        return hierarchical_allreduce_s(nbytes, self.ranks_per_node, self.nodes, self.intra, self.inter, p)


@dataclass(frozen=True)
class ZeroComm:
    reduce_scatter_s: float = 0.0  # the gradients, after every micro-batch's backward
    gather_s: float = 0.0  # ZeRO-3: one all-gather of the weights (before forward, again before backward)
    overlap: float = 0.0  # the share of them the runtime's prefetching hides behind the compute

    @property
    def total_s(self):
        return self.reduce_scatter_s + 2 * self.gather_s

    def forward_exposed_s(self, fwd_s):
        """The forward's gather not hidden behind the span's forward compute `fwd_s`."""
        return zero_exposed_s(self.gather_s, fwd_s, self.overlap)

    def backward_exposed_s(self, bwd_s):
        """The backward's gather and reduce-scatter not hidden behind its compute `bwd_s`."""
        return zero_exposed_s(self.gather_s + self.reduce_scatter_s, bwd_s, self.overlap)

    def exposed_s(self, span: "SpanPrice"):
        return self.forward_exposed_s(span.fwd_s) + self.backward_exposed_s(span.bwd_s)


def zero_exposed_s(comm_s, compute_s, overlap: float):
    """ZeRO-3/FSDP collectives of a pass over a span, less the share `overlap` of them (at most
    the pass's compute) that the runtime's prefetching hides: FSDP issues the next layer's
    all-gather and the previous layer's reduce-scatter while a layer computes (Zhao et al.
    2023, PyTorch FSDP, sec 3.3), but the collectives' kernels share the GPU with it."""
    if not overlap:
        return comm_s
    return comm_s - overlap * _minimum(comm_s, compute_s)


NO_ZERO_COMM = ZeroComm()


def zero_comm(weight_params, dims: StageDims, dtype: str, layout: DpLayout | None, p: CostParams) -> ZeroComm:
    """ZeRO-2/3 per micro-batch: reduce-scatter the gradients after every backward; ZeRO-3
    also gathers the weights before its forward and its backward (Rajbhandari et al. 2020,
    sec 5.2 and 7.2); each moves half an all-reduce's traffic. (`layout` may be None below
    ZeRO-2.)"""
    if dims.zero < 2 or layout.replicas <= 1:
        return NO_ZERO_COMM
    reduce_scatter = layout.allreduce_s(weight_params * gradient_bytes(dtype), p) / 2
    gather = layout.allreduce_s(weight_params * DTYPE_BYTES[dtype], p) / 2 if dims.zero >= 3 else 0.0
    return ZeroComm(reduce_scatter, gather, p.overlap_zero_comm)


def p2p_s(nbytes, link: Link, intra: bool, params: CostParams):
    """Pipeline point-to-point across one boundary for one micro-batch: the activation
    forward and its gradient backward (Narayanan et al. 2021, sec 4.1). Charged to the
    sending-forward stage. A measured link prices each by its send/recv curve."""
    if link.curves:
        return 2 * collective_s("sendrecv", nbytes, 2, link.curves, link.bandwidth_bytes_per_s, link.latency_s)
    eff = link_efficiency(link, params, intra)
    return 2 * (link.latency_s + nbytes / (link.bandwidth_bytes_per_s * eff))


@dataclass(frozen=True)
class ChunkTime:
    """One micro-batch through one chunk (a stage) on one replica."""

    span: SpanPrice
    zero: ZeroComm
    send_s: float = 0.0  # to the next stage (none after the last)

    @property
    def zero_s(self):
        """The ZeRO-2/3 collectives it exposes (ZeroComm.exposed_s)."""
        if self.zero is NO_ZERO_COMM:
            return 0.0
        return self.zero.exposed_s(self.span)

    @property
    def time_s(self):
        time = self.span.time_s + self.zero_s
        return time + self.send_s if self.send_s else time  # (the search adds its sends later)

    @property
    def forward_s(self):
        """The forward's part (planner.report.show): its TP collectives, half the send, the exposed ZeRO-3 gather."""
        return (self.span.fwd_s + self.span.tp_comm_fwd_s + self.send_s / 2
                + self.zero.forward_exposed_s(self.span.fwd_s))

    @property
    def backward_s(self):
        """The rest: backward, recomputation, its TP collectives, half the send, the exposed reduce-scatter and gather."""
        return (self.span.bwd_s + self.span.tp_comm_bwd_s + self.send_s / 2
                + self.zero.backward_exposed_s(self.span.bwd_s))


# --- memory ---------------------------------------------------------------------------------


def replica_memory(span: SpanPrice, in_flight, dtype: str, dims: StageDims, p: CostParams,
                   optimizer: str = "adamw", offload: bool = False) -> MemoryBreakdown:
    """A replica's peak memory holding `span`: its model states (ZeRO-sharded over the stage's
    dp replicas, cost.model_state_bytes), the saved activations of `in_flight` micro-batches
    (Schedule.in_flight_microbatches) plus full recomputation's working set, and the reserve."""
    weights, grads, states = model_state_bytes(span.weight_params, dtype, dims.zero, dims.dp, optimizer)
    if offload:
        states = 0.0  # in host memory (ZeRO-Offload, Ren et al. 2021, sec 4.1): offloaded_state_bytes
    return MemoryBreakdown(weights, grads, states, span.act_bytes * in_flight + span.transient_bytes,
                           p.reserved_memory_bytes)


def offloaded_state_bytes(weight_params, dims: StageDims, dtype: str, optimizer: str):
    """What one GPU's ZeRO-Offload keeps in host memory: its (ZeRO-sharded) fp32 master weights
    and optimizer states (model_state_bytes' optimizer part; Ren et al. 2021, sec 4.1)."""
    return model_state_bytes(weight_params, dtype, dims.zero, dims.dp, optimizer)[2]


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


# --- after the last micro-batch -------------------------------------------------------------


@dataclass(frozen=True)
class StageTail:
    grad_reduce_s: float  # the data-parallel gradient reduction not hidden by the last backward
    optimizer_s: float

    @property
    def total_s(self):
        return self.grad_reduce_s + self.optimizer_s


def optimizer_s(weight_params, dims: StageDims, gpu: GpuSpec, p: CostParams, optimizer: str = "adamw"):
    """The optimizer step of one replica: ZeRO-0 steps every replica's full copy; ZeRO-1 and
    above shard the optimizer state, and so its step, over the dp replicas (Rajbhandari et
    al. 2020, sec 5.1; StageDims.state_divisors)."""
    return optimizer_step_s(weight_params / dims.state_divisors[2], gpu, p, optimizer)


def grad_reduce_s(weight_params, dims: StageDims, dtype: str, layout: DpLayout, p: CostParams, min_bwd_s):
    """The data-parallel gradient reduction after the last backward, exposed: an all-reduce's
    volume (ZeRO-1: reduce-scatter the gradients, all-gather the weights); ZeRO-2 only
    all-gathers the weights (its reduce-scatters ran per micro-batch); ZeRO-3 needs nothing.
    With overlap it hides behind the last micro-batch's backward (Megatron, PyTorch DDP)."""
    if layout.replicas <= 1 or dims.zero >= 3:
        return 0.0
    if dtype == "bf16" and p.bf16_fp32_grad_allreduce and dims.zero <= 1:
        # DeepSpeed's pipeline engine under bf16 all-reduces its BF16 optimizer's fp32 gradients
        # (PipelineEngine._bf16_reduce_grads); with ZeRO-1 the optimizer then all-gathers the
        # updated 16-bit weights of its shards (half an all-reduce)
        seconds = layout.allreduce_s(weight_params * 4, p)
        if dims.zero == 1:
            seconds = seconds + layout.allreduce_s(weight_params * DTYPE_BYTES[dtype], p) / 2
    else:
        seconds = layout.allreduce_s(weight_params * gradient_bytes(dtype), p)
    if dims.zero == 2:
        seconds = seconds / 2
    if p.overlap_grad_reduce:
        seconds = _maximum(0.0, seconds - min_bwd_s)
    return seconds


def stage_tail(weight_params, dims: StageDims, dtype: str, layout: DpLayout, reduce_params: CostParams, min_bwd_s,
               steppers: Iterable[tuple[GpuSpec, CostParams]], optimizer: str = "adamw",
               offload_hosts: Iterable[tuple[HostSpec, int]] = ()) -> StageTail:
    """What a stage adds after its last micro-batch: the gradient reduction (at the
    parameters of its slowest GPU, `reduce_params`, hidden behind its fastest replica's
    backward `min_bwd_s`) and the slowest optimizer step of its replicas' GPU types."""
    reduce_s = grad_reduce_s(weight_params, dims, dtype, layout, reduce_params, min_bwd_s)
    offload_hosts = tuple(offload_hosts)
    if offload_hosts:  # the stage's optimizer runs on the CPUs of its nodes (`host`, GPUs per node)
        params = weight_params / dims.state_divisors[2]
        step = reduce(_maximum, (offload_step_s(params, host, per_node, dtype, optimizer)
                                 for host, per_node in offload_hosts))
    else:
        step = reduce(_maximum, (optimizer_s(weight_params, dims, gpu, p, optimizer) for gpu, p in steppers))
    return StageTail(reduce_s, step)
