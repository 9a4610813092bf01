"""MoE expert parallelism's communication: the dispatch and combine all-to-all of every MoE layer
(GShard, Lepikhin et al. 2020, sec 3.2; Megatron-core's MoEAlltoAllTokenDispatcher), priced over
the EP group's links (one all-to-all cost function, measured curves where a link has them).
Pure: no I/O. The expert GEMMs themselves (grouped, StageDims.expert_gemm_rows) and the load
imbalance (CostParams.moe_imbalance) are in cost.layer_time."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.dims import StageDims
from ..inputs.hardware import Link
from ..inputs.linkcurve import collective_s
from ..inputs.model import DTYPE_BYTES, Layer
from .formulas import CostParams, LayerTime, link_efficiency
from .recompute import recompute_modules
from .sharding import Sharding


@dataclass(frozen=True)
class AllToAllGroup:
    """Where an expert-parallel all-to-all runs: `ranks` GPUs, at most `per_node` of them in one
    node; `intra` the intra-node link, `inter` one GPU's share of the inter-node one."""

    ranks: int
    per_node: int
    intra: Link
    inter: Link

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.per_node)


def alltoall_s(nbytes: float, ranks: int, link: Link, efficiency: float) -> float:
    """All-to-all of a `nbytes` buffer per rank: (n-1)/n of it leaves each rank, every rank
    sending at once (NCCL's alltoall as grouped send/recv, one latency per peer; nccl-tests'
    bus bandwidth for alltoall counts the same (n-1)/n). A measured link prices it by its
    all_to_all curve (planner.inputs.linkcurve)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    if link.curves:
        return collective_s("all_to_all", nbytes, ranks, link.curves, link.bandwidth_bytes_per_s, link.latency_s)
    bw = link.bandwidth_bytes_per_s * efficiency
    return (ranks - 1) / ranks * nbytes / bw + (ranks - 1) * link.latency_s


def group_alltoall_s(nbytes: float, group: AllToAllGroup, params: CostParams,
                     inter_bytes: float | None = None) -> float:
    """All-to-all over a group spanning nodes: of each rank's buffer, the (per_node - 1)/ranks
    bound to its own node's peers go over the intra-node link and the (ranks - per_node)/ranks
    to other nodes over its NIC share, at once (NCCL runs the peers' sends concurrently); the
    slower of the two sets the time. One node: alltoall_s. `inter_bytes`: what leaves the node
    instead, where a deduplicating dispatcher sends less (node_copies), every copy then reaching
    its GPU over the intra-node link."""
    if group.nodes <= 1:
        return alltoall_s(nbytes, group.ranks, group.intra, link_efficiency(group.intra, params))
    k, n = group.per_node, group.ranks
    # alltoall_s over n ranks moves (n-1)/n of its buffer: scale the buffers to these shares
    if inter_bytes is None:
        intra_share, inter_buffer = nbytes * (k - 1) / (n - 1), nbytes * (n - k) / (n - 1)
    else:
        intra_share, inter_buffer = nbytes, inter_bytes * n / (n - 1)  # every copy but its own over NVLink
    intra = alltoall_s(intra_share, n, group.intra, link_efficiency(group.intra, params)) if k > 1 else 0.0
    inter = alltoall_s(inter_buffer, n, group.inter, link_efficiency(group.inter, params, intra=False))
    return max(intra, inter)


def node_copies(num_experts: int, top_k: int, nodes: int) -> float:
    """Expected number of other nodes a token is sent to when it crosses once per node holding any
    of its top_k experts (DeepEP / HybridEP dispatch, DeepSeek-V3 sec 3.2.2): the experts spread
    evenly over `nodes`, routing balanced (each expert equally likely): per other node, one minus
    the chance that none of the top_k falls on it (hypergeometric)."""
    per_node = num_experts / nodes
    miss = 1.0
    for i in range(top_k):
        miss *= max(0.0, num_experts - per_node - i) / (num_experts - i)
    return (nodes - 1) * (1.0 - miss)


def moe_alltoall_s(layer: Layer, micro_batch: int, seq_len: int, dims: StageDims, nb: int, group: AllToAllGroup,
                   params: CostParams) -> tuple[float, float]:
    """(forward, backward) expert-parallel all-to-all of one MoE layer for one micro-batch on
    one GPU: dispatch the routed token copies to their experts' ranks and combine them back
    (GShard, Lepikhin et al. 2020, sec 3.2; Megatron-core's MoEAlltoAllTokenDispatcher); the
    backward sends the gradients the same way. A GPU holds its tp share of the replica's tokens
    (StageDims.dispatch_share) and sends each to top_k experts, ModelConfig.expert_width elements a
    copy (hidden, or the latent width with latent experts)."""
    c = layer.config
    if dims.ep <= 1 or c is None or layer.kind != "decoder" or c.num_experts <= 1:
        return 0.0, 0.0
    tokens = dims.dispatch_share(micro_batch * seq_len)
    nbytes = tokens * c.experts_top_k * c.expert_width * nb
    inter = None
    if params.moe_dispatcher == "flex" and group.nodes > 1:
        inter = tokens * node_copies(c.num_experts, c.experts_top_k, group.nodes) * c.expert_width * nb
    one = group_alltoall_s(nbytes, group, params, inter)
    return 2 * one, 2 * one  # dispatch + combine, each way


def with_moe_alltoall(t: LayerTime, layer: Layer, sh: Sharding, group: AllToAllGroup | None,
                      params: CostParams) -> LayerTime:
    """`t` (cost.layer_time) with the layer's expert-parallel all-to-all when sh.dims.ep > 1
    (a blend of decoder shapes: their count-weighted mean, as layer_time's)."""
    if sh.dims.ep <= 1:
        return t
    assert group is not None and group.ranks == sh.dims.ep, "expert parallelism needs its group"
    parts = layer.blend or ((layer, 1),)
    total = sum(n for _, n in parts)
    nb = DTYPE_BYTES[sh.dtype]
    ep_fwd = ep_bwd = 0.0
    for part, n in parts:
        fwd, bwd = moe_alltoall_s(part, sh.micro_batch, sh.seq_len, sh.dims, nb, group, params)
        if sh.recompute == "full" or (sh.recompute == "selective" and "moe" in recompute_modules(
                params.selective_recompute) and part.config.num_experts > 1):
            bwd += fwd  # the recomputed forward (or MoE layer) dispatches and combines again
        ep_fwd, ep_bwd = ep_fwd + fwd * n / total, ep_bwd + bwd * n / total
    if params.moe_a2a_overlap:
        # a forward's all-to-all runs under another micro-batch's backward compute of the layer,
        # a backward's under a forward's (CostParams.moe_a2a_overlap); what exceeds it is exposed.
        # The step's first forward and last backward, which have no partner, are left out
        ep_fwd, ep_bwd = max(0.0, ep_fwd - t.bwd_s), max(0.0, ep_bwd - t.fwd_s)
    return replace(t, ep_comm_fwd_s=ep_fwd, ep_comm_bwd_s=ep_bwd)
