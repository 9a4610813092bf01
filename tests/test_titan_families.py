"""torchtitan's qwen3, llama4 and gpt_oss model packages (planner.inputs.titan_flavors.TITAN_FAMILIES):
their flavour tables are torchtitan's, the catalog's models of each family are the flavours torchtitan
builds (the same parameter count on the meta device), the packages without pipelining plan one stage
under --runtime torchtitan, and the export names the flavour and says what it fixes."""

from __future__ import annotations

import json
import tomllib

import pytest

from planner.cost.runtimes.capability import capability, model_problem, violations
from planner.export import export_plan
from planner.inputs.hardware import load_cluster
from planner.inputs.model import MODELS_DIR, load_model
from planner.inputs.titan_flavors import TITAN_FAMILIES, titan_flavor
from planner.plan import Training, uniform_plan

FAMILIES = {family.name: family for family in TITAN_FAMILIES}
CATALOG = {"qwen3-8b": ("qwen3", "8B"), "qwen3-30b-a3b": ("qwen3", "30B-A3B"),
           "qwen3-235b-a22b": ("qwen3", "235B-A22B"), "llama-4-scout": ("llama4", "17bx16e_irope"),
           "gpt-oss-120b": ("gpt_oss", "120b")}


def _titan_args(name: str) -> dict:
    spec = pytest.importorskip("torchtitan.protocols.train_spec")
    return spec.get_train_spec(name).model_args


def test_the_qwen3_and_gpt_oss_flavour_tables_are_torchtitans():
    for name in ("qwen3", "gpt_oss"):
        args = _titan_args(name)
        for flavor, mine in FAMILIES[name].flavors.items():
            a = args[flavor]
            moe = getattr(a, "moe_enabled", True)  # every gpt_oss layer is MoE
            assert (mine.hidden, mine.num_layers, mine.num_heads, mine.num_kv_heads, mine.attention_head_dim,
                    mine.vocab) == (a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim, a.vocab_size), flavor
            assert mine.ffn_hidden == (a.moe_inter_dim if moe else a.hidden_dim), flavor
            assert (mine.num_experts, mine.experts_top_k) == ((a.moe_args.num_experts, a.moe_args.top_k) if moe
                                                              else (1, 1)), flavor
            assert mine.tied_embeddings == getattr(a, "enable_weight_tying", False), flavor
        if name == "gpt_oss":
            assert {args[f].sliding_window_size for f in FAMILIES[name].flavors} == {128}


def test_the_llama4_flavour_is_torchtitans_irope_scout():
    a = _titan_args("llama4")["17bx16e_irope"]
    mine = FAMILIES["llama4"].flavors["17bx16e_irope"]
    assert (mine.hidden, mine.num_layers, mine.num_heads, mine.num_kv_heads, mine.vocab) == \
        (a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.vocab_size)
    assert (mine.num_experts, mine.experts_top_k, a.moe_args.num_shared_experts) == \
        (a.moe_args.num_experts, a.moe_args.top_k, 1)
    assert (a.every_n_layers_nope, a.fixed_attn_block_size, a.interleave_moe_layer_step) == (4, 8192, 1)


@pytest.mark.parametrize("model_name", sorted(CATALOG))
def test_the_catalog_model_is_the_flavour_torchtitan_builds_to_the_parameter(model_name):
    torch = pytest.importorskip("torch")
    spec = pytest.importorskip("torchtitan.protocols.train_spec")
    model = load_model(model_name)
    name, flavor = titan_flavor(model.config, model.name)
    assert (name, flavor) == CATALOG[model_name]
    assert model_problem("torchtitan", model) == ""
    train_spec = spec.get_train_spec(name)
    with torch.device("meta"):
        built = train_spec.model_cls(train_spec.model_args[flavor])
    assert sum(p.numel() for p in built.parameters()) == model.params
    assert train_spec.pipelining_fn is not None if FAMILIES[name].pipelines else train_spec.pipelining_fn is None


def test_qwen3_and_gpt_oss_plan_one_stage_under_torchtitan():
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100-2node")
    assert not capability("torchtitan", model).pipeline
    assert capability("torchtitan", load_model("llama-4-scout")).pipeline
    assert capability("megatron", model).pipeline
    training = Training(256, 4096, "bf16", 1, runtime="torchtitan")
    piped = uniform_plan(model, cluster, training, tp=1, pp=2, dp=8, ep=8, zero=1)
    assert "torchtitan's qwen3 model (torchtitan 0.2.2) has no pipeline parallelism (the plan has 2 stages)" in \
        violations(piped, "torchtitan")
    from planner import api
    from planner.api import PlanRequest

    result = api.plan(PlanRequest(model="qwen3-30b-a3b", cluster="dgx-h100-2node", global_batch=256, seq_len=4096,
                                  runtime="torchtitan"))
    assert result.plan.pp == 1 and not violations(result.plan, "torchtitan")


def test_the_export_names_the_flavour_and_what_it_fixes():
    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("dgx-h100-2node")
    plan = uniform_plan(model, cluster, Training(256, 4096, "bf16", 1, runtime="torchtitan"), tp=1, pp=1, dp=16,
                        ep=8, zero=3)
    assert not violations(plan, "torchtitan")
    text = export_plan(plan, "torchtitan", lambda message: None)
    job = tomllib.loads("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    assert job["model"] == {"name": "qwen3", "flavor": "30B-A3B"}
    assert job["parallelism"]["expert_parallel_degree"] == 8 and job["parallelism"]["pipeline_parallel_degree"] == 1
    assert "torchtitan's qwen3 flavour 30B-A3B fixes the rotary base" in text


def test_a_qwen3_shape_torchtitan_has_no_flavour_of_is_refused_naming_the_families(tmp_path):
    config = json.loads((MODELS_DIR / "qwen3-8b.json").read_text()) | {"num_hidden_layers": 30}
    path = tmp_path / "qwen3-30-layers.json"
    path.write_text(json.dumps(config))
    problem = model_problem("torchtitan", load_model(str(path)))
    assert "none of its llama3 flavours" in problem and "qwen3 ones (0.6B, 1.7B" in problem
