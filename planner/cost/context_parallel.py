"""The collectives of context parallelism (StageDims.cp, cp_kind) per layer: one function for
both kinds, the part attention does not hide (planner.cost.pricing adds it to a layer's time)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..inputs.hardware import GpuSpec, Link
from ..inputs.linkcurve import collective_s
from ..inputs.model import Layer
from .collectives import ring_allgather_s
from .formulas import CostParams, attention_s, link_efficiency
from .sharding import Sharding


@lru_cache(maxsize=65536)
def cp_comm(layer: Layer, sh: Sharding, gpu: GpuSpec, link: Link, params: CostParams) -> tuple[float, float]:
    """Context-parallel communication of one layer for one micro-batch on one GPU, the part
    attention does not hide: (forward, backward incl. a fully recomputed forward's).

    ring (Liu et al. 2023, Ring Attention, sec 3; Megatron-core context_parallel docs): each
    rank's K and V block (its local_seq_len tokens, head_share(kv_dim) wide) goes round the ring in cp - 1
    send/recv steps, step i overlapped with the attention of block i (1/cp of the pass); the
    backward passes K, V and their gradients dK, dV (2x the bytes). Exposed per step:
    max(0, transfer - that step's attention).
    all-to-all (Jacobs et al. 2023, DeepSpeed-Ulysses, sec 3.1): four all-to-alls forward (Q, K,
    V to a head split; the output back to the sequence split) and four backward, each moving
    (cp-1)/cp of the GPU's buffer, not overlapped.
    `params.cp_ring` "torch-allgather": PyTorch's context_parallel as torchtitan runs it
    (_torch_ring_s)."""
    dims = sh.dims
    cp = dims.cp
    if layer.blend:  # a blend of decoder shapes (model.Model.decoder_stand_in): the count-weighted mean
        parts = [(cp_comm(part, sh, gpu, link, params), n) for part, n in layer.blend]
        total = sum(n for _, n in parts)
        return (sum(f * n for (f, _), n in parts) / total, sum(b * n for (_, b), n in parts) / total)
    if cp <= 1 or layer.kind != "decoder" or layer.config is None:
        return 0.0, 0.0
    attn_fwd_s, attn_bwd_s = attention_s(layer, gpu, sh, params)
    c = layer.config
    tokens = sh.micro_batch * dims.local_seq_len(sh.seq_len)
    nb = sh.dtype_bytes
    eff = link_efficiency(link, params)
    if dims.cp_kind == "all-to-all":
        nbytes = nb * tokens * dims.head_share(c.q_dim + 2 * c.kv_dim + c.o_dim)
        if link.curves:
            one_pass = collective_s("all_to_all", nbytes, cp, link.curves, link.bandwidth_bytes_per_s, link.latency_s)
        else:
            one_pass = (cp - 1) / cp * nbytes / (link.bandwidth_bytes_per_s * eff) + (cp - 1) * link.latency_s
        fwd = bwd = one_pass
    elif params.cp_ring == "torch-allgather":
        fwd, bwd = _torch_ring_s(layer, sh, gpu, link, params, attn_fwd_s, attn_bwd_s)
    else:
        kv_bytes = nb * tokens * dims.head_share(2 * c.kv_dim)
        fwd = (cp - 1) * max(0.0, _sendrecv_s(kv_bytes, link, eff) - attn_fwd_s / cp)
        bwd = (cp - 1) * max(0.0, _sendrecv_s(2 * kv_bytes, link, eff) - attn_bwd_s / cp)
    if sh.recompute == "full":
        bwd += fwd
    return fwd, bwd


def _sendrecv_s(nbytes: float, link: Link, efficiency: float) -> float:
    """One rank's send to its ring neighbour (and its receive, at once); a measured link prices
    it by its "sendrecv" size curve (planner.inputs.linkcurve)."""
    if link.curves:
        return collective_s("sendrecv", nbytes, 2, link.curves, link.bandwidth_bytes_per_s, link.latency_s)
    return link.latency_s + nbytes / (link.bandwidth_bytes_per_s * efficiency)


# eager, in both passes: K and V (heads repeated: q_dim = o_dim wide) concatenated for the rotater
# at every step but the last (`torch.cat([key.flatten(), value.flatten()])`, read 2 and write 2 bytes
# each), which the all-gather rotater leaves unused after its one all-gather (a compiled graph drops
# them as dead code, so only eager pays): per element of the attention output, cp - 1 times a pass
TORCH_RING_KV_CAT_BYTES = 2 * (2 + 2)
# torch.distributed.tensor.experimental._attention (PyTorch 2.6, the ring torchtitan's
# context_parallel_degree runs; torchtitan's default context_parallel_rotate_method "allgather"):
# the output of every ring step is merged in fp32 (_ContextParallelOptions.convert_to_f32):
# the cast of the block output (read nb, write 4 bytes) and out - sigmoid(lse_b - lse) * (out - out_b),
# three fp32 elementwise ops reading 5 and writing 3 tensors (_SDPAMerger._merge_one): bytes per
# element of the attention output, per step after the first; and the K, V concatenation
TORCH_RING_MERGE_FP32_BYTES = 6 + 8 * 4 + TORCH_RING_KV_CAT_BYTES
# backward, per step after the first: dQ, dK, dV accumulated in fp32 from the block's 16-bit
# gradients (read 4 + 2, write 4 each) and dK, dV concatenated for the send (read 4, write 4
# each) (_templated_ring_attention_backward), per element of the attention output; and the K, V
# concatenation
TORCH_RING_ACCUM_FP32_BYTES = 3 * (4 + 2 + 4) + 2 * 8 + TORCH_RING_KV_CAT_BYTES


# under torch.compile (CostParams.torch_compile) TorchInductor fuses each step's merge into one
# kernel (Ansel et al. 2024, PyTorch 2, sec 5): it reads the fp32 running output and the 16-bit
# block output and writes the running output, per element of the attention output
TORCH_RING_MERGE_COMPILED_BYTES = 4 + 2 + 4
# and each step's accumulation of dQ, dK, dV into one kernel per gradient (read the fp32 sum and
# the 16-bit block gradient, write the sum; dK, dV written straight into the send buffer, which
# Inductor's cat lowering lets the producers fill)
TORCH_RING_ACCUM_COMPILED_BYTES = 3 * (4 + 2 + 4)


@dataclass(frozen=True)
class TorchRingParts:
    """The pieces of PyTorch's ring under torchtitan for one layer and micro-batch on one GPU,
    each as priced on its own (_torch_ring_s composes them; benchmarks/cp_ring_probe.py times
    each on a node): seconds."""

    gather_s: float  # one all-gather of every rank's K and V (heads repeated)
    dkv_s: float  # one permute of a block's fp32 dK, dV to the next rank
    merge_s: float  # the forward's output merges, every step after the first
    accum_s: float  # the backward's fp32 gradient accumulations, every step after the first


def torch_ring_parts(layer: Layer, sh: Sharding, gpu: GpuSpec, link: Link, params: CostParams) -> TorchRingParts:
    """The pieces of _torch_ring_s (see there for their sources)."""
    c, dims, cp, nb = layer.config, sh.dims, sh.dims.cp, sh.dtype_bytes
    tokens = sh.micro_batch * dims.local_seq_len(sh.seq_len)
    eff = link_efficiency(link, params)
    kv_bytes = nb * tokens * dims.head_share(2 * c.q_dim)  # this rank's K and V, heads repeated
    gather_s = ring_allgather_s(cp * kv_bytes, cp, link, eff)
    dkv_s = _sendrecv_s(kv_bytes * 4 / nb, link, eff)  # dK and dV (as kv_bytes: both), in fp32
    hbm = gpu.hbm_bandwidth_bytes_per_s * params.hbm_efficiency
    out_elements = tokens * dims.head_share(c.o_dim)
    compiled = params.torch_compile
    merge_bytes = TORCH_RING_MERGE_COMPILED_BYTES if compiled else TORCH_RING_MERGE_FP32_BYTES
    accum_bytes = TORCH_RING_ACCUM_COMPILED_BYTES if compiled else TORCH_RING_ACCUM_FP32_BYTES
    return TorchRingParts(gather_s, dkv_s, (cp - 1) * out_elements * merge_bytes / hbm,
                          (cp - 1) * out_elements * accum_bytes / hbm)


def _torch_ring_s(layer: Layer, sh: Sharding, gpu: GpuSpec, link: Link, params: CostParams,
                  attn_fwd_s: float, attn_bwd_s: float) -> tuple[float, float]:
    """PyTorch's ring attention (torch.distributed.tensor.experimental._attention, Dec 2024) under
    torchtitan, per layer and micro-batch, the part attention does not hide: (forward, backward).

    - torchtitan's Llama repeats K and V to every query head before SDPA (models/llama/model.py
      repeat_kv), so the ring moves q_dim-wide keys and values, not kv_dim.
    - _AllGatherRotater: one all-gather of every rank's K and V, issued before the first block
      and waited for before the second: hidden behind the first block's attention only (1/cp).
    - backward: K, V all-gathered again; dK, dV travel with their blocks in fp32 (convert_to_f32)
      by a permute (all-to-all) after every block, waited for after the next block's backward,
      the last one after the loop (cp sends, the last exposed).
    - the fp32 merges and accumulations of every step after the first (TORCH_RING_*_BYTES),
      memory-bound, the attention kernels do not hide them.
    - under torch.compile (CostParams.torch_compile; torchtitan compiles each TransformerBlock,
      attention included: parallelize_llama.py apply_compile, torch.compile(block, fullgraph=True))
      the ring is traced into the block's graph, where a functional collective is waited on as
      soon as it is issued (torch/distributed/_functional_collectives.py _maybe_wrap_tensor:
      "wait_tensor() op is immediately called", the overlap left to the compiler), and Inductor
      moves no wait unless reorder_for_compute_comm_overlap is set (torch/_inductor/config.py,
      default False; torchtitan does not set it): every all-gather and every dK, dV permute is
      exposed, and the merges and accumulations run fused (TORCH_RING_*_COMPILED_BYTES)."""
    cp = sh.dims.cp
    parts = torch_ring_parts(layer, sh, gpu, link, params)
    gather_s, dkv_s, merge_s, accum_s = parts.gather_s, parts.dkv_s, parts.merge_s, parts.accum_s
    if params.torch_compile:  # traced: each collective waited on where it is issued, nothing hidden
        return gather_s + merge_s, gather_s + cp * dkv_s + accum_s
    fwd = max(0.0, gather_s - attn_fwd_s / cp) + merge_s
    bwd = (max(0.0, gather_s - attn_bwd_s / cp) + (cp - 1) * max(0.0, dkv_s - attn_bwd_s / cp) + dkv_s
           + accum_s)
    return fwd, bwd
