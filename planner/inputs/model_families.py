"""Hugging Face model families: one small reader per `model_type`, each turning a parsed
config.json into the fields of planner.inputs.model_config.ModelConfig (the model's name aside);
planner.inputs.block_params counts a block's attention and MLP parameters for every family.

No silent defaults: a dimension the cost depends on that the config leaves out is bad
input, unless the family's transformers configuration class gives it a default; each such
default is named below with its source (transformers/models/<family>/configuration_*.py).
Options of a family that the cost model does not represent (attention or MLP biases where
the family has none) are refused rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..core.errors import BadInput
from .hf_reader import HfReader
from .mamba import read_mamba

SUPPORTED_TYPES = ("gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                   "qwen3_moe", "deepseek_v3", "kimi_k2", "gemma2", "gemma3", "gemma3_text", "phi3", "olmo2",
                   "gpt_oss", "nemotron_h", "llama4", "llama4_text")

# the families planner.calibrate.torch_layers builds as torch modules (`planner profile`); the others
# are priced analytically only
PROFILED_TYPES = ("gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "phi3")


@dataclass(frozen=True)
class Mla:
    """DeepSeek's multi-head latent attention (DeepSeek-V2 paper, sec 2.1): q and kv are
    projected down to low-rank latents (each RMS-normed) and back up per head; only the
    qk_rope_head_dim part of q and k carries RoPE. q_lora_rank 0: q projected directly."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


def _core(reader: HfReader, head_dim_default: int | None = None) -> dict[str, Any]:
    """The dimensions every Llama-style family names the same way. `head_dim_default` is
    the family's documented default; None: hidden / heads (LlamaConfig, MistralConfig,
    Qwen2Config, Phi3Config, Olmo2Config all derive it so when head_dim is absent)."""
    hidden = reader.num("hidden_size", "hidden")
    heads = reader.num("num_attention_heads", "num_heads")
    head_dim = reader.num("head_dim", "hidden", default=head_dim_default, required=False) or 0
    if not head_dim and hidden % heads:
        raise BadInput(f"hidden size {hidden} is not a multiple of the {heads} heads (and no head_dim)",
                       reader.where, reader.prefix + "num_attention_heads")
    return dict(hidden=hidden, num_layers=reader.num("num_hidden_layers", "num_layers"), num_heads=heads,
                num_kv_heads=reader.num("num_key_value_heads", "num_heads", default=heads),  # HF: absent means MHA
                ffn_hidden=reader.num("intermediate_size", "ffn_hidden"), vocab=reader.num("vocab_size", "vocab"),
                max_positions=reader.num("max_position_embeddings", "max_positions", required=False) or 0,
                attention_head_dim=head_dim, gated_mlp=True, norm="rmsnorm",
                tied_embeddings=reader.flag("tie_word_embeddings", False),
                dropout=reader.rate("attention_dropout") > 0)


def _window_all(reader: HfReader, dims: dict[str, Any]) -> dict[str, Any]:
    """Mistral, Mixtral, Phi-3: `sliding_window` (null: none) applies to every layer."""
    window = reader.num("sliding_window", "max_positions", required=False) or 0
    dims["layer_windows"] = reader.layer_windows(dims["num_layers"], window, lambda i: True)
    return dims


def _window_qwen(reader: HfReader, dims: dict[str, Any]) -> dict[str, Any]:
    """Qwen2/3 (and MoE): with use_sliding_window, layers from max_window_layers on use
    sliding_window (Qwen2Config's layer_types rule)."""
    if reader.flag("use_sliding_window", False):
        window = reader.num("sliding_window", "max_positions")
        first = reader.num("max_window_layers", "layer_index")
        dims["layer_windows"] = reader.layer_windows(dims["num_layers"], window, lambda i: i >= first)
    return dims


def _experts(reader: HfReader, dims: dict[str, Any], experts_key: str) -> dict[str, Any]:
    experts = reader.num(experts_key, "num_experts")
    top_k = reader.num("num_experts_per_tok", "num_experts")
    if top_k > experts:
        raise BadInput(f"num_experts_per_tok exceeds {experts_key}", reader.where,
                       reader.prefix + "num_experts_per_tok")
    dims.update(num_experts=experts, experts_top_k=top_k)
    return dims


def _qwen_moe(reader: HfReader, dims: dict[str, Any]) -> dict[str, Any]:
    """Qwen2-MoE / Qwen3-MoE: layer i is sparse unless listed in mlp_only_layers or
    (i + 1) % decoder_sparse_step != 0 (Qwen2MoeDecoderLayer); dense layers use
    intermediate_size, experts moe_intermediate_size. decoder_sparse_step defaults to 1."""
    _experts(reader, dims, "num_experts")
    step = reader.num("decoder_sparse_step", "num_layers", default=1)
    only = reader.index_list("mlp_only_layers", dims["num_layers"])
    dense = tuple(i for i in range(dims["num_layers"]) if i in only or (i + 1) % step)
    dims.update(dense_ffn_hidden=dims["ffn_hidden"], ffn_hidden=reader.num("moe_intermediate_size", "ffn_hidden"),
                dense_layers=dense)
    return _window_qwen(reader, dims)


def _llama(reader: HfReader) -> dict[str, Any]:
    reader.refuse_true("attention_bias", "mlp_bias")
    return _core(reader)


def _mistral(reader: HfReader) -> dict[str, Any]:
    return _window_all(reader, _core(reader))


def _mixtral(reader: HfReader) -> dict[str, Any]:
    return _experts(reader, _window_all(reader, _core(reader)), "num_local_experts")


def _qwen2(reader: HfReader) -> dict[str, Any]:
    return _window_qwen(reader, _core(reader) | {"qkv_bias": True})


def _qwen2_moe(reader: HfReader) -> dict[str, Any]:
    """Qwen2-MoE: q/k/v biases; a shared expert of shared_expert_intermediate_size with a
    sigmoid gate (Linear h -> 1) in every sparse layer (Qwen2MoeSparseMoeBlock)."""
    dims = _qwen_moe(reader, _core(reader) | {"qkv_bias": True})
    shared = reader.num("shared_expert_intermediate_size", "ffn_hidden", required=False) or 0
    dims.update(shared_expert_ffn=shared, shared_expert_gate=shared > 0)
    return dims


def _qwen3(reader: HfReader) -> dict[str, Any]:
    """Qwen3: q_norm and k_norm (RMSNorm of head_dim) per head; head_dim defaults to 128
    (Qwen3Config(head_dim=128))."""
    reader.refuse_true("attention_bias")
    return _window_qwen(reader, _core(reader, head_dim_default=128) | {"qk_norm": "head"})


def _qwen3_moe(reader: HfReader) -> dict[str, Any]:
    """Qwen3-MoE: Qwen3's attention, Qwen-MoE layers without a shared expert
    (Qwen3MoeConfig(head_dim=128))."""
    reader.refuse_true("attention_bias")
    return _qwen_moe(reader, _core(reader, head_dim_default=128) | {"qk_norm": "head"})


def _deepseek_v3(reader: HfReader) -> dict[str, Any]:
    """DeepSeek-V3: MLA; the first first_k_dense_replace layers dense (intermediate_size),
    then every moe_layer_freq-th layer an MoE of n_routed_experts (moe_intermediate_size)
    plus n_shared_experts shared ones as one MLP of n_shared x moe_intermediate_size, the
    router with its e_score_correction_bias (topk_method noaux_tc); num_nextn_predict_layers
    multi-token-prediction modules (ModelConfig.mtp_layers), trained with the main model as DeepSeek
    trained it (DeepSeek-V3 report, sec 2.2: one module; 14B of the checkpoint's 685B, their
    README_WEIGHTS.md, with its copies of the embedding and head, which training shares)."""
    reader.refuse_true("attention_bias")
    dims = _core(reader, head_dim_default=0)
    mla = Mla(q_lora_rank=reader.num("q_lora_rank", "hidden", required=False) or 0,
              kv_lora_rank=reader.num("kv_lora_rank", "hidden"),
              qk_nope_head_dim=reader.num("qk_nope_head_dim", "hidden"),
              qk_rope_head_dim=reader.num("qk_rope_head_dim", "hidden"), v_head_dim=reader.num("v_head_dim", "hidden"))
    _experts(reader, dims, "n_routed_experts")
    first = reader.num("first_k_dense_replace", "layer_index", default=0)
    freq = reader.num("moe_layer_freq", "num_layers", default=1)
    dense = tuple(i for i in range(dims["num_layers"]) if i < first or i % freq)
    shared = reader.num("n_shared_experts", "shared_experts", default=0)
    moe_ffn = reader.num("moe_intermediate_size", "ffn_hidden")
    # MLA gives every query head its own key and value: as many kv heads as heads
    dims.update(mla=mla, num_kv_heads=dims["num_heads"], attention_head_dim=0, dense_layers=dense,
                dense_ffn_hidden=dims["ffn_hidden"], ffn_hidden=moe_ffn, shared_expert_ffn=shared * moe_ffn,
                router_bias=reader.data.get("topk_method") == "noaux_tc",
                mtp_layers=reader.num("num_nextn_predict_layers", "mtp_layers", default=0),
                mtp_repeated=reader.flag("mtp_use_repeated_layer", False),
                mtp_bf16=reader.flag("keep_mtp_spec_in_bf16", False))
    return dims


def _kimi_k2(reader: HfReader) -> dict[str, Any]:
    """Kimi K2: DeepSeek-V3's architecture (its config names DeepseekV3ForCausalLM) with its own
    model_type, "to distinguish it from DeepSeek-V3" (Moonshot's deployment guide,
    github.com/MoonshotAI/Kimi-K2, docs/deploy_guidance.md): 384 experts, 64 heads, one dense layer."""
    return _deepseek_v3(reader)


# Gemma2Config / Gemma3TextConfig defaults (transformers/models/gemma2/configuration_gemma2.py,
# gemma3/configuration_gemma3.py), which Google's published configs rely on.
GEMMA_HEAD_DIM = 256
GEMMA2_WINDOW = 4096
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262_208, "head_dim": 256, "num_attention_heads": 8,
                        "num_key_value_heads": 4, "sliding_window": 4096, "sliding_window_pattern": 6}


def _gemma(reader: HfReader, dims: dict[str, Any]) -> dict[str, Any]:
    """Gemma 2/3: GeGLU MLP, a norm before and after attention and MLP (4 per block), the
    embedding tied to the LM head by default and scaled by sqrt(hidden) (no parameters);
    query_pre_attn_scalar and the logit soft-capping change values, not costs."""
    reader.refuse_true("attention_bias")
    dims.update(block_norms=4, tied_embeddings=reader.flag("tie_word_embeddings", True))
    return dims


def _gemma2(reader: HfReader) -> dict[str, Any]:
    """Gemma 2: even layers attend within sliding_window (default 4096), odd ones to all."""
    dims = _gemma(reader, _core(reader, head_dim_default=GEMMA_HEAD_DIM))
    window = reader.num("sliding_window", "max_positions", default=GEMMA2_WINDOW)
    dims["layer_windows"] = reader.layer_windows(dims["num_layers"], window, lambda i: i % 2 == 0)
    return dims


def _gemma3_text(reader: HfReader) -> dict[str, Any]:
    """Gemma 3: q/k norms per head; every sliding_window_pattern-th layer global, the rest
    windowed. Google's configs leave out the Gemma3TextConfig defaults above."""
    d = GEMMA3_TEXT_DEFAULTS
    data = dict(reader.data)
    for key in ("vocab_size", "num_attention_heads", "num_key_value_heads"):
        data.setdefault(key, d[key])
    reader = HfReader(data, reader.where, reader.prefix)
    dims = _gemma(reader, _core(reader, head_dim_default=d["head_dim"]) | {"qk_norm": "head"})
    window = reader.num("sliding_window", "max_positions", default=d["sliding_window"])
    pattern = reader.num("sliding_window_pattern", "num_layers", default=d["sliding_window_pattern"])
    dims["layer_windows"] = reader.layer_windows(dims["num_layers"], window, lambda i: (i + 1) % pattern != 0)
    return dims


def _gemma3(reader: HfReader) -> dict[str, Any]:
    """Gemma 3 multimodal checkpoints: the language model is text_config; the SigLIP vision
    tower and the projector are not priced (no image tokens are modelled)."""
    text = reader.data.get("text_config")
    if not isinstance(text, dict):
        raise BadInput("missing the text_config mapping", reader.where, reader.prefix + "text_config")
    return _gemma3_text(HfReader(text, reader.where, reader.prefix + "text_config."))


def _phi3(reader: HfReader) -> dict[str, Any]:
    """Phi-3: fused qkv_proj and gate_up_proj hold the same weights as separate ones."""
    reader.refuse_true("attention_bias")
    dropout = any([reader.rate("attention_dropout") > 0, reader.rate("resid_pdrop") > 0])
    return _window_all(reader, _core(reader) | {"dropout": dropout})


def _olmo2(reader: HfReader) -> dict[str, Any]:
    """OLMo 2: norms after attention and MLP instead of before (2 per block); q_norm and
    k_norm over the whole q and k projections."""
    reader.refuse_true("attention_bias")
    return _core(reader) | {"qk_norm": "proj"}


# GptOssConfig defaults (transformers/models/gpt_oss/configuration_gpt_oss.py)
GPT_OSS_DEFAULTS = {"head_dim": 64, "num_key_value_heads": 8, "sliding_window": 128}


def _gpt_oss(reader: HfReader) -> dict[str, Any]:
    """GPT-OSS (OpenAI's gpt-oss model card, arXiv 2508.10925; transformers modeling_gpt_oss.py):
    biases on q, k, v and o (GptOssConfig sets attention_bias true), a learned attention sink per
    head (GptOssAttention.sinks); even layers attend within sliding_window, odd ones to all
    (GptOssConfig's layer_types); every layer an MoE of num_local_experts SwiGLU experts with
    biased gate_up and down projections (GptOssExperts) and a biased router (GptOssTopKRouter).
    swiglu_limit clamps values and YaRN rescales positions: neither changes a cost."""
    d = GPT_OSS_DEFAULTS
    reader = HfReader({"num_key_value_heads": d["num_key_value_heads"]} | dict(reader.data), reader.where,
                     reader.prefix)
    dims = _experts(reader, _core(reader, head_dim_default=d["head_dim"]), "num_local_experts")
    window = reader.num("sliding_window", "max_positions", default=d["sliding_window"])
    dims.update(linear_bias=True, router_bias=True, attention_sinks=True,
                layer_windows=reader.layer_windows(dims["num_layers"], window, lambda i: i % 2 == 0))
    return dims


def _nemotron_h(reader: HfReader) -> dict[str, Any]:
    """Nemotron-H and Nemotron 3 (transformers configuration_nemotron_h.py, megatron-core's hybrid
    models): hybrid_override_pattern gives each layer one of a Mamba-2 mixer (M), attention (*), a
    dense MLP (-, intermediate_size) or an MoE (E) of n_routed_experts (moe_intermediate_size) with
    n_shared_experts x moe_shared_expert_intermediate_size always on and a biased router; one RMSNorm
    per layer; non-gated squared-ReLU MLPs (mlp_hidden_act relu2). Nemotron 3 Super: latent experts
    (moe_latent_size, ModelConfig.moe_latent) and num_nextn_predict_layers multi-token-prediction
    modules of the layers mtp_hybrid_override_pattern lists (ModelConfig.mtp_pattern)."""
    reader.refuse_true("attention_bias", "mlp_bias")
    if reader.data.get("mtp_num_layers"):  # (megatron's name; the HF config says num_nextn_predict_layers)
        raise BadInput("is not a nemotron_h key: num_nextn_predict_layers gives the MTP modules", reader.where,
                       reader.prefix + "mtp_num_layers")
    pattern = reader.data.get("hybrid_override_pattern")
    dims = _core(reader, head_dim_default=None) | {"gated_mlp": False, "block_norms": 1}
    layers = dims["num_layers"]
    if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set("M*-E"):
        raise BadInput(f"must give each of the {layers} layers one of M, *, -, E", reader.where,
                       reader.prefix + "hybrid_override_pattern")
    mamba = read_mamba(reader)
    if mamba.heads % mamba.groups:
        raise BadInput(f"{mamba.heads} Mamba heads are not a multiple of {mamba.groups} groups", reader.where,
                       reader.prefix + "n_groups")
    dims.update(mamba=mamba, layer_pattern=pattern, dense_ffn_hidden=dims["ffn_hidden"],
                attention_head_dim=dims["attention_head_dim"] or dims["hidden"] // dims["num_heads"],
                dense_layers=tuple(i for i, kind in enumerate(pattern) if kind == "-"))
    mtp = _hybrid_mtp(reader)
    dims.update(mtp)
    if "E" in pattern + mtp.get("mtp_pattern", ""):
        _experts(reader, dims, "n_routed_experts")
        shared = reader.num("n_shared_experts", "shared_experts", default=1)
        dims.update(ffn_hidden=reader.num("moe_intermediate_size", "ffn_hidden"), router_bias=True,
                    shared_expert_ffn=shared * reader.num("moe_shared_expert_intermediate_size", "ffn_hidden",
                                                          default=0),
                    moe_latent=reader.num("moe_latent_size", "ffn_hidden", default=0))
        if dims["moe_latent"] >= dims["hidden"]:
            raise BadInput(f"must be below hidden_size {dims['hidden']}", reader.where, reader.prefix + "moe_latent_size")
    elif reader.data.get("moe_latent_size"):
        raise BadInput("is given without an MoE layer (E) in the pattern", reader.where, reader.prefix + "moe_latent_size")
    return dims


def _hybrid_mtp(reader: HfReader) -> dict[str, Any]:
    """A hybrid model's multi-token-prediction modules: num_nextn_predict_layers of them, each the
    layers of mtp_hybrid_override_pattern (at most one mixer, M or *, and one MLP, - or E)."""
    count = reader.num("num_nextn_predict_layers", "mtp_layers", default=0)
    if not count:
        return {}
    key = reader.prefix + "mtp_hybrid_override_pattern"
    pattern = reader.data.get("mtp_hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern or set(pattern) - set("M*-E") \
            or sum(kind in "M*" for kind in pattern) > 1 or sum(kind in "-E" for kind in pattern) > 1:
        raise BadInput("must give each MTP module's layers: at most one of M, * and one of -, E (e.g. \"*E\")",
                       reader.where, key)
    return {"mtp_layers": count, "mtp_pattern": pattern, "mtp_repeated": reader.flag("mtp_use_repeated_layer", False),
            "mtp_bf16": reader.flag("keep_mtp_spec_in_bf16", False)}


# Llama4TextConfig's defaults (transformers/models/llama4/configuration_llama4.py)
LLAMA4_NO_ROPE_INTERVAL = 4


def _llama4_text(reader: HfReader) -> dict[str, Any]:
    """Llama 4 (transformers modeling_llama4.py): the MoE layers (`moe_layers`, else every
    interleave_moe_layer_step-th) hold num_local_experts SwiGLU experts of intermediate_size, top-k
    by a bias-free router, and a shared expert of the same width; the other layers a dense SwiGLU MLP
    of intermediate_size_mlp. Layers with RoPE (`no_rope_layers` 1; by default all but every 4th)
    attend in chunks of attention_chunk_size tokens, the others (NoPE) to the whole sequence. The
    q/k L2 norm (use_qk_norm, qk_norm "l2") and the NoPE layers' temperature tuning hold no
    parameters; their elementwise work is not priced."""
    reader.refuse_true("attention_bias")
    dims = _experts(reader, _core(reader), "num_local_experts")
    layers = dims["num_layers"]
    step = reader.num("interleave_moe_layer_step", "num_layers", default=1)
    moe = (reader.index_list("moe_layers", layers) if reader.has("moe_layers")
           else tuple(i for i in range(layers) if (i + 1) % step == 0))
    rope = reader.data.get("no_rope_layers")
    if rope is None:
        rope = [int((i + 1) % LLAMA4_NO_ROPE_INTERVAL != 0) for i in range(layers)]
    if not isinstance(rope, list) or len(rope) != layers or any(r not in (0, 1) for r in rope):
        raise BadInput(f"must list {layers} values of 0 or 1", reader.where, reader.prefix + "no_rope_layers")
    chunk = reader.num("attention_chunk_size", "max_positions", required=False) or 0
    dims.update(qk_norm="l2" if reader.flag("use_qk_norm", True) else "none",
                dense_layers=tuple(i for i in range(layers) if i not in moe), shared_expert_ffn=dims["ffn_hidden"],
                dense_ffn_hidden=reader.num("intermediate_size_mlp", "ffn_hidden"),
                layer_chunks=tuple(chunk if r else 0 for r in rope) if chunk and any(rope) else ())
    return dims


def _llama4(reader: HfReader) -> dict[str, Any]:
    """Llama 4 checkpoints (Llama4ForConditionalGeneration): the language model is text_config; the
    vision encoder and projector are not priced; tie_word_embeddings sits at the top level."""
    text = reader.data.get("text_config")
    if not isinstance(text, dict):
        raise BadInput("missing the text_config mapping", reader.where, reader.prefix + "text_config")
    dims = _llama4_text(HfReader(text, reader.where, reader.prefix + "text_config."))
    return dims | {"tied_embeddings": reader.flag("tie_word_embeddings", False)}


def _gpt2(reader: HfReader) -> dict[str, Any]:
    hidden = reader.first(("n_embd", "hidden_size"), "hidden")
    heads = reader.first(("n_head", "num_attention_heads"), "num_heads")
    if hidden % heads:
        raise BadInput(f"hidden size {hidden} is not a multiple of the {heads} heads", reader.where,
                       "num_attention_heads")
    return dict(hidden=hidden, num_layers=reader.first(("n_layer", "num_hidden_layers"), "num_layers"),
                num_heads=heads, num_kv_heads=heads, vocab=reader.num("vocab_size", "vocab"),
                max_positions=reader.first(("n_positions", "max_position_embeddings"), "max_positions"),
                ffn_hidden=reader.num("n_inner", "ffn_hidden", default=4 * hidden),  # GPT2Config: null is 4h
                gated_mlp=False, tied_embeddings=reader.flag("tie_word_embeddings", True), norm="layernorm",
                linear_bias=True, learned_positions=True,
                dropout=any([reader.rate(k) > 0 for k in ("resid_pdrop", "attn_pdrop", "embd_pdrop")]))  # check all


def _gpt_neox(reader: HfReader) -> dict[str, Any]:
    dims = _core(reader)
    if dims["attention_head_dim"]:
        raise BadInput("head_dim is not a GPT-NeoX field", reader.where, "head_dim")
    return dims | dict(gated_mlp=False, norm="layernorm", linear_bias=True,
                       dropout=reader.rate("hidden_dropout") > 0)


READERS: dict[str, Callable[[HfReader], dict[str, Any]]] = {
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "llama": _llama, "mistral": _mistral, "mixtral": _mixtral,
    "qwen2": _qwen2, "qwen2_moe": _qwen2_moe, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3, "kimi_k2": _kimi_k2, "gemma2": _gemma2, "gemma3": _gemma3, "gemma3_text": _gemma3_text,
    "phi3": _phi3, "olmo2": _olmo2, "gpt_oss": _gpt_oss, "nemotron_h": _nemotron_h, "llama4": _llama4,
    "llama4_text": _llama4_text}
assert set(READERS) == set(SUPPORTED_TYPES)


# mixtral/gpt_oss, qwen*_moe, deepseek_v3/kimi_k2/nemotron_h
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
MOE_TYPE_OF = {"llama": "mixtral", "mistral": "mixtral", "qwen2": "qwen2_moe", "qwen3": "qwen3_moe"}


def _refuse_experts_in_dense(data: Mapping[str, Any], mtype: str, where: str) -> None:
    """Bad input for an expert count above 1 in a dense family's config (transformers builds no
    experts from it: the planner would price a mixture of experts as dense)."""
    for key in (k for k in EXPERT_KEYS if type(data.get(k)) is int and data[k] > 1):
        hint = (f"model_type {MOE_TYPE_OF[mtype]}" if mtype in MOE_TYPE_OF
                else "a mixture-of-experts model_type (mixtral, qwen2_moe, qwen3_moe, deepseek_v3, gpt_oss)")
        raise BadInput(f"{data[key]} experts in a {mtype} config: {mtype} is dense (its transformers model builds "
                       f"no experts), so it would be planned as a dense model; for a mixture of experts use {hint}",
                       where, key)


def hf_dimensions(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ModelConfig fields (all but the name) of a parsed Hugging Face config.json."""
    mtype = data.get("model_type")
    if not isinstance(mtype, str):
        raise BadInput("missing model_type", where, "model_type")
    if mtype not in READERS:
        raise BadInput(f"unsupported model_type {mtype!r}; supported: {', '.join(SUPPORTED_TYPES)}",
                       where, "model_type")
    dims = READERS[mtype](HfReader(data, where))
    if not dims.get("num_experts") and not dims.get("layer_pattern"):  # a hybrid's pattern says where experts are
        _refuse_experts_in_dense(data, mtype, where)
    if dims["num_heads"] % dims["num_kv_heads"]:
        raise BadInput(f"{dims['num_heads']} heads are not a multiple of {dims['num_kv_heads']} key/value heads",
                       where, "num_key_value_heads")
    return dims | {"model_type": mtype}
