"""Llama 4 (model_type llama4): the language model's parameters against the checkpoint, its
chunked and global attention layers, and its MoE and dense layers."""

from __future__ import annotations

import pytest

from planner.api.model_info import active_params
from planner.core.errors import BadInput
from planner.inputs.model import load_model, model_from_dict

from .conftest import hf_config

SCOUT = "llama-4-scout"
# the Hugging Face safetensors total of meta-llama/Llama-4-Scout-17B-16E-Instruct (vision included)
SCOUT_CHECKPOINT = 108_641_793_536


def vision_params(vision: dict, text_hidden: int) -> int:
    """The vision encoder, adapter and projector transformers' modeling_llama4.py builds: per layer
    q, k, v, o with biases, fc1 and fc2 with biases, two LayerNorms with biases; the class and
    position embeddings, the patch embedding, the pre and post LayerNorms; the adapter's two
    bias-free linears and the projector to the text width."""
    h, f, layers = vision["hidden_size"], vision["intermediate_size"], vision["num_hidden_layers"]
    patches = (vision["image_size"] // vision["patch_size"]) ** 2 + 1
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 4 * h
    adapter_in = int(h / vision["pixel_shuffle_ratio"] ** 2)
    out = vision["vision_output_dim"]
    return (layers * layer + h + patches * h + vision["num_channels"] * vision["patch_size"] ** 2 * h + 4 * h
            + adapter_in * vision["projector_input_dim"] + vision["projector_input_dim"] * out + out * text_hidden)


def test_scout_language_model_is_the_checkpoint_less_its_vision_encoder():
    config = hf_config(SCOUT)
    model = load_model(SCOUT)
    assert model.params == SCOUT_CHECKPOINT - vision_params(config["vision_config"], 5120) == 107_769_861_120


def test_scout_activates_seventeen_billion_parameters_per_token():
    assert active_params(load_model(SCOUT)) == pytest.approx(17e9, rel=0.02)  # the model card's 17B active


def test_three_of_four_layers_attend_in_chunks_and_the_nope_layers_to_everything():
    model = load_model(SCOUT)
    blocks = [layer for layer in model.layers if layer.kind == "decoder"]
    assert [b.config.attention_chunk for b in blocks[:4]] == [8192, 8192, 8192, 0]
    chunked, full = blocks[0], blocks[3]
    # at 32,768 tokens a chunked layer computes 4 blocks of 8192^2 / 2 pairs: a quarter of the full causal
    ratio = chunked.attention_flops_per_sample(32768, 1, True) / full.attention_flops_per_sample(32768, 1, True)
    assert ratio == pytest.approx(0.25)
    assert chunked.attention_flops_per_sample(4096, 1, True) == full.attention_flops_per_sample(4096, 1, True)


def test_interleaved_moe_layers_alternate_with_dense_ones():
    data = hf_config(SCOUT)
    text = data["text_config"] | {"interleave_moe_layer_step": 2, "num_local_experts": 128}
    del text["moe_layers"]
    model = model_from_dict(data | {"text_config": text}, "maverick-like")
    blocks = [layer for layer in model.layers if layer.kind == "decoder"]
    assert [b.config.num_experts for b in blocks[:4]] == [1, 128, 1, 128]
    assert blocks[0].config.ffn_hidden == 16384 and blocks[1].config.ffn_hidden == 8192
    assert blocks[1].config.shared_expert_ffn == 8192 and blocks[0].config.shared_expert_ffn == 0


@pytest.mark.parametrize("change", [{"no_rope_layers": [1, 0]}, {"no_rope_layers": [2] * 48}])
def test_a_bad_rope_layer_list_names_the_key(change):
    data = hf_config(SCOUT)
    with pytest.raises(BadInput, match="text_config.no_rope_layers"):
        model_from_dict(data | {"text_config": data["text_config"] | change}, "bad")


def test_chunked_layers_are_priced_at_full_causal_cost_but_counted_chunked_in_model_flops():
    from planner.core.dims import StageDims
    from planner.cost.flops import layer_model_flops_per_sample
    from planner.cost.formulas import attention_s
    from planner.cost.runtimes import stack_params
    from planner.cost.sharding import Sharding
    from planner.inputs.hardware import load_catalog

    blocks = [layer for layer in load_model(SCOUT).layers if layer.kind == "decoder"]
    chunked, full = blocks[0], blocks[3]
    gpu = load_catalog()["H100-SXM5-80GB"]
    sh = Sharding("bf16", 1, 32768, "flash", StageDims(1), "none")
    params = stack_params(gpu, "megatron")
    assert attention_s(chunked, gpu, sh, params) == attention_s(full, gpu, sh, params)
    assert layer_model_flops_per_sample(chunked, 32768) < layer_model_flops_per_sample(full, 32768)
