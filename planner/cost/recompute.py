"""The time a layer's backward spends recomputing its forward, by activation recomputation mode
(Korthikanti et al. 2022, sec 5; torchtitan's per-op selective checkpointing)."""

from __future__ import annotations

from functools import lru_cache

from ..core.dims import StageDims
from ..core.errors import BadInput
from ..inputs.model import Layer, moe_saved_bytes
from .sharding import Sharding

# Megatron-core's selective recompute modules the planner prices (TransformerConfig.recompute_modules,
# `--recompute-modules`): "core_attn" recomputes the core attention (the attention-score ops);
# "layernorm" (input_layernorm and pre_mlp_layernorm) and "moe_act" (the MoE experts' activation
# function) use output-discarding checkpointing: the module's output is freed once the next linear
# has consumed it and recomputed from its saved input in the backward; "moe" checkpoints the whole
# MoE layer (router, dispatch, experts, combine, shared experts: only its input is kept)
PRICED_MODULES = ("core_attn", "layernorm", "moe", "moe_act")


@lru_cache(maxsize=None)  # (parsed once per setting: it is read for every priced layer)
def recompute_modules(selective_recompute: str) -> frozenset[str]:
    """The Megatron-core modules a CostParams.selective_recompute names: "attention" is core_attn
    (Megatron's default, recompute_modules=["core_attn"]); "op" none (torchtitan's per-op policy);
    otherwise a "+"-joined list of PRICED_MODULES (e.g. "layernorm+moe_act")."""
    if selective_recompute in ("attention", "op"):
        return frozenset(("core_attn",)) if selective_recompute == "attention" else frozenset()
    modules = frozenset(selective_recompute.split("+"))
    unknown = sorted(modules - set(PRICED_MODULES))
    if unknown:
        raise BadInput(f"unknown recompute module {unknown[0]!r}", field="selective_recompute")
    return modules


def _block_config(layer: Layer):
    """The config of a decoder block (a blend's first part: its parts share hidden and experts)."""
    return layer.blend[0][0].config if layer.blend else layer.config


def module_saved_bytes(layer: Layer, seq_len: int, dims: StageDims, dtype_bytes: int, modules: frozenset[str]) -> float:
    """What output-discarding module recompute frees of a decoder block's saved activations, per
    sample on one TP rank (Megatron-core CheckpointWithoutOutput): "layernorm" the norm outputs
    (the QKV and MLP inputs, each s x h, replicated unless sequence parallel; one in a hybrid
    model's layer); "moe" every MoE activation but the layer's input (model.moe_saved_bytes); "moe_act" the routed
    experts' activation output (the second expert GEMM's input, s x f per routed copy, top_k copies)."""
    c = _block_config(layer)
    if layer.kind != "decoder" or c is None:
        return 0.0
    s, nb = seq_len, dtype_bytes
    replicated = c.sublayers * nb * s * c.hidden if "layernorm" in modules else 0.0
    if "moe" in modules and c.num_experts > 1:
        sharded = moe_saved_bytes(c, s, nb)
    else:
        sharded = c.experts_top_k * nb * s * c.ffn_hidden if "moe_act" in modules and c.num_experts > 1 else 0.0
    return dims.activation_share(replicated, sharded)


def module_recompute_bytes(layer: Layer, seq_len: int, dims: StageDims, dtype_bytes: int,
                           modules: frozenset[str]) -> float:
    """HBM traffic (per sample) of re-running the discarded modules in the backward, counted as
    elementwise.elementwise_bytes counts their forward: each norm reads x and writes y (2 x s x h);
    the experts' activation reads its input (gate and up: 2f under a gated MLP, else f) and writes f
    per routed copy."""
    c = _block_config(layer)
    if layer.kind != "decoder" or c is None:
        return 0.0
    s, nb = seq_len, dtype_bytes
    replicated = c.sublayers * (2 * nb * s * c.hidden) if "layernorm" in modules else 0.0
    sharded = 0.0
    if "moe_act" in modules and c.num_experts > 1:
        sharded = c.experts_top_k * ((2 if c.gated_mlp else 1) + 1) * nb * s * c.ffn_hidden
    return dims.activation_share(replicated, sharded)


def layer_recompute_s(layer: Layer, sh: Sharding, selective_recompute: str, layer_overhead_s: float, fwd: float,
                      gemm_times: list[float], elem_fwd: float, cast_fwd: float, attn_fwd: float,
                      score_fwd: float, hbm_bytes_per_s: float = 0.0) -> float:
    """Recomputation (Korthikanti et al. 2022, sec 5): full repeats the forward; selective
    repeats only the attention-score part (softmax, dropout, QK^T, PV), or under a runtime
    whose selective checkpointing is per-op (torchtitan) every second matmul and the
    elementwise kernels (op_sac_recomputed_gemm_s). `selective_recompute` and `layer_overhead_s` are
    the CostParams fields; the times are the layer's forward parts (formulas.layer_time). Megatron's
    module recompute (recompute_modules) repeats core_attn's scores as "attention" does and the
    discarded modules' kernels at `hbm_bytes_per_s` (module_recompute_bytes)."""
    recompute = sh.recompute
    if recompute == "full":
        return fwd
    if recompute == "selective" and selective_recompute == "op":
        return (op_sac_recomputed_gemm_s(layer, gemm_times) + elem_fwd + cast_fwd / 2
                + layer_overhead_s / 3
                if layer.kind == "decoder" else 0.0)
    if recompute != "selective":
        return 0.0
    modules = recompute_modules(selective_recompute)
    attention = layer.config is not None and layer.config.mixer == "attention"  # not a hybrid's Mamba scan
    t = attn_fwd + score_fwd if "core_attn" in modules and sh.attention == "standard" and attention else 0.0
    if "moe" in modules and layer.kind == "decoder" and layer.config.num_experts > 1:
        t += moe_forward_s(layer, gemm_times, elem_fwd + cast_fwd, layer_overhead_s / 3)
    if hbm_bytes_per_s > 0:
        t += module_recompute_bytes(layer, sh.local_seq_len, sh.dims, sh.dtype_bytes, modules) * sh.micro_batch \
            / hbm_bytes_per_s
    return t


def moe_forward_s(layer: Layer, gemm_times: list[float], elem_fwd: float, host_fwd_s: float) -> float:
    """The forward of a block's MoE layer, which Megatron-core's "moe" module recompute repeats in
    the backward: its GEMMs (routed experts, router, shared experts: Layer.gemms after the mixer's),
    its elementwise and cast kernels (`elem_fwd`: all of a hybrid's one-branch layer's; else in
    proportion to its GEMM time) and the forward's host time (`host_fwd_s`, the token dispatcher's
    synchronisation among it). Its all-to-all is cost.moe.with_moe_alltoall's."""
    mixer = len(layer.mixer_gemms(1, 1))
    moe, total = sum(gemm_times[mixer:]), sum(gemm_times)
    share = 1.0 if not layer.config.mixer else (moe / total if total else 0.0)
    return moe + share * elem_fwd + host_fwd_s


def op_sac_recomputed_gemm_s(layer: Layer, gemm_times: list[float]) -> float:
    """The matmuls torchtitan's per-op selective checkpointing recomputes in a block's backward:
    it saves the output of every compute op except every second matmul (torchtitan's op-level
    SAC policy: "Saves output of all compute ops, except every second mm"); in call order q, k, v, o, then w1, w3, w2 (gated MLP) or w1, w2, it recomputes k, o
    and w3 (or w2). `gemm_times` are the block's forward GEMM times in Layer.gemms' order."""
    c = layer.config
    qkv, out, mlp_in, mlp_down = gemm_times[:4]
    per_kv = c.kv_dim / (c.hidden + 2 * c.kv_dim)
    calls = [qkv * (1 - 2 * per_kv), qkv * per_kv, qkv * per_kv, out]
    calls += [mlp_in / 2, mlp_in / 2] if c.gated_mlp else [mlp_in]
    calls.append(mlp_down)
    return sum(calls[1::2])
