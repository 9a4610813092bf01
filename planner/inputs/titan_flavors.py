"""torchtitan's built-in llama3 and deepseek_v3 flavours, matched by a model's dimensions (never by its name).

torchtitan 0.2.x builds a model from `[model] name` and `flavor` alone: the job config has no
keys for explicit dimensions, so a model is exportable only when it IS one of the flavours of
`torchtitan.models.llama3.llama3_args`. Their dimensions are copied here (torchtitan is an
optional extra); the FFN width is what torchtitan's FeedForward computes from `multiple_of`
and `ffn_dim_multiplier`. tests/test_export.py checks this table against the installed
torchtitan when it can be imported.
"""

from __future__ import annotations

from collections import namedtuple

from ..core.errors import BadInput
from .hf_extras import rope_and_norm
from .model import Model, ModelConfig


# the ModelConfig dimensions a torchtitan llama3 flavour fixes (its TransformerModelArgs)
FLAVOR_DIMENSIONS = ("hidden", "num_layers", "num_heads", "num_kv_heads", "ffn_hidden", "vocab")
Flavor = namedtuple("Flavor", FLAVOR_DIMENSIONS)


# torchtitan 0.2.2, models/llama3/__init__.py (the *_flex / *_varlen variants differ only in
# attention kernels; the plain flavour is the one exported)
TITAN_LLAMA3_FLAVORS = {
    "debugmodel": Flavor(hidden=256, num_layers=6, num_heads=16, num_kv_heads=16, ffn_hidden=768, vocab=2048),
    "8B": Flavor(hidden=4096, num_layers=32, num_heads=32, num_kv_heads=8, ffn_hidden=14336, vocab=128256),
    "70B": Flavor(hidden=8192, num_layers=80, num_heads=64, num_kv_heads=8, ffn_hidden=28672, vocab=128256),
    "405B": Flavor(hidden=16384, num_layers=126, num_heads=128, num_kv_heads=8, ffn_hidden=53248,
                   vocab=128256),
}


# what every llama3 flavour of torchtitan 0.2.2 sets beyond the dimensions (TransformerModelArgs:
# rope_theta, norm_eps, rope_scaling_args = RoPEScalingArgs(): Llama 3.1's rule)
TITAN_LLAMA3_ROPE_THETA = 500000.0
TITAN_LLAMA3_NORM_EPS = 1e-5
TITAN_LLAMA3_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192}


def dims_of(config: ModelConfig) -> Flavor:
    return Flavor(*(getattr(config, name) for name in FLAVOR_DIMENSIONS))


def llama3_architecture(config: ModelConfig) -> bool:
    """torchtitan's llama3 Transformer: RMSNorm, SwiGLU, rotary positions, untied output, no
    biases, dense MLPs."""
    return (config.gated_mlp and not config.tied_embeddings and config.norm == "rmsnorm" and not config.linear_bias
            and not config.qkv_bias and config.num_experts == 1 and not config.learned_positions
            and config.q_dim == config.hidden and config.qk_norm == "none" and config.block_norms == 2
            and config.mla is None and not config.layer_windows and not config.dense_layers)


# torchtitan 0.2.2, models/deepseek_v3/__init__.py: its 671B flavour, DeepSeek-V3 as its config.json has
# it without the multi-token-prediction module, which torchtitan does not build (its 16B and 236B flavours
# are DeepSeek-V2 shapes, model_type deepseek_v2, which the planner does not read)
DSV3_DIMENSIONS = ("hidden", "num_layers", "num_heads", "ffn_hidden", "dense_ffn_hidden", "dense_layers",
                   "num_experts", "experts_top_k", "shared_expert_ffn", "vocab", "q_lora_rank", "kv_lora_rank",
                   "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
Dsv3Flavor = namedtuple("Dsv3Flavor", DSV3_DIMENSIONS)
TITAN_DEEPSEEK_V3_FLAVORS = {
    "671B": Dsv3Flavor(hidden=7168, num_layers=61, num_heads=128, ffn_hidden=2048, dense_ffn_hidden=18432,
                       dense_layers=3, num_experts=256, experts_top_k=8, shared_expert_ffn=2048, vocab=129280,
                       q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
}


def dsv3_dims_of(config: ModelConfig) -> Dsv3Flavor | None:
    """A DeepSeek-V3-architecture config's Dsv3Flavor dimensions (None for another architecture, or one
    with MTP modules or non-leading dense layers, which torchtitan's DeepSeekV3Model does not build)."""
    m = config.mla
    leading = config.dense_layers == tuple(range(len(config.dense_layers)))
    if config.model_type != "deepseek_v3" or m is None or config.mtp_layers or not leading:
        return None
    return Dsv3Flavor(config.hidden, config.num_layers, config.num_heads, config.ffn_hidden, config.dense_ffn_hidden,
                      len(config.dense_layers), config.num_experts, config.experts_top_k, config.shared_expert_ffn,
                      config.vocab, m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim,
                      m.v_head_dim)


def titan_flavor(config: ModelConfig, model_name: str) -> tuple[str, str]:
    """(torchtitan model name, flavour) whose dimensions are the model's: a llama3 flavour, or for
    DeepSeek-V3's architecture a deepseek_v3 one; BadInput when none is."""
    dims = dsv3_dims_of(config)
    if dims is not None:
        for flavor, flavor_dims in TITAN_DEEPSEEK_V3_FLAVORS.items():
            if flavor_dims == dims:
                return "deepseek_v3", flavor
        raise BadInput(f"torchtitan builds models only as named flavours, and the model {model_name!r} (a "
                       f"deepseek_v3 architecture, hidden {dims.hidden}, {dims.num_layers} layers, {dims.num_experts} "
                       f"experts) is none of its deepseek_v3 flavours ({', '.join(TITAN_DEEPSEEK_V3_FLAVORS)}); "
                       "export --to rankmap, or register a TrainSpec in torchtitan and write its [model]",
                       "--to torchtitan")
    return "llama3", titan_llama3_flavor(config, model_name)


def titan_llama3_flavor(config: ModelConfig, model_name: str) -> str:
    """The torchtitan llama3 flavour whose dimensions are the model's; BadInput when none is."""
    dims = dims_of(config)
    if llama3_architecture(config):
        for flavor, flavor_dims in TITAN_LLAMA3_FLAVORS.items():
            if flavor_dims == dims:
                return flavor
    shape = (f"hidden {dims.hidden}, {dims.num_layers} layers, {dims.num_heads} heads, {dims.num_kv_heads} "
             f"kv heads, ffn {dims.ffn_hidden}, vocab {dims.vocab}"
             + ("" if llama3_architecture(config) else f", a {config.model_type} architecture"))
    raise BadInput(f"torchtitan builds models only as named flavours, and the model {model_name!r} "
                   f"({shape}) is none of its llama3 flavours ({', '.join(TITAN_LLAMA3_FLAVORS)}) or deepseek_v3 "
                   f"ones ({', '.join(TITAN_DEEPSEEK_V3_FLAVORS)}); "
                   "export --to rankmap, or register a TrainSpec in torchtitan and write its [model]",
                   "--to torchtitan")


def titan_model_problem(model: Model) -> str:
    """Why torchtitan cannot build `model` (as `export --to torchtitan` and `plan --runtime torchtitan`
    say it), '' when it can: a layer profile without a config, no llama3 flavour of its dimensions,
    or rotary and norm constants the flavour fixes otherwise (its job config cannot set them)."""
    c = model.config
    if c is None:
        return "the plan's model is a layer profile without a config: torchtitan needs a model name and flavor"
    try:
        name, flavor = titan_flavor(c, model.name)
    except BadInput as exc:
        return exc.message
    if name != "llama3":  # its rotary and routing constants are said in the exported file (export.torchtitan)
        return ""
    extra = rope_and_norm(model.raw, c.model_type, model.name)
    if (extra.rope_theta, extra.norm_eps) != (TITAN_LLAMA3_ROPE_THETA, TITAN_LLAMA3_NORM_EPS):
        return (f"torchtitan's llama3 flavour {flavor} has rope_theta {TITAN_LLAMA3_ROPE_THETA:g} and "
                f"norm eps {TITAN_LLAMA3_NORM_EPS:g}; the model {model.name!r} has {extra.rope_theta:g} and "
                f"{extra.norm_eps:g} (the job config cannot set them)")
    return ""
