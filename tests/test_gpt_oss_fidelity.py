"""Megatron-core's selective module recompute (recompute_modules) in activation memory and
recompute time, and the Megatron-Bridge GPT-OSS rows' replay settings (benchmarks/fidelity_moe.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from planner.core.dims import StageDims
from planner.core.errors import BadInput
from planner.cost.pricing import saved_activation_bytes
from planner.cost.recompute import layer_recompute_s, recompute_modules
from planner.cost.sharding import Sharding
from planner.inputs.model import load_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import fidelity_moe  # noqa: E402

SEQ, MBS = 4096, 4


def _block():
    return next(layer for layer in load_model("gpt-oss-120b").layers if layer.kind == "decoder")


def _sharding(recompute: str, tp: int = 1) -> Sharding:
    return Sharding("bf16", MBS, SEQ, "flash", StageDims(tp, tp > 1), recompute)


def test_layernorm_and_moe_act_recompute_free_the_norm_outputs_and_the_experts_activation_output():
    block = _block()
    c = block.blend[0][0].config if block.blend else block.config
    kept = saved_activation_bytes(block, _sharding("none"))
    freed = kept - saved_activation_bytes(block, _sharding("selective"), "layernorm+moe_act")
    # two s x h norm outputs, top_k s x f activation outputs, 2 bytes each, per micro-batch
    assert freed == pytest.approx(MBS * 2 * SEQ * (2 * c.hidden + c.experts_top_k * c.ffn_hidden))


def test_sequence_parallel_splits_the_freed_norm_outputs_over_tp():
    block = _block()
    c = block.blend[0][0].config if block.blend else block.config
    sh = _sharding("selective", tp=2)
    freed = saved_activation_bytes(block, _sharding("none", tp=2)) - saved_activation_bytes(block, sh, "layernorm")
    assert freed == pytest.approx(MBS * 2 * SEQ * 2 * c.hidden / 2)


def test_core_attention_recompute_alone_keeps_the_flash_activations():
    block = _block()
    assert saved_activation_bytes(block, _sharding("selective"), "core_attn") == saved_activation_bytes(
        block, _sharding("selective"), "attention")


def test_module_recompute_time_is_the_discarded_kernels_traffic_at_hbm_bandwidth():
    block, sh = _block(), _sharding("selective")
    c = block.blend[0][0].config if block.blend else block.config
    hbm = 4e12
    t = layer_recompute_s(block, sh, "layernorm+moe_act", 0.0, 1.0, [], 0.0, 0.0, 0.0, 0.0, hbm)
    traffic = 2 * 2 * 2 * SEQ * c.hidden + c.experts_top_k * 3 * 2 * SEQ * c.ffn_hidden
    assert t == pytest.approx(traffic * MBS / hbm)
    assert layer_recompute_s(block, sh, "attention", 0.0, 1.0, [], 0.0, 0.0, 0.0, 0.0, hbm) == 0.0


def test_moe_recompute_frees_every_moe_activation_but_the_layer_input():
    block = _block()
    c = block.blend[0][0].config if block.blend else block.config
    kept = saved_activation_bytes(block, _sharding("none"))
    freed = kept - saved_activation_bytes(block, _sharding("selective"), "moe")
    per_ffn = (3 if c.gated_mlp else 2) * 2 * SEQ  # SwiGLU keeps gate, up and product, 2 bytes each
    routed = c.experts_top_k * (per_ffn * c.ffn_hidden + 2 * SEQ * c.hidden) + 4 * SEQ * c.num_experts
    assert freed == pytest.approx(MBS * routed)
    # moe_act's activation output is part of it, not freed twice
    assert saved_activation_bytes(block, _sharding("selective"), "moe+moe_act") == pytest.approx(
        saved_activation_bytes(block, _sharding("selective"), "moe"))


def test_moe_recompute_repeats_the_moe_gemms_not_the_attention_ones():
    block, sh = _block(), _sharding("selective")
    part = block.blend[0][0] if block.blend else block
    gemms = [1.0] * len(part.gemms(SEQ, 1))  # one second per GEMM, in Layer.gemms' order
    attention = len(part.mixer_gemms(SEQ, 1))
    t = layer_recompute_s(part, sh, "moe", 0.0, 99.0, gemms, 0.0, 0.0, 0.0, 0.0, 4e12)
    assert attention == 2 and t == pytest.approx(len(gemms) - attention)


def test_an_unknown_recompute_module_is_bad_input():
    with pytest.raises(BadInput, match="recompute module 'mlp'"):
        recompute_modules("layernorm+mlp")


def _row(text: str) -> dict:
    return {"recompute": text, "notes": []}


def test_a_row_whose_recipe_states_priced_modules_replays_them_as_selective():
    row = _row("selective, recompute_modules=['layernorm', 'moe_act'] (src/megatron/bridge/perf_recipes/x.py)")
    assert fidelity_moe._recompute(row) == "selective"
    assert ("selective_recompute", "layernorm+moe_act") in fidelity_moe.run_settings(row)


def test_a_row_naming_an_unpriced_module_keeps_the_core_attention_rule():
    row = _row("selective, recompute_modules=['mlp', 'layernorm', 'core_attn', 'moe_act']")
    assert fidelity_moe._recompute(row) == "selective"
    assert not any(k == "selective_recompute" for k, _ in fidelity_moe.run_settings(row))
    assert fidelity_moe._recompute(_row("not stated")) == "none"


def test_every_row_replays_bf16_gradient_buffers():
    assert ("bf16_fp32_grads", False) in fidelity_moe.run_settings(_row("not stated"))
