"""The price of one stage replica, each formula written once (one source named per formula).

Every function here is plain arithmetic that takes Python numbers or numpy arrays over a
decoder-block count n, and gives the same figures either way: planner.cost.evaluate and
planner.report.show price a plan's replicas with scalars (each layer of a chunk counted once),
planner.search.pricing.stages and planner.search.pricing.interleave price a stage configuration for every block count
at once (`n = np.arange(L + 1)` decoder blocks, plus 0 or 1 embedding and head).

Per micro-batch on one replica (one tensor-parallel group):
  span_price   forward, backward (with recomputation) and TP communication of a span of
               layers, with its weights and saved activations: count x layer, summed;
  zero_comm    the ZeRO-2/3 collectives after every micro-batch (planner.cost.dp_comm, re-exported);
  p2p_s        the sends across a stage boundary (boundary_bytes of activations; planner.cost.p2p,
               which also says how much of them a rank waits for);
  ChunkTime    one chunk's (stage's) micro-batch: the three above together, with what it waits
               for of its sends and receives.
Per replica:   planner.cost.stage_memory.replica_memory, the peak memory with some micro-batches
               in flight (and ZeRO-Offload's host side).
Per stage, after its last micro-batch: planner.cost.stage_tail (the exposed data-parallel
gradient reduction and the optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Iterable

import numpy as np

from .moe import AllToAllGroup, with_moe_alltoall
from .muon import muon_matrices
from .formulas import CostParams, layer_time
from .dp_comm import (NO_ZERO_COMM, DpLayout, ZeroComm, rank_zero_share, zero_comm, zero_exposed_s,  # noqa: F401 (re-exported)
                      zero_rank_overlapped)
from ..core.dims import StageDims
from ..inputs.devices import QUANTIZED_FORMATS
from ..inputs.hardware import GpuSpec, Link
from ..inputs.model import Layer
from .context_parallel import cp_comm
from .p2p import p2p_s  # noqa: F401 (re-exported)
from .recompute import module_saved_bytes, recompute_modules
from .sharding import Sharding
from .offload import NO_ACTIVATION_OFFLOAD, ActivationOffload
from . import fp8 as fp8_cost


def _where(cond, a, b):
    """np.where that keeps scalars scalar."""
    if np.ndim(cond) == 0:
        return a if cond else b
    return np.where(cond, a, b)


# --- one layer ------------------------------------------------------------------------------


def gathered_input_bytes(layer: Layer, sh: Sharding, tp_saves_gathered_inputs: bool) -> float:
    """Under a runtime whose TP saves the all-gathered inputs of its column-parallel GEMMs
    (CostParams.tp_saves_gathered_inputs) and sequence parallelism: what they add to the
    layer's activations without recomputation (Layer.gathered_input_bytes_per_sample)."""
    if not tp_saves_gathered_inputs or not sh.sequence_parallel:
        return 0.0
    return layer.gathered_input_bytes_per_sample(sh.local_seq_len, sh.tp, sh.dtype_bytes) * sh.micro_batch


def saved_activation_bytes(layer: Layer, sh: Sharding, selective: str = "attention", fp8_recipe: str = "",
                           tp_saves_gathered_inputs: bool = False) -> float:
    """Activations one micro-batch leaves for the backward on one TP rank (Korthikanti et al.
    2022, Table 2; model.Layer.act_bytes_per_sample); "selective" under a runtime whose
    selective checkpointing is per-op (`selective` "op", torchtitan): Layer.op_sac_act_bytes_per_sample.
    Under a quantized dtype a runtime that saves quantized linear inputs keeps those in the format
    (fp8.saved_input_saving)."""
    fp8_saving = 0.0
    modules = recompute_modules(selective) if sh.recompute == "selective" else frozenset()
    recipe = fp8_cost.quantized_linears(layer, sh.dtype, fp8_recipe) if fp8_recipe else None
    if recipe is not None and recipe.saves_fp8_inputs:
        fp8_saving = fp8_cost.saved_input_saving(layer, sh.local_seq_len, sh.tp, sh.sequence_parallel, sh.recompute,
                                                 sh.dtype_bytes, recipe.operand_bytes, moe_kept="moe" not in modules)
    gathered = 0.0  # kept by the head always, by a block without recomputation (gathered_input_bytes)
    if layer.kind == "head" or (layer.kind == "decoder" and sh.recompute == "none"):
        gathered = gathered_input_bytes(layer, sh, tp_saves_gathered_inputs)
    if sh.recompute == "selective" and selective == "op":
        return layer.op_sac_act_bytes_per_sample(sh.local_seq_len, sh.tp, sh.sequence_parallel,
                                                 sh.dtype_bytes) * sh.micro_batch + gathered
    mode, freed = sh.recompute, 0.0
    if sh.recompute == "selective":  # Megatron-core's recompute_modules (recompute.recompute_modules)
        mode = "selective" if "core_attn" in modules else "none"
        freed = module_saved_bytes(layer, sh.local_seq_len, sh.dims, sh.dtype_bytes, modules)
    return gathered + (layer.act_bytes_per_sample(sh.local_seq_len, mode, sh.tp, sh.sequence_parallel, sh.attention,
                                       sh.dtype_bytes) - fp8_saving - freed) * sh.micro_batch


def transient_activation_bytes(layer: Layer, sh: Sharding, cross_entropy: str = "fused",
                               tp_saves_gathered_inputs: bool = False) -> float:
    """Full recomputation re-materialises one block's activations during its backward
    (Korthikanti et al. 2022, sec 5): that block's activations without recomputation. Under a
    runtime whose cross entropy is "eager" (CostParams.cross_entropy) the head's backward holds
    two fp32 gradients of the logits beside the saved log-softmax output
    (Layer.eager_loss_grad_bytes_per_sample); a fused one computes its gradient in place."""
    if layer.kind == "head" and cross_entropy == "eager":
        return layer.eager_loss_grad_bytes_per_sample(sh.local_seq_len, sh.tp, sh.sequence_parallel) * sh.micro_batch
    if sh.recompute != "full" or layer.kind != "decoder":
        return 0.0
    return layer.act_bytes_per_sample(sh.local_seq_len, "none", sh.tp, sh.sequence_parallel, sh.attention,
                                      sh.dtype_bytes) * sh.micro_batch + gathered_input_bytes(layer, sh,
                                                                                                tp_saves_gathered_inputs)


def wgrad_input_bytes(layer: Layer, sh: Sharding) -> float:
    """What a deferred weight-gradient pass (W) keeps of one micro-batch until it runs: the
    inputs X of the layer's weight GEMMs (dW = X^T dY; Qi et al. 2023, Zero Bubble, sec 2),
    on one TP rank; a column-parallel GEMM's input (k = hidden) is split by sequence
    parallelism like the other replicated activations (StageDims.activation_share)."""
    c = layer.config
    if c is None:
        return 0.0
    gemms = layer.gemms(sh.seq_len, 1)  # a replica's, split below
    replicated = sum(g.count * g.rows * g.k for g in gemms if g.k == c.hidden)
    sharded = sum(g.count * g.rows * g.k for g in gemms if g.k != c.hidden)
    return sh.dims.activation_share(replicated, sharded) * sh.dtype_bytes * sh.micro_batch


def boundary_bytes(layer: Layer, sh: Sharding) -> float:
    """What one TP rank sends on after `layer` for one micro-batch (StageDims.boundary_share)."""
    return sh.dims.boundary_share(layer.out_bytes_per_sample(sh.local_seq_len, sh.dtype_bytes) * sh.micro_batch)


@dataclass(frozen=True)
class LayerPrice:
    """One layer per micro-batch on one TP rank of one GPU type (cost.layer_time)."""

    fwd_s: float
    bwd_s: float  # with the forward recomputed in the backward
    compute_s: float
    tp_comm_fwd_s: float
    tp_comm_bwd_s: float
    tp_comm_s: float
    time_s: float  # compute, TP communication and exposed CP communication
    act_bytes: float  # saved for the backward
    transient_bytes: float  # full recomputation's working set while this layer's backward runs
    weight_params: int  # of the whole layer (not divided by tp)
    cp_comm_fwd_s: float = 0.0  # context-parallel communication attention does not hide (formulas.cp_comm)
    cp_comm_bwd_s: float = 0.0
    cp_comm_s: float = 0.0
    fp8_cache_bytes: float = 0.0  # the runtime's fp8 weight copies kept between micro-batches, on one GPU
    wgrad_s: float = 0.0  # the weight-gradient part of bwd_s (LayerTime.wgrad_s)
    wgrad_act_bytes: float = 0.0  # kept for a deferred weight-gradient pass (wgrad_input_bytes)
    expert_params: int = 0  # of weight_params, the routed experts' (StageDims.weight_share)
    ep_comm_fwd_s: float = 0.0  # the MoE all-to-all under expert parallelism (cost.moe_alltoall_s)
    ep_comm_bwd_s: float = 0.0
    fp8_params_saving: float = 0.0  # the 16-bit weights fp8 parameters replace, on one GPU (fp8.fp8_params_saving)
    # Muon (cost.muon): of weight_params, those AdamW keeps (embedding, head, 1-D), and the Newton-Schulz
    # FLOPs of the layer's whole dense matrices and of all its routed experts'
    adam_params: float = 0.0
    ns_flops: float = 0.0
    ns_expert_flops: float = 0.0

    @property
    def ep_comm_s(self) -> float:
        return self.ep_comm_fwd_s + self.ep_comm_bwd_s


@lru_cache(maxsize=65536)
def layer_price(layer: Layer, sh: Sharding, gpu: GpuSpec, tp_link: Link, p: CostParams,
                cp_link: Link | None = None, ep_group: AllToAllGroup | None = None) -> LayerPrice:
    """`ep_group`: where the expert-parallel all-to-all runs, when sh.dims.ep > 1; the saved scores
    of standard attention where the runtime runs no fused kernel on the GPU (Sharding.priced). A head
    with MTP modules (Layer.trail) is the sum of its own price and theirs, each module a decoder."""
    if layer.trail:
        return _with_trail(layer, sh, gpu, tp_link, p, cp_link, ep_group)
    if layer.config is not None and layer.config.high_precision and sh.dtype in QUANTIZED_FORMATS:
        sh = replace(sh, dtype="bf16")  # a decoder the quantized recipe keeps in bf16 (ModelConfig.bf16_layers)
    sh = sh.priced(p.fused_attention)
    t = with_moe_alltoall(layer_time(layer, gpu, sh, tp_link, p), layer, sh, ep_group, p)
    time = t.compute_s + t.tp_comm_s + t.ep_comm_s
    cp_fwd = cp_bwd = 0.0
    if sh.dims.cp > 1:  # cp_link: the CP ring's, default the TP group's
        cp_fwd, cp_bwd = cp_comm(layer, sh, gpu, tp_link if cp_link is None else cp_link, p)
        time += cp_fwd + cp_bwd
    return LayerPrice(t.fwd_s, t.bwd_s + t.recompute_s, t.compute_s, t.tp_comm_fwd_s, t.tp_comm_bwd_s, t.tp_comm_s,
                      time, saved_activation_bytes(layer, sh, p.selective_recompute, p.fp8_recipe,
                                                   p.tp_saves_gathered_inputs),
                      transient_activation_bytes(layer, sh, p.cross_entropy, p.tp_saves_gathered_inputs),
                      layer.weight_params,
                      cp_fwd, cp_bwd, cp_fwd + cp_bwd,
                      fp8_cost.weight_cache_bytes(layer, sh.dims, sh.dtype, p.fp8_recipe, gpu),
                      t.wgrad_s, wgrad_input_bytes(layer, sh), layer.expert_params, t.ep_comm_fwd_s, t.ep_comm_bwd_s,
                      fp8_params_saving=fp8_cost.fp8_params_saving(layer, sh.dims, sh.dtype, p.fp8_recipe),
                      **_muon_fields(layer))


def _muon_fields(layer: Layer) -> dict:
    """LayerPrice's Muon figures of one layer (cost.muon.muon_matrices)."""
    matrices, dense, experts = muon_matrices(layer)
    return {"adam_params": max(0.0, layer.weight_params - matrices), "ns_flops": dense, "ns_expert_flops": experts}


def _with_trail(layer: Layer, sh: Sharding, gpu: GpuSpec, tp_link: Link, p: CostParams, cp_link: Link | None,
                ep_group: AllToAllGroup | None) -> LayerPrice:
    """layer_price of a head and its MTP modules: every figure summed, the recomputation working set
    the largest (one layer's backward runs at a time)."""
    trail_params = sum(t.weight_params for t in layer.trail)
    own = replace(layer, trail=(), params=layer.params - sum(t.params for t in layer.trail),
                  weight_params=layer.weight_params - trail_params,
                  expert_params=layer.expert_params - sum(t.expert_params for t in layer.trail))
    prices = [layer_price(part, sh, gpu, tp_link, p, cp_link, ep_group) for part in (own, *layer.trail)]
    summed = {f.name: sum(getattr(lp, f.name) for lp in prices) for f in fields(LayerPrice)}
    summed["transient_bytes"] = max(lp.transient_bytes for lp in prices)
    return LayerPrice(**summed)


# --- a span of layers -----------------------------------------------------------------------


class _Total:
    """A span's figure: the sum over its parts of count x the layer's figure `of`, computed
    on first use and then kept."""

    def __init__(self, of: str, doc: str = ""):
        self.of, self.__doc__ = of, doc

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
    cp_comm_fwd_s = _Total("cp_comm_fwd_s")
    cp_comm_bwd_s = _Total("cp_comm_bwd_s")
    cp_comm_s = _Total("cp_comm_s", "Exposed context-parallel communication (formulas.cp_comm).")
    ep_comm_fwd_s = _Total("ep_comm_fwd_s")
    ep_comm_bwd_s = _Total("ep_comm_bwd_s")
    ep_comm_s = _Total("ep_comm_s", "The MoE all-to-all under expert parallelism.")
    time_s = _Total("time_s", "Compute, TP, EP and exposed CP communication (no ZeRO collectives, no pipeline send).")
    all_params = _Total("weight_params", "Weight parameters of the span's layers (whole layers).")
    all_expert_params = _Total("expert_params", "Of them, the routed experts'.")

    @property
    def weight_params(self):
        """Weight parameters on one GPU of the TP group (StageDims.weight_share)."""
        return self.dims.weight_share(self.all_params, self.all_expert_params)

    @property
    def expert_params(self):
        """Of weight_params, the routed experts' on one GPU (1/(etp x ep) of them)."""
        return self.dims.weight_share(self.all_expert_params, self.all_expert_params)
    act_bytes = _Total("act_bytes", "Activations one micro-batch through the span leaves for its backward.")
    fp8_cache_bytes = _Total("fp8_cache_bytes", "fp8 weight copies kept between micro-batches, on one GPU "
                             "(fp8.weight_cache_bytes).")
    fp8_params_saving = _Total("fp8_params_saving", "The 16-bit weights fp8 parameters replace, on one GPU "
                               "(fp8.fp8_params_saving).")
    wgrad_s = _Total("wgrad_s", "The weight-gradient part of bwd_s (a split backward's W pass).")
    wgrad_act_bytes = _Total("wgrad_act_bytes", "What a deferred W pass keeps of one micro-batch (wgrad_input_bytes).")
    adam_params = _Total("adam_params", "Of all_params, those Muon leaves to AdamW (whole layers; cost.muon).")
    ns_flops = _Total("ns_flops", "Muon's Newton-Schulz FLOPs of the span's dense matrices (whole; cost.muon).")
    ns_expert_flops = _Total("ns_expert_flops", "... of all its routed experts' matrices.")

    @property
    def transient_bytes(self):
        """The largest recomputation working set of a layer the span holds (one runs at a time)."""
        out = 0.0  # (as reduce(_maximum, _where(count >= 1, ...)), without the generic helpers: a hot path)
        for count, lp in self.parts:
            need = lp.transient_bytes
            if not need:
                continue
            if type(count) is np.ndarray and count.ndim:
                out = np.maximum(out, np.where(count >= 1, need, 0.0))
            elif count >= 1:
                out = np.maximum(out, need) if type(out) is np.ndarray else max(out, need)
            elif type(out) is not np.ndarray:
                out = max(out, 0.0)
        return out


    @property
    def largest_layer_weight_params(self):
        """The weight parameters on one GPU of the span's largest layer (StageDims.weight_share):
        what ZeRO-3 gathers for one layer (zero3_gather_bytes)."""
        out = 0.0
        for count, lp in self.parts:
            need = self.dims.weight_share(lp.weight_params, lp.expert_params)
            if type(count) is np.ndarray and count.ndim:
                out = np.maximum(out, np.where(count >= 1, need, 0.0))
            elif count >= 1:
                out = np.maximum(out, need) if type(out) is np.ndarray else max(out, need)
        return out


def span_price(parts: Iterable[tuple[object, LayerPrice]], dims: StageDims) -> SpanPrice:
    return SpanPrice(tuple(parts), dims.within_replica)


def layers_price(layers: Iterable[Layer], sh: Sharding, gpu: GpuSpec, tp_link: Link, p: CostParams,
                 cp_link: Link | None = None, ep_group: AllToAllGroup | None = None,
                 recompute_layers: int = 0) -> SpanPrice:
    """The span of these layers, each counted once (a plan's stage). Recompute "block"
    recomputes the whole forward of the first `recompute_layers` decoder blocks and none of
    the rest (Megatron-LM transformer_block.py _checkpointed_forward, recompute_method
    "block"): those blocks priced as "full", the others as "none"."""
    if sh.recompute != "block":
        return span_price(((1, layer_price(layer, sh, gpu, tp_link, p, cp_link, ep_group)) for layer in layers),
                          sh.dims)
    full, none = block_shardings(sh)
    parts, seen = [], 0
    for layer in layers:
        recomputed = layer.kind == "decoder" and seen < recompute_layers
        seen += layer.kind == "decoder"
        parts.append((1, layer_price(layer, full if recomputed else none, gpu, tp_link, p, cp_link, ep_group)))
    return span_price(parts, sh.dims)


def block_shardings(sh: Sharding) -> tuple[Sharding, Sharding]:
    """The shardings of a "block" stage's recomputed and kept layers: "full" and "none"."""
    return replace(sh, recompute="full"), replace(sh, recompute="none")


# --- communication --------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkTime:
    """One micro-batch through one chunk (a stage) on one replica."""

    span: SpanPrice
    zero: ZeroComm
    send_s: float = 0.0  # what it waits for of its sends to the next stage (p2p.p2p_rank_s; none after the last)
    act_offload: ActivationOffload = NO_ACTIVATION_OFFLOAD  # its activation offload (activation_offload)
    recv_s: float = 0.0  # ... of its receives from the stage before it, on another rank (p2p.p2p_rank_s)
    # (forward, backward): its share of the ZeRO-2/3 collectives its rank exposes as one
    # (dp_comm.rank_zero_share); None: its own (ZeroComm.exposed_s)
    zero_share: tuple | None = None

    @property
    def zero_s(self):
        """The ZeRO-2/3 collectives it exposes (ZeroComm.exposed_s, or its rank's share)."""
        if self.zero_share is not None:
            return self.zero_share[0] + self.zero_share[1]
        if self.zero is NO_ZERO_COMM:
            return 0.0
        return self.zero.exposed_s(self.span)

    @property
    def compute_s(self):
        """time_s without its sends and receives."""
        time = self.span.time_s + self.zero_s
        if self.act_offload is not NO_ACTIVATION_OFFLOAD:
            time = time + self.act_offload.exposed_s
        return time

    @property
    def time_s(self):
        time = self.compute_s
        p2p = self.send_s + self.recv_s
        return time + p2p if p2p else time  # (the search adds its sends later)

    @property
    def p2p_s(self):
        """What it waits for of its sends and receives."""
        return self.send_s + self.recv_s

    @property
    def forward_s(self):
        """The forward's part (planner.report.show): its TP, CP and EP collectives, half the send, the exposed ZeRO-3 gather."""
        return (self.span.fwd_s + self.span.tp_comm_fwd_s + self.span.cp_comm_fwd_s + self.span.ep_comm_fwd_s
                + self.p2p_s / 2 + self.act_offload.fwd_exposed_s
                + (self.zero.forward_exposed_s(self.span.fwd_s) if self.zero_share is None else self.zero_share[0]))

    @property
    def backward_s(self):
        """The rest: backward, recomputation, its TP, CP and EP collectives, half the send, the exposed reduce-scatter and gather."""
        return (self.span.bwd_s + self.span.tp_comm_bwd_s + self.span.cp_comm_bwd_s + self.span.ep_comm_bwd_s
                + self.p2p_s / 2 + self.act_offload.bwd_exposed_s
                + (self.zero.backward_exposed_s(self.span.bwd_s) if self.zero_share is None else self.zero_share[1]))
