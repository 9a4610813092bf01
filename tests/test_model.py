"""Hand-checked model figures: parameter counts, forward FLOPs, activation bytes."""

from __future__ import annotations

import json

import pytest
import yaml

from planner.api.model_info import active_params
from planner.cost.formulas import DEFAULT_PARAMS
from planner.core.errors import BadInput
from planner.inputs.model import SUPPORTED_TYPES, Layer, catalog_names, load_model, model_from_dict

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
    published = PUBLISHED[name]["params"]  # the main model's: MTP modules are counted apart
    model = load_model(name)
    assert model.params - model.mtp_params == pytest.approx(published, rel=0.01)


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


# --- model families (issue 14): exact counts, head_dim, per-layer shapes ---------------------

EXACT = [name for name in catalog_names() if not PUBLISHED[name].get("rounded")]


def test_every_catalog_model_but_gpt3_has_an_exact_published_count():
    assert sorted(set(catalog_names()) - set(EXACT)) == ["gpt3-175b"]


@pytest.mark.parametrize("name", EXACT)
def test_catalog_model_parameter_count_equals_published_exactly(name):
    model = load_model(name)
    assert model.params - model.mtp_params == PUBLISHED[name]["params"]


def test_every_supported_model_type_has_a_catalog_model_but_the_text_parts_and_kimi_k2():
    # gemma3_text and llama4_text are the text_config of gemma3 and llama4 checkpoints
    types = {load_model(name).raw["model_type"] for name in catalog_names()}
    assert types == set(SUPPORTED_TYPES) - {"gemma3_text", "llama4_text", "kimi_k2"}


def test_mistral_nemo_honours_head_dim_128_not_hidden_over_heads():
    nemo = load_model("mistral-nemo-12b")
    c = nemo.config
    assert (c.hidden, c.num_heads, c.head_dim, c.q_dim) == (5120, 32, 128, 4096)
    assert nemo.params == 12_247_782_400
    no_head_dim = model_from_dict({k: v for k, v in hf_config("mistral-nemo-12b").items() if k != "head_dim"}, "n")
    assert no_head_dim.config.head_dim == 160  # HF's default when absent: hidden / heads
    assert no_head_dim.params == pytest.approx(12.77e9, rel=1e-3)  # the figure issue 14 reported


def tiny_llama(**changes) -> dict:
    return {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
            "num_key_value_heads": 2, "intermediate_size": 2048, "vocab_size": 1000} | changes


def test_head_dim_changes_projection_params_and_attention_flops_as_hand_computed():
    h, f, s, heads, kv, d = 1024, 2048, 512, 8, 2, 64
    layer = decoder(model_from_dict(tiny_llama(head_dim=d), "t"))
    q, k = heads * d, kv * d  # 512 and 128: q is half of hidden
    assert layer.params == h * (q + 2 * k) + q * h + 3 * h * f + 2 * h
    gemm = 2 * s * (h * (q + 2 * k) + q * h + 3 * h * f)
    attention = 2 * s * s * heads * (d + d)  # QK^T and PV over every key
    assert layer.fwd_flops_per_sample(s) == gemm + attention
    assert layer.attention_flops_per_sample(s, tp=2, causal_skip=True) == attention / 4
    default = decoder(model_from_dict(tiny_llama(), "t"))  # head_dim 128 = 1024 / 8
    assert default.fwd_flops_per_sample(s) - layer.fwd_flops_per_sample(s) == pytest.approx(
        2 * s * (2 * h * (h - q) + 2 * h * (256 - k)) + 2 * s * s * heads * 2 * (128 - d))


def test_qwen3_qk_norms_add_two_head_dim_vectors_per_block():
    qwen3 = decoder(load_model("qwen3-8b"))
    as_llama = decoder(model_with("qwen3-8b", model_type="llama", attention_bias=None))
    assert qwen3.params - as_llama.params == 2 * 128


def test_olmo2_qk_norms_span_the_whole_q_and_k_projections():
    olmo = decoder(load_model("olmo-2-7b"))
    as_llama = decoder(model_with("olmo-2-7b", model_type="llama", attention_bias=None))
    assert olmo.params - as_llama.params == 4096 + 4096  # q_norm over 32 x 128, k_norm over 32 x 128


def test_gemma_blocks_have_four_norms_and_a_tied_head():
    gemma = load_model("gemma-2-9b")
    c = gemma.config
    assert c.block_norms == 4 and c.tied_embeddings and c.head_dim == 256 and c.q_dim == 4096 != c.hidden
    assert gemma.layers[-1].params == c.hidden  # the final norm; the matrix is the embedding's


def test_gemma3_reads_text_config_with_the_hf_defaults_google_leaves_out():
    gemma = load_model("gemma-3-12b")
    c = gemma.config
    assert (c.vocab, c.head_dim, c.qk_norm) == (262_208, 256, "head")  # Gemma3TextConfig defaults
    windows = c.layer_windows
    assert len(windows) == 48 and windows[5] == windows[11] == 0 and set(windows[:5]) == {1024}
    text_only = model_from_dict(hf_config("gemma-3-12b")["text_config"], "g")
    assert text_only.params == gemma.params


def siglip_and_projector_params(cfg: dict) -> int:
    """The vision tower (SiglipVisionModel without head) and Gemma3MultiModalProjector."""
    v = cfg["vision_config"]
    w, f, patch = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    patches = (v["image_size"] // patch) ** 2
    embed = 3 * patch * patch * w + w + patches * w  # patch conv with bias, position table
    layer = 4 * (w * w + w) + (w * f + f) + (f * w + w) + 2 * 2 * w  # attention, MLP, 2 LayerNorms
    tower = embed + v["num_hidden_layers"] * layer + 2 * w  # post LayerNorm
    return tower + w * cfg["text_config"]["hidden_size"] + w  # projector matrix and its RMSNorm


def test_gemma3_language_model_plus_vision_tower_is_the_published_checkpoint_total():
    total = PUBLISHED["gemma-3-12b"]["published_total"]
    assert load_model("gemma-3-12b").params + siglip_and_projector_params(hf_config("gemma-3-12b")) == total


def test_deepseek_v3_main_model_plus_mtp_module_is_the_published_weight_count():
    model = load_model("deepseek-v3")
    c = model.config
    assert c.mtp_layers == 1 and model.mtp_params > 0
    router_biases = (58 + 1) * 256  # fp32, counted by the Hub with the fp8 scales, not with the weights
    # the checkpoint's MTP module (DeepSeek-V3 report, sec 2.2) also stores its own copies of the
    # embedding and of the head, which training shares with the main model
    copies = 2 * c.vocab * c.hidden
    assert model.params - router_biases + copies == PUBLISHED["deepseek-v3"]["weight_elements_with_mtp"]


def test_deepseek_v3s_mtp_module_is_one_moe_block_with_its_norms_and_projection():
    model = load_model("deepseek-v3")
    c = model.config
    moe_block = max(layer.params for layer in model.layers if layer.kind == "decoder")
    (module,) = model.layers[-1].trail
    assert module.params == moe_block + 2 * c.hidden * c.hidden + 3 * c.hidden
    assert module.expert_params == model.layers[-2].expert_params
    # the head predicts twice (the next token, and the MTP module's), and holds the module's weights
    s = 4096
    assert model.layers[-1].gemms(s, 1)[0].count == 2
    assert model.layers[-1].fwd_flops_per_sample(s) == pytest.approx(
        2 * 2 * s * c.vocab * c.hidden + module.fwd_flops_per_sample(s))


def test_deepseek_v3_first_three_layers_are_dense_and_the_rest_moe_with_mla():
    model = load_model("deepseek-v3")
    blocks = [layer for layer in model.layers if layer.kind == "decoder"]
    assert [b.config.num_experts for b in blocks[:4]] == [1, 1, 1, 256]
    dense, moe = blocks[0], blocks[3]
    assert dense.config.ffn_hidden == 18432 and moe.config.ffn_hidden == 2048
    assert moe.config.shared_expert_ffn == 2048 and moe.config.router_bias
    # MLA: q 1536-rank latent, kv 512-rank latent + 64 rope dims, 128 heads of 192 (qk) / 128 (v)
    attn = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168)
    assert dense.params == attn + 3 * 7168 * 18432 + 2 * 7168
    s = 1024
    assert moe.attention_flops_per_sample(s, 1, False) == 2 * s * s * 128 * (192 + 128)


def test_kimi_k2_is_deepseek_v3s_architecture_at_its_model_cards_size(tmp_path):
    """Kimi K2's config.json names model_type kimi_k2 over DeepseekV3ForCausalLM; its model card
    (github.com/MoonshotAI/Kimi-K2, README, "Model Summary"): 1T total and 32B activated parameters,
    61 layers with 1 dense, hidden 7168, expert hidden 2048, 64 heads, 384 experts, 8 selected, 1
    shared, MLA. No exact published count is reachable here, so it is not a catalog model."""
    config = json.loads((MODELS_DIR / "deepseek-v3.json").read_text())
    config.update({"model_type": "kimi_k2", "num_attention_heads": 64, "num_key_value_heads": 64,
                   "n_routed_experts": 384, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                   "routed_scaling_factor": 2.827, "vocab_size": 163840, "num_nextn_predict_layers": 0})
    kimi_path, deepseek_path = tmp_path / "kimi-k2.json", tmp_path / "as-deepseek-v3.json"
    kimi_path.write_text(json.dumps(config))
    deepseek_path.write_text(json.dumps(config | {"model_type": "deepseek_v3"}))
    kimi = load_model(str(kimi_path))
    assert kimi.params == load_model(str(deepseek_path)).params
    blocks = [layer for layer in kimi.layers if layer.kind == "decoder"]
    assert [b.config.num_experts for b in blocks[:2]] == [1, 384] and len(blocks) == 61
    assert 1.0e12 <= kimi.params < 1.05e12 and 32e9 <= active_params(kimi) < 33e9  # "1T", "32B"


def test_qwen_moe_dense_layers_follow_mlp_only_layers_and_decoder_sparse_step():
    c = model_with("qwen1.5-moe-a2.7b", mlp_only_layers=[0], decoder_sparse_step=2).config
    assert c.dense_layers == tuple([0] + list(range(0, 24, 2))[1:])  # 0 listed; even i: (i+1) % 2 != 0
    qwen = load_model("qwen1.5-moe-a2.7b")
    block = decoder(qwen)
    shared = 3 * 2048 * 5632 + 2048  # the shared expert and its sigmoid gate
    assert block.config.shared_expert_ffn == 5632 and block.config.shared_expert_gate
    assert block.params == 4 * 2048 * 2048 + 3 * 2048 + 60 * 3 * 2048 * 1408 + 2048 * 60 + shared + 2 * 2048


@pytest.mark.parametrize("s", [1024, 4096, 8192])
def test_a_sliding_window_caps_the_keys_each_query_sees(s):
    model = load_model("gemma-2-9b")
    windowed, full = model.layers[1], model.layers[2]  # Gemma 2: even layers slide over 4096
    assert (windowed.config.window, full.config.window) == (4096, 0)
    w = min(s, 4096)
    per_pair = 2 * 16 * (256 + 256)
    assert windowed.attention_flops_per_sample(s, 1, True) == (s * w - w * w / 2) * per_pair
    assert full.attention_flops_per_sample(s, 1, True) == s * s / 2 * per_pair


def test_search_stand_in_prices_mean_time_and_max_memory_of_differing_decoders():
    from planner.cost.formulas import layer_time
    from planner.core.dims import StageDims
    from planner.inputs.hardware import load_catalog
    from planner.cost.sharding import Sharding

    model = load_model("gemma-2-9b")
    stand_in = model.decoder_stand_in()
    windowed, full = model.layers[1], model.layers[2]
    assert dict((part.config.window, n) for part, n in stand_in.blend) == {4096: 21, 0: 21}
    gpu = load_catalog()["H100-SXM5-80GB"]
    link = gpu.intra_node
    s = 8192
    args = (gpu, Sharding("bf16", 1, s, "flash", StageDims(), "none"), link, DEFAULT_PARAMS)
    mean = (layer_time(windowed, *args).fwd_s + layer_time(full, *args).fwd_s) / 2
    assert layer_time(stand_in, *args).fwd_s == pytest.approx(mean, rel=1e-12)
    assert stand_in.act_bytes_per_sample(s) == max(windowed.act_bytes_per_sample(s), full.act_bytes_per_sample(s))
    deepseek = load_model("deepseek-v3").decoder_stand_in()
    assert deepseek.weight_params == max(layer.weight_params for layer in load_model("deepseek-v3").layers[1:-1])
    qwen = load_model("qwen3-8b")
    assert qwen.decoder_stand_in() is qwen.layers[1]  # identical decoders: the first, as before


@pytest.mark.parametrize("name,drop,field", [
    ("deepseek-v3", "kv_lora_rank", "kv_lora_rank"),
    ("qwen3-30b-a3b", "moe_intermediate_size", "moe_intermediate_size"),
    ("qwen3-8b", "intermediate_size", "intermediate_size"),
    ("gemma-3-12b", "text_config", "text_config"),
    ("phi-3-mini", "hidden_size", "hidden_size"),
])
def test_a_missing_field_the_family_needs_is_bad_input_naming_it(name, drop, field):
    cfg = {k: v for k, v in hf_config(name).items() if k != drop}
    with pytest.raises(BadInput) as err:
        model_from_dict(cfg, name)
    assert err.value.field == field


def test_a_gemma3_text_field_missing_is_named_with_its_path():
    cfg = hf_config("gemma-3-12b")
    del cfg["text_config"]["hidden_size"]
    with pytest.raises(BadInput) as err:
        model_from_dict(cfg, "g")
    assert err.value.field == "text_config.hidden_size"


def test_documented_hf_defaults_fill_qwen3_head_dim_and_gemma2_tie():
    qwen3 = model_from_dict({k: v for k, v in hf_config("qwen3-8b").items() if k != "head_dim"}, "q")
    assert qwen3.config.head_dim == 128  # Qwen3Config(head_dim=128)
    assert load_model("gemma-2-9b").config.tied_embeddings  # Gemma2Config(tie_word_embeddings=True)


def test_an_attention_bias_the_family_does_not_have_is_refused_not_ignored():
    with pytest.raises(BadInput) as err:
        model_with("qwen3-8b", attention_bias=True)
    assert err.value.field == "attention_bias"
