"""Nemotron-H hybrids (model_type nemotron_h): Mamba-2, attention and MoE layers from the
hybrid_override_pattern, their parameters against the checkpoint, their costs, and the runtimes
that build them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from planner.core.errors import BadInput
from planner.cost.formulas import layer_time
from planner.cost.runtimes import stack_params
from planner.cost.runtimes.capability import model_problem
from planner.cost.sharding import Sharding
from planner.core.dims import StageDims
from planner.inputs.hardware import load_catalog
from planner.inputs.model import load_model, model_from_dict
from planner.plan import Training
from planner.plan.types import context_parallel_problem

from .conftest import assert_bad_input, hf_config, invoke

NANO = "nemotron-3-nano"


def kinds(model) -> list[str]:
    """Each decoder as M (Mamba-2), * (attention), - (dense MLP) or E (MoE)."""
    out = []
    for layer in model.layers:
        if layer.kind == "decoder":
            c = layer.config
            out.append({"mamba": "M", "attention": "*"}.get(c.mixer) or ("E" if c.num_experts > 1 else "-"))
    return out


def test_nano_params_equal_the_checkpoint_tensor_count():
    # llama.cpp's element count of the GGUF conversion's tensors (published_params.yaml)
    assert load_model(NANO).params == 31_577_940_288


def test_nano_layers_follow_the_hybrid_pattern():
    model = load_model(NANO)
    pattern = hf_config(NANO)["hybrid_override_pattern"]
    assert "".join(kinds(model)) == pattern
    assert (pattern.count("M"), pattern.count("E"), pattern.count("*")) == (23, 23, 6)


def test_a_mamba_layer_counts_its_projections_convolution_and_per_head_parameters():
    layer = next(la for la in load_model(NANO).layers if la.kind == "decoder" and la.config.mixer == "mamba")
    h, inner, groups, state, heads = 2688, 64 * 64, 8, 128, 64
    conv = inner + 2 * groups * state
    in_proj = h * (inner + conv + heads)
    # in_proj, conv1d weight and bias, dt_bias / A_log / D, the gated norm, out_proj, the layer's norm
    assert layer.params == in_proj + conv * 4 + conv + 3 * heads + inner + inner * h + h
    assert layer.expert_params == 0


def test_a_hybrid_layer_has_one_residual_branch_and_one_tp_collective_each_way():
    model = load_model(NANO)
    attention = next(la for la in model.layers if la.kind == "decoder" and la.config.mixer == "attention")
    # the same attention with an MLP beside it: a two-branch block
    both = replace(attention, config=replace(attention.config, ffn_hidden=1856))
    gpu = load_catalog()["H100-SXM5-80GB"]
    params = stack_params(gpu, "megatron")
    sh = Sharding("bf16", 1, 4096, "flash", StageDims(2), "none")
    one, two = (layer_time(la, gpu, sh, gpu.intra_node, params) for la in (attention, both))
    assert attention.config.sublayers == 1 and both.config.sublayers == 2
    assert two.tp_comm_fwd_s == pytest.approx(2 * one.tp_comm_fwd_s) and one.tp_comm_fwd_s > 0


def test_mamba_layers_have_no_attention_flops_and_their_gemms_split_over_tp():
    model = load_model(NANO)
    mamba = next(la for la in model.layers if la.kind == "decoder" and la.config.mixer == "mamba")
    assert mamba.attention_flops_per_sample(4096, tp=1, causal_skip=False) == 0
    assert mamba.scan_flops_per_sample(4096, tp=2) == pytest.approx(mamba.scan_flops_per_sample(4096, tp=1) / 2)
    one, two = mamba.gemms(4096, tp=1), mamba.gemms(4096, tp=2)
    assert [g.n * g.k for g in two] == [g.n * g.k / 2 for g in one]
    moe = next(la for la in model.layers if la.kind == "decoder" and la.config.num_experts > 1)
    assert moe.attention_flops_per_sample(4096, tp=1, causal_skip=False) == 0 and moe.config.q_dim == 0


@pytest.mark.parametrize("change, key", [
    ({"hybrid_override_pattern": "M*E"}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": "X" * 52}, "hybrid_override_pattern"),
    ({"moe_latent_size": 2688}, "moe_latent_size"),  # not below hidden
    ({"mtp_num_layers": 2}, "mtp_num_layers"),
    ({"num_nextn_predict_layers": 1}, "mtp_hybrid_override_pattern"),  # modules without their layers
    ({"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "**E"}, "mtp_hybrid_override_pattern"),
    ({"n_groups": 7}, "n_groups"),
])
def test_bad_nemotron_h_configs_name_the_key(change, key):
    with pytest.raises(BadInput) as info:
        model_from_dict(hf_config(NANO) | change, "bad")
    assert key in str(info.value)


def test_tp_must_split_the_mamba_groups():
    config = load_model(NANO).config
    assert config.tp_problem(2) == ""
    narrow = replace(config, num_kv_heads=32, mamba=replace(config.mamba, groups=1))
    assert narrow.tp_heads == 1 and "Mamba heads in 1 groups" in narrow.tp_problem(2)


def test_context_parallelism_over_mamba_layers_is_refused():
    training = Training(64, 8192, "bf16", 1)
    assert "Mamba" in context_parallel_problem(load_model(NANO), training, 1, 2, "ring")
    assert context_parallel_problem(load_model(NANO), training, 1, 1, "ring") == ""


@pytest.mark.parametrize("runtime", ["deepspeed", "torchtitan", "fsdp1", "any"])
def test_runtimes_without_mamba_layers_refuse_the_model(runtime):
    assert "Mamba-2" in model_problem(runtime, load_model(NANO))
    assert model_problem("megatron", load_model(NANO)) == ""


def test_plan_refuses_a_hybrid_under_a_runtime_without_mamba(tmp_path):
    result = invoke("plan", "--model", NANO, "--cluster", "dgx-h100-2node", "--global-batch", "64",
                    "--seq-len", "4096", "--runtime", "deepspeed")
    assert_bad_input(result, "Mamba-2")


def test_nano_plans_under_megatron_and_prices_every_layer_as_it_is(tmp_path):
    out = tmp_path / "plan.json"
    result = invoke("plan", "--model", NANO, "--cluster", "dgx-h100-2node", "--global-batch", "64",
                    "--seq-len", "4096", "--runtime", "megatron", "--json", "-o", out)
    assert result.exit_code == 0, result.stderr
    plan = json.loads(out.read_text())
    assert all(stage.get("cp", 1) == 1 for stage in plan["stages"])
    again = invoke("evaluate", "--plan", out, "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["step_time_s"] == pytest.approx(plan["predicted"]["step_time_s"])


def test_megatron_export_writes_the_hybrid_stack_flags(tmp_path):
    out = tmp_path / "plan.json"
    assert invoke("plan", "--model", NANO, "--cluster", "dgx-h100-2node", "--global-batch", "64", "--seq-len",
                  "4096", "--runtime", "megatron", "-o", out).exit_code == 0
    result = invoke("export", out, "--to", "megatron")
    assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
    text = result.stdout
    config = hf_config(NANO)
    for flag in ("--is-hybrid-model", f"--hybrid-override-pattern '{config['hybrid_override_pattern']}'",
                 "--spec megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec",
                 f"--mamba-num-heads {config['mamba_num_heads']}", f"--mamba-num-groups {config['n_groups']}",
                 f"--mamba-state-dim {config['ssm_state_size']}", "--squared-relu", "--position-embedding-type none"):
        assert flag in text, flag
    assert "pretrain_mamba.py" in text and "--pipeline-model-parallel-layout" not in text
    assert "--num-layers-per-virtual-pipeline-stage" not in text and "--swiglu" not in text


def test_the_search_gives_every_pipeline_stage_as_many_layers_and_one_chunk(tmp_path):
    # megatron-core's MambaStack: num_layers / pp layers per rank, no virtual pipeline stages
    out = tmp_path / "plan.json"
    assert invoke("plan", "--model", NANO, "--cluster", "dgx-h100-2node", "--global-batch", "64", "--seq-len",
                  "4096", "--runtime", "megatron", "--pp", "4", "-o", out).exit_code == 0
    plan = json.loads(out.read_text())
    blocks = [sum(1 for i in range(*s["layers"]) if 0 < i < 53) for s in plan["stages"]]
    assert blocks == [13, 13, 13, 13] and plan["training"].get("virtual_stages", 1) == 1


def test_a_dense_hybrid_pattern_builds_squared_relu_mlps_and_no_experts():
    # Nemotron-H 8B's shape (Megatron-Bridge NemotronHModelProvider8B): Mamba-2 and attention layers
    # between dense MLP layers; NemotronHConfig's MoE defaults in the file are unused without E layers
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    data = hf_config(NANO) | {"hybrid_override_pattern": pattern, "num_hidden_layers": len(pattern),
                              "hidden_size": 4096, "num_key_value_heads": 8, "intermediate_size": 21504,
                              "mamba_num_heads": 128, "n_routed_experts": 8}
    model = model_from_dict(data, "nemotron-h-8b-like")
    assert kinds(model) == list(pattern)
    mlp = next(layer for layer in model.layers if layer.kind == "decoder" and not layer.config.mixer)
    assert mlp.params == 2 * 4096 * 21504 + 4096  # up and down (squared ReLU: no gate), the layer's norm
    assert model.config.num_experts == 1 and sum(layer.expert_params for layer in model.layers) == 0


def test_no_plan_for_a_hybrid_does_not_suggest_a_runtime_that_cannot_build_it():
    # 72 GPUs of one NVL72 rack: no tp x pp x dp of Megatron's hybrid stack uses them all (52 layers, 2 kv heads)
    result = invoke("plan", "--model", NANO, "--cluster", "gb200-nvl72", "--global-batch", "512", "--seq-len", "8192")
    assert result.exit_code == 1, result.stderr
    assert "no feasible plan" in result.stderr and "--runtime any" not in result.stderr


SUPER = "nemotron-3-super"


def test_super_params_with_its_mtp_module_equal_the_checkpoint_element_count():
    # Megatron-Bridge's verification card: the export reproduces the checkpoint's 123,611,033,088
    # elements (published_params.yaml total_with_mtp; params there is the main model's)
    model = load_model(SUPER)
    assert model.params == 123_611_033_088
    assert (model.params - model.mtp_params) == 120_668_707_840
    pattern = hf_config(SUPER)["hybrid_override_pattern"]
    assert "".join(kinds(model)) == pattern and (pattern.count("M"), pattern.count("E"), pattern.count("*")) == (40, 40, 8)


def test_lightning_is_nano_with_an_mtp_module_of_the_checkpoints_count():
    # Megatron-Bridge's verification card: 32,913,266,240 parameters (published_params.yaml total_with_mtp)
    lightning, nano = load_model("nemotron-3.5-lightning"), load_model(NANO)
    assert lightning.params == 32_913_266_240 and lightning.params - lightning.mtp_params == nano.params
    (module,) = lightning.layers[-1].trail
    assert module.config.mixer == "attention" and module.config.num_experts == 128 and module.config.moe_latent == 0


def test_latent_experts_work_and_dispatch_at_the_latent_width():
    model = load_model(SUPER)
    moe = next(la for la in model.layers if la.kind == "decoder" and la.config.num_experts > 1)
    c = moe.config
    assert (c.moe_latent, c.expert_width) == (1024, 1024)
    experts = [g for g in moe.gemms(8192, tp=1, ep=8) if g.expert]
    assert [(g.n, g.k) for g in experts] == [(2688, 1024), (1024, 2688)]  # relu2: up and down, no gate
    # down and up projections beside the router: h x latent each, whole on every TP rank
    dense = [(g.n, g.k) for g in moe.gemms(8192, tp=2, ep=8) if not g.expert]
    assert (1024, 4096) in dense and (4096, 1024) in dense
    # 512 experts of 2 x 1024 x 2688, the projections, the router and its bias, the shared expert, the norm
    assert moe.params == 512 * 2 * 1024 * 2688 + 2 * 4096 * 1024 + 4096 * 512 + 512 + 2 * 4096 * 5376 + 4096
    assert moe.expert_params == 512 * 2 * 1024 * 2688


def test_the_dispatch_of_latent_experts_moves_the_latent_width_not_hidden():
    from planner.cost.formulas import DEFAULT_PARAMS
    from planner.cost.moe import AllToAllGroup, moe_alltoall_s
    from planner.inputs.hardware import Link

    moe = next(la for la in load_model(SUPER).layers if la.kind == "decoder" and la.config.num_experts > 1)
    wide = replace(moe, config=replace(moe.config, moe_latent=0))
    group = AllToAllGroup(8, 8, Link(bandwidth_bytes_per_s=450e9, latency_s=0.0), Link(bandwidth_bytes_per_s=50e9,
                                                                                     latency_s=0.0))
    latent_s = moe_alltoall_s(moe, 1, 8192, StageDims(1, ep=8), 2, group, DEFAULT_PARAMS)[0]
    hidden_s = moe_alltoall_s(wide, 1, 8192, StageDims(1, ep=8), 2, group, DEFAULT_PARAMS)[0]
    assert latent_s == pytest.approx(hidden_s * 1024 / 4096)


def test_super_mtp_module_is_one_attention_and_latent_moe_block():
    model = load_model(SUPER)
    (module,) = model.layers[-1].trail
    c = module.config
    assert c.mtp_module and c.mixer == "attention" and c.mamba is None and c.num_experts == 512
    assert c.block_norms == 2 and c.moe_latent == 1024  # a norm per layer of its "*E"


def test_megatron_export_writes_latent_experts_and_the_hybrid_mtp_flags():
    from planner.export import export_plan
    from planner.inputs.hardware import load_cluster
    from planner.plan import uniform_plan

    plan = uniform_plan(load_model(SUPER), load_cluster("dgx-h100-2node"), Training(16, 4096, "bf16", 1), tp=1,
                        pp=1, dp=16, ep=16, zero=1)
    text = export_plan(plan, "megatron", lambda message: None)
    for flag in ("--moe-latent-size 1024", "--mtp-num-layers 1", "--mtp-hybrid-override-pattern '*E'",
                 "--mtp-spec megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec"):
        assert flag in text, flag
