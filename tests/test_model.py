"""Hand-checked model figures: parameter counts, forward FLOPs, activation bytes."""

from __future__ import annotations

import pytest
import yaml

from planner.model import Layer, catalog_names, load_model, model_from_dict

from .conftest import MODELS_DIR, hf_config

PUBLISHED = yaml.safe_load((MODELS_DIR / "published_params.yaml").read_text())


def decoder(model) -> Layer:
    return next(layer for layer in model.layers if layer.kind == "decoder")


def model_with(name: str, **changes):
    return model_from_dict(hf_config(name) | changes, name)


# --- parameter counts ----------------------------------------------------------------------


def test_every_catalog_model_has_a_published_count():
    assert sorted(PUBLISHED) == catalog_names()


@pytest.mark.parametrize("name", catalog_names())
def test_catalog_model_parameter_count_within_1_percent_of_published(name):
    published = PUBLISHED[name]["params"]
    assert load_model(name).params == pytest.approx(published, rel=0.01)


def test_gpt3_175b_has_174_6_billion_parameters():
    assert load_model("gpt3-175b").params == pytest.approx(174.6e9, rel=0.001)


def test_gpt3_175b_matches_narayanan_parameter_formula():
    # P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) (Narayanan et al. 2021, Table 1), plus
    # the final LayerNorm (2h) that the formula leaves out
    l, h, v, s = 96, 12288, 51200, 2048
    formula = 12 * l * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))
    assert load_model("gpt3-175b").params == pytest.approx(formula + 2 * h, rel=1e-12)


def test_gpt2_parameter_count_is_exactly_huggingface_count():
    assert load_model("gpt2").params == 124_439_808


def test_tied_embeddings_count_the_matrix_once():
    tied = load_model("gpt2")
    untied = model_with("gpt2", tie_word_embeddings=False)
    c = tied.config
    assert untied.params - tied.params == c.vocab * c.hidden
    head = tied.layers[-1]
    assert head.kind == "head"
    assert head.params == c.norm_params  # the shared matrix is counted by the embedding
    assert head.weight_params == c.norm_params + c.vocab * c.hidden  # but held where the head runs


def test_moe_counts_parameters_of_every_expert():
    mixtral = load_model("mixtral-8x7b")
    dense = model_with("mixtral-8x7b", num_local_experts=1, num_experts_per_tok=1)
    c = mixtral.config
    expert = 3 * c.hidden * c.ffn_hidden  # SwiGLU: gate, up, down
    router = c.hidden * c.num_experts
    assert c.num_experts == 8 and c.experts_top_k == 2
    assert decoder(mixtral).params - decoder(dense).params == 7 * expert + router
    assert mixtral.params == pytest.approx(46.7e9, rel=0.01)


def test_gqa_reduces_key_value_parameters():
    gqa = load_model("llama-3-8b")
    mha = model_with("llama-3-8b", num_key_value_heads=32)
    c = gqa.config
    assert c.num_kv_heads == 8 and c.kv_dim == 1024
    assert decoder(mha).params - decoder(gqa).params == 2 * c.hidden * (c.hidden - c.kv_dim)


# --- forward FLOPs ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpt2", "gpt2-xl", "gpt3-175b"])
@pytest.mark.parametrize("s", [512, 1024, 2048])
def test_gpt_layer_forward_flops_are_24sh2_plus_4s2h(name, s):
    layer = decoder(load_model(name))
    h = layer.config.hidden
    assert layer.fwd_flops_per_sample(s) == pytest.approx(24 * s * h**2 + 4 * s**2 * h, rel=1e-12)


def test_gpt3_model_forward_flops_match_narayanan_formula():
    # forward of the whole model: 24 s l h^2 (1 + s/(6h) + V/(12 l h)) per sample
    # (Narayanan et al. 2021, sec 5.1, divided by 3 for forward only)
    model = load_model("gpt3-175b")
    l, h, v, s = 96, 12288, 51200, 2048
    formula = 24 * s * l * h**2 * (1 + s / (6 * h) + v / (12 * l * h))
    assert model.fwd_flops_per_sample(s) == pytest.approx(formula, rel=1e-12)


def test_embedding_has_no_forward_flops_and_head_has_2svh():
    model = load_model("gpt2")
    c = model.config
    assert model.layers[0].fwd_flops_per_sample(1024) == 0
    assert model.layers[-1].fwd_flops_per_sample(1024) == 2 * 1024 * c.vocab * c.hidden


def test_moe_forward_flops_scale_with_top_k_not_expert_count():
    s = 4096
    top2 = decoder(load_model("mixtral-8x7b"))
    top1 = decoder(model_with("mixtral-8x7b", num_experts_per_tok=1))
    sixteen = decoder(model_with("mixtral-8x7b", num_local_experts=16))
    c = top2.config
    expert_flops = 2 * s * 3 * c.hidden * c.ffn_hidden  # one expert's SwiGLU forward
    assert top2.fwd_flops_per_sample(s) - top1.fwd_flops_per_sample(s) == pytest.approx(expert_flops)
    # doubling the experts at the same top-k only grows the router GEMM (2 s h E)
    assert sixteen.fwd_flops_per_sample(s) - top2.fwd_flops_per_sample(s) == pytest.approx(2 * s * c.hidden * 8)
    assert sixteen.params > 1.9 * top2.params


def test_gqa_reduces_qkv_flops():
    s = 2048
    gqa = decoder(load_model("llama-3-8b"))
    mha = decoder(model_with("llama-3-8b", num_key_value_heads=32))
    c = gqa.config
    diff = mha.fwd_flops_per_sample(s) - gqa.fwd_flops_per_sample(s)
    assert diff == pytest.approx(2 * s * 2 * (c.hidden - c.kv_dim) * c.hidden)


# --- activation memory: Korthikanti et al. 2022, Table 2 --------------------------------------


@pytest.fixture(scope="module")
def gpt_block() -> Layer:
    """A GPT block with dropout (GPT-2 style), standard attention: the paper's setting."""
    layer = decoder(load_model("gpt2"))
    assert layer.config.dropout and not layer.config.gated_mlp
    assert layer.config.ffn_hidden == 4 * layer.config.hidden
    return layer


S = 1024


def korthikanti(layer: Layer, s: int = S):
    return s, layer.config.hidden, layer.config.num_heads


def test_activations_without_parallelism_are_sbh_34_plus_5as_over_h(gpt_block):
    s, h, a = korthikanti(gpt_block)
    got = gpt_block.act_bytes_per_sample(s, "none", 1, False, "standard", 2)
    assert got == pytest.approx(s * h * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4])
def test_activations_with_tensor_parallelism_are_sbh_10_plus_24_over_t_plus_5as_over_ht(gpt_block, t):
    s, h, a = korthikanti(gpt_block)
    got = gpt_block.act_bytes_per_sample(s, "none", t, False, "standard", 2)
    assert got == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4])
def test_activations_with_sequence_parallelism_are_sbh_34_over_t_plus_5as_over_ht(gpt_block, t):
    s, h, a = korthikanti(gpt_block)
    got = gpt_block.act_bytes_per_sample(s, "none", t, True, "standard", 2)
    assert got == pytest.approx(s * h * (34 / t + 5 * a * s / (h * t)), rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_activations_with_selective_recompute_are_sbh_10_plus_24_over_t(gpt_block, t):
    s, h, _ = korthikanti(gpt_block)
    got = gpt_block.act_bytes_per_sample(s, "selective", t, False, "standard", 2)
    assert got == pytest.approx(s * h * (10 + 24 / t), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4])
def test_activations_with_sequence_parallel_and_selective_recompute_are_34sbh_over_t(gpt_block, t):
    s, h, _ = korthikanti(gpt_block)
    got = gpt_block.act_bytes_per_sample(s, "selective", t, True, "standard", 2)
    assert got == pytest.approx(34 * s * h / t, rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_activations_with_full_recompute_are_2sbh(gpt_block, t):
    s, h, _ = korthikanti(gpt_block)
    assert gpt_block.act_bytes_per_sample(s, "full", t, False, "standard", 2) == 2 * s * h
    assert gpt_block.act_bytes_per_sample(s, "full", t, False, "flash", 2) == 2 * s * h


@pytest.mark.parametrize("name", ["gpt2", "llama-3-8b", "mixtral-8x7b"])
@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_flash_attention_activations_grow_linearly_in_sequence_length(name, recompute):
    layer = decoder(load_model(name))
    short = layer.act_bytes_per_sample(1024, recompute, 1, False, "flash", 2)
    long = layer.act_bytes_per_sample(4096, recompute, 1, False, "flash", 2)
    assert long == pytest.approx(4 * short, rel=1e-12)


def test_standard_attention_activations_grow_faster_than_linearly(gpt_block):
    short = gpt_block.act_bytes_per_sample(512, "none", 1, False, "standard", 2)
    long = gpt_block.act_bytes_per_sample(1024, "none", 1, False, "standard", 2)
    assert long > 2 * short
    # the excess is exactly the 5as^2 score terms
    a = gpt_block.config.num_heads
    assert long - 2 * short == pytest.approx(5 * a * (1024**2 - 2 * 512**2))


def test_flash_attention_saves_less_than_standard(gpt_block):
    assert (gpt_block.act_bytes_per_sample(S, "none", 1, False, "flash", 2)
            < gpt_block.act_bytes_per_sample(S, "none", 1, False, "standard", 2))


@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_gqa_reduces_key_value_activations(attention):
    s = 2048
    gqa = decoder(load_model("llama-3-8b"))
    mha = decoder(model_with("llama-3-8b", num_key_value_heads=32))
    c = gqa.config
    diff = (mha.act_bytes_per_sample(s, "none", 1, False, attention, 2)
            - gqa.act_bytes_per_sample(s, "none", 1, False, attention, 2))
    assert diff == pytest.approx(2 * s * 2 * (c.hidden - c.kv_dim))  # K and V, 2 bytes each


def test_moe_activations_grow_with_top_k():
    top2 = decoder(load_model("mixtral-8x7b"))
    top1 = decoder(model_with("mixtral-8x7b", num_experts_per_tok=1))
    assert (top2.act_bytes_per_sample(4096, "none", 1, False, "flash", 2)
            > top1.act_bytes_per_sample(4096, "none", 1, False, "flash", 2))


def test_models_without_dropout_save_no_masks():
    llama = load_model("llama-3-8b")
    assert not llama.config.dropout
    assert llama.layers[0].act_bytes_per_sample(4096) == 0  # no embedding dropout mask


def test_layer_list_is_embedding_blocks_head():
    model = load_model("llama-3-8b")
    kinds = [layer.kind for layer in model.layers]
    assert kinds == ["embedding"] + ["decoder"] * 32 + ["head"]
    assert [layer.index for layer in model.layers] == list(range(34))


# --- layer-profile files ---------------------------------------------------------------------


def test_layer_profile_costs_scale_with_sequence_length():
    profile = {"format": "planner.profile/v1", "model": "tiny", "seq_len": 1000,
               "layers": [{"name": "embed", "kind": "embedding", "params": 100, "fwd_flops_per_sample": 0,
                           "act_bytes_per_sample": 10, "out_bytes_per_sample": 20},
                          {"name": "block", "kind": "decoder", "params": 50, "fwd_flops_per_sample": 1e6,
                           "act_bytes_per_sample": 40, "out_bytes_per_sample": 20}]}
    model = model_from_dict(profile, "tiny")
    assert model.source == "profile" and model.params == 150
    block = model.layers[1]
    assert block.fwd_flops_per_sample(2000) == 2e6
    assert block.act_bytes_per_sample(500) == 20
