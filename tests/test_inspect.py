"""`planner inspect MODEL` (what the planner reads from a config, without planning), active
parameters of a mixture of experts in `planner models`, and the catalog tables at 80 columns."""

from __future__ import annotations

import json

import pytest

from planner.inputs.model import catalog_names, load_model

from .conftest import assert_bad_input, hf_config, invoke, ok_json


# Published active (per-token) parameter counts of the catalog's mixtures of experts.
ACTIVE_PUBLISHED = {
    "mixtral-8x7b": 12.9e9,  # Mistral AI, "Mixtral of experts" (2023-12-11): 12.9B of 46.7B per token
    "qwen3-30b-a3b": 3.3e9,  # Qwen/Qwen3-30B-A3B model card: 30.5B total, 3.3B activated
    "qwen1.5-moe-a2.7b": 2.7e9,  # Qwen/Qwen1.5-MoE-A2.7B model card: 2.7B activated
    "deepseek-v3": 37e9,  # deepseek-ai/DeepSeek-V3 README: 671B total, 37B activated per token
}


def test_models_json_gives_active_params_for_moe_and_params_for_dense():
    rows = {r["name"]: r for r in ok_json(invoke("models", "--json"))}
    for name, published in ACTIVE_PUBLISHED.items():
        # the published figures count the main model: less what a token passes through in the MTP modules
        mtp = sum(part.params - part.expert_params + part.expert_params // part.config.num_experts
                  * part.config.experts_top_k for part in load_model(name).layers[-1].trail)
        assert name != "deepseek-v3" or mtp > 0
        assert rows[name]["active_params"] - mtp == pytest.approx(published, rel=0.03), name
        assert rows[name]["active_params"] < rows[name]["params"]
    assert rows["llama-3-8b"]["active_params"] == rows["llama-3-8b"]["params"]
    assert rows["mixtral-8x7b"]["experts_top_k"] == 2


@pytest.mark.parametrize("command", ["gpus", "models"])
def test_catalog_tables_fit_80_columns_and_cut_nothing(command):
    result = invoke(command, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, result.stdout
    assert "…" not in result.stdout
    if command == "models":
        for name in catalog_names():
            assert any(line.split()[:1] == [name] for line in lines), name
        mixtral = next(line for line in lines if line.startswith(" mixtral-8x7b") or line.startswith("mixtral-8x7b"))
        assert "12.88" in mixtral and "8/2" in mixtral, mixtral


def test_inspect_reports_dimensions_params_and_the_keys_it_ignores(tmp_path):
    config = hf_config("llama-3-8b") | {"_name_or_path": "my-llama", "my_custom_flag": True,
                                         "hidden_act": "gelu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    info = ok_json(invoke("inspect", path, "--json"))
    model = load_model(str(path))
    assert info["name"] == "my-llama" and info["file"] == str(path) and info["model_type"] == "llama"
    assert info["layers"] == 32 and info["hidden"] == 4096 and info["kv_heads"] == 8
    assert info["params"] == info["active_params"] == model.params
    assert {"hidden_size", "num_hidden_layers", "vocab_size", "rope_theta", "_name_or_path"} <= set(info["read_keys"])
    assert {"my_custom_flag", "hidden_act", "torch_dtype"} <= set(info["ignored_keys"])
    assert set(info["read_keys"]) | set(info["ignored_keys"]) == set(config)
    assert not set(info["read_keys"]) & set(info["ignored_keys"])


def test_inspect_a_key_is_read_only_where_the_family_reads_it():
    """qwen3-moe reads sliding_window only with use_sliding_window; mistral always."""
    qwen = ok_json(invoke("inspect", "qwen3-30b-a3b", "--json"))
    assert "sliding_window" in qwen["ignored_keys"] and "use_sliding_window" in qwen["read_keys"]
    assert "sliding_window" in ok_json(invoke("inspect", "mistral-7b", "--json"))["read_keys"]


def test_inspect_moe_and_nested_text_config():
    mixtral = ok_json(invoke("inspect", "mixtral-8x7b", "--json"))
    assert mixtral["experts"] == 8 and mixtral["experts_top_k"] == 2 and mixtral["moe_layers"] == 32
    assert mixtral["active_params"] == pytest.approx(12.9e9, rel=0.01)
    assert {"num_local_experts", "num_experts_per_tok"} <= set(mixtral["read_keys"])
    gemma = ok_json(invoke("inspect", "gemma-3-12b", "--json"))
    assert "text_config.hidden_size" in gemma["read_keys"] and "vision_config" in gemma["ignored_keys"]


def test_inspect_human_view_fits_80_columns():
    result = invoke("inspect", "deepseek-v3", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "active params (per token)" in result.stdout and "keys ignored" in result.stdout
    assert "num_nextn_predict_layers" in result.stdout  # the MTP module is not priced


def test_inspect_missing_model_is_bad_input(tmp_path):
    assert_bad_input(invoke("inspect", tmp_path / "nope.json"), "model not found")


def test_inspect_counts_a_hybrids_mamba_layers_and_llama4s_chunked_ones():
    nano = ok_json(invoke("inspect", "nemotron-3-nano", "--json"))
    scout = ok_json(invoke("inspect", "llama-4-scout", "--json"))
    assert (nano["mamba_layers"], nano["chunked_attention_layers"]) == (23, 0)
    assert (scout["mamba_layers"], scout["chunked_attention_layers"]) == (0, 36)
    assert "hybrid_override_pattern" in nano["read_keys"] and "text_config.no_rope_layers" in scout["read_keys"]
