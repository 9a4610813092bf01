"""torchtitan's built-in llama3 flavours, matched by a model's dimensions (never by its name).

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
                   f"({shape}) is none of its llama3 flavours ({', '.join(TITAN_LLAMA3_FLAVORS)}); "
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
        flavor = titan_llama3_flavor(c, model.name)
    except BadInput as exc:
        return exc.message
    extra = rope_and_norm(model.raw, c.model_type, model.name)
    if (extra.rope_theta, extra.norm_eps) != (TITAN_LLAMA3_ROPE_THETA, TITAN_LLAMA3_NORM_EPS):
        return (f"torchtitan's llama3 flavour {flavor} has rope_theta {TITAN_LLAMA3_ROPE_THETA:g} and "
                f"norm eps {TITAN_LLAMA3_NORM_EPS:g}; the model {model.name!r} has {extra.rope_theta:g} and "
                f"{extra.norm_eps:g} (the job config cannot set them)")
    return ""
