"""Parameter counts of a decoder block's attention and MLP for every Hugging Face family
(planner.inputs.model_families reads the configs), and the features Megatron's GPT flags leave out."""

from __future__ import annotations

from typing import Any


def mixer_params(config: Any) -> int:
    """A decoder's token mixer: its attention, its Mamba-2 mixer (planner.inputs.mamba), or none
    (a hybrid model's MLP layer)."""
    if config.mixer == "mamba":
        return config.mamba.params(config.hidden)
    return attention_params(config) if config.mixer == "attention" else 0


def attention_params(config: Any) -> int:
    """q, k, v and output projections with their biases, q/k norms and attention sinks; MLA's down- and
    up-projections with the latent norms (DeepSeek-V2 paper, sec 2.1)."""
    h = config.hidden
    if config.mla is None:
        qkv = config.q_dim + config.kv_dim + config.v_dim
        params = h * qkv + config.o_dim * h
        if config.linear_bias:
            params += qkv + h
        elif config.qkv_bias:
            params += qkv
    else:
        m = config.mla
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * config.q_dim if m.q_lora_rank
             else h * config.q_dim)
        kv = (h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
              + m.kv_lora_rank * config.num_heads * (m.qk_nope_head_dim + m.v_head_dim))
        params = q + kv + config.o_dim * h
    if config.attention_sinks:  # one learned logit per head (transformers GptOssAttention.sinks)
        params += config.num_heads
    if config.qk_norm == "head":
        params += 2 * config.head_dim
    elif config.qk_norm == "proj":
        params += config.q_dim + config.kv_dim
    return params


def _ffn_params(config: Any, width: int, outer: int | None = None) -> int:
    """One feed-forward network of inner width `width` reading and writing `outer` (default hidden): its
    weights and, with linear biases, their biases (a gated MLP's gate and up projections each have
    theirs: GPT-OSS's gate_up_proj_bias)."""
    outer = config.hidden if outer is None else outer
    inner = 2 * width if config.gated_mlp else width
    bias = inner + outer if config.linear_bias else 0
    return (3 if config.gated_mlp else 2) * outer * width + bias


def expert_params(config: Any) -> int:
    """The routed experts of an MoE layer (what expert parallelism splits), at the width of a routed
    token copy (ModelConfig.expert_width); 0 for a dense MLP."""
    if config.num_experts <= 1:
        return 0
    return config.num_experts * _ffn_params(config, config.ffn_hidden, config.expert_width)


def latent_projection_params(config: Any) -> int:
    """Latent experts' down and up projections, h -> latent and latent -> h, with their biases
    (megatron-core MoELayer fc1_latent_proj, fc2_latent_proj); 0 without them."""
    latent = config.moe_latent if config.num_experts > 1 else 0
    return 2 * config.hidden * latent + ((latent + config.hidden) if config.linear_bias else 0) if latent else 0


def mlp_params(config: Any) -> int:
    """A dense MLP, or every routed expert, the router (and its bias), the shared experts
    (and their gate); none in a hybrid model's mixer layer."""
    h = config.hidden
    if not config.ffn_hidden:
        return 0

    def ffn(width: int) -> int:
        return _ffn_params(config, width)

    if config.num_experts == 1:
        params = ffn(config.ffn_hidden)
    else:
        router_bias = config.num_experts if config.router_bias else 0
        params = expert_params(config) + h * config.num_experts + router_bias + latent_projection_params(config)
    if config.shared_expert_ffn:
        params += ffn(config.shared_expert_ffn) + (h if config.shared_expert_gate else 0)
    return params


def mtp_extra_params(config: Any) -> int:
    """What an MTP module holds beside its decoder block: the norms of the hidden state and of the
    next token's embedding, their 2h -> h projection and the final norm before the shared head
    (DeepSeek-V3 report, sec 2.2; megatron-core MultiTokenPredictionLayer enorm, hnorm, eh_proj,
    final_layernorm); 0 for another decoder."""
    return 2 * config.hidden * config.hidden + 3 * config.norm_params if config.mtp_module else 0


HYBRID_FEATURE = "Mamba-2 layers (a hybrid layer pattern)"  # Megatron's hybrid flags carry them


def features_beyond_gpt_flags(config: Any) -> list[str]:
    """The parts of a ModelConfig that Megatron's basic GPT flags (layers, widths, heads,
    query groups, kv-channels, qk-layernorm, SwiGLU, RMSNorm, biases, experts) do not say."""
    named = [(config.mla is not None, "multi-latent attention"), (config.shared_expert_ffn > 0, "shared experts"),
             (bool(config.dense_layers), "dense layers among the MoE ones"), (config.router_bias, "router bias"),
             (config.block_norms > 2, "norms after attention and MLP"),
             (config.qk_norm == "proj", "whole-projection q/k norms"),
             (config.qk_norm == "l2", "q/k L2 norms"),
             (bool(config.layer_windows), "sliding-window layers"),
             (bool(config.layer_chunks), "chunked-attention layers"),
             (config.attention_sinks, "attention sinks"),
             (config.mamba is not None, HYBRID_FEATURE)]
    return [name for present, name in named if present]
