"""The new model families through the CLI: listed, evaluated, planned, exported, refused
where a runtime cannot take them (issue 14, item 1)."""

from __future__ import annotations

import json

import pytest

from planner.core.errors import BadInput
from planner.inputs.model import load_model
from planner.inputs.titan_flavors import llama3_architecture

from .conftest import assert_bad_input, invoke, ok_json

NEW = ["qwen3-8b", "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "mistral-nemo-12b", "deepseek-v3", "gemma-2-9b",
       "gemma-3-12b", "phi-3-mini", "olmo-2-7b"]


def test_models_lists_every_new_family_with_its_exact_count():
    rows = {r["name"]: r for r in ok_json(invoke("models", "--json"))}
    for name in NEW:
        assert rows[name]["params"] == load_model(name).params
    assert rows["mistral-nemo-12b"]["params"] == 12_247_782_400
    assert rows["qwen3-30b-a3b"]["params"] == 30_532_122_624
    assert rows["gemma-3-12b"]["model_type"] == "gemma3"


def test_evaluate_and_plan_run_for_qwen3_8b(tmp_path):
    report = ok_json(invoke("evaluate", "--model", "qwen3-8b", "--cluster", "dgx-a100", "--global-batch", 64,
                            "--seq-len", 4096, "--tp", 4, "--pp", 2, "--dp", 4, "--micro-batch", 1, "--json"))
    assert report["fits"] and report["step_time_s"] > 0
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "qwen3-8b", "--cluster", "dgx-a100", "--global-batch", 64,
                    "--seq-len", 4096, "-o", out)
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    assert plan["model"]["params"] == 8_190_735_360
    flags = invoke("export", out, "--to", "megatron")
    assert flags.exit_code == 0 and "--qk-layernorm" in flags.stdout


def test_plan_prices_a_model_of_mixed_decoders(tmp_path):
    """Gemma 2's windowed and global layers: the search uses the blended stand-in, the plan's
    figures are evaluate's, layer by layer."""
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", "gemma-2-9b", "--cluster", "dgx-a100", "--global-batch", 64,
                    "--seq-len", 8192, "-o", out)
    assert result.exit_code == 0, result.output
    replay = ok_json(invoke("evaluate", "--plan", out, "--json"))
    assert replay["fits"]


def test_megatron_export_carries_head_dim_and_warns_of_what_it_cannot_say(tmp_path):
    out = tmp_path / "plan.json"
    assert invoke("plan", "--model", "gemma-2-9b", "--cluster", "dgx-a100", "--global-batch", 64,
                  "--seq-len", 4096, "-o", out).exit_code == 0
    result = invoke("export", out, "--to", "megatron")
    assert result.exit_code == 0
    assert "--kv-channels 256" in result.stdout  # 16 heads x 256 = 4096, not the hidden 3584
    assert "norms after attention and MLP" in result.stderr and "sliding-window layers" in result.stderr


@pytest.mark.parametrize("name", ["qwen3-8b", "mistral-nemo-12b", "olmo-2-7b"])
def test_torchtitan_does_not_take_a_new_family_for_its_llama3(name):
    assert not llama3_architecture(load_model(name).config)
    assert llama3_architecture(load_model("llama-3-8b").config)


def test_profile_refuses_a_family_it_cannot_build():
    result = invoke("profile", "--model", "deepseek-v3", "--seq-len", 64, "--micro-batch", 1)
    assert_bad_input(result, "--model", "deepseek_v3", "analytically")


def test_an_unknown_model_type_lists_the_supported_ones(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "falcon", "hidden_size": 64}))
    with pytest.raises(BadInput) as err:
        load_model(str(cfg))
    assert "qwen3_moe" in err.value.message and "deepseek_v3" in err.value.message
