"""GPT-OSS (model_type gpt_oss): parameter counts against the checkpoints' tensor shapes and
the published figures, the sliding/full layer alternation, and the attention FLOPs it implies."""

from __future__ import annotations

import pytest

from planner.api.model_info import active_params
from planner.core.errors import BadInput
from planner.inputs.model import config_from_hf, load_model, model_from_dict

from .conftest import hf_config

# the gpt-oss model card (OpenAI, arXiv 2508.10925, Table 1): total and active parameters
CARD = {"gpt-oss-120b": (116.83e9, 5.13e9), "gpt-oss-20b": (20.91e9, 3.61e9)}


def gpt_oss_20b() -> dict:
    """openai/gpt-oss-20b's config.json: gpt-oss-120b's but 24 layers of 32 experts."""
    data = hf_config("gpt-oss-120b") | {"num_hidden_layers": 24, "num_local_experts": 32}
    data["layer_types"] = data["layer_types"][:24]
    return data


def checkpoint_shapes(layers: int, experts: int, top_k: int | None = None) -> int:
    """The sum of the tensors transformers' modeling_gpt_oss.py builds (GptOssForCausalLM), the
    experts all (top_k None) or top_k of them: embed_tokens and lm_head (V x h), per layer q/k/v/o
    with biases, sinks (one per head), the router (E x h + E), experts' gate_up_proj (h x 2f + 2f)
    and down_proj (f x h + h), two RMSNorms; the final norm."""
    h, heads, kv, d, f, vocab = 2880, 64, 8, 64, 2880, 201088
    attention = h * (heads + 2 * kv) * d + (heads + 2 * kv) * d + heads * d * h + h + heads
    expert = h * 2 * f + 2 * f + f * h + h
    block = attention + (top_k or experts) * expert + experts * h + experts + 2 * h
    return 2 * vocab * h + layers * block + h


def test_gpt_oss_120b_params_equal_checkpoint_shapes_and_model_card():
    model = load_model("gpt-oss-120b")
    assert model.params == checkpoint_shapes(36, 128) == 116_829_156_672
    assert model.params == pytest.approx(CARD["gpt-oss-120b"][0], abs=0.005e9)


def test_gpt_oss_20b_params_equal_checkpoint_shapes_and_model_card():
    model = model_from_dict(gpt_oss_20b(), "gpt-oss-20b")
    assert model.params == checkpoint_shapes(24, 32) == 20_914_757_184
    assert model.params == pytest.approx(CARD["gpt-oss-20b"][0], abs=0.005e9)


@pytest.mark.parametrize("name, layers, experts", [("gpt-oss-120b", 36, 128), ("gpt-oss-20b", 24, 32)])
def test_gpt_oss_active_params_are_four_experts_and_the_card_leaves_out_the_embedding(name, layers, experts):
    model = load_model(name) if name == "gpt-oss-120b" else model_from_dict(gpt_oss_20b(), name)
    active = active_params(model)
    assert active == checkpoint_shapes(layers, experts, top_k=4)
    # the card's active count leaves out the input embedding table (its MLP + attention +
    # unembedding); the planner counts every parameter a token passes through, as for Mixtral
    embedding = model.config.vocab * model.config.hidden
    assert active - embedding == pytest.approx(CARD[name][1], abs=0.005e9)


def test_gpt_oss_layers_alternate_sliding_128_and_full_attention():
    decoders = [layer for layer in load_model("gpt-oss-120b").layers if layer.kind == "decoder"]
    assert [layer.config.window for layer in decoders] == [128, 0] * 18
    assert {layer.expert_params for layer in decoders} == {128 * (2880 * 5760 + 5760 + 2880 * 2880 + 2880)}


def test_gpt_oss_sliding_layer_attention_flops_are_s_times_window_not_half_s_squared():
    decoders = [layer for layer in load_model("gpt-oss-120b").layers if layer.kind == "decoder"]
    sliding, full = decoders[0], decoders[1]
    s, w, per_pair = 4096, 128, 2.0 * 64 * (64 + 64)
    assert sliding.attention_flops_per_sample(s, tp=1, causal_skip=True) == per_pair * (s * w - w * w / 2)
    assert full.attention_flops_per_sample(s, tp=1, causal_skip=True) == per_pair * s * s / 2
    assert sliding.fwd_flops_per_sample(s) < full.fwd_flops_per_sample(s)
    assert sliding.params == full.params


def test_gpt_oss_config_from_hf_reads_experts_biases_sinks_and_gpt_oss_config_defaults():
    data = {k: v for k, v in hf_config("gpt-oss-120b").items()
            if k not in ("layer_types", "head_dim", "num_key_value_heads", "sliding_window")}
    config = config_from_hf(data, "gpt-oss", "config.json")
    assert (config.model_type, config.num_experts, config.experts_top_k) == ("gpt_oss", 128, 4)
    assert config.linear_bias and config.router_bias and config.attention_sinks and not config.tied_embeddings
    # GptOssConfig: head_dim 64, 8 kv heads, sliding_window 128, even layers sliding
    assert (config.head_dim, config.num_kv_heads) == (64, 8)
    assert config.layer_windows == (128, 0) * 18
    assert config == config_from_hf(hf_config("gpt-oss-120b"), "gpt-oss", "config.json")


def test_gpt_oss_top_k_above_the_experts_is_bad_input():
    with pytest.raises(BadInput, match="num_experts_per_tok"):
        config_from_hf(hf_config("gpt-oss-120b") | {"num_experts_per_tok": 129}, "g", "config.json")
