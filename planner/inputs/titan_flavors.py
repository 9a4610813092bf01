"""torchtitan's built-in model flavours (llama3, deepseek_v3, qwen3, llama4, gpt_oss), matched by a
model's dimensions (never by its name).

torchtitan 0.2.x builds a model from `[model] name` and `flavor` alone: the job config has no
keys for explicit dimensions, so a model is exportable only when it IS one of the flavours of
its model packages (`torchtitan.models.<name>`). Their dimensions are copied here (torchtitan is an
optional extra); the llama3 FFN width is what torchtitan's FeedForward computes from `multiple_of`
and `ffn_dim_multiplier`. tests/test_export.py, tests/test_titan_deepseek.py and
tests/test_titan_families.py check these tables against the installed torchtitan when it can be
imported (for the catalog's models of each family, the parameter count of torchtitan's model built
on the meta device).
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Callable

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


# the ModelConfig dimensions a flavour of torchtitan's qwen3, llama4 and gpt_oss packages fixes
# (ffn_hidden: the experts' width in an MoE model, the MLP's in a dense one)
SHAPE_FIELDS = ("hidden", "num_layers", "num_heads", "num_kv_heads", "attention_head_dim", "ffn_hidden",
                "shared_expert_ffn", "num_experts", "experts_top_k", "vocab", "tied_embeddings")
Shape = namedtuple("Shape", SHAPE_FIELDS)


def shape_of(config: ModelConfig) -> Shape:
    return Shape(*(getattr(config, name) for name in SHAPE_FIELDS))


def _plain_block(config: ModelConfig) -> bool:
    """RMSNorm, SwiGLU, rotary positions, two norms per block, every layer the same FFN kind, none of
    MLA, Mamba, multi-token prediction or a gated shared expert."""
    return (config.gated_mlp and config.norm == "rmsnorm" and not config.learned_positions and config.mla is None
            and config.mamba is None and not config.mtp_layers and not config.dense_layers
            and config.block_norms == 2 and not config.shared_expert_gate)


def _qwen3_block(config: ModelConfig) -> bool:
    """torchtitan models/qwen3: per-head q/k RMSNorm, no biases, full causal attention, dense or
    every layer MoE without shared experts."""
    return (config.model_type in ("qwen3", "qwen3_moe") and _plain_block(config) and config.qk_norm == "head"
            and not config.linear_bias and not config.qkv_bias and not config.router_bias
            and not config.attention_sinks and not config.window and not config.layer_windows
            and not config.attention_chunk and not config.layer_chunks and config.shared_expert_ffn == 0)


def _llama4_block(config: ModelConfig) -> bool:
    """torchtitan models/llama4, the iRoPE flavours: every layer MoE with a shared expert, attention
    chunked at fixed_attn_block_size 8192 on three layers of every four (every_n_layers_nope 4)."""
    chunks = config.layer_chunks
    return (config.model_type == "llama4" and _plain_block(config) and not config.linear_bias
            and not config.qkv_bias and not config.attention_sinks and not config.layer_windows
            and len(chunks) == config.num_layers and sorted(set(chunks)) == [0, 8192]
            and sum(1 for c in chunks if c == 0) * 4 == config.num_layers)


def _gpt_oss_block(config: ModelConfig) -> bool:
    """torchtitan models/gpt_oss: attention sinks, biased linears and router, a 128-token sliding
    window on the even layers (GptOssModelArgs.sliding_window_size, layer_id % 2 == 0)."""
    windows = config.layer_windows
    return (config.model_type == "gpt_oss" and _plain_block(config) and config.attention_sinks
            and config.linear_bias and config.router_bias and config.qk_norm == "none"
            and windows == tuple(128 if i % 2 == 0 else 0 for i in range(config.num_layers)))


@dataclass(frozen=True)
class TitanFamily:
    """One of torchtitan 0.2.2's model packages, `[model] name`, beside llama3 and deepseek_v3."""

    name: str
    flavors: dict[str, Shape]
    architecture: Callable[[ModelConfig], bool]  # its block, beside the flavour's dimensions
    pipelines: bool  # its TrainSpec has a pipelining_fn (torch.distributed.pipelining)
    constants: str  # what its flavours fix that neither the job config nor the plan sets


def _qwen3(hidden, layers, heads, kv, ffn, tied=False, experts=1, top_k=1) -> Shape:
    return Shape(hidden, layers, heads, kv, 128, ffn, 0, experts, top_k, 151936, tied)


def _gpt_oss(layers, experts) -> Shape:
    return Shape(2880, layers, 64, 8, 64, 2880, 0, experts, 4, 201088, False)


# torchtitan 0.2.2 models/qwen3/__init__.py qwen3_args, models/llama4/__init__.py llama4_args,
# models/gpt_oss/__init__.py gptoss_configs (the debug flavours left out)
TITAN_FAMILIES = (
    TitanFamily("qwen3", {
        "0.6B": _qwen3(1024, 28, 16, 8, 3072, tied=True), "1.7B": _qwen3(2048, 28, 16, 8, 6144, tied=True),
        "4B": _qwen3(2560, 36, 32, 8, 9728, tied=True), "8B": _qwen3(4096, 36, 32, 8, 12288),
        "14B": _qwen3(5120, 40, 40, 8, 17408), "32B": _qwen3(5120, 64, 64, 8, 25600),
        "30B-A3B": _qwen3(2048, 48, 32, 4, 768, experts=128, top_k=8),
        "235B-A22B": _qwen3(4096, 94, 64, 4, 1536, experts=128, top_k=8)},
        _qwen3_block, pipelines=False,  # Qwen3's TrainSpec: pipelining_fn=None
        constants="the rotary base, the norm eps and the routing (softmax top-k renormalised, an "
                  "auxiliary-loss-free balancing bias in place of the checkpoint's auxiliary loss)"),
    TitanFamily("llama4", {"17bx16e_irope": Shape(5120, 48, 40, 8, 128, 8192, 8192, 16, 1, 202048, False)},
                _llama4_block, pipelines=True,
                constants="the rotary scaling, the NoPE layers' places (layer_id % 4 == 0; the checkpoint's are "
                          "layer_id % 4 == 3), no q/k L2 norm or attention temperature tuning, document-causal "
                          "(block_causal) masks through flex attention, and the routing"),
    TitanFamily("gpt_oss", {"20b": _gpt_oss(24, 32), "120b": _gpt_oss(36, 128)}, _gpt_oss_block,
                pipelines=False,  # GPT-OSS's TrainSpec: pipelining_fn=None
                constants="the rotary (YaRN) constants, the SwiGLU clamp, flex attention and the routing"),
)


def titan_family(config: ModelConfig) -> tuple[TitanFamily, str] | None:
    """The family and flavour of qwen3, llama4 or gpt_oss whose block and dimensions are the model's,
    or None."""
    shape = shape_of(config)
    for family in TITAN_FAMILIES:
        if family.architecture(config):
            for flavor, flavor_shape in family.flavors.items():
                if flavor_shape == shape:
                    return family, flavor
    return None


def titan_flavor(config: ModelConfig, model_name: str) -> tuple[str, str]:
    """(torchtitan model name, flavour) whose dimensions are the model's: a llama3 flavour, for
    DeepSeek-V3's architecture a deepseek_v3 one, or one of TITAN_FAMILIES; BadInput when none is."""
    found = titan_family(config)
    if found is not None:
        return found[0].name, found[1]
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
                   f"({shape}) is none of its llama3 flavours ({', '.join(TITAN_LLAMA3_FLAVORS)}), deepseek_v3 "
                   f"ones ({', '.join(TITAN_DEEPSEEK_V3_FLAVORS)}) or "
                   + ", ".join(f"{f.name} ones ({', '.join(f.flavors)})" for f in TITAN_FAMILIES) + "; "
                   "export --to rankmap, or register a TrainSpec in torchtitan and write its [model]",
                   "--to torchtitan")


def titan_model_problem(model: Model) -> str:
    """Why torchtitan cannot build `model` (as `export --to torchtitan` and `plan --runtime torchtitan`
    say it), '' when it can: a layer profile without a config, no llama3 flavour of its dimensions,
    or rotary and norm constants a llama3 flavour fixes otherwise (its job config cannot set them; the
    other families' constants are said in the exported file)."""
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
