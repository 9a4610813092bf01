"""Multi-token-prediction modules (DeepSeek-V3 report, sec 2.2; ModelConfig.mtp_layers): priced as
decoders beside the head (Layer.trail, cost.pricing.layer_price), held on the head's stage, trained
only by the runtimes that build them, exported to Megatron-LM as --mtp-num-layers."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from planner.core.dims import StageDims
from planner.cost.formulas import DEFAULT_PARAMS
from planner.cost.pricing import Sharding, layer_price
from planner.cost.runtimes import RUNTIMES
from planner.cost.runtimes.capability import model_problem
from planner.export import export_plan
from planner.inputs.hardware import load_catalog, load_cluster
from planner.inputs.model import MODELS_DIR, load_model
from planner.plan import Training, uniform_plan

from .conftest import assert_bad_input, invoke

DEEPSEEK = load_model("deepseek-v3")
H100 = load_catalog()["H100-SXM5-80GB"]
NVLINK = load_cluster("dgx-h100-2node").groups[0].intra_node


def _params(runtime: str = "megatron"):
    return RUNTIMES[runtime].pricing.params(DEFAULT_PARAMS)


def _without_mtp(tmp_path):
    config = json.loads((MODELS_DIR / "deepseek-v3.json").read_text()) | {"num_nextn_predict_layers": 0}
    path = tmp_path / "deepseek-v3-main.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_head_with_an_mtp_module_costs_its_own_price_plus_the_modules_as_a_decoder(recompute):
    head = DEEPSEEK.layers[-1]
    (module,) = head.trail
    sh = Sharding("bf16", 1, 4096, "flash", StageDims(4, True), recompute)
    own = replace(head, trail=(), params=head.params - module.params,
                  weight_params=head.weight_params - module.weight_params, expert_params=0)
    whole, alone, block = (layer_price(x, sh, H100, NVLINK, _params()) for x in (head, own, module))
    for figure in ("fwd_s", "bwd_s", "compute_s", "tp_comm_s", "time_s", "act_bytes", "weight_params"):
        assert getattr(whole, figure) == pytest.approx(getattr(alone, figure) + getattr(block, figure)), figure
    assert block.compute_s > 0 and alone.compute_s > 0
    assert whole.expert_params == module.expert_params == DEEPSEEK.layers[-2].expert_params


def test_the_head_predicts_once_more_per_module_and_its_stage_holds_the_module_and_an_embedding_copy(tmp_path):
    main = load_model(str(_without_mtp(tmp_path)))
    head, main_head = DEEPSEEK.layers[-1], main.layers[-1]
    assert main.config.mtp_layers == 0 and main_head.trail == ()
    c = DEEPSEEK.config
    assert head.gemms(4096, 1)[0].count == 2 and main_head.gemms(4096, 1)[0].count == 1
    assert head.act_bytes_per_sample(4096) == 2 * main_head.act_bytes_per_sample(4096)
    assert head.weight_params == main_head.weight_params + head.trail[0].weight_params + c.vocab * c.hidden
    assert DEEPSEEK.params == main.params + DEEPSEEK.mtp_params


def test_runtimes_without_mtp_refuse_the_model_and_name_the_key(tmp_path):
    assert model_problem("megatron", DEEPSEEK) == "" and model_problem("any", DEEPSEEK) == ""
    for runtime in ("deepspeed", "fsdp1", "megatron-2021"):
        assert "num_nextn_predict_layers" in model_problem(runtime, DEEPSEEK), runtime
        assert model_problem(runtime, load_model(str(_without_mtp(tmp_path)))) == "", runtime
    result = invoke("plan", "--model", "deepseek-v3", "--cluster", "dgx-h100-2node", "--global-batch", "16",
                    "--seq-len", "4096", "--runtime", "deepspeed")
    assert_bad_input(result, "multi-token-prediction")


def test_megatron_export_carries_the_mtp_modules(tmp_path):
    cluster = load_cluster("dgx-h100-2node")
    for model, expected in ((DEEPSEEK, ["--mtp-num-layers", "1"]), (load_model(str(_without_mtp(tmp_path))), [])):
        plan = uniform_plan(model, cluster, Training(16, 4096, "bf16", 1), tp=2, pp=1, dp=8, ep=8, zero=1)
        words = export_plan(plan, "megatron", lambda message: None).split()
        found = [w for i, w in enumerate(words) if w == "--mtp-num-layers" or words[i - 1] == "--mtp-num-layers"]
        assert found == expected


def _with(tmp_path, name: str, **keys):
    config = json.loads((MODELS_DIR / "deepseek-v3.json").read_text()) | keys
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return load_model(str(path))


def test_a_repeated_mtp_module_holds_its_weights_once_and_runs_at_every_depth(tmp_path):
    """Megatron-core's mtp_use_repeated_layer (Nemotron 3 Super's recipes: mtp_num_layers 2): one module
    run twice: its parameters, weights and experts once, its compute and activations twice."""
    two = _with(tmp_path, "two", num_nextn_predict_layers=2)
    repeated = _with(tmp_path, "repeated", num_nextn_predict_layers=2, mtp_use_repeated_layer=True)
    assert repeated.config.mtp_repeated and not two.config.mtp_repeated
    assert repeated.params == DEEPSEEK.params and repeated.mtp_params == DEEPSEEK.mtp_params
    assert two.params == DEEPSEEK.params + DEEPSEEK.mtp_params
    head, twice = repeated.layers[-1], two.layers[-1]
    assert head.weight_params == DEEPSEEK.layers[-1].weight_params
    assert head.expert_params == DEEPSEEK.layers[-1].expert_params
    assert head.fwd_flops_per_sample(4096) == pytest.approx(twice.fwd_flops_per_sample(4096), rel=1e-12)
    assert head.act_bytes_per_sample(4096) == twice.act_bytes_per_sample(4096)
    plan = uniform_plan(repeated, load_cluster("dgx-h100-2node"), Training(16, 4096, "bf16", 1), tp=2, pp=1, dp=8,
                        ep=8, zero=1)
    words = export_plan(plan, "megatron", lambda message: None).split()
    assert words[words.index("--mtp-num-layers") + 1] == "2" and "--mtp-use-repeated-layer" in words
    assert "--mtp-use-repeated-layer" not in export_plan(replace(plan, model=two), "megatron", lambda message: None)


def test_a_config_keeping_its_mtp_module_in_bf16_prices_it_so_and_the_megatron_export_says_it_cannot(tmp_path):
    """keep_mtp_spec_in_bf16 (Megatron-Bridge's Nemotron 3 recipes): the module's linears in bf16 under fp8;
    Megatron-LM has no such flag, which its export says."""
    kept = _with(tmp_path, "kept", keep_mtp_spec_in_bf16=True)
    assert kept.config.mtp_bf16 and kept.layers[-1].trail[0].config.high_precision
    assert not DEEPSEEK.layers[-1].trail[0].config.high_precision
    sh = Sharding("fp8", 1, 4096, "flash", StageDims(8, True), "none")
    fp8, bf16 = (layer_price(m.layers[-1].trail[0], sh, H100, NVLINK, _params()) for m in (DEEPSEEK, kept))
    assert bf16.compute_s > fp8.compute_s
    warnings = []
    plan = uniform_plan(kept, load_cluster("dgx-h100-2node"), Training(16, 4096, "fp8", 1), tp=2, pp=1, dp=8, ep=8,
                        zero=1)
    export_plan(plan, "megatron", warnings.append)
    assert any("keep_mtp_spec_in_bf16" in w and "Megatron-LM has no flag" in w for w in warnings)


def test_a_config_with_a_bad_mtp_count_is_bad_input(tmp_path):
    config = json.loads((MODELS_DIR / "deepseek-v3.json").read_text()) | {"num_nextn_predict_layers": -1}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    result = invoke("inspect", str(path))
    assert_bad_input(result, "num_nextn_predict_layers")


def test_the_megatron_layout_places_the_mtp_module_before_the_loss_as_megatron_core_validates_it():
    from planner.export.megatron import megatron_layout

    from .conftest import require

    plan = uniform_plan(DEEPSEEK, load_cluster("dgx-h100-2node"), Training(16, 4096, "bf16", 1), tp=2, pp=2, dp=4,
                        ep=4, zero=1)
    layout = megatron_layout(plan)
    assert layout.endswith("mL")
    layouts = require("megatron.core.transformer.pipeline_parallel_layer_layout", "PLANNER_REQUIRE_INTEGRATION")
    # megatron-core rejects a layout whose MTP modules are not there ("Number of mtp layers in layout ...")
    layouts.PipelineParallelLayerLayout(layout, 2).validate_layer_layout(61, DEEPSEEK.config.mtp_layers)
    with pytest.raises(AssertionError, match="mtp"):
        layouts.PipelineParallelLayerLayout(layout.replace("m", ""), 2).validate_layer_layout(61, 1)
