"""The HBM traffic of a layer's non-GEMM kernels (norms, activations, RoPE, residual adds and,
under standard attention, the scores' softmax and dropout), which planner.cost.formulas prices
at the HBM bandwidth."""

from __future__ import annotations

from ..core.dims import StageDims
from ..inputs.model import Layer


def elementwise_bytes(layer: Layer, seq_len: int, tp: int, sequence_parallel: bool,
                      attention: str, nb: int, ep: int = 1) -> tuple[float, float]:
    """HBM traffic (bytes per sample, forward) of the non-GEMM kernels, split as
    (traffic outside attention scores, traffic on the s^2 attention scores).

    Counted as reads + writes of each fused kernel, as Calculon does: layer norms (read x,
    write y), bias-dropout-add (read 2, write 1, mask), RoPE on Q and K, the MLP
    activation (GeLU read f write f; SwiGLU read 2f write f), and with standard attention
    the scale-mask-softmax and dropout over the a x s x s scores (Korthikanti et al. 2022).
    Routed experts: each token copy's activation and its moves (moe_copy_accesses).
    A hybrid model's layer has one residual branch (ModelConfig.sublayers).
    """
    c = layer.config
    s, h = seq_len, c.hidden
    mask = 1 if c.dropout else 0
    dims = StageDims(tp, sequence_parallel)
    if layer.kind == "embedding":
        return dims.activation_share((nb + mask) * s * h, 0.0), 0.0  # gather rows, dropout
    if layer.kind == "head":
        # final norm (2 s h) and the fp32 softmax cross entropy over the vocab shard, once per prediction
        return (1 + c.mtp_layers) * dims.activation_share(2 * nb * s * h, 3 * 4.0 * s * c.vocab), 0.0
    # per residual branch (attention and MLP; one in a hybrid model's layer) a norm and a bias-dropout-add
    replicated = c.sublayers * (2 * nb * s * h + 3 * nb * s * h + mask * s * h)
    if c.mtp_module:  # an MTP module's three norms and the concatenation of its two inputs (2h)
        replicated += 3 * 2 * nb * s * h + 2 * 2 * nb * s * h
    sharded = (2 if c.gated_mlp else 1) * nb * s * c.ffn_hidden + nb * s * c.ffn_hidden
    if c.num_experts > 1:
        sharded = c.experts_top_k * (sharded + moe_copy_accesses(c.num_experts, ep) * nb * s * c.expert_width)
    if not c.learned_positions:
        sharded += 2 * nb * s * (c.q_dim + c.kv_dim)  # RoPE reads and writes Q and K
    if c.mamba is not None:  # a Mamba-2 mixer's convolution and gated norm (planner.inputs.mamba)
        sharded += nb * s * c.mamba.elementwise_elements_per_token()
    scores = 0.0
    if attention == "standard":
        scores = dims.activation_share(0.0, (2 * nb + (2 * nb + mask if c.dropout else 0)) * c.num_heads * s * s)
    return dims.activation_share(replicated, sharded), scores


def moe_copy_accesses(num_experts: int, ep: int) -> int:
    """HBM accesses of one routed token copy's hidden state in an MoE layer's forward (Megatron-core
    moe_utils.permute / unpermute, fused or not): the permutation writes it and the unpermutation
    reads it; under expert parallelism with several experts per rank the alltoall dispatcher
    also sorts the received chunks by local expert and back (MoEAlltoAllTokenDispatcher,
    sort_chunks_by_idxs), a read and a write each way."""
    return 2 + (4 if 1 < ep < num_experts else 0)
