"""Cross-check the analytic layer model against real PyTorch modules (needs torch).

Every catalog model is shrunk (2 layers, head dim 32, vocab 1000, FFN scaled with the
hidden size, the query/key-value head ratio kept, Mixtral with 4 experts, top-2) and each
distinct layer is built with `planner.calibrate.torch_layers.build_layer`; its parameter count must
match `Layer.weight_params` and the FLOPs that `FlopCounterMode` sees in one forward must
match `Layer.fwd_flops_per_sample` (and the tp=2 shard must match `Layer.gemms(s, 2)`).
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("PLANNER_REQUIRE_TORCH"):  # `make test` installs torch: a missing one is a failure
    import torch
else:
    torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from planner.inputs.model import ModelConfig, catalog_names, load_model, model_from_dict  # noqa: E402
from planner.inputs.model_families import PROFILED_TYPES  # noqa: E402
from planner.calibrate.torch_layers import build_layer  # noqa: E402

from .conftest import hf_config  # noqa: E402

SEQ = 64
HEAD_DIM = 32
VOCAB = 1000
PARAM_REL = 1e-3
FLOP_REL = 0.02


def small_hf(name: str) -> dict:
    """The catalog config with the same architecture at toy size."""
    cfg = hf_config(name)
    mtype = cfg["model_type"]
    if mtype == "gpt2":
        hidden, heads = cfg["n_embd"], cfg["n_head"]
        kv = heads
        ffn = cfg.get("n_inner") or 4 * hidden
    else:
        hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or heads
        ffn = cfg["intermediate_size"]
    ratio = heads // kv
    small_kv = 4 if ratio == 1 else 2  # >= 2 key/value heads so that tp=2 splits them
    small_heads = small_kv * ratio
    small_hidden = small_heads * HEAD_DIM
    small_ffn = 2 * round(ffn * small_hidden / hidden / 2)  # even: splits over tp=2
    if mtype == "gpt2":
        cfg.update(n_embd=small_hidden, n_head=small_heads, n_layer=2, n_positions=128,
                   n_inner=small_ffn, vocab_size=VOCAB)
    else:
        cfg.update(hidden_size=small_hidden, num_attention_heads=small_heads, num_hidden_layers=2,
                   intermediate_size=small_ffn, vocab_size=VOCAB, max_position_embeddings=128)
        if "num_key_value_heads" in cfg or ratio > 1:
            cfg["num_key_value_heads"] = small_kv
    if mtype == "mixtral":
        cfg.update(num_local_experts=4, num_experts_per_tok=2)
    if "head_dim" in cfg:
        cfg["head_dim"] = HEAD_DIM
    return cfg


def small_model(name: str):
    return model_from_dict(small_hf(name), name)


def layer_of(model, kind: str):
    return next(layer for layer in model.layers if layer.kind == kind)


def build(name: str, kind: str, tp: int = 1, **kwargs):
    torch.manual_seed(0)
    model = small_model(name)
    extra = {}
    if model.config.model_type == "gpt_neox":
        extra["rotary_pct"] = small_hf(name).get("rotary_pct", 1.0)
    return model, build_layer(model.config, kind, tp=tp, **extra, **kwargs)


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def example_input(config: ModelConfig, kind: str, batch: int = 1, seq: int = SEQ):
    if kind == "embedding":
        return torch.randint(0, config.vocab, (batch, seq))
    return torch.randn(batch, seq, config.hidden)


def counted_flops(module, x) -> int:
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(x)
    return counter.get_total_flops()


def replicated_params(config: ModelConfig, kind: str) -> int:
    """Parameters every TP rank holds whole: norms, row-parallel biases, router, positions."""
    h = config.hidden
    if kind == "embedding":
        return config.max_positions * h if config.learned_positions else 0
    if kind == "head":
        return config.norm_params
    rep = 2 * config.norm_params
    if config.linear_bias:
        rep += 2 * h  # attention-out and MLP-out biases
    if config.num_experts > 1:
        rep += h * config.num_experts  # router
    return rep


# the catalog models of the families torch_layers builds (the others are priced analytically only)
NAMES = [name for name in catalog_names() if load_model(name).config.model_type in PROFILED_TYPES]
KINDS = ("embedding", "decoder", "head")
CASES = [(name, kind) for name in NAMES for kind in KINDS]


def test_catalog_covers_every_profiled_model_type():
    assert {small_model(name).config.model_type for name in NAMES} == set(PROFILED_TYPES)


@pytest.mark.parametrize("name", NAMES)
def test_small_config_keeps_the_architecture(name):
    big, small = model_from_dict(hf_config(name), name).config, small_model(name).config
    for field in ("model_type", "gated_mlp", "tied_embeddings", "norm", "linear_bias", "qkv_bias",
                  "learned_positions"):
        assert getattr(small, field) == getattr(big, field), field
    assert small.num_heads // small.num_kv_heads == big.num_heads // big.num_kv_heads
    assert small.head_dim == HEAD_DIM and small.num_layers == 2 and small.vocab == VOCAB
    if big.num_experts > 1:
        assert (small.num_experts, small.experts_top_k) == (4, 2)


# --- (a) parameters ------------------------------------------------------------------------


@pytest.mark.parametrize("name,kind", CASES)
def test_parameter_count_matches_module(name, kind):
    model, module = build(name, kind)
    layer = layer_of(model, kind)
    # a tied head's `params` leaves out the shared matrix; the module holds it, as
    # `weight_params` (what the device running the head keeps) does
    assert n_params(module) == pytest.approx(layer.weight_params, rel=PARAM_REL)
    if not (kind == "head" and model.config.tied_embeddings):
        assert n_params(module) == pytest.approx(layer.params, rel=PARAM_REL)


# --- (b) forward FLOPs ---------------------------------------------------------------------


@pytest.mark.parametrize("name,kind", CASES)
def test_forward_flops_match_flop_counter(name, kind):
    model, module = build(name, kind)
    layer = layer_of(model, kind)
    measured = counted_flops(module, example_input(model.config, kind))
    expected = layer.fwd_flops_per_sample(SEQ)
    if kind == "embedding":
        assert measured == expected == 0
    else:
        assert measured == pytest.approx(expected, rel=FLOP_REL)


@pytest.mark.parametrize("name", NAMES)
def test_flops_scale_with_batch(name):
    model, module = build(name, "decoder")
    one = counted_flops(module, example_input(model.config, "decoder", batch=1))
    three = counted_flops(module, example_input(model.config, "decoder", batch=3))
    assert three == 3 * one


# --- (c) tensor parallelism ----------------------------------------------------------------


@pytest.mark.parametrize("name,kind", CASES)
def test_tp2_shard_flops_match_analytic_gemms(name, kind):
    model, module = build(name, kind, tp=2)
    layer = layer_of(model, kind)
    measured = counted_flops(module, example_input(model.config, kind))
    expected = sum(g.flops_per_sample(SEQ) for g in layer.gemms(SEQ, 2)) \
        + layer.attention_flops_per_sample(SEQ, 2, causal_skip=False)
    if kind == "embedding":
        assert measured == expected == 0
        return
    assert measured == pytest.approx(expected, rel=FLOP_REL)
    # about half of the tp=1 layer: everything but the replicated router is split
    full = layer.fwd_flops_per_sample(SEQ)
    router = 2 * SEQ * model.config.hidden * model.config.num_experts \
        if kind == "decoder" and model.config.num_experts > 1 else 0
    assert measured - router == pytest.approx((full - router) / 2, rel=FLOP_REL)


@pytest.mark.parametrize("name,kind", CASES)
def test_tp2_shard_holds_half_of_the_sharded_parameters(name, kind):
    model, module = build(name, kind, tp=2)
    full = n_params(build(name, kind)[1])
    rep = replicated_params(model.config, kind)
    assert n_params(module) == pytest.approx(rep + (full - rep) / 2, rel=PARAM_REL)
    assert n_params(module) < 0.6 * full


# --- the modules behave as layers ----------------------------------------------------------


@pytest.mark.parametrize("name,kind", CASES)
def test_output_shapes(name, kind):
    model, module = build(name, kind)
    c = model.config
    x = example_input(c, kind, batch=2)
    with torch.no_grad():
        y = module(x)
    expected = (2, SEQ, c.vocab) if kind == "head" else (2, SEQ, c.hidden)
    assert tuple(y.shape) == expected
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", NAMES)
def test_decoder_is_causal(name):
    model, module = build(name, "decoder")
    x = example_input(model.config, "decoder", seq=16)
    changed = x.clone()
    changed[:, 10:] += 1.0
    with torch.no_grad():
        a, b = module(x), module(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_moe_experts_see_only_their_routed_tokens():
    model, module = build("mixtral-8x7b", "decoder")
    c = model.config
    seen = []
    hooks = [e.gate.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[0]))
             for e in module.mlp.experts]
    with torch.no_grad():
        module(example_input(c, "decoder"))
    for hook in hooks:
        hook.remove()
    assert sum(seen) == c.experts_top_k * SEQ


def test_bf16_build_runs():
    model, module = build("llama-3-8b", "decoder", dtype=torch.bfloat16)
    x = example_input(model.config, "decoder").to(torch.bfloat16)
    with torch.no_grad():
        y = module(x)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == tuple(x.shape)


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError):
        build_layer(small_model("gpt2").config, "mlp")


def test_indivisible_heads_are_rejected():
    with pytest.raises(ValueError):
        build_layer(small_model("gpt2").config, "decoder", tp=3)
