"""Where a stage's data-parallel collectives run (DpLayout) and the ZeRO-2/3 collectives of each
micro-batch (zero_comm, ZeroComm), priced as plain arithmetic over scalars or numpy arrays like
planner.cost.pricing, which re-exports them (its ChunkTime holds a ZeroComm)."""

from __future__ import annotations

from dataclasses import dataclass

from .arrays import minimum as _minimum
from .formulas import CostParams, hierarchical_allreduce_s
from .states import reduce_scatter_bytes
from ..core.dims import StageDims
from ..inputs.hardware import Link
from ..inputs.model import DTYPE_BYTES


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
    reduce_scatter_overlap: float = 0.0  # the share of the reduce-scatter it hides (reduce_scatter_overlap)

    @property
    def total_s(self):
        return self.reduce_scatter_s + 2 * self.gather_s

    def forward_exposed_s(self, fwd_s):
        """The forward's gather not hidden behind the span's forward compute `fwd_s`."""
        return zero_exposed_s(self.gather_s, fwd_s, self.overlap)

    def backward_exposed_s(self, bwd_s):
        """The backward's gather and reduce-scatter not hidden behind its compute `bwd_s`: each
        hides its own share, both behind the same compute."""
        hideable = None if self.reduce_scatter_overlap == self.overlap else \
            self.overlap * self.gather_s + self.reduce_scatter_overlap * self.reduce_scatter_s
        return zero_exposed_s(self.gather_s + self.reduce_scatter_s, bwd_s, self.overlap, hideable)

    def exposed_s(self, span):
        """Both passes of `span` (a pricing.SpanPrice)."""
        return self.forward_exposed_s(span.fwd_s) + self.backward_exposed_s(span.bwd_s)

    @property
    def unhidden_s(self):
        """What no compute hides: of each collective, the share the runtime does not overlap (the
        least exposed_s is, over any span)."""
        return (max(0.0, 1.0 - self.overlap) * 2 * self.gather_s
                + max(0.0, 1.0 - self.reduce_scatter_overlap) * self.reduce_scatter_s)

    def plus(self, other: "ZeroComm") -> "ZeroComm":
        """Both chunks' collectives together (one runtime's: its shares)."""
        return ZeroComm(self.reduce_scatter_s + other.reduce_scatter_s, self.gather_s + other.gather_s,
                        self.overlap, self.reduce_scatter_overlap)

    def per_microbatch(self, microbatches: int) -> "ZeroComm":
        """The collectives of a schedule that runs them once for `microbatches` micro-batches
        (breadth-first: one gather and one reduce-scatter per loop; Lamy-Poirier 2023, sec 3.3),
        spread over them."""
        if microbatches <= 1 or not self.total_s:
            return self
        return ZeroComm(self.reduce_scatter_s / microbatches, self.gather_s / microbatches, self.overlap,
                        self.reduce_scatter_overlap)


def zero_exposed_s(comm_s, compute_s, overlap: float, hideable_s=None):
    """ZeRO-3/FSDP collectives of a pass over a span, less what the runtime's prefetching hides:
    FSDP issues the next layer's all-gather and the previous layer's reduce-scatter on their own
    streams while a layer computes (Zhao et al. 2023, PyTorch FSDP, sec 3.3; FSDP2's all-gather
    and reduce-scatter streams, torch/distributed/fsdp/_fully_shard/_fsdp_state.py), so they
    hide behind up to all of the pass's compute; of each collective the share `overlap` hides,
    the rest stays exposed (its copy-in and copy-out kernels on the compute stream, the SMs
    NCCL's kernels take from the compute). `hideable_s` (default overlap * comm_s) is what may
    hide where the collectives hide different shares (ZeroComm.backward_exposed_s)."""
    if hideable_s is None:
        if not overlap:
            return comm_s
        hideable_s = overlap * comm_s
    return comm_s - _minimum(hideable_s, compute_s)


def reduce_scatter_overlap(p: CostParams) -> float:
    """The share of ZeRO-2/3's per-micro-batch gradient reduce-scatter that may hide behind the
    backward: a runtime with a fitted share for its ZeRO collectives (overlap_zero_comm, the FSDP
    runtimes) hides that share of it; one that overlaps its DP gradient reduction with the backward
    (overlap_grad_reduce) hides all of it, up to the backward, as that reduction (stage_tail.
    grad_reduce_s): the gradients leave in buckets on a communication stream as the backward
    fills them (megatron-core param_and_grad_buffer.py start_grad_sync under
    --overlap-grad-reduce; DeepSpeed ZeRO-2 overlap_comm, runtime/zero/stage_1_and_2.py
    reduction_stream; FSDP2's reduce-scatter stream, _fully_shard/_fsdp_state.py)."""
    if p.overlap_zero_comm:
        return p.overlap_zero_comm
    return 1.0 if p.overlap_grad_reduce else 0.0


def zero_rank_overlapped(p: CostParams) -> bool:
    """Whether a pipeline rank's chunks hide their reduce-scatters behind the rank's backward as
    one: the gradient buckets of all its model chunks queue on one communication stream while any
    chunk's backward runs (megatron-core param_and_grad_buffer.py start_grad_sync under
    --overlap-grad-reduce); FSDP's prefetching (overlap_zero_comm) hides each layer's behind its
    neighbours, chunk by chunk."""
    return bool(p.overlap_grad_reduce and not p.overlap_zero_comm)


def rank_zero_share(zero: ZeroComm, fwd_s, bwd_s, chunks: int):
    """One of a pipeline rank's `chunks` chunks' equal share (forward, backward) of the ZeRO-2/3
    collectives the rank exposes where they hide behind its whole pass (zero_rank_overlapped):
    `zero` all its chunks' collectives together (ZeroComm.plus), `fwd_s`, `bwd_s` its span's
    compute, as replica_pricer shares overlapped sends (p2p.p2p_rank_s)."""
    return zero.forward_exposed_s(fwd_s) / chunks, zero.backward_exposed_s(bwd_s) / chunks


NO_ZERO_COMM = ZeroComm()


def zero_comm(weight_params, dims: StageDims, dtype: str, layout: DpLayout | None, p: CostParams,
              expert_params=0.0, expert_layout: DpLayout | None = None, fp8_gather_params=0.0) -> ZeroComm:
    """ZeRO-2/3 per micro-batch: reduce-scatter the gradients after every backward; ZeRO-3
    also gathers the weights before its forward and its backward (Rajbhandari et al. 2020,
    sec 5.2 and 7.2); each moves half an all-reduce's traffic. With `expert_layout` (expert
    parallelism) the routed experts' `expert_params` (of weight_params) run over their
    expert-data-parallel group instead (torchtitan's FSDP of the experts over its efsdp mesh
    dimension, parallelize.py apply_fsdp edp_mesh). (`layout` may be None below ZeRO-2.) Of the
    dense weights, `fp8_gather_params` are all-gathered in fp8, 1 byte each (fp8.fp8_gather_params)."""
    if dims.zero < 2:
        return NO_ZERO_COMM
    # (params, where, bytes the all-gather saves): the dense part's fp8-gathered weights at 1 byte
    saved = fp8_gather_params * (DTYPE_BYTES[dtype] - 1)
    parts = [(weight_params, layout, saved)] if expert_layout is None else \
        [(weight_params - expert_params, layout, saved), (expert_params, expert_layout, 0.0)]
    parts = [(w, where, s) for w, where, s in parts if where.replicas > 1]
    if not parts:
        return NO_ZERO_COMM
    reduce_scatter = sum(where.allreduce_s(w * reduce_scatter_bytes(dtype, p.fp32_grad_accumulation), p) / 2
                         for w, where, _ in parts)
    gather = sum(where.allreduce_s(w * DTYPE_BYTES[dtype] - s, p) / 2 for w, where, s in parts) \
        if dims.zero >= 3 else 0.0
    return ZeroComm(reduce_scatter, gather, p.overlap_zero_comm, reduce_scatter_overlap(p))
