"""torchtitan's deepseek_v3 671B flavour (planner.inputs.titan_flavors): DeepSeek-V3 without its MTP
module is planned under --runtime torchtitan and exported as that flavour; other shapes are refused."""

from __future__ import annotations

import json
import tomllib

import pytest

from planner.cost.runtimes.capability import model_problem
from planner.export import export_plan
from planner.inputs.hardware import cluster_from_spec
from planner.inputs.model import MODELS_DIR, load_model
from planner.inputs.titan_flavors import TITAN_DEEPSEEK_V3_FLAVORS, dsv3_dims_of
from planner.plan import Training, uniform_plan

H100_128 = cluster_from_spec({"name": "h100x128", "node_groups": [
    {"name": "h100", "gpu": "H100-SXM5-80GB", "nodes": 16, "gpus_per_node": 8}]})


def _deepseek(tmp_path, **changes):
    config = json.loads((MODELS_DIR / "deepseek-v3.json").read_text()) | {"num_nextn_predict_layers": 0} | changes
    path = tmp_path / "deepseek-v3-main.json"
    path.write_text(json.dumps(config))
    return load_model(str(path))


def test_the_671b_flavour_table_is_torchtitans():
    titan = pytest.importorskip("torchtitan.models.deepseek_v3")
    a = titan.deepseekv3_args["671B"]
    mine = TITAN_DEEPSEEK_V3_FLAVORS["671B"]
    moe = a.moe_args
    assert tuple(mine) == (a.dim, a.n_layers, a.n_heads, a.moe_inter_dim, a.inter_dim, a.n_dense_layers,
                           moe.num_experts, moe.top_k, moe.num_shared_experts * a.moe_inter_dim, a.vocab_size,
                           a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim)


def test_deepseek_v3_without_its_mtp_module_is_the_671b_flavour_and_exports_as_it(tmp_path):
    model = _deepseek(tmp_path)
    assert dsv3_dims_of(model.config) == TITAN_DEEPSEEK_V3_FLAVORS["671B"]
    assert model_problem("torchtitan", model) == ""
    plan = uniform_plan(model, H100_128, Training(256, 4096, "bf16", 1, runtime="torchtitan"), tp=8, pp=8, dp=2,
                        ep=2, zero=1)
    text = export_plan(plan, "torchtitan", lambda message: None)
    job = tomllib.loads("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    assert job["model"] == {"name": "deepseek_v3", "flavor": "671B"}
    assert job["parallelism"]["expert_parallel_degree"] == 2
    assert "deepseek_v3 flavour 671B fixes the rotary" in text


def test_torchtitan_refuses_deepseek_v3_with_its_mtp_module_and_other_shapes(tmp_path):
    assert "multi-token-prediction" in model_problem("torchtitan", load_model("deepseek-v3"))
    fewer = _deepseek(tmp_path, num_hidden_layers=32)
    assert "none of its deepseek_v3 flavours (671B)" in model_problem("torchtitan", fewer)
